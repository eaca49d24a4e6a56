"""Why two tokenizer stages give different ids for the same string: the first divergence and its root cause.

The causes are tested from the structure of the two outputs first (padding, special tokens, truncation — the
ids are equal once those are taken away), then from what the stages say about themselves (vocabularies, added
tokens), then by *reproducing* the difference: the string is transformed (lowercased, accents stripped, NFC/NFKC,
control characters removed, whitespace collapsed) and fed to one stage again; a transform whose output equals the
other stage's output names the cause. Nothing reproduced is ``text_unexplained`` — never a guess.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gapcheck.codes import text as codes
from gapcheck.report.text import safe_line
from gapcheck.text.stages import Encoded, LoadedStage, same_files

WINDOW = 3  # tokens shown either side of the first divergence
EXCERPT = 40  # characters shown either side of the divergent span


def _strip_accents(text: str) -> str:
    return "".join(ch for ch in unicodedata.normalize("NFD", text) if unicodedata.category(ch) != "Mn")


def _without_controls(text: str) -> str:
    return "".join(ch for ch in text if ch in "\t\n\r " or unicodedata.category(ch) not in ("Cc", "Cf"))


#: (name, code, transform) — tried in order; the first that reproduces the other stage's output names the cause.
TRANSFORMS: tuple[tuple[str, str, Callable[[str], str]], ...] = (
    ("lowercase", codes.TEXT_NORMALIZATION.code, str.lower),
    ("strip accents", codes.TEXT_NORMALIZATION.code, _strip_accents),
    ("lowercase and strip accents", codes.TEXT_NORMALIZATION.code, lambda t: _strip_accents(t.lower())),
    ("NFKC", codes.UNICODE_NORMALIZATION.code, lambda t: unicodedata.normalize("NFKC", t)),
    ("NFC", codes.UNICODE_NORMALIZATION.code, lambda t: unicodedata.normalize("NFC", t)),
    ("NFD", codes.UNICODE_NORMALIZATION.code, lambda t: unicodedata.normalize("NFD", t)),
    ("remove control and zero-width characters", codes.WHITESPACE_CONTROL.code, _without_controls),
    ("collapse and trim whitespace", codes.WHITESPACE_CONTROL.code, lambda t: " ".join(t.split())),
)


@dataclass(frozen=True)
class Divergence:
    """The first place two stages differ on one sample, and the root cause found for it."""

    ref: str
    cand: str
    sample: str
    component: str  # "input_ids" | "attention_mask" | "token_type_ids"
    position: int  # first differing position in that component
    ref_length: int
    cand_length: int
    ref_tokens: tuple[str, ...]  # a window of decoded tokens around the position
    cand_tokens: tuple[str, ...]
    window_start: int
    span: tuple[int, int] | None  # characters of the original string (from a fast tokenizer's offsets)
    excerpt: str  # the original string around the span, safe for a terminal
    cause: str  # a registered code: the cause of the token difference (padding when only the padding differs)
    detail: str
    evidence: dict[str, Any] = field(default_factory=dict)
    causes: tuple[str, ...] = ()  # every cause found (e.g. padding and a lowercasing mismatch at once)
    details: tuple[str, ...] = ()  # one sentence per cause

    def detail_of(self, cause: str) -> str:
        return next((d for c, d in zip(self.causes, self.details, strict=True) if c == cause), self.detail)

    @property
    def ref_token(self) -> str:
        index = self.position - self.window_start
        return self.ref_tokens[index] if 0 <= index < len(self.ref_tokens) else "(end)"

    @property
    def cand_token(self) -> str:
        index = self.position - self.window_start
        return self.cand_tokens[index] if 0 <= index < len(self.cand_tokens) else "(end)"


def _mask(e: Encoded) -> np.ndarray:
    return e.mask if e.mask is not None else np.ones(e.length, np.int64)


def _types(e: Encoded) -> np.ndarray:
    return e.types if e.types is not None else np.zeros(e.length, np.int64)


def first_difference(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    unequal = np.flatnonzero(a[:n] != b[:n])
    return int(unequal[0]) if unequal.size else n


def diagnose(sample: str, text: str, a: LoadedStage, b: LoadedStage, ea: Encoded, eb: Encoded) -> Divergence:
    """The first divergence between ``a``'s and ``b``'s outputs on ``text`` and its root cause."""
    if not np.array_equal(ea.ids, eb.ids):
        component, position = "input_ids", first_difference(ea.ids, eb.ids)
    elif not np.array_equal(_mask(ea), _mask(eb)):
        component, position = "attention_mask", first_difference(_mask(ea), _mask(eb))
    else:
        component, position = "token_type_ids", first_difference(_types(ea), _types(eb))
    found = root_cause(text, a, b, ea, eb, component)
    cause, _, _ = found[-1]
    detail = "; ".join(d for _, d, _ in found)
    evidence = {k: v for _, _, e in found for k, v in e.items()}
    start = max(0, position - WINDOW)
    ref_tokens = tuple(safe_line(t) for t in a.tokens(ea.ids[start:position + WINDOW + 1].tolist()))
    cand_tokens = tuple(safe_line(t) for t in b.tokens(eb.ids[start:position + WINDOW + 1].tolist()))
    span = _span(text, position, (a, ea), (b, eb))
    return Divergence(a.name, b.name, sample, component, position, ea.length, eb.length, ref_tokens, cand_tokens,
                      start, span, _excerpt(text, span), cause, detail, evidence, tuple(c for c, _, _ in found),
                      tuple(d for _, d, _ in found))


def _span(text: str, position: int, *sides: tuple[LoadedStage, Encoded]) -> tuple[int, int] | None:
    """The characters behind the token at ``position``: from the first fast tokenizer whose token there has some."""
    for stage, encoded in sides:
        offsets = stage.offsets(text)
        if offsets is None:
            continue
        for index in (position, position - 1):  # a token only one side has (e.g. [SEP]): the one before it
            if 0 <= index < min(len(offsets), encoded.length) and offsets[index][1] > offsets[index][0]:
                return offsets[index]
    return None


def _excerpt(text: str, span: tuple[int, int] | None) -> str:
    if span is None:
        return safe_line(text[: 2 * EXCERPT]) + ("…" if len(text) > 2 * EXCERPT else "")
    begin, end = max(0, span[0] - EXCERPT), min(len(text), span[1] + EXCERPT)
    return (("…" if begin else "") + safe_line(text[begin:span[0]]) + "⟦" + safe_line(text[span[0]:span[1]]) + "⟧"
            + safe_line(text[span[1]:end]) + ("…" if end < len(text) else ""))


Cause = tuple[str, str, dict[str, Any]]  # (code, one sentence, evidence)


def root_cause(text: str, a: LoadedStage, b: LoadedStage, ea: Encoded, eb: Encoded, component: str) -> list[Cause]:
    """Every cause found: the padding layout (independent of the tokens), then one cause for the attended tokens —
    structural (special tokens, truncation), vocabularies, reproduced transforms, fast vs slow, unknown tokens."""
    causes = [c for c in (_padding(text, a, b, ea, eb),) if c is not None]
    if np.array_equal(_content(ea, a), _content(eb, b)):
        return causes or [(codes.UNEXPLAINED.code, f"the {component} differ while the attended ids are equal", {})]
    return causes + [_content_cause(text, a, b, ea, eb)]


def _content_cause(text: str, a: LoadedStage, b: LoadedStage, ea: Encoded, eb: Encoded) -> Cause:
    fast_slow = {a.info.backend, b.info.backend} == {"fast", "slow"} and same_files(a.info, b.info)
    tests = (_special_tokens, _truncation) if fast_slow else (_special_tokens, _truncation, _vocabulary)
    for test in tests:
        found = test(text, a, b, ea, eb)
        if found is not None:
            return found
    reproduced = _reproduce(text, a, b, ea, eb)
    if fast_slow:  # the implementations disagree; a vocabulary difference between them is part of that
        note = f"; reproduced by: {reproduced[1]}" if reproduced else ""
        return (codes.FAST_SLOW.code, f"the {a.info.backend} and {b.info.backend} tokenizers of the same files "
                f"disagree{note}", {"backends": [a.info.backend, b.info.backend],
                                    "reproduced_by": reproduced[1] if reproduced else None})
    if reproduced:
        return reproduced[0], reproduced[1], {"transform": reproduced[1].split(" before ")[0]}
    unk = _unknown(a, b, ea, eb)
    if unk is not None:
        return unk
    return codes.UNEXPLAINED.code, "no diagnosis reproduces the difference", {}


def _content(e: Encoded, stage: LoadedStage) -> np.ndarray:
    """The ids the model attends to: the mask's ones; without a mask, the ids less leading/trailing pad ids."""
    if e.mask is not None:
        return e.ids[e.mask.astype(bool)]
    pad = stage.info.pad_id
    ids = e.ids
    if pad is None or not ids.size:
        return ids
    keep = np.flatnonzero(ids != pad)
    return ids[keep[0]: keep[-1] + 1] if keep.size else ids[:0]


