"""preprocess-audit on the engines: serial, local (the supervised pool) and a real local Ray give the same JSON."""
from __future__ import annotations

import json
import shutil

import pytest

from gapcheck.cli.app import main
from gapcheck.engines import open_engine
from gapcheck.preprocess.audit import preprocess_audit
from gapcheck.report.formats import ReportFormat, render
from tests.preprocess.conftest import stage

STAGES = {"train": stage("train_transform"), "infer": stage("infer_cv2_resize")}


def _json(result) -> dict:
    document = json.loads(render(ReportFormat.JSON, result))
    document.pop("timings")
    document.pop("cpu_seconds")  # measured CPU time, like the timings
    return document


@pytest.fixture(scope="module")
def samples(photos, tmp_path_factory):
    folder = tmp_path_factory.mktemp("engine_samples")
    for path in sorted(photos.iterdir())[:3]:
        shutil.copy(path, folder / path.name)
    (folder / "z_notes.txt").write_text("not an image\n")  # a bad input, reported the same everywhere
    return folder


def test_identical_json_on_serial_local_and_ray(samples):
    pytest.importorskip("ray")
    reports = {}
    for kind in ("serial", "local", "ray"):
        options = {"workers": 2} if kind != "serial" else {}
        with open_engine(kind, **options) as engine:
            reports[kind] = _json(preprocess_audit(samples, STAGES, n=8, workers=2, repeats=1, engine=engine))
    assert reports["serial"] == reports["local"] == reports["ray"]
    document = reports["serial"]
    assert document["verdict"] == "gap" and {f["code"] for f in document["findings"]} >= {"resize"}
    assert [b["path"].rsplit("/", 1)[-1] for b in document["bad_samples"]] == ["z_notes.txt"]


def test_cli_engine_flag_and_config_section(samples, tmp_path):
    serial_json, config_json = tmp_path / "serial.json", tmp_path / "config.json"
    args = ["preprocess-audit", "--samples", str(samples), "--n", "3", "--repeats", "0", "--no-progress",
            "--stage", f"train={STAGES['train']}", "--stage", f"infer={STAGES['infer']}"]
    assert main([*args, "--engine", "serial", "--json", str(serial_json)]) == 1
    config = tmp_path / "gapcheck.toml"
    config.write_text('[engine]\nname = "serial"\n')
    assert main([*args, "--config", str(config), "--json", str(config_json)]) == 1
    first, second = (json.loads(p.read_text()) for p in (serial_json, config_json))
    for document in (first, second):
        document.pop("timings"), document.pop("cpu_seconds")
    assert first == second and first["verdict"] == "gap"


def test_engine_address_is_only_for_ray(samples, capsys):
    code = main(["preprocess-audit", "--samples", str(samples), "--stage", f"train={STAGES['train']}",
                 "--stage", f"infer={STAGES['infer']}", "--engine", "serial", "--engine-address", "ray://x:1"])
    assert code == 2 and "only used by the ray engine" in capsys.readouterr().err


def test_fsspec_memory_url_and_local_glob_give_the_same_audit(samples):
    """memory:// is one process's filesystem, so it runs on the serial engine; the stages receive a private local
    copy of each sample (they open paths), the report names the URLs."""
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    for path in sorted(samples.iterdir()):
        memory.pipe(f"/preprocess-samples/{path.name}", path.read_bytes())
    with open_engine("serial") as engine:
        remote = _json(preprocess_audit("memory://preprocess-samples", STAGES, n=8, repeats=0, engine=engine))
    local = _json(preprocess_audit(str(samples / "*"), STAGES, n=8, repeats=0, workers=2))
    assert [s["path"] for s in remote["samples"]] == [f"memory://preprocess-samples/{p.name}"
                                                      for p in sorted(samples.iterdir())]
    for document in (remote, local):
        for section in ("samples", "bad_samples", "stage_errors"):
            for row in document[section]:
                row.pop("path", None), row.pop("sample", None)
        for pair in document["pairs"]:
            # The step is located on the pair's worst differing sample, whatever the engine or the file system.
            assert pair["first_divergent_step"].pop("sample") == pair.pop("worst_sample")
        for finding in document["findings"]:
            finding.pop("subject"), finding.pop("evidence"), finding.pop("fingerprint", None)
            finding.pop("message"), finding.pop("where", None)
    assert remote == local and remote["verdict"] == "gap"
