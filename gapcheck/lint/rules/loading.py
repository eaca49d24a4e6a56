"""GC5xx: data loading — validation/test loaders that drop or reorder samples, batches of one."""
from __future__ import annotations

import ast
from collections.abc import Iterator

from gapcheck.codes import lint as codes
from gapcheck.findings import Finding
from gapcheck.lint.rules import Context, Rule
from gapcheck.lint.rules.evaluation import _eval_dataset_call, _target_name
from gapcheck.lint.symbols import (
    ModuleIndex,
    dotted,
    is_eval_name,
    is_train_name,
    keyword,
    literal,
)

_ONE_SAMPLE_NORMS = {"BatchNorm1d", "SyncBatchNorm", "convert_sync_batchnorm"}


def loaders(module: ModuleIndex) -> Iterator[ast.Call]:
    for call in module.calls:
        if module.callee(call).split(".")[-1] == "DataLoader":
            yield call


def dataset_arg(call: ast.Call) -> ast.expr | None:
    return call.args[0] if call.args else keyword(call, "dataset")


def _dataset_name(call: ast.Call) -> str | None:
    name = dotted(dataset_arg(call))
    return name.split(".")[-1] if name else None


def _held_out_dataset(call: ast.Call) -> bool:
    """``DataLoader(datasets.MNIST(..., train=False))`` / ``Dataset(split="test")``."""
    data = dataset_arg(call)
    return isinstance(data, ast.Call) and _eval_dataset_call(data)


def is_eval_loader(module: ModuleIndex, call: ast.Call) -> bool:
    target = _target_name(module, call)
    if _held_out_dataset(call) and not is_train_name(target):
        return True
    if target is not None:
        return is_eval_name(target)
    return is_eval_name(_dataset_name(call))


def is_train_loader(module: ModuleIndex, call: ast.Call) -> bool:
    if _held_out_dataset(call):
        return False
    target = _target_name(module, call)
    if target is not None and (is_eval_name(target) or is_train_name(target)):
        return is_train_name(target)
    return is_train_name(_dataset_name(call)) or literal(keyword(call, "shuffle")) is True


class EvalLoaderDropLast(Rule):
    code = codes.EVAL_LOADER_DROP_LAST
    needs = ("drop_last",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        for call in loaders(ctx.module):
            if literal(keyword(call, "drop_last")) is True and is_eval_loader(ctx.module, call):
                yield ctx.finding(self.code, call, "validation/test DataLoader with drop_last=True leaves the last "
                                  "partial batch out of the metric")


class EvalLoaderShuffle(Rule):
    code = codes.EVAL_LOADER_SHUFFLE
    needs = ("shuffle",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        for call in loaders(ctx.module):
            if literal(keyword(call, "shuffle")) is True and is_eval_loader(ctx.module, call) and \
                    not _only_sampled(ctx.module, call):
                yield ctx.finding(self.code, call, "validation/test DataLoader with shuffle=True: outputs and "
                                  "order-dependent metrics change between runs")


def _only_sampled(module: ModuleIndex, call: ast.Call) -> bool:
    """Every use of the loader is ``next(iter(loader))``: a random batch drawn on purpose (sample images of a GAN)."""
    parent = module.parent(call)
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and (name := dotted(parent.targets[0]))):
        return False
    uses = [n for n in ast.walk(module.tree) if isinstance(n, (ast.Name, ast.Attribute)) and dotted(n) == name
            and isinstance(n.ctx, ast.Load)]
    return bool(uses) and all(_drawn_once(module, n) for n in uses)


def _drawn_once(module: ModuleIndex, node: ast.AST) -> bool:
    wrapper = module.parent(node)
    outer = module.parent(wrapper) if wrapper is not None else None
    return (isinstance(wrapper, ast.Call) and dotted(wrapper.func) == "iter" and isinstance(outer, ast.Call)
            and dotted(outer.func) == "next")


class TrainLoaderBatchOfOne(Rule):
    code = codes.TRAIN_LOADER_BATCH_OF_ONE
    needs = ("BatchNorm1d", "SyncBatchNorm", "sync_batchnorm")

    def check(self, ctx: Context) -> Iterator[Finding]:
        module = ctx.module
        norms = sorted({module.callee(c).split(".")[-1] for c in module.calls} & _ONE_SAMPLE_NORMS)
        if not norms:
            return
        for call in loaders(module):
            keeps_last = keyword(call, "drop_last") is None or literal(keyword(call, "drop_last")) is False
            if (is_train_loader(module, call) and keeps_last
                    and not any(k.arg is None for k in call.keywords) and literal(keyword(call, "batch_size")) != 1
                    and keyword(call, "batch_sampler") is None):
                yield ctx.finding(self.code, call, f"training DataLoader without drop_last=True while the model uses "
                                  f"{norms[0]}: the last batch can hold a single sample", norm=norms[0])


class EvalLoaderFromTrain(Rule):
    code = codes.EVAL_LOADER_FROM_TRAIN
    needs = ("DataLoader",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        module = ctx.module
        # the same variable only means the same object within one function
        train_sets = {(id(module.enclosing_function(c)), dotted(dataset_arg(c))) for c in loaders(module)
                      if is_train_name(_target_name(module, c)) and dotted(dataset_arg(c))}
        for call in loaders(module):
            target = _target_name(module, call)
            data = dotted(dataset_arg(call))
            if not target or not is_eval_name(target) or not data:
                continue
            if _sampler_selects_rows(call, data):
                continue  # DataLoader(dataset, sampler=SubsetRandomSampler(val_ids)): k-fold, the rows are held out
            same_object = (id(module.enclosing_function(call)), data) in train_sets
            if is_train_name(data.split(".")[-1]) or (same_object and not is_eval_name(data.split(".")[-1])):
                yield ctx.finding(self.code, call, f"validation/test loader '{target}' is built from the training "
                                  f"dataset '{data}'", dataset=data)


def _sampler_selects_rows(call: ast.Call, data: str) -> bool:
    """A ``sampler=``/``batch_sampler=`` that picks rows of ``data`` other than all of them.

    Only a sampler built over the dataset itself (``DistributedSampler(train_set)``) still reads every
    row; an index sampler (``SubsetRandomSampler(val_ids)``) or a sampler variable gapcheck cannot see
    is taken to select the held-out rows (precision first).
    """
    for name in ("sampler", "batch_sampler"):
        value = keyword(call, name)
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            continue
        if not (isinstance(value, ast.Call) and value.args and dotted(value.args[0]) == data):
            return True
    return False


RULES = (EvalLoaderDropLast, EvalLoaderShuffle, TrainLoaderBatchOfOne, EvalLoaderFromTrain)