def _side(e: Encoded) -> str:
    mask = _mask(e)
    if mask.all():
        return "none"
    return "left" if mask[0] == 0 else "right"


def _padding(text: str, a: LoadedStage, b: LoadedStage, ea: Encoded, eb: Encoded) -> Cause | None:
    """The padding layout differs (side, pad id, padded length), whatever the attended tokens are."""
    sides = (_side(ea), _side(eb))
    if sides == ("none", "none"):
        return None
    pads = [sorted({int(i) for i in e.ids[_mask(e) == 0]}) for e in (ea, eb)]
    evidence = {"padding_side": list(sides), "padded_length": [ea.length, eb.length], "pad_ids": pads}
    if "none" not in sides and sides[0] != sides[1]:
        detail = f"padded on the {sides[0]} by {a.name} and on the {sides[1]} by {b.name}"
    elif pads[0] and pads[1] and pads[0] != pads[1]:
        detail = f"padded with id {pads[0]} by {a.name} and id {pads[1]} by {b.name}"
    elif "none" in sides:
        padded, length = (a, ea.length) if sides[1] == "none" else (b, eb.length)
        detail = f"{padded.name} pads to {length} tokens, the other stage does not pad"
    elif ea.length != eb.length:
        detail = f"padded to {ea.length} by {a.name} and to {eb.length} by {b.name}"
    else:
        return None  # the same padding layout: the difference is in the tokens
    return codes.PADDING.code, detail, evidence


