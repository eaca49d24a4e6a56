"""Tokenizer stages: what turns a raw string into the ids a text model is fed.

A stage is ``name=target`` where the target is

- a callable ``pkg.module:fn`` or ``path/to/file.py:fn`` taking one string and returning token ids: a list of
  ints, a 1-D tensor/array (or a batch of one), or a ``BatchEncoding``/dict with ``input_ids`` and optionally
  ``attention_mask`` and ``token_type_ids``. A callable may carry the tokenizer it uses as ``fn.tokenizer`` so
  the report can name tokens, special tokens and the unknown token;
- a declared recipe ``hf:PATH[,fast|slow][,max_length=N,truncation=...,padding=max_length,padding_side=left|right,
  truncation_side=left|right,add_special_tokens=true|false,do_lower_case=...,strip_accents=...]``, built with
  ``transformers`` (fast: the Rust ``tokenizers`` backend; slow: the pure-Python implementation) only when a stage
  is loaded — nothing here imports them at start-up.

Every output becomes an :class:`Encoded` (int64 ids, mask and type ids, or None where the stage gives none).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gapcheck.errors import UsageError
from gapcheck.report.text import safe_line

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_CALL_KEYS = {"max_length": int, "truncation": str, "padding": str, "add_special_tokens": bool}
_LOAD_KEYS = {"padding_side": str, "truncation_side": str, "do_lower_case": bool, "strip_accents": bool}
_TRUNCATION = {"true": True, "false": False, "longest_first": "longest_first", "only_first": "only_first",
               "do_not_truncate": False}


@dataclass(frozen=True)
class HfRecipe:
    """A declared Hugging Face tokenizer: files, implementation, and the settings each call uses."""

    path: str
    backend: str = "fast"  # "fast" | "slow"
    load: tuple[tuple[str, Any], ...] = ()  # from_pretrained keyword arguments
    call: tuple[tuple[str, Any], ...] = ()  # __call__ keyword arguments

    def describe(self) -> str:
        settings = ",".join(f"{k}={_show(v)}" for k, v in self.load + self.call)
        return f"hf:{self.path},{self.backend}" + (f",{settings}" if settings else "")


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class TextStageSpec:
    """A named stage: an ``hf:`` recipe, an import target (``module:fn`` / ``file.py:fn``) or a Python callable."""

    name: str
    target: str = ""
    recipe: HfRecipe | None = None
    function: Callable[[str], Any] | None = None  # compared by identity (the load cache keys on the spec)

    @property
    def description(self) -> str:
        if self.recipe is not None:
            return self.recipe.describe()
        if self.target:
            return self.target
        return getattr(self.function, "__qualname__", type(self.function).__name__)


def parse_stage(option: str) -> TextStageSpec:
    """``train=mypkg.data:tokenize`` / ``serve=hf:./tok,slow,max_length=128`` -> a checked spec."""
    name, sep, target = option.partition("=")
    if not sep or not name.strip() or not target.strip():
        raise UsageError(f"stage {safe_line(option)!r} must be NAME=TARGET (e.g. serve=hf:./tokenizer,fast)")
    return make_stage(name.strip(), target.strip())


def make_stage(name: str, target: Any) -> TextStageSpec:
    if not _NAME.match(name):
        raise UsageError(f"stage name {safe_line(name)!r}: use letters, digits, '_', '-', '.' (at most 64)")
    if isinstance(target, TextStageSpec):
        return dataclasses.replace(target, name=name)
    if callable(target):
        return TextStageSpec(name, function=target)
    if not isinstance(target, str):
        raise UsageError(f"stage {name!r}: expected a target string or a callable, got {type(target).__name__}")
    if target.startswith("hf:"):
        return TextStageSpec(name, target=target, recipe=parse_recipe(name, target))
    module, sep, attr = target.rpartition(":")
    if not sep or not module or not attr:
        raise UsageError(f"stage {name!r}: target {safe_line(target)!r} must be 'module:fn', 'file.py:fn' or 'hf:PATH'")
    return TextStageSpec(name, target=target)


def parse_recipe(name: str, target: str) -> HfRecipe:
    parts = [p.strip() for p in target[3:].split(",")]
    path, backend = parts[0], "fast"
    if not path:
        raise UsageError(f"stage {name!r}: hf: needs a tokenizer folder, e.g. hf:./tokenizer")
    load: dict[str, Any] = {}
    call: dict[str, Any] = {}
    for part in parts[1:]:
        if part in ("fast", "slow"):
            backend = part
            continue
        key, sep, value = part.partition("=")
        if not sep or key not in _CALL_KEYS and key not in _LOAD_KEYS:
            known = ", ".join(["fast", "slow", *_CALL_KEYS, *_LOAD_KEYS])
            raise UsageError(f"stage {name!r}: unknown hf: setting {safe_line(part)!r}", hint=f"known: {known}")
        (call if key in _CALL_KEYS else load)[key] = _setting(name, key, value)
    _check_recipe(name, load, call)
    return HfRecipe(path, backend, tuple(sorted(load.items())), tuple(sorted(call.items())))


def _setting(stage: str, key: str, value: str) -> Any:
    kind = _CALL_KEYS.get(key) or _LOAD_KEYS[key]
    lowered = value.strip().lower()
    if key == "truncation":
        if lowered not in _TRUNCATION:
            raise UsageError(f"stage {stage!r}: truncation={value!r}; choose one of {', '.join(_TRUNCATION)}")
        return _TRUNCATION[lowered]
    if kind is bool:
        if lowered not in ("true", "false", "1", "0", "yes", "no"):
            raise UsageError(f"stage {stage!r}: {key}={value!r} is not true/false")
        return lowered in ("true", "1", "yes")
    if kind is int:
        if not (lowered.isascii() and lowered.isdigit()) or not 1 <= int(lowered) <= 1_000_000:  # not int("²")
            raise UsageError(f"stage {stage!r}: {key}={value!r} must be an integer from 1 to 1000000")
        return int(lowered)
    if key in ("padding_side", "truncation_side") and lowered not in ("left", "right"):
        raise UsageError(f"stage {stage!r}: {key}={value!r}; choose left or right")
    if key == "padding" and lowered not in ("max_length", "false", "do_not_pad"):
        raise UsageError(f"stage {stage!r}: padding={value!r}; only max_length or false (padding to the longest "
                         f"depends on the batch, not on the string)")
    return lowered


def _check_recipe(name: str, load: dict[str, Any], call: dict[str, Any]) -> None:
    if call.get("padding") in ("false", "do_not_pad"):
        call["padding"] = False
    if "max_length" in call and "truncation" not in call:
        call["truncation"] = True  # a max_length is a truncation length unless truncation=false says otherwise
    if call.get("padding") == "max_length" and "max_length" not in call:
        raise UsageError(f"stage {name!r}: padding=max_length needs max_length=N")


@dataclass(frozen=True)
class Encoded:
    """One stage's output for one string, canonical: int64 ids; mask and type ids when the stage gives them."""

    ids: np.ndarray
    mask: np.ndarray | None = None
    types: np.ndarray | None = None

    @property
    def length(self) -> int:
        return int(self.ids.shape[0])

    def content_length(self) -> int:
        """Tokens the model attends to: the mask's ones, or every token without a mask."""
        return int(self.mask.sum()) if self.mask is not None else self.length


