import json
import time
from collections import namedtuple
from importlib import resources

import jsonschema
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, default_collate

from gapcheck.errors import UsageError
from gapcheck.findings import Severity, Verdict
from gapcheck.guards import Phase, ProfileReport, StarvedLoopError, profile_steps
from gapcheck.report.formats import ReportFormat, render
from tests.guards.conftest import SmallCNN

SCHEMA = json.loads(resources.files("gapcheck.schemas").joinpath("profile-steps.schema.json").read_text())


def sleeping_collate(batch):
    time.sleep(0.05)  # the planted starvation: a slow decode/augment in the collate function
    return default_collate(batch)


def dataset(n=64):
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 3, 16, 16, generator=g), torch.randint(0, 4, (n,), generator=g))


class Tiny(nn.Module):
    """Compute far below the collate's sleep even on a loaded machine (sleep is wall time, compute stretches)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)

    def forward(self, x):
        return self.fc(x[:, :, 0, 0])


def make_step(model=None):
    model = model or Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def train_step(batch):
        x, y = batch
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    return train_step


def test_sleeping_collate_is_named_as_the_bottleneck():
    loader = DataLoader(dataset(), batch_size=8, collate_fn=sleeping_collate)
    report = profile_steps(make_step(), loader, steps=4, warmup=1)
    assert report.bottleneck is Phase.DATA and report.shares[Phase.DATA] > 0.5
    assert report.headline.startswith("data loading is ") and "raise num_workers, use pin_memory" in report.headline
    assert min(report.phase_values(Phase.DATA)) >= 0.03
    finding = report.findings[0]
    assert finding.code == "guards_profile_bottleneck" and finding.severity is Severity.WARNING
    assert report.verdict is Verdict.PASS  # a bottleneck alone is not a gap


def test_a_data_share_limit_turns_starvation_into_a_violation():
    loader = DataLoader(dataset(), batch_size=8, collate_fn=sleeping_collate)
    with pytest.raises(StarvedLoopError, match="data loading and the host→device copy take") as caught:
        profile_steps(make_step(), loader, steps=3, warmup=0, max_data_share=0.4)
    assert isinstance(caught.value.report, ProfileReport) and caught.value.report.verdict is Verdict.GAP
    report = profile_steps(make_step(), loader, steps=3, warmup=0, max_data_share=0.4, mode="warn")
    assert [f.code for f in report.findings] == ["guards_profile_bottleneck", "guards_input_starved"]


def test_clean_loop_is_compute_bound_and_trips_nothing():
    batches = [(torch.randn(32, 3, 32, 32), torch.randint(0, 4, (32,))) for _ in range(3)]
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 4))
    report = profile_steps(make_step(model), batches, steps=5, warmup=1, max_data_share=0.5)
    assert report.bottleneck is Phase.FORWARD_BACKWARD
    assert [f.severity for f in report.findings] == [Severity.INFO] and report.verdict is Verdict.PASS
    assert sum(report.phase_values(Phase.OPTIMIZER)) > 0 and report.epochs_started >= 2  # 3 batches, 6 steps
    assert report.totals[Phase.H2D] == 0.0 and report.steps == 5


def test_phases_add_up_and_other_and_h2d_are_measured():
    Batch = namedtuple("Batch", "x y")
    data = [Batch(torch.randn(4, 3, 8, 8), torch.randint(0, 4, (4,)))]
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = []

    def train_step(batch):
        seen.append(type(batch))
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(batch.x), batch.y).backward()
        optimizer.step()
        time.sleep(0.01)  # logging after the step

    report = profile_steps(train_step, data, steps=3, warmup=0, device="cpu")
    assert seen == [Batch] * 3  # the batch structure survives the copy
    assert min(report.phase_values(Phase.OTHER)) >= 0.01 and report.totals[Phase.H2D] > 0
    assert all(value >= 0 for step in report.step_times for value in step)


def test_profiler_mode_writes_a_chrome_trace_and_top_ops(tmp_path):
    trace = tmp_path / "out" / "trace.json"

    def train_step(batch):
        loss = batch[0].sum()
        loss.item()  # a sync inside the step, moved to sync wait

    report = profile_steps(train_step, [(torch.randn(64, 64),)], steps=3, warmup=1, trace=trace)
    assert report.method == "timers+profiler" and report.trace_path == str(trace)
    names = {event.get("name") for event in json.loads(trace.read_text())["traceEvents"]}
    assert {"gapcheck/data", "gapcheck/step"} <= names
    assert any(name == "aten::sum" for name, _, _ in report.top_ops)
    assert report.totals[Phase.SYNC_WAIT] > 0


def test_report_renders_to_json_console_and_html_and_validates():
    loader = DataLoader(dataset(16), batch_size=8, collate_fn=sleeping_collate)
    report = profile_steps(make_step(), loader, steps=2, warmup=0)
    doc = json.loads(render(ReportFormat.JSON, report))
    jsonschema.validate(doc, SCHEMA)
    assert doc["command"] == "profile-steps" and doc["profile"]["bottleneck"]["phase"] == "data"
    assert len(doc["profile"]["per_step_ms"]) == 2 and abs(sum(p["share"] for p in doc["profile"]["phases"]) - 1) < 1e-6
    console = render(ReportFormat.CONSOLE, report)
    assert "data loading" in console and "Step time by phase" in console
    html = render(ReportFormat.HTML, report)
    assert "Step time by phase" in html and "host→device copy" in html


def test_bad_arguments_fail_before_any_work(tmp_path):
    calls = []
    with pytest.raises(UsageError, match="directory"):
        profile_steps(calls.append, [1, 2], steps=2, trace=tmp_path)
    with pytest.raises(UsageError, match="no batch"):
        profile_steps(calls.append, [], steps=2)
    with pytest.raises(UsageError):
        profile_steps(calls.append, [1], steps=0)
    assert calls == []
