"""GC1xx: leakage — statistics, vocabularies or fits that see validation/test data."""
from __future__ import annotations

import ast
from collections.abc import Iterator

from gapcheck.codes import lint as codes
from gapcheck.findings import Finding
from gapcheck.lint.facts import method, receiver
from gapcheck.lint.rules import Context, Rule
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

TRANSFORMER_SUFFIXES = ("Scaler", "Encoder", "PCA", "Normalizer", "Imputer", "Discretizer", "QuantileTransformer",
                        "PowerTransformer", "TruncatedSVD", "SelectKBest", "SelectPercentile", "Pipeline",
                        "make_pipeline", "ColumnTransformer", "FactorAnalysis", "KernelPCA", "IncrementalPCA")
TEXT_SUFFIXES = ("Vectorizer", "Tokenizer", "TextVectorization", "StringLookup")
VOCAB_FUNCTIONS = {"build_vocab_from_iterator", "build_vocab", "fit_on_texts", "train_from_iterator", "adapt"}
SPLITTERS = {"train_test_split", "random_split"}
_FIT = ("fit", "fit_transform")
#: Encoders that only learn the set of categories (no statistics): fitting them on every row leaks nothing measurable.
CATEGORY_ENCODERS = ("LabelEncoder", "LabelBinarizer", "MultiLabelBinarizer", "OneHotEncoder", "OrdinalEncoder")
_SCOPE = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)


def _scopes(module: ModuleIndex) -> list[ast.AST]:
    """The module body and every function (each a scope whose statements run in order)."""
    if "scopes" not in module.cache:
        module.cache["scopes"] = [module.tree, *(n for n in module.functions.values()),
                                  *(n for n in module.nested_functions)]
    return module.cache["scopes"]  # type: ignore[no-any-return]


def _built_by(module: ModuleIndex, node: ast.AST | None, suffixes: tuple[str, ...]) -> bool:
    """``node`` is ``StandardScaler()`` itself or a name bound to one."""
    if isinstance(node, ast.Call):
        return module.callee(node).split(".")[-1].endswith(suffixes)
    return any(c.split(".")[-1].endswith(suffixes) for c in module.constructors(dotted(node)))


def _rows_sliced(node: ast.Subscript) -> bool:
    """``X[:800]``, ``X[800:, :]`` or ``X[train_idx]`` select rows; ``X[:, 0]`` does not."""
    index = node.slice
    if isinstance(index, ast.Tuple) and index.elts:
        index = index.elts[0]
    if isinstance(index, ast.Slice):
        return index.lower is not None or index.upper is not None
    return isinstance(index, ast.Name) and (is_train_name(index.id) or is_eval_name(index.id))


def split_after(module: ModuleIndex, scope: ast.AST, names: set[str], line: int) -> ast.AST | None:
    """The first place after ``line`` in ``scope`` where the value ``names`` hold is split into train/held-out parts.

    The value is followed, not the names: ``Xs = scaler.transform(X)`` carries it to ``Xs``, and
    ``X = np.load("other.npy")`` rebinds ``X`` to other data, so a later split of ``X`` is not this one.
    """
    holding = set(names)
    for node in module.walk(scope):
        if getattr(node, "lineno", 0) <= line:
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            _carry(node, holding)
        elif isinstance(node, ast.Call):
            callee = module.callee(node).split(".")[-1]
            args = [*node.args, *(k.value for k in node.keywords if k.arg in ("dataset", "arrays"))]
            splits = callee in SPLITTERS or (callee == "split" and method(node) == "split"
                                             and not isinstance(receiver(node), ast.Constant))
            if splits and any(_root(a) in holding for a in args):
                return node
            if callee == "Subset" and node.args and _root(node.args[0]) in holding:
                return node
        elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in holding
              and isinstance(node.ctx, ast.Load) and _rows_sliced(node)):
            return node
    return None


def _carry(node: ast.Assign | ast.AnnAssign, holding: set[str]) -> None:
    """Update the names that hold the fitted value after ``node``: derived from it, or rebound to something else."""
    derived = any(isinstance(n, ast.Name) and n.id in holding for n in ast.walk(node.value))  # type: ignore[arg-type]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    for target in targets:
        for element in (target.elts if isinstance(target, ast.Tuple) else [target]):
            if isinstance(element, ast.Name):
                if derived:
                    holding.add(element.id)
                else:
                    holding.discard(element.id)


