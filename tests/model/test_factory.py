"""resolve_callable: 'pkg.module:callable' and 'path/to/file.py:callable', and every way they fail."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from gapcheck.errors import ExitCode, UsageError, exit_code_for
from gapcheck.model.factory import condense_exception, resolve_callable

FACTORY_SOURCE = textwrap.dedent(
    """
    import torch.nn as nn

    NOT_CALLABLE = 42


    class Net(nn.Module):
        def __init__(self, hidden=4):
            super().__init__()
            self.fc = nn.Linear(3, hidden)

        def forward(self, x):
            return self.fc(x)

        @classmethod
        def build(cls, hidden=4):
            return cls(hidden)


    def build_model(hidden=4):
        return Net(hidden)
    """
)


@pytest.fixture(autouse=True)
def _forget_imported_test_modules():
    """Modules imported by a test (from tmp_path) must not leak into the next one."""
    before = set(sys.modules)
    path_before = list(sys.path)
    yield
    for name in set(sys.modules) - before:
        if name.startswith(("gapcheck_factory_", "gc_factory_pkg")):
            del sys.modules[name]
    assert sys.path == path_before, "resolve_callable must leave sys.path as it found it"


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def test_file_path_factory_builds_the_model(tmp_path):
    file = write(tmp_path / "model.py", FACTORY_SOURCE)
    build = resolve_callable(f"{file}:build_model")
    model = build(hidden=5)
    assert model.fc.out_features == 5


def test_relative_file_path_is_relative_to_cwd(tmp_path, monkeypatch):
    write(tmp_path / "models" / "net.py", FACTORY_SOURCE)
    monkeypatch.chdir(tmp_path)
    assert resolve_callable("models/net.py:build_model")().fc.in_features == 3


def test_dotted_attribute_after_colon(tmp_path):
    file = write(tmp_path / "model.py", FACTORY_SOURCE)
    model = resolve_callable(f"{file}:Net.build")(hidden=7)
    assert model.fc.out_features == 7


def test_two_files_with_the_same_name_do_not_collide(tmp_path):
    first = write(tmp_path / "a" / "model.py", "def build():\n    return 'a'\n")
    second = write(tmp_path / "b" / "model.py", "def build():\n    return 'b'\n")
    assert resolve_callable(f"{first}:build")() == "a"
    assert resolve_callable(f"{second}:build")() == "b"


def test_file_factory_can_import_its_siblings(tmp_path):
    write(tmp_path / "gc_sibling_layers.py", "WIDTH = 6\n")
    file = write(tmp_path / "model.py", "from gc_sibling_layers import WIDTH\n\ndef build():\n    return WIDTH\n")
    try:
        assert resolve_callable(f"{file}:build")() == 6
    finally:
        sys.modules.pop("gc_sibling_layers", None)


def test_importable_module_spec_found_from_cwd(tmp_path, monkeypatch):
    write(tmp_path / "gc_factory_pkg" / "__init__.py", "")
    write(tmp_path / "gc_factory_pkg" / "models.py", FACTORY_SOURCE)
    monkeypatch.chdir(tmp_path)
    build = resolve_callable("gc_factory_pkg.models:build_model")
    assert build().fc.out_features == 4


def test_installed_module_spec():
    assert resolve_callable("collections:OrderedDict") is __import__("collections").OrderedDict


@pytest.mark.parametrize("spec", ["mypkg.models", "model.py", ""])
def test_missing_colon(spec):
    with pytest.raises(UsageError, match="no ':'") as info:
        resolve_callable(spec)
    assert "pkg.module:callable" in str(info.value)
    assert exit_code_for(info.value) == ExitCode.USAGE


@pytest.mark.parametrize("spec", [":build", "mypkg.models:"])
def test_incomplete_spec(spec):
    with pytest.raises(UsageError, match="incomplete"):
        resolve_callable(spec)


def test_module_not_found_names_the_module():
    with pytest.raises(UsageError, match="module 'gc_no_such_package' not found"):
        resolve_callable("gc_no_such_package.models:build")


def test_missing_submodule_is_named(tmp_path, monkeypatch):
    write(tmp_path / "gc_factory_pkg" / "__init__.py", "")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"module 'gc_factory_pkg\.nope' not found"):
        resolve_callable("gc_factory_pkg.nope:build")


def test_missing_dependency_inside_the_module_is_an_import_failure(tmp_path, monkeypatch):
    write(tmp_path / "gc_factory_pkg" / "__init__.py", "")
    write(tmp_path / "gc_factory_pkg" / "models.py", "import gc_missing_dependency\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as info:
        resolve_callable("gc_factory_pkg.models:build")
    message = str(info.value)
    assert "importing 'gc_factory_pkg.models' failed" in message
    assert "ModuleNotFoundError" in message and "gc_missing_dependency" in message


def test_file_not_found(tmp_path):
    with pytest.raises(UsageError, match="file not found") as info:
        resolve_callable(f"{tmp_path / 'absent.py'}:build")
    assert "absent.py" in str(info.value)


def test_missing_attribute_lists_available_names(tmp_path):
    file = write(tmp_path / "model.py", FACTORY_SOURCE)
    with pytest.raises(UsageError) as info:
        resolve_callable(f"{file}:build_modle")
    message = str(info.value)
    assert "has no attribute 'build_modle'" in message
    assert "did you mean build_model" in message
    assert "Net" in message


def test_missing_nested_attribute(tmp_path):
    file = write(tmp_path / "model.py", FACTORY_SOURCE)
    with pytest.raises(UsageError, match=r"'.*Net' has no attribute 'create'"):
        resolve_callable(f"{file}:Net.create")


def test_not_callable(tmp_path):
    file = write(tmp_path / "model.py", FACTORY_SOURCE)
    with pytest.raises(UsageError, match="names a int, which is not callable"):
        resolve_callable(f"{file}:NOT_CALLABLE")


def test_exception_while_importing_is_condensed(tmp_path):
    file = write(tmp_path / "broken.py", "import math\n\nVALUE = 1 / 0\n")
    with pytest.raises(UsageError) as info:
        resolve_callable(f"{file}:build")
    message = str(info.value)
    assert "ZeroDivisionError: division by zero" in message
    assert f"{file}:3" in message  # the line that broke
    assert "Traceback" not in message and "\n" not in message


def test_syntax_error_in_factory_file(tmp_path):
    file = write(tmp_path / "broken.py", "def build(:\n    pass\n")
    with pytest.raises(UsageError, match="SyntaxError"):
        resolve_callable(f"{file}:build")
    assert not any(name.startswith("gapcheck_factory_broken") for name in sys.modules)


def test_system_exit_at_import_is_a_usage_error(tmp_path):
    file = write(tmp_path / "script.py", "import sys\nsys.exit(4)\n")
    with pytest.raises(UsageError, match="SystemExit"):
        resolve_callable(f"{file}:build")


def test_condense_exception_without_traceback():
    assert condense_exception(ValueError("bad\nsecond line")) == "ValueError: bad"
    assert condense_exception(KeyError()) == "KeyError"