def _specials(a: LoadedStage, b: LoadedStage) -> set[int]:
    """Ids a template adds ([CLS], [SEP], <s>...): the special ids less the unknown token (text maps to it)."""
    return (set(a.info.special_ids) | set(b.info.special_ids)) - {a.info.unk_id, b.info.unk_id}


def _special_tokens(text: str, a: LoadedStage, b: LoadedStage, ea: Encoded,
                    eb: Encoded) -> tuple[str, str, dict] | None:
    specials = _specials(a, b) - {a.info.pad_id, b.info.pad_id}
    if not specials:
        return None
    ca, cb = _content(ea, a), _content(eb, b)
    plain_a, plain_b = ca[~np.isin(ca, list(specials))], cb[~np.isin(cb, list(specials))]
    if not np.array_equal(plain_a, plain_b) or np.array_equal(ca, cb):
        return None
    found = [[t for t, i in zip(s.tokens(c.tolist()), c.tolist(), strict=True) if i in specials] for s, c in
             ((a, ca), (b, cb))]
    detail = (f"{a.name} adds {', '.join(found[0]) or 'no special tokens'}, {b.name} adds "
              f"{', '.join(found[1]) or 'none'}; the other tokens are the same")
    return codes.SPECIAL_TOKENS.code, detail, {"special_tokens": {a.name: found[0], b.name: found[1]}}


def _truncation(text: str, a: LoadedStage, b: LoadedStage, ea: Encoded, eb: Encoded) -> tuple[str, str, dict] | None:
    ca, cb = _content(ea, a), _content(eb, b)
    specials = list(_specials(a, b))
    pa, pb = ca[~np.isin(ca, specials)], cb[~np.isin(cb, specials)]
    if len(pa) == len(pb):
        return _truncation_side(a, b, ea, eb, pa, pb)
    short, long_ = (pa, pb) if len(pa) < len(pb) else (pb, pa)
    side = "right" if np.array_equal(long_[: len(short)], short) else \
        "left" if len(short) and np.array_equal(long_[-len(short):], short) else ""
    if not side:
        return None
    cut, cut_encoded = (a, ea) if len(pa) < len(pb) else (b, eb)
    limit = cut.info.max_length
    if limit is not None and cut_encoded.content_length() < limit:
        return None  # a prefix that did not reach the stage's limit is another difference (e.g. a dropped word)
    if limit is None and (cut.info.backend != "callable" or not _caps_length(cut, text, cut_encoded)):
        return None  # an hf: recipe without truncation, or a callable that does not cap a longer string
    evidence = {"lengths": [int(len(ca)), int(len(cb))], "max_length": [a.info.max_length, b.info.max_length],
                "kept": side}
    detail = (f"{cut.name} keeps {len(short)} of the other stage's {len(long_)} text tokens (truncated on the "
              f"{'right' if side == 'right' else 'left'}; lengths {len(ca)} vs {len(cb)} with special tokens)")
    if side == "left":
        detail = detail.replace("on the left", "on the left: it keeps the end")
    return codes.TRUNCATION.code, detail, evidence


