"""``EngineSpec``: where data shards run — ``serial``, ``local`` (a process pool, the default) or ``ray``."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from gapcheck.errors import UsageError
from gapcheck.groups.base import Group, Opt

ENGINES = ("serial", "local", "ray")


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

    def check(self) -> None:
        name = getattr(self.name, "value", self.name)
        if name not in ENGINES:
            raise UsageError(f"unknown engine {name!r}; choose one of: {', '.join(ENGINES)}")
        object.__setattr__(self, "name", name)
        if self.address is not None and name != "ray":
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
