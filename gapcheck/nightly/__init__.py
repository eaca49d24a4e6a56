"""The nightly job: a golden bundle against deployed endpoints, judged against each endpoint's history.

:func:`run_nightly` (see :mod:`gapcheck.nightly.run`) is the library entry point; the pieces are
:mod:`~gapcheck.nightly.probe` (one endpoint), :mod:`~gapcheck.nightly.status` (statuses and the drift
test), :mod:`~gapcheck.nightly.history` (SQLite), :mod:`~gapcheck.nightly.lock` (flock),
:mod:`~gapcheck.nightly.alerts` (webhooks) and :mod:`~gapcheck.nightly.config` (``[nightly]``).
"""
from gapcheck.nightly.run import NightlyRequest, WebhookSettings, run_nightly

__all__ = ["NightlyRequest", "WebhookSettings", "run_nightly"]
