"""The guards package: a light import, every public name resolves, every code is registered and documented."""
import subprocess
import sys

import pytest

from gapcheck import guards
from gapcheck.codes import all_codes, is_documented, lookup


def test_from_gapcheck_import_guards_imports_no_torch():
    code = ("import sys; from gapcheck import guards; import gapcheck.guards.pytest_plugin; "
            "print(sorted(m for m in ('torch', 'numpy', 'onnxruntime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", guards.__all__)
def test_every_public_name_resolves(name):
    assert getattr(guards, name) is not None


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError):
        guards.no_such_guard  # noqa: B018


def test_every_guard_error_is_a_gapcheck_error_with_exit_code_1():
    from gapcheck.errors import GapcheckError

    errors = [getattr(guards, n) for n in guards.__all__ if n.endswith("Error")]
    assert len(errors) == 10
    assert all(issubclass(e, guards.GuardError) and issubclass(e, GapcheckError) and e.exit_code == 1 for e in errors)


def test_guards_codes_are_registered_and_documented():
    codes = [c for c in all_codes() if c.family == "guards"]
    assert len(codes) == 15 and all(is_documented(c) for c in codes)
    assert lookup("GUARDS_GRAD_NONFINITE").code == "guards_grad_nonfinite"


def test_gapcheck_explain_covers_the_guards_codes():
    from gapcheck.cli.app import main

    assert main(["explain", "guards_bn_pollution"]) == 0
