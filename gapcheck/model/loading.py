"""Load a model safely: a state dict, safetensors or TorchScript archive, plus a factory.

Every checkpoint is treated as hostile. ``torch.load`` always runs with
``weights_only=True``; a file that needs full unpickling (a pickled ``nn.Module``)
is refused with an explanation unless the caller opts in with ``unsafe_pickle``.
The file format is detected from its bytes, never from its extension. Key
mismatches are listed by name: an error when ``strict``, a :class:`KeyReport`
the caller turns into findings otherwise — never silently ignored.
"""
from __future__ import annotations

import logging
import pickle
import struct
import warnings
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gapcheck.errors import CheckpointError, UsageError, one_line
from gapcheck.limits import check_input_file, check_zip_entry
from gapcheck.model.factory import condense_exception, resolve_callable
from gapcheck.model.pickle_scan import pickled_globals
from gapcheck.model.pickled import (
    StandIn,
    StandInLoad,
    describe_stand_ins,
    load_with_stand_ins,
    unsafe_globals,
    weights_only_load,
)

logger = logging.getLogger(__name__)

# Where training frameworks nest the weights inside a checkpoint dict, most specific first.
NESTED_STATE_DICT_KEYS = ("state_dict", "model_state_dict", "model", "module")
# Prefixes wrappers add to every key: DDP/DataParallel, torch.compile, Lightning's `self.model`.
WRAPPER_PREFIXES = ("module.", "_orig_mod.", "model.")
_ZIP_MAGIC = b"PK\x03\x04"
_MAX_NAMES_IN_MESSAGE = 20
_MAX_KEY_CHARS = 80  # a key named in a message (keys come from the file: a megabyte-long key must not fill a screen)
# what the weights may be: a dict of tensors, a module unpickled with unsafe_pickle, a stand-in (refused, named)
_WEIGHT_HOLDERS = (Mapping, torch.nn.Module, StandIn)


