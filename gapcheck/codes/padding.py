"""Finding codes of the padding-invariance check (export-diff --pad-check)."""
from gapcheck.codes import define
from gapcheck.findings import Severity

F = "export-diff"

PADDING_DEPENDENCE = define(
    "padding_dependence", Severity.GAP, F, "Outputs change with padding",
    """The same sequences padded to another length or on the other side (mask set accordingly), or batched with
    sequences of other lengths the way a dynamic batcher pads them, give different outputs at the valid positions or
    different pooled outputs. The report names the padding, the positions, the max error and the first module where
    the difference appears (torch, layer by layer) — e.g. a mean pooled over padding, positions shifted by left
    padding, or a mask dropped on the way to deployment.""",
    "Mask every reduction over the sequence (masked mean/max pooling), derive position ids from the mask, and pad on "
    "the side the model was trained with; make sure the deployment passes the mask.")
MASK_IGNORED = define(
    "mask_ignored", Severity.GAP, F, "The attention mask has no effect",
    """With padding present, outputs are identical with the real mask and with an all-ones mask, although padding
    changes them: the model (or its export) ignores the mask it is given.""",
    "Apply the mask in attention (additive -inf on padded keys) and in pooling; check that the export keeps the mask "
    "input connected (an unused graph input is a sign it was dropped).")
PADDING_NOT_CHECKED = define(
    "padding_not_checked", Severity.INFO, F, "A padding variant could not run on a backend",
    """A backend refused a padded length (e.g. the ONNX graph fixes the sequence length at export), so that variant
    was not compared there; the report says which and why.""",
    "Export with a dynamic sequence axis to check other lengths on that backend.")
