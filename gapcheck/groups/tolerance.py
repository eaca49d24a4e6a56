"""``ToleranceSpec``: global rtol/atol and per-module/output overrides; :meth:`policy` is THE tolerance policy."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from gapcheck.errors import UsageError
from gapcheck.groups.base import Group, Opt, check_number


@dataclass(frozen=True)
class ToleranceSpec(Group):
    rtol: float | None = None
    atol: float | None = None
    overrides: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # glob -> (rtol, atol)

    OPTIONS: ClassVar[tuple[Opt, ...]] = (
        Opt("rtol", "--rtol", "Relative tolerance (default: per dtype).", Optional[float], key="rtol", low=0.0),
        Opt("atol", "--atol", "Absolute tolerance (default: per dtype).", Optional[float], key="atol", low=0.0),
        Opt("overrides", "--tolerance", "Per-module/output override PATTERN=RTOL,ATOL (glob; repeatable).", list[str],
            key="tolerances"),
    )

    def check(self) -> None:
        for pattern, pair in self.overrides.items():
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise UsageError(f"--tolerance {pattern!r} needs RTOL,ATOL")
            for value, what in zip(pair, ("RTOL", "ATOL"), strict=True):
                check_number(value, f"--tolerance {pattern} {what}", low=0.0)

    @classmethod
    def from_cli(cls, values: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        """``--tolerance`` items parsed; the config's ``tolerances`` table first, flags override per pattern."""
        given = values.get("overrides") or ()
        flags = dict(given) if isinstance(given, Mapping) else parse_overrides(list(given))
        values["overrides"] = {**dict(config.get("overrides") or {}), **flags}
        return values

    def policy(self, precision: str = "fp32") -> Any:
        """The ``gapcheck.compare.TolerancePolicy`` every comparison of this run uses (dtype defaults for what is
        not set; a reduced ``precision`` scales the overrides' atol like the defaults')."""
        from gapcheck.compare import Tolerance, TolerancePolicy

        scale = precision != "fp32"
        overrides = {k: Tolerance(r, a, scale_atol=scale) for k, (r, a) in self.overrides.items()}
        return TolerancePolicy(rtol=self.rtol, atol=self.atol, overrides=overrides, precision=precision)

    def as_dict(self) -> dict[str, Any]:
        return {"rtol": self.rtol, "atol": self.atol,
                "overrides": {k: {"rtol": v[0], "atol": v[1]} for k, v in self.overrides.items()}}


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """``--tolerance 'layer1.*=1e-3,1e-4'`` -> {pattern: (rtol, atol)}; every number finite and >= 0."""
    overrides = {}
    for item in items:
        pattern, _, numbers = item.partition("=")
        try:
            rtol, atol = (float(x) for x in numbers.split(","))
        except ValueError:
            raise UsageError(f"--tolerance expects PATTERN=RTOL,ATOL, got {item!r}") from None
        if not pattern.strip():
            raise UsageError(f"--tolerance expects PATTERN=RTOL,ATOL, got {item!r}")
        check_number(rtol, f"--tolerance {pattern.strip()} RTOL")
        check_number(atol, f"--tolerance {pattern.strip()} ATOL")
        overrides[pattern.strip()] = (rtol, atol)
    return overrides
