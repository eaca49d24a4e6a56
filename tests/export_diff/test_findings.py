"""export-diff's finding builders: one per family, codes from the registry, subjects for stable fingerprints."""
from __future__ import annotations

from types import SimpleNamespace

import torch

from gapcheck.compare import ErrorStats
from gapcheck.export_diff.findings import BUILDERS, Facts, build_findings, findings_from
from gapcheck.export_diff.result import FAIL, PASS, BatchCheck, FirstDivergence, LayerResult, OutputResult, Status
from gapcheck.findings import Severity

_FAILED = ErrorStats(False, 1e-2, 1e-1, 1e-3, 0.5, (0,), 0, False, 1e-4, 1e-4, 1.0)


def _facts(**overrides) -> Facts:
    exported = SimpleNamespace(exporter="torchscript", fallback_reason=None, batch_baked=False, warnings=())
    layer = LayerResult(0, "act", "GELU", ("Tanh",), "/act/out", FAIL, _FAILED, 0, (0,), "m.py:3")
    base = dict(layers=(layer,), outputs=(), first_divergence=None, batch_checks=(), exported=exported,
                was_training=False, kept_train_mode=False, module=torch.nn.Linear(2, 2), precision="fp32", overflow={},
                layer_order=["act"], num_samples=2, reference_backend="onnxruntime")
    return Facts(**{**base, **overrides})


def test_a_clean_run_has_no_findings_and_every_builder_is_listed():
    assert findings_from(_facts()) == [] and len(BUILDERS) == 8


def test_training_mode_severity_depends_on_what_it_changes():
    plain = findings_from(_facts(was_training=True))
    assert [(f.code, f.severity) for f in plain] == [("training_mode", Severity.INFO)]
    bn = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    assert findings_from(_facts(was_training=True, module=bn))[0].severity is Severity.WARNING
    kept = findings_from(_facts(was_training=True, module=bn, kept_train_mode=True))[0]
    assert kept.severity is Severity.GAP and kept.evidence["mode_dependent_modules"] == ["1"]


def test_first_divergence_and_input_dependence():
    fd = FirstDivergence("act", "local", "m.py:3", ("Tanh",), 0, 1e-2, 1e-7, 1e-2, 1e5)
    found = findings_from(_facts(first_divergence=fd))
    assert [f.code for f in found] == ["layer_divergence", "input_dependent_gap"]  # fails on 1 of 2 samples
    assert found[0].where == "act @ m.py:3" and found[0].subject.module == "act"
    assert "introduces the error" in found[0].message and found[0].evidence["cause"] == "local"


def test_outputs_deployment_mismatch_only_when_the_reference_matches():
    outputs = (OutputResult("y", "onnxruntime", PASS, None, None, ()), OutputResult("y", "triton", FAIL, _FAILED, 0, (0,)))
    (finding,) = findings_from(_facts(outputs=outputs))
    assert finding.code == "deployment_mismatch" and finding.subject.endpoint == "triton" and finding.subject.output == "y"
    both = (OutputResult("y", "onnxruntime", FAIL, _FAILED, 0, (0,)),)
    assert [f.code for f in findings_from(_facts(outputs=both))] == ["output_mismatch"]


def test_export_batch_and_overflow_families():
    exported = SimpleNamespace(exporter="torchscript", fallback_reason="dynamo: unsupported", batch_baked=True,
                               warnings=("TracerWarning: converting a tensor to a Python boolean",))
    batches = (BatchCheck(4, "*", Status.ERROR, None, None, "refused"), BatchCheck(2, "y", FAIL, 0.5, 1))
    found = build_findings(**{**_facts().__dict__, "exported": exported, "batch_checks": batches,
                              "overflow": {"act": [0, 1]}})
    assert [f.code for f in found] == ["export_fallback", "batch_size_baked", "export_warning", "fp16_overflow",
                                      "batch_size_baked", "batch_inconsistency"]
    assert len({f.fingerprint for f in found}) == len(found)  # distinct subjects, distinct fingerprints
