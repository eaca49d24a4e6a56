"""GC8xx: safety and loop hygiene (unsafe torch.load, graphs kept alive, zero_grad and step order)."""
from __future__ import annotations

from collections.abc import Iterator

from gapcheck.codes import lint as codes
from gapcheck.findings import Finding, Severity
from gapcheck.lint.facts import Aspect
from gapcheck.lint.loops import Kind, belongs, loop_events
from gapcheck.lint.lossflow import graph_accumulations
from gapcheck.lint.rules import Context, Rule
from gapcheck.lint.symbols import keyword, literal
from gapcheck.lint.versions import WEIGHTS_ONLY_DEFAULT, format_version


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


class LossAccumulatedWithGraph(Rule):
    code = codes.LOSS_ACCUMULATED_WITH_GRAPH
    needs = ("backward",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        reported: set[int] = set()  # an accumulation inside nested loops is read once per loop
        for loop in ctx.module.loops:
            for found in graph_accumulations(loop):
                if id(found.node) not in reported:
                    reported.add(id(found.node))
                    yield ctx.finding(self.code, found.node, f"'{found.accumulator}' accumulates the loss tensor "
                                      f"'{found.loss}' across steps and keeps every step's graph alive; use .item()",
                                      accumulator=found.accumulator, loss=found.loss)


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
