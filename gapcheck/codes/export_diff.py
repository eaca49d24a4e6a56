"""Finding codes of export-diff: torch eager vs ONNX Runtime (and a Triton deployment), layer by layer."""
from gapcheck.codes import define
from gapcheck.findings import Severity

F = "export-diff"

LAYER_DIVERGENCE = define(
    "layer_divergence", Severity.GAP, F, "A module's ONNX output differs from torch beyond tolerance",
    """The first module (in execution order) whose ONNX Runtime output differs from torch's by more than its
    tolerance budget. gapcheck re-runs that module's ONNX subgraph on torch's own inputs: 'local' means the module's
    own ONNX computes something else (a custom op's symbolic, a traced branch, a changed weight); 'inherited' means
    its inputs already differed and the named source value computed them.""",
    "Open the source line given in the report; for a custom op fix its symbolic, for a traced branch export with the "
    "dynamo exporter or torch.cond, for a changed weight re-export from the released checkpoint.")
OUTPUT_MISMATCH = define(
    "output_mismatch", Severity.GAP, F, "A model output differs between backends",
    """A final model output (under the model's own name for it) differs between torch and a backend beyond tolerance.""",
    "Read the layer table for the first divergent module; the output mismatch is its consequence.")
DEPLOYMENT_MISMATCH = define(
    "deployment_mismatch", Severity.GAP, F, "Only the deployed model differs",
    """ONNX Runtime here matches torch, but the deployment (e.g. Triton) does not: the server serves another version,
    another precision, or preprocesses on the server.""",
    "Run `gapcheck triton-audit` against the endpoint and compare its config and served version with the export.")
INPUT_DEPENDENT_GAP = define(
    "input_dependent_gap", Severity.GAP, F, "A gap that appears on some inputs only",
    """Some samples agree and others do not: the signature of Python control flow on tensor values that the tracer
    baked in as one branch.""",
    "Replace the data-dependent `if` with torch.where/torch.cond, or export with the dynamo exporter.")
FP16_OVERFLOW = define(
    "fp16_overflow", Severity.GAP, F, "A module overflows or loses precision in FP16",
    """With --precision fp16 a module produces values beyond FP16's range (|x| > 65504), Inf or NaN, or loses more
    precision than FP16 tolerances allow.""",
    "Keep that module in FP32 (mixed precision), rescale its input, or clamp before the overflow.")
BATCH_SIZE_BAKED = define(
    "batch_size_baked", Severity.GAP, F, "The exported graph fixes the batch size",
    """The runtime refuses a batch other than the export's, or the exporter turned the batch axis into a constant
    (a Python loop over the batch, a reshape with a literal batch).""",
    "Export with a dynamic batch axis and remove Python loops/literal shapes over the batch dimension.")
BATCH_INCONSISTENCY = define(
    "batch_inconsistency", Severity.GAP, F, "A sample's result depends on its batch",
    """Row i of a batched run differs from sample i run alone: batch statistics leaking across samples (BatchNorm in
    train mode, a reduction over the batch axis).""",
    "Put the model in eval mode before export and make reductions per sample.")
TRAINING_MODE = define(
    "training_mode", Severity.WARNING, F, "The model was handed over in training mode",
    """The model's BatchNorm/Dropout modules behave differently in train mode; gapcheck compares in eval mode and
    says so (a warning). With --keep-train-mode the comparison is in train mode, and then it is a gap.""",
    "Call model.eval() before export, and export from the same mode you deploy.")
SERVER_LAYER_DIVERGENCE = define(
    "server_layer_divergence", Severity.GAP, F, "The served model diverges layer by layer",
    """A temporary twin of the served model, with the mapped values as extra outputs, shows the first module that
    diverges on the server's own runtime.""",
    "Compare the server's model file and config with the exported ONNX at that module.")
ONNX_MODEL_MISMATCH = define(
    "onnx_model_mismatch", Severity.GAP, F, "The ONNX file belongs to another model",
    """The --onnx file's parameters, inputs or outputs do not fit the checkpoint's model, so differences cannot be
    attributed to modules. The message shows the evidence.""",
    "Export the ONNX file from this checkpoint, or pass the checkpoint it was exported from.")
