"""Where a loss tensor still holds its autograd graph when a training loop accumulates it (GC802's flow).

``total += loss`` across steps keeps every step's graph alive. Whether ``loss`` still holds a graph at
that line depends on what the name was last bound to, so the loop body is read in order, branch by
branch: each name holds the set of states it may be in on some path, as ``(backwarded, detached)``.
A rebinding to ``.detach()``, ``.item()``, ``.tolist()``, ``.numpy()``, ``.detach().cpu()``,
``float(...)``, or any value computed under ``torch.no_grad()`` detaches it (facenet-pytorch's
``loss_batch = loss_batch.detach().cpu(); loss += loss_batch``). A loss accumulated on a path where it
was never given to ``backward`` is summed on purpose for one later backward (sentence-transformers'
cached losses: ``if with_backward: loss.backward(); loss = loss.detach()`` then ``losses.append(loss)``),
unless its backward comes later in the same iteration. Paths are joined at the end of each branch, so a
detach on only one of two paths still leaves the other one reported; a path that leaves by ``continue``,
``break``, ``return`` or ``raise`` reaches nothing after it.
"""
from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

from gapcheck.lint.symbols import ordered

_DETACHING = frozenset({"item", "detach", "tolist", "numpy"})
_PLAIN = frozenset({"float", "int", "len", "str", "round", "bool"})
_NO_GRAD = ("no_grad", "inference_mode")
_LOSS_TAKERS = frozenset({"accelerator", "fabric", "autograd", "engine", "model_engine"})

#: A path's state of one name: (given to backward so far, bound to a detached value).
_Path = tuple[bool, bool]
_State = dict[str, frozenset[_Path]]
_FRESH: frozenset[_Path] = frozenset({(False, False)})
_LEAVING = (ast.Continue, ast.Break, ast.Return, ast.Raise)
_TRIES: tuple[type, ...] = (ast.Try, getattr(ast, "TryStar", ast.Try))  # try/except* from Python 3.11


@dataclass(frozen=True)
class Accumulation:
    """``accumulator`` gathers ``loss`` while it may still hold a graph that backward used or will use."""

    node: ast.stmt
    accumulator: str
    loss: str


def backward_target(call: ast.Call) -> str | None:
    """The name given to ``backward`` by ``call``: ``loss.backward()``, ``scaler.scale(loss).backward()``, and
    ``accelerator.backward(loss)`` / ``fabric.backward(loss)`` / DeepSpeed's ``model_engine.backward(loss)`` /
    ``torch.autograd.backward(loss)`` (never ``out.backward(grad)``: a tensor's argument is its gradient)."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "backward"):
        return None
    target = call.func.value
    if isinstance(target, ast.Call) and target.args:  # scaler.scale(loss).backward()
        target = target.args[0]
    elif call.args and _loss_taker(target):
        target = call.args[0]
    return target.id if isinstance(target, ast.Name) else None


def _loss_taker(receiver: ast.expr) -> bool:
    """An object whose ``backward`` takes the loss as its argument (an Accelerator, a Fabric, an engine)."""
    last = receiver.attr if isinstance(receiver, ast.Attribute) else receiver.id if isinstance(receiver, ast.Name) \
        else ""
    last = last.lstrip("_").lower()
    return last in _LOSS_TAKERS or last.endswith(("accelerator", "fabric", "_engine"))


def backward_spots(loop: ast.AST) -> dict[str, list[tuple[int, int]]]:
    """Name -> (line, column) of each backward call on it inside ``loop`` (nested defs excluded)."""
    spots: dict[str, list[tuple[int, int]]] = {}
    for node in ordered(loop):
        if isinstance(node, ast.Call) and (name := backward_target(node)) is not None:
            spots.setdefault(name, []).append((node.lineno, node.col_offset))
    return spots


def carried(expr: ast.AST, names: set[str]) -> list[str]:
    """Names of ``names`` inside ``expr`` not passed through .item()/.detach()/float() (``loss.mean()`` carries)."""
    if isinstance(expr, ast.Name):
        return [expr.id] if expr.id in names else []
    if isinstance(expr, ast.Call):
        if _detaching_call(expr):
            return []
        if isinstance(expr.func, ast.Attribute):
            return carried(expr.func.value, names)
        return []  # an unknown function: its result's graph is not ours to guess
    if isinstance(expr, ast.BinOp):
        return carried(expr.left, names) + carried(expr.right, names)
    if isinstance(expr, ast.UnaryOp):
        return carried(expr.operand, names)
    return []


def _detaching_call(call: ast.Call) -> bool:
    return ((isinstance(call.func, ast.Attribute) and call.func.attr in _DETACHING)
            or (isinstance(call.func, ast.Name) and call.func.id in _PLAIN))


def _detached(expr: ast.AST, state: _State) -> bool:
    """Whether ``expr``'s value surely holds no graph (a detaching call, or names detached on every path)."""
    if isinstance(expr, ast.Constant):
        return True
    if isinstance(expr, ast.Name):
        return expr.id in state and all(detached for _, detached in state[expr.id])
    if isinstance(expr, ast.Call):
        if _detaching_call(expr):
            return True
        return isinstance(expr.func, ast.Attribute) and _detached(expr.func.value, state)  # .cpu() after detach
    if isinstance(expr, ast.Subscript):
        return _detached(expr.value, state)
    if isinstance(expr, ast.BinOp):
        return _detached(expr.left, state) and _detached(expr.right, state)
    if isinstance(expr, ast.UnaryOp):
        return _detached(expr.operand, state)
    return False


