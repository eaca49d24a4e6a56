"""The nightly job: a golden bundle against deployed endpoints, judged against each endpoint's history.

:func:`run_nightly` (see :mod:`gapcheck.nightly.run`) is the library entry point; the pieces are
:mod:`~gapcheck.nightly.probe` (one endpoint), :mod:`~gapcheck.nightly.status` (statuses and the drift
test), :mod:`~gapcheck.nightly.history` (SQLite), :mod:`~gapcheck.nightly.lock` (flock),
:mod:`~gapcheck.nightly.alerts` (webhooks) and :mod:`~gapcheck.nightly.config` (``[nightly]``).
Attributes load lazily, so the config loader can import the section model without numpy or tritonclient.
"""
from __future__ import annotations

from typing import Any

__all__ = ["NightlyRequest", "WebhookSettings", "run_nightly"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from gapcheck.nightly import run

        return getattr(run, name)
    raise AttributeError(f"module 'gapcheck.nightly' has no attribute {name!r}")
