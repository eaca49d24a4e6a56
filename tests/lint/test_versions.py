"""Version-aware rules: the torch floor from --target-torch or the project's declared requirement."""
from __future__ import annotations

from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.findings import Severity
from gapcheck.lint import Selection, lint_paths
from gapcheck.lint.versions import _declared, floor_of, parse_version, torch_floor

LOAD = "import torch\nstate = torch.load('ckpt.pt')\nunsafe = torch.load('x.pt', weights_only=False)\n"


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    _declared.cache_clear()


def project(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / ".git").mkdir()
    (tmp_path / name).write_text(text)
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(LOAD)
    return src / "train.py"


@pytest.mark.parametrize("spec, floor", [(">=2.6,<3", (2, 6)), ("==2.1.0+cu118", (2, 1, 0)), ("", None),
                                         (">1.8", (1, 8, 1)), ("~=2.7", (2, 7)), ("<2.5", None)])
def test_floor_of(spec: str, floor: tuple[int, ...] | None) -> None:
    assert floor_of(spec) == floor


@pytest.mark.parametrize("name, text, floor", [
    ("pyproject.toml", '[project]\ndependencies = ["torch>=2.6", "torchvision>=0.10"]\n', (2, 6)),
    ("pyproject.toml", '[tool.poetry.dependencies]\ntorch = "^2.7"\n', (2, 7)),
    ("requirements.txt", "--extra-index-url x\ntorch==2.1.2  # pinned\npytorch-lightning>=2\n", (2, 1, 2)),
    ("requirements.txt", "torch\n", None),  # any version
    ("setup.py", "import torch\nsetup(install_requires=['torch>=1.13', 'numpy'])\n", (1, 13)),
    ("setup.cfg", "[options]\ninstall_requires =\n    torch>=2.8\n", (2, 8)),
])
def test_declared_requirement(tmp_path: Path, name: str, text: str, floor: tuple[int, ...] | None) -> None:
    assert torch_floor(project(tmp_path, name, text)) == floor


def test_gc801_is_info_where_weights_only_is_the_default(tmp_path: Path) -> None:
    path = project(tmp_path, "requirements.txt", "torch>=2.6\n")
    found = {f.subject.line: f for f in lint_paths([path], jobs=1).findings}
    assert found[2].severity is Severity.INFO and "safe by default" in found[2].message
    assert found[3].severity is Severity.GAP  # weights_only=False is unsafe on every version
    assert lint_paths([path], jobs=1).verdict == "gap"


def test_gc801_is_a_gap_where_old_torch_is_allowed(tmp_path: Path) -> None:
    path = project(tmp_path, "requirements.txt", "torch>=2.0\n")
    found = {f.subject.line: f for f in lint_paths([path], jobs=1).findings}
    assert found[2].severity is Severity.GAP and "torch 2.0, which this project allows" in found[2].message


def test_target_torch_overrides_the_declaration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = project(tmp_path, "requirements.txt", "torch>=2.0\n")
    result = lint_paths([path], Selection(target_torch=parse_version("2.7")), jobs=1)
    assert [f.severity for f in result.findings] == [Severity.INFO, Severity.GAP]
    assert main(["lint", str(path), "--target-torch", "2.7", "--select", "GC801"]) == 1
    assert main(["lint", str(path), "--target-torch", "latest"]) == 2
    assert "not a version" in capsys.readouterr().err


def test_installed_packages_do_not_inherit_the_venv_owner(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\ndependencies = ["torch>=2.6"]\n')
    inside = tmp_path / "lib" / "site-packages" / "pkg"
    inside.mkdir(parents=True)
    (inside / "ex.py").write_text(LOAD)
    assert torch_floor(inside / "ex.py") is None


def test_gc602_only_for_projects_on_torch_before_1_9(tmp_path: Path) -> None:
    code = ("import numpy as np\nfrom torch.utils.data import DataLoader, Dataset\n\n\n"
            "class Noisy(Dataset):\n    def __getitem__(self, i):\n        return np.random.rand()\n\n\n"
            "loader = DataLoader(Noisy(), num_workers=4)\n")
    path = tmp_path / "d.py"
    path.write_text(code)
    assert lint_paths([path], Selection(select=("GC602",), target_torch=(2, 5)), jobs=1).findings == ()
    (old,) = lint_paths([path], Selection(select=("GC602",), target_torch=(1, 8)), jobs=1).findings
    assert "on torch 1.8" in old.message


def test_target_torch_in_the_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = project(tmp_path, "requirements.txt", "torch>=2.0\n")
    config = tmp_path / "gapcheck.toml"
    config.write_text('[lint]\ntarget-torch = "2.7"\nselect = ["GC801"]\n')
    assert main(["lint", str(path), "--config", str(config), "--format", "json"]) == 1
    out = capsys.readouterr().out
    assert '"severity": "info"' in out and '"severity": "gap"' in out
    config.write_text('[lint]\ntarget-torch = "two"\n')
    assert main(["lint", str(path), "--config", str(config)]) == 2
