"""``PrecisionSpec``: the reduced-precision options every spelling shares, declared once as an option group.

``gapcheck precision``, ``gapcheck export-diff --precision fp16|int8 --fix OUT`` and ``gapcheck export --precision
... --repository DIR`` declare this group (:func:`gapcheck.cli.groups.declare`), so each flag has one spelling, one
default and one validation; :meth:`PrecisionSpec.request` builds the one :class:`~gapcheck.precision.api.PrecisionRequest`
they all run through :func:`~gapcheck.precision.run_precision`. Light module: no torch, numpy or ONNX at import.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from gapcheck.errors import UsageError
from gapcheck.groups.base import Group, Opt

PRECISIONS = ("fp16", "int8")
METHODS = ("minmax", "entropy", "percentile")
INT8_MODES = ("auto", "static", "dynamic")
#: the fields that only mean something with a reduced precision: any of them given without one is a usage error
PRECISION_ONLY = ("fix", "calibration", "calibration_stage", "calibration_method", "int8_mode", "targets", "max_runs",
                  "sensitivity")
SENSITIVITY = ("local", "alone")
#: of those, the INT8-only ones (FP16 refuses them): an error about them names int8 alone
INT8_ONLY = frozenset({"calibration", "calibration_stage", "calibration_method", "int8_mode", "targets", "sensitivity"})


@dataclass(frozen=True)
class PrecisionSpec(Group):
    precision: str | None = None  # None: the command's plain behaviour (export-diff fp32, a plain export)
    fix: Path | None = None
    calibration: Path | None = None
    calibration_stage: str | None = None
    calibration_method: str = "minmax"
    int8_mode: str = "auto"
    targets: tuple[str, ...] = ()
    max_runs: int = 3
    sensitivity: str = "local"

    SECTION: ClassVar[str | None] = "precision"  # [precision]: the defaults of every spelling (not --fix's path)
    OPTIONS: ClassVar[tuple[Opt, ...]] = (
        Opt("precision", "--precision", "Reduced precision to find, fix and verify: fp16 or int8.", Optional[str]),
        Opt("fix", "--fix", "Write the fixed model here (only once it is verified); the original export is never "
            "touched.", Optional[Path]),
        Opt("calibration", "--calibration", "INT8 calibration samples: .npz/.pt, a golden bundle, or a folder of raw "
            "samples (with --calibration-stage).", Optional[Path], key="calibration"),
        Opt("calibration_stage", "--calibration-stage", "Preprocessing of a folder of raw calibration samples: "
            "NAME=module:callable.", Optional[str], key="calibration_stage"),
        Opt("calibration_method", "--calibration-method", "INT8 calibration: minmax, entropy or percentile.", str,
            key="calibration_method"),
        Opt("int8_mode", "--int8-mode", "INT8: auto (dynamic for text models), static (QDQ) or dynamic.", str,
            key="int8_mode"),
        Opt("targets", "--target", "INT8 task-level target, e.g. top1-agreement=0.99, cosine=0.999, "
            "max-rel-error=0.05 (repeatable; default cosine=0.99).", list[str], key="targets", metavar="MEASURE=NUMBER"),
        Opt("max_runs", "--max-runs", "FP16: verification runs of the fix at most.", int, key="max_runs", low=1, high=10),
        Opt("sensitivity", "--sensitivity", "INT8 ranking: local (the error a module's quantized ops add over their "
            "inputs) or alone (the outputs' error with only that module quantized; one more run per sample).", str,
            key="sensitivity"),
    )

    @classmethod
    def from_cli(cls, values: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        for name in ("precision", "calibration_method", "int8_mode", "sensitivity"):
            if isinstance(values.get(name), str):
                values[name] = values[name].strip().lower()
        configured = config.get("targets")
        if configured is not None and values.get("targets") is configured:
            _check_configured_targets(configured)  # from the file, not --target: the error names the file's key
        return values

    def check(self) -> None:
        from gapcheck.precision.targets import parse_target

        if self.precision is not None and self.precision not in PRECISIONS:
            raise UsageError(f"--precision must be fp16 or int8, not {self.precision!r}", parameter="precision")
        if self.calibration_method not in METHODS:
            raise UsageError(f"--calibration-method must be one of {', '.join(METHODS)}, not "
                             f"{self.calibration_method!r}", parameter="calibration_method")
        if self.int8_mode not in INT8_MODES:
            raise UsageError(f"--int8-mode must be one of {', '.join(INT8_MODES)}, not {self.int8_mode!r}",
                             parameter="int8_mode")
        if self.sensitivity not in SENSITIVITY:
            raise UsageError(f"--sensitivity must be local or alone, not {self.sensitivity!r}", parameter="sensitivity")
        for text in self.targets:
            parse_target(text)

    def changed(self) -> list[str]:
        """The precision-only options set away from their defaults, as flags (for "needs --precision" errors)."""
        defaults = self.defaults()
        return [self.option(name).flag for name in PRECISION_ONLY if getattr(self, name) != defaults[name]]

    def require_precision(self, precision: str | None, *, plain: str) -> None:
        """Refuse precision-only options without a reduced precision (exit 2): ``plain`` names what runs instead."""
        changed = self.changed()
        if precision not in PRECISIONS and changed:
            int8_flags = {self.option(name).flag for name in INT8_ONLY}
            wanted = "int8" if set(changed) <= int8_flags else "fp16 or int8"
            raise UsageError(f"{', '.join(changed)} need{'s' if len(changed) == 1 else ''} --precision {wanted} "
                             f"({plain} has nothing to fix)", parameter="precision")

    def request(self, *, model: Any, inputs: Any, tolerance: Any, export: Any, precision: str | None = None,
                fix: Path | None = None) -> Any:
        """The one request every spelling runs (``precision``/``fix`` override this group's, e.g. export-diff's
        own ``--precision``)."""
        from gapcheck.precision.api import PrecisionRequest
        from gapcheck.precision.targets import parse_target

        return PrecisionRequest(
            model=model, inputs=inputs, tolerance=tolerance, export=export, precision=precision or self.precision
            or "fp16", fix_path=fix if fix is not None else self.fix, calibration=self.calibration,
            calibration_stage=self.calibration_stage, calibration_method=self.calibration_method,
            int8_mode=self.int8_mode, targets=tuple(parse_target(t) for t in self.targets), max_runs=self.max_runs,
            sensitivity=self.sensitivity)


def _check_configured_targets(configured: Any) -> None:
    from gapcheck.precision.targets import parse_target

    where = "precision.targets in the config file"
    for text in configured if isinstance(configured, list | tuple) else [configured]:
        try:
            parse_target(str(text), where=where)
        except UsageError as exc:
            message = exc.message if exc.message.startswith(where) else f"{where}: {exc.message}"
            raise UsageError(message, parameter="targets") from exc
