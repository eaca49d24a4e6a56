"""Does today's tokenizer still give a golden bundle's token ids? The text side of a nightly run.

A bundle recorded with ``golden record --text-samples FILE --tokenizer hf:...`` holds token ids (real sentences,
tokenized once); nightly replays them to the endpoint, so it checks the model behind the endpoint, never the
tokenizer in front of it. :func:`check_bundle_tokenizer` closes that gap: the same strings through the tokenizer
the service uses today must give the bundle's ids, sample by sample (compared as arrays, laid out as the bundle's
input specs say, by :func:`gapcheck.text.feed.tokenized_samples`). When they do not, the tokenizer recorded in the
manifest decides what changed: if it still gives the bundle's ids, the strings are the same and the serving
tokenizer changed (``golden_tokenizer_changed``, with the root cause the text audit reproduces between the two);
otherwise the strings or the recorded files changed and which one is not guessed (``golden_text_unreproduced``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gapcheck.errors import GapcheckError, InputError
from gapcheck.findings import Finding, Subject
from gapcheck.report.text import safe_line

SHOWN = 10  # differing samples listed in a finding's evidence


def check_bundle_tokenizer(bundle: Any, text_samples: str, tokenizer: str) -> tuple[Finding, ...]:
    """Findings (none: every sample reproduced) for ``bundle`` (a path or a loaded
    :class:`~gapcheck.golden.bundle.GoldenBundle`) re-tokenized from ``text_samples`` with ``tokenizer``
    (an ``hf:`` recipe or ``module:fn``, as ``--tokenizer``). InputError when the bundle was not recorded from text."""
    from gapcheck.codes.text import GOLDEN_TEXT_UNREPRODUCED, GOLDEN_TOKENIZER_CHANGED

    loaded = _loaded(bundle)
    samples = loaded.manifest.get("samples", {})
    if samples.get("source") != "text" or not isinstance(samples.get("tokenizer"), str):
        raise InputError(f"golden bundle {safe_line(str(loaded.path))}: not recorded from text samples "
                         "(golden record --text-samples FILE --tokenizer hf:...), so it holds no tokenizer to check")
    recorded = samples["tokenizer"]
    today = _differing(loaded, text_samples, tokenizer)
    if not today:
        return ()
    evidence: dict[str, Any] = {"differing_samples": today[:SHOWN], "differing": len(today),
                                "samples": int(samples.get("count", 0)), "recorded_tokenizer": recorded,
                                "tokenizer": tokenizer, "text_samples": text_samples}
    subject = Subject(stage="tokenizer", sample=str(today[0]))
    try:
        if not recorded.startswith("hf:") and recorded != tokenizer:
            # a bundle is an input, and input is hostile: a manifest naming "os:system" or "evil.py:fn" must not
            # run it on every sentence. An hf: recipe is files, loaded as data (never with remote code)
            raise InputError(f"the recorded tokenizer {safe_line(recorded)!r} is code (module:fn); code named by a "
                             "bundle is never imported: compare it yourself with gapcheck preprocess-audit "
                             "--stage recorded=... --stage today=...")
        reproduced_by_recorded = not _differing(loaded, text_samples, recorded)
    except GapcheckError as exc:  # the recorded files are not here (another machine, deleted)
        evidence["recorded_error"] = safe_line(exc.message)
        return (GOLDEN_TEXT_UNREPRODUCED.finding(
            f"{len(today)} of {evidence['samples']} golden sample(s) are not reproduced by tokenizer "
            f"{safe_line(tokenizer)}, and the recorded tokenizer cannot be loaded here to tell whether the tokenizer "
            "or the strings changed", subject=subject, evidence=evidence),)
    if not reproduced_by_recorded:
        return (GOLDEN_TEXT_UNREPRODUCED.finding(
            f"{len(today)} of {evidence['samples']} golden sample(s) are not reproduced by tokenizer "
            f"{safe_line(tokenizer)}, nor by the recorded one: the strings in {safe_line(text_samples)} or the "
            "recorded tokenizer's files changed since recording (which one is not guessed)",
            subject=subject, evidence=evidence),)
    causes = _causes(text_samples, recorded, tokenizer, today, loaded)
    evidence["causes"] = causes
    named = ", ".join(causes) if causes else "no cause reproduced (unexplained)"
    return (GOLDEN_TOKENIZER_CHANGED.finding(
        f"tokenizer {safe_line(tokenizer)} gives other ids than the golden bundle on {len(today)} of "
        f"{evidence['samples']} sample(s); the recorded tokenizer still gives them: the serving tokenizer changed "
        f"({named})", subject=subject, evidence=evidence),)


def _loaded(bundle: Any) -> Any:
    if isinstance(bundle, (str, Path)):
        from gapcheck.golden import load_bundle

        return load_bundle(bundle)
    return bundle


def _specs(loaded: Any) -> list[Any]:
    from gapcheck.inputs import parse_input_spec

    return [parse_input_spec(f"{e['name']}:{'x'.join(str(d) for d in e['shape'])}:{e['dtype']}")
            for e in loaded.manifest["inputs"]]


def _differing(loaded: Any, text_samples: str, tokenizer: str) -> list[int]:
    """Indices of the bundle's samples the tokenizer does not give again (missing strings count as differing)."""
    from gapcheck.text.feed import tokenized_samples

    specs = _specs(loaded)
    per_sample = int(specs[0].shape[0])  # the bundle holds samples concatenated on the batch axis
    count = next(iter(loaded.inputs.values())).shape[0] // per_sample
    fresh = tokenized_samples(text_samples, tokenizer, specs, count)

    def recorded(name: str, i: int) -> np.ndarray:
        return loaded.inputs[name][i * per_sample:(i + 1) * per_sample]

    return [i for i in range(count)
            if i >= len(fresh) or any(not np.array_equal(fresh[i][name], recorded(name, i)) for name in loaded.inputs)]


def _causes(text_samples: str, recorded: str, tokenizer: str, differing: list[int], loaded: Any) -> list[str]:
    """The gap codes the text audit reproduces between the recorded and today's tokenizer on the bundle's strings."""
    from gapcheck.text.audit import audit_text

    per_sample = int(_specs(loaded)[0].shape[0])
    result = audit_text(text_samples, {"recorded": recorded, "today": tokenizer},
                        max_samples=(max(differing) + 1) * per_sample, repeats=0)
    return sorted({f.code for f in result.findings if f.is_gap})