def _vector(value: Any, what: str) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if array.ndim == 2 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 1:
        raise TypeError(f"{what} has shape {tuple(array.shape)}; expected one sequence (or a batch of one)")
    if array.size and array.dtype.kind not in "biu":
        if array.dtype.kind == "f" and np.all(np.isfinite(array)) and np.all(array == np.round(array)):
            return array.astype(np.int64)
        raise TypeError(f"{what} holds {array.dtype} values, not integer token ids")
    return array.astype(np.int64, copy=False)


def canonical(output: Any) -> Encoded:
    """A stage's return value -> :class:`Encoded`; TypeError for anything that is not token ids."""
    data = getattr(output, "data", None) if not isinstance(output, dict) else output
    if isinstance(data, dict) and "input_ids" in data:
        ids = _vector(data["input_ids"], "input_ids")
        mask = _vector(data["attention_mask"], "attention_mask") if data.get("attention_mask") is not None else None
        types = _vector(data["token_type_ids"], "token_type_ids") if data.get("token_type_ids") is not None else None
        for label, other in (("attention_mask", mask), ("token_type_ids", types)):
            if other is not None and other.shape != ids.shape:
                raise TypeError(f"{label} has {other.shape[0]} positions, input_ids {ids.shape[0]}")
        return Encoded(ids, mask, types)
    if isinstance(output, (str, bytes)) or output is None:
        raise TypeError(f"the stage returned {type(output).__name__}, not token ids")
    return Encoded(_vector(output, "the output"))