EXPORT_FALLBACK = define(
    "export_fallback", Severity.WARNING, F, "The dynamo exporter failed; TorchScript was used",
    """torch.onnx.export(dynamo=True) failed and the TorchScript exporter was used instead; the tracer bakes Python
    control flow and integer shapes in, which the rest of the run checks.""",
    "Read the condensed dynamo error; fix the unsupported construct or export with --exporter torchscript on purpose.")
EXPORT_WARNING = define(
    "export_warning", Severity.WARNING, F, "The exporter warned",
    """The exporter printed warnings (e.g. a tracer warning about converting a tensor to a Python value).""",
    "Read the warning: a TracerWarning usually means a value was baked into the graph.")
CHECKPOINT_KEYS = define(
    "checkpoint_keys", Severity.WARNING, F, "Checkpoint keys do not match the model",
    """With --non-strict, the checkpoint's missing or unexpected keys are listed by name, never silently dropped.""",
    "Load the checkpoint that belongs to the model, or fix the key prefixes.")
NONFINITE_REFERENCE = define(
    "nonfinite_reference", Severity.WARNING, F, "torch itself outputs NaN or Inf",
    """The reference (torch eager) produces non-finite values on the inputs; comparisons there are exact matches of
    NaN/Inf only.""",
    "Check the inputs' range and the model's numerics before comparing backends.")
DEPLOYMENT_NOT_COMPARED = define(
    "deployment_not_compared", Severity.WARNING, F, "The deployment was not compared",
    """The deployment audit found a problem that blocks inference (e.g. a missing input or a model that is not
    ready), so its outputs were not compared.""",
    "Fix the triton_* findings of the audit first; then the deployment is compared.")
ATTRIBUTION_FALLBACK = define(
    "attribution_fallback", Severity.INFO, F, "The ONNX graph names no modules; attributed by what can be proved",
    """The ONNX file carries no scope names (onnxsim, onnxoptimizer or a tool that strips node names removed them), so
    modules are attributed only where it can be proved: a module whose weight tensor is in the graph with the same
    values owns the node that reads it. Other modules are compared through the model's outputs only.""",
    "Compare the ONNX file as exported (before simplification) to see every module, or accept output-level results.")
UNOBSERVABLE_MODULES = define(
    "unobservable_modules", Severity.INFO, F, "Some modules cannot be observed",
    """TorchScript modules (a torch.jit archive, or a ScriptModule inside the model) take no forward hooks, so their
    outputs are not captured: they are compared through the model's outputs and the modules around them.""",
    "For a module-by-module comparison, pass the Python model (a factory or a state dict) instead of the archive.")
OUTPUTS_NOT_IN_FILE = define(
    "outputs_not_in_file", Severity.INFO, F, "The ONNX file has fewer outputs than the model",
    """The --onnx file keeps only some of the model's outputs, under the model's own names (Optimum saves a BertModel
    with last_hidden_state and without pooler_output). The outputs the file has are compared; the others are listed.""",
    "Nothing to fix if the deployment does not need them; export them too to compare them.")
FP16_FILE = define(
    "fp16_file", Severity.INFO, F, "The ONNX file computes in FP16: compared with FP16 budgets",
    """Most of the --onnx file's floating-point weights are FP16 (a deployment's converted file, usually FP32 inputs and
    outputs around an FP16 body), so the run compares in FP16 as --precision fp16 would: FP32 budgets would call its
    rounding a gap at the first module.""",
    "Nothing to fix; pass --precision fp16 to say so explicitly, or compare the FP32 export for FP32 budgets.")
SERVED_OUTPUT_NAMES = define(
    "served_output_names", Severity.WARNING, F, "The deployment names its outputs its own way",
    """The served model's outputs have other names than the graph's, but the same count and, in order, the same
    data types and shapes: they are paired by position (or by --triton-output-map) and their values compared. A
    served output that really holds another tensor then fails on its values (deployment_mismatch).""",
    "Nothing to fix if the pairing shown is right; else give --triton-output-map graph_name=served_name,...")
