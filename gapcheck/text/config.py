"""``[text]``: the text audit's options from gapcheck.toml / ``[tool.gapcheck]`` (file < environment < flags).

::

    [text]
    samples = "data/reviews.jsonl:text"   # relative to this file
    n = 5000                              # strings read (--n)
    repeats = 2                           # extra runs per stage on the first `probe` strings (--repeats)
    p_threshold = 0.01                    # KS drift rule (--p-threshold, --min-effect)
    min_effect = 0.1
    max_chars = 100000                    # a longer string is a bad_text sample

    [text.stages]                         # in order: the first is the reference
    train = "hf:./tokenizer"              # relative to this file
    serve = "hf:./tokenizer,slow,max_length=128"

Every value is checked when the file (or ``GAPCHECK_TEXT__<KEY>``) is read, before any work: numbers finite and in
range, stage names the ``--stage`` names (letters, digits, ``_-.``), targets without control characters and parsed
as ``--stage`` parses them (an unknown ``hf:`` setting is a configuration error naming ``text.stages.NAME``).
``[text]`` is consulted only by the text audit; ``[preprocess]``'s shared statistics (n, p_threshold, min_effect,
repeats) still apply to text when ``[text]`` does not set them, so one file can drive both audits.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from pydantic import Field, field_validator

from gapcheck.config import Section

#: option -> (the [text] key, the [preprocess] key that also holds it, or None); the one list of what merges
OPTIONS: dict[str, tuple[str, Optional[str]]] = {
    "max_samples": ("n", "n"),
    "repeats": ("repeats", "repeats"),
    "probe": ("probe", None),
    "diagnose": ("diagnose", None),
    "max_chars": ("max_chars", None),
    "p_threshold": ("p_threshold", "p_threshold"),
    "min_effect": ("min_effect", "min_effect"),
}


class TextSection(Section):
    samples: Optional[str] = Field(default=None, min_length=1, max_length=4096)
    stages: dict[str, str] = Field(default_factory=dict)
    n: Optional[int] = Field(default=None, ge=1)
    repeats: Optional[int] = Field(default=None, ge=0, le=1000)
    probe: Optional[int] = Field(default=None, ge=0, le=100_000)
    diagnose: Optional[int] = Field(default=None, ge=0, le=100_000)
    max_chars: Optional[int] = Field(default=None, ge=1, le=100_000_000)
    p_threshold: Optional[float] = Field(default=None, gt=0, lt=1, allow_inf_nan=False)
    min_effect: Optional[float] = Field(default=None, ge=0, le=1, allow_inf_nan=False)

    @field_validator("samples")
    @classmethod
    def _printable(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not value.isprintable():
            raise ValueError("must not hold control characters")
        return value

    @field_validator("stages")
    @classmethod
    def _stages(cls, stages: dict[str, str]) -> dict[str, str]:
        from gapcheck.errors import GapcheckError
        from gapcheck.report.text import safe_line
        from gapcheck.text.stages import make_stage

        for name, target in stages.items():
            if not name.isprintable() or not target.isprintable():
                raise ValueError(f"stage {safe_line(name)!r}: names and targets must not hold control characters")
            if len(target) > 4096:
                raise ValueError(f"stage {safe_line(name)!r}: a target of {len(target)} characters (at most 4096)")
            try:
                make_stage(name, target)  # the --stage rules: name pattern, target shape, hf: settings
            except GapcheckError as exc:
                raise ValueError(exc.message) from None
        return stages


@dataclasses.dataclass(frozen=True)
class TextRun:
    """What one text audit runs on, resolved: samples, ``NAME=TARGET`` stages and ``audit_text`` keywords."""

    samples: str | None
    stages: tuple[str, ...]
    options: Mapping[str, Any]


def resolve(config: Any, *, samples: str | None = None, stages: tuple[str, ...] = (),
            **flags: Any) -> TextRun:
    """Flags (None: not given) over ``[text]`` over ``[preprocess]``'s shared statistics over the library's defaults.

    ``config``: a :class:`gapcheck.config.GapcheckConfig` (None: no file). Stages and samples come from the flags
    when given, else from ``[text]``, else from ``[preprocess]`` (as the image path reads them); relative paths in
    the file are relative to the file."""
    unknown = set(flags) - set(OPTIONS)
    if unknown:
        raise TypeError(f"unknown text audit option(s): {', '.join(sorted(unknown))}")
    section = text_section(config)
    shared = getattr(config, "preprocess", None)
    options: dict[str, Any] = {}
    for option, (key, preprocess_key) in OPTIONS.items():
        for value in (flags.get(option), getattr(section, key),
                      getattr(shared, preprocess_key, None) if preprocess_key else None):
            if value is not None:
                options[option] = value
                break
    base = _base(config)
    if samples is None:
        samples = relative_samples(section.samples, base) if section.samples is not None else getattr(shared, "samples", None)
    if not stages:
        stages = tuple(f"{name}={relative_target(target, base)}" for name, target in section.stages.items())
    if not stages:  # [preprocess.stages.NAME] callable = "hf:..." (or module:fn); hf: paths relative to the file too
        stages = tuple(f"{s.name}={relative_target(s.target, base)}" for s in getattr(shared, "stages", ())
                       if getattr(s, "target", ""))
    return TextRun(samples=samples, stages=tuple(stages), options=options)


def text_section(config: Any) -> TextSection:
    """``[text]`` of ``config`` as validated (its defaults when absent or when ``config`` is None)."""
    found = config.section("text") if config is not None else None
    return found if isinstance(found, TextSection) else TextSection()


def _base(config: Any) -> Path:
    source = getattr(config, "source", None)
    return Path(source).parent if source is not None else Path.cwd()


def relative_samples(spec: str, base: Path) -> str:
    """``data/x.jsonl:text`` -> ``<base>/data/x.jsonl:text`` (the field after the last ':' kept)."""
    path, sep, field = spec.rpartition(":")
    if not sep or not path or "/" in field or "\\" in field or (base / spec).exists():
        path, field, sep = spec, "", ""
    if Path(path).is_absolute() or "://" in spec:
        return spec
    return f"{base / path}{sep}{field}"


def relative_target(target: str, base: Path) -> str:
    """``hf:./tok,slow`` and ``file.py:fn`` relative to the config file; ``module:fn`` as written."""
    if target.startswith("hf:"):
        path, comma, settings = target[3:].partition(",")
        return f"hf:{path if Path(path).is_absolute() else base / path}{comma}{settings}"
    module, _, attr = target.rpartition(":")
    if module.endswith(".py") and not Path(module).is_absolute():
        return f"{base / module}:{attr}"
    return target