@dataclass(frozen=True)
class KeyReport:
    """How a checkpoint's keys matched the model's state dict."""

    missing: tuple[str, ...]
    unexpected: tuple[str, ...]
    shape_mismatches: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]  # (key, checkpoint, model)
    stripped_prefix: str | None

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.shape_mismatches)

    def describe(self) -> str:
        """One line per problem family, every key named (long lists shortened with a count)."""
        parts = []
        if self.missing:
            parts.append(f"missing from checkpoint ({len(self.missing)}): {_name_list(self.missing)}")
        if self.unexpected:
            parts.append(f"unexpected in checkpoint ({len(self.unexpected)}): {_name_list(self.unexpected)}")
        if self.shape_mismatches:
            shown = [
                f"{key} checkpoint {list(ckpt)} vs model {list(model)}"
                for key, ckpt, model in self.shape_mismatches[:_MAX_NAMES_IN_MESSAGE]
            ]
            more = len(self.shape_mismatches) - len(shown)
            parts.append(
                f"shape mismatches ({len(self.shape_mismatches)}): {', '.join(shown)}"
                + (f", ... and {more} more" if more > 0 else "")
            )
        return "; ".join(parts) if parts else "all keys match"


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to run, and how it was obtained."""

    module: torch.nn.Module
    kind: str  # "state_dict" | "safetensors" | "torchscript" | "pickled_module" | "factory_only"
    source: str | None  # the checkpoint path, or None for factory_only
    keys: KeyReport | None  # None when no state dict was matched against a factory's model
    was_training: bool  # module.training as loaded/built; the caller decides about eval()
    # where in the checkpoint the weights were ("state_dict", "model/state_dict"); None: the file is the state dict
    state_dict_key: str | None = None
    other_weights: tuple[str, ...] = ()  # other top-level keys holding weights ("'state_dict_ema'"), quoted as shown
    # state_dict_key as shown to a user: each key quoted, list positions in brackets ("'a/b'", "[0]/'model'"); the
    # joined key above cannot tell a key holding "/" from two keys, nor the int 0 from the string "0"
    state_dict_shown: str | None = None

    def describe_weights(self) -> str | None:
        """Which weights of the file were loaded, for a report's info line (None: the file is one plain state dict
        whose keys matched as they are)."""
        parts = []
        if self.state_dict_key is not None:
            shown = self.state_dict_shown or _shown_path(tuple(self.state_dict_key.split("/")))
            also = f" (the file also holds {_name_list(self.other_weights)})" if self.other_weights else ""
            parts.append(f"weights under key {shown}{also}")
        if self.keys is not None and self.keys.stripped_prefix:
            parts.append(f"key prefix {self.keys.stripped_prefix!r} stripped")
        return "; ".join(parts) or None


def load_model(
    checkpoint: str | Path | None,
    factory: str | Callable[..., Any] | None,
    *,
    unsafe_pickle: bool = False,
    strict: bool = True,
    factory_kwargs: dict | None = None,
    state_dict_key: str | None = None,
) -> LoadedModel:
    """Load ``checkpoint`` (or just build ``factory``'s model when it is None). ``state_dict_key``: the top-level key
    of the checkpoint dict that holds the weights (default: the first of :data:`NESTED_STATE_DICT_KEYS` present)."""
    if checkpoint is None:
        if factory is None:
            raise UsageError("nothing to load: give a checkpoint, a factory, or both")
        if state_dict_key is not None:
            raise UsageError("a state dict key names weights inside a checkpoint: give the checkpoint too",
                             parameter="state_dict_key")
        module = _build_model(factory, factory_kwargs)
        return LoadedModel(module, "factory_only", None, None, module.training)

    path = _check_file(Path(checkpoint))
    source = str(path)
    file_format = _detect_format(path)
    logger.debug("checkpoint %s detected as %s", path, file_format)

    if state_dict_key is not None and file_format in ("torchscript", "safetensors"):
        raise UsageError(f"{path} is a {file_format} file, which holds one set of weights under no key: leave the "
                         "state dict key out", parameter="state_dict_key")
    if file_format == "torchscript":
        if factory is not None:
            logger.warning("%s is a TorchScript archive, which holds its own model: the factory is not used", path)
        module = _load_torchscript(path)
        return LoadedModel(module, "torchscript", source, None, module.training)

    others: tuple[str, ...] = ()
    if file_format == "safetensors":
        state_dict: Any = _load_safetensors(path)
        kind, key, shown = "safetensors", None, None
    else:
        state_dict, trail, others = _checkpoint_weights(path, unsafe_pickle, state_dict_key)
        key, shown = "/".join(str(step) for step in trail) or None, _shown_path(trail) or None
        kind = "state_dict"
    if isinstance(state_dict, torch.nn.Module):  # a whole model (or {"model": <module>}) loaded unsafely
        return _pickled_module(state_dict, factory, source)
    state_dict = _extract_state_dict(state_dict, path)

    if factory is None:
        raise UsageError(
            f"{path} holds a state dict ({len(state_dict)} entries) but no model to load it into: a model factory "
            "is required (e.g. mypkg.models:build_model or path/to/model.py:Net)",
            parameter="factory",
        )
    module = _build_model(factory, factory_kwargs)
    report = _load_into(module, state_dict, strict=strict, source=path)
    return LoadedModel(module, kind, source, report, module.training, key, others, shown)


# --- the factory ---------------------------------------------------------------------------------


def _build_model(factory: str | Callable[..., Any], factory_kwargs: dict | None) -> torch.nn.Module:
    build = resolve_callable(factory) if isinstance(factory, str) else factory
    if not callable(build):
        raise UsageError(f"factory {factory!r} is not callable")
    name = factory if isinstance(factory, str) else getattr(build, "__qualname__", repr(build))
    try:
        module = build(**(factory_kwargs or {}))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code may raise anything
        raise UsageError(f"factory {name} raised {condense_exception(exc)}") from None
    if not isinstance(module, torch.nn.Module):
        raise UsageError(f"factory {name} returned a {type(module).__name__}, not a torch.nn.Module")
    return module


def _pickled_module(module: torch.nn.Module, factory: object, source: str) -> LoadedModel:
    if factory is not None:
        logger.warning("%s holds a whole pickled model: the factory is not used", source)
    return LoadedModel(module, "pickled_module", source, None, module.training)


# --- reading files -------------------------------------------------------------------------------


def _check_file(path: Path) -> Path:
    return check_input_file(path, "checkpoint", CheckpointError)


def _detect_format(path: Path) -> str:
    """"torchscript", "torch_zip", "safetensors" or "torch_legacy", from the file's bytes."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(9)
    if head.startswith(_ZIP_MAGIC):
        return _inspect_zip(path, size)
    if len(head) == 9 and head[8:9] == b"{":
        (header_len,) = struct.unpack("<Q", head[:8])
        if header_len > size - 8:
            raise CheckpointError(
                f"corrupt safetensors file {path}: header declares {header_len} bytes but the file has {size}"
            )
        return "safetensors"
    if head[:1] == b"\x80":  # pickle protocol marker: torch.save's pre-1.6 (legacy) format
        return "torch_legacy"
    raise CheckpointError(
        f"{path} is not a PyTorch checkpoint, safetensors file or TorchScript archive "
        f"(unrecognised first bytes {head[:8].hex()})"
    )


def _inspect_zip(path: Path, size: int) -> str:
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise CheckpointError(f"corrupt or truncated checkpoint archive {path}: {exc}") from None
    names = [info.filename for info in infos]
    # Refuse declared sizes that cannot be true before anything allocates memory for them.
    for info in infos:
        check_zip_entry(info, size, f"checkpoint archive {path}", CheckpointError)
    if any("/code/" in name for name in names) and any(name.endswith("constants.pkl") for name in names):
        return "torchscript"
    if any(name.endswith("data.pkl") for name in names):
        return "torch_zip"
    raise CheckpointError(
        f"{path} is a zip archive but not a PyTorch checkpoint (no data.pkl inside; entries: {_name_list(names)})"
    )


def _load_torchscript(path: Path) -> torch.nn.Module:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript is deprecated, still widely shipped
            return torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError/ValueError/... for bad archives
        raise CheckpointError(f"cannot load TorchScript archive {path}: {one_line(exc)}") from None


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device="cpu")
    except Exception as exc:  # noqa: BLE001 - SafetensorError is a rust-side exception type
        raise CheckpointError(f"cannot read safetensors file {path}: {one_line(exc)}") from None


