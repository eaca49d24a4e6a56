"""load_model: every checkpoint shape gapcheck accepts, and every hostile file it refuses."""
from __future__ import annotations

import collections
import io
import logging
import pickle
import random
import struct
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from gapcheck.errors import CheckpointError, ExitCode, UsageError, exit_code_for
from gapcheck.model.loading import KeyReport, LoadedModel, load_model


class TinyNet(nn.Module):
    def __init__(self, hidden: int = 4):
        super().__init__()
        self.conv = nn.Conv2d(3, 2, kernel_size=1)
        self.bn = nn.BatchNorm2d(2)
        self.fc = nn.Linear(2, hidden)

    def forward(self, x):
        return self.fc(self.bn(self.conv(x)).mean(dim=(2, 3)))


def trained_state() -> dict[str, torch.Tensor]:
    """A state dict whose values differ from a fresh TinyNet, so loading is observable."""
    torch.manual_seed(123)
    net = TinyNet()
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.add_(1.0)
        net.bn.running_mean.fill_(0.5)
    return net.state_dict()


def assert_weights_equal(module: nn.Module, expected: dict[str, torch.Tensor]) -> None:
    actual = module.state_dict()
    assert set(actual) == set(expected)
    for key, value in expected.items():
        assert torch.equal(actual[key], value), key


def single_line(exc: BaseException) -> str:
    message = exc.message if hasattr(exc, "message") else str(exc)
    assert "\n" not in message and "Traceback" not in str(exc)
    return message


# --- accepted checkpoints ------------------------------------------------------------------------


def test_plain_state_dict(tmp_path):
    state = trained_state()
    torch.save(state, tmp_path / "ckpt.pt")
    loaded = load_model(tmp_path / "ckpt.pt", TinyNet)
    assert isinstance(loaded, LoadedModel)
    assert loaded.kind == "state_dict"
    assert loaded.source == str(tmp_path / "ckpt.pt")
    assert loaded.keys == KeyReport((), (), (), None) and loaded.keys.ok
    assert_weights_equal(loaded.module, state)


@pytest.mark.parametrize("nest_key", ["state_dict", "model", "model_state_dict"])
def test_state_dict_nested_in_training_checkpoint(tmp_path, nest_key):
    state = trained_state()
    torch.save({nest_key: state, "epoch": 7, "optimizer": {"lr": 0.1}}, tmp_path / "ckpt.pth")
    loaded = load_model(tmp_path / "ckpt.pth", TinyNet)
    assert_weights_equal(loaded.module, state)


def test_checkpoint_with_scalar_tensor_metadata_still_uses_nested_weights(tmp_path):
    state = trained_state()
    torch.save({"model": state, "best_metric": torch.tensor(0.9)}, tmp_path / "ckpt.pt")
    assert_weights_equal(load_model(tmp_path / "ckpt.pt", TinyNet).module, state)


def test_lightning_checkpoint_with_model_prefix(tmp_path):
    state = trained_state()
    torch.save({"state_dict": {f"model.{k}": v for k, v in state.items()}, "epoch": 1}, tmp_path / "l.ckpt")
    loaded = load_model(tmp_path / "l.ckpt", TinyNet)
    assert loaded.keys.stripped_prefix == "model."
    assert_weights_equal(loaded.module, state)


def test_ddp_module_prefix_is_stripped(tmp_path):
    state = trained_state()
    torch.save({f"module.{k}": v for k, v in state.items()}, tmp_path / "ddp.pt")
    loaded = load_model(tmp_path / "ddp.pt", TinyNet)
    assert loaded.keys.stripped_prefix == "module."
    assert loaded.keys.ok
    assert_weights_equal(loaded.module, state)


def test_ddp_around_torch_compile_prefixes_are_stripped(tmp_path):
    state = trained_state()
    torch.save({f"module._orig_mod.{k}": v for k, v in state.items()}, tmp_path / "ddp.pt")
    loaded = load_model(tmp_path / "ddp.pt", TinyNet)
    assert loaded.keys.stripped_prefix == "module._orig_mod."
    assert_weights_equal(loaded.module, state)


