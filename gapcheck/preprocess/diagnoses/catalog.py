"""THE list of root-cause diagnoses, in the order they run (structure first, the catch-all last).

A new root cause is one new module with a class that follows
:class:`~gapcheck.preprocess.diagnoses.base.Diagnosis`, and one entry here.
"""
from __future__ import annotations

from gapcheck.findings import Finding
from gapcheck.preprocess.diagnoses.base import Diagnosis, Pair
from gapcheck.preprocess.diagnoses.channel_order import ChannelOrderDiagnosis
from gapcheck.preprocess.diagnoses.crop import CropDiagnosis
from gapcheck.preprocess.diagnoses.dtype import DtypeDiagnosis
from gapcheck.preprocess.diagnoses.layout import LayoutDiagnosis
from gapcheck.preprocess.diagnoses.normalization import NormalizationDiagnosis
from gapcheck.preprocess.diagnoses.resize import ResizeDiagnosis
from gapcheck.preprocess.diagnoses.scale import ScaleDiagnosis
from gapcheck.preprocess.diagnoses.shape import ShapeDiagnosis
from gapcheck.preprocess.diagnoses.unexplained import UnexplainedDiagnosis

DIAGNOSES: tuple[Diagnosis, ...] = (
    ShapeDiagnosis(),
    LayoutDiagnosis(),
    DtypeDiagnosis(),
    CropDiagnosis(),
    ResizeDiagnosis(),
    ChannelOrderDiagnosis(),
    ScaleDiagnosis(),
    NormalizationDiagnosis(),
    UnexplainedDiagnosis(),  # reads what the others found: keep it last
)


def diagnose_pair(pair: Pair, diagnoses: tuple[Diagnosis, ...] = DIAGNOSES) -> list[Finding]:
    """Run every diagnosis that applies; value diagnoses are skipped when an output is not finite."""
    for diagnosis in diagnoses:
        if (pair.finite or not diagnosis.reads_values) and diagnosis.applies(pair):
            finding = diagnosis.diagnose(pair)
            if finding is not None:
                pair.found.append(finding)
    return list(pair.found)
