"""Finding codes of export-diff: torch eager vs ONNX Runtime (and a Triton deployment), layer by layer.

The texts (severity, title, explanation, fix) are in ``export_diff.toml`` beside this module; adding a code is
one entry there plus one constant line here.
"""
from gapcheck.codes import catalog

_codes = catalog(__name__)

LAYER_DIVERGENCE = _codes["layer_divergence"]
OUTPUT_MISMATCH = _codes["output_mismatch"]
DEPLOYMENT_MISMATCH = _codes["deployment_mismatch"]
INPUT_DEPENDENT_GAP = _codes["input_dependent_gap"]
FP16_OVERFLOW = _codes["fp16_overflow"]
BATCH_SIZE_BAKED = _codes["batch_size_baked"]
BATCH_INCONSISTENCY = _codes["batch_inconsistency"]
TRAINING_MODE = _codes["training_mode"]
SERVER_LAYER_DIVERGENCE = _codes["server_layer_divergence"]
ONNX_MODEL_MISMATCH = _codes["onnx_model_mismatch"]
EXPORT_FALLBACK = _codes["export_fallback"]
EXPORT_WARNING = _codes["export_warning"]
CHECKPOINT_KEYS = _codes["checkpoint_keys"]
CHECKPOINT_WEIGHTS = _codes["checkpoint_weights"]
NONFINITE_REFERENCE = _codes["nonfinite_reference"]
DEPLOYMENT_NOT_COMPARED = _codes["deployment_not_compared"]
ATTRIBUTION_FALLBACK = _codes["attribution_fallback"]
UNOBSERVABLE_MODULES = _codes["unobservable_modules"]
OUTPUTS_NOT_IN_FILE = _codes["outputs_not_in_file"]
FP16_FILE = _codes["fp16_file"]
SERVED_OUTPUT_NAMES = _codes["served_output_names"]
PRECISION_NOT_THE_FILES = _codes["precision_not_the_files"]
FP16_DEPLOYMENT = _codes["fp16_deployment"]
