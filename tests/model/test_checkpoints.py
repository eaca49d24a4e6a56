"""Checkpoints training tools write (timm's train.py, Lightning): what they hold besides weights loads without
running code from the file, the key the weights come from is said, and ``state_dict_key`` chooses another."""
from __future__ import annotations

import argparse
import collections
import logging
import pathlib

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from gapcheck.cli.app import main
from gapcheck.errors import CheckpointError, ExitCode, UsageError, exit_code_for
from gapcheck.groups import ModelSource
from gapcheck.model.loading import load_model
from sample_models.cnn import build_small_resnet

RESNET = ["--model", "sample_models.cnn:build_small_resnet", "--input", "x:1x3x32x32:float32", "--no-progress"]
TRIPPED: list[str] = []  # what Tripwire ran, were it ever built from a file


class Tripwire:
    """A class a checkpoint names: building it from the file (its __setstate__, its __reduce__ target) leaves a
    trace, so a test can prove the loader never ran it."""

    def __init__(self, *args):
        TRIPPED.append("init")
        self.secret = 1  # a state to BUILD from

    def __setstate__(self, state):
        TRIPPED.append("setstate")


def shifted(state: dict[str, torch.Tensor], by: float) -> dict[str, torch.Tensor]:
    """Weights that differ from a fresh model's (and from each other), so which set was loaded is observable."""
    return {k: (v + by if v.is_floating_point() else v) for k, v in state.items()}


def timm_checkpoint(path: pathlib.Path) -> tuple[dict, dict]:
    """What timm's CheckpointSaver._save writes (timm 1.0): args is train.py's argparse.Namespace."""
    model = build_small_resnet()
    state, ema = shifted(model.state_dict(), 0.5), shifted(model.state_dict(), -0.25)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.save({"epoch": 3, "arch": "resnet", "optimizer": optimizer.state_dict(), "version": 2,
                "args": argparse.Namespace(model="resnet", lr=0.1, epochs=[1, 2], mean=None), "state_dict": state,
                "state_dict_ema": ema, "metric": 71.5,
                "saver": {"checkpoint_files": [("checkpoint-3.pth.tar", 71.5)], "best_epoch": 3}}, path)
    return state, ema


def assert_weights(module: nn.Module, expected: dict[str, torch.Tensor]) -> None:
    actual = module.state_dict()
    assert all(torch.equal(actual[k], v) for k, v in expected.items())


# --- timm: args is an argparse.Namespace -----------------------------------------------------------


def test_timm_checkpoint_with_namespace_args_loads_and_says_which_weights(tmp_path, caplog):
    state, _ = timm_checkpoint(tmp_path / "ckpt.pth.tar")
    with caplog.at_level(logging.INFO, logger="gapcheck.model.loading"):
        loaded = load_model(tmp_path / "ckpt.pth.tar", build_small_resnet)
    assert loaded.state_dict_key == "state_dict" and loaded.keys.ok
    assert_weights(loaded.module, state)
    # two weight sets in the file: the one used and the other are named (a warning: the choice matters)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'state_dict'" in m and "'state_dict_ema'" in m for m in warned), warned


def test_state_dict_key_chooses_the_ema_weights(tmp_path):
    _, ema = timm_checkpoint(tmp_path / "ckpt.pth.tar")
    loaded = load_model(tmp_path / "ckpt.pth.tar", build_small_resnet, state_dict_key="state_dict_ema")
    assert loaded.state_dict_key == "state_dict_ema"
    assert_weights(loaded.module, ema)
    assert loaded.describe_weights() == "weights under key 'state_dict_ema' (the file also holds 'state_dict')"


def test_describe_weights_says_key_and_prefix(tmp_path):
    state = {f"module.{k}": v for k, v in nn.Linear(2, 3).state_dict().items()}
    torch.save({"model": {"state_dict": state}}, tmp_path / "nested.pt")
    torch.save(nn.Linear(2, 3).state_dict(), tmp_path / "plain.pt")
    nested = load_model(tmp_path / "nested.pt", lambda: nn.Linear(2, 3))
    assert nested.state_dict_key == "model/state_dict"
    assert nested.describe_weights() == "weights under key 'model'/'state_dict'; key prefix 'module.' stripped"
    assert load_model(tmp_path / "plain.pt", lambda: nn.Linear(2, 3)).describe_weights() is None


