"""Which served tensor is which graph tensor, when a deployment names them its own way.

A TorchScript/PyTorch-backend deployment calls its inputs ``INPUT__0``, an Ultralytics one ``images``; the export
(and the golden bundle) calls the same tensor ``x``. Tensors are paired by an explicit map first
(``--triton-input-map`` / ``--triton-output-map``, graph name = served name), then by name, and what is left only
when it can be paired one way (inputs and outputs alike; the one pairing used by triton-audit, export-diff and
nightly):

- a tensor that fits only one tensor left on the other side by data type and shape (or is the only one that fits
  it) is that one's partner; this repeats, so a deployment listing its outputs in another order under other names
  (ONet's ``[4]``, ``[10]``, ``[2]`` served as ``prob``, ``box``, ``landmarks``) is paired by their shapes;
- one tensor left on each side: those two (their data types and shapes are still checked, as any pair's);
- outputs only: what is still left, when every one of them fits every other (the same data type and shape), by
  position, the served config's order (said so: a deployment listing two same-shaped heads in another order is
  then caught by the values, and the message names the map that pairs them).

Inputs are never paired by position (``input_ids`` and ``attention_mask`` have the same type and shape: a request
with them swapped is not an error the server would show). What cannot be paired so (another count, an ambiguous
match) is :attr:`Pairing.problem`: the audit keeps it a ``triton_name_mismatch`` whose message names both sides and
the option that settles it, with an example only when one pairing fits. Names are the server's: every name shown
goes through :func:`~gapcheck.triton.url.clean_text` and a list is truncated.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gapcheck.errors import UsageError

__all__ = ["FLAGS", "Pairing", "compatible_shape", "pair_tensors", "shown_name", "shown_names"]

FLAGS = {"input": "--triton-input-map", "output": "--triton-output-map"}
_FLOATS = {"TYPE_FP32", "TYPE_FP16", "TYPE_BF16", "TYPE_FP64"}
_SHOWN = 12  # names listed before "... and N more"


def shown_name(name: object) -> str:
    """One name quoted as safe one-line text. A name that is not plain ASCII is shown with ``ascii()`` escapes, so a
    lookalike reads apart from the name it imitates (``'INPU\\u0422__0'``, a Cyrillic Te, beside ``'INPUT__0'``)."""
    from gapcheck.triton.url import clean_text

    return ascii(clean_text(str(name))[:80])


def shown_names(names: Iterable[str], limit: int = _SHOWN) -> str:
    """Names as safe one-line text (:func:`shown_name`), at most ``limit`` of them (a hostile server may declare
    thousands)."""
    items = list(names)
    text = ", ".join(shown_name(n) for n in items[:limit])
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
                 strict: bool, side: str = "graph") -> dict[str, str]:
    """The map's entries whose both names exist; an unknown graph name is always a usage error (exit 2), an unknown
    served name too when ``strict`` (else it is left out, and the tensor reported as unpaired)."""
    flag = FLAGS[kind]
    kept = {}
    for graph_name, served_name in mapping.items():
        if graph_name not in graph or (strict and served_name not in served):
            unknown = (f"the {side} has no {kind} {shown_names([graph_name])}" if graph_name not in graph else
                       f"the deployment serves no {kind} {shown_names([served_name])}")
            raise UsageError(f"{flag} {shown_names([graph_name])}={shown_names([served_name])}: {unknown}; the "
                             f"{side}'s {kind}s are {shown_names(graph)}, the served ones {shown_names(served)}",
                             parameter=flag.removeprefix("--").replace("-", "_"))
        if served_name in served:
            kept[graph_name] = served_name
    if len(set(kept.values())) != len(kept):
        raise UsageError(f"{flag} maps two {side} {kind}s to one served {kind}")
    return kept


def _forced(graph: list[Any], served: list[Any]) -> dict[str, str]:
    """graph -> served for the tensors that can only be each other's partner: a tensor that fits exactly one tensor
    left on the other side (in any pairing of every tensor, those two go together); repeated until none is.
    Only for sides of one size (otherwise a served tensor may be one the graph lacks)."""
    pairs: dict[str, str] = {}
    left_graph, left_served = list(graph), list(served)
    changed = True
    while changed and left_graph:
        changed = False
        for g in list(left_graph):
            fits = [s for s in left_served if _fits(g, s)]
            backs = [[h for h in left_graph if _fits(h, s)] for s in fits]
            only = fits[0] if len(fits) == 1 else next((s for s, b in zip(fits, backs, strict=True) if b == [g]), None)
            if only is not None:
                pairs[g.name] = only.name
                left_graph.remove(g)
                left_served.remove(only)
                changed = True
    return pairs


def _leftovers(kind: str, graph: list[Any], served: list[Any]) -> tuple[dict[str, str], list[str]]:
    """The leftovers that can be paired one way only, and how (each way used, in order)."""
    if len(graph) != len(served) or not graph:
        return {}, []
    if len(graph) == 1:
        return {graph[0].name: served[0].name}, [f"the only {kind} left on each side"]
    pairs = _forced(graph, served)
    how = ["by data type and shape (each fits only one)"] if pairs else []
    rest_graph = [g for g in graph if g.name not in pairs]
    rest_served = [s for s in served if s.name not in pairs.values()]
    if len(rest_graph) == 1:
        pairs[rest_graph[0].name] = rest_served[0].name
        how.append(f"the only {kind} left on each side")
    elif kind == "output" and rest_graph and all(_fits(g, s) for g in rest_graph for s in rest_served):
        pairs.update((g.name, s.name) for g, s in zip(rest_graph, rest_served, strict=True))
        how.append("by position (the same data type and shape: the served config's order)")
    return pairs, how


def pair_tensors(kind: str, graph: Sequence[Any], served: Sequence[Any], mapping: Mapping[str, str] | None = None,
                 *, strict: bool = True, side: str = "graph") -> Pairing:
    """Pair ``graph``'s tensors (name, data_type or triton_type, shape) with ``served``'s: by ``mapping``, then by name, then the
    leftovers when only one pairing fits (see the module docstring). ``side`` is what messages call the graph's side
    (nightly: "golden bundle", whose tensors are the recorded ones)."""
    graph_names, served_names = [g.name for g in graph], [s.name for s in served]
    mapped = _checked_map(kind, mapping or {}, graph_names, served_names, strict, side)
    pairs = dict(mapped)
    for name in graph_names:
        if name not in pairs and name in served_names and name not in pairs.values():
            pairs[name] = name
    left_graph = [g for g in graph if g.name not in pairs]
    left_served = [s for s in served if s.name not in pairs.values()]
    how = "as mapped" if mapped else "name"
    if not left_graph and not left_served:
        return Pairing(kind, pairs, how, mapped=mapped)
    paired, ways = _leftovers(kind, left_graph, left_served)
    pairs |= paired
    how = ", then ".join(ways) if ways else how
    left_graph = [g for g in left_graph if g.name not in pairs]
    left_served = [s for s in left_served if s.name not in pairs.values()]
    if not left_graph and not left_served:
        return Pairing(kind, pairs, how, mapped=mapped)
    return Pairing(kind, pairs, how, _problem(kind, left_graph, left_served, side),
                   tuple(g.name for g in left_graph), tuple(s.name for s in left_served), mapped=mapped)


_EXAMPLE_MAX = 64  # tensors left beyond which no example pairing is searched (a hostile server may declare thousands)


def _example(graph: list[Any], served: list[Any]) -> dict[str, str] | None:
    """One pairing in which every tensor of the smaller side fits its partner by data type and shape (augmenting
    paths), or None when none does."""
    if not graph or not served or len(graph) + len(served) > _EXAMPLE_MAX:
        return None
    fits = {g.name: [s.name for s in served if _fits(g, s)] for g in graph}
    greedy: dict[str, str] = {}  # each in the listed order takes the first free one that fits: the likeliest intent
    for g in graph:
        free = next((s for s in fits[g.name] if s not in greedy.values()), None)
        if free is not None:
            greedy[g.name] = free
    if len(greedy) == min(len(graph), len(served)):
        return greedy
    partner: dict[str, str] = {}  # served -> graph

    def augment(g: str, seen: set[str]) -> bool:
        for s in fits[g]:
            if s not in seen:
                seen.add(s)
                if s not in partner or augment(partner[s], seen):
                    partner[s] = g
                    return True
        return False

    matched = sum(augment(g.name, set()) for g in graph)
    if matched < min(len(graph), len(served)):
        return None
    order = {g.name: i for i, g in enumerate(graph)}
    return dict(sorted(((g, s) for s, g in partner.items()), key=lambda p: order[p[0]]))


def _problem(kind: str, graph: list[Any], served: list[Any], side: str = "graph") -> str:
    """Why the leftovers are not paired, and the map that would pair them: an example only when it fits."""
    if not served:
        return f"the deployment serves no other {kind}"
    if not graph:
        return f"the {side} has no other {kind}"
    placeholder = "GRAPH" if side == "graph" else side.split()[0].upper()  # GOLDEN=SERVED in nightly
    sides = (f"the {side}'s {kind}(s) {shown_names(g.name for g in graph)} and the served {kind}(s) "
             f"{shown_names(s.name for s in served)}")
    example = _example(graph, served)
    if len(graph) != len(served):
        why = f"differ in number ({len(graph)} against {len(served)})"
    elif example is None:
        why = "cannot be paired: no pairing fits them by data type and shape"
    else:
        why = ("cannot be paired by data type and shape alone (more than one pairing fits" +
               ("; inputs are never paired by position)" if kind == "input" else ")"))
    if example is None:
        return f"{sides} {why}; {FLAGS[kind]} {placeholder}=SERVED[,...] names a pairing"
    shown = shown_names([",".join(f"{g}={s}" for g, s in example.items())], 1)
    return f"{sides} {why}: name the pairing with {FLAGS[kind]} {placeholder}=SERVED[,...], e.g. {shown} (one that fits)"
