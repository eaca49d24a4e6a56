"""Finding codes of triton-audit: a Triton deployment's config and metadata against the ONNX graph."""
from gapcheck.codes import define
from gapcheck.findings import Severity

F = "triton"

DTYPE_MISMATCH = define("triton_dtype_mismatch", Severity.GAP, F, "Deployed dtype differs from the ONNX graph",
    "The served config declares another datatype (e.g. TYPE_FP16) than the exported graph's input or output.",
    "Fix data_type in config.pbtxt, or export the model in the precision you serve.")
SHAPE_MISMATCH = define("triton_shape_mismatch", Severity.GAP, F, "Deployed dims differ from the ONNX graph",
    "The served config declares dims that do not fit the exported graph's shape.",
    "Fix dims in config.pbtxt (without the batch axis when max_batch_size > 0).")
NAME_MISMATCH = define("triton_name_mismatch", Severity.GAP, F, "Deployed input/output names differ",
    "An input or output of the ONNX graph is missing from the served model, or the server has one the graph lacks.",
    "Use the graph's tensor names in config.pbtxt and in the client.")
BATCH_MISMATCH = define("triton_batch_mismatch", Severity.GAP, F, "max_batch_size does not fit the batch axis",
    "max_batch_size > 0 needs a dynamic first axis in the graph; max_batch_size = 0 with a batch axis in dims "
    "changes what the client must send.",
    "Export with a dynamic batch axis, or set max_batch_size to 0 and declare the full shape.")
VERSION_STALE = define("triton_version_stale", Severity.GAP, F, "The server serves another version",
    "The version asked for is not the one served (a stale or pinned version policy).",
    "Load the intended version or fix version_policy.")
NOT_READY = define("triton_not_ready", Severity.GAP, F, "The model is not ready",
    "The server is up but the model is not ready (failed to load, still loading or unloaded).",
    "Read the server log for the model's load error.")
SERVER_NOT_READY = define("triton_server_not_ready", Severity.WARNING, F, "The server is not ready",
    "The server answers but reports it is not ready to serve.",
    "Check the server's health endpoints and its log.")
PLATFORM = define("triton_platform", Severity.WARNING, F, "The served platform is not ONNX Runtime",
    "The model is served by another backend (Python, TensorRT, ...) than the ONNX graph compared here; "
    "differences may come from that backend.",
    "Compare the backend's outputs layer by layer (--triton-layers) or serve the ONNX graph.")
API_RESTRICTED = define("triton_api_restricted", Severity.INFO, F, "A server API is restricted: some checks were skipped",
    "The server restricts an API (tritonserver --http-restricted-api / --grpc-restricted-protocol, PyTriton's default) "
    "and the request did not carry its access header, so what that API would show was not checked: e.g. served "
    "versions are not listed when the model-repository API is restricted, max_batch_size and the version policy are "
    "not read when model-config is. Everything the allowed APIs show (metadata, readiness, inference) is still "
    "checked; a restriction is never reported as a failure of the server.",
    "Pass the access header the server expects (e.g. --triton-header triton-access-token:TOKEN) to check the rest, "
    "or accept the narrower audit.")
