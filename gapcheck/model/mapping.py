"""Map torch module paths to the ONNX values that hold their outputs.

Two sources of scope information, one per exporter:
- dynamo: each node's ``pkg.torch.onnx.name_scopes`` metadata lists the module
  FQNs it was traced under (``['', 'layer1', 'layer1.0', 'layer1.0.conv1', 'conv2d']``)
  and ``pkg.torch.onnx.stack_trace`` the Python source of the op;
- TorchScript: node names carry the scope, ``/layer1/layer1.0/conv1/Conv``.

A module's output is the value produced inside its scope and consumed outside it
(or a graph output). A module whose scope holds no node (an Identity, a Dropout in
eval mode, a Conv whose BatchNorm was folded into it) has no ONNX counterpart.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass

import onnx

SCOPES_KEY = "pkg.torch.onnx.name_scopes"
STACK_KEY = "pkg.torch.onnx.stack_trace"
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


@dataclass(frozen=True)
class ModuleMapping:
    module: str
    value: str | None  # the ONNX value holding the module's output; None when it has no counterpart
    op_types: tuple[str, ...]
    node_names: tuple[str, ...]
    source: str | None  # file:line of the op producing the output, when the exporter recorded it
    scope: str | None = None  # the scope whose nodes compute the value, when not the module's own (a folded BatchNorm)
    how: str = "scope"  # "scope": by node scopes; "weights": by its parameters matched by value in a scopeless graph

    @property
    def owner(self) -> str:
        """The scope holding the nodes that compute this module's value."""
        return self.scope or self.module

    @property
    def mapped(self) -> bool:
        return self.value is not None


@dataclass(frozen=True)
class GraphIndex:
    """Per-node scopes and sources plus producer/consumer tables of one ONNX graph."""

    model: onnx.ModelProto
    scopes: tuple[tuple[str, ...], ...]
    sources: tuple[str | None, ...]
    producer: dict[str, int]
    consumers: dict[str, frozenset[int]]
    graph_inputs: frozenset[str]
    graph_outputs: tuple[str, ...]
    initializers: frozenset[str]
    unknown_scopes: tuple[str, ...] = ()  # scopes naming no module of the model (when indexed against one)

    @property
    def has_scopes(self) -> bool:
        return any(self.scopes)


def node_scopes(node: onnx.NodeProto) -> tuple[str, ...]:
    """The module FQNs (outermost first) a node was exported under."""
    for prop in node.metadata_props:
        if prop.key == SCOPES_KEY:
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return ()
            # The last entry names the op itself, the first the root module ('').
            return tuple(s for s in scopes[:-1] if s)
    if node.name.startswith("/"):
        return _torchscript_scopes(node.name)
    return ()


def _torchscript_scopes(name: str) -> tuple[str, ...]:
    """Fully qualified scopes from a TorchScript node name.

    Each part is an attribute name, except a container's child, which is named
    "<container attribute>.<index>" and follows its container's part:
    ``/features/features.1/block/block.0/block.0.0/Conv`` is ``features.1.block.0.0``.
    A module called a second time gets "_1" appended (``relu_1``); :func:`canonical_scope`
    resolves that against the model's real module paths.
    """
    parts = name.split("/")[1:-1]
    out: list[str] = []
    for i, part in enumerate(parts):
        if i and part.startswith(parts[i - 1] + "."):
            out.append(out[-1] + part[len(parts[i - 1]):])
        else:
            out.append(f"{out[-1]}.{part}" if out else part)
    return tuple(out)


_CALL_SUFFIX = re.compile(r"_\d+$")


def canonical_scope(scope: str, known: frozenset[str] | set[str]) -> str | None:
    """``scope`` as a module path of the model, or None when no module has that path.

    Component by component: a name the model has is kept; else the TorchScript exporter's
    repeated-call suffix (``relu_1`` for the second call of ``relu``) is dropped when that
    names a module. Scopes of no module at all (dynamo's ``_empty_nn_module_stack_from_metadata_hook``
    for the shape checks it inserts) give None.
    """
    if scope in known:
        return scope
    path = ""
    for part in scope.split("."):
        candidate = f"{path}.{part}" if path else part
        if candidate not in known:
            stripped = _CALL_SUFFIX.sub("", part)
            candidate = f"{path}.{stripped}" if path else stripped
            if stripped == part or candidate not in known:
                return None
        path = candidate
    return path


