"""--triton-output-map in nightly (issue 23 attacker #5): a deployment that renamed its outputs is compared under
the mapped names, and a map naming no golden output is refused before any request (it used to be ignored)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.golden import load_bundle
from tests.nightly.fake_triton import FakeTriton


class RenamingTriton(FakeTriton):
    """Serves every golden output under ``served_<name>``."""

    def metadata(self) -> dict:
        meta = super().metadata()
        for output in meta["outputs"]:
            output["name"] = f"served_{output['name']}"
        return meta

    def config(self) -> dict:
        config = super().config()
        for output in config["output"]:
            output["name"] = f"served_{output['name']}"
        return config

    def answer(self, count: int, first: int) -> list[dict]:
        return [{**o, "name": f"served_{o['name']}"} for o in super().answer(count, first)]


def _run(tiny_golden: Path, tmp_path: Path, url: str, *extra: str, audit: bool = False) -> tuple[int, dict]:
    report = tmp_path / "r.json"
    code = main(["nightly", "--golden", str(tiny_golden), "--history", str(tmp_path / "h.sqlite"),
                 *([] if audit else ["--no-audit"]), "--retries", "0", "--endpoint", f"prod={url}",
                 "--json", str(report), *extra])
    return code, json.loads(report.read_text()) if report.exists() else {}


@pytest.mark.parametrize("audit", [False, True])
def test_a_renamed_output_is_compared_under_its_mapped_name(tiny_golden: Path, tmp_path: Path, audit: bool) -> None:
    bundle = load_bundle(tiny_golden)
    [golden_output] = [o.name for o in bundle.output_infos]
    with RenamingTriton(bundle, "ok") as fake:
        code, report = _run(tiny_golden, tmp_path / "without", fake.url, audit=audit)
        # one output each side: paired and compared, said as info (it was a golden_output_missing false alarm)
        assert code == 0 and "golden_output_missing" not in json.dumps(report), report
        (info,) = [f for f in report["findings"] if f["code"] == "triton_served_names"]
        assert info["severity"] == "info" and info["evidence"]["pairs"] == {golden_output: f"served_{golden_output}"}
        code, report = _run(tiny_golden, tmp_path, fake.url, "--triton-output-map",
                            f"{golden_output}=served_{golden_output}", audit=audit)
    assert code == 0, report
    assert "golden_output_missing" not in json.dumps(report)


def test_a_map_naming_no_golden_output_is_refused_before_any_request(tiny_golden: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    code = main(["nightly", "--golden", str(tiny_golden), "--history", str(tmp_path / "h.sqlite"),
                 "--endpoint", "prod=http://127.0.0.1:1/m", "--triton-output-map", "nosuch=y"])
    assert code == 2
    assert "golden bundle does not hold" in capsys.readouterr().err
    assert not (tmp_path / "h.sqlite").exists()


def test_a_mapped_name_the_endpoint_does_not_serve_is_exit_2_naming_what_it_serves(
        tiny_golden: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bundle = load_bundle(tiny_golden)
    [golden_output] = [o.name for o in bundle.output_infos]
    with FakeTriton(bundle, "ok") as fake:
        code, report = _run(tiny_golden, tmp_path, fake.url, "--triton-output-map", f"{golden_output}=y")
    err = capsys.readouterr().err
    assert code == 2 and report == {}
    assert f"the served ones '{golden_output}'" in err and "endpoint 'prod'" in err


class ShiftedRenamingTriton(RenamingTriton):
    """Renamed outputs whose values are off: what a wrong position pairing looks like to the comparison."""

    def answer(self, count: int, first: int) -> list[dict]:
        return [{**o, "data": [v + 1.0 for v in o["data"]]} for o in super().answer(count, first)]


def test_a_mismatch_on_a_paired_output_names_the_served_one_and_the_map(tiny_golden: Path, tmp_path: Path) -> None:
    """Outputs paired by position (or by the map) that then differ: the message says which served output was
    compared and how to pair another (a deployment listing same-shaped outputs in another order: attacker D3)."""
    bundle = load_bundle(tiny_golden)
    [golden_output] = [o.name for o in bundle.output_infos]
    with ShiftedRenamingTriton(bundle, "ok") as fake:
        code, report = _run(tiny_golden, tmp_path, fake.url)
    assert code == 1, report
    (mismatch,) = [f for f in report["findings"] if f["code"] == "golden_mismatch"]
    assert f"served output 'served_{golden_output}'" in mismatch["message"]
    assert f"--triton-output-map {golden_output}=SERVED" in mismatch["message"]