def test_torch_compile_on_a_submodule_is_unwrapped(tmp_path):
    state = trained_state()
    torch.save({k.replace("fc.", "fc._orig_mod."): v for k, v in state.items()}, tmp_path / "c.pt")
    loaded = load_model(tmp_path / "c.pt", TinyNet)
    assert loaded.keys.ok and loaded.keys.stripped_prefix
    assert_weights_equal(loaded.module, state)


def test_model_prefix_kept_when_the_model_really_has_a_model_submodule(tmp_path):
    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = TinyNet()

    state = Wrapper().state_dict()
    torch.save(state, tmp_path / "w.pt")
    loaded = load_model(tmp_path / "w.pt", Wrapper)
    assert loaded.keys.stripped_prefix is None and loaded.keys.ok
    assert_weights_equal(loaded.module, state)


def test_legacy_torch_save_format(tmp_path):
    state = trained_state()
    torch.save(state, tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    assert_weights_equal(load_model(tmp_path / "old.pt", TinyNet).module, state)


def test_safetensors_state_dict(tmp_path):
    state = {k: v.contiguous() for k, v in trained_state().items()}
    save_file({f"module.{k}": v for k, v in state.items()}, str(tmp_path / "w.safetensors"))
    loaded = load_model(tmp_path / "w.safetensors", TinyNet)
    assert loaded.kind == "safetensors"
    assert loaded.keys.stripped_prefix == "module."
    assert_weights_equal(loaded.module, state)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_torchscript_archive_needs_no_factory_and_is_detected_by_content(tmp_path):
    scripted = torch.jit.script(TinyNet().eval())
    path = tmp_path / "exported.bin"  # not a .pt extension on purpose
    torch.jit.save(scripted, str(path))
    loaded = load_model(path, None)
    assert loaded.kind == "torchscript" and loaded.keys is None
    assert loaded.was_training is False
    x = torch.randn(1, 3, 4, 4)
    assert torch.equal(loaded.module(x), scripted(x))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_torchscript_with_factory_uses_the_archive(tmp_path, caplog):
    torch.jit.save(torch.jit.script(TinyNet()), str(tmp_path / "ts.pt"))
    with caplog.at_level(logging.WARNING, logger="gapcheck.model.loading"):
        loaded = load_model(tmp_path / "ts.pt", TinyNet)
    assert loaded.kind == "torchscript"
    assert "factory is not used" in caplog.text


def test_factory_only_reports_training_mode():
    loaded = load_model(None, TinyNet)
    assert loaded.kind == "factory_only" and loaded.source is None and loaded.keys is None
    assert loaded.was_training is True
    assert load_model(None, lambda: TinyNet().eval()).was_training is False


def test_factory_kwargs_are_passed(tmp_path):
    loaded = load_model(None, TinyNet, factory_kwargs={"hidden": 9})
    assert loaded.module.fc.out_features == 9


def test_factory_given_as_file_path_spec(tmp_path):
    factory_file = tmp_path / "factory.py"
    factory_file.write_text(
        textwrap.dedent(
            """
            from torch import nn

            def build(width=3):
                return nn.Sequential(nn.Linear(2, width), nn.ReLU())
            """
        )
    )
    state = nn.Sequential(nn.Linear(2, 3), nn.ReLU()).state_dict()
    torch.save(state, tmp_path / "ckpt.pt")
    loaded = load_model(tmp_path / "ckpt.pt", f"{factory_file}:build")
    assert_weights_equal(loaded.module, state)


# --- pickled modules -----------------------------------------------------------------------------


def test_pickled_module_is_refused_with_the_risk_explained(tmp_path):
    torch.save(nn.Sequential(nn.Linear(2, 3)), tmp_path / "whole.pt")
    with pytest.raises(CheckpointError) as info:
        load_model(tmp_path / "whole.pt", None)
    text = str(info.value)
    assert info.value.parameter == "unsafe_pickle" and "--" not in text  # the CLI boundary names the flag
    assert "arbitrary" in text and "execute" in text
    assert "torch.nn.modules.container.Sequential" in text
    assert exit_code_for(info.value) == ExitCode.USAGE
    single_line(info.value)


def test_pickled_module_loads_with_unsafe_flag_and_warns(tmp_path, caplog):
    model = nn.Sequential(nn.Linear(2, 3))
    torch.save(model, tmp_path / "whole.pt")
    with caplog.at_level(logging.WARNING, logger="gapcheck.model.loading"):
        loaded = load_model(tmp_path / "whole.pt", None, unsafe_pickle=True)
    assert loaded.kind == "pickled_module" and loaded.keys is None
    assert "weights_only=False" in caplog.text
    assert_weights_equal(loaded.module, model.state_dict())


def test_pickled_module_nested_in_a_dict_with_unsafe_flag(tmp_path):
    model = nn.Sequential(nn.Linear(2, 3))
    torch.save({"model": model, "epoch": 3}, tmp_path / "whole.pt")
    loaded = load_model(tmp_path / "whole.pt", None, unsafe_pickle=True)
    assert loaded.kind == "pickled_module"


def test_legacy_format_pickled_module_is_refused(tmp_path):
    torch.save(nn.Linear(2, 3), tmp_path / "whole.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match="refusing to unpickle.*torch.nn.modules.linear.Linear"):
        load_model(tmp_path / "whole.pt", None)


# --- keys that do not fit ------------------------------------------------------------------------


def mismatched_state() -> dict[str, torch.Tensor]:
    state = trained_state()
    del state["bn.running_var"]
    state["head.weight"] = torch.zeros(1)
    state["fc.weight"] = torch.zeros(8, 2)
    return state


def test_key_mismatches_are_listed_by_name_when_strict(tmp_path):
    torch.save(mismatched_state(), tmp_path / "ckpt.pt")
    with pytest.raises(CheckpointError) as info:
        load_model(tmp_path / "ckpt.pt", TinyNet)
    message = single_line(info.value)
    assert "bn.running_var" in message  # missing
    assert "head.weight" in message  # unexpected
    assert "fc.weight checkpoint [8, 2] vs model [4, 2]" in message  # shape mismatch
    assert exit_code_for(info.value) == ExitCode.USAGE


def test_non_strict_loads_what_fits_and_reports_the_rest(tmp_path, caplog):
    state = mismatched_state()
    torch.save(state, tmp_path / "ckpt.pt")
    with caplog.at_level(logging.WARNING, logger="gapcheck.model.loading"):
        loaded = load_model(tmp_path / "ckpt.pt", TinyNet, strict=False)
    report = loaded.keys
    assert not report.ok
    assert report.missing == ("bn.running_var",)
    assert report.unexpected == ("head.weight",)
    assert report.shape_mismatches == (("fc.weight", (8, 2), (4, 2)),)
    assert torch.equal(loaded.module.conv.weight, state["conv.weight"])  # what fits was loaded
    assert loaded.module.fc.weight.shape == (4, 2)
    assert "loaded partially" in caplog.text


def test_long_key_lists_are_shortened_with_a_count(tmp_path):
    torch.save({f"extra.{i}": torch.zeros(1) for i in range(40)} | trained_state(), tmp_path / "ckpt.pt")
    with pytest.raises(CheckpointError, match=r"unexpected in checkpoint \(40\): .*\.\.\. and 20 more"):
        load_model(tmp_path / "ckpt.pt", TinyNet)


def test_unrelated_state_dict_lists_both_sides(tmp_path):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "ckpt.pt")
    with pytest.raises(CheckpointError) as info:
        load_model(tmp_path / "ckpt.pt", TinyNet)
    assert "weights" in str(info.value) and "conv.weight" in str(info.value)


def test_state_dict_without_factory_asks_for_the_factory_parameter(tmp_path):
    torch.save(trained_state(), tmp_path / "ckpt.pt")
    with pytest.raises(UsageError, match="a model factory is required") as info:
        load_model(tmp_path / "ckpt.pt", None)
    assert info.value.parameter == "factory"  # the CLI boundary adds "(see --model)"
    assert exit_code_for(info.value) == ExitCode.USAGE


def test_nothing_to_load():
    with pytest.raises(UsageError, match="nothing to load"):
        load_model(None, None)


def test_factory_that_raises_is_condensed():
    def broken_factory():
        raise ValueError("hidden size must be even\nmore detail")

    with pytest.raises(UsageError) as info:
        load_model(None, broken_factory)
    message = single_line(info.value)
    assert "ValueError: hidden size must be even" in message
    assert "test_loading.py" in message  # where it broke


def test_factory_returning_a_non_module():
    with pytest.raises(UsageError, match="returned a dict, not a torch.nn.Module"):
        load_model(None, lambda: {"fc": 1})


def test_bad_factory_spec_is_a_usage_error(tmp_path):
    torch.save(trained_state(), tmp_path / "ckpt.pt")
    with pytest.raises(UsageError, match="module 'gc_no_such_module' not found"):
        load_model(tmp_path / "ckpt.pt", "gc_no_such_module:build")


# --- hostile files -------------------------------------------------------------------------------


def craft_torch_zip(path: Path, declared_numel: int, data_bytes: int = 16) -> None:
    """A torch.save-style archive whose pickle declares a storage of ``declared_numel`` elements."""

    class StorageMarker:
        pass

    class FakeTensor:
        def __reduce__(self):
            rebuild_args = (StorageMarker(), 0, (declared_numel,), (1,), False, collections.OrderedDict())
            return (torch._utils._rebuild_tensor_v2, rebuild_args)

    class StoragePickler(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, StorageMarker):
                return ("storage", torch.FloatStorage, "0", "cpu", declared_numel)
            return None

    buffer = io.BytesIO()
    StoragePickler(buffer, protocol=2).dump({"fc.weight": FakeTensor()})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", buffer.getvalue())
        archive.writestr("archive/byteorder", "little")
        archive.writestr("archive/data/0", b"\0" * data_bytes)
        archive.writestr("archive/version", "3\n")


def patch_central_directory_size(path: Path, new_size: int) -> None:
    """Rewrite the uncompressed size every central-directory record declares."""
    data = bytearray(path.read_bytes())
    start = 0
    while (index := data.find(b"PK\x01\x02", start)) != -1:
        data[index + 24 : index + 28] = struct.pack("<I", new_size)
        start = index + 4
    path.write_bytes(bytes(data))


def hostile(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.pt"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "random_bytes":
        path.write_bytes(b"GARBAGE!" + random.Random(0).randbytes(4096))  # fixed, so never a lucky header
    elif kind == "truncated_zip":
        torch.save(trained_state(), path)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif kind == "corrupt_inner_record":
        torch.save(trained_state(), path)
        data = bytearray(path.read_bytes())
        pkl_at = data.find(b"data.pkl") + 8 + 30  # scribble over the pickle's opening bytes
        data[pkl_at : pkl_at + 40] = b"\xff" * 40
        path.write_bytes(bytes(data))
    elif kind == "list":
        torch.save([torch.zeros(1), 2], path)
    elif kind == "string":
        torch.save("definitely not weights", path)
    elif kind == "tensor":
        torch.save(torch.zeros(3, 3), path)
    elif kind == "dict_without_tensors":
        torch.save({"epoch": 3, "lr": 0.1}, path)
    elif kind == "huge_declared_storage":
        craft_torch_zip(path, declared_numel=2**40)
    elif kind == "huge_declared_zip_entry":
        torch.save(trained_state(), path)
        patch_central_directory_size(path, 2**31 - 1)
    elif kind == "zip_without_pickle":
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("readme.txt", "hello")
    elif kind == "plain_pickle":
        path.write_bytes(pickle.dumps({"a": 1}, protocol=4))
    elif kind == "huge_safetensors_header":
        save_file({"w": torch.ones(3)}, str(path))
        path.write_bytes(struct.pack("<Q", 2**60) + path.read_bytes()[8:])
    elif kind == "truncated_safetensors":
        save_file({"w": torch.ones(64)}, str(path))
        path.write_bytes(path.read_bytes()[:-16])
    else:  # pragma: no cover - a typo in the parametrize list
        raise AssertionError(kind)
    return path


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("empty", "empty"),
        ("random_bytes", "not a PyTorch checkpoint"),
        ("truncated_zip", "corrupt or truncated"),
        ("corrupt_inner_record", "cannot read checkpoint"),
        ("list", "holds a list, not a state dict"),
        ("string", "holds a str, not a state dict"),
        ("tensor", "holds a single tensor"),
        ("dict_without_tensors", "dict without tensors.*epoch"),
        ("huge_declared_storage", "record size|does not match"),
        ("huge_declared_zip_entry", "declares 2147483647 bytes"),
        ("zip_without_pickle", "not a PyTorch checkpoint"),
        ("plain_pickle", "refusing to unpickle"),
        ("huge_safetensors_header", "header declares"),
        ("truncated_safetensors", "cannot read safetensors"),
    ],
)
def test_hostile_checkpoints_fail_with_one_line_reason(tmp_path, kind, reason):
    path = hostile(tmp_path, kind)
    with pytest.raises(CheckpointError, match=reason) as info:
        load_model(path, TinyNet)
    single_line(info.value)
    assert exit_code_for(info.value) == ExitCode.USAGE