@dataclass(frozen=True)
class StageInfo:
    """What a stage's tokenizer tells about itself (everything optional: a bare callable tells nothing)."""

    backend: str  # "fast" | "slow" | "callable"
    files: str = ""  # the tokenizer folder, resolved
    vocab_sha256: str = ""  # tokens + ids (+ BPE merges)
    vocab_size: int = 0
    unk_id: int | None = None
    pad_id: int | None = None
    special_ids: tuple[int, ...] = ()
    added_tokens: tuple[str, ...] = ()
    max_length: int | None = None  # the truncation length, when truncation is on
    truncation_side: str = ""
    padding_side: str = ""
    do_lower_case: bool | None = None
    source: str = ""  # the tokenizer's name_or_path (where its files came from)
    base_vocab_sha256: str = ""  # the vocabulary less its added tokens (the files, before add_tokens)


class LoadedStage:
    """A resolved stage: encodes strings, decodes ids to token strings, and knows its :class:`StageInfo`."""

    def __init__(self, spec: TextStageSpec, encode: Callable[[str], Any], tokenizer: Any, info: StageInfo,
                 call: dict[str, Any] | None = None) -> None:
        self.spec, self.name, self.tokenizer, self.info = spec, spec.name, tokenizer, info
        self._encode, self._call = encode, call

    def encode_rows(self, texts: Sequence[str]) -> list[Row | BaseException]:
        """Every string's (ids, mask, type ids) as lists — the hot path: an hf: stage's batch output is used as the
        tokenizer returns it, without a numpy array per sample — or the exception the stage raised on it."""
        if self._call is not None:
            try:
                batch = self.tokenizer(list(texts), **self._call)
            except Exception:  # noqa: BLE001 - one bad string fails the batch: retry one by one to name it
                return [_row(self.encode_one(t)) for t in texts]
            ids = batch["input_ids"]
            masks = batch.get("attention_mask") or [None] * len(ids)
            types = batch.get("token_type_ids") or [None] * len(ids)
            return list(zip(ids, masks, types, strict=True))
        return [_row(self.encode_one(t)) for t in texts]

    def encode_one(self, text: str) -> Encoded | BaseException:
        try:
            return canonical(self._encode(text))
        except Exception as exc:  # noqa: BLE001 - a stage's failure on one sample is a finding, not a crash
            return exc

    def tokens(self, ids: Sequence[int]) -> list[str]:
        """The token string of every id (``#id`` where the stage has no tokenizer to ask)."""
        if self.tokenizer is None or not hasattr(self.tokenizer, "convert_ids_to_tokens"):
            return [f"#{i}" for i in ids]
        size = self.info.vocab_size
        out = []
        for i in ids:
            try:
                token = self.tokenizer.convert_ids_to_tokens(int(i)) if not size or 0 <= int(i) < size else None
            except Exception:  # noqa: BLE001 - an id outside the vocabulary
                token = None
            out.append(f"#{i}" if token is None else str(token))
        return out

    def offsets(self, text: str) -> list[tuple[int, int]] | None:
        """Character span of every token of ``text`` (fast tokenizers only; None elsewhere)."""
        if not getattr(self.tokenizer, "is_fast", False):
            return None
        try:  # a callable's own settings are unknown: its attached tokenizer's defaults (a best effort)
            out = self.tokenizer(text, return_offsets_mapping=True, **(self._call or {}))
        except Exception:  # noqa: BLE001
            return None
        return [(int(a), int(b)) for a, b in out["offset_mapping"]]


