"""``[preprocess]``: preprocess-audit's section of gapcheck.toml, validated when the file is read and resolved here.

The section model is registered by name in :data:`gapcheck.config.SECTION_MODELS` (imported only when a file or the
environment has ``[preprocess]``); this module builds the stages (``[preprocess.stages.NAME]`` tables become
:class:`~gapcheck.preprocess.stages.StageSpec` values), so the config loader below never imports the preprocess
library. Relative paths (``samples``, a ``file.py:callable`` target) are relative to the config file when the file
gave them, to the working folder when the environment did. Light: pydantic only; the stage rules (names, target
shapes, step lists) are imported when a stage table is checked.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from pydantic import Field, field_validator, model_validator

from gapcheck.config import GapcheckConfig, Section
from gapcheck.errors import GapcheckError


class StageTable(Section):
    callable: Optional[str] = None
    steps: Optional[list[dict[str, Any]]] = None
    augmented: bool = False
    accepts: Literal["path", "bytes"] = "path"

    @model_validator(mode="after")
    def _one_source(self) -> StageTable:
        if (self.callable is None) == (self.steps is None):
            raise ValueError("needs exactly one of 'callable' or 'steps'")
        return self


class PreprocessSection(Section):
    samples: Optional[str] = None
    n: Optional[int] = Field(default=None, ge=1)
    p_threshold: Optional[float] = Field(default=None, gt=0, lt=1, allow_inf_nan=False)
    min_effect: Optional[float] = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    workers: Optional[int] = Field(default=None, ge=1)
    repeats: Optional[int] = Field(default=None, ge=0)
    tolerance: Optional[float] = Field(default=None, ge=0, allow_inf_nan=False)
    stages: dict[str, StageTable] = Field(default_factory=dict)

    @field_validator("stages")
    @classmethod
    def _stage_rules(cls, stages: dict[str, StageTable]) -> dict[str, StageTable]:
        """The ``--stage`` rules when the file is read (before any work): names, target shapes, step lists."""
        for name, table in stages.items():
            _spec(name, table, table.callable or "")
        return stages

    def resolved(self, name: str, config: GapcheckConfig) -> PreprocessConfig:
        """What preprocess-audit reads: relative paths made absolute, stage tables built into StageSpecs."""
        samples = None if self.samples is None else str(config.path(name, "samples", self.samples))
        stages = tuple(_spec(stage, table, _target(table, stage, name, config)) for stage, table in self.stages.items())
        values = self.model_dump(exclude={"stages", "samples"})
        return PreprocessConfig(samples=samples, stages=stages, **values)


@dataclass(frozen=True)
class PreprocessConfig:
    """[preprocess] resolved: paths made absolute, stages built (what preprocess-audit consumes)."""

    samples: str | None = None
    n: int | None = None
    p_threshold: float | None = None
    min_effect: float | None = None
    workers: int | None = None
    repeats: int | None = None
    tolerance: float | None = None
    stages: tuple[Any, ...] = ()  # gapcheck.preprocess.stages.StageSpec


def _target(table: StageTable, stage: str, name: str, config: GapcheckConfig) -> str:
    """A ``file.py:callable`` target is relative to the config file (the environment's: to the working folder)."""
    target = table.callable or ""
    module, _, attr = target.rpartition(":")
    if module.endswith(".py"):
        return f"{config.path(name, f'stages.{stage}.callable', module)}:{attr}"
    return target


def _spec(name: str, table: StageTable, target: str) -> Any:
    from gapcheck.preprocess.stages import make_spec

    try:
        return make_spec(name, target=target, steps=table.steps, augmented=table.augmented, accepts=table.accepts)
    except GapcheckError as exc:
        raise ValueError(exc.message) from None