def test_describe_weights_shows_a_key_holding_a_slash_as_one_key(tmp_path):
    # The attacker review's nit: --state-dict-key "a/b" (one key) was shown as 'a'/'b', as if two keys
    torch.save({"a/b": nn.Linear(2, 3).state_dict(), "other": {"x": 1}}, tmp_path / "slash.pt")
    loaded = load_model(tmp_path / "slash.pt", lambda: nn.Linear(2, 3), state_dict_key="a/b")
    assert loaded.describe_weights() == "weights under key 'a/b'"


def test_timm_checkpoint_end_to_end(tmp_path, capsys):
    timm_checkpoint(tmp_path / "ckpt.pth.tar")
    for extra in ([], ["--state-dict-key", "state_dict_ema"]):
        code = main(["export-diff", "--checkpoint", str(tmp_path / "ckpt.pth.tar"), *RESNET, *extra])
        out = capsys.readouterr()
        assert code == 0, out.err
        assert "PASS" in out.out


def test_unknown_state_dict_key_is_exit_2_listing_the_keys(tmp_path, capsys):
    timm_checkpoint(tmp_path / "ckpt.pth.tar")
    code = main(["export-diff", "--checkpoint", str(tmp_path / "ckpt.pth.tar"), *RESNET, "--state-dict-key", "ema"])
    err = capsys.readouterr().err
    assert code == 2
    assert "no key 'ema'" in err and "'state_dict_ema'" in err and "'args'" in err
    assert "--state-dict-key" in err  # the boundary names the flag (cli/options.PARAMETER_FLAGS)


def test_state_dict_key_names_are_neutralized_and_cut(tmp_path):
    hostile, long = "evil\x1b[31m\u202e", "k" * 10_000
    torch.save({"state_dict": nn.Linear(2, 3).state_dict(), hostile: 1, long: 2}, tmp_path / "c.pt")
    with pytest.raises(UsageError) as info:
        load_model(tmp_path / "c.pt", lambda: nn.Linear(2, 3), state_dict_key="absent")
    message = info.value.message
    assert info.value.parameter == "state_dict_key" and exit_code_for(info.value) == ExitCode.USAGE
    assert "\x1b" not in message and "\u202e" not in message and "\\x1b" in message
    assert len(message) < 1000 and "'state_dict'" in message


def test_state_dict_key_that_holds_no_weights(tmp_path):
    timm_checkpoint(tmp_path / "ckpt.pth.tar")
    with pytest.raises(UsageError, match="'epoch'.*not a state dict.*'state_dict', 'state_dict_ema'"):
        load_model(tmp_path / "ckpt.pth.tar", build_small_resnet, state_dict_key="epoch")


@pytest.mark.parametrize("value", ["", "a\nb", "k" * 2000])
def test_state_dict_key_option_is_validated(value):
    with pytest.raises(UsageError, match="state dict key"):
        ModelSource(checkpoint=pathlib.Path("x.pt"), state_dict_key=value)


def test_state_dict_key_needs_a_torch_checkpoint(tmp_path):
    save_file(nn.Linear(2, 3).state_dict(), str(tmp_path / "w.safetensors"))
    for checkpoint in (tmp_path / "w.safetensors", None):
        with pytest.raises(UsageError) as info:
            load_model(checkpoint, lambda: nn.Linear(2, 3), state_dict_key="state_dict")
        assert info.value.parameter == "state_dict_key"


# --- objects the weights-only loader does not build ------------------------------------------------


def test_unknown_class_beside_the_weights_is_named_and_never_run(tmp_path, caplog):
    TRIPPED.clear()
    linear = nn.Linear(2, 3)
    torch.save({"state_dict": linear.state_dict(), "hyper_parameters": {"cfg": Tripwire(), "lr": 0.1}},
               tmp_path / "c.ckpt")
    TRIPPED.clear()
    with caplog.at_level(logging.WARNING, logger="gapcheck.model.loading"):
        loaded = load_model(tmp_path / "c.ckpt", lambda: nn.Linear(2, 3))
    assert TRIPPED == []  # the file's class was replaced, not built
    assert_weights(loaded.module, linear.state_dict())
    assert f"'hyper_parameters'/'cfg' ({__name__}.Tripwire)" in caplog.text


