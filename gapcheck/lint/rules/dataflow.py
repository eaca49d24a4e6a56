"""Data flow for the leakage rules: which value a fit reads, where that value is split, and one level through
project helpers (a function that fits its argument, or returns the data it fit on, is followed into its caller).

A fit is tied to the value it was fit on, not to a name: :func:`split_after` carries the value through
assignments (``Xs = scaler.transform(X)``) and drops a name rebound to other data.
"""
from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import NamedTuple

from gapcheck.codes import Code
from gapcheck.codes import lint as codes
from gapcheck.findings import Finding
from gapcheck.lint.facts import method, receiver
from gapcheck.lint.rules import Context
from gapcheck.lint.symbols import ModuleIndex, dotted, is_eval_name, is_train_name, keyword

TRANSFORMER_SUFFIXES = ("Scaler", "Encoder", "PCA", "Normalizer", "Imputer", "Discretizer", "QuantileTransformer",
                        "PowerTransformer", "TruncatedSVD", "SelectKBest", "SelectPercentile", "Pipeline",
                        "make_pipeline", "ColumnTransformer", "FactorAnalysis", "KernelPCA", "IncrementalPCA")
TEXT_SUFFIXES = ("Vectorizer", "Tokenizer", "TextVectorization", "StringLookup")
VOCAB_FUNCTIONS = {"build_vocab_from_iterator", "build_vocab", "fit_on_texts", "train_from_iterator", "adapt"}
SPLITTERS = {"train_test_split", "random_split"}
FIT = ("fit", "fit_transform")
#: Encoders that only learn the set of categories (no statistics): fitting them on every row leaks nothing measurable.
CATEGORY_ENCODERS = ("LabelEncoder", "LabelBinarizer", "MultiLabelBinarizer", "OneHotEncoder", "OrdinalEncoder")


def scopes(module: ModuleIndex) -> list[ast.AST]:
    """The module body and every function (each a scope whose statements run in order)."""
    if "scopes" not in module.cache:
        module.cache["scopes"] = [module.tree, *(n for n in module.functions.values()),
                                  *(n for n in module.nested_functions)]
    return module.cache["scopes"]  # type: ignore[no-any-return]


def built_by(module: ModuleIndex, node: ast.AST | None, suffixes: tuple[str, ...]) -> bool:
    """``node`` is ``StandardScaler()`` itself or a name bound to one."""
    if isinstance(node, ast.Call):
        return module.callee(node).split(".")[-1].endswith(suffixes)
    return any(c.split(".")[-1].endswith(suffixes) for c in module.constructors(dotted(node)))


def rows_sliced(node: ast.Subscript) -> bool:
    """``X[:800]``, ``X[800:, :]`` or ``X[train_idx]`` select rows; ``X[:, 0]`` does not."""
    index = node.slice
    if isinstance(index, ast.Tuple) and index.elts:
        index = index.elts[0]
    if isinstance(index, ast.Slice):
        return index.lower is not None or index.upper is not None
    return isinstance(index, ast.Name) and (is_train_name(index.id) or is_eval_name(index.id))


def split_after(module: ModuleIndex, scope: ast.AST, names: set[str], line: int) -> ast.expr | None:
    """The first place after ``line`` in ``scope`` where the value ``names`` hold is split into train/held-out parts.

    The value is followed, not the names: ``Xs = scaler.transform(X)`` carries it to ``Xs``, and
    ``X = np.load("other.npy")`` rebinds ``X`` to other data, so a later split of ``X`` is not this one.
    """
    holding = set(names)
    slices: dict[str, list[tuple[ast.Subscript, bool]]] = {}  # name -> its row slices (and whether it has a start)
    for node in _after(module, scope, holding, line):
        if isinstance(node, ast.Call):
            callee = module.callee(node).split(".")[-1]
            args = [*node.args, *(k.value for k in node.keywords if k.arg in ("dataset", "arrays"))]
            splits = callee in SPLITTERS or (callee == "split" and method(node) == "split"
                                             and not isinstance(receiver(node), ast.Constant))
            if splits and any(root(a) in holding for a in args):
                return node
            if callee == "Subset" and node.args and root(node.args[0]) in holding:
                return node
        elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in holding
              and isinstance(node.ctx, ast.Load) and rows_sliced(node)):
            index = node.slice.elts[0] if isinstance(node.slice, ast.Tuple) else node.slice
            if not isinstance(index, ast.Slice):
                return node  # X[train_idx], X[test_idx]
            seen = slices.setdefault(node.value.id, [])
            seen.append((node, index.lower is not None))
            if len(seen) >= 2 and any(starts for _, starts in seen):
                return seen[0][0]  # X[:n] and X[n:]: two parts; X[:50] alone is a sample, not a split
    return None


