"""golden record/verify reports go through the shared report options: checked before work, --html too."""
from __future__ import annotations

from pathlib import Path

from gapcheck.cli.app import main


def test_bad_report_path_is_refused_before_recording(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    code = main(["golden", "record", "--out", str(out), "--model", "sample_models.cnn:build_small_resnet",
                 "--input", "x:1x3x32x32:float32", "--num-samples", "2", "--json", str(tmp_path)])  # a directory
    assert code == 2
    assert not out.exists()  # nothing was recorded


def test_verify_writes_html(tmp_path: Path, capsys) -> None:
    out = tmp_path / "bundle"
    assert main(["golden", "record", "--out", str(out), "--model", "sample_models.cnn:build_small_resnet",
                 "--input", "x:1x3x32x32:float32", "--num-samples", "2", "--no-cache"]) == 0
    page = tmp_path / "verify.html"
    assert main(["golden", "verify", str(out), "--html", str(page)]) == 0
    assert page.read_text().lstrip().lower().startswith("<!doctype html")


class _Steps:
    """A ProgressReporter that keeps what it is told."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, int | None, int]] = []

    def start(self, description: str, total: int | None) -> None:
        self.steps.append((description, total, 0))

    def advance(self, steps: int = 1) -> None:
        description, total, done = self.steps[-1]
        self.steps[-1] = (description, total, done + steps)

    def finish(self) -> None:
        pass


def test_record_reports_its_steps_and_every_sample_to_the_progress_bar(tmp_path: Path) -> None:
    from gapcheck.golden import RecordRequest, record_bundle

    steps = _Steps()
    record_bundle(RecordRequest(out=tmp_path / "g", factory="sample_models.cnn:build_small_resnet",
                                input_specs=("x:1x3x32x32:float32",), num_samples=5, exporter="dynamo"), progress=steps)
    counted = {description: (total, done) for description, total, done in steps.steps if total is not None}
    assert list(counted.values()) == [(5, 5), (5, 5)]  # torch, then ONNX Runtime: every sample advanced once
    assert [d for d, t, _ in steps.steps if t is None] == ["golden record: load the model and samples, export",
                                                          "golden record: write and verify the bundle"]


def test_record_takes_no_progress_like_the_other_commands(tmp_path: Path) -> None:
    assert main(["golden", "record", "--out", str(tmp_path / "g"), "--model", "sample_models.cnn:build_small_resnet",
                 "--input", "x:1x3x32x32:float32", "--num-samples", "2", "--no-progress"]) == 0
