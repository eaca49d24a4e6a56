"""GC2xx: distributed data parallel — DistributedSampler epochs and sampler/shuffle conflicts."""
from __future__ import annotations

import ast
from collections.abc import Iterator

from gapcheck.codes import lint as codes
from gapcheck.findings import Finding
from gapcheck.lint.facts import Aspect, method
from gapcheck.lint.rules import Context, Rule
from gapcheck.lint.symbols import (
    ModuleIndex,
    Program,
    Step,
    dotted,
    flow,
    is_eval_name,
    keyword,
    literal,
    tokens,
)

_EPOCH_WORDS = {"epoch", "epochs", "ep", "n_epochs", "num_epochs", "max_epochs"}


def is_epoch_loop(node: ast.AST) -> bool:
    """``for epoch in range(args.epochs)``: the target or the range bound speaks of epochs."""
    if not isinstance(node, (ast.For, ast.AsyncFor)):
        return False
    names = [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node.target) if isinstance(n, ast.Name)]
    names += [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node.iter)
              if isinstance(n, (ast.Name, ast.Attribute))]
    return any(tokens(name) & _EPOCH_WORDS for name in names)


def whole_module(program: Program, module: ModuleIndex) -> Iterator[ast.AST]:
    """Every node of the module and of the functions it calls in other modules."""
    roots = [module.tree, *module.functions.values()]
    for step in flow(program, module, roots, depth=2):
        yield step.node


class SamplerWithoutSetEpoch(Rule):
    code = codes.SAMPLER_WITHOUT_SET_EPOCH

    @staticmethod
    def _handed_over(ctx: Context, sampler: ast.Call) -> bool:
        name = _assigned(ctx.module, sampler)
        return name is not None and _handed_over_to_unknown(ctx, name)

    aspect = Aspect.SAMPLER_EPOCH
    needs = ("DistributedSampler", "epoch")  # the sampler may be built in another module

    def check(self, ctx: Context) -> Iterator[Finding]:
        samplers = [c for c in ctx.module.calls if ctx.module.callee(c).split(".")[-1] == "DistributedSampler"
                    and literal(keyword(c, "shuffle")) is not False and not _evaluates(c)]
        epoch_loop = next((loop for loop in ctx.module.loops if is_epoch_loop(loop)), None)
        if epoch_loop is None:
            return  # one pass over the data: the epoch never changes
        if not samplers:
            yield from self._built_elsewhere(ctx, epoch_loop)
            return
        samplers = [c for c in samplers if not self._handed_over(ctx, c)]
        if not samplers:
            return
        if "set_epoch(" in ctx.module.source.text and any(method(c) == "set_epoch" for c in ctx.module.calls):
            return  # set here: no need to follow the calls
        for node in whole_module(ctx.program, ctx.module):
            if isinstance(node, ast.Call) and method(node) == "set_epoch":
                return
        for sampler in samplers:
            yield ctx.finding(self.code, sampler, "DistributedSampler is never given set_epoch(epoch) in the "
                              f"epoch loop (line {epoch_loop.lineno}): every epoch repeats the same order",
                              epoch_loop_line=epoch_loop.lineno)


    def _built_elsewhere(self, ctx: Context, epoch_loop: ast.AST) -> Iterator[Finding]:
        """The sampler is built by a function of another project module that this module calls (``build_loader()``
        in ``data.py``), and nothing this module runs sets its epoch: reported at the epoch loop."""
        if "DistributedSampler" in ctx.module.source.text or "set_epoch" in ctx.module.source.text:
            return  # named here (the rule above decides), or this module sets some sampler's epoch
        built: Step | None = None
        home = ctx.module.enclosing_function(epoch_loop)  # where the loader the loop reads is set up
        for step in flow(ctx.program, ctx.module, [home or ctx.module.tree], depth=2, only=(ast.Call,)):
            node = step.node
            if method(node) == "set_epoch":  # type: ignore[arg-type]
                return
            if (built is None and step.module is not ctx.module
                    and step.module.callee(node).split(".")[-1] == "DistributedSampler"  # type: ignore[arg-type]
                    and literal(keyword(node, "shuffle")) is not False and not _evaluates(node)  # type: ignore[arg-type]
                    and not _handed_over_in(step.module, node)):  # type: ignore[arg-type]
                built = step
        if built is not None:
            where = f"{built.module.source.display}:{built.node.lineno}"  # type: ignore[attr-defined]
            yield ctx.finding(self.code, epoch_loop, f"the DistributedSampler built in {where} (called at line "
                              f"{built.via.lineno}) is never given set_epoch(epoch) in this epoch loop: every epoch "  # type: ignore[union-attr]
                              "repeats the same order", sampler=where)


