"""The drift report: the contract's head, the per-feature table, and the coverage heatmap."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gapcheck.data.common import SideSummary, TimedRun, bad_items_section
from gapcheck.data.drift import DriftOptions, FeatureDrift
from gapcheck.findings import Finding
from gapcheck.report.contract import Chart, ResultBase, Table
from gapcheck.report.text import safe_text


@dataclass(frozen=True)
class DriftResult(TimedRun, ResultBase):
    reference: SideSummary
    current: SideSummary
    options: DriftOptions
    features: tuple[FeatureDrift, ...]
    findings: tuple[Finding, ...]
    bad_items: tuple[tuple[str, str], ...] = ()
    engine: str = ""
    shards: int = 0
    sample_bound: float = 0.0  # DKW bound of the row sample's CDF (95%)
    sketch_rank_error: float = 0.0
    run_timings: dict[str, float] = field(default_factory=dict)
    command: str = "drift"

    @property
    def headline(self) -> str:
        # one count of features in both verdicts: identifier columns are not features (left out, said apart), and a
        # column no test could compare (all-missing, numbers against text) is no feature without drift: said apart
        drifted = [f.feature for f in self.features if f.drift]
        ids = sum(1 for f in self.features if f.identifier)
        clocks = [f.feature for f in self.features if f.time_order]
        untested = [f.feature for f in self.features if f.test == "none" and not f.drift and not f.left_out]
        features = len(self.features) - ids - len(clocks) - len(untested)
        left_out = ((f"; {ids} identifier column(s) left out" if ids else "")
                    + (f"; time-ordered split by {', '.join(clocks[:3])} (left out)" if clocks else "")
                    + (f"; {len(untested)} column(s) not tested: {', '.join(untested[:5])}" if untested else ""))
        if drifted:
            return f"{len(drifted)} of {features} feature(s) drifted: {', '.join(drifted[:5])}" + left_out
        others = sum(1 for f in self.findings if f.is_gap)
        weak = sum(1 for f in self.features if f.underpowered)
        return (f"no drift in {features} feature(s)" + (f"; {others} other gap(s)" if others else "")
                + left_out + (f"; {weak} too few rows to detect the minimum effect" if weak else ""))

    def sections(self) -> dict[str, Any]:
        options = dataclasses.asdict(self.options)
        options["columns"] = list(self.options.columns) if self.options.columns else None
        return {
            "reference": dataclasses.asdict(self.reference),
            "current": dataclasses.asdict(self.current),
            "options": options,
            "sample": {"size": self.options.sample_size, "seed": self.options.seed,
                       "cdf_error_bound_95": self.sample_bound},
            "features": [_feature_json(f) for f in self.features],
            "bad_items": bad_items_section(self.bad_items),
        }

    def views(self) -> Sequence[Table | Chart]:
        views: list[Table | Chart] = []  # findings are drawn by every format itself
        rows = tuple((f.feature, f.test, _n(f.p_value, ".2g"), _n(f.q_value, ".2g"), _n(f.ks_d, ".3f"),
                      _sketch(f.ks_d_sketch, self.sketch_rank_error), _n(f.wasserstein_std, ".3f"),
                      _n(f.cramers_v, ".3f"), _n(f.min_detectable_effect, ".3f"),
                      _missing(f), _verdict(f)) for f in self.features)
        views.append(Table(
            title="Drift per feature", columns=("feature", "test", "p", "q (BH)", "KS D", "KS D (KLL sketch)",
                                                "Wasserstein / ref std", "Cramér's V", "detectable ≥", "missing (±inf)",
                                                "verdict"),
            rows=rows, highlight=tuple(i for i, f in enumerate(self.features) if f.drift),
            note=f"p-values and KS D from a seeded sample of ≤ {self.options.sample_size} rows per side "
                 f"(CDF error ≤ {self.sample_bound:.4f} at 95%); the sketch column is ±{2 * self.sketch_rank_error:.3f}; "
                 f"'detectable ≥' is the smallest KS D / Cramér's V significant at p < {self.options.p_threshold:g} "
                 f"with these sample sizes."))
        covered = [f for f in self.features if f.coverage]
        if covered:  # labels neutralized here: matplotlib draws raw text
            width = max(len(f.coverage) for f in covered)
            views.append(Chart(
                title="Coverage: current share ÷ reference share in each reference decile", kind="heatmap",
                x=tuple(f"bin {i + 1}" for i in range(width)), y=tuple(safe_text(f.feature) for f in covered),
                matrix=tuple(_coverage_ratios(f) for f in covered),
                note="1 means the current split fills the bin as the reference does, 0 that it leaves it empty "
                     "(clipped at 2). Tied values merge deciles, so some features have fewer bins (blank cells); "
                     "the shares themselves are in the JSON (coverage, coverage_reference)."))
        views.append(Table(title="Run", columns=("engine", "shards", "reference rows", "current rows"),
                           rows=((self.engine, self.shards, self.reference.used, self.current.used),)))
        return views


def _feature_json(feature: FeatureDrift) -> dict[str, Any]:
    data = dataclasses.asdict(feature)
    data.pop("ks_d_sketch")  # not seeded (KLL): shown in views, kept out of the engine-independent JSON
    data.pop("clock")  # a time-ordered split's cut and strays are in its time_ordered_split finding's evidence
    data.pop("sentinels")  # an identifier's sentinels are in its identifier_column finding's evidence and reason
    data["coverage"] = list(feature.coverage)
    data["coverage_reference"] = list(feature.coverage_reference)
    return data


def _coverage_ratios(feature: FeatureDrift) -> tuple[float, ...]:
    return tuple(min(current / reference, 2.0) if reference else 0.0
                 for current, reference in zip(feature.coverage, feature.coverage_reference, strict=True))


def _missing(feature: FeatureDrift) -> str:
    """The missing-values cell, with the ±inf share beside it when a side holds any (set aside from the tests)."""
    cell = f"{feature.null_rate_reference:.1%} → {feature.null_rate_current:.1%}"
    if feature.infinite_reference or feature.infinite_current:
        cell += f"; ±inf {feature.infinite_rate_reference:.1%} → {feature.infinite_rate_current:.1%}"
    return cell


def _verdict(feature: FeatureDrift) -> str:
    return ("DRIFT" if feature.drift else "identifier" if feature.identifier else
            "time order" if feature.time_order else "underpowered" if feature.underpowered else "")


def _n(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def _sketch(value: float | None, error: float) -> str:
    return "" if value is None else f"{value:.3f} ± {2 * error:.3f}"
