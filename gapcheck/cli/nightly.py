"""`gapcheck nightly`: the cron job, declared from the option groups; run, print, write reports, exit 0/1/2/3.

Exit codes: 0 every endpoint passes (pass, recovered, changed, drifting — the last two print warnings),
1 a gap on any endpoint, 3 any endpoint unreachable or failing (the night is incomplete; wins over 1)
or the history lock could not be taken in time, 2 bad config, golden bundle, header, webhook or number
(found before anything is recorded).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from gapcheck.cli.groups import Groups, declare, use
from gapcheck.errors import UsageError
from gapcheck.groups import InputSource, ReportTargets, TritonTarget, check_number
from gapcheck.nightly.config import (
    DEFAULT_HISTORY,
    DEFAULT_LOCK_WAIT_S,
    DEFAULT_MAX_IN_FLIGHT,
    MAX_IN_FLIGHT,
    MAX_LOCK_WAIT_S,
    MAX_PARALLEL_ENDPOINTS,
    NightlyConfig,
    WebhookFormat,
)

#: nightly names each endpoint with --endpoint NAME=URL; the rest of the Triton group applies to every endpoint.
NIGHTLY_TRITON = use(TritonTarget, skip=("url", "model", "protocol", "version"))
#: the bundle's inputs are its own; only the text options apply: the tokenizer in front of the endpoints is checked
NIGHTLY_TEXT = use(InputSource, skip=("specs", "file", "num_samples", "seed"))


@declare(NIGHTLY_TRITON, NIGHTLY_TEXT, ReportTargets, section="nightly")
def command(
    groups: Groups,
    golden: Optional[Path] = typer.Option(None, "--golden",
                                          help="The golden bundle folder (default: golden in the nightly config section)."),
    endpoint: list[str] = typer.Option([], "--endpoint",
        help="NAME=URL, e.g. prod=grpc://triton:8001/resnet?version=3 (repeatable; replaces the config's endpoints)."),
    history: Optional[Path] = typer.Option(None, "--history", help=f"SQLite history (default {DEFAULT_HISTORY})."),
    max_in_flight: Optional[int] = typer.Option(None, "--max-in-flight",
        help=f"Requests in flight per endpoint (default {DEFAULT_MAX_IN_FLIGHT}; [nightly] max_in_flight)."),
    parallel_endpoints: Optional[int] = typer.Option(None, "--parallel-endpoints",
        help="Endpoints checked at once, each with its own requests in flight (default 1: one after the other; "
             "[nightly] parallel_endpoints). Reports and history keep the endpoints' order."),
    lock_wait: Optional[float] = typer.Option(None, "--lock-wait",
        help=f"Seconds to wait for another run's lock (default {DEFAULT_LOCK_WAIT_S:g}; [nightly] lock_wait_s)."),
    webhook: Optional[str] = typer.Option(None, "--webhook",
        help="POST alerts here on new_failure/unreachable/changed/recovered."),
    webhook_format: Optional[WebhookFormat] = typer.Option(None, "--webhook-format", help="Payload shape."),
    webhook_secret_env: Optional[str] = typer.Option(None, "--webhook-secret-env",
        help="Environment variable holding the HMAC-SHA256 secret."),
    report_url: Optional[str] = typer.Option(None, "--report-url",
        help="Link to tonight's report in alerts (default: the --html/--json path)."),
    no_audit: bool = typer.Option(False, "--no-audit", help="Skip the deployment audit (compare outputs only)."),
) -> None:
    """Check deployed endpoints against a golden bundle; record the night; alert on changes."""
    from gapcheck.nightly import NightlyRequest, WebhookSettings, run_nightly
    from gapcheck.nightly.alerts import check_report_url
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option, resolve_paths
    from gapcheck.nightly.status import DriftParameters

    check_number(lock_wait, "--lock-wait", high=MAX_LOCK_WAIT_S)
    check_number(max_in_flight, "--max-in-flight", low=1, high=MAX_IN_FLIGHT)
    check_number(parallel_endpoints, "--parallel-endpoints", low=1, high=MAX_PARALLEL_ENDPOINTS)
    cfg = groups.config.section("nightly")
    assert isinstance(cfg, NightlyConfig)
    cfg = resolve_paths(cfg, groups.config.source)
    reports, target = groups[ReportTargets], groups[TritonTarget]
    golden_path = golden or (Path(cfg.golden) if cfg.golden else None)
    if golden_path is None:
        raise UsageError("no golden bundle: pass --golden or set golden in [nightly]")
    entries = [parse_endpoint_option(e) for e in endpoint] or list(cfg.endpoints)
    flag_timeout = target.timeout_s if "timeout_s" in groups.flags[TritonTarget] else None
    specs = tuple(endpoint_spec(entry, target, timeout_s=flag_timeout) for entry in entries)
    check_report_url(report_url)  # before any work: a credential in the link would reach every alert
    check_report_url(cfg.report_url, "[nightly] report_url")
    link = report_url or cfg.report_url or next(
        (Path(p).resolve().as_uri() for p in (reports.html, reports.json) if p is not None and str(p) != "-"), None)
    webhook_url = webhook or cfg.webhook
    settings = None if not webhook_url else WebhookSettings(
        url=webhook_url, format=webhook_format or cfg.webhook_format,
        secret_env=webhook_secret_env or cfg.webhook_secret_env, report_url=link)
    request = NightlyRequest(
        golden=golden_path, endpoints=specs, history=history or Path(cfg.history or DEFAULT_HISTORY), target=target,
        webhook=settings, lock_wait_s=cfg.lock_wait_s if lock_wait is None else lock_wait,
        max_in_flight=cfg.max_in_flight if max_in_flight is None else max_in_flight,
        parallel_endpoints=cfg.parallel_endpoints if parallel_endpoints is None else parallel_endpoints,
        drift=DriftParameters(cfg.drift.baseline_runs, cfg.drift.slack, cfg.drift.threshold), audit=not no_audit,
        text=_text(groups, cfg))
    result = run_nightly(request)
    code = reports.emit(result, Console(emoji=False, highlight=False))
    err = Console(emoji=False, stderr=True, highlight=False)
    for delivery in result.alerts:
        if not delivery.delivered:
            err.print(f"[yellow]webhook:[/yellow] alert for {escape(delivery.alert.endpoint)} to "
                      f"{escape(delivery.target)} failed: {escape(str(delivery.error))} (exit code unchanged)")
    raise typer.Exit(code)


def _text(groups: Groups, cfg: NightlyConfig) -> InputSource | None:
    """--text-samples / --tokenizer over [nightly] text_samples / tokenizer (file < environment < flags); None when
    neither names any. Built as the group, so a value from the file is checked as the flag is (exit 2). The group's
    options have no config key, so it checks its flags before this merge: a flag given alone beside the other key in
    the file is refused (give both flags); the environment overrides the file key by key."""
    given = groups[InputSource]
    text_samples = given.text_samples if given.text_samples is not None else cfg.text_samples
    tokenizer = given.tokenizer if given.tokenizer is not None else cfg.tokenizer
    if text_samples is None and tokenizer is None:
        return None
    if (text_samples, tokenizer) == (given.text_samples, given.tokenizer):
        return given
    return InputSource(text_samples=text_samples, tokenizer=tokenizer)