Row = tuple[list[int], "list[int] | None", "list[int] | None"]  # ids, attention mask, token type ids


def _row(value: Encoded | BaseException) -> Row | BaseException:
    if isinstance(value, BaseException):
        return value
    return (value.ids.tolist(), None if value.mask is None else value.mask.tolist(),
            None if value.types is None else value.types.tolist())


def encoded(row: Row) -> Encoded:
    """A row as an :class:`Encoded` (int64 arrays), for the diagnoses."""
    ids, mask, types = row
    return Encoded(np.asarray(ids, np.int64), None if mask is None else np.asarray(mask, np.int64),
                   None if types is None else np.asarray(types, np.int64))


@functools.lru_cache(maxsize=16)
def load_stage(spec: TextStageSpec) -> LoadedStage:
    """The stage behind ``spec``, once per process (tokenizers are slow to build)."""
    if spec.recipe is not None:
        return _load_hf(spec)
    if spec.function is not None:
        function = spec.function
    else:
        from gapcheck.model.factory import resolve_callable

        function = resolve_callable(spec.target, role=f"stage {spec.name!r}")
    tokenizer = getattr(function, "tokenizer", None)
    backend = "callable" if tokenizer is None else "fast" if getattr(tokenizer, "is_fast", False) else "slow"
    info = tokenizer_info(tokenizer, backend, {}) if tokenizer is not None else StageInfo(backend)
    return LoadedStage(spec, function, tokenizer, info)


def _load_hf(spec: TextStageSpec) -> LoadedStage:
    recipe = spec.recipe
    assert recipe is not None
    folder = Path(recipe.path).expanduser()
    if not folder.is_dir():
        raise UsageError(f"stage {spec.name!r}: {safe_line(recipe.path)!r} is not a tokenizer folder")
    check_tokenizer_files(folder, f"stage {spec.name!r}")
    try:
        import transformers
    except ImportError as exc:
        raise UsageError(f"stage {spec.name!r}: hf: stages need transformers (pip install transformers)") from exc
    load = {**dict(recipe.load), "trust_remote_code": False}  # never run a folder's code (nor ask on a terminal)
    try:
        if recipe.backend == "fast":
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True, **load)
        else:
            tokenizer = _slow_tokenizer(transformers, folder, load)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - files the library cannot load: the user's input
        raise UsageError(f"stage {spec.name!r}: cannot load a {recipe.backend} tokenizer from {safe_line(folder)}: "
                         f"{type(exc).__name__}: {safe_line(str(exc))[:200]}") from exc
    if getattr(tokenizer, "is_fast", False) != (recipe.backend == "fast"):
        raise UsageError(f"stage {spec.name!r}: transformers gave a {'fast' if tokenizer.is_fast else 'slow'} "
                         f"tokenizer for {recipe.backend}")
    # the audit measures lengths itself ("at truncation"): transformers' "Token indices sequence length is longer
    # than the specified maximum" on stderr would be a second, unasked message beside the command's own
    warned = getattr(tokenizer, "deprecation_warnings", None)
    if isinstance(warned, dict):
        warned["sequence-length-is-longer-than-the-specified-maximum"] = True
    call = {"add_special_tokens": True, **dict(recipe.call)}
    info = tokenizer_info(tokenizer, recipe.backend, call, folder)
    return LoadedStage(spec, lambda text: tokenizer(text, **call), tokenizer, info, call)


#: Largest tokenizer file (tokenizer.json, vocab.txt, merges.txt, *.model) loaded: the largest real ones are tens of MB.
MAX_TOKENIZER_FILE_BYTES = 1 << 30
_TOKENIZER_SUFFIXES = {".json", ".txt", ".model", ".jinja", ".tiktoken"}
_FOLDER_SCAN_LIMIT = 10_000  # entries of a tokenizer folder looked at (a folder of a million files is not listed whole)