def _root(node: ast.AST | None) -> str | None:
    """The variable an argument reads: ``X``, ``df`` in ``df[cols]`` / ``df.values`` / ``df[cols].to_numpy()``."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Subscript) and not _rows_sliced(node) or isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args:
            node = node.func.value  # df[cols].to_numpy(), X.copy()
        else:
            return None


def _assigned_name(module: ModuleIndex, call: ast.Call) -> str | None:
    parent = module.parent(call)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        return parent.targets[0].id
    return None


def _assigned_columns(module: ModuleIndex, call: ast.Call) -> set[str]:
    """``df[cols] = scaler.fit_transform(df[cols])``: the frame now holds the fitted values."""
    parent = module.parent(call)
    if isinstance(parent, ast.Assign):
        return {name for t in parent.targets if (name := _root(t)) is not None}
    return set()


class FitBeforeSplit(Rule):
    code = codes.FIT_BEFORE_SPLIT
    needs = ("fit",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        module = ctx.module
        for scope in _scopes(module):
            for call in module.scope_calls(scope):
                data = _root(call.args[0]) if method(call) in _FIT and call.args else None
                if data is None:
                    continue
                if not _built_by(module, receiver(call), TRANSFORMER_SUFFIXES) or \
                        _built_by(module, receiver(call), CATEGORY_ENCODERS):
                    continue
                if is_train_name(data):
                    continue
                names = {data} | ({out} if (out := _assigned_name(module, call)) else set())
                names |= _assigned_columns(module, call)
                split = split_after(module, scope, names, call.lineno)
                if split is not None:
                    yield ctx.finding(self.code, call, f"{method(call)} on '{data}' before it is split "
                                      f"(line {split.lineno}): the statistics include validation/test rows",
                                      data=data, split_line=split.lineno)


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
            for scope in _scopes(module):
                for call in module.scope_calls(scope):
                    if module.callee(call).split(".")[-1] != name or (out := _assigned_name(module, call)) is None:
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


#: Calls that count tokens or categories into a vocabulary (``Counter(words)``, ``counter.update(words)``).
COUNTERS = {"Counter", "Vocab", "Dictionary", "FreqDist"}
_CONCAT = {"concat", "concatenate", "chain", "hstack", "vstack", "cat", "union"}


def concatenated_held_out(node: ast.AST | None) -> list[str]:
    """Held-out names inside a concatenation of splits in ``node``: ``train + valid + test``,
    ``pd.concat([train, test])``, ``chain(train, test)``, ``[*train, *test]`` (a generator over one included)."""
    if node is None:
        return []
    for part in ast.walk(node):
        operands: list[ast.AST] = []
        if isinstance(part, ast.BinOp) and isinstance(part.op, ast.Add):
            operands = [part.left, part.right]
        elif isinstance(part, ast.Call) and (dotted(part.func) or "").split(".")[-1] in _CONCAT:
            operands = [*part.args, *(e for a in part.args if isinstance(a, (ast.List, ast.Tuple)) for e in a.elts)]
        elif isinstance(part, (ast.List, ast.Tuple)) and any(isinstance(e, ast.Starred) for e in part.elts):
            operands = list(part.elts)
        names = [n.id for o in operands for n in ast.walk(o) if isinstance(n, ast.Name)]
        held_out = sorted({n for n in names if is_eval_name(n)})
        if held_out and any(not is_eval_name(n) for n in names):
            return held_out
    return []


def _counted_over_all(module: ModuleIndex, call: ast.Call) -> list[str]:
    """``Counter(w for s in train + test for w in s)`` or ``counter.update(...)`` inside a loop over train + test."""
    callee = module.callee(call).split(".")[-1]
    counts = callee in COUNTERS or (method(call) == "update" and (
        _built_by(module, receiver(call), tuple(COUNTERS)) or tokens(last_name(receiver(call)) or "") & _VOCAB_WORDS))
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
    needs = ("vocab", "Vocab", "Vectoriz", "Tokeniz", "fit_on_texts", "adapt", "StringLookup", "Counter", "Encoder")

    def check(self, ctx: Context) -> Iterator[Finding]:
        module = ctx.module
        for scope in _scopes(module):
            for call in module.scope_calls(scope):
                counted = _counted_over_all(module, call)
                if not counted and method(call) in _FIT and _built_by(module, receiver(call), ("Encoder",)):
                    counted = concatenated_held_out(call.args[0] if call.args else None)
                if counted:
                    yield ctx.finding(self.code, call, f"vocabulary/encoder built over the concatenated splits, "
                                      f"including {', '.join(counted)}", held_out=counted)
                    continue
                callee = module.callee(call).split(".")[-1]
                text_fit = method(call) in _FIT and _built_by(module, receiver(call), TEXT_SUFFIXES)
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


#: Fitting these on held-out data is the method, not a leak: calibration (Platt, isotonic, temperature),
#: decision thresholds, and blending/stacking meta-learners are fit on a validation split by design.
HELD_OUT_BY_DESIGN = frozenset({"calibrator", "calibration", "calibrated", "isotonic", "platt", "temperature",
                                "threshold", "thresholds", "meta", "blender", "blend", "stacker", "stack"})


class FitOnEvalData(Rule):
    code = codes.FIT_ON_EVAL_DATA
    needs = ("fit",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        for call in ctx.module.calls:
            if method(call) not in _FIT or not call.args:
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
