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
import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

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
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname or "?"
    except ValueError:  # a port that is not a number, a bracket left open: nothing of it is shown
        return "(an unparsable URL)"
    scheme = parts.scheme if parts.scheme.isascii() and parts.scheme.isalnum() else "?"
    shown = f"{scheme}://{host}{':' + str(port) if port else ''}"
    return shown if shown.isprintable() and shown.isascii() else f"{scheme}://?"


def check_webhook_url(url: str) -> None:
    """Refuse a URL no delivery could use: :func:`gapcheck.nightly.config.check_webhook_url` (the one up-front
    check, exit 2), and here also a non-ASCII character, which http.client cannot send. A delivery failure would
    name what it choked on, and that part of a webhook URL is the token: messages show scheme://host only."""
    from gapcheck.nightly.config import check_webhook_url as check_url

    check_url(url)
    if not url.isascii():
        raise UsageError(f"the webhook URL for {webhook_target(url)} holds a non-ASCII character (percent-encode it)",
                         hint="the URL itself is never shown: it holds the token")


# Query or fragment keys that carry a credential in links people share (signed storage links, OAuth fragments, API keys).
_SECRET_KEY = re.compile(r"token|secret|passw|pwd|auth(?!or)|sig|credential|api[-_.]?key|access[-_.]?key|session|"
                         r"^key$|^code$", re.IGNORECASE)


def check_report_url(url: str | None, what: str = "--report-url") -> None:
    """Refuse a report link that carries a credential (UsageError, exit 2, before any work): ``user:password@``
    (refused as endpoint URLs refuse it) or a query/fragment key such as ``token=`` or ``X-Amz-Signature=``. The
    link goes verbatim into every alert, read by everyone in the channel; the value is never shown."""
    if url is None:
        return
    if not isinstance(url, str) or not url.isprintable() or not url.strip():
        raise UsageError(f"{what} must be a URL without control characters")
    try:
        parts = urlsplit(url.strip())
        userinfo = parts.username is not None or parts.password is not None
    except ValueError:
        raise UsageError(f"{what} is not a URL that can be parsed (not shown)") from None
    if userinfo:
        raise UsageError(f"{what} holds credentials (user:password@, not shown), which every alert would show to "
                         "its readers: remove them and link a page that asks for its own login")
    for section, text in (("query", parts.query), ("fragment", parts.fragment)):
        for item in re.split(r"[&;]", text):
            key = unquote(item.partition("=")[0]).strip()
            if key and _SECRET_KEY.search(key):
                shown = f" {key!r}" if len(key) <= 40 and key.isprintable() else ""
                raise UsageError(f"{what} carries a credential in its {section} (key{shown}, value not shown), which "
                                 "every alert would show to its readers: link the report without it")


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
    (never an exception) either way. Every error text goes through :func:`redact_url` first."""
    target = webhook_target(url)
    try:
        check_webhook_url(url)
        check_report_url(alert.report_url, "the report link")  # a caller that built the alert by hand
        return _deliver(alert, url, fmt, target, secret=secret, timeout_s=timeout_s, attempts=attempts,
                        backoff_s=backoff_s, deadline_s=deadline_s)
    except Exception as exc:  # noqa: BLE001 - a delivery never raises; what it says is redacted
        return Delivery(alert, target, False, 0, redact_url(_describe(exc), url))


def _deliver(alert: Alert, url: str, fmt: WebhookFormat, target: str, *, secret: str | None, timeout_s: float,
             attempts: int, backoff_s: float, deadline_s: float) -> Delivery:
    body = json.dumps(payload(alert, fmt), sort_keys=True).encode()
    clean_url, auth, _ = _credentials(url)
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
            error = redact_url(_describe(exc), url)
        wait = backoff_s * 2 ** (attempt - 1)
        if attempt < attempts and time.monotonic() + wait < end:
            time.sleep(wait)
        elif attempt < attempts:
            return Delivery(alert, target, False, attempt, f"{error} (no time left for another attempt)")
    return Delivery(alert, target, False, attempts, error)


def _describe(exc: BaseException | None) -> str:
    """``Type: reason`` of a failed attempt, one line (URLError's own reason when it has one)."""
    if exc is None:
        return "unknown error"
    reason = getattr(exc, "reason", None) if isinstance(exc, urllib.error.URLError) else exc
    reason = exc if reason is None else reason
    text = " ".join(str(reason).split())[:300]
    return f"{type(reason).__name__}: {text}" if text else type(reason).__name__


def _url_secrets(url: str) -> list[str]:
    """Every piece of a webhook URL that may hold its token, as written, decoded and escaped, longest first:
    the whole URL, its path, query and fragment, their segments, and user and password."""
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        parts, user, password = None, None, None
    pieces = {url, url.strip()}
    if parts is not None:
        tail = parts.path + ("?" + parts.query if parts.query else "") + ("#" + parts.fragment if parts.fragment else "")
        pieces |= {tail, parts.path, parts.query, parts.fragment, user or "", password or ""}
        for text in (tail, unquote(tail)):
            pieces |= set(re.split(r"[/?&=#;:@,+\s\x00-\x1f\x7f]+", text))
    else:
        pieces |= set(re.split(r"[/?&=#;:@,+\s\x00-\x1f\x7f]+", url))
    variants: set[str] = set()
    for piece in pieces:
        for form in (piece, unquote(piece), repr(piece)[1:-1], ascii(piece)[1:-1], quote(piece, safe="/")):
            if len(form) >= 3:
                variants.add(form)
    return sorted(variants, key=len, reverse=True)


def redact_url(text: str, url: str) -> str:
    """``text`` with every part of ``url`` beyond scheme://host replaced (:func:`gapcheck.triton.url.redact`'s
    marker); the host stays readable."""
    target = webhook_target(url)
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        host = ""
    from gapcheck.triton.url import redact  # the Triton client's redaction: one marker, one path

    keep = {host, target, "http", "https", "http:", "https:"}
    text = text.replace(url, target)
    text = redact(text, tuple(p for p in _url_secrets(url) if p not in keep and p not in target))
    return " ".join(text.split())
