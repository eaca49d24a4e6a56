"""``EngineSpec``: where data shards run — ``serial``, ``local`` (a process pool, the default) or ``ray``."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from gapcheck.errors import UsageError
from gapcheck.groups.base import Group, Opt

ENGINES = ("serial", "local", "ray")
#: what ray.init(address=...) takes besides an address: the running cluster found on this machine, or a new one
RAY_KEYWORDS = ("auto", "local")


def check_ray_address(address: str) -> None:
    """``auto``, ``local``, ``ray://host[:port]`` (Ray's client; its port defaults to 10001) or ``host:port`` (a
    cluster's GCS address); a port is a number from 1 to 65535 (the Triton URLs' rule). UsageError (exit 2) before
    any work: a bad one cost ~31 s of Ray's retries, then exit 3."""
    from gapcheck.triton.url import plain_number  # light (re, dataclasses); the one port-number rule

    if address in RAY_KEYWORDS:
        return
    client = address.startswith("ray://")
    rest = address[len("ray://"):] if client else address
    host, sep, port = rest.rpartition(":") if not rest.endswith("]") else (rest, "", "")
    if not sep and client:
        host, port = rest, "10001"
    bad_host = not host or any(c in host for c in "/@?#[] ") and not (host.startswith("[") and host.endswith("]"))
    if "://" in rest or bad_host or not plain_number(port, 5) or not 0 < int(port) < 65536:
        shown = f" {address!r}" if len(address) <= 80 else ""
        raise UsageError(f"--engine-address{shown} is not a Ray address: use auto, local, ray://host:port or "
                         "host:port, with a port from 1 to 65535", parameter="address")


@dataclass(frozen=True)
class EngineSpec(Group):
    name: str = "local"
    workers: int | None = None
    address: str | None = None

    SECTION: ClassVar[str | None] = "engine"
    OPTIONS: ClassVar[tuple[Opt, ...]] = (
        Opt("name", "--engine", "Where shards run: local (process pool, the default), serial, or ray.", str, key="name"),
        Opt("workers", "--workers", "Worker processes (local engine).", Optional[int], key="workers", low=1, high=4096),
        Opt("address", "--engine-address", "Ray cluster address (ray://head:10001); default: RAY_ADDRESS or a local "
            "Ray.", Optional[str], key="address"),
    )

    @classmethod
    def from_cli(cls, fields: dict[str, Any], from_config: dict[str, Any], flags: frozenset[str]) -> dict[str, Any]:
        """``--engine serial`` over ``[engine] name = "ray"`` + ``address``: the flag wins and the configured address
        goes with the configured engine. Only an address given on the same layer as a non-ray engine is refused."""
        name = getattr(fields.get("name"), "value", fields.get("name"))
        if "name" in flags and "address" not in flags and name != "ray" and from_config.get("address") is not None:
            fields = {**fields, "address": None}
        return fields

    def check(self) -> None:
        name = getattr(self.name, "value", self.name)
        if name not in ENGINES:
            raise UsageError(f"unknown engine {name!r}; choose one of: {', '.join(ENGINES)}")
        object.__setattr__(self, "name", name)
        if self.address is not None:
            # a CR/LF or other control character would reach Ray's client (~30 s of retries, then exit 3)
            if not self.address.strip() or not self.address.isprintable():
                raise UsageError("--engine-address must be a non-empty address without control characters, e.g. "
                                 "ray://head:10001")
            check_ray_address(self.address)
            if name != "ray":
                raise UsageError(f"an engine address is only used by the ray engine, not {name}")

    @contextlib.contextmanager
    def open(self) -> Iterator[Any]:
        """The engine, closed (workers shut down) however the block ends."""
        from gapcheck.engines import open_engine

        options: dict[str, Any] = {"workers": self.workers}
        if self.name == "ray":
            options["address"] = self.address
        with open_engine(self.name, **options) as engine:
            yield engine
