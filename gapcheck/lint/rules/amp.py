"""GC3xx: mixed precision — GradScaler vs dtype, unscale before clipping, scheduler after skipped steps."""
from __future__ import annotations

import ast
from collections.abc import Iterator

from gapcheck.codes import lint as codes
from gapcheck.findings import Finding
from gapcheck.lint.compat import imported_either_way, is_fallback
from gapcheck.lint.facts import Aspect, is_clip, is_scaler_call
from gapcheck.lint.loops import Event, Kind, belongs, events, loop_events
from gapcheck.lint.rules import Context, Rule
from gapcheck.lint.symbols import ModuleIndex, branches, dotted, keyword, literal, on_two_branches

BF16, FP16, UNKNOWN = "bfloat16", "float16", "unknown"


def autocast_dtype(module: ModuleIndex, call: ast.Call) -> str | None:
    """The dtype an autocast call uses (None when ``call`` is not an autocast)."""
    name = module.callee(call)
    if name.split(".")[-1] != "autocast" or literal(keyword(call, "enabled")) is False:
        return None
    dtype = keyword(call, "dtype")
    if dtype is None and len(call.args) > 1:
        dtype = call.args[1]
    if dtype is not None:
        text = (module.qualname(dtype) or "").split(".")[-1]
        return BF16 if text in ("bfloat16", "bf16") else FP16 if text in ("float16", "half", "fp16") else UNKNOWN
    if name.startswith("torch.cuda.amp"):
        return FP16
    if name.startswith("torch.cpu.amp"):
        return BF16
    device = keyword(call, "device_type")
    device = call.args[0] if device is None and call.args else device
    value = literal(device)
    if value == "cuda":
        return FP16
    if value == "cpu":
        return BF16
    return UNKNOWN


def scalers(module: ModuleIndex) -> list[ast.Call]:
    return [c for c in module.calls if module.callee(c).split(".")[-1] in ("GradScaler", "ShardedGradScaler")]