def _handed_over_in(module: ModuleIndex, sampler: ast.Call) -> bool:
    """In the module that builds it, the sampler is passed to something other than a DataLoader (its epoch may be
    set there), or returned on its own (the caller may set it: then the caller's text names set_epoch)."""
    name = _assigned(module, sampler)
    if name is None:
        return False
    return any(module.callee(call).split(".")[-1] not in _ONLY_LOOK for call in _calls_by_argument(module).get(name, ()))


def _evaluates(sampler: ast.Call) -> bool:
    """A sampler over validation/test data: its order does not change the metric."""
    data = sampler.args[0] if sampler.args else keyword(sampler, "dataset")
    return is_eval_name((dotted(data) or "").split(".")[-1])


def calls_in_all(module: ModuleIndex) -> Iterator[ast.Call]:
    return iter(module.calls)


def _assigned(module: ModuleIndex, call: ast.Call) -> str | None:
    parent = module.parent(call)
    while isinstance(parent, ast.IfExp):
        parent = module.parent(parent)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        return dotted(parent.targets[0])
    return None


#: Calls that only look at a sampler (print it, log it, measure it): never where its epoch is set.
_ONLY_LOOK = frozenset({"DataLoader", "len", "isinstance", "print", "str", "repr", "format", "info", "debug",
                        "warning", "log", "type", "id"})


def _handed_over_to_unknown(ctx: Context, name: str) -> bool:
    """``name`` is passed to a call gapcheck cannot follow (a star import, a library): it may set the epoch there."""
    for call in _calls_by_argument(ctx.module).get(name, ()):
        if ctx.program.resolve(ctx.module, call, within=ctx.module.enclosing_function(call)) is None and \
                ctx.module.callee(call).split(".")[-1] not in _ONLY_LOOK:
            return True
    return False


def _calls_by_argument(module: ModuleIndex) -> dict[str, list[ast.Call]]:
    """Name -> the calls it is passed to; built once per module (one scan, not one per sampler)."""
    key = ("ddp.calls_by_argument",)
    if key not in module.cache:
        found: dict[str, list[ast.Call]] = {}
        for call in module.calls:
            for argument in [*call.args, *(k.value for k in call.keywords)]:
                name = dotted(argument)
                if name is not None and call not in found.get(name, ()):
                    found.setdefault(name, []).append(call)
        module.cache[key] = found
    return module.cache[key]  # type: ignore[no-any-return]


class ShuffleWithSampler(Rule):
    code = codes.SHUFFLE_WITH_SAMPLER
    needs = ("sampler",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        for call in ctx.module.calls:
            if ctx.module.callee(call).split(".")[-1] != "DataLoader" or literal(keyword(call, "shuffle")) is not True:
                continue
            for name in ("sampler", "batch_sampler"):
                value = keyword(call, name)
                if value is not None and literal(value) is not None:
                    yield ctx.finding(self.code, call, f"DataLoader gets shuffle=True and {name}=: they are "
                                      "mutually exclusive; let the sampler shuffle")
                    break


RULES = (SamplerWithoutSetEpoch, ShuffleWithSampler)
