"""THE list of root-cause diagnoses, in the order they run (structure first, the catch-all last).

A new root cause is one new module with a class that follows
:class:`~gapcheck.preprocess.diagnoses.base.Diagnosis`, and one entry here.
"""
from __future__ import annotations

from dataclasses import replace

from gapcheck.findings import Finding
from gapcheck.preprocess.diagnoses.base import Diagnosis, Pair
from gapcheck.preprocess.diagnoses.channel_order import ChannelOrderDiagnosis
from gapcheck.preprocess.diagnoses.crop import CropDiagnosis
from gapcheck.preprocess.diagnoses.dtype import DtypeDiagnosis
from gapcheck.preprocess.diagnoses.layout import LayoutDiagnosis
from gapcheck.preprocess.diagnoses.normalization import NormalizationDiagnosis
from gapcheck.preprocess.diagnoses.resize import ResizeDiagnosis
from gapcheck.preprocess.diagnoses.rounding import SizeRoundingDiagnosis
from gapcheck.preprocess.diagnoses.scale import ScaleDiagnosis
from gapcheck.preprocess.diagnoses.shape import ShapeDiagnosis
from gapcheck.preprocess.diagnoses.source import SourceDiagnosis
from gapcheck.preprocess.diagnoses.steps import RecipeSteps, StepDivergence, StepLocator
from gapcheck.preprocess.diagnoses.traced_steps import TracedSteps
from gapcheck.preprocess.diagnoses.unexplained import UnexplainedDiagnosis

DIAGNOSES: tuple[Diagnosis, ...] = (
    ShapeDiagnosis(),
    LayoutDiagnosis(),
    DtypeDiagnosis(),
    SourceDiagnosis(),  # the file read another way (EXIF, alpha, palette, gray weights): before the replays
    CropDiagnosis(),
    SizeRoundingDiagnosis(),
    ResizeDiagnosis(),
    ChannelOrderDiagnosis(),
    ScaleDiagnosis(),
    NormalizationDiagnosis(),
    UnexplainedDiagnosis(),  # reads what the others found: keep it last
)


# Which step: the first locator that applies to a failing pair names its first divergent step.
STEP_LOCATORS: tuple[StepLocator, ...] = (
    RecipeSteps(),  # two declared step lists
    TracedSteps(),  # at least one callable: traced (composed items, torch.fx, or recorded at runtime)
)


def locate_step(pair: Pair, findings: list[Finding], locators: tuple[StepLocator, ...] | None = None
                ) -> tuple[list[Finding], StepDivergence | None]:
    """The pair's findings with the first divergent step in ``Subject.step``, message and evidence.

    The pair's divergence (its steps table) is the first cause's; a finding of another cause is annotated with the
    step its own cause names when a stage's part is observed only at its end (a BGR decode and a cv2 resize inside
    one opaque part: the channel order at the decode, the resize at the resize)."""
    chosen = STEP_LOCATORS if locators is None else locators
    locator = next((loc for loc in chosen if loc.applies(pair)), None)
    divergence = locator.locate(pair) if locator is not None and findings else None
    if locator is None or divergence is None:
        return findings, None
    first = str(pair.found[0].code) if pair.found else None
    own = {str(f.code): locator.locate(pair, first_cause=str(f.code)) for f in findings
           if locator.names_by_cause and str(f.code) != first}
    return [_annotated(pair, f, own.get(str(f.code)) or divergence) for f in findings], divergence


def _annotated(pair: Pair, finding: Finding, divergence: StepDivergence) -> Finding:
    step = f"step {divergence.step_index}: {divergence.cand_step}"
    said = (f" First divergent step: step {divergence.step_index} `{divergence.cand_step}` in {pair.cand} vs "
            f"`{divergence.ref_step}` in {pair.ref}")
    said += f" (max |Δ| {divergence.max_abs:.4g} there)." if divergence.max_abs is not None else "."
    if divergence.opaque:
        said += " Observed only at their boundaries: " + "; ".join(divergence.opaque) + "."
    evidence: dict[str, object] = {"first_divergent_step": f"{step} (vs {pair.ref}: {divergence.ref_step})",
                "step_method": divergence.method}
    if divergence.opaque:
        evidence["opaque_parts"] = list(divergence.opaque)
    if divergence.fallback:
        evidence["fx_fallback"] = list(divergence.fallback)
    return replace(finding, subject=replace(finding.subject, step=step), where="", message=_joined(finding.message, said),
                   evidence={**finding.evidence, **evidence})


def _joined(message: str, said: str) -> str:
    message = message.rstrip()
    return message + ("" if message.endswith(".") else ".") + said


def diagnose_pair(pair: Pair, diagnoses: tuple[Diagnosis, ...] = DIAGNOSES) -> list[Finding]:
    """Run every diagnosis that applies; value diagnoses are skipped when an output is not finite."""
    for diagnosis in diagnoses:
        if (pair.finite or not diagnosis.reads_values) and diagnosis.applies(pair):
            finding = diagnosis.diagnose(pair)
            if finding is not None:
                pair.found.append(finding)
    return list(pair.found)
