"""Real sentences as a text model's inputs: ``--text-samples FILE[:field] --tokenizer hf:PATH[,...]`` (the
``InputSource`` group) tokenizes the first N usable strings with one tokenizer stage and lays the ids, attention mask
and token type ids out as the ``--input`` specs say — instead of random ids, which never hold a [CLS], a [SEP] or
padding, so they miss every special-token and padding behaviour of the model.

Which spec gets what: by name when every spec is named ``input_ids`` / ``attention_mask`` / ``token_type_ids``,
else by order (ids, mask, type ids). Each row is padded (pad id, mask 0, type 0) or cut to the spec's sequence length.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from gapcheck.errors import InputError, UsageError
from gapcheck.report.text import safe_line
from gapcheck.text.samples import TextSample, iter_samples, parse_source
from gapcheck.text.stages import Encoded, LoadedStage, load_stage, make_stage

ROLES = ("input_ids", "attention_mask", "token_type_ids")
INTEGER_DTYPES = {"int64", "int32", "int16", "int8", "uint8"}
log = logging.getLogger(__name__)


def check_text_feed(samples: str, tokenizer: str | None, specs: Sequence[Any]) -> None:
    """Up-front checks (UsageError/InputError, exit 2) before a model is loaded: the file, the tokenizer recipe's
    syntax, and specs that can hold token ids. Loads nothing."""
    if not tokenizer:
        raise UsageError("--text-samples needs --tokenizer (hf:PATH[,fast|slow][,max_length=N...] or module:fn)")
    parse_source(samples)
    make_stage("tokenizer", tokenizer)
    roles(specs)


def roles(specs: Sequence[Any]) -> dict[str, str]:
    """spec name -> role (``input_ids``, ``attention_mask``, ``token_type_ids``); specs must be integer, rank 2."""
    if not specs:
        return {}
    if len(specs) > len(ROLES):
        raise UsageError(f"--text-samples feeds at most {len(ROLES)} inputs ({', '.join(ROLES)}); "
                         f"{len(specs)} --input specs given")
    for spec in specs:
        if spec.dtype not in INTEGER_DTYPES:
            raise UsageError(f"--text-samples: input {spec.name!r} is {spec.dtype}; token ids, masks and type ids "
                             "are integers (e.g. input_ids:1x128:int64)")
        if len(spec.shape) != 2:
            raise UsageError(f"--text-samples: input {spec.name!r} has shape {'x'.join(map(str, spec.shape))}; "
                             "give BATCHxSEQUENCE, e.g. 1x128")
    shapes = {tuple(int(d) for d in spec.shape) for spec in specs}
    if len(shapes) > 1:  # the layout is one batch of sentences: a 1x16 mask beside 2x16 ids was fed as 2x16
        listed = ", ".join(f"{spec.name}:{'x'.join(map(str, spec.shape))}" for spec in specs)
        raise UsageError(f"--text-samples: the --input specs must share one BATCHxSEQUENCE shape (one batch of "
                         f"sentences); got {listed}")
    names = [spec.name for spec in specs]
    if set(names) <= set(ROLES):
        return {name: name for name in names}
    return dict(zip(names, ROLES, strict=False))


def tokenized_samples(samples: str, tokenizer: str, specs: Sequence[Any], count: int) -> list[dict[str, np.ndarray]]:
    """``count`` samples (fewer when the file holds fewer usable strings), each one spec-shaped batch of sentences.
    Bad strings (invalid UTF-8, NUL bytes, too long) are skipped, as the text audit skips them."""
    mapping = roles(specs)
    if not mapping:
        raise UsageError("--text-samples needs the model's inputs: --input input_ids:1x128:int64 (and "
                         "attention_mask, token_type_ids as the model takes them)")
    stage = load_stage(make_stage("tokenizer", tokenizer))
    batch = int(specs[0].shape[0])
    skipped: list[TextSample] = []
    texts = _usable(iter_samples(parse_source(samples)), skipped)
    out = TokenizedSamples()
    for _ in range(count):
        rows = [_encode(stage, sample) for sample in _take(texts, batch)]
        if len(rows) < batch:
            break
        out.append({spec.name: _layout(rows, mapping[spec.name], spec, stage) for spec in specs})
    out.skipped = tuple((s.id, s.issue or "blank") for s in skipped)
    if not out:
        raise InputError(f"text samples {safe_line(samples)!r}: fewer than {batch} usable string(s)"
                         + (f"; {_skipped_line(out.skipped)}" if skipped else ""))
    if skipped:  # counted and said, never dropped in silence (one line on stderr through the CLI's log handler)
        log.warning("text samples %s: %s", safe_line(samples), _skipped_line(out.skipped))
    return out


class TokenizedSamples(list):  # type: ignore[type-arg]
    """The fed samples (a list of input dicts), and ``skipped``: (sample id, reason) of every bad or blank string
    passed over on the way (invalid UTF-8, NUL bytes, over the character limit, a missing field)."""

    skipped: tuple[tuple[str, str], ...] = ()


def _skipped_line(skipped: Sequence[tuple[str, str]]) -> str:
    first = "; ".join(f"{sample_id}: {reason}" for sample_id, reason in skipped[:3])
    return f"{len(skipped)} bad or blank string(s) skipped ({first}{'; ...' if len(skipped) > 3 else ''})"


def _usable(samples: Iterator[TextSample], skipped: list[TextSample]) -> Iterator[TextSample]:
    for sample in samples:
        if sample.text is not None and sample.text.strip():
            yield sample
        else:
            skipped.append(sample)


def _take(texts: Iterator[TextSample], n: int) -> list[TextSample]:
    return [sample for _, sample in zip(range(n), texts, strict=False)]


def _encode(stage: LoadedStage, sample: TextSample) -> Encoded:
    assert sample.text is not None
    value = stage.encode_one(sample.text)
    if isinstance(value, BaseException):
        raise InputError(f"the tokenizer failed on text sample {sample.id}: {safe_line(str(value))[:200]}")
    return value


def _layout(rows: list[Encoded], role: str, spec: Any, stage: LoadedStage) -> np.ndarray:
    """One input (batch x sequence length) from the rows: padded with the pad id (mask 0, type 0) on the
    tokenizer's padding side, or cut (give the tokenizer ``max_length=N`` to truncate as it does, keeping [SEP])."""
    length = int(spec.shape[1])
    fill = (stage.info.pad_id or 0) if role == "input_ids" else 0
    array = np.full((len(rows), length), fill, dtype=np.int64)
    for i, row in enumerate(rows):
        if role == "input_ids":
            values = row.ids
        elif role == "attention_mask":
            values = row.mask if row.mask is not None else np.ones_like(row.ids)
        else:
            values = row.types if row.types is not None else np.zeros_like(row.ids)
        values = values[:length]
        if stage.info.padding_side == "left":  # the tokenizer pads on the left: so does the layout
            array[i, length - values.shape[0]:] = values
        else:
            array[i, : values.shape[0]] = values
    return array.astype(spec.dtype)
