"""The ``[nightly]`` config section and the endpoint specs (``NAME=grpc://host:8001/model?version=3``).

Example (``gapcheck.toml``; in ``pyproject.toml`` under ``[tool.gapcheck.nightly]``)::

    [nightly]
    golden = "golden/"
    history = "/var/lib/gapcheck/history.sqlite"
    webhook = "https://hooks.slack.com/services/..."
    webhook_format = "slack"
    webhook_secret_env = "GAPCHECK_WEBHOOK_SECRET"

    [[nightly.endpoints]]
    name = "resnet-prod"
    url = "grpc://triton-prod:8001"
    model = "resnet"
    version = "3"
    headers = { authorization = "${TRITON_TOKEN}" }   # ${VAR} is read from the environment
    timeout_s = 30
    triton_output_map = "0=OUTPUT__1,1=OUTPUT__0"   # this endpoint's own names (golden=served): replaces the flag's

    text_samples = "data/reviews.jsonl:body"    # a text bundle: the strings it was recorded from,
    tokenizer = "hf:./serving-tokenizer"         # through the tokenizer the service uses today (relative paths too)

    [nightly.drift]
    baseline_runs = 3
    slack = 0.05
    threshold = 0.25

Paths are relative to the config file. Flags win over the file; endpoints given as flags replace the
file's list. Header values are secrets: they are never printed, and ``${VAR}`` keeps them out of files.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Optional

from pydantic import ConfigDict, Field, ValidationError, field_validator

from gapcheck.config import Section
from gapcheck.errors import ConfigError, UsageError
from gapcheck.groups import TritonTarget, check_header
from gapcheck.nightly.lock import READ_LOCK_WAIT_S
from gapcheck.nightly.status import DriftParameters

DEFAULT_HISTORY = "gapcheck-history.sqlite"
DEFAULT_LOCK_WAIT_S = 60.0
DEFAULT_MAX_IN_FLIGHT = 4  # requests in flight per endpoint
MAX_IN_FLIGHT = 64
MAX_PARALLEL_ENDPOINTS = 64  # endpoints checked at once (--parallel-endpoints); each with its own requests in flight
MAX_LOCK_WAIT_S = 86400.0  # a day: longer than any night; nan and inf are refused (they would wait forever)
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


class WebhookFormat(str, Enum):
    generic = "generic"
    slack = "slack"
    teams = "teams"


class _Strict(Section):
    """The shared :class:`gapcheck.config.Section` (unknown keys refused, frozen), in pydantic's lax mode as
    ``[nightly]`` has always been: ``webhook_format = "slack"`` is the enum member and a TOML ``4.0`` an integer
    (strict mode would refuse configs that work today)."""

    model_config = ConfigDict(strict=False, extra="forbid", frozen=True)


class EndpointConfig(_Strict):
    name: str
    url: str
    model: Optional[str] = None
    version: Optional[str] = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: Optional[float] = Field(default=None, gt=0, le=86400, allow_inf_nan=False)  # None: the Triton target's
    # This endpoint's own tensor names (golden=served), as --triton-output-map / --triton-input-map take them ("a=b,c=d",
    # a list of such, or a table); they replace the flag's map for this endpoint only (the flags map every endpoint).
    triton_output_map: dict[str, str] = Field(default_factory=dict)
    triton_input_map: dict[str, str] = Field(default_factory=dict)

    @field_validator("triton_output_map", "triton_input_map", mode="before")
    @classmethod
    def _name_map(cls, value: Any, info: Any) -> dict[str, str]:
        """Checked as the flag is (control characters, a missing side, a name twice on either side: refused)."""
        if isinstance(value, dict):
            items = tuple(f"{k}={v}" if isinstance(k, str) and isinstance(v, str) else "" for k, v in value.items())
        elif isinstance(value, str):
            items = (value,)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            items = tuple(value)
        else:
            raise ValueError("must be GOLDEN=SERVED[,...], a list of them, or a table of golden = served names")
        if any(not item for item in items):
            raise ValueError("names must be strings")
        outputs = info.field_name == "triton_output_map"
        flag = "--triton-output-map" if outputs else "--triton-input-map"
        try:  # the flag's own check (the Triton group), worded for this key
            return TritonTarget(output_map=items).outputs() if outputs else TritonTarget(input_map=items).inputs()
        except UsageError as exc:
            raise ValueError(exc.message.replace(flag, info.field_name)) from None

    @field_validator("headers")
    @classmethod
    def _safe_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            try:
                check_header(key, text, "header")
            except UsageError as exc:
                raise ValueError(exc.message) from None
        return value

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class DriftConfig(_Strict):
    """``[nightly.drift]``; its defaults are :class:`~gapcheck.nightly.status.DriftParameters`' (written there once)."""

    baseline_runs: int = Field(default=DriftParameters.baseline_runs, ge=1)
    slack: float = Field(default=DriftParameters.slack, ge=0, allow_inf_nan=False)
    threshold: float = Field(default=DriftParameters.threshold, gt=0, allow_inf_nan=False)


