"""Traced steps are bounded: a stage with many torch ops keeps at most MAX_TRACED_STEPS / MAX_TRACED_BYTES of outputs.

Unbounded, a stage looping ``x = x * 1.0`` 600 times on a 256×256 image doubled the audit's peak memory and the
report listed "step 604". The caps are monkeypatched small here so the stages stay tiny and the tests fast.
"""
from __future__ import annotations

import textwrap
import weakref

import numpy as np
import pytest
import torch
from PIL import Image

from gapcheck.preprocess import traced
from gapcheck.preprocess.diagnoses.traced_steps import align
from gapcheck.preprocess.traced import first_divergent_traced_step, trace_stage

SIDE = 32
MANY = 300


@pytest.fixture()
def image_path(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "small.png"
    Image.fromarray(rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)).save(path)
    return str(path)


@pytest.fixture()
def small_caps(monkeypatch):
    monkeypatch.setattr(traced, "MAX_TRACED_STEPS", 8)
    monkeypatch.setattr(traced, "MAX_TRACED_BYTES", 1 << 20)
    return 8


def _looping(scale_at: int | None = None, scale: float = 2.0, ops: int = MANY, factor: float = 1.001):
    """Decode, permute, to float, then ``ops`` multiplications by ``factor`` (each changes the values); the one
    at ``scale_at`` (0-based) multiplies by ``scale`` instead."""
    def stage(path):
        x = torch.from_numpy(np.asarray(Image.open(path).convert("RGB")).copy()).permute(2, 0, 1).float()
        for i in range(ops):
            x = x * (scale if i == scale_at else factor)
        return x
    return stage


def test_runtime_recording_keeps_at_most_the_step_cap_and_says_so(image_path, small_caps):
    trace = trace_stage(_looping(), image_path)
    assert trace.method == "runtime" and trace.truncated
    assert len(trace.steps) == small_caps  # the first 8 (boundary, permute, float, 5 × mul), not 303
    assert [s.index for s in trace.steps] == list(range(1, small_caps + 1))
    note = trace.opaque[-1]
    assert note.startswith(f"recorded the first {small_caps} steps; the rest") and "over the memory cap" in note
    assert "was not traced" in note and "observed only at the stage's output" in note
    assert trace.opaque[0].startswith("everything before the first torch call")  # the decode note is still there


def test_runtime_recording_keeps_at_most_the_byte_cap(image_path, monkeypatch):
    step_bytes = 3 * SIDE * SIDE * 4  # one float32 step
    monkeypatch.setattr(traced, "MAX_TRACED_BYTES", 5 * step_bytes)
    trace = trace_stage(_looping(), image_path)
    kept = sum(step.output.nbytes for step in trace.steps)
    assert trace.truncated and kept <= 5 * step_bytes and 2 <= len(trace.steps) <= 6
    assert "over the memory cap" in trace.opaque[-1]


def test_a_divergence_within_the_recorded_steps_is_still_named(image_path, small_caps):
    ref, cand = trace_stage(_looping(), image_path), trace_stage(_looping(scale_at=1), image_path)
    assert ref.truncated and cand.truncated
    divergence = first_divergent_traced_step(ref, cand)
    assert divergence is not None and divergence.step_index <= small_caps
    assert divergence.step_index == 5 and divergence.cand_step == "mul(2)" and divergence.ref_step == "mul(1.001)"
    found = align(ref, cand, tolerance=1e-3)  # the audit's alignment by value
    assert found is not None and found[0] is not None and (found[0].index, found[0].label) == (5, "mul(2)")
    assert found[1] is not None and found[1].label == "mul(1.001)"


def test_a_change_where_the_capped_reference_changed_nothing_is_named(image_path, small_caps):
    # the reference multiplies by 1.0 (no change) past the cap; the candidate scales at its 6th step
    ref = trace_stage(_looping(factor=1.0), image_path)
    cand = trace_stage(_looping(factor=1.0, scale_at=2), image_path)
    for found in (first_divergent_traced_step(ref, cand), align(ref, cand, tolerance=1e-3)):
        assert found is not None
        cand_step, ref_label = (found.cand_step, found.ref_step) if hasattr(found, "cand_step") else \
            (found[0].label, found[1].label)
        assert cand_step == "mul(2)" and "no change through its recorded step 8" in ref_label
        assert "over the memory cap" in ref_label