def check_tokenizer_files(folder: Path, what: str) -> None:
    """Refuse a tokenizer folder whose files transformers would read are not regular files after links, or are
    too large: transformers skips a FIFO, a device or a dangling link without a word (``os.path.isfile``) and builds
    another tokenizer from what is left — a vocab.txt linked to /dev/zero gave an empty vocabulary and a false gap."""
    import itertools
    import os
    import stat

    from gapcheck.errors import InputError

    with os.scandir(folder) as entries:
        for entry in itertools.islice(entries, _FOLDER_SCAN_LIMIT):
            if Path(entry.name).suffix.lower() not in _TOKENIZER_SUFFIXES:
                continue
            where = f"{what}: tokenizer file {safe_line(os.path.join(folder, entry.name))}"
            try:
                info = os.stat(entry.path)
            except OSError as exc:  # a dangling link or a link loop
                raise InputError(f"{where} cannot be read ({safe_line(exc.strerror)})") from exc
            if stat.S_ISDIR(info.st_mode):
                continue
            if not stat.S_ISREG(info.st_mode):
                raise InputError(f"{where} is not a regular file (a FIFO, device or socket); transformers would "
                                 "skip it and build another tokenizer")
            if info.st_size > MAX_TOKENIZER_FILE_BYTES:
                raise InputError(f"{where} has {info.st_size:,} bytes, over the {MAX_TOKENIZER_FILE_BYTES:,} byte "
                                 "limit for a tokenizer file")


def _slow_tokenizer(transformers: Any, folder: Path, load: dict[str, Any]) -> Any:
    """The pure-Python tokenizer for these files: ``use_fast=False`` before transformers 5; from 5 on, the
    model's ``<Name>TokenizerLegacy`` / sentencepiece class (AutoTokenizer always builds the fast one there)."""
    major = int(transformers.__version__.split(".")[0])
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    base = str(config.get("tokenizer_class") or "").removesuffix("Fast")
    if major < 5:
        slow = _find_class(transformers, base) if base else None
        if slow is not None and not _is_fast_class(slow):
            _require_slow_files(slow, folder)
        return transformers.AutoTokenizer.from_pretrained(str(folder), use_fast=False, local_files_only=True, **load)
    for candidate in (f"{base}Legacy", base):
        cls = _find_class(transformers, candidate) if base else None
        if cls is not None and not _is_fast_class(cls):
            _require_slow_files(cls, folder)
            return cls.from_pretrained(str(folder), local_files_only=True, **load)
    raise UsageError(f"no slow (pure-Python) tokenizer for {safe_line(folder)} in transformers "
                     f"{transformers.__version__} (tokenizer_class {base or 'unknown'!r})",
                     hint="transformers 5 keeps a Python implementation for few models (e.g. BertTokenizerLegacy) "
                          "and sentencepiece ones need the sentencepiece package")


def _require_slow_files(cls: Any, folder: Path) -> None:
    """A slow tokenizer reads its own files (vocab.txt, merges.txt, a sentencepiece model), not tokenizer.json: a
    folder saved by transformers 5 holds only tokenizer.json, and the class then failed on a None path (``stat: path
    should be string ... not NoneType``). Name the missing files instead."""
    names = getattr(cls, "vocab_files_names", None) or {}
    wanted = [str(name) for key, name in names.items() if key != "tokenizer_file" and isinstance(name, str)]
    missing = [name for name in wanted if not (folder / name).is_file()]
    if missing:
        only_fast = " (tokenizer.json there is read by the fast one only)" if (folder / "tokenizer.json").is_file() else ""
        raise UsageError(f"no slow tokenizer files in {safe_line(folder)}: {cls.__name__} needs "
                         f"{', '.join(missing)}{only_fast}",
                         hint="a folder saved by transformers 5 holds only tokenizer.json: use the fast tokenizer "
                              "(drop ',slow') or save the slow tokenizer's files with it")