def _no_grad(item: ast.withitem) -> bool:
    expr = item.context_expr.func if isinstance(item.context_expr, ast.Call) else item.context_expr
    last = expr.attr if isinstance(expr, ast.Attribute) else expr.id if isinstance(expr, ast.Name) else ""
    return last in _NO_GRAD or last.endswith(tuple("_" + word for word in _NO_GRAD))


def _join(*states: _State | None) -> _State | None:
    """The states of the paths that reach one point (None: a path that left by continue/break/return/raise)."""
    reaching = [state for state in states if state is not None]
    if not reaching:
        return None
    joined: _State = {}
    for state in reaching:
        for name, paths in state.items():
            joined[name] = joined.get(name, frozenset()) | paths
    return joined


def _targets(target: ast.AST) -> Iterable[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _targets(element.value if isinstance(element, ast.Starred) else element)


def _accumulated(stmt: ast.stmt) -> tuple[str, ast.expr] | None:
    """(accumulator, value) of ``acc += value`` or ``acc.append(value)``."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add) and isinstance(stmt.target, ast.Name):
        return stmt.target.id, stmt.value
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append"
            and isinstance(call.func.value, ast.Name) and len(call.args) == 1 and not call.keywords):
        return call.func.value.id, call.args[0]
    return None


def graph_accumulations(loop: ast.For | ast.AsyncFor | ast.While) -> list[Accumulation]:
    """The accumulations in ``loop`` that keep a graph given to backward alive (see the module docstring)."""
    spots = backward_spots(loop)
    if not spots:
        return []
    reset = {t.id for n in ordered(loop) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    flow = _Flow(spots, skip=reset | set(spots))
    flow.block(loop.body, {}, no_grad=False)
    return flow.found


class _Flow:
    """Reads one loop body in order, branch by branch, and records the accumulations that keep a graph."""

    def __init__(self, spots: dict[str, list[tuple[int, int]]], skip: set[str]) -> None:
        self.spots = spots  # loss name -> where backward is called on it in this loop
        self.skip = skip  # accumulators summed on purpose before one backward, or reset every step
        self.found: list[Accumulation] = []

    def block(self, body: list[ast.stmt], state: _State | None, no_grad: bool) -> _State | None:
        for stmt in body:
            if state is None:
                break  # after continue/break/return/raise: no path goes on to the rest of the block
            state = self.statement(stmt, state, no_grad)
        return state

    def statement(self, stmt: ast.stmt, state: _State, no_grad: bool) -> _State | None:
        if isinstance(stmt, _LEAVING):
            return None  # `if not model.training: continue` keeps the un-detached path away from the sum below
        if isinstance(stmt, ast.If):
            return _join(self.block(stmt.body, state, no_grad), self.block(stmt.orelse, state, no_grad))
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):  # run zero times or once
            return self.block(stmt.orelse, _join(state, self.block(stmt.body, state, no_grad)), no_grad)
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            return self.block(stmt.body, state, no_grad or any(_no_grad(item) for item in stmt.items))
        if isinstance(stmt, _TRIES):
            return self._try(stmt, state, no_grad)  # type: ignore[arg-type]
        if isinstance(stmt, ast.Match):
            return _join(state, *(self.block(case.body, state, no_grad) for case in stmt.cases))
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return state
        if not no_grad:  # a sum taken under no_grad records no graph: nothing is kept alive
            self._check(stmt, state)
        return self._bind(stmt, state, no_grad)

    def _try(self, stmt: ast.Try, state: _State, no_grad: bool) -> _State | None:
        body = self.block(stmt.body, state, no_grad)
        handled = [self.block(h.body, _join(state, body), no_grad) for h in stmt.handlers]
        return self.block(stmt.finalbody, _join(self.block(stmt.orelse, body, no_grad), *handled), no_grad)

    def _check(self, stmt: ast.stmt, state: _State) -> None:
        found = _accumulated(stmt)
        if found is None or found[0] in self.skip:
            return
        accumulator, value = found
        for name in carried(value, set(self.spots) - {accumulator}):
            later = any(spot > (stmt.lineno, stmt.col_offset) for spot in self.spots[name])
            if any(not detached and (backwarded or later) for backwarded, detached in state.get(name, _FRESH)):
                self.found.append(Accumulation(stmt, accumulator, name))
                return

    @staticmethod
    def _bind(stmt: ast.stmt, state: _State, no_grad: bool) -> _State:
        """The state after ``stmt``: names given to backward are marked, rebound names take their new value."""
        state = dict(state)
        for node in ordered(stmt):
            if isinstance(node, ast.Call) and (name := backward_target(node)) is not None:
                state[name] = frozenset((True, detached) for _, detached in state.get(name, _FRESH))
        if isinstance(stmt, ast.Assign) or (isinstance(stmt, ast.AnnAssign) and stmt.value is not None):
            value: ast.expr = stmt.value  # type: ignore[assignment]
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            plain = all(isinstance(target, ast.Name) for target in targets)  # a tuple's parts: not ours to guess
            bound = _bound(value, state, no_grad or (plain and _detached(value, state)))
            state.update((name, bound) for target in targets for name in _targets(target))
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            both = ast.BinOp(left=stmt.target, op=stmt.op, right=stmt.value)
            state[stmt.target.id] = _bound(both, state, no_grad or _detached(both, state))
        return state


def _bound(value: ast.expr, state: _State, detached: bool) -> frozenset[_Path]:
    """A name's paths once bound to ``value``: a value computed from a graph given to backward shares it
    (``loss = loss.cpu()`` after ``loss.backward()``)."""
    backwarded = any(done for name in carried(value, set(state)) for done, _ in state[name])
    return frozenset({(backwarded, detached)})
