"""Finding codes of triton-audit: a Triton deployment's config and metadata against the ONNX graph.

The texts (severity, title, explanation, fix) are in ``triton.toml`` beside this module; adding a code is
one entry there plus one constant line here.
"""
from gapcheck.codes import catalog

_codes = catalog(__name__)

DTYPE_MISMATCH = _codes["triton_dtype_mismatch"]
SHAPE_MISMATCH = _codes["triton_shape_mismatch"]
NAME_MISMATCH = _codes["triton_name_mismatch"]
BATCH_MISMATCH = _codes["triton_batch_mismatch"]
VERSION_STALE = _codes["triton_version_stale"]
NOT_READY = _codes["triton_not_ready"]
SERVER_NOT_READY = _codes["triton_server_not_ready"]
PLATFORM = _codes["triton_platform"]
API_RESTRICTED = _codes["triton_api_restricted"]
SERVED_NAMES = _codes["triton_served_names"]