class TripwireDict(dict):
    """A config class filled like a dict (EasyDict, Lightning's AttributeDict): unpickling it for real calls its
    __setitem__."""

    def __setitem__(self, key, value):
        TRIPPED.append("setitem")
        super().__setitem__(key, value)


def test_dict_subclasses_and_numpy_values_read_without_their_classes(tmp_path, caplog):
    from lightning.fabric.utilities.data import AttributeDict

    linear = nn.Linear(2, 3)
    config = TripwireDict()
    dict.__setitem__(config, "sizes", [1, 2])
    top = TripwireDict()  # the weights inside a dict subclass: its items are plain tensors, so they load
    dict.update(top, {"state_dict": linear.state_dict(), "cfg": config, "opt": AttributeDict(lr=0.1),
                      "best": np.float64(0.5), "seen": np.arange(3)})
    torch.save(top, tmp_path / "c.pt")
    TRIPPED.clear()
    with caplog.at_level(logging.WARNING, logger="gapcheck.model.loading"):
        loaded = load_model(tmp_path / "c.pt", lambda: nn.Linear(2, 3))
    assert TRIPPED == [] and loaded.state_dict_key == "state_dict"
    assert_weights(loaded.module, linear.state_dict())
    for named in (f"'cfg' ({__name__}.TripwireDict, read as a plain dict or list)",
                  "'opt' (lightning.fabric.utilities.data.AttributeDict, read as", "'best' (numpy", "'seen' (numpy"):
        assert named in caplog.text