class NightlyConfig(_Strict):
    golden: Optional[str] = None
    history: Optional[str] = None
    webhook: Optional[str] = None
    webhook_format: WebhookFormat = WebhookFormat.generic
    webhook_secret_env: Optional[str] = None
    report_url: Optional[str] = None
    lock_wait_s: float = Field(default=DEFAULT_LOCK_WAIT_S, ge=0, le=MAX_LOCK_WAIT_S, allow_inf_nan=False)
    # gapcheck history's --lock-wait: how long the reader waits for another SQLite writer's lock
    read_lock_wait_s: float = Field(default=READ_LOCK_WAIT_S, ge=0, le=MAX_LOCK_WAIT_S, allow_inf_nan=False)
    max_in_flight: int = Field(default=DEFAULT_MAX_IN_FLIGHT, ge=1, le=MAX_IN_FLIGHT)
    parallel_endpoints: int = Field(default=1, ge=1, le=MAX_PARALLEL_ENDPOINTS)
    # None: [triton]'s, else the Triton target's default (gapcheck.groups.TritonTarget: 600 s, 3 retries)
    deadline_s: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)
    retries: Optional[int] = Field(default=None, ge=0, le=20)
    # the tokenizer check of a text bundle (--text-samples / --tokenizer): strings and today's tokenizer recipe
    text_samples: Optional[str] = Field(default=None, min_length=1, max_length=4096)
    tokenizer: Optional[str] = Field(default=None, min_length=1, max_length=4096)
    drift: DriftConfig = Field(default_factory=DriftConfig)
    endpoints: list[EndpointConfig] = Field(default_factory=list)

    @field_validator("text_samples", "tokenizer")
    @classmethod
    def _printable(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not value.isprintable():
            raise ValueError("must not hold control characters")
        return value

    @field_validator("webhook")
    @classmethod
    def _webhook_url(cls, value: Optional[str]) -> Optional[str]:
        if value is not None:
            try:
                check_webhook_url(value)
            except UsageError as exc:
                raise ValueError(exc.message) from None
        return value


_WEBHOOK_UNSAFE = re.compile(r"[\x00-\x20\x7f\\]")  # control characters, spaces, backslashes


def check_webhook_url(url: str) -> str:
    """A webhook URL fit to POST to, checked before any work (UsageError, exit 2): http(s), a host, no control
    characters or spaces anywhere. Only ``scheme://host`` is ever shown: the path and query often hold the token."""
    from urllib.parse import urlsplit

    text = url if isinstance(url, str) else ""
    shown = "the webhook URL"
    try:
        parts = urlsplit(text)
        shown = f"{parts.scheme}://{parts.hostname}" if parts.scheme and parts.hostname else shown
        _ = parts.port  # a port that is not a number raises here
    except ValueError:
        raise UsageError("the webhook must be an http(s) URL (not shown: it may hold a token)") from None
    if _WEBHOOK_UNSAFE.search(text) or not shown.isprintable():
        raise UsageError(f"the webhook URL ({'?' if not shown.isprintable() else shown}/...) holds a control "
                         "character, space or backslash (the rest is not shown: it may hold a token)")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"the webhook must be an http(s) URL with a host (got {shown if parts.hostname else 'no host'})")
    return url


def parse_nightly_section(table: Any, source: Path | None) -> NightlyConfig:
    """Validate a ``[nightly]`` table on its own; ConfigError naming the file and the key."""
    try:
        config = NightlyConfig.model_validate(table or {})
    except ValidationError as exc:
        problems = "; ".join(f"nightly.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{source or 'config'}: {problems}") from None
    return resolve_paths(config, source)


def resolve_paths(config: NightlyConfig, source: Path | None) -> NightlyConfig:
    """Relative ``golden``/``history``/``text_samples`` paths and ``hf:`` tokenizer folders are relative to the
    config file (as ``[text]`` reads them)."""
    if source is None:
        return config
    from gapcheck.text.config import relative_samples, relative_target  # the one reading of FILE[:field] and hf:PATH[,...]

    updates = {k: str(source.parent / v) for k, v in (("golden", config.golden), ("history", config.history))
               if v is not None and not Path(v).is_absolute()}
    if config.text_samples is not None:
        updates["text_samples"] = relative_samples(config.text_samples, source.parent)
    if config.tokenizer is not None:
        updates["tokenizer"] = relative_target(config.tokenizer, source.parent)
    return config.model_copy(update=updates)


def load_nightly_config(path: str | Path | None = None) -> NightlyConfig:
    """``[nightly]`` through the shared loader (file < ``GAPCHECK_NIGHTLY__KEY`` environment), paths resolved."""
    from gapcheck.config import load_config

    loaded = load_config(path)
    section = loaded.section("nightly")
    if not isinstance(section, NightlyConfig):  # the registration line in gapcheck.config is missing
        return parse_nightly_section(loaded.sections.get("nightly"), loaded.source)
    return resolve_paths(section, loaded.source)


