"""Which served tensor is which graph tensor, when a deployment names them its own way.

A TorchScript/PyTorch-backend deployment calls its inputs ``INPUT__0``, an Ultralytics one ``images``; the export
(and the golden bundle) calls the same tensor ``x``. Tensors are paired by name first; what is left is paired
when it can only be one way, else by an explicit map (``--triton-input-map`` / ``--triton-output-map``,
graph name = served name):

- one tensor left on each side: those two (their data types and shapes are still checked, as any pair's);
- outputs: the same count, and pairwise in order compatible data types and shapes (the served config's order);
- inputs: every graph input fits exactly one served input by data type and shape, and the other way round
  (position is not trusted for inputs: ``input_ids`` and ``attention_mask`` have the same type and shape).

What cannot be paired so (another count, an ambiguous match) is :attr:`Pairing.problem`: the audit keeps it a
``triton_name_mismatch`` gap whose message names both sides and the option that settles it. Names are the
server's: every name shown goes through :func:`~gapcheck.triton.url.clean_text` and a list is truncated.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gapcheck.errors import UsageError

__all__ = ["FLAGS", "Pairing", "compatible_shape", "pair_tensors", "shown_names"]

FLAGS = {"input": "--triton-input-map", "output": "--triton-output-map"}
_FLOATS = {"TYPE_FP32", "TYPE_FP16", "TYPE_BF16", "TYPE_FP64"}
_SHOWN = 12  # names listed before "... and N more"


def shown_names(names: Iterable[str], limit: int = _SHOWN) -> str:
    """Names as safe one-line text, at most ``limit`` of them (a hostile server may declare thousands)."""
    from gapcheck.triton.url import clean_text

    items = list(names)
    text = ", ".join(repr(clean_text(str(n))[:80]) for n in items[:limit])
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return (text + more) or "none"


def compatible_shape(graph: Sequence[int | None], served: Sequence[int | None]) -> bool:
    """Same rank, and every axis equal or dynamic on one side."""
    return len(graph) == len(served) and all(a is None or b is None or a == b
                                             for a, b in zip(graph, served, strict=True))


def _type(tensor: Any) -> str:
    return str(getattr(tensor, "data_type", None) or getattr(tensor, "triton_type", ""))


def _fits(graph: Any, served: Any) -> bool:
    """The same data type (a float of another width too: the deployment's precision, checked on its own), and a
    compatible shape."""
    same = _type(graph) == _type(served) or {_type(graph), _type(served)} <= _FLOATS
    return same and compatible_shape(graph.shape, served.shape)


@dataclass(frozen=True)
class Pairing:
    """graph name -> served name for every graph tensor that has a partner; ``how`` the leftovers were paired;
    ``problem`` why some could not be (None when every tensor has its partner)."""

    kind: str
    pairs: dict[str, str]
    how: str = "name"
    problem: str | None = None
    unpaired_graph: tuple[str, ...] = ()
    unpaired_served: tuple[str, ...] = ()
    mapped: dict[str, str] = field(default_factory=dict)

    @property
    def renamed(self) -> dict[str, str]:
        return {g: s for g, s in self.pairs.items() if g != s}


def _checked_map(kind: str, mapping: Mapping[str, str], graph: list[str], served: list[str],
                 strict: bool) -> dict[str, str]:
    """The map's entries whose both names exist; an unknown graph name is always a usage error (exit 2), an unknown
    served name too when ``strict`` (else it is left out, and the tensor reported as unpaired)."""
    flag = FLAGS[kind]
    kept = {}
    for graph_name, served_name in mapping.items():
        if graph_name not in graph or (strict and served_name not in served):
            raise UsageError(f"{flag} {shown_names([graph_name])}={shown_names([served_name])}: the graph's "
                             f"{kind}s are {shown_names(graph)}, the served ones {shown_names(served)}",
                             parameter=flag.removeprefix("--").replace("-", "_"))
        if served_name in served:
            kept[graph_name] = served_name
    if len(set(kept.values())) != len(kept):
        raise UsageError(f"{flag} maps two graph {kind}s to one served {kind}")
    return kept


def _unique_matching(graph: list[Any], served: list[Any]) -> dict[str, str] | None:
    """graph -> served when every graph tensor fits exactly one served tensor and each served one exactly one."""
    fits = {g.name: [s.name for s in served if _fits(g, s)] for g in graph}
    backs = {s.name: [g.name for g in graph if _fits(g, s)] for s in served}
    if all(len(c) == 1 for c in fits.values()) and all(len(c) == 1 for c in backs.values()):
        return {g: c[0] for g, c in fits.items()}
    return None


def _leftovers(kind: str, graph: list[Any], served: list[Any]) -> tuple[dict[str, str], str] | None:
    """The leftovers paired, and how; None when they cannot be paired without a map."""
    if len(graph) != len(served) or not graph:
        return None
    if len(graph) == 1:
        return {graph[0].name: served[0].name}, f"the only {kind} left on each side"
    if kind == "output" and all(_fits(g, s) for g, s in zip(graph, served, strict=True)):
        return ({g.name: s.name for g, s in zip(graph, served, strict=True)},
                "by position (same count, order, data types and shapes)")
    matched = _unique_matching(graph, served) if kind == "input" else None
    return (matched, "by data type and shape (each fits only one)") if matched is not None else None


def pair_tensors(kind: str, graph: Sequence[Any], served: Sequence[Any], mapping: Mapping[str, str] | None = None,
                 *, strict: bool = True) -> Pairing:
    """Pair ``graph``'s tensors (name, data_type or triton_type, shape) with ``served``'s: by ``mapping``, then by name, then the
    leftovers when only one pairing fits (see the module docstring)."""
    graph_names, served_names = [g.name for g in graph], [s.name for s in served]
    mapped = _checked_map(kind, mapping or {}, graph_names, served_names, strict)
    pairs = dict(mapped)
    for name in graph_names:
        if name not in pairs and name in served_names and name not in pairs.values():
            pairs[name] = name
    left_graph = [g for g in graph if g.name not in pairs]
    left_served = [s for s in served if s.name not in pairs.values()]
    how = "as mapped" if mapped else "name"
    if not left_graph and not left_served:
        return Pairing(kind, pairs, how, mapped=mapped)
    paired = _leftovers(kind, left_graph, left_served)
    if paired is not None:
        return Pairing(kind, pairs | paired[0], paired[1], mapped=mapped)
    return Pairing(kind, pairs, how, _problem(kind, left_graph, left_served),
                   tuple(g.name for g in left_graph), tuple(s.name for s in left_served), mapped=mapped)


def _problem(kind: str, graph: list[Any], served: list[Any]) -> str:
    sides = (f"the graph's {kind}(s) {shown_names(g.name for g in graph)} and the served {kind}(s) "
             f"{shown_names(s.name for s in served)}")
    if len(graph) != len(served):
        return f"{sides} differ in number: {len(graph)} against {len(served)}"
    example = ",".join(f"{g.name}={s.name}" for g, s in zip(graph, served, strict=True))
    why = ("cannot be paired by data type and shape alone (more than one fits, or none)" if kind == "input" else
           "cannot be paired by position (their data types or shapes differ in order)")
    return f"{sides} {why}: name the pairing with {FLAGS[kind]} GRAPH=SERVED[,...], e.g. {shown_names([example], 1)}"