_RISK = "Unpickling runs code from the file, so a malicious checkpoint can execute arbitrary commands on this machine."
_HINT = ("if you trust where this file came from, allow unpickling it (unsafe_pickle=True); "
         "better, save model.state_dict() and give the model's factory")


def _torch_load(path: Path, unsafe_pickle: bool) -> tuple[Any, StandInLoad | None]:
    """The checkpoint's object, and whether classes in it were replaced by stand-ins (:mod:`gapcheck.model.pickled`):
    weights-only, with the inert classes allowed; else with stand-ins; else unpickled (``unsafe_pickle``) or refused."""
    try:
        return weights_only_load(path), None
    except pickle.UnpicklingError as exc:
        weights_only_error = exc
    except EOFError:
        raise CheckpointError(f"checkpoint {path} is truncated (unexpected end of file)") from None
    except MemoryError:
        raise CheckpointError(f"checkpoint {path} declares more data than fits in memory") from None
    except Exception as exc:  # noqa: BLE001 - corrupt archives raise RuntimeError, ValueError, KeyError, ...
        raise CheckpointError(f"cannot read checkpoint {path}: {one_line(exc)}") from None

    # weights_only refused something: either the file pickles Python objects, or it is not a pickle.
    globals_found = pickled_globals(path)
    if globals_found is None:
        raise CheckpointError(
            f"cannot read checkpoint {path}: not a valid PyTorch pickle ({one_line(weights_only_error)})"
        )
    if unsafe_pickle:
        return _unsafe_load(path), None
    standing = load_with_stand_ins(path, unsafe_globals(path, globals_found))
    if standing is not None:
        return standing.obj, standing
    if globals_found:
        shown = ", ".join(globals_found[:5]) + (f" and {len(globals_found) - 5} more" if len(globals_found) > 5 else "")
        raise CheckpointError(
            f"refusing to unpickle {path}: it holds pickled Python objects ({shown}) that the safe (weights-only) "
            f"loader does not build ({_weights_only_reason(weights_only_error)}). {_RISK}",
            hint=_HINT, parameter="unsafe_pickle",
        )
    raise CheckpointError(
        f"refusing to unpickle {path}: the safe (weights-only) loader rejected it "
        f"({_weights_only_reason(weights_only_error)}). {_RISK}",
        hint=_HINT, parameter="unsafe_pickle",
    )