def _after(module: ModuleIndex, scope: ast.AST, holding: set[str], line: int) -> Iterator[ast.AST]:
    """The nodes of ``scope`` after ``line`` in source order, with ``holding`` (the names that hold the value)
    updated at each assignment before the nodes after it are seen."""
    for node in module.walk(scope):
        if getattr(node, "lineno", 0) <= line:
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            _carry(node, holding)
        else:
            yield node


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


def root(node: ast.AST | None) -> str | None:
    """The variable an argument reads: ``X``, ``df`` in ``df[cols]`` / ``df.values`` / ``df[cols].to_numpy()``."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Subscript) and not rows_sliced(node) or isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args:
            node = node.func.value  # df[cols].to_numpy(), X.copy()
        else:
            return None


def assigned_name(module: ModuleIndex, call: ast.Call) -> str | None:
    parent = module.parent(call)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        return parent.targets[0].id
    return None


def assigned_columns(module: ModuleIndex, call: ast.Call) -> set[str]:
    """``df[cols] = scaler.fit_transform(df[cols])``: the frame now holds the fitted values."""
    parent = module.parent(call)
    if isinstance(parent, ast.Assign):
        return {name for t in parent.targets if (name := root(t)) is not None}
    return set()


def fit_data(module: ModuleIndex, call: ast.Call) -> str | None:
    """The variable a scaler/PCA/imputer/pipeline (not a category encoder) is fit on, unless it is training data."""
    data = root(call.args[0]) if method(call) in FIT and call.args else None
    if data is None or is_train_name(data):
        return None
    fitted = receiver(call)
    if not built_by(module, fitted, TRANSFORMER_SUFFIXES) or built_by(module, fitted, CATEGORY_ENCODERS):
        return None
    if _learns_no_statistics(module, fitted):
        return None
    return data


#: Composites, and where each step sits in their arguments: (name, step[, columns]) tuples or the steps themselves.
_COMPOSITES = {"ColumnTransformer": 1, "Pipeline": 1, "make_column_transformer": 0, "make_pipeline": None}
_STATELESS = ("FunctionTransformer",)


def _learns_no_statistics(module: ModuleIndex, fitted: ast.AST | None) -> bool:
    """A pipeline / column transformer whose every step is a category encoder, a ``FunctionTransformer`` or
    ``"passthrough"``/``"drop"`` (scikit-learn's gradient boosting encodes categories and validates the rest):
    fitting it on every row learns category sets, not statistics. A step gapcheck cannot identify counts as fitting."""
    built = [fitted] if isinstance(fitted, ast.Call) else module.bindings.get(dotted(fitted) or "", [])
    for value in built:
        if not isinstance(value, ast.Call):
            continue
        kind = module.callee(value).split(".")[-1]
        if kind not in _COMPOSITES:
            continue
        position = _COMPOSITES[kind]
        sources = value.args if kind == "make_column_transformer" else value.args[:1]
        steps = list(value.args) if position is None else [
            item.elts[position] for arg in sources for item in (arg.elts if isinstance(arg, ast.List) else [arg])
            if isinstance(item, ast.Tuple) and len(item.elts) > position]
        return bool(steps) and all(_stateless_step(module, step) for step in steps)
    return False


def _stateless_step(module: ModuleIndex, step: ast.AST) -> bool:
    if isinstance(step, ast.Constant):
        return step.value in ("passthrough", "drop")
    names = {module.callee(step)} if isinstance(step, ast.Call) else module.constructors(dotted(step))
    return bool(names) and all(n.split(".")[-1] in (*CATEGORY_ENCODERS, *_STATELESS) for n in names)



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




# --- one level through project helpers ------------------------------------------------------------
class HelperFit(NamedTuple):
    """A fit (GC101) or vocabulary build (GC103) inside a function, as its callers see it."""

    code: Code
    call: ast.Call
    param: str | None  # the parameter it reads (None: no parameter)
    returned: tuple[int, ...] | None  # positions of the returned tuple that hold the fitted data; (): the whole value
    concat_only: bool  # a token Counter: only a concatenation of splits at the call site is a finding


def _vocab_data(module: ModuleIndex, call: ast.Call) -> tuple[set[str], bool] | None:
    """The variables a vocabulary build reads (and whether it is only a token counter), or None."""
    callee = module.callee(call).split(".")[-1]
    counter = callee in COUNTERS or (method(call) == "update" and built_by(module, receiver(call), tuple(COUNTERS)))
    if callee in VOCAB_FUNCTIONS or (method(call) in FIT and built_by(module, receiver(call), TEXT_SUFFIXES)):
        source = call.args[0] if call.args else keyword(call, "iterator")
    elif counter:
        source = call.args[0] if call.args else None
    else:
        return None
    if source is None:
        return None
    names = {n.id for n in ast.walk(source) if isinstance(n, ast.Name)}
    for parent in module.ancestors(call):  # counter.update(s) inside `for s in texts`
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            break
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)):
            names |= {n.id for n in ast.walk(parent.iter) if isinstance(n, ast.Name)}
    names = {n for n in names if not is_train_name(n)}
    return (names, counter) if names else None


def helper_fits(module: ModuleIndex, function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[HelperFit]:
    """The fits in ``function`` that read one of its parameters or whose data it returns (memoised)."""
    key = ("helper_fits", id(function))
    if key in module.cache:
        return module.cache[key]  # type: ignore[no-any-return]
    arguments = function.args
    params = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
    found: list[HelperFit] = []
    for call in module.scope_calls(function):
        data = fit_data(module, call)
        vocab = _vocab_data(module, call) if data is None else None
        if data is None and vocab is None:
            continue
        names = {data} if data is not None else vocab[0]  # type: ignore[index]
        code = codes.FIT_BEFORE_SPLIT if data is not None else codes.VOCAB_FROM_ALL_SPLITS
        param = next((n for n in sorted(names & params) if not _rebound_before(module, function, n, call.lineno)), None)
        holding = set(names) | ({out} if (out := assigned_name(module, call)) else set()) | assigned_columns(module, call)
        returned = _returned_itself(module, call) if data is not None else None
        if returned is None:
            returned = _returned(module, function, holding, call.lineno)
        if param is not None or returned is not None:
            found.append(HelperFit(code, call, param, returned, vocab is not None and vocab[1]))
    module.cache[key] = found
    return found


def _rebound_before(module: ModuleIndex, function: ast.AST, name: str, line: int) -> bool:
    """The parameter ``name`` is assigned other data before ``line`` (it no longer holds the caller's argument)."""
    for node in module.walk(function):
        if getattr(node, "lineno", line) >= line:
            continue
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return True
    return False


def _returned(module: ModuleIndex, function: ast.AST, holding: set[str], line: int) -> tuple[int, ...] | None:
    """Which parts of ``function``'s first return after ``line`` hold the fitted data (followed through assignments)."""
    holding = set(holding)
    for node in _after(module, function, holding, line):
        if isinstance(node, ast.Return) and node.value is not None:
            parts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            held = tuple(i for i, part in enumerate(parts) if _reads(part, holding))
            if held:
                return held if isinstance(node.value, ast.Tuple) else ()
    return None


def _returned_itself(module: ModuleIndex, call: ast.Call) -> tuple[int, ...] | None:
    """``return scaler.fit_transform(X)``: the fitted data is the return value (or part of the returned tuple)."""
    chain: list[ast.AST] = [call]
    for parent in module.ancestors(call):
        if isinstance(parent, ast.Return):
            if isinstance(parent.value, ast.Tuple) and len(chain) >= 2:
                element = chain[-2]  # the returned tuple's element that holds the call
                return tuple(i for i, e in enumerate(parent.value.elts) if e is element)
            return ()
        if isinstance(parent, (ast.stmt, ast.Lambda, ast.comprehension)):
            return None
        chain.append(parent)
    return None


def _reads(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _argument(function: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, param: str,
              method_call: bool) -> ast.expr | None:
    """The expression ``call`` passes for ``param`` (None when it cannot be told: ``*args`` before it)."""
    given = keyword(call, param)
    if given is not None:
        return given
    positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    if param not in positional:
        return None
    index = positional.index(param) - (1 if method_call and positional[:1] in (["self"], ["cls"]) else 0)
    if index < 0 or any(isinstance(a, ast.Starred) for a in call.args[:index + 1]):
        return None
    return call.args[index] if index < len(call.args) else None


def _receivers(module: ModuleIndex, call: ast.Call, returned: tuple[int, ...]) -> set[str]:
    """The names ``call``'s fitted return value is assigned to (``X = load()``, ``X, y = load()``)."""
    parent = module.parent(call)
    if not isinstance(parent, ast.Assign) or len(parent.targets) != 1:
        return set()
    target = parent.targets[0]
    if isinstance(target, ast.Tuple):
        chosen = [target.elts[i] for i in returned if i < len(target.elts)] if returned else []
    else:
        chosen = [target]
    return {name for t in chosen if (name := root(t)) is not None}


def through_helpers(ctx: Context, scope: ast.AST, code: Code) -> Iterator[Finding]:
    """Findings of ``code`` at calls in ``scope`` of project functions that fit the data they are given, or return
    the data they fit on, when the caller then splits that data (or, for a vocabulary, passes concatenated splits)."""
    module = ctx.module
    for call in module.scope_calls(scope):
        if not _names_a_function(module, call) or not _may_matter(module, call, _split_names(module, scope), code) \
                or not ctx.program.imported_mentions(module, call, _FITS):
            continue  # resolving a call can parse other modules: only calls whose data is split, of helpers that fit
        resolved = ctx.program.resolve(module, call, within=module.enclosing_function(call), objects=False)
        if resolved is None or resolved[1] is scope:
            continue
        where, function = resolved
        fits = [f for f in helper_fits(where, function) if f.code is code]
        for fit in fits:
            finding = _helper_finding(ctx, scope, call, where, function, fit)
            if finding is not None:
                yield finding
                break


def _split_names(module: ModuleIndex, scope: ast.AST) -> frozenset[str]:
    """The names whose value may be split in ``scope`` (split, ``Subset``, row-sliced), and every name assigned into
    them, transitively (``Xs = X.values; split(Xs)``: X too). A cheap superset of what :func:`split_after` finds."""
    key = ("split_names", id(scope))
    if key in module.cache:
        return module.cache[key]  # type: ignore[no-any-return]
    found: set[str] = set()
    assigns: list[ast.Assign | ast.AnnAssign] = []
    for node in module.walk(scope):
        if isinstance(node, ast.Call):
            func = node.func  # the last name is enough here (no qualified name: this runs on every call)
            last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if last in SPLITTERS or last == "Subset" or last == "split":
                found |= {name for a in (*node.args, *(k.value for k in node.keywords)) if (name := root(a))}
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and rows_sliced(node):
            found.add(node.value.id)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            assigns.append(node)
    if found:  # names that flow into a split name, read only now (most scopes split nothing)
        edges = [(_names(*(node.targets if isinstance(node, ast.Assign) else [node.target])), _names(node.value))
                 for node in assigns]
        grew = True
        while grew:
            grew = False
            for stored, read in edges:
                if stored & found and not read <= found:
                    found |= read
                    grew = True
    module.cache[key] = frozenset(found)
    return module.cache[key]  # type: ignore[no-any-return]


def _names(*nodes: ast.AST | None) -> set[str]:
    return {n.id for node in nodes if node is not None for n in ast.walk(node) if isinstance(n, ast.Name)}


#: Text a module holding a fitting helper contains (a fit, a vocabulary build or a token counter).
_FITS = ("fit", "vocab", "Vocab", "Counter", "Dictionary", "FreqDist", "adapt")
_CONCATENATIONS = (ast.BinOp, ast.Call, ast.List, ast.Tuple, ast.GeneratorExp, ast.ListComp)


def _names_a_function(module: ModuleIndex, call: ast.Call) -> bool:
    """``helper(...)``, ``self.helper(...)`` or ``module.helper(...)`` with a name this module defines or imports: a
    cheap test before anything is walked (``x.view(...)`` on a local value is never a project helper here)."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in module.functions or func.id in module.imports or bool(module.nested_named(func.id))
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and (
        func.value.id == "self" or func.value.id in module.imports)


def _may_matter(module: ModuleIndex, call: ast.Call, candidates: frozenset[str], code: Code) -> bool:
    """Whether a helper called here could lead to a finding: it is given or assigns data that is split later, or
    (a vocabulary) it is given a concatenation of splits."""
    if code is codes.VOCAB_FROM_ALL_SPLITS and any(
            isinstance(a, _CONCATENATIONS) and concatenated_held_out(a) for a in call.args):
        return True
    if not candidates:
        return False
    if any(root(a) in candidates for a in (*call.args, *(k.value for k in call.keywords))):
        return True
    parent = module.parent(call)
    return isinstance(parent, ast.Assign) and any(
        isinstance(n, ast.Name) and n.id in candidates for t in parent.targets for n in ast.walk(t))


def _helper_finding(ctx: Context, scope: ast.AST, call: ast.Call, where: ModuleIndex,
                    function: ast.FunctionDef | ast.AsyncFunctionDef, fit: HelperFit) -> Finding | None:
    module = ctx.module
    place = f"line {fit.call.lineno}" if where is module else f"{where.source.display}:{fit.call.lineno}"
    what = "fits a transformer on" if fit.code is codes.FIT_BEFORE_SPLIT else "builds a vocabulary from"
    if fit.param is not None:
        argument = _argument(function, call, fit.param, isinstance(call.func, ast.Attribute)
                             or function.name == "__init__")
        held_out = concatenated_held_out(argument) if fit.code is codes.VOCAB_FROM_ALL_SPLITS else []
        if held_out:
            return ctx.finding(fit.code, call, f"{function.name}() {what} its argument ({place}), here the "
                               f"concatenated splits including {', '.join(held_out)}", held_out=held_out)
        name = root(argument)
        split = None if name is None or is_train_name(name) or fit.concat_only else \
            split_after(module, scope, {name}, call.lineno)
        if split is not None:
            return ctx.finding(fit.code, call, f"{function.name}() {what} its argument '{name}' ({place}), and "
                               f"'{name}' is split afterwards (line {split.lineno}): validation/test rows are in it",
                               data=name, split_line=split.lineno)
    if fit.returned is not None and not fit.concat_only:
        names = _receivers(module, call, fit.returned)
        split = split_after(module, scope, names, call.lineno) if names else None
        if split is not None:
            return ctx.finding(fit.code, call, f"{function.name}() {what} the data it returns ({place}), and that "
                               f"data is split afterwards (line {split.lineno}): validation/test rows are in it",
                               data=sorted(names), split_line=split.lineno)
    return None
