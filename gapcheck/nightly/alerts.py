"""Webhook alerts: one POST per endpoint whose status is worth waking someone for.

Sent on ``new_failure``, ``unreachable``, ``changed`` and ``recovered`` (see :attr:`Status.alerts`),
never for a plain pass. Three payload shapes: ``generic`` (gapcheck's own JSON), ``slack`` (an
incoming-webhook message with blocks) and ``teams`` (an Office 365 connector MessageCard). With a
secret (read from an environment variable, never from a flag or a file) the body is signed:
``X-Gapcheck-Signature: sha256=<hex HMAC-SHA256(secret, timestamp + "." + body)>`` with the timestamp in
``X-Gapcheck-Timestamp``, so a receiver can refuse replays. Each attempt has a timeout, attempts are
bounded, and a failure is returned (to be recorded and printed) — it never raises and never changes the
exit code. Webhook URLs are secrets too (Slack's carry the token in the path): only the scheme and host
are ever shown.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from gapcheck.errors import UsageError
from gapcheck.nightly.config import WebhookFormat

SIGNATURE_HEADER = "X-Gapcheck-Signature"
TIMESTAMP_HEADER = "X-Gapcheck-Timestamp"
_COLORS = {"new_failure": "B00020", "unreachable": "B00020", "changed": "B26A00", "recovered": "00A060"}


@dataclass(frozen=True)
class Alert:
    endpoint: str
    url: str  # the endpoint's display URL (no credentials)
    status: str
    headline: str
    worst_outputs: tuple[dict[str, Any], ...]
    run_id: str
    report_url: str | None = None
    last_pass_at: str | None = None
    failing_since: str | None = None


@dataclass(frozen=True)
class Delivery:
    alert: Alert
    target: str  # scheme://host only
    delivered: bool
    attempts: int
    error: str | None


def webhook_target(url: str) -> str:
    """What may be shown of a webhook URL: scheme and host (the path and query often hold the token)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}{':' + str(parts.port) if parts.port else ''}"


def check_webhook_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"the webhook must be an http(s) URL (got {webhook_target(url)})")


def payload(alert: Alert, fmt: WebhookFormat) -> dict[str, Any]:
    title = f"gapcheck nightly: {alert.endpoint} is {alert.status.replace('_', ' ')}"
    link = alert.report_url
    if fmt is WebhookFormat.slack:
        text = f"*{title}*\n{alert.headline}" + (f"\n<{link}|report>" if link else "")
        fields = [{"type": "mrkdwn", "text": f"*{o['output']}*: max |err| {o['max_abs_error']}"}
                  for o in alert.worst_outputs[:10]]
        blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
        if fields:
            blocks.append({"type": "section", "fields": fields})
        return {"text": f"{title}: {alert.headline}", "blocks": blocks}
    if fmt is WebhookFormat.teams:
        facts = [{"name": "endpoint", "value": f"{alert.endpoint} ({alert.url})"}, {"name": "status", "value": alert.status},
                 {"name": "run", "value": alert.run_id}, {"name": "last pass", "value": alert.last_pass_at or "never"}]
        facts += [{"name": o["output"], "value": f"max |err| {o['max_abs_error']}"} for o in alert.worst_outputs[:10]]
        card: dict[str, Any] = {"@type": "MessageCard", "@context": "https://schema.org/extensions", "summary": title,
                                "themeColor": _COLORS.get(alert.status, "808080"), "title": title,
                                "text": alert.headline, "sections": [{"facts": facts}]}
        if link:
            card["potentialAction"] = [{"@type": "OpenUri", "name": "Report", "targets": [{"os": "default", "uri": link}]}]
        return card
    return {"source": "gapcheck", "kind": "nightly_alert", "endpoint": alert.endpoint, "url": alert.url,
            "status": alert.status, "headline": alert.headline, "worst_outputs": list(alert.worst_outputs),
            "run_id": alert.run_id, "report": link, "last_pass_at": alert.last_pass_at,
            "failing_since": alert.failing_since}


