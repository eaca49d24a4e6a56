"""What ``gapcheck preprocess-audit`` calls when its samples are text: decide, then run the text audit.

The CLI module stays thin: ``if is_text_audit(samples, stages): result = run_text_audit(...)`` and render the
result like any other (its envelope's command is ``preprocess-audit`` with ``input: text``, described by
``gapcheck/schemas/preprocess-audit-text.schema.json``).
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gapcheck.text.samples import TABLE_SUFFIXES

TEXT_SUFFIXES = {".txt", ".jsonl", ".ndjson"}


def is_text_audit(samples: str | Path, stages: Sequence[str] = ()) -> bool:
    """True when the samples are text (``.txt``, ``file.jsonl:field``, ``file.csv:column``, a folder holding only
    ``.txt`` files) or any stage is an ``hf:`` tokenizer recipe; image folders and files stay with the image path."""
    if any(s.partition("=")[2].strip().startswith("hf:") for s in stages):
        return True
    text = str(samples)
    path = Path(text)
    if not path.exists() and ":" in text:
        path = Path(text.rpartition(":")[0])
        return path.suffix.lower() in TEXT_SUFFIXES | set(TABLE_SUFFIXES)
    if path.exists() and not path.is_dir():  # a FIFO or device named .txt too: the text readers refuse it by name
        return path.suffix.lower() in TEXT_SUFFIXES
    if path.is_dir():
        # the first 1000 files decide: an image folder of a million files is not listed whole before the image path
        files = list(itertools.islice((p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")), 1000))
        return bool(files) and all(p.suffix.lower() == ".txt" for p in files)
    return False


def wants_text_audit(samples: str | Path | None, stages: Sequence[str] = (), config: Any = None) -> bool:
    """:func:`is_text_audit` on the flags; when they name no samples, ``[text] samples`` in ``config`` asks for the
    text audit, and otherwise what ``[preprocess]`` names is judged as the flags would be."""
    if samples is not None:
        return is_text_audit(samples, stages)
    from gapcheck.text.config import resolve, text_section

    if text_section(config).samples is not None:
        return True
    run = resolve(config, stages=tuple(stages))
    return run.samples is not None and is_text_audit(run.samples, run.stages)


def run_text_audit(samples: str | Path | None, stages: Sequence[str], *, config: Any = None,
                   max_samples: int | None = None, repeats: int | None = None, p_threshold: float | None = None,
                   min_effect: float | None = None, engine: str | None = None, workers: int | None = None,
                   address: str | None = None, progress: Any = None) -> Any:
    """Parsed CLI options -> :class:`~gapcheck.text.result.TextAuditResult` (usage errors raise, exit 2).

    Options left None are not given: ``[text]`` (and ``[preprocess]``'s shared statistics) of ``config``, a
    :class:`gapcheck.config.GapcheckConfig`, fill them, then the library's defaults (:mod:`gapcheck.text.config`).
    ``engine``: None runs in this process; ``serial``/``local``/``ray`` run chunks as engine shards."""
    from gapcheck.errors import UsageError
    from gapcheck.text.audit import DEFAULT_MAX_SAMPLES, audit_text
    from gapcheck.text.config import resolve

    run = resolve(config, samples=None if samples is None else str(samples), stages=tuple(stages),
                  max_samples=max_samples, repeats=repeats, p_threshold=p_threshold, min_effect=min_effect)
    if run.samples is None:
        raise UsageError("no samples: pass --samples or set [text] samples in gapcheck.toml")
    if not run.stages:
        raise UsageError("no stages: pass --stage NAME=hf:PATH or NAME=module:fn, or set [text.stages]")
    options: dict[str, Any] = {"max_samples": DEFAULT_MAX_SAMPLES, **run.options, "progress": progress}
    if engine is None:
        return audit_text(run.samples, list(run.stages), **options)
    from gapcheck.engines import open_engine

    with open_engine(engine, workers=workers, address=address) as opened:
        return audit_text(run.samples, list(run.stages), engine=opened, **options)
