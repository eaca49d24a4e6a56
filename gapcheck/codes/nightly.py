"""Finding codes of the nightly job: golden bundles against deployed endpoints, judged against their history."""
from gapcheck.codes import define
from gapcheck.findings import Severity

F = "nightly"

GOLDEN_MISMATCH = define(
    "golden_mismatch", Severity.GAP, F, "An endpoint's output differs from the golden reference",
    """A deployed endpoint answered the golden inputs with outputs that differ from the released checkpoint's
    (torch) outputs beyond the bundle's tolerances (assert_close semantics: |served - golden| <= atol + rtol * |golden|).
    The evidence names the worst samples and their errors.""",
    "Compare the served model (version, config, model file) with the one the bundle was recorded from; "
    "`gapcheck export-diff --triton-url ...` localizes the layer.")
OUTPUT_MISSING = define(
    "golden_output_missing", Severity.GAP, F, "An endpoint does not return a golden output",
    """The golden bundle has an output the endpoint does not serve, or the endpoint returned an array of
    another shape than the golden reference.""",
    "Serve the model the bundle was recorded from, or record a new bundle for the new model.")
OUTPUT_TYPE = define(
    "golden_output_type", Severity.GAP, F, "An endpoint's output has another dtype or shape than the golden one",
    """The endpoint answered a golden output with another shape (per sample or batch size) or another kind of
    dtype (integers for floats, strings for numbers): no value can be compared, every sample fails. Another
    width of the same kind (float16 served for a float32 reference) is a warning and the values are compared.""",
    "Check the served model's config (dims, data_type) and its output post-processing against the model the "
    "bundle was recorded from; `gapcheck triton-audit` compares the served config with the ONNX export.")
ENDPOINT_UNREACHABLE = define(
    "endpoint_unreachable", Severity.GAP, F, "An endpoint could not be checked",
    """The endpoint was down, timed out, was not ready, or failed a request; it is recorded as 'unreachable',
    never as a pass, and the nightly run exits 3.""",
    "Check the server's health and logs; the message carries the last error (header values redacted).")
DRIFTING = define(
    "output_drifting", Severity.WARNING, F, "An output's error is creeping up over nights",
    """The recorded max error (as a fraction of the tolerance) is still under the tolerance, but a one-sided CUSUM
    over the nights since the last deployment change has crossed its threshold: the error grows steadily.""",
    "Look for what changes slowly on the server (a retrained model rolled out gradually, a driver or runtime "
    "update, input pipeline changes) before the error crosses the tolerance.")
DEPLOYMENT_CHANGED = define(
    "deployment_changed", Severity.WARNING, F, "The served version or model config changed since the last run",
    """The served model version or the SHA256 of the served model config differs from the last recorded run of
    this endpoint; both values are in the evidence.""",
    "Confirm the change was intended; if the model changed on purpose, record a new golden bundle.")
RECOVERED = define(
    "endpoint_recovered", Severity.INFO, F, "An endpoint passes again",
    """The endpoint passes tonight after a recorded gap or outage.""",
    "Nothing to do; the history keeps the failing nights.")
AUDIT_LIMITED = define(
    "audit_limited", Severity.INFO, F, "The deployment audit could not read everything",
    """Part of the deployment audit (repository index, model config) was refused by the server, typically because
    those APIs are restricted; the golden comparison still ran.""",
    "Give the nightly job the header the restricted APIs need, or accept the narrower audit.")
WEBHOOK_FAILED = define(
    "webhook_failed", Severity.WARNING, F, "An alert could not be delivered",
    """POSTing the alert to the webhook failed after the bounded retries. It is recorded in the history and
    printed; it never changes the exit code.""",
    "Check the webhook URL and the network path from the job to it.")
REFERENCE_DISAGREES = define(
    "golden_reference_disagrees", Severity.WARNING, F, "ONNX Runtime disagreed with torch when the bundle was recorded",
    """At record time the exported ONNX model, run in ONNX Runtime, differed from torch beyond the tolerances;
    a served ONNX model will then fail the golden check although it serves exactly the export.""",
    "Run `gapcheck export-diff` on the checkpoint to find the layer, or loosen the bundle's tolerances.")
INSENSITIVE = define(
    "golden_insensitive", Severity.WARNING, F, "The golden outputs hardly depend on the golden inputs",
    """At record time every golden sample's output agreed with the first sample's within the bundle's tolerance:
    a deployment that feeds the model wrong inputs (channels swapped, another normalization, even a constant)
    would pass the nightly check. Typical of a model with untrained weights or inputs that are all alike.""",
    "Record from the released checkpoint with real, varied inputs (--samples / --inputs), or tighten the tolerances.")
TEXT_SAMPLES_CHANGED = define(
    "golden_text_samples_changed", Severity.WARNING, F, "The text samples given to nightly are not the recorded ones",
    """A text golden bundle (golden record --text-samples FILE --tokenizer ...) keeps the SHA256 of the text samples
    it was recorded from. nightly --text-samples named a file (or folder) whose SHA256 differs: today's tokenizer
    cannot be judged on other strings, so it is not — a difference is not blamed on the tokenizer. Both digests are
    in the evidence. (Bundles recorded before the digest was kept have none: their check runs as before.)""",
    "Point --text-samples (or [nightly] text_samples) at the file the bundle was recorded from (the manifest names "
    "it), or record a new bundle from the new file.")