def _unsafe_load(path: Path) -> Any:
    logger.warning(
        "unpickling %s with weights_only=False (unsafe_pickle): this runs code from the file; only do it for trusted files",
        path,
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # The caller opted in explicitly (unsafe_pickle), and it was logged above.
            return torch.load(path, map_location="cpu", weights_only=False)  # gapcheck: ignore[GC801] -- opt-in
    except Exception as exc:  # noqa: BLE001 - unpickling can fail in arbitrary ways (missing classes, ...)
        raise CheckpointError(
            f"cannot unpickle {path}: {one_line(exc)}",
            hint="a pickled model needs its classes importable under the same module names as when it was saved",
        ) from None


def _weights_only_reason(exc: BaseException) -> str:
    """The one informative line inside torch's long weights-only refusal."""
    text = str(exc)
    marker = "WeightsUnpickler error:"
    if marker in text:
        after = text.split(marker, 1)[1].strip()
        reason = after.split("\n\n", 1)[0].strip().split(". ", 1)[0]
        if reason:
            return reason
    # torch >= 2.6: advice first, the fact in a paragraph of its own ("Trying to load unsupported GLOBAL posix.system
    # whose module posix is blocked.", "Unsupported global: GLOBAL x.Y was not an allowed global by default.")
    for paragraph in text.split("\n\n")[1:]:
        if "GLOBAL" in paragraph or paragraph.strip().startswith(("Trying to", "Can only", "Unsupported")):
            return " ".join(paragraph.split()).split(". ", 1)[0].rstrip(".")[:300]
    return one_line(exc)


# --- matching keys -------------------------------------------------------------------------------


def _checkpoint_weights(path: Path, unsafe_pickle: bool, key: str | None,
                        ) -> tuple[Any, tuple[Any, ...], tuple[str, ...]]:
    """The weights in a torch.save checkpoint (a mapping, or a module unpickled with ``unsafe_pickle``), the keys
    they were found under (("state_dict",), ("model", "state_dict"); (): the file's object itself) and the other
    top-level keys holding weights (timm's "state_dict_ema"), as shown in messages."""
    raw, standing = _torch_load(path, unsafe_pickle)
    trail = _weights_trail(raw, path, key)
    weights = raw
    for step in trail:
        weights = weights[step]
    if standing is not None:
        _check_stand_ins(standing, trail, path)
    others = tuple(name for name in _weight_keys(raw) if name != _shown_key(trail[0])) if trail else ()
    _say_choice(path, trail, others, asked=key is not None)
    return weights, trail, others


def _weights_trail(obj: Any, path: Path, key: str | None) -> tuple[Any, ...]:
    """The keys leading from the checkpoint's object to its weights: ``key`` when given (checked: it must be there),
    then training-framework wrappers (e.g. {"model": {"state_dict": {...}}}), most specific first."""
    trail: tuple[Any, ...] = ()
    if key is not None:
        obj = _chosen_key(obj, path, key)
        trail = (key,)
    for _ in range(4):
        if not isinstance(obj, Mapping):
            break
        nested = next((k for k in NESTED_STATE_DICT_KEYS if isinstance(obj.get(k), _WEIGHT_HOLDERS)), None)
        if nested is None:
            break
        trail, obj = (*trail, nested), obj[nested]
    return trail


def _chosen_key(obj: Any, path: Path, key: str) -> Any:
    """The value under the top-level ``key`` the caller named; UsageError listing the keys there are otherwise."""
    if not isinstance(obj, Mapping) or isinstance(obj, torch.nn.Module):
        raise UsageError(f"{path} holds a {type(obj).__name__}, not a dict: it has no key {_shown_key(key)}",
                         parameter="state_dict_key")
    if key not in obj:
        keys = [_shown_key(k) for k in obj]
        raise UsageError(f"{path} has no key {_shown_key(key)}; its keys: {_name_list(keys) or 'none'}",
                         parameter="state_dict_key")
    if not isinstance(obj[key], _WEIGHT_HOLDERS):
        raise UsageError(f"key {_shown_key(key)} of {path} holds a value of type {type(obj[key]).__name__}, not a "
                         f"state dict; keys holding tensors: {_name_list(_weight_keys(obj)) or 'none'}",
                         parameter="state_dict_key")
    return obj[key]


def _say_choice(path: Path, trail: tuple[Any, ...], others: tuple[str, ...], *, asked: bool) -> None:
    """Name the key the weights come from; a warning when gapcheck chose among several (timm's state_dict_ema)."""
    if not trail:
        return
    if others and not asked:
        logger.warning("%s holds weights under %s and %s: using %s (choose another with --state-dict-key)",
                       path, _shown_key(trail[0]), _name_list(others), _shown_path(trail))
    else:
        logger.info("using the weights under key %s of %s", _shown_path(trail), path)


def _weight_keys(obj: Mapping[Any, Any]) -> list[str]:
    """Top-level keys whose value is a dict of tensors (or a module unpickled with unsafe_pickle): the weights a
    checkpoint holds (a stand-in is not counted: what it was is unknown, Lightning's omegaconf hyper-parameters)."""
    return [_shown_key(k) for k, v in obj.items() if isinstance(v, torch.nn.Module)
            or (isinstance(v, Mapping) and any(isinstance(t, torch.Tensor) for t in v.values()))]


def _check_stand_ins(standing: StandInLoad, trail: tuple[Any, ...], path: Path) -> None:
    """Refuse a file whose weights are (or hold) objects replaced by stand-ins, naming them and where they are; name
    the others (metadata beside the weights: hyper-parameters, a config object) in a warning and go on. A dict or
    list stand-in holding the weights is no reason to refuse: its items are what torch's unpickler built."""
    from gapcheck.model.pickled import TooManyObjects

    try:
        found = standing.found()
    except TooManyObjects as exc:
        raise CheckpointError(f"refusing to unpickle {path}: it names classes the safe (weights-only) loader does not "
                              f"build, and holds {exc}: too many to make sure none of them is inside the weights. "
                              f"{_RISK}", hint=_HINT, parameter="unsafe_pickle") from None
    inside = [f for f in found if f.where[: len(trail)] == trail and not f.container]
    under = f"under key {_shown_path(trail)}" if trail else "(the file's object itself)"
    whole = next((f for f in inside if f.where == trail), None)
    if whole is not None:
        raise CheckpointError(f"refusing to unpickle {path}: the weights {under} are a pickled {whole.name} object, "
                              f"not tensors — likely a whole model saved with torch.save(model). {_RISK}",
                              hint=_HINT, parameter="unsafe_pickle")
    if inside:
        raise CheckpointError(f"refusing to unpickle {path}: the weights {under} hold pickled objects the safe "
                              f"(weights-only) loader does not build: {describe_stand_ins(inside, _shown_path)}. "
                              f"{_RISK}", hint=_HINT, parameter="unsafe_pickle")
    if found:
        logger.warning("%s: classes the safe loader does not build were not unpickled (inert stand-ins took their "
                       "place; the weights are plain tensors): %s", path, describe_stand_ins(found, _shown_path))


def _extract_state_dict(obj: Any, path: Path) -> Mapping[str, Any]:
    """The tensor mapping the weights must be (checked: a dict of tensors under string keys)."""
    if isinstance(obj, torch.Tensor):
        raise CheckpointError(f"{path} holds a single tensor {tuple(obj.shape)}, not a state dict")
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"{path} holds a {type(obj).__name__}, not a state dict (expected a dict of tensors)")
    if not any(isinstance(value, torch.Tensor) for value in obj.values()):
        keys = [_shown_key(key) for key in obj]
        raise CheckpointError(
            f"{path} holds a dict without tensors (keys: {_name_list(keys) or 'none'}); expected a state dict, "
            f"possibly nested under one of {', '.join(repr(k) for k in NESTED_STATE_DICT_KEYS)}"
        )
    bad_keys = [_shown_key(key) for key in obj if not isinstance(key, str)]
    if bad_keys:
        raise CheckpointError(f"{path}: state dict keys must be strings, found {_name_list(bad_keys)}")
    return obj


