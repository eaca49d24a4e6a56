"""GC7xx: hyper-parameter search — trials that keep their model on the device."""
from __future__ import annotations

import ast
from collections.abc import Iterator

from gapcheck.codes import lint as codes
from gapcheck.findings import Finding
from gapcheck.lint.facts import is_model_name, method
from gapcheck.lint.rules import Context, Rule
from gapcheck.lint.symbols import ModuleIndex, dotted, flow, ordered

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def objectives(module: ModuleIndex) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Optuna objectives (passed to study.optimize, or taking a trial and calling trial.suggest_*) and
    Ray Tune functions run with reuse_actors=True (otherwise each trial has its own process)."""
    names: set[str] = set()
    for call in module.calls:
        callee = module.callee(call)
        if method(call) == "optimize" and call.args and isinstance(call.args[0], ast.Name):
            names.add(call.args[0].id)
        if callee.split(".")[-1] in ("run", "Tuner", "with_parameters") and callee.startswith("ray.tune") \
                and "reuse_actors=True" in module.source.text.replace(" ", "") and call.args \
                and isinstance(call.args[0], ast.Name):
            names.add(call.args[0].id)
    found = [module.functions[n] for n in sorted(names) if n in module.functions]
    for name, function in module.functions.items():
        if "." in name or function in found:
            continue
        if any(a.arg == "trial" for a in function.args.args) and any(
                (method(c) or "").startswith("suggest_") for c in calls_in_all_of(function)):
            found.append(function)
    return found


def calls_in_all_of(scope: ast.AST) -> Iterator[ast.Call]:
    for node in ordered(scope):
        if isinstance(node, ast.Call):
            yield node


def device_models(function: ast.AST) -> dict[str, ast.AST]:
    """Model variables created in ``function`` and moved to a device (``.to(...)`` / ``.cuda()``)."""
    created: dict[str, ast.AST] = {}
    for node in ordered(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and is_model_name(node.targets[0].id) and isinstance(node.value, ast.Call):
            created.setdefault(node.targets[0].id, node)
    moved = set()
    for name, node in created.items():
        for sub in ordered(function):
            if isinstance(sub, ast.Call) and method(sub) in ("to", "cuda") and (
                    dotted(sub.func.value) == name or any(sub is n for n in ast.walk(node))):  # type: ignore[attr-defined]
                moved.add(name)
    return {name: created[name] for name in sorted(moved)}


def is_release(node: ast.AST, names: set[str], module: ModuleIndex) -> bool:
    if isinstance(node, ast.Delete):
        return any(isinstance(t, ast.Name) and t.id in names for t in node.targets)
    if isinstance(node, ast.Call):
        return module.callee(node).split(".")[-1] in ("empty_cache", "collect", "release_memory", "free_memory")
    return False


def _pruned(node: ast.AST) -> bool:
    target = node.exc.func if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) else \
        node.exc if isinstance(node, ast.Raise) else None
    return (dotted(target) or "").split(".")[-1] == "TrialPruned"


def _in_cleanup_block(module: ModuleIndex, node: ast.AST) -> bool:
    child = node
    for parent in module.ancestors(node):
        if isinstance(parent, ast.Try) and any(child is s for s in parent.finalbody):
            return True
        if isinstance(parent, ast.ExceptHandler):
            return True
        if isinstance(parent, _FUNCS):
            return False
        child = parent
    return False


class HpoModelNotReleased(Rule):
    code = codes.HPO_MODEL_NOT_RELEASED
    needs = ("trial", "tune")

    def check(self, ctx: Context) -> Iterator[Finding]:
        module = ctx.module
        for objective in objectives(module):
            models = device_models(objective)
            if not models or any(isinstance(n, (ast.With, ast.AsyncWith)) and any(
                    dotted(i.optional_vars) in models for i in n.items if i.optional_vars) for n in ordered(objective)):
                continue
            releases = [s for s in flow(ctx.program, module, objective.body)
                        if is_release(s.node, set(models), s.module)]
            name, created = next(iter(models.items()))
            if not releases:
                yield ctx.finding(self.code, created, f"objective '{objective.name}' creates '{name}' on the device and "
                                  "never releases it (no del, gc.collect() or torch.cuda.empty_cache())", model=name)
                continue
            prunes = [n for n in ordered(objective) if _pruned(n)]
            if prunes and not any(_in_cleanup_block(module, s.via) if s.via is not None else _in_cleanup_block(module, s.node)
                                   for s in releases):
                yield ctx.finding(self.code, created, f"objective '{objective.name}' releases '{name}' only on the normal "
                                  f"path: raise TrialPruned (line {prunes[0].lineno}) skips it; release in finally",
                                  model=name, prune_line=prunes[0].lineno)


class TrialPrunedWithoutCleanup(Rule):
    code = codes.TRIAL_PRUNED_WITHOUT_CLEANUP
    needs = ("TrialPruned",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        module = ctx.module
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Try):
                continue
            function = module.enclosing_function(node)
            models = device_models(function) if function is not None else {}
            if not models:
                continue
            if any(is_release(n, set(models), module) for s in node.finalbody for n in ordered(s)):
                continue
            for handler in node.handlers:
                types = [handler.type] if not isinstance(handler.type, ast.Tuple) else handler.type.elts
                if not any((dotted(t) or "").split(".")[-1] == "TrialPruned" for t in types if t is not None):
                    continue
                if not any(is_release(n, set(models), module) for s in handler.body for n in ordered(s)):
                    yield ctx.finding(self.code, handler, "except TrialPruned without freeing "
                                      f"'{next(iter(models))}': the traceback keeps the trial's tensors alive")


RULES = (HpoModelNotReleased, TrialPrunedWithoutCleanup)
