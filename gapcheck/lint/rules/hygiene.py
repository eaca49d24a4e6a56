"""GC8xx: safety and loop hygiene (unsafe torch.load, graphs kept alive, zero_grad and step order)."""
from __future__ import annotations

import ast
from collections.abc import Iterator

from gapcheck.codes import lint as codes
from gapcheck.findings import Finding, Severity
from gapcheck.lint.facts import Aspect
from gapcheck.lint.loops import Kind, belongs, loop_events
from gapcheck.lint.rules import Context, Rule
from gapcheck.lint.symbols import ModuleIndex, keyword, literal
from gapcheck.lint.versions import WEIGHTS_ONLY_DEFAULT, format_version

_DETACHING = {"item", "detach", "tolist", "numpy"}


class TorchLoadUnsafe(Rule):
    code = codes.TORCH_LOAD_UNSAFE
    needs = ("load",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        for call in ctx.module.calls:
            if ctx.module.callee(call) != "torch.load" or any(k.arg is None for k in call.keywords):
                continue  # **kwargs may carry weights_only: stay quiet
            value = keyword(call, "weights_only")
            if value is None and ctx.torch_floor is not None and ctx.torch_floor >= WEIGHTS_ONLY_DEFAULT:
                yield ctx.finding(self.code, call, "torch.load without weights_only: safe by default on the torch "
                                  f"this project requires (>= {format_version(ctx.torch_floor)}; weights_only=True is "
                                  "the default from 2.6); pass weights_only=True to keep it safe if that changes",
                                  severity=Severity.INFO, torch_floor=format_version(ctx.torch_floor))
            elif value is None:
                yield ctx.finding(self.code, call, "torch.load without weights_only=True unpickles arbitrary objects"
                                  + ("" if ctx.torch_floor is None else
                                     f" on torch {format_version(ctx.torch_floor)}, which this project allows"))
            elif literal(value) is False:
                yield ctx.finding(self.code, call, "torch.load(weights_only=False) unpickles arbitrary objects")


def _backward_names(module: ModuleIndex, body: ast.AST) -> set[str]:
    """Names whose ``.backward()`` is called (``loss.backward()``, ``scaler.scale(loss).backward()``)."""
    names: set[str] = set()
    for call in module.scope_calls(body):
        if isinstance(call.func, ast.Attribute) and call.func.attr == "backward":
            target = call.func.value
            if isinstance(target, ast.Call) and target.args:  # scaler.scale(loss).backward()
                target = target.args[0]
            if isinstance(target, ast.Name):
                names.add(target.id)
    return names


def _carries(expr: ast.AST, names: set[str]) -> ast.Name | None:
    """A name of ``names`` inside ``expr`` that is not passed through .item()/.detach()/float()."""
    if isinstance(expr, ast.Name):
        return expr if expr.id in names else None
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in _DETACHING:
            return None
        if isinstance(expr.func, ast.Name) and expr.func.id in ("float", "int", "len", "str"):
            return None
        if isinstance(expr.func, ast.Attribute):
            return _carries(expr.func.value, names)  # loss.mean() still carries the graph
        return None  # an unknown function: its result's graph is not ours to guess
    if isinstance(expr, (ast.BinOp, ast.UnaryOp)):
        parts = [expr.left, expr.right] if isinstance(expr, ast.BinOp) else [expr.operand]
        return next((n for n in (_carries(p, names) for p in parts) if n is not None), None)
    return None


class LossAccumulatedWithGraph(Rule):
    code = codes.LOSS_ACCUMULATED_WITH_GRAPH
    needs = ("backward",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        for loop in ctx.module.loops:
            graphs = _backward_names(ctx.module, loop)
            if not graphs:
                continue
            assigned_inside = {t.id for n in ctx.module.walk(loop) if isinstance(n, ast.Assign) for t in n.targets
                               if isinstance(t, ast.Name)}
            for node in ctx.module.walk(loop):
                if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Name):
                    accumulator, value = node.target.id, node.value
                elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                      and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "append"
                      and isinstance(node.value.func.value, ast.Name) and len(node.value.args) == 1):
                    accumulator, value = node.value.func.value.id, node.value.args[0]
                else:
                    continue
                if accumulator in graphs or accumulator in assigned_inside:
                    continue  # summed on purpose before one backward, or reset every step
                carried = _carries(value, graphs - {accumulator})
                if carried is not None:
                    yield ctx.finding(self.code, node, f"'{accumulator}' accumulates the loss tensor '{carried.id}' "
                                      "across steps and keeps every step's graph alive; use .item()",
                                      accumulator=accumulator, loss=carried.id)


class MissingZeroGrad(Rule):
    code = codes.MISSING_ZERO_GRAD
    aspect = Aspect.STEP_LOOP

    def check(self, ctx: Context) -> Iterator[Finding]:
        for loop in ctx.module.loops:
            found = loop_events(ctx.program, ctx.module, loop)
            steps = [e for e in found if e.kind in (Kind.OPT_STEP, Kind.SCALER_STEP) and belongs(e, loop)]
            kinds = {e.kind for e in found}
            if steps and Kind.BACKWARD in kinds and Kind.ZERO_GRAD not in kinds:
                yield ctx.finding(self.code, loop, "loop calls backward and optimizer.step "
                                  f"(line {steps[0].node.lineno}) but never zero_grad: gradients accumulate across steps")


class ZeroGradBeforeStep(Rule):
    code = codes.ZERO_GRAD_BEFORE_STEP
    aspect = Aspect.STEP_LOOP
    needs = ("zero_grad", ".grad =")

    def check(self, ctx: Context) -> Iterator[Finding]:
        for loop in ctx.module.loops:
            pending_backward = False
            cleared = None
            for event in loop_events(ctx.program, ctx.module, loop):
                if not belongs(event, loop):
                    continue
                if event.kind is Kind.BACKWARD:
                    pending_backward, cleared = True, None
                elif event.kind is Kind.ZERO_GRAD and pending_backward:
                    cleared = event
                elif event.kind in (Kind.OPT_STEP, Kind.SCALER_STEP):
                    if cleared is not None and cleared.step.module is ctx.module:
                        yield ctx.finding(self.code, cleared.node, "zero_grad between backward and "
                                          f"optimizer.step (line {event.node.lineno}) clears the gradients the step needs")
                    pending_backward, cleared = False, None


class SchedulerBeforeStep(Rule):
    code = codes.SCHEDULER_BEFORE_STEP
    aspect = Aspect.STEP_LOOP
    needs = ("step(",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        for loop in ctx.module.loops:
            found = loop_events(ctx.program, ctx.module, loop)
            stepped = False
            for index, event in enumerate(found):
                if event.kind in (Kind.OPT_STEP, Kind.SCALER_STEP):
                    stepped = True
                elif (event.kind is Kind.SCHED_STEP and not stepped and belongs(event, loop)
                      and event.step.module is ctx.module and event.step.via is None):
                    later = next((e for e in found[index + 1:] if e.kind in (Kind.OPT_STEP, Kind.SCALER_STEP)), None)
                    if later is not None:
                        yield ctx.finding(self.code, event.node, "scheduler.step() runs before optimizer.step() "
                                          f"(line {later.node.lineno}) in the same iteration")


RULES = (TorchLoadUnsafe, LossAccumulatedWithGraph, MissingZeroGrad, ZeroGradBeforeStep, SchedulerBeforeStep)