def _caps_length(stage: LoadedStage, text: str, out: Encoded) -> bool:
    """A callable's limit is unknown: it truncates when the string doubled gives no more tokens than the string."""
    doubled = stage.encode_one(f"{text} {text}")
    return isinstance(doubled, Encoded) and doubled.content_length() == out.content_length()


def _truncation_side(a: LoadedStage, b: LoadedStage, ea: Encoded, eb: Encoded, pa: np.ndarray,
                     pb: np.ndarray) -> tuple[str, str, dict] | None:
    """Both cut to the same length: one kept the beginning and the other the end (declared sides differ)."""
    sides = (a.info.truncation_side, b.info.truncation_side)
    limits = (a.info.max_length, b.info.max_length)
    at_limit = [lim is not None and e.content_length() >= lim for e, lim in ((ea, limits[0]), (eb, limits[1]))]
    if not all(sides) or sides[0] == sides[1] or not any(at_limit) or np.array_equal(pa, pb):
        return None
    return (codes.TRUNCATION.code, f"both cut at {len(pa)} tokens, {a.name} from the {sides[0]} and {b.name} from "
            f"the {sides[1]}", {"truncation_side": list(sides), "max_length": list(limits)})


def _vocabulary(text: str, a: LoadedStage, b: LoadedStage, ea: Encoded, eb: Encoded) -> tuple[str, str, dict] | None:
    ia, ib = a.info, b.info
    if not ia.vocab_sha256 or not ib.vocab_sha256 or ia.vocab_sha256 == ib.vocab_sha256:
        return None
    for one, other in ((a, b), (b, a)):
        missing = [t for t in one.info.added_tokens if t in text and t not in set(other.info.added_tokens)
                   and _token_id(other, t) is None]
        if missing:
            return (codes.ADDED_TOKENS_MISSING.code, f"{one.name} has added token(s) {', '.join(missing[:5])} that "
                    f"{other.name}'s vocabulary lacks", {"missing_tokens": missing[:20], "in": one.name,
                                                         "not_in": other.name})
    moved = _ids_meaning_differently(a, b, ea, eb)
    if not moved:
        return None
    detail = (f"the vocabularies differ ({ia.vocab_sha256[:12]} vs {ib.vocab_sha256[:12]}); "
              + "; ".join(f"id {i} is {x!r} in {a.name} and {y!r} in {b.name}" for i, x, y in moved[:3]))
    return codes.VOCABULARY.code, detail, {"vocab_sha256": [ia.vocab_sha256, ib.vocab_sha256],
                                           "ids_meaning_differently": [list(m) for m in moved[:10]]}


def _token_id(stage: LoadedStage, token: str) -> int | None:
    try:
        value = stage.tokenizer.convert_tokens_to_ids(token)
    except Exception:  # noqa: BLE001
        return None
    return None if value is None or value == stage.info.unk_id else int(value)


def _ids_meaning_differently(a: LoadedStage, b: LoadedStage, ea: Encoded, eb: Encoded) -> list[tuple[int, str, str]]:
    ids = sorted(set(ea.ids.tolist()) | set(eb.ids.tolist()))[:2000]
    left, right = a.tokens(ids), b.tokens(ids)
    return [(i, x, y) for i, x, y in zip(ids, left, right, strict=True) if x != y]


def _reproduce(text: str, a: LoadedStage, b: LoadedStage, ea: Encoded, eb: Encoded) -> tuple[str, str] | None:
    """The first transform T with a(T(text)) == b(text) or b(T(text)) == a(text): (code, description)."""
    for name, code, transform in TRANSFORMS:
        changed = transform(text)
        if changed == text:
            continue
        for stage, target, other in ((a, eb, b), (b, ea, a)):
            out = stage.encode_one(changed)
            if isinstance(out, Encoded) and np.array_equal(_content(out, stage), _content(target, other)):
                return code, f"{name} before {stage.name} gives {other.name}'s ids"
    return None


def _unknown(a: LoadedStage, b: LoadedStage, ea: Encoded, eb: Encoded) -> tuple[str, str, dict] | None:
    ua = int(np.count_nonzero(ea.ids == a.info.unk_id)) if a.info.unk_id is not None else None
    ub = int(np.count_nonzero(eb.ids == b.info.unk_id)) if b.info.unk_id is not None else None
    if ua is None or ub is None or ua == ub:
        return None
    more = b if ub > ua else a
    return (codes.UNKNOWN_TOKENS.code, f"{more.name} maps more of the string to the unknown token ({ua} vs {ub})",
            {"unknown_tokens": [ua, ub]})