def _strip_wrapper_prefixes(state_dict: Mapping[str, Any], expected: set[str]) -> tuple[dict[str, Any], str | None]:
    """Strip DDP/compile/Lightning prefixes while doing so makes more keys match the model."""
    # Wrappers nest ("module._orig_mod.fc.weight"), and one layer alone may match nothing, so
    # try every chain of up to three prefixes and keep the one that matches the most keys.
    best_keys, best_prefix = dict(state_dict), ""
    best_score = len(expected.intersection(best_keys))
    frontier = [(best_prefix, best_keys)]
    for _ in range(3):
        next_frontier = []
        for chain, keys in frontier:
            for prefix in WRAPPER_PREFIXES:
                if not any(key.startswith(prefix) for key in keys):
                    continue
                candidate = {(key[len(prefix):] if key.startswith(prefix) else key): value for key, value in keys.items()}
                if len(candidate) != len(keys):  # stripping would merge two keys: not a wrapper prefix
                    continue
                next_frontier.append((chain + prefix, candidate))
                score = len(expected.intersection(candidate))
                if score > best_score:
                    best_score, best_prefix, best_keys = score, chain + prefix, candidate
        frontier = next_frontier
    current, stripped = best_keys, best_prefix
    # torch.compile on a submodule leaves "_orig_mod." in the middle of keys ("encoder._orig_mod.fc.weight").
    if any("._orig_mod." in key for key in current) and not any("._orig_mod." in key for key in expected):
        current = {key.replace("._orig_mod.", "."): value for key, value in current.items()}
        stripped += "._orig_mod. (inner)"
    return current, (stripped or None)


