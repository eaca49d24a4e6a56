"""An endpoint's status tonight, relative to its history; the drift test (one-sided CUSUM).

Statuses, in order of precedence (one per endpoint and night):

=================  ===========================================================================
``unreachable``    down, timing out, not ready, or a request failed: never a pass (exit 3). Not so a request
                   the server refuses as wrong (endpoint_rejected_request) or an answer that cannot be read
                   as the outputs it declares (endpoint_malformed_answer): the endpoint answered, a gap
``new_failure``    a gap tonight; the last night with a verdict passed (or there is none)
``known_failure``  a gap tonight and on the last night with a verdict
``recovered``      passes tonight; the last night was a gap or unreachable
``changed``        passes; the served version, the config hash, the precision or the golden bundle differs from the
                   last night
``drifting``       passes, but the one-sided CUSUM of the error has crossed its threshold
``pass``           passes, nothing else to say
=================  ===========================================================================

Drift (parameters in :class:`DriftParameters`, from ``[nightly.drift]``): per output, the statistic
is the *error ratio* r = max |served - golden| / allowed error at the worst element (r = 1 is the
tolerance; see :attr:`gapcheck.compare.ErrorStats.error_ratio`), so every output is measured on the
same scale. Over the passing nights since the deployment last changed (same golden bundle, served
version and config hash), the baseline μ0 is the mean r of the first ``baseline_runs`` nights and

    S_0 = 0,   S_t = max(0, S_{t-1} + r_t - μ0 - slack)

and the output is drifting when S_t > ``threshold`` while r_t < 1. With the defaults (3 nights, slack
0.05, threshold 0.25) an error growing by 10% of the tolerance per night is flagged on its third night
of growth, far below the tolerance, while jitter smaller than 5% of the tolerance never accumulates.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from gapcheck.nightly.history import EndpointRecord


class Status(str, Enum):
    PASS = "pass"
    NEW_FAILURE = "new_failure"
    KNOWN_FAILURE = "known_failure"
    RECOVERED = "recovered"
    DRIFTING = "drifting"
    UNREACHABLE = "unreachable"
    CHANGED = "changed"

    @property
    def alerts(self) -> bool:
        """Statuses worth a webhook (not every night)."""
        return self in (Status.NEW_FAILURE, Status.UNREACHABLE, Status.CHANGED, Status.RECOVERED)


@dataclass(frozen=True)
class DriftParameters:
    baseline_runs: int = 3
    slack: float = 0.05
    threshold: float = 0.25

    def __post_init__(self) -> None:
        if self.baseline_runs < 1 or not (self.slack >= 0 and self.threshold > 0):
            raise ValueError("drift parameters: baseline_runs >= 1, slack >= 0, threshold > 0")


@dataclass(frozen=True)
class Tonight:
    """What the nightly run saw on one endpoint, before the history is consulted."""

    reachable: bool
    gap: bool
    served_version: str | None
    config_hash: str | None
    golden_hash: str
    error_ratios: dict[str, float]  # per output
    precision: str = "fp32"  # fp16: an FP16 deployment's budgets; error ratios under other budgets are not one series


@dataclass(frozen=True)
class Change:
    # "served_version" | "config_hash" | "precision" (fp32 | fp16: the budgets the night was compared with) |
    # "golden_hash" (another golden bundle: the manifest's SHA256)
    what: str
    before: str | None
    after: str | None


@dataclass(frozen=True)
class Classification:
    status: Status
    changes: tuple[Change, ...]
    cusum: dict[str, float]  # per output (0 when there is no baseline yet)
    drifting_outputs: tuple[str, ...]
    previous_status: str | None


def _same_deployment(record: EndpointRecord, tonight: Tonight) -> bool:
    return (record.golden_hash == tonight.golden_hash and record.served_version == tonight.served_version
            and record.config_hash == tonight.config_hash and record.precision == tonight.precision)


def cusum(ratios: Sequence[float], params: DriftParameters) -> float:
    """The one-sided CUSUM statistic after the last of ``ratios`` (0 while the baseline is being collected)."""
    values = [r for r in ratios if math.isfinite(r)]
    if len(values) <= params.baseline_runs:
        return 0.0
    baseline = sum(values[:params.baseline_runs]) / params.baseline_runs
    statistic = 0.0
    for value in values[params.baseline_runs:]:
        statistic = max(0.0, statistic + value - baseline - params.slack)
    return statistic


def _drift(history: Sequence[EndpointRecord], tonight: Tonight, params: DriftParameters) -> dict[str, float]:
    # The nights since the deployment last changed, passing ones only (a gap night is not "creeping").
    segment: list[EndpointRecord] = []
    for record in reversed(history):
        if record.status == Status.UNREACHABLE.value:
            continue
        if not _same_deployment(record, tonight) or record.verdict != "pass":
            break
        segment.append(record)
    segment.reverse()
    out = {}
    for output, ratio in tonight.error_ratios.items():
        series = [o.error_ratio for r in segment for o in r.outputs if o.output == output and o.error_ratio is not None]
        out[output] = cusum([*series, ratio], params)
    return out


def classify(tonight: Tonight, history: Sequence[EndpointRecord], params: DriftParameters = DriftParameters()
             ) -> Classification:
    """Tonight's status for one endpoint given its earlier results (oldest first)."""
    previous = history[-1] if history else None
    judged = [r for r in history if r.status != Status.UNREACHABLE.value]
    last_judged = judged[-1] if judged else None
    changes: list[Change] = []
    last_seen = judged[-1] if judged else None
    if tonight.reachable and last_seen is not None:
        # golden_hash: another golden bundle than the last night's (its tolerances, its samples): a verdict that
        # turned with it may be the bundle's doing, not the deployment's (the attacker review: a bundle with its
        # rtol loosened turned a broken deployment into "recovered", the new hash said nowhere but the run line)
        for what, before, after in (("served_version", last_seen.served_version, tonight.served_version),
                                    ("config_hash", last_seen.config_hash, tonight.config_hash),
                                    ("precision", last_seen.precision, tonight.precision),
                                    ("golden_hash", last_seen.golden_hash, tonight.golden_hash)):
            if before != after and not (before is None or after is None):
                changes.append(Change(what, before, after))
    previous_status = previous.status if previous else None
    if not tonight.reachable:
        return Classification(Status.UNREACHABLE, (), {}, (), previous_status)
    statistic = _drift(history, tonight, params) if not tonight.gap else {}
    drifting = tuple(sorted(o for o, s in statistic.items()
                            if s > params.threshold and tonight.error_ratios.get(o, math.inf) < 1.0))
    if tonight.gap:
        known = last_judged is not None and last_judged.verdict == "gap"
        status = Status.KNOWN_FAILURE if known else Status.NEW_FAILURE
    elif previous is not None and (previous.status == Status.UNREACHABLE.value or previous.verdict == "gap"):
        status = Status.RECOVERED
    elif changes:
        status = Status.CHANGED
    elif drifting:
        status = Status.DRIFTING
    else:
        status = Status.PASS
    return Classification(status, tuple(changes), statistic, drifting, previous_status)
