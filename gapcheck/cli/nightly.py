"""`gapcheck nightly`: the cron job. Parse flags over ``[nightly]``, run, print, write reports, exit 0/1/2/3.

Exit codes: 0 every endpoint passes (pass, recovered, changed, drifting — the last two print warnings),
1 a gap on any endpoint, 3 any endpoint unreachable or failing (the night is incomplete; wins over 1)
or the history lock could not be taken in time, 2 bad config or golden bundle.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from gapcheck.errors import UsageError
from gapcheck.nightly.config import DEFAULT_HISTORY, WebhookFormat


def command(
    golden: Optional[Path] = typer.Option(None, "--golden",
                                          help="The golden bundle folder (default: golden in the nightly config section)."),
    endpoint: list[str] = typer.Option([], "--endpoint",
        help="NAME=URL, e.g. prod=grpc://triton:8001/resnet?version=3 (repeatable; replaces the config's endpoints)."),
    history: Optional[Path] = typer.Option(None, "--history", help=f"SQLite history (default {DEFAULT_HISTORY})."),
    header: list[str] = typer.Option([], "--header", help="Request header KEY:VALUE for every endpoint (never printed)."),
    timeout: Optional[float] = typer.Option(None, "--timeout",
        help="Seconds per request (default 30 or the endpoint's timeout_s)."),
    retries: Optional[int] = typer.Option(None, "--retries", help="Retries of transient endpoint failures."),
    deadline: Optional[float] = typer.Option(None, "--deadline", help="Total seconds per endpoint (default 600)."),
    max_in_flight: Optional[int] = typer.Option(None, "--max-in-flight", help="Requests in flight per endpoint (default 4)."),
    lock_wait: Optional[float] = typer.Option(None, "--lock-wait", help="Seconds to wait for another run's lock (default 60)."),
    webhook: Optional[str] = typer.Option(None, "--webhook",
        help="POST alerts here on new_failure/unreachable/changed/recovered."),
    webhook_format: Optional[WebhookFormat] = typer.Option(None, "--webhook-format", help="Payload shape."),
    webhook_secret_env: Optional[str] = typer.Option(None, "--webhook-secret-env",
        help="Environment variable holding the HMAC-SHA256 secret."),
    report_url: Optional[str] = typer.Option(None, "--report-url",
        help="Link to tonight's report in alerts (default: the --html/--json path)."),
    no_audit: bool = typer.Option(False, "--no-audit", help="Skip the deployment audit (compare outputs only)."),
    config: Optional[Path] = typer.Option(None, "--config", help="gapcheck.toml or pyproject.toml (default: discovered)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the JSON report here."),
    junit_path: Optional[Path] = typer.Option(None, "--junit", help="Write a JUnit XML report here."),
    html_path: Optional[Path] = typer.Option(None, "--html", help="Write a self-contained HTML report here."),
    max_rows: int = typer.Option(0, "--max-rows", min=0, help="Rows of each console table (0: all)."),
) -> None:
    """Check deployed endpoints against a golden bundle; record the night; alert on changes."""
    from gapcheck.cli.triton_options import parse_headers
    from gapcheck.nightly import NightlyRequest, WebhookSettings, run_nightly
    from gapcheck.nightly.config import endpoint_spec, load_nightly_config, parse_endpoint_option
    from gapcheck.nightly.status import DriftParameters
    from gapcheck.report.formats import ReportFormat, check_writable, write_report
    from gapcheck.report.formats.console_format import print_result

    reports = {fmt: p for fmt, p in ((ReportFormat.JSON, json_path), (ReportFormat.JUNIT, junit_path),
                                     (ReportFormat.HTML, html_path)) if p is not None}
    for path in reports.values():
        check_writable(path)
    cfg = load_nightly_config(config)
    golden_path = golden or (Path(cfg.golden) if cfg.golden else None)
    if golden_path is None:
        raise UsageError("no golden bundle: pass --golden or set golden in [nightly]")
    entries = [parse_endpoint_option(e) for e in endpoint] or list(cfg.endpoints)
    extra_headers = parse_headers(header)
    specs = []
    for entry in entries:
        updates: dict[str, object] = {"headers": {**entry.headers, **extra_headers}}
        if timeout is not None:
            updates["timeout_s"] = timeout
        specs.append(endpoint_spec(entry.model_copy(update=updates)))
    webhook_url = webhook or cfg.webhook
    link = report_url or cfg.report_url or next(
        (p.resolve().as_uri() for p in (html_path, json_path) if p is not None), None)
    settings = None if not webhook_url else WebhookSettings(
        url=webhook_url, format=webhook_format or cfg.webhook_format,
        secret_env=webhook_secret_env or cfg.webhook_secret_env, report_url=link)
    request = NightlyRequest(
        golden=golden_path, endpoints=tuple(specs),
        history=history or Path(cfg.history or DEFAULT_HISTORY), webhook=settings,
        lock_wait_s=cfg.lock_wait_s if lock_wait is None else lock_wait,
        max_in_flight=cfg.max_in_flight if max_in_flight is None else max_in_flight,
        deadline_s=cfg.deadline_s if deadline is None else deadline,
        retries=cfg.retries if retries is None else retries,
        drift=DriftParameters(cfg.drift.baseline_runs, cfg.drift.slack, cfg.drift.threshold),
        audit=not no_audit)
    if request.max_in_flight < 1 or request.deadline_s <= 0 or request.lock_wait_s < 0:
        raise UsageError("--max-in-flight must be >= 1, --deadline > 0 and --lock-wait >= 0")
    result = run_nightly(request)
    console = Console(highlight=False)
    print_result(console, result, max_rows=max_rows or None)
    err = Console(stderr=True, highlight=False)
    for delivery in result.alerts:
        if not delivery.delivered:
            err.print(f"[yellow]webhook:[/yellow] alert for {escape(delivery.alert.endpoint)} to "
                      f"{escape(delivery.target)} failed: {escape(str(delivery.error))} (exit code unchanged)")
    for fmt, path in reports.items():
        write_report(fmt, path, result)
    raise typer.Exit(int(result.exit_code))