@pytest.mark.parametrize("kind", ["random_bytes", "truncated_zip", "huge_declared_storage", "zip_without_pickle"])
def test_hostile_checkpoints_stay_refused_with_unsafe_pickle(tmp_path, kind):
    with pytest.raises(CheckpointError):
        load_model(hostile(tmp_path, kind), TinyNet, unsafe_pickle=True)


def test_missing_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        load_model(tmp_path / "absent.pt", TinyNet)


def test_directory_is_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="not a file"):
        load_model(tmp_path, TinyNet)


def test_non_tensor_value_for_a_tensor_key(tmp_path):
    state = dict(trained_state())
    state["fc.bias"] = [1.0, 2.0, 3.0, 4.0]
    torch.save(state, tmp_path / "ckpt.pt")
    with pytest.raises(CheckpointError, match="missing from checkpoint.*fc.bias"):
        load_model(tmp_path / "ckpt.pt", TinyNet)
    loaded = load_model(tmp_path / "ckpt.pt", TinyNet, strict=False)
    assert loaded.keys.missing == ("fc.bias",)


def test_key_report_describe_when_ok():
    assert KeyReport((), (), (), None).describe() == "all keys match"


def test_pickled_module_with_protocol_4_names_its_class(tmp_path):
    # Protocol 4 references classes with STACK_GLOBAL and memoized strings, not GLOBAL.
    torch.save(nn.Sequential(nn.ReLU()), tmp_path / "whole.pt", pickle_protocol=4)
    with pytest.raises(CheckpointError, match="torch.nn.modules.activation.ReLU"):
        load_model(tmp_path / "whole.pt", None)


