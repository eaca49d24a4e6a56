"""Training-loop events: what happens, in which order, in one iteration of a loop.

:func:`events` walks a loop body with :func:`~gapcheck.lint.symbols.flow` (so calls into
``train_one_epoch()`` or ``self.training_step()`` are included) and names each call a rule cares
about. The order-sensitive rules (zero_grad -> backward -> unscale_ -> clip -> step -> update ->
scheduler.step) read the resulting list.
"""
from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum

from gapcheck.lint import facts
from gapcheck.lint.symbols import ModuleIndex, Program, Step, flow

LOOPS = (ast.For, ast.AsyncFor, ast.While)


class Kind(str, Enum):
    BACKWARD = "backward"
    ZERO_GRAD = "zero_grad"
    OPT_STEP = "optimizer.step"
    SCALER_STEP = "scaler.step"
    SCALER_UPDATE = "scaler.update"
    UNSCALE = "scaler.unscale_"
    CLIP = "clip_grad"
    SCHED_STEP = "scheduler.step"
    EVAL = "eval()"
    TRAIN = "train()"
    SET_EPOCH = "set_epoch"


@dataclass(frozen=True)
class Event:
    kind: Kind
    step: Step

    @property
    def node(self) -> ast.AST:
        return self.step.node


def classify(module: ModuleIndex, node: ast.AST) -> tuple[Kind, ...]:
    """What ``node`` does to the training step (usually one kind; a loss-scaler object call is several)."""
    if isinstance(node, ast.Assign):  # p.grad = None clears gradients like zero_grad
        if any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in node.targets) and \
                isinstance(node.value, ast.Constant) and node.value.value is None:
            return (Kind.ZERO_GRAD,)
        return ()
    if not isinstance(node, ast.Call):
        return ()
    method = facts.method(node)
    if method == "backward":
        return (Kind.BACKWARD,)
    if method == "zero_grad" or (isinstance(node.func, ast.Name) and node.func.id == "zero_grad"):
        return (Kind.ZERO_GRAD,)  # the method, or a project's zero_grad(params) helper (improved-diffusion)
    if method == "set_epoch":
        return (Kind.SET_EPOCH,)
    if facts.is_mode_call(node, "eval"):
        return (Kind.EVAL,)
    if facts.is_mode_call(node, "train"):
        return (Kind.TRAIN,)
    if facts.is_clip(module, node):
        return (Kind.CLIP,)
    if method in ("step", "update", "unscale_") and facts.is_scaler(module, facts.receiver(node)):
        return ({"step": Kind.SCALER_STEP, "update": Kind.SCALER_UPDATE, "unscale_": Kind.UNSCALE}[method],)
    if method == "step" and facts.is_scheduler(module, facts.receiver(node)):
        return (Kind.SCHED_STEP,)
    if method == "step" and facts.is_optimizer(module, facts.receiver(node)):
        return (Kind.OPT_STEP,)
    if facts.is_loss_scaler_call(module, node):
        return OPAQUE_SCALER_CALL
    return ()


#: ``loss_scaler(loss, optimizer, clip_grad=...)`` on timm's NativeScaler (or an object gapcheck cannot read that is
#: named so): a scaled backward and a scaler step, seen from outside.
OPAQUE_SCALER_CALL = (Kind.BACKWARD, Kind.SCALER_STEP)


def events(program: Program, module: ModuleIndex, roots: Iterable[ast.AST]) -> list[Event]:
    found: list[Event] = []
    for step in flow(program, module, roots, only=(ast.Call, ast.Assign)):
        kinds = classify(step.module, step.node)
        if kinds is OPAQUE_SCALER_CALL and program.resolve(
                step.module, step.node, within=step.module.enclosing_function(step.node)) is not None:  # type: ignore[arg-type]
            continue  # the class is project code: flow walks its __call__ and sees the real events
        found.extend(Event(kind, step) for kind in kinds)
    return found


def loop_events(program: Program, module: ModuleIndex, loop: ast.AST) -> list[Event]:
    """:func:`events` of one iteration of ``loop`` (memoised: several rules read the same loop)."""
    key = ("events", id(loop))
    if key not in module.cache:
        module.cache[key] = events(program, module, loop.body)  # type: ignore[attr-defined]
    return module.cache[key]  # type: ignore[no-any-return]


def loops(tree: ast.AST) -> Iterator[ast.For | ast.AsyncFor | ast.While]:
    for node in ast.walk(tree):
        if isinstance(node, LOOPS):
            yield node  # type: ignore[misc]


def belongs(event: Event, loop: ast.AST) -> bool:
    """Whether ``event`` runs once per iteration of ``loop`` (no inner loop between them)."""
    module, node = event.step.module, event.step.node
    for parent in module.ancestors(node):
        if parent is loop:
            return True
        if isinstance(parent, LOOPS):
            return False
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return event.step.via is not None  # reached through a call made by the loop body
    return False


def is_steps(kinds: set[Kind]) -> bool:
    return Kind.OPT_STEP in kinds or Kind.SCALER_STEP in kinds
