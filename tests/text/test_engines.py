"""The text audit on the engines: serial and local (and ray, slow) give the in-process answer; chunks run in
windows, so a long source never has all its strings in flight."""
from __future__ import annotations

from pathlib import Path

import pytest

from gapcheck.engines import open_engine
from gapcheck.text import audit_text
from gapcheck.text.cli_bridge import is_text_audit, run_text_audit
from tests.text.conftest import ORDINARY


def _source(tmp_path: Path) -> Path:
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(ORDINARY * 4 + ["Hello World From Paris"]) + "\n", encoding="utf-8")
    return path


def _summary(result) -> tuple:
    return (result.audited, tuple((p.compared, p.differing) for p in result.pairs),
            sorted((f.code, f.severity.value) for f in result.findings), [s.mean_length for s in result.stages])


def _stages(minilm: Path) -> dict[str, str]:
    return {"train": f"hf:{minilm}", "serve": f"hf:{minilm},do_lower_case=false"}


@pytest.mark.parametrize("kind", ["serial", "local"])
def test_engines_give_the_in_process_answer(tmp_path: Path, minilm: Path, kind: str):
    path = _source(tmp_path)
    expected = audit_text(path, _stages(minilm), chunk_size=8)
    with open_engine(kind, workers=1) as engine:
        result = audit_text(path, _stages(minilm), chunk_size=8, engine=engine)
    assert _summary(result) == _summary(expected)
    assert result.settings["engine"] == kind and expected.settings["engine"] == "in-process"


@pytest.mark.slow
def test_ray_engine(tmp_path: Path, minilm: Path):
    pytest.importorskip("ray")
    path = _source(tmp_path)
    expected = audit_text(path, _stages(minilm), chunk_size=64)
    with open_engine("ray", workers=2) as engine:
        assert _summary(audit_text(path, _stages(minilm), chunk_size=64, engine=engine)) == _summary(expected)


def test_cli_bridge_dispatch(tmp_path: Path, minilm: Path):
    path = _source(tmp_path)
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.png").write_bytes(b"\x89PNG")
    assert is_text_audit(path) and is_text_audit(f"{tmp_path / 'x.jsonl'}:text")
    assert is_text_audit(tmp_path / "images", ["serve=hf:./tok"])
    assert not is_text_audit(tmp_path / "images", ["train=pkg.mod:fn"])
    result = run_text_audit(path, [f"train=hf:{minilm}", f"serve=hf:{minilm},slow"], max_samples=20,
                            engine="serial")
    assert result.audited == 20 and result


def test_what_the_audit_keeps_is_bounded(minilm: Path, monkeypatch: pytest.MonkeyPatch):
    """Memory flat in N: counters, and at most LIST_LIMIT rows / differing ids, ``diagnose`` divergences."""
    from gapcheck.text import audit as audit_module

    monkeypatch.setattr(audit_module, "LIST_LIMIT", 30)
    texts = [f"Sentence Number {i} Of Many" for i in range(600)] + [b"\xff"] * 50
    result = audit_text(texts, _stages(minilm), max_samples=None, diagnose=5, chunk_size=64)
    assert result.audited == 600 and result.pairs[0].differing == 600 and result.bad_total == 50
    assert len(result.samples) == 30 and len(result.bad_samples) == 30 and len(result.divergences) <= 5 + 1
    assert sum(result.length_histograms["train"].values()) == 600  # the statistics still count every sample