def _tied_to_loaded(key: str, model_state: Mapping[str, Any], loadable: Mapping[str, Any]) -> bool:
    """``key`` is the same tensor as a key the checkpoint does hold (tied weights: Hugging Face's ``lm_head.weight``
    is ``wte.weight``, and ``save_pretrained`` stores it once), so loading that key fills this one too."""
    target = model_state.get(key)
    if not isinstance(target, torch.Tensor) or target.device.type == "meta" or target.numel() == 0:
        return False
    pointer = target.untyped_storage().data_ptr()
    return any(isinstance(model_state.get(other), torch.Tensor) and other != key
               and model_state[other].untyped_storage().data_ptr() == pointer
               and tuple(model_state[other].shape) == tuple(target.shape) for other in loadable)


def _load_into(module: torch.nn.Module, state_dict: Mapping[str, Any], *, strict: bool, source: Path) -> KeyReport:
    model_state = module.state_dict()
    expected = set(model_state)
    renamed, stripped_prefix = _strip_wrapper_prefixes(state_dict, expected)
    if stripped_prefix:
        logger.info("stripped key prefix %r from %s", stripped_prefix, source)

    missing = sorted(expected - set(renamed))
    unexpected = sorted(set(renamed) - expected)
    mismatches: list[tuple[str, tuple[int, ...], tuple[int, ...]]] = []
    loadable: dict[str, Any] = {}
    for key in sorted(expected.intersection(renamed)):
        value, target = renamed[key], model_state[key]
        if isinstance(target, torch.Tensor):
            if not isinstance(value, torch.Tensor):
                # A non-tensor where the model has a tensor was not loaded: report it as missing.
                missing.append(key)
                continue
            if tuple(value.shape) != tuple(target.shape):
                mismatches.append((key, tuple(value.shape), tuple(target.shape)))
                continue
        loadable[key] = value
    missing = [key for key in missing if not _tied_to_loaded(key, model_state, loadable)]
    report = KeyReport(tuple(sorted(missing)), tuple(unexpected), tuple(mismatches), stripped_prefix)

    if strict and not report.ok:
        raise CheckpointError(
            f"checkpoint {source} does not fit the model: {report.describe()}",
            hint="fix the factory or its arguments, or load what fits non-strictly (each mismatch is reported)",
            parameter="strict",
        )
    if not report.ok:
        logger.warning("checkpoint %s loaded partially: %s", source, report.describe())
    try:
        module.load_state_dict(loadable, strict=False)
    except Exception as exc:  # noqa: BLE001 - custom _load_from_state_dict hooks, impossible dtype casts
        raise CheckpointError(f"loading {source} into the model failed: {one_line(exc)}") from None
    return report


# --- messages ------------------------------------------------------------------------------------


def _name_list(names: list[str] | tuple[str, ...]) -> str:
    shown = list(names[:_MAX_NAMES_IN_MESSAGE])
    more = len(names) - len(shown)
    return ", ".join(shown) + (f", ... and {more} more" if more > 0 else "")


def _shown_key(key: Any) -> str:
    """A key from the file, quoted, made harmless for a terminal (control and bidi characters escaped) and cut."""
    text = key if isinstance(key, str) else repr(key)
    if len(text) > _MAX_KEY_CHARS:
        text = text[:_MAX_KEY_CHARS] + "..."
    return repr(text) if text.isprintable() else ascii(text)


def _shown_path(trail: tuple[Any, ...]) -> str:
    """Keys and list positions from the file's object down to a value: ``'hyper_parameters'/'cfg'``, ``[0]``."""
    return "/".join(f"[{step}]" if isinstance(step, int) else _shown_key(step) for step in trail)