def test_legacy_format_learns_the_names_its_scan_leaves_out(tmp_path, caplog):
    # torch's own scan reads only zip checkpoints; gapcheck's opcode scan leaves out builtins/collections names
    linear = nn.Linear(2, 3)
    torch.save({"state_dict": linear.state_dict(), "seen": collections.defaultdict(list, a=[1]),
                "data": pathlib.Path("/data")}, tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    with caplog.at_level(logging.WARNING, logger="gapcheck.model.loading"):
        loaded = load_model(tmp_path / "old.pt", lambda: nn.Linear(2, 3))
    assert_weights(loaded.module, linear.state_dict())
    assert "'seen' (collections.defaultdict" in caplog.text and "'data' (pathlib.PosixPath)" in caplog.text


def test_unknown_class_inside_the_weights_is_refused_naming_where(tmp_path):
    torch.save({"state_dict": {**nn.Linear(2, 3).state_dict(), "meta": Tripwire()}}, tmp_path / "c.pt")
    TRIPPED.clear()
    with pytest.raises(CheckpointError) as info:
        load_model(tmp_path / "c.pt", lambda: nn.Linear(2, 3), strict=False)
    assert TRIPPED == [] and info.value.parameter == "unsafe_pickle"
    assert f"'state_dict'/'meta' ({__name__}.Tripwire)" in info.value.message


def test_a_stand_in_past_the_search_limit_is_refused_not_missed(tmp_path, monkeypatch):
    """Many containers before the weights (the attacker review's 2,000,005 empty lists, here past a lowered limit):
    the search for stand-ins never answers partly; a stand-in it could not reach might be inside the weights."""
    from gapcheck.model import pickled

    monkeypatch.setattr(pickled, "_MAX_WALK", 50)
    padding = {f"k{i}": [] for i in range(100)}
    torch.save({**padding, "state_dict": {**nn.Linear(2, 3).state_dict(), "meta": Tripwire()}}, tmp_path / "c.pt")
    TRIPPED.clear()
    with pytest.raises(CheckpointError, match="more than 50 objects") as info:
        load_model(tmp_path / "c.pt", lambda: nn.Linear(2, 3), strict=False)
    assert TRIPPED == [] and info.value.parameter == "unsafe_pickle"


def test_module_pickled_under_a_key_is_refused_naming_the_key(tmp_path):
    torch.save({"model": nn.Linear(2, 3), "epoch": 1}, tmp_path / "c.pt")
    with pytest.raises(CheckpointError, match="under key 'model' are a pickled torch.nn.modules.linear.Linear") as info:
        load_model(tmp_path / "c.pt", None)
    assert info.value.parameter == "unsafe_pickle"


class System:
    """Pickles as a call of os.system: torch blocks the module os outright, so no stand-in can replace it."""

    def __reduce__(self):
        import os

        return (os.system, ("true",))


def test_blocked_global_is_refused_naming_it(tmp_path):
    torch.save({"state_dict": nn.Linear(2, 3).state_dict(), "x": System()}, tmp_path / "c.pt")
    with pytest.raises(CheckpointError, match=r"posix.system.*module posix is blocked") as info:
        load_model(tmp_path / "c.pt", lambda: nn.Linear(2, 3))
    assert info.value.parameter == "unsafe_pickle"


def test_namespace_state_cannot_change_its_class(tmp_path):
    # BUILD with a "__class__" entry lands in the instance dict (see gapcheck.model.pickled.INERT_GLOBALS)
    args = argparse.Namespace(lr=0.1)
    args.__dict__["__class__"] = "x"
    torch.save({"state_dict": nn.Linear(2, 3).state_dict(), "args": args}, tmp_path / "c.pt")
    from gapcheck.model.pickled import weights_only_load

    loaded = weights_only_load(tmp_path / "c.pt")["args"]
    assert type(loaded) is argparse.Namespace and loaded.lr == 0.1


# --- Lightning's own checkpoints -------------------------------------------------------------------


def lightning_checkpoint(folder: pathlib.Path) -> tuple[pathlib.Path, dict[str, torch.Tensor]]:
    """A checkpoint Lightning's ModelCheckpoint wrote after one step; hyper-parameters hold a Namespace and a path."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    class Classifier(L.LightningModule):
        def __init__(self, args: argparse.Namespace, data: pathlib.Path, lr: float = 0.1):
            super().__init__()
            self.save_hyperparameters()
            self.model = build_small_resnet()

        def training_step(self, batch, index):
            loss = self.model(batch[0]).square().mean()
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 3, 32, 32)), batch_size=2)
    saver = ModelCheckpoint(dirpath=folder, monitor="loss")
    trainer = L.Trainer(max_steps=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[saver], default_root_dir=folder, accelerator="cpu")
    module = Classifier(argparse.Namespace(epochs=3), pathlib.Path("/data/train"))
    trainer.fit(module, data)
    return pathlib.Path(saver.best_model_path), module.model.state_dict()


def test_lightning_checkpoint_end_to_end(tmp_path, capsys, caplog):
    path, state = lightning_checkpoint(tmp_path)
    loaded = load_model(path, build_small_resnet)
    assert loaded.state_dict_key == "state_dict" and loaded.keys.stripped_prefix == "model."
    assert_weights(loaded.module, state)
    capsys.readouterr()
    with caplog.at_level(logging.WARNING, logger="gapcheck.model.loading"):
        code = main(["export-diff", "--checkpoint", str(path), *RESNET])
    out = capsys.readouterr()
    assert code == 0, out.err
    # the Namespace is built (an attribute bag), the path is not (named, beside the weights)
    assert "'hyper_parameters'/'data' (pathlib.PosixPath)" in caplog.text and "Namespace" not in caplog.text


@pytest.mark.slow
def test_timm_checkpoint_saver_end_to_end(tmp_path, capsys):
    from sample_models.zoo import torchvision_models

    try:
        with torchvision_models():
            from timm.utils import CheckpointSaver, ModelEmaV3
    except ImportError:
        pytest.skip("timm is not installed (scripts/setup_deploy_corpus.sh)")
    model = build_small_resnet()
    ema = ModelEmaV3(model, decay=0.5)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5)
    ema.update(model)
    args = argparse.Namespace(model="small_resnet", lr=0.1, epochs=1)
    saver = CheckpointSaver(model, torch.optim.SGD(model.parameters(), lr=0.1), args=args, model_ema=ema,
                            checkpoint_dir=str(tmp_path), recovery_dir=str(tmp_path))
    saver.save_checkpoint(epoch=0, metric=1.0)
    path = tmp_path / "last.pth.tar"
    assert_weights(load_model(path, build_small_resnet).module, model.state_dict())
    assert_weights(load_model(path, build_small_resnet, state_dict_key="state_dict_ema").module,
                   ema.module.state_dict())
    for extra in ([], ["--state-dict-key", "state_dict_ema"]):
        assert main(["export-diff", "--checkpoint", str(path), *RESNET, *extra]) == 0, capsys.readouterr().err
