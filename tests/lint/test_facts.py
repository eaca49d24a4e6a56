"""What a name holds, not what it is called: the classifiers behind the loop rules."""
from __future__ import annotations

import ast
from pathlib import Path

from gapcheck.lint.facts import is_loss_scaler_call, is_scaler
from gapcheck.lint.loops import Kind, classify
from gapcheck.lint.source import parse_source
from gapcheck.lint.symbols import ModuleIndex

CODE = '''
import torch
from timm.utils import NativeScaler
from sklearn.preprocessing import StandardScaler
scaler_meter = AverageMeter()
grad_scaler = torch.amp.GradScaler("cuda")
feature_scaler = StandardScaler()
loss_scaler = NativeScaler()
scaler_meter.update(1.0)
grad_scaler.update()
feature_scaler.fit(x)
loss_scaler(loss, optimizer, clip_grad=1.0)
other_scaler(loss, optimizer)
'''


def index() -> ModuleIndex:
    return ModuleIndex.build(parse_source(CODE, Path("t.py"), "t.py"))


def call_on(module: ModuleIndex, name: str) -> ast.Call:
    return next(c for c in module.calls if ast.unparse(c).startswith(name + "(") or ast.unparse(c).startswith(name + "."))


def test_scaler_by_value_not_by_word() -> None:
    module = index()
    assert not is_scaler(module, ast.Name("scaler_meter"))  # an AverageMeter of the loss scale
    assert is_scaler(module, ast.Name("grad_scaler"))
    assert not is_scaler(module, ast.Name("feature_scaler"))  # sklearn
    assert is_scaler(module, ast.Name("scaler"))  # built where gapcheck cannot see: the name decides
    assert classify(module, call_on(module, "scaler_meter")) == ()
    assert classify(module, call_on(module, "grad_scaler")) == (Kind.SCALER_UPDATE,)


def test_loss_scaler_objects() -> None:
    module = index()
    assert is_loss_scaler_call(module, call_on(module, "loss_scaler"))
    assert is_loss_scaler_call(module, call_on(module, "other_scaler"))  # unbound, given a loss and an optimizer
    assert classify(module, call_on(module, "loss_scaler")) == (Kind.BACKWARD, Kind.SCALER_STEP)
    assert not is_loss_scaler_call(module, call_on(module, "feature_scaler"))


def test_objects_of_project_classes_are_followed_into_call_and_methods(tmp_path: Path) -> None:
    from gapcheck.lint.symbols import Program

    (tmp_path / "amp.py").write_text("class Wrapper:\n    def backward(self, loss):\n        loss.backward()\n")
    (tmp_path / "train.py").write_text(
        "from amp import Wrapper\n\n\nclass NativeScaler:\n    def __call__(self, loss, optimizer):\n"
        "        pass\n\n\nloss_scaler = NativeScaler()\nwrapper = Wrapper()\nloss_scaler(loss, optimizer)\n"
        "wrapper.backward(loss)\nunknown(loss)\n")
    program = Program([tmp_path])
    from gapcheck.lint.source import read_source

    module = program.add(read_source(tmp_path / "train.py", "train.py"))
    calls = {ast.unparse(c.func): c for c in module.calls}
    called = program.resolve(module, calls["loss_scaler"])
    assert called is not None and called[1].name == "__call__"
    method = program.resolve(module, calls["wrapper.backward"])
    assert method is not None and method[1].name == "backward" and method[0].source.path.name == "amp.py"
    assert program.resolve(module, calls["unknown"]) is None