def node_source(node: onnx.NodeProto) -> str | None:
    """file:line of the innermost frame outside torch itself, from the exporter's stack trace."""
    for prop in node.metadata_props:
        if prop.key == STACK_KEY:
            frames = _FRAME.findall(prop.value)
            user = [f for f in frames if "/torch/" not in f[0]]
            chosen = (user or frames)[-1:] if frames else []
            return f"{chosen[0][0]}:{chosen[0][1]}" if chosen else None
    return None


def index_graph(model: onnx.ModelProto, module_paths: Iterable[str] | None = None) -> GraphIndex:
    """Index ``model``'s graph; with ``module_paths``, node scopes are resolved to those paths (see canonical_scope)."""
    graph = model.graph
    scopes = [node_scopes(n) for n in graph.node]
    unknown: set[str] = set()
    if module_paths is not None:
        known = frozenset(module_paths)
        resolved: dict[str, str | None] = {}
        for scope in {s for node in scopes for s in node}:
            resolved[scope] = canonical_scope(scope, known)
        unknown = {scope for scope, path in resolved.items() if path is None}
        scopes = [tuple(dict.fromkeys(resolved[s] for s in node if resolved[s] is not None)) for node in scopes]
    producer: dict[str, int] = {}
    consumers: dict[str, set[int]] = {}
    for i, node in enumerate(graph.node):
        for name in node.output:
            if name:
                producer[name] = i
        for name in node.input:
            if name:
                consumers.setdefault(name, set()).add(i)
    return GraphIndex(
        model=model,
        scopes=tuple(scopes),
        sources=tuple(node_source(n) for n in graph.node),
        producer=producer,
        consumers={k: frozenset(v) for k, v in consumers.items()},
        graph_inputs=frozenset(i.name for i in graph.input),
        graph_outputs=tuple(o.name for o in graph.output),
        initializers=frozenset(i.name for i in graph.initializer),
        unknown_scopes=tuple(sorted(unknown)),
    )


def module_members(index: GraphIndex) -> dict[str, list[int]]:
    """Node indices (in graph order) under each module scope."""
    members: dict[str, list[int]] = {}
    for i, scopes in enumerate(index.scopes):
        for scope in scopes:
            members.setdefault(scope, []).append(i)
    return members


def map_modules(model: onnx.ModelProto, module_paths: list[str], index: GraphIndex | None = None) -> dict[str, ModuleMapping]:
    """Map each module path to the ONNX value holding its output (see module docstring)."""
    index = index or index_graph(model, module_paths)
    members = module_members(index)
    nodes = model.graph.node
    outputs = set(index.graph_outputs)
    result = {}
    for path in module_paths:
        member_ids = members.get(path, [])
        if not member_ids:
            result[path] = ModuleMapping(path, None, (), (), None)
            continue
        inside = set(member_ids)
        escaping = [
            (i, name)
            for i in member_ids
            for name in nodes[i].output
            if name and (name in outputs or index.consumers.get(name, frozenset()) - inside)
        ]
        last_id, value = escaping[-1] if escaping else (member_ids[-1], nodes[member_ids[-1]].output[0])
        op_types = tuple(dict.fromkeys(nodes[i].op_type for i in member_ids if nodes[i].op_type != "Constant"))
        result[path] = ModuleMapping(
            module=path,
            value=value,
            op_types=op_types,
            node_names=tuple(nodes[i].name for i in member_ids),
            source=index.sources[last_id],
        )
    return result


def with_extra_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph also outputs ``names`` (types left for the runtime to infer)."""
    marked = onnx.ModelProto()
    marked.CopyFrom(model)
    existing = {o.name for o in marked.graph.output}
    for name in names:
        if name not in existing:
            marked.graph.output.append(onnx.ValueInfoProto(name=name))
            existing.add(name)
    return marked
