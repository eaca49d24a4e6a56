"""Issue #7 (6, 7, 8, 11): bad settings, NaN outputs, stages that kill their worker, special files in the samples."""
from __future__ import annotations

import math
import os
import shutil
import socket

import pytest

from gapcheck.cli.app import main
from gapcheck.errors import UsageError
from gapcheck.preprocess.audit import preprocess_audit
from tests.preprocess.conftest import SKIMAGE_DATA, report_json, stage

CLEAN = {"train": stage("train_transform"), "infer": stage("infer_transform")}


# --- (6) settings and recipe values ----------------------------------------------------------------------


@pytest.mark.parametrize("tolerance", [math.nan, math.inf, -0.1])
def test_tolerance_nan_inf_or_negative_is_refused(photos, tolerance):
    with pytest.raises(UsageError, match="tolerance must be a finite number >= 0"):
        preprocess_audit(photos, CLEAN, tolerance=tolerance, workers=1)


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_cli_tolerance_refused_with_exit_2(photos, value, capsys):
    assert main(["preprocess-audit", "--samples", str(photos), "--stage", f"a={CLEAN['train']}",
                 "--stage", f"b={CLEAN['infer']}", "--tolerance", value, "--no-progress"]) == 2
    assert "tolerance" in capsys.readouterr().err


@pytest.mark.parametrize("step, words", [
    ('{op = "resize", size = -5}', "size must be a whole number of pixels"),
    ('{op = "center_crop", size = [224, 0]}', "size must be a whole number of pixels"),
    ('{op = "scale", factor = nan}', "factor must be a finite, non-zero number"),
    ('{op = "normalize", mean = [0.5, 0.5, 0.5], std = [0.5, inf, 0.5]}', "mean and std must be finite"),
])
def test_recipe_step_values_are_config_errors_exit_2(photos, tmp_path, monkeypatch, capsys, step, words):
    (tmp_path / "gapcheck.toml").write_text(f"""
[preprocess]
samples = "{photos}"
[preprocess.stages.train]
callable = "{CLEAN['train']}"
[preprocess.stages.mobile]
steps = [{{op = "decode"}}, {step}]
""")
    monkeypatch.chdir(tmp_path)
    assert main(["preprocess-audit", "--no-progress"]) == 2  # never a stage_error gap (exit 1)
    assert words in capsys.readouterr().err


# --- (7) NaN outputs ------------------------------------------------------------------------------------


def test_all_nan_output_is_its_own_finding_and_quiet(photos, capfd):
    result = preprocess_audit(photos, {"train": stage("train_transform"), "infer": stage("infer_all_nan")},
                              n=2, workers=1)
    codes = {f.code for f in result.findings if f.is_gap}
    assert codes == {"nonfinite_output"}  # never diagnosed as resize (or anything else)
    finding = next(f for f in result.findings if f.code == "nonfinite_output")
    assert finding.subject.stage == "infer" and finding.evidence["count"] == 2
    assert "every value" in finding.message
    pair = result.pairs[0]
    assert not pair.diagnosed and pair.nonfinite_samples == 2 and "NaN" in pair.note
    assert math.isnan(pair.max_abs) and math.isnan(pair.min_psnr_db)  # nothing compared, no made-up number
    assert report_json(result)["pairs"][0]["max_abs"] == "nan"
    assert "RuntimeWarning" not in capfd.readouterr().err  # workers share this stderr
    pair_case = next(c for c in result.checks() if c.name == "train→infer")
    assert pair_case.failure is not None and "nonfinite_output" in pair_case.failure


# --- (8) a stage that kills its worker ------------------------------------------------------------------


@pytest.fixture(scope="module")
def three_photos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("three")
    for name in ("astronaut.png", "chelsea.png", "coffee.png"):
        shutil.copy(SKIMAGE_DATA / name, folder / name)
    return folder


@pytest.mark.parametrize("workers", [1, 2])
def test_worker_death_names_stage_and_sample_and_the_rest_is_audited(three_photos, workers):
    stages = {"train": stage("train_transform"), "exits": stage("infer_exits_on_coffee"),
              "segv": stage("infer_segfaults_on_chelsea")}
    result = preprocess_audit(three_photos, stages, workers=workers, repeats=0)
    errors = {(e.stage, e.sample.rsplit("/", 1)[-1]): e.error for e in result.stage_errors}
    assert set(errors) == {("exits", "coffee.png"), ("segv", "chelsea.png")}
    assert "worker died (exit status 1)" in errors[("exits", "coffee.png")]
    assert "worker died (killed by signal 11 SIGSEGV)" in errors[("segv", "chelsea.png")]
    # Every other (stage, sample) ran: the dead stage is skipped on that one sample only.
    ok = {(o.stage, s.path.rsplit("/", 1)[-1]) for s in result.samples for o in s.stages if o.ok}
    assert len(ok) == 3 * 3 - 2
    findings = {f.subject.stage: f for f in result.findings if f.code == "stage_error"}
    assert set(findings) == {"exits", "segv"} and "killed its worker" in findings["exits"].message


