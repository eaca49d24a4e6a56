"""Finding codes of the nightly job: golden bundles against deployed endpoints, judged against their history.

The texts (severity, title, explanation, fix) are in ``nightly.toml`` beside this module; adding a code is
one entry there plus one constant line here.
"""
from gapcheck.codes import catalog

_codes = catalog(__name__)

GOLDEN_MISMATCH = _codes["golden_mismatch"]
OUTPUT_MISSING = _codes["golden_output_missing"]
OUTPUT_TYPE = _codes["golden_output_type"]
ENDPOINT_UNREACHABLE = _codes["endpoint_unreachable"]
MODEL_UNKNOWN = _codes["endpoint_model_unknown"]
DRIFTING = _codes["output_drifting"]
DEPLOYMENT_CHANGED = _codes["deployment_changed"]
RECOVERED = _codes["endpoint_recovered"]
AUDIT_LIMITED = _codes["audit_limited"]
WEBHOOK_FAILED = _codes["webhook_failed"]
REFERENCE_DISAGREES = _codes["golden_reference_disagrees"]
INSENSITIVE = _codes["golden_insensitive"]
TEXT_SAMPLES_CHANGED = _codes["golden_text_samples_changed"]
REQUEST_REJECTED = _codes["endpoint_rejected_request"]
MALFORMED_ANSWER = _codes["endpoint_malformed_answer"]
INFINITE_REFERENCE = _codes["golden_reference_infinite"]