def test_a_divergence_past_the_recorded_steps_is_not_misnamed_as_the_end(image_path, small_caps):
    # both agree on every recorded step; the candidate differs only at op 200: not a step to name
    ref, cand = trace_stage(_looping(), image_path), trace_stage(_looping(scale_at=200), image_path)
    assert first_divergent_traced_step(ref, cand) is None and align(ref, cand, tolerance=1e-3) is None
    # one stage short and complete, the other long and capped: the capped one did not "end" at the cap
    short = trace_stage(_looping(ops=2), image_path)
    assert not short.truncated and len(short.steps) < small_caps
    assert first_divergent_traced_step(short, ref) is not None  # the complete one ended: that is a difference
    found = align(short, ref, tolerance=1e-3)
    assert found is not None and found[1] is None  # the short reference ended; the capped candidate went on
    assert align(ref, short, tolerance=1e-3) is not None
    # the capped reference against a longer complete candidate: the candidate's next step is past the
    # reference's recorded depth, where the reference may do the same
    longer = trace_stage(_looping(ops=7), image_path)
    assert first_divergent_traced_step(ref, longer) is None and align(ref, longer, tolerance=1e-3) is None


class Loop(torch.nn.Module):
    def forward(self, x):
        for _ in range(MANY):  # unrolled by torch.fx into MANY nodes
            x = x * 1.0
        return x


def test_fx_and_composed_traces_are_capped_too(small_caps):
    image = torch.rand(3, SIDE, SIDE)
    fx = trace_stage(Loop(), image)
    assert fx.method == "fx" and fx.truncated and len(fx.steps) == small_caps and "memory cap" in fx.opaque[-1]

    class Composed:
        transforms = [torch.nn.Sequential(Loop())] + [lambda x: x + 1.0] * 20

        def __call__(self, x):
            for item in self.transforms:
                x = item(x)
            return x

    composed = trace_stage(Composed(), image)
    assert composed.method == "compose" and composed.truncated and len(composed.steps) == small_caps
    assert f"recorded the first {small_caps} steps" in composed.opaque[-1]


def test_under_the_caps_nothing_changes(image_path):
    trace = trace_stage(_looping(ops=3), image_path)
    assert not trace.truncated and len(trace.opaque) == 1 and len(trace.steps) == 3 + 3


def test_constants_the_stage_drops_are_not_kept_alive_while_it_runs(image_path):
    # every no-data tensor (a fresh canvas, a mean) used to be kept alive until the stage returned
    alive: list[bool] = []

    def stage(path):
        x = torch.from_numpy(np.asarray(Image.open(path).convert("RGB")).copy()).float()
        canvas = torch.zeros(64, 64)
        ref = weakref.ref(canvas)
        del canvas
        alive.append(ref() is not None)
        return x * torch.tensor(2.0)

    trace = trace_stage(stage, image_path)
    assert alive == [False]
    assert trace.labels()[-1] == "mul((2,))"  # a constant operand is still shown by value, not as data


def test_the_cap_note_reaches_the_audit_report(tmp_path, small_caps):
    from gapcheck.preprocess.audit import preprocess_audit

    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    module = tmp_path / "many_ops.py"
    module.write_text(textwrap.dedent(f"""
        import numpy as np
        import torch
        from PIL import Image

        def _stage(path, scale):
            x = torch.from_numpy(np.asarray(Image.open(path).convert("RGB")).copy()).permute(2, 0, 1).float() / 255
            for i in range({MANY}):
                x = x * (scale if i == 1 else 1.0)
            return x

        def ref(path):
            return _stage(path, 1.0)

        def cand(path):
            return _stage(path, 1.5)
    """))
    result = preprocess_audit(str(folder), {"train": f"{module}:ref", "infer": f"{module}:cand"}, n=2, workers=1,
                              repeats=0)
    gaps = [f for f in result.findings if f.is_gap and f.subject.stage == "train→infer"]
    assert gaps and all(f.subject.step.split(": ", 1)[1].startswith("mul(1.5)") for f in gaps)
    divergence = result.pairs[0].first_divergent_step
    assert len(divergence.cand_steps) <= small_caps and len(divergence.ref_steps) <= small_caps
    assert any(part.startswith(f"infer: recorded the first {small_caps} steps") for part in divergence.opaque)
    assert "over the memory cap" in gaps[0].message
    assert any("over the memory cap" in part for part in gaps[0].evidence["opaque_parts"])