@dataclass(frozen=True)
class EndpointSpec:
    """One deployed endpoint to check: where, which model/version, and how (headers are secrets)."""

    name: str
    address: str  # host:port
    protocol: str | None  # "grpc" | "http"; None: a bare host:port, probed on connect
    ssl: bool
    model: str
    version: str | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    timeout_s: float = 30.0
    tls: Any = field(default=None, repr=False)  # gapcheck.triton.url.TlsOptions (CA, client key and chain) or None
    # --triton-output-map: golden output name -> the name this deployment serves it under (absent: the same name)
    output_map: dict[str, str] = field(default_factory=dict)
    # --triton-input-map: golden input name -> the name this deployment takes it under (absent: the same name)
    input_map: dict[str, str] = field(default_factory=dict)

    def served_name(self, golden_output: str) -> str:
        return self.output_map.get(golden_output, golden_output)

    def sent_name(self, golden_input: str) -> str:
        return self.input_map.get(golden_input, golden_input)

    @property
    def display_url(self) -> str:
        version = f"?version={self.version}" if self.version else ""
        scheme = f"{self.protocol}{'s' if self.ssl else ''}://" if self.protocol else ("https://" if self.ssl else "")
        return f"{scheme}{self.address}/{self.model}{version}"

    def triton_endpoint(self, retries: int):
        from gapcheck.triton.client import TritonEndpoint

        scheme = f"{self.protocol}{'s' if self.ssl else ''}://" if self.protocol else ""
        return TritonEndpoint(scheme + self.address, protocol=self.protocol, headers=self.headers, ssl=self.ssl,
                              tls=self.tls, timeout_s=self.timeout_s, retries=retries)


def _resolve_header(name: str, key: str, value: str) -> str:
    match = _ENV_REF.match(value.strip())
    if not match:
        return value
    if match.group(1) not in os.environ:
        raise ConfigError(f"endpoint {name!r}: header {key!r} reads ${{{match.group(1)}}}, which is not set")
    return os.environ[match.group(1)]


def endpoint_spec(config: EndpointConfig, target: TritonTarget | None = None, *,
                  timeout_s: float | None = None) -> EndpointSpec:
    """Parse ``scheme://host:port[/model][?version=N]`` with the Triton URL parser (model/version may be fields).

    ``target`` (the Triton group) adds its headers (over the entry's), its TLS files (for a TLS or bare URL) and its
    timeout when the entry sets none; ``timeout_s`` (a flag) overrides the entry's."""
    from gapcheck.triton.url import check_model_name, parse_endpoint_url

    if not _NAME.fullmatch(config.name):  # match() would let a trailing newline through
        raise UsageError(f"endpoint name {config.name!r} may only use letters, digits, '_', '-' and '.'")
    try:
        location = parse_endpoint_url(config.url, allow_credentials=False)
    except UsageError as exc:
        raise UsageError(f"endpoint {config.name!r}: {exc.message}") from None
    model = config.model or location.model
    if not model:
        raise UsageError(f"endpoint {config.name!r}: give the model as the URL path (grpc://host:8001/MODEL) or model")
    check_model_name(model)
    target = target or TritonTarget()
    headers = {k: _resolve_header(config.name, k, v) for k, v in config.headers.items()}
    for key, value in headers.items():  # a ${VAR} may bring a newline: refused before any request
        check_header(key, value, f"endpoint {config.name!r}")
    headers.update(target.header_values())
    timeout = timeout_s if timeout_s is not None else config.timeout_s if config.timeout_s is not None else target.timeout_s
    tls = target.tls() if location.ssl or location.protocol is None else None
    # the endpoint's own map (its config entry) replaces the flag's for this endpoint: the flag maps every endpoint
    return EndpointSpec(name=config.name, address=location.address, protocol=location.protocol, ssl=location.ssl,
                        model=model, version=config.version or location.version, headers=headers,
                        timeout_s=timeout, tls=tls, output_map=dict(config.triton_output_map or target.outputs()),
                        input_map=dict(config.triton_input_map or target.inputs()))


def parse_endpoint_option(text: str, timeout_s: float | None = None) -> EndpointConfig:
    """``NAME=URL`` from the command line."""
    from gapcheck.triton.url import redact, secrets_in

    name, sep, url = text.partition("=")
    if not sep or not name.strip() or not url.strip():
        shown = redact(text, secrets_in(url.strip() if sep else text.strip(), None))
        raise UsageError(f"endpoint {shown!r} is not NAME=URL (e.g. resnet-prod=grpc://triton:8001/resnet)")
    return EndpointConfig(name=name.strip(), url=url.strip(), timeout_s=timeout_s)