def _find_class(transformers: Any, name: str) -> Any:
    cls = getattr(transformers, name, None)
    if cls is not None:
        return cls
    import importlib

    model = re.sub(r"(Tokenizer.*)$", "", name).lower()
    for module in (f"transformers.models.{model}.tokenization_{model}_legacy",
                   f"transformers.models.{model}.tokenization_{model}"):
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    return None


def _is_fast_class(cls: Any) -> bool:
    return any(base.__name__ in ("TokenizersBackend", "PreTrainedTokenizerFast") for base in cls.__mro__)


def tokenizer_info(tokenizer: Any, backend: str, call: dict[str, Any], folder: Path | None = None) -> StageInfo:
    """Vocabulary hash, special ids, unknown/pad ids and truncation/padding settings of a HF-style tokenizer."""
    vocab = _vocab(tokenizer)
    digest = hashlib.sha256(json.dumps(sorted(vocab.items(), key=lambda kv: kv[1]), ensure_ascii=False).encode())
    digest.update(_merges(tokenizer, vocab).encode())
    truncating = bool(call.get("truncation")) and call.get("truncation") != "do_not_truncate"
    max_length = call.get("max_length") if truncating else None
    if truncating and max_length is None:
        limit = getattr(tokenizer, "model_max_length", None)
        max_length = int(limit) if isinstance(limit, int) and limit < 10**9 else None
    added: dict[str, int] = getattr(tokenizer, "get_added_vocab", dict)()
    base = sorted(((k, v) for k, v in vocab.items() if k not in added and k.lower() not in added), key=lambda kv: kv[1])
    base_digest = hashlib.sha256(json.dumps(base, ensure_ascii=False).encode()).hexdigest()
    return StageInfo(
        backend=backend, files=str(folder.resolve()) if folder else "", vocab_sha256=digest.hexdigest(),
        vocab_size=max(vocab.values(), default=-1) + 1, unk_id=_int_or_none(getattr(tokenizer, "unk_token_id", None)),
        pad_id=_int_or_none(getattr(tokenizer, "pad_token_id", None)),
        special_ids=tuple(sorted({int(i) for i in getattr(tokenizer, "all_special_ids", []) if i is not None})),
        added_tokens=tuple(sorted(added)), max_length=max_length,
        truncation_side=str(getattr(tokenizer, "truncation_side", "") or ""),
        padding_side=str(getattr(tokenizer, "padding_side", "") or ""),
        do_lower_case=getattr(tokenizer, "do_lower_case", None), source=str(getattr(tokenizer, "name_or_path", "") or ""),
        base_vocab_sha256=base_digest)


def _vocab(tokenizer: Any) -> dict[str, int]:
    try:
        vocab = tokenizer.get_vocab()
    except Exception:  # noqa: BLE001 - a tokenizer without a vocabulary API
        return {}
    return {str(k): int(v) for k, v in vocab.items()}


def _merges(tokenizer: Any, vocab: dict[str, int]) -> str:
    """The BPE merges of a fast tokenizer (part of what makes two vocabularies the same), else ""."""
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    if backend is None or not hasattr(backend, "to_str"):
        return ""
    if vocab and max(vocab.values()) >= 2 * len(vocab) + 1024:
        # tokenizers serializes the vocabulary id by id up to the largest: one id of 4e9 in a hostile
        # tokenizer.json never returns (its merges are left out of the hash; the vocabulary is in it)
        return "sparse vocabulary"
    try:
        model = json.loads(backend.to_str()).get("model", {})
    except Exception:  # noqa: BLE001
        return ""
    merges = model.get("merges") or []
    return json.dumps(merges, ensure_ascii=False) if merges else ""


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def same_files(a: StageInfo, b: StageInfo) -> bool:
    """Two stages over the same tokenizer files: the same folder or source, or the same vocabulary hash."""
    return bool(a.vocab_sha256) and bool((a.files and a.files == b.files) or (a.source and a.source == b.source)
                                         or a.vocab_sha256 == b.vocab_sha256 or a.base_vocab_sha256 == b.base_vocab_sha256)
