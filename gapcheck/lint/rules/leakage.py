"""GC1xx: leakage — statistics, vocabularies or fits that see validation/test data."""
from __future__ import annotations

import ast
from collections.abc import Iterator

from gapcheck.codes import lint as codes
from gapcheck.findings import Finding
from gapcheck.lint.facts import method, receiver
from gapcheck.lint.rules import Context, Rule
from gapcheck.lint.rules.dataflow import (
    COUNTERS,
    FIT,
    TEXT_SUFFIXES,
    VOCAB_FUNCTIONS,
    assigned_columns,
    assigned_name,
    built_by,
    concatenated_held_out,
    fit_data,
    scopes,
    split_after,
    through_helpers,
)
from gapcheck.lint.symbols import (
    ModuleIndex,
    calls_in,
    dotted,
    is_eval_name,
    is_train_name,
    keyword,
    last_name,
    ordered,
    tokens,
)


class FitBeforeSplit(Rule):
    code = codes.FIT_BEFORE_SPLIT
    needs = ("fit", "split", "Subset", ":]")  # the fit may be in a helper of another module; X[:n], X[n:] split

    def check(self, ctx: Context) -> Iterator[Finding]:
        module = ctx.module
        for scope in scopes(module):
            for call in module.scope_calls(scope):
                data = fit_data(module, call)
                if data is None:
                    continue
                names = {data} | ({out} if (out := assigned_name(module, call)) else set())
                names |= assigned_columns(module, call)
                split = split_after(module, scope, names, call.lineno)
                if split is not None:
                    yield ctx.finding(self.code, call, f"{method(call)} on '{data}' before it is split "
                                      f"(line {split.lineno}): the statistics include validation/test rows",
                                      data=data, split_line=split.lineno)
            yield from through_helpers(ctx, scope, self.code)


_STATS = {"mean", "std", "var", "min", "max", "amin", "amax", "nanmean", "nanstd", "fit", "fit_transform"}


def _dataset_classes(module: ModuleIndex) -> dict[str, ast.ClassDef]:
    return {name: cls for name, cls in module.classes.items()
            if any((dotted(b) or "").split(".")[-1].endswith("Dataset") for b in cls.bases)}


def _normalizes(init: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Call | None:
    stats = [c for c in calls_in(init) if (method(c) or (dotted(c.func) or "").split(".")[-1]) in _STATS]
    arithmetic = any(isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Sub, ast.Div)) for n in ordered(init))
    if stats and (arithmetic or any(method(c) == "fit_transform" for c in stats)):
        return stats[0]
    return None


class DatasetNormalizesAll(Rule):
    code = codes.DATASET_NORMALIZES_ALL
    needs = ("Dataset",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        module = ctx.module
        for name in _dataset_classes(module):
            init = module.functions.get(f"{name}.__init__")
            stat = _normalizes(init) if init is not None else None
            if stat is None:
                continue
            for scope in scopes(module):
                for call in module.scope_calls(scope):
                    if module.callee(call).split(".")[-1] != name or (out := assigned_name(module, call)) is None:
                        continue
                    split = split_after(module, scope, {out}, call.lineno)
                    if split is not None:
                        yield ctx.finding(self.code, stat, f"{name}.__init__ computes normalization statistics over "
                                          f"everything it loads, and '{out}' is split afterwards (line {split.lineno})",
                                          dataset=name, split_line=split.lineno)
                        break
                else:
                    continue
                break


def _counted_over_all(module: ModuleIndex, call: ast.Call) -> list[str]:
    """``Counter(w for s in train + test for w in s)`` or ``counter.update(...)`` inside a loop over train + test."""
    callee = module.callee(call).split(".")[-1]
    counts = callee in COUNTERS or (method(call) == "update" and (
        built_by(module, receiver(call), tuple(COUNTERS)) or tokens(last_name(receiver(call)) or "") & _VOCAB_WORDS))
    if not counts:
        return []
    found = concatenated_held_out(ast.Tuple(elts=[*call.args, *(k.value for k in call.keywords)], ctx=ast.Load()))
    for parent in module.ancestors(call):
        if found or isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            break
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)):
            found = concatenated_held_out(parent.iter)
    return found