def sign(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def _credentials(url: str) -> tuple[str, dict[str, str], tuple[str, ...]]:
    """The URL without ``user:password@``, a Basic authorization header for them, and the secrets to redact.

    urllib cannot send credentials written into the URL (it reads them as part of the host name), and they
    must never reach a message.
    """
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, {}, ()
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    secrets = tuple(v for v in (parts.password, password, parts.username, user) if v and len(v) >= 3)
    return clean, {"Authorization": f"Basic {token}"}, secrets


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Refuses every redirect: urllib would follow a 301/302/303 as a GET, without the alert, and with the
    Basic authorization header, to whatever host the receiver names. Declining leaves the 3xx an HTTPError."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


# Built once: an opener holds no per-request state (urlopen's own default opener is shared the same way).
_OPENER = urllib.request.build_opener(_NoRedirects())


def _post(request: urllib.request.Request, timeout_s: float, deadline_s: float) -> tuple[str, Any]:
    """One POST under a total deadline: urllib's timeout bounds each socket operation only, and a receiver
    that trickles a byte at a time would never trip it. The request runs in a daemon thread; past the
    deadline it is abandoned (its socket timeout ends it). Redirects are never followed."""
    outcome: list[tuple[str, Any]] = []

    def attempt() -> None:
        try:
            with _OPENER.open(request, timeout=timeout_s) as response:
                response.read(1024)
            outcome.append(("ok", None))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome.append(("error", exc))

    worker = threading.Thread(target=attempt, name="gapcheck-webhook", daemon=True)
    worker.start()
    worker.join(max(deadline_s, 0.0))
    return outcome[0] if outcome else ("deadline", None)


def send(alert: Alert, url: str, fmt: WebhookFormat, *, secret: str | None = None, timeout_s: float = 10.0,
         attempts: int = 3, backoff_s: float = 0.5, deadline_s: float = 30.0) -> Delivery:
    """POST the alert; retried on network errors and 5xx/429, all attempts within ``deadline_s``; a Delivery
    (never an exception) either way."""
    body = json.dumps(payload(alert, fmt), sort_keys=True).encode()
    target = webhook_target(url)
    clean_url, auth, secrets = _credentials(url)
    end = time.monotonic() + deadline_s
    error = None
    for attempt in range(1, attempts + 1):
        timestamp = str(int(time.time()))
        headers = {"Content-Type": "application/json", "User-Agent": "gapcheck-nightly", TIMESTAMP_HEADER: timestamp,
                   **auth}
        if secret:
            headers[SIGNATURE_HEADER] = sign(secret, timestamp, body)
        request = urllib.request.Request(clean_url, data=body, headers=headers, method="POST")
        state, exc = _post(request, min(timeout_s, max(end - time.monotonic(), 0.1)), end - time.monotonic())
        if state == "ok":
            return Delivery(alert, target, True, attempt, None)
        if state == "deadline":
            return Delivery(alert, target, False, attempt, f"no answer within the total deadline of {deadline_s:g}s")
        if isinstance(exc, urllib.error.HTTPError):
            exc.close()  # the error holds the open response
            # Where a redirect points is not shown: the receiver chose it, and it may carry a token.
            error = f"HTTP {exc.code}" + (" (a redirect: not followed)" if 300 <= exc.code < 400 else "")
            if exc.code < 500 and exc.code != 429:
                return Delivery(alert, target, False, attempt, error)  # the receiver refuses: asking again won't help
        else:
            reason = getattr(exc, "reason", exc)
            error = _redact(f"{type(reason).__name__}: {reason}", (url, clean_url), secrets, target)
        wait = backoff_s * 2 ** (attempt - 1)
        if attempt < attempts and time.monotonic() + wait < end:
            time.sleep(wait)
        elif attempt < attempts:
            return Delivery(alert, target, False, attempt, f"{error} (no time left for another attempt)")
    return Delivery(alert, target, False, attempts, error)


def _redact(text: str, urls: tuple[str, ...], secrets: tuple[str, ...], target: str) -> str:
    for url in urls:
        text = text.replace(url, target)
    for value in secrets:
        text = text.replace(value, "***")
    return text
