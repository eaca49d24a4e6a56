"""``LeakageSpec`` and ``DriftSpec``: the data checks' own options, resolved like every group (file < environment <
flags through :func:`gapcheck.cli.groups.resolve`; keys of ``[leakage]`` / ``[drift]``, environment
``GAPCHECK_LEAKAGE__NEAR`` ...) and validated once here. The library builds its options from them
(``LeakageOptions.from_spec`` / ``DriftOptions.from_spec``, whose defaults are the only ones: a field left ``None``
takes the library's): a group never imports the command library above it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from gapcheck.errors import UsageError
from gapcheck.groups.base import Group, Opt, check_number


def comma_list(values: tuple[str, ...] | list[str] | None) -> tuple[str, ...] | None:
    """Repeated and comma-separated names (``--key a,b --key c``) as one tuple; None when there are none."""
    parts = [p.strip() for v in values or () for p in str(v).split(",") if p.strip()]
    return tuple(parts) or None


@dataclass(frozen=True)
class LeakageSpec(Group):
    near: float | None = None
    key: tuple[str, ...] = ()
    group_column: str | None = None
    label_column: str | None = None
    columns: tuple[str, ...] = ()
    labels: Path | None = None
    within: bool | tuple[str, ...] | None = None  # True / False, or split names from a config file
    within_split: tuple[str, ...] = ()

    SECTION: ClassVar[str | None] = None  # its keys are the command section [leakage] (declare(..., section=...))
    OPTIONS: ClassVar[tuple[Opt, ...]] = (
        Opt("labels", "--labels", "CSV with path,label[,group] for image splits.", Optional[Path], key="labels"),
        Opt("near", "--near", "Near-duplicate similarity in [0, 1] (0.9, the default: ≤ 6 of 64 pHash bits differ).",
            Optional[float], key="near", low=0.0, high=1.0),
        Opt("key", "--key", "Key columns for table rows (comma list).", Optional[list[str]], key="key"),
        Opt("group_column", "--group-column", "Group id column (patient, user).", Optional[str], key="group_column"),
        Opt("label_column", "--label-column", "Label column of table splits.", Optional[str], key="label_column"),
        Opt("columns", "--columns", "Column names of .npy/.npz matrices.", Optional[list[str]]),
        Opt("within", "--within/--no-within", "Search every split (or none) for duplicates inside itself. Default: "
            "validation/test splits.", Optional[bool], key="within"),
        Opt("within_split", "--within-split", "Search only this split for duplicates inside itself (repeatable).",
            Optional[list[str]]),
    )

    @classmethod
    def from_cli(cls, fields: dict[str, Any], from_config: dict[str, Any]) -> dict[str, Any]:
        """--within-split names beat a configured ``within``; given together with --within/--no-within: refused."""
        if fields.get("within_split") and fields.get("within") is not None:
            if from_config.get("within") is None or fields["within"] is not from_config["within"]:
                raise UsageError("give --within/--no-within or --within-split, not both", parameter="within")
            fields = {**fields, "within": None}
        return fields

    def check(self) -> None:
        for name in ("key", "columns", "within_split"):
            object.__setattr__(self, name, comma_list(getattr(self, name)) or ())
        if isinstance(self.within, (list, str)):
            object.__setattr__(self, "within", tuple([self.within] if isinstance(self.within, str) else self.within))


@dataclass(frozen=True)
class DriftSpec(Group):
    p_threshold: float | None = None
    min_effect: float | None = None
    columns: tuple[str, ...] = ()
    seed: int = 0
    fail_underpowered: bool | None = None

    SECTION: ClassVar[str | None] = None  # its keys are the command section [drift]
    OPTIONS: ClassVar[tuple[Opt, ...]] = (
        Opt("columns", "--columns", "Columns to compare (comma list); for .npy/.npz the matrix's column names.",
            Optional[list[str]], key="columns"),
        Opt("p_threshold", "--p-threshold", "BH-corrected p below this (and the effect ≥ --min-effect) is drift. "
            "Default 0.01.", Optional[float], key="p_threshold", low=0.0, low_open=True, high=1.0),
        Opt("min_effect", "--min-effect", "Minimum effect: KS D or Wasserstein/ref std, Cramér's V. Default 0.1.",
            Optional[float], key="min_effect", low=0.0),
        Opt("seed", "--seed", "Seed of the row sample behind the KS tests.", int, low=0, high=2**32 - 1),
        Opt("fail_underpowered", "--fail-underpowered", "Make drift_underpowered (too few rows to detect "
            "--min-effect) a gap.", Optional[bool], key="fail_underpowered"),
    )

    def check(self) -> None:
        object.__setattr__(self, "columns", comma_list(self.columns) or ())
        if self.p_threshold is not None and check_number(self.p_threshold, "--p-threshold") >= 1.0:
            raise UsageError(f"--p-threshold must be < 1, got {self.p_threshold!r}")