_VOCAB_WORDS = frozenset({"vocab", "vocabulary", "counter", "counts", "freq", "frequencies", "word2idx", "token2id"})


class VocabFromAllSplits(Rule):
    """A vocabulary, tokenizer, vectorizer, token counter or encoder built over data that includes the
    held-out splits (by name, or as a concatenation of splits), or over data split afterwards."""

    code = codes.VOCAB_FROM_ALL_SPLITS
    needs = ("vocab", "Vocab", "Vectoriz", "Tokeniz", "fit_on_texts", "adapt", "StringLookup", "Counter", "Encoder",
             "split", "concat", "chain")  # the vocabulary may be built in a helper of another module

    def check(self, ctx: Context) -> Iterator[Finding]:
        module = ctx.module
        for scope in scopes(module):
            for call in module.scope_calls(scope):
                counted = _counted_over_all(module, call)
                if not counted and method(call) in FIT and built_by(module, receiver(call), ("Encoder",)):
                    counted = concatenated_held_out(call.args[0] if call.args else None)
                if counted:
                    yield ctx.finding(self.code, call, f"vocabulary/encoder built over the concatenated splits, "
                                      f"including {', '.join(counted)}", held_out=counted)
                    continue
                callee = module.callee(call).split(".")[-1]
                text_fit = method(call) in FIT and built_by(module, receiver(call), TEXT_SUFFIXES)
                if callee not in VOCAB_FUNCTIONS and not text_fit:
                    continue
                source = call.args[0] if call.args else keyword(call, "iterator")
                if source is None:
                    continue
                held_out = sorted({n.id for n in ast.walk(source) if isinstance(n, ast.Name) and is_eval_name(n.id)})
                if held_out:
                    yield ctx.finding(self.code, call, f"vocabulary built from data that includes {', '.join(held_out)}",
                                      held_out=held_out)
                    continue
                if isinstance(source, ast.Name) and not is_train_name(source.id):
                    split = split_after(module, scope, {source.id}, call.lineno)
                    if split is not None:
                        yield ctx.finding(self.code, call, f"vocabulary built from '{source.id}' before it is split "
                                          f"(line {split.lineno})", split_line=split.lineno)
            yield from through_helpers(ctx, scope, self.code)


#: Fitting these on held-out data is the method, not a leak: calibration (Platt, isotonic, temperature),
#: decision thresholds, and blending/stacking meta-learners are fit on a validation split by design.
HELD_OUT_BY_DESIGN = frozenset({"calibrator", "calibration", "calibrated", "isotonic", "platt", "temperature",
                                "threshold", "thresholds", "meta", "blender", "blend", "stacker", "stack"})


class FitOnEvalData(Rule):
    code = codes.FIT_ON_EVAL_DATA
    needs = ("fit",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        for call in ctx.module.calls:
            if method(call) not in FIT or not call.args:
                continue
            fitted = receiver(call)
            names = {dotted(fitted) or ""} | {c.split(".")[-1] for c in ctx.module.constructors(dotted(fitted))}
            if isinstance(fitted, ast.Call):
                names.add(ctx.module.callee(fitted).split(".")[-1])
            if any(tokens(name) & HELD_OUT_BY_DESIGN for name in names):
                continue
            data = dotted(call.args[0])
            if data is not None and is_eval_name(data.split(".")[-1]):
                yield ctx.finding(self.code, call, f"{method(call)} on '{data}': fit on training data, "
                                  "then transform/predict validation and test data", data=data)


RULES = (FitBeforeSplit, DatasetNormalizesAll, VocabFromAllSplits, FitOnEvalData)
