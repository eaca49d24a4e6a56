"""The report-contract result of ``gapcheck golden record`` and ``gapcheck golden verify``."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gapcheck.findings import Finding
from gapcheck.golden.bundle import load_bundle, read_manifest
from gapcheck.golden.record import RecordOutcome
from gapcheck.report.contract import Check, ResultBase, Table


@dataclass(frozen=True)
class GoldenResult(ResultBase):
    """A bundle that was recorded or verified (a refused bundle never gets here: it raises InputError)."""

    action: str  # "record" | "verify"
    bundle: dict[str, Any]
    files: tuple[str, ...]
    findings: tuple[Finding, ...] = ()
    seconds: dict[str, float] = field(default_factory=dict)
    command: str = "golden"

    @property
    def headline(self) -> str:
        b = self.bundle
        verb = "recorded" if self.action == "record" else "verified"
        return (f"golden bundle {verb}: {b['samples']} samples, outputs {', '.join(o['name'] for o in b['outputs'])}, "
                f"{len(self.files)} files checked, bundle {b['bundle_hash'][:12]}")

    @property
    def timings(self) -> Mapping[str, float]:
        return dict(self.seconds)

    def sections(self) -> dict[str, Any]:
        return {"action": self.action, "bundle": self.bundle, "files": list(self.files)}

    def views(self) -> Sequence[Table]:
        b = self.bundle
        rows = tuple((o["name"], o["dtype"], "x".join(str(d) for d in o["shape"]),
                      b["tolerances"][o["name"]]["rtol"], b["tolerances"][o["name"]]["atol"]) for o in b["outputs"])
        views: list[Table] = [Table("Golden outputs", ("output", "dtype", "shape per sample", "rtol", "atol"), rows,
                                    note=f"{b['path']} · bundle {b['bundle_hash']}")]
        return views

    def checks(self) -> Sequence[Check]:
        return [Check(name=f"file {name}", classname="golden.verify") for name in self.files] + \
            [Check(name=f.code, classname="golden.record", details=f.message) for f in self.findings]


def verify_bundle(path: str | Path) -> GoldenResult:
    """Verify every file of the bundle (InputError naming the file when one is wrong) and summarize it.

    Beyond the hashes, the recorded ONNX export is parsed and checked: a manifest rewritten around a file
    that is no model would otherwise pass here and fail only in the nightly's audit."""
    bundle = load_bundle(path)  # every sample's recorded fingerprint checked with it
    bundle.onnx_model()
    return GoldenResult(action="verify", bundle=bundle.summary(), files=tuple(sorted(bundle.manifest["files"])))


def recorded_result(outcome: RecordOutcome) -> GoldenResult:
    """The result of a fresh recording, summarized from the bundle as written (and verified once)."""
    bundle = load_bundle(outcome.path)
    manifest, _ = read_manifest(Path(outcome.path))
    return GoldenResult(action="record", bundle=bundle.summary(), files=tuple(sorted(manifest["files"])),
                        findings=outcome.findings, seconds=dict(outcome.seconds))