class ScalerWithBf16(Rule):
    code = codes.SCALER_WITH_BF16
    aspect = Aspect.AMP
    needs = ("GradScaler",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        dtypes = {d for c in ctx.module.calls if (d := autocast_dtype(ctx.module, c)) is not None}
        if dtypes != {BF16}:
            return
        for scaler in scalers(ctx.module):
            enabled = keyword(scaler, "enabled")
            if enabled is None or literal(enabled) is True or (literal(enabled) is ... and not _tied_to_fp16(enabled)):
                yield ctx.finding(self.code, scaler, "GradScaler with bfloat16 autocast: bf16 does not underflow, "
                                  "loss scaling only skips steps")


def _tied_to_fp16(expr: ast.AST) -> bool:
    """``enabled=(dtype == "float16")`` / ``enabled=args.fp16``: the scaler switches itself on for float16 only.
    Any other flag (``enabled=args.amp``) turns it on under the module's bfloat16 autocast."""
    for node in ast.walk(expr):
        text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else \
            node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
        if any(word in text.lower() for word in ("16", "half", "dtype", "precision")):
            return True
    return False


class Fp16WithoutScaler(Rule):
    code = codes.FP16_WITHOUT_SCALER
    aspect = Aspect.AMP
    needs = ("autocast",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        module = ctx.module
        calls = list(module.calls)
        if scalers(module) or any("scaler" in (dotted(c.func) or "").lower() for c in calls) or not any(
                isinstance(c.func, ast.Attribute) and c.func.attr == "backward" for c in calls):
            return  # inference-only fp16 needs no scaler; any scaler in sight is given the benefit of the doubt
        for call in calls:
            scope = module.enclosing_function(call) or module.tree
            trains = any(isinstance(c.func, ast.Attribute) and c.func.attr == "backward" for c in module.scope_calls(scope))
            if trains and autocast_dtype(module, call) == FP16:
                yield ctx.finding(self.code, call, "float16 autocast in a training module without a GradScaler: "
                                  "small gradients underflow to zero")


_NEW_AMP = ("torch.amp", "torch.autocast")


class DeprecatedCudaAmp(Rule):
    code = codes.DEPRECATED_CUDA_AMP
    needs = ("cuda.amp", "cuda import amp")

    def check(self, ctx: Context) -> Iterator[Finding]:
        for call in ctx.module.calls:
            name = ctx.module.callee(call)
            if name in ("torch.cuda.amp.autocast", "torch.cuda.amp.GradScaler") and not (
                    is_fallback(ctx.module, call, _NEW_AMP) or imported_either_way(ctx.module, call, _NEW_AMP)):
                short = name.split(".")[-1]
                yield ctx.finding(self.code, call, f"{name} is deprecated: use torch.amp.{short}('cuda', ...)")


class ClipWithoutUnscale(Rule):
    """Reads each function (and the module body) as one pass in source order, inner loops and the
    functions and loss-scaler objects it calls included, so a backward inside a gradient-accumulation
    loop, a ``backward(loss, scaler)`` helper or a ``NativeScaler.__call__`` all count. Branches of one
    ``if``/``else`` are alternatives: one path that scales is enough, and a clip on the other path is
    not measured against it."""

    code = codes.CLIP_WITHOUT_UNSCALE
    aspect = Aspect.AMP
    needs = ("clip_grad",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        module = ctx.module
        for unit in _clipping_units(ctx):
            statements: list[ast.stmt] = unit.body  # type: ignore[attr-defined]
            body = [s for s in statements if not isinstance(s, _DEFS)] if unit is module.tree else statements
            found = unit_events(ctx, unit, body)
            if not any(e.kind is Kind.SCALER_STEP for e in found):
                continue
            scaled_by: Event | None = None
            unscaled = False
            for event in found:
                apart = scaled_by is not None and exclusive(module, scaled_by, event)
                if event.kind is Kind.BACKWARD:
                    if _scaled_backward(event):
                        scaled_by, unscaled = event, False
                    elif not apart:
                        scaled_by = None
                elif event.kind is Kind.UNSCALE and not apart:
                    unscaled = True
                elif (event.kind is Kind.CLIP and scaled_by is not None and not unscaled and not apart
                      and event.step.module is module):
                    yield ctx.finding(self.code, event.node, "gradients clipped while still scaled by the GradScaler: "
                                      "call scaler.unscale_(optimizer) first")
                elif event.kind is Kind.SCALER_STEP and not apart:
                    unscaled = False


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _clipping_units(ctx: Context) -> list[ast.AST]:
    """The functions (and module body) that clip, or call a function of this module that does: only there can
    a reported clip (always in this module) follow a scaled backward."""
    module = ctx.module
    clipping = {id(module.enclosing_function(c) or module.tree) for c in module.calls if is_clip(module, c)}
    if not clipping:
        return []
    units = [module.tree, *module.functions.values(), *module.nested_functions]
    return [u for u in dict.fromkeys(units) if id(u) in clipping or any(
        (found := ctx.program.resolve(module, c, within=module.enclosing_function(c))) is not None
        and found[0] is module and id(found[1]) in clipping for c in module.scope_calls(u))]


def unit_events(ctx: Context, unit: ast.AST, body: list[ast.stmt]) -> list[Event]:
    key = ("unit_events", id(unit))
    if key not in ctx.module.cache:
        ctx.module.cache[key] = events(ctx.program, ctx.module, body)
    return ctx.module.cache[key]  # type: ignore[no-any-return]


def _scaled_backward(event: Event) -> bool:
    """``scaler.scale(loss).backward()`` or ``scaled = scaler.scale(loss); scaled.backward()``."""
    node = event.node
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False  # a loss-scaler object gapcheck cannot read: whether it unscales is unknown
    module, target = event.step.module, node.func.value
    values = [target] if isinstance(target, ast.Call) else module.bindings.get(dotted(target) or "", [])
    return any(isinstance(v, ast.Call) and is_scaler_call(module, v, "scale") for v in values)


def exclusive(module: ModuleIndex, a: Event, b: Event) -> bool:
    """``a`` and ``b`` lie on the two branches of one ``if``/``else`` (never both in one pass)."""
    if a.step.via is b.step.via and a.step.module is b.step.module:
        where, x, y = a.step.module, a.node, b.node  # same code (or inside the same call)
    else:
        where, x, y = module, a.step.via or a.node, b.step.via or b.node  # compare the calls that led there
    return on_two_branches(branches(where, x), branches(where, y))


class SchedulerAfterSkippedStep(Rule):
    code = codes.SCHEDULER_AFTER_SKIPPED_STEP
    aspect = Aspect.AMP
    needs = ("scaler", "Scaler")  # scaler.step is what it looks for

    def check(self, ctx: Context) -> Iterator[Finding]:
        for loop in ctx.module.loops:
            found = [e for e in loop_events(ctx.program, ctx.module, loop) if belongs(e, loop)]
            step = next((e for e in found if e.kind is Kind.SCALER_STEP), None)
            if step is None:
                continue
            stepped_at = step.step.via or step.node
            for event in found[found.index(step) + 1:]:
                if (event.kind is Kind.SCHED_STEP and event.step.module is ctx.module
                        and not self._guarded(ctx, event.node, loop, stepped_at)):
                    yield ctx.finding(self.code, event.node, "scheduler.step() runs even when scaler.step skipped the "
                                      "optimizer step (inf/NaN gradients): check that the scale did not drop")

    @staticmethod
    def _guarded(ctx: Context, node: ast.AST, loop: ast.AST, step: ast.AST) -> bool:
        """An ``if`` around the scheduler alone (not around scaler.step too): the author decided when to step."""
        for parent in ctx.module.ancestors(node):
            if parent is loop:
                return False
            if isinstance(parent, ast.If) and not any(n is step for n in ast.walk(parent)):
                return True
        return False


RULES = (ScalerWithBf16, SchedulerAfterSkippedStep, ClipWithoutUnscale, Fp16WithoutScaler, DeprecatedCudaAmp)
