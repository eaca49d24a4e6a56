"""Outside text is shown as written: rich turns ``:name:`` codes into emoji unless told not to, so an OpenCV error
(``:-1: error: (-5:Bad argument)``), a tensor or file name holding ``:smile:`` would be shown as something else."""
from __future__ import annotations

from gapcheck.cli.app import main
from gapcheck.findings import Finding, Severity
from gapcheck.report.console import make_console, print_findings


def test_a_finding_keeps_its_colon_codes(capsys) -> None:
    finding = Finding("shape", Severity.GAP, "cv2.error: :-1: error: (-5:Bad argument) in :smile: :thumbs_up:", "x")
    print_findings(make_console(), [finding])
    out = capsys.readouterr().out
    assert ":-1:" in out and ":smile:" in out and ":thumbs_up:" in out
    assert "\U0001f44e" not in out and "\U0001f604" not in out and "\U0001f44d" not in out


def test_the_error_boundary_keeps_its_colon_codes(tmp_path, capsys) -> None:
    missing = tmp_path / ":smile:.onnx"
    code = main(["triton-audit", "--onnx", str(missing), "--triton-url", "http://127.0.0.1:1", "--triton-model", "m"])
    err = capsys.readouterr().err
    assert code == 2
    assert ":smile:" in err.replace("\n", "") and "\U0001f604" not in err