def test_bytes_that_only_start_like_a_pickle(tmp_path):
    path = tmp_path / "fake.pt"
    path.write_bytes(b"\x80\x02" + random.Random(1).randbytes(512))
    with pytest.raises(CheckpointError, match="not a valid PyTorch pickle|cannot read checkpoint"):
        load_model(path, TinyNet, unsafe_pickle=True)


def build_tiny_gpt2() -> nn.Module:
    import transformers

    config = transformers.GPT2Config(vocab_size=100, n_positions=16, n_embd=16, n_layer=1, n_head=2, use_cache=False)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).eval()


def test_a_hugging_face_checkpoint_with_tied_weights_loads_strictly(tmp_path):
    """save_pretrained stores the tied lm_head.weight once (as wte); strict loading must not call it missing."""
    torch.manual_seed(1)
    trained = build_tiny_gpt2()
    trained.save_pretrained(tmp_path / "ck")
    loaded = load_model(tmp_path / "ck" / "model.safetensors", f"{__name__}:build_tiny_gpt2")
    model = loaded.module
    assert loaded.keys is not None and loaded.keys.ok, loaded.keys.describe()
    assert torch.equal(model.transformer.wte.weight, trained.transformer.wte.weight)
    assert model.lm_head.weight is model.transformer.wte.weight  # still tied, so it holds the checkpoint's values


def test_a_missing_key_that_is_not_tied_is_still_missing_and_names_the_parameter(tmp_path):
    state = build_tiny_gpt2().state_dict()
    del state["transformer.ln_f.weight"]
    save_file({k: v.contiguous() for k, v in state.items() if k != "lm_head.weight"}, str(tmp_path / "w.safetensors"))
    with pytest.raises(CheckpointError, match="missing from checkpoint.*transformer.ln_f.weight") as raised:
        load_model(tmp_path / "w.safetensors", f"{__name__}:build_tiny_gpt2")
    assert raised.value.parameter == "strict" and "lm_head.weight" not in str(raised.value)
