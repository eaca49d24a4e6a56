"""--fix / --diff: the mechanical rewrites (GC305, GC801) keep formatting and comments; nothing else is touched."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.lint import lint_paths
from gapcheck.lint.fix import fix_text

SOURCE = '''import torch
from torch.cuda.amp import autocast, GradScaler

scaler = torch.cuda.amp.GradScaler(2.**16)  # keep this comment
state = torch.load(
    "ckpt.pt",   # the path
    map_location="cpu",
)
other = torch.load("x.pt", weights_only=False)
with autocast(True, torch.float16):
    pass
s2 = GradScaler()
with torch.cuda.amp.autocast(enabled=True):
    kept = torch.load("y.pt")  # gapcheck: ignore[GC801] -- ours
'''

FIXED = '''import torch
from torch.amp import autocast, GradScaler

scaler = torch.amp.GradScaler("cuda", 2.**16)  # keep this comment
state = torch.load(
    "ckpt.pt",   # the path
    map_location="cpu",
    weights_only=True,
)
other = torch.load("x.pt", weights_only=False)
with autocast("cuda", enabled=True, dtype=torch.float16):
    pass
s2 = GradScaler("cuda")
with torch.amp.autocast("cuda", enabled=True):
    kept = torch.load("y.pt")  # gapcheck: ignore[GC801] -- ours
'''


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["lint", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_fix_rewrites_only_reported_calls_and_keeps_comments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    path.chmod(0o640)
    code, out, err = run(capsys, str(path), "--fix")
    assert path.read_text() == FIXED
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert "Fixed 5 finding(s) in 1 file(s)" in err
    assert code == 1 and "weights_only=False" in out  # the explicit False is a decision: reported, not rewritten
    assert [f.code for f in lint_paths([path], jobs=1).findings] == ["GC801"]


def test_diff_previews_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    code, out, err = run(capsys, str(path), "--diff")
    assert code == 1 and path.read_text() == SOURCE
    assert out.startswith(f"--- a/{str(path).lstrip('/')}") and '+    weights_only=True,' in out
    assert "5 fix(es) in 1 file(s) (nothing written)" in err
    path.write_text(FIXED.replace("weights_only=False", "weights_only=True"))
    assert run(capsys, str(path), "--diff")[0] == 0


def test_import_kept_when_a_call_of_it_is_suppressed() -> None:
    text = ("from torch.cuda.amp import autocast\nwith autocast():\n    pass\n"
            "with autocast():  # gapcheck: ignore[GC305]\n    pass\n")
    assert fix_text(text, {2: {"GC305"}}) == (text, 0)  # rewriting the import would break line 4


def test_judgement_rules_and_notebooks_are_never_rewritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clip = Path(__file__).parent / "fixtures" / "GC303" / "case.py"
    path = tmp_path / "clip.py"
    path.write_text(clip.read_text())
    assert run(capsys, str(path), "--fix")[0] == 1
    assert path.read_text() == clip.read_text()
    notebook = tmp_path / "nb.ipynb"
    notebook.write_text('{"cells": [{"cell_type": "code", "source": "import torch\\nx = torch.load(\\"a\\")"}]}')
    before = notebook.read_text()
    run(capsys, str(notebook), "--fix")
    assert notebook.read_text() == before


def test_from_torch_import_load_and_single_line_calls() -> None:
    text = "from torch import load\nsd = load(path, map_location='cpu')\n"
    assert fix_text(text, {2: {"GC801"}}) == (
        "from torch import load\nsd = load(path, map_location='cpu', weights_only=True)\n", 1)


MODULE_AMP = '''from torch.cuda import amp

scaler = amp.GradScaler(init_scale=2.**16)  # keep
with amp.autocast(True):
    pass
'''

MODULE_AMP_FIXED = '''from torch import amp

scaler = amp.GradScaler("cuda", init_scale=2.**16)  # keep
with amp.autocast("cuda", enabled=True):
    pass
'''


def test_fix_and_diff_from_torch_cuda_import_amp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``from torch.cuda import amp; amp.autocast()`` is reported (GC305) and now fixed: the module import
    moves to torch.amp, the calls get their device; --diff shows exactly that and writes nothing."""
    path = tmp_path / "train.py"
    path.write_text(MODULE_AMP)
    assert [f.code for f in lint_paths([path], jobs=1).findings] == ["GC305", "GC305"]
    code, out, err = run(capsys, str(path), "--diff")
    assert code == 1 and path.read_text() == MODULE_AMP
    removed = [line for line in out.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line for line in out.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert removed == ["-from torch.cuda import amp", "-scaler = amp.GradScaler(init_scale=2.**16)  # keep",
                       "-with amp.autocast(True):"]
    assert added == ["+from torch import amp", '+scaler = amp.GradScaler("cuda", init_scale=2.**16)  # keep',
                     '+with amp.autocast("cuda", enabled=True):']
    assert "2 fix(es) in 1 file(s) (nothing written)" in err
    code, out, err = run(capsys, str(path), "--fix")
    assert path.read_text() == MODULE_AMP_FIXED and code == 0
    assert "Fixed 2 finding(s) in 1 file(s)" in err
    assert lint_paths([path], jobs=1).findings == ()


def test_amp_module_with_other_uses_calls_torch_amp_or_is_left() -> None:
    # amp.custom_fwd stays torch.cuda.amp's: the import stays, the calls go through torch.amp where torch is imported
    text = "import torch\nfrom torch.cuda import amp\nwith amp.autocast():\n    pass\nf = amp.custom_fwd\n"
    assert fix_text(text, {3: {"GC305"}}) == (
        'import torch\nfrom torch.cuda import amp\nwith torch.amp.autocast("cuda"):\n    pass\nf = amp.custom_fwd\n', 1)
    alone = "from torch.cuda import amp\nwith amp.autocast():\n    pass\nf = amp.custom_fwd\n"
    assert fix_text(alone, {3: {"GC305"}}) == (alone, 0)  # no `torch` name to call through: left for a person
    aliased = "import torch.cuda.amp as mp\nwith mp.autocast(dtype=None):  # bf16 later\n    pass\n"
    assert fix_text(aliased, {2: {"GC305"}}) == (
        'import torch.amp as mp\nwith mp.autocast("cuda", dtype=None):  # bf16 later\n    pass\n', 1)
    suppressed = ("from torch.cuda import amp\nwith amp.autocast():\n    pass\n"
                  "with amp.autocast():  # gapcheck: ignore[GC305]\n    pass\n")
    assert fix_text(suppressed, {2: {"GC305"}}) == (suppressed, 0)  # moving the import would break line 4


FALLBACK = '''import torch

try:
    scaler = torch.amp.GradScaler("cuda")
except AttributeError:
    scaler = torch.cuda.amp.GradScaler()
try:
    from torch.amp import autocast
except ImportError:
    from torch.cuda.amp import autocast
if hasattr(torch, "amp"):
    ctx = autocast("cuda")
plain = torch.cuda.amp.GradScaler()
'''


def test_fix_leaves_an_old_torch_fallback_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # rewriting the except branch to torch.amp.GradScaler("cuda") breaks the old torch it exists for
    path = tmp_path / "train.py"
    path.write_text(FALLBACK)
    code, out, err = run(capsys, str(path), "--fix")
    assert path.read_text() == FALLBACK.replace("plain = torch.cuda.amp.GradScaler()", 'plain = torch.amp.GradScaler("cuda")')
    assert "Fixed 1 finding(s) in 1 file(s)" in err
