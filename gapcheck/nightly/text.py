"""The text side of a night: does the tokenizer in front of the endpoints still give the golden bundle's token ids?

Nightly replays the bundle's ids to the endpoints, so it checks the model behind them, never the tokenizer in front.
With ``--text-samples FILE[:field] --tokenizer hf:PATH`` (or ``[nightly] text_samples`` / ``tokenizer``) the same
strings go through today's tokenizer and must give the bundle's ids
(:func:`gapcheck.text.bundle_check.check_bundle_tokenizer`: ``golden_tokenizer_changed``, a gap, or
``golden_text_unreproduced``, a warning). The manifest keeps the SHA256 of the recorded samples file; when the file
given tonight is another one, the tokenizer is not judged on other strings: ``golden_text_samples_changed``.
"""
from __future__ import annotations

from typing import Any

from gapcheck.errors import InputError
from gapcheck.findings import Finding, Subject
from gapcheck.groups import InputSource
from gapcheck.report.text import safe_line


def check_text_bundle(manifest: dict[str, Any], path: Any, text: InputSource) -> None:
    """Before any work (exit 2, nothing recorded): a tokenizer check needs a bundle recorded from text, and today's
    tokenizer must load (a missing folder or broken files are found now, not after the first endpoint's requests)."""
    from gapcheck.text.stages import load_stage, make_stage

    samples = manifest.get("samples", {})
    if samples.get("source") != "text" or not isinstance(samples.get("tokenizer"), str):
        raise InputError(f"golden bundle {safe_line(str(path))}: not recorded from text samples (golden record "
                         "--text-samples FILE --tokenizer hf:...), so --text-samples/--tokenizer have nothing to check")
    assert text.tokenizer is not None  # InputSource.check() saw to it
    load_stage(make_stage("tokenizer", text.tokenizer))


def text_findings(bundle: Any, text: InputSource) -> tuple[Finding, ...]:
    """The tokenizer check's findings for a verified bundle (none: every sample reproduced)."""
    from gapcheck.golden.bundle import text_samples_sha256
    from gapcheck.text.bundle_check import check_bundle_tokenizer
    from gapcheck.text.samples import parse_source

    assert text.text_samples is not None and text.tokenizer is not None  # InputSource.check() saw to it
    samples = bundle.manifest["samples"]
    recorded, given = samples.get("text_samples_sha256"), text_samples_sha256(text.text_samples)
    if recorded is not None and (recorded != given or _field(samples) != parse_source(text.text_samples).field):
        return (_samples_changed(samples, text, recorded, given),)
    findings = check_bundle_tokenizer(bundle, text.text_samples, text.tokenizer)
    return tuple(_with_digests(f, recorded, given) for f in findings)


def _field(samples: dict[str, Any]) -> str | None:
    """The field or column the bundle was recorded from (``reviews.jsonl:body`` -> ``body``; a .txt: None)."""
    name = str(samples.get("text_samples") or "")
    return name.rpartition(":")[2] or None if ":" in name else None


def _samples_changed(samples: dict[str, Any], text: InputSource, recorded: str, given: str) -> Finding:
    from gapcheck.codes.nightly import TEXT_SAMPLES_CHANGED

    name = str(samples.get("text_samples") or "?")
    what = (f"SHA256 {recorded[:12]}…, given {given[:12]}…" if recorded != given else
            f"the same file, field {_field(samples)!r} recorded")
    return TEXT_SAMPLES_CHANGED.finding(
        f"text samples file changed: {safe_line(str(text.text_samples))} is not the file the golden bundle was "
        f"recorded from ({safe_line(name)}, {safe_line(what)}); tokenizer {safe_line(str(text.tokenizer))} is not "
        "judged on other strings",
        subject=Subject(stage="tokenizer", other="text_samples"),
        evidence={"recorded_text_samples": name, "recorded_sha256": recorded, "text_samples": text.text_samples,
                  "sha256": given, "tokenizer": text.tokenizer, "recorded_tokenizer": samples.get("tokenizer")})


def _with_digests(finding: Finding, recorded: str | None, given: str) -> Finding:
    """The check's finding, its evidence saying which samples file it read (recorded None: an older bundle)."""
    import dataclasses

    return dataclasses.replace(finding, evidence={**finding.evidence, "text_samples_sha256": given,
                                                  "recorded_text_samples_sha256": recorded})