def test_cli_reports_worker_death_as_a_finding_not_a_crash(three_photos, capsys):
    code = main(["preprocess-audit", "--samples", str(three_photos), "--stage", f"train={stage('train_transform')}",
                 "--stage", f"infer={stage('infer_exits_on_coffee')}", "--workers", "1", "--repeats", "0",
                 "--no-progress"])
    out = capsys.readouterr()
    assert code == 1 and "stage_error" in out.out and "BrokenProcessPool" not in out.out + out.err


def test_nothing_audited_because_workers_always_die_exits_3(three_photos, capsys):
    code = main(["preprocess-audit", "--samples", str(three_photos), "--stage", f"train={stage('infer_always_exits')}",
                 "--stage", f"infer={stage('infer_always_exits')}", "--n", "1", "--workers", "1", "--repeats", "0",
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 3 and "stage 'train'" in err and "exit status 3" in err


@pytest.mark.slow  # three worker restarts (each imports torch again)
def test_a_stage_that_always_kills_its_worker_is_given_up_after_three_samples(photos):
    result = preprocess_audit(photos, {"train": stage("train_transform"), "infer": stage("infer_transform"),
                                       "dies": stage("infer_always_exits")}, workers=1, repeats=0)
    errors = [e.error for e in result.stage_errors if e.stage == "dies"]
    assert len(errors) == 4 and sum(e.startswith("worker died") for e in errors) == 3
    assert "not run: the stage killed its worker on each of the first 3 samples" in errors[-1]
    assert result.pairs[0].within_tolerance  # train and infer are still compared on every sample


# --- (11) special files in a samples folder -------------------------------------------------------------


@pytest.fixture()
def special_files(tmp_path):
    folder = tmp_path / "samples"
    folder.mkdir()
    shutil.copy(SKIMAGE_DATA / "astronaut.png", folder / "a_photo.png")
    shutil.copy(SKIMAGE_DATA / "coffee.png", folder / "b_photo.png")
    os.mkfifo(folder / "c_fifo.png")
    os.symlink("d_loop.png", folder / "d_loop.png")  # a link to itself
    os.symlink(folder / "missing.png", folder / "e_broken.png")
    os.symlink("/dev/null", folder / "f_device.png")
    os.symlink(folder, folder / "g_back_to_top")  # a folder loop
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(folder / "h_socket"))
    yield folder
    sock.close()


def test_special_files_are_listed_never_opened(special_files):
    result = preprocess_audit(special_files, CLEAN, workers=1, repeats=0)  # a FIFO open would block forever
    reasons = {b.path.rsplit("/", 1)[-1]: (b.code, b.detail) for b in result.bad_samples}
    assert set(reasons) == {"c_fifo.png", "d_loop.png", "e_broken.png", "f_device.png", "g_back_to_top", "h_socket"}
    assert all(code == "unreadable" for code, _ in reasons.values())
    assert "FIFO" in reasons["c_fifo.png"][1] and "never opened" in reasons["c_fifo.png"][1]
    assert "symlink loop" in reasons["d_loop.png"][1] and "symlink loop" in reasons["g_back_to_top"][1]
    assert "broken symlink" in reasons["e_broken.png"][1]
    assert "character device" in reasons["f_device.png"][1] and "socket" in reasons["h_socket"][1]
    assert result.audited_samples == 2 and result.verdict == "pass"
    finding = next(f for f in result.findings if f.code == "unreadable")
    assert finding.evidence["count"] == 6 and finding.subject.path.endswith("c_fifo.png")


def test_fifo_as_the_samples_path_says_what_it_is(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert main(["preprocess-audit", "--samples", str(fifo), "--stage", f"a={CLEAN['train']}",
                 "--stage", f"b={CLEAN['infer']}", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "FIFO" in err and "does not exist" not in err


def test_an_absurd_worker_count_starts_no_more_processes_than_the_machine_runs(three_photos, monkeypatch):
    """--workers 100000 plans that many chunks at most, but the local pool starts process_limit() processes."""
    from gapcheck.preprocess import pool

    started = []
    real_worker = pool._Worker

    def counting_worker(*args, **kwargs):
        started.append(1)
        return real_worker(*args, **kwargs)

    monkeypatch.setattr(pool, "process_limit", lambda: 2)
    monkeypatch.setattr(pool, "_Worker", counting_worker)
    result = preprocess_audit(three_photos, {"train": stage("train_transform"), "val": stage("val_transform")},
                              workers=100_000, repeats=0)
    assert len(started) == 2 and len(result.samples) == 3
