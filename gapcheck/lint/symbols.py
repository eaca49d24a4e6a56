"""The small symbol and flow layer the rules stand on.

:class:`ModuleIndex` is one parsed module: what its names import (``DataLoader`` ->
``torch.utils.data.DataLoader``), its functions and methods, and what each variable is bound to
(flow-insensitive: ``model = Net().to(device)`` makes ``model`` a ``Net``). :class:`Program` loads
modules on demand and resolves a call to the function it runs, in the same module or across
modules where the import resolves to a file next to the caller or in its package. :func:`flow`
walks statements in source order and steps into the functions they call, so a rule looking at an
epoch loop also sees what ``train_one_epoch()`` does.

Only what a reader of the code would conclude is modelled; anything dynamic (``getattr``, calls
through containers) is simply not followed, which keeps the rules quiet rather than clever.
"""
from __future__ import annotations

import ast
import os
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from gapcheck.errors import InputError
from gapcheck.lint.source import SourceFile, read_regular, read_source

#: How many calls deep :func:`flow` follows (an epoch loop -> train_one_epoch -> a step helper).
MAX_DEPTH = 4
#: Method calls that return the receiver (or an equivalent module), looked through when binding.
_PASS_THROUGH = {"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "train", "eval", "requires_grad_",
                 "share_memory", "to_empty"}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_LEAVES = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)


def tokens(name: str) -> frozenset[str]:
    """Lower-case words of an identifier: ``valLoader`` / ``val_loader`` -> {"val", "loader"}."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return frozenset(part for part in re.split(r"[^A-Za-z0-9]+|_", spaced.lower()) if part)


EVAL_WORDS = frozenset({"val", "valid", "validation", "validate", "test", "testing", "eval", "evaluation",
                        "evaluate", "holdout", "dev"})
TRAIN_WORDS = frozenset({"train", "training", "trn", "fit"})


def is_eval_name(name: str | None) -> bool:
    """A name that means validation/test data and not training data (``val_loader``, ``X_test``)."""
    if not name:
        return False
    words = tokens(name)
    return bool(words & EVAL_WORDS) and not words & TRAIN_WORDS


def is_train_name(name: str | None) -> bool:
    if not name:
        return False
    words = tokens(name)
    return bool(words & TRAIN_WORDS) and not words & EVAL_WORDS


def dotted(node: ast.AST | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain (``self.model`` included), else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def last_name(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def keyword(call: ast.Call, name: str) -> ast.expr | None:
    for item in call.keywords:
        if item.arg == name:
            return item.value
    return None


def literal(node: ast.AST | None) -> object:
    """The value of a literal (``True``, ``0``, ``"cuda"``), or the ``...`` sentinel when not literal."""
    if node is None:
        return ...
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return ...


def ordered(node: ast.AST, *, into_scopes: bool = False) -> Iterator[ast.AST]:
    """Every node under ``node`` in source order (pre-order), not entering nested defs unless asked."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        children = [c for c in ast.iter_child_nodes(current) if into_scopes or not isinstance(c, _SCOPES)]
        stack.extend(reversed(children))


def calls_in(node: ast.AST) -> Iterator[ast.Call]:
    """Calls under ``node`` in source order, not inside nested functions or classes."""
    for child in ordered(node):
        if isinstance(child, ast.Call):
            yield child


def all_calls(node: ast.AST) -> Iterator[ast.Call]:
    """Every call under ``node``, nested functions and classes included (order not guaranteed)."""
    for child in ast.walk(node):
        if isinstance(child, ast.Call):
            yield child


@dataclass
class ModuleIndex:
    """One module, indexed for the rules (see the module docstring)."""

    source: SourceFile
    imports: dict[str, str] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    bindings: dict[str, list[ast.expr]] = field(default_factory=dict)
    owner: dict[int, str] = field(default_factory=dict)  # id(function node) -> its class name, for self.method()
    parents: dict[int, ast.AST] = field(default_factory=dict)
    calls: list[ast.Call] = field(default_factory=list)  # every call, nested scopes included
    loops: list[ast.For | ast.AsyncFor | ast.While] = field(default_factory=list)
    nested_functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=list)  # not in functions
    cache: dict[Any, Any] = field(default_factory=dict)  # per-module memo for rules (events of a loop, callers...)
    _callees: dict[int, str] = field(default_factory=dict)
    _resolved: dict[int, Any] = field(default_factory=dict)  # id(call) -> what Program.resolve found
    _enclosing: dict[int, Any] = field(default_factory=dict)  # id(node) -> its enclosing function
    _order: list[ast.AST] = field(default_factory=list)  # every node, pre-order (source order)
    _position: dict[int, int] = field(default_factory=dict)  # id(node) -> index in _order
    _end: dict[int, int] = field(default_factory=dict)  # id(node) -> end of its subtree in _order

    @property
    def tree(self) -> ast.Module:
        return self.source.tree

    @classmethod
    def build(cls, source: SourceFile) -> ModuleIndex:
        index = cls(source=source)
        # One depth-first pass: parents, the pre-order array behind walk(), and what the rules index.
        # Context/operator leaves (Load, Store, Add, ...) are shared singletons nobody asks about: skipped.
        parents, order, position, end = index.parents, index._order, index._position, index._end
        stack: list[ast.AST | int] = [source.tree]
        while stack:
            node = stack.pop()
            if type(node) is int:  # the end marker of the node at order[node]
                end[id(order[node])] = len(order)
                continue
            position[id(node)] = len(order)
            stack.append(len(order))
            order.append(node)  # type: ignore[arg-type]
            kind = type(node)
            children: list[ast.AST] = []
            for name in _child_fields(kind):
                value = getattr(node, name, None)
                if type(value) is list:
                    children.extend(item for item in value if isinstance(item, ast.AST) and type(item) not in _LEAF_TYPES)
                elif isinstance(value, ast.AST) and type(value) not in _LEAF_TYPES:
                    children.append(value)
            node_id = node  # the parent of each child
            for child in reversed(children):
                parents[id(child)] = node_id  # type: ignore[assignment]
                stack.append(child)
            if kind is ast.Call:
                index.calls.append(node)  # type: ignore[arg-type]
            elif kind in _LOOP_TYPES:
                index.loops.append(node)  # type: ignore[arg-type]
            elif kind in _INDEXED:
                index._index(node)  # type: ignore[arg-type]
        index._index_functions()
        return index

    def _index(self, node: ast.stmt) -> None:
        """Imports, classes (their methods and owners) and assignments (what each name is bound to)."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                self.imports[local] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name != "*":
                    joiner = "" if base.endswith(".") or not base else "."
                    self.imports[alias.asname or alias.name] = f"{base}{joiner}{alias.name}"
        elif isinstance(node, ast.ClassDef):
            self.classes.setdefault(node.name, node)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.functions.setdefault(f"{node.name}.{item.name}", item)
                    self.owner[id(item)] = node.name
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                key = dotted(target)
                if key is not None:
                    self.bindings.setdefault(key, []).append(node.value)
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    for element, value in zip(target.elts, node.value.elts, strict=False):
                        if dotted(element) is not None:
                            self.bindings.setdefault(dotted(element) or "", []).append(value)

    def _index_functions(self) -> None:
        """Module functions (those under a top-level ``if __name__ == "__main__":`` too), then every other def."""
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
        for node in _top_level(self.tree.body):  # defs under `if __name__ == "__main__":` run at module level too
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.setdefault(node.name, node)
        known = {id(f) for f in self.functions.values()}
        self.nested_functions = [n for n in self._order if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                                 and id(n) not in known]

    def walk(self, root: ast.AST) -> Iterator[ast.AST]:
        """:func:`ordered` over the precomputed pre-order array (no re-traversal): nested scopes skipped."""
        start = self._position.get(id(root))
        if start is None:
            yield from ordered(root)
            return
        order, end = self._order, self._end
        yield root
        index, stop = start + 1, end[id(root)]
        while index < stop:
            node = order[index]
            if isinstance(node, _SCOPES):
                index = end[id(node)]
                continue
            yield node
            index += 1

    def nested_named(self, name: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        """Nested functions called ``name`` (a dict built once, not a scan per call)."""
        key = ("nested_named",)
        if key not in self.cache:
            by_name: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
            for function in self.nested_functions:
                by_name.setdefault(function.name, []).append(function)
            self.cache[key] = by_name
        return self.cache[key].get(name, [])  # type: ignore[no-any-return]

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(id(node))

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        current = self.parent(node)
        while current is not None:
            yield current
            current = self.parent(current)

    def enclosing_function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        key = id(node)
        if key in self._enclosing:
            return self._enclosing[key]  # type: ignore[no-any-return]
        found = None
        for parent in self.ancestors(node):
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found = parent
                break
        if key in self._position:  # only nodes of this tree (never a temporary node): ids stay unique
            self._enclosing[key] = found
        return found

    def qualname(self, node: ast.AST | None) -> str | None:
        """The imported name an expression refers to (``nn.BatchNorm1d`` -> ``torch.nn.BatchNorm1d``), else its dotted text."""
        text = dotted(node)
        if text is None:
            return None
        head, _, rest = text.partition(".")
        origin = self.imports.get(head)
        if origin is None:
            return text
        return f"{origin}.{rest}" if rest else origin

    def callee(self, call: ast.Call) -> str:
        """The qualified name of what ``call`` calls ('' when it is not a plain name chain)."""
        key = id(call)
        name = self._callees.get(key)
        if name is None:
            name = self._callees[key] = self.qualname(call.func) or ""
        return name

    def scope_calls(self, scope: ast.AST) -> list[ast.Call]:
        """:func:`calls_in` of ``scope``, memoised."""
        key = ("scope_calls", id(scope))
        if key not in self.cache:
            self.cache[key] = [n for n in self.walk(scope) if isinstance(n, ast.Call)]
        return self.cache[key]  # type: ignore[no-any-return]

    def constructors(self, name: str | None, _seen: frozenset[str] = frozenset()) -> set[str]:
        """Qualified names of the calls ``name`` is bound to (looking through ``.to()``, ``.cuda()`` and aliases)."""
        if not name or name in _seen:
            return set()
        key = ("constructors", name)
        if not _seen and key in self.cache:  # rules ask about the same few names (model, loader) again and again
            return set(self.cache[key])
        found: set[str] = set()
        for value in self.bindings.get(name, ()):
            base = unwrap(value)
            if isinstance(base, ast.Call):
                found.add(self.callee(base))
            elif dotted(base) is not None:
                found |= self.constructors(dotted(base), _seen | {name})
        if not _seen:
            self.cache[key] = frozenset(found)
        return found

    def bound_to(self, node: ast.AST | None, *suffixes: str) -> bool:
        """Whether the variable ``node`` names was built by a call whose name ends with one of ``suffixes``."""
        return any(ctor.split(".")[-1] in suffixes for ctor in self.constructors(dotted(node)))

    def uses_module(self, prefix: str) -> bool:
        return any(origin == prefix or origin.startswith(prefix + ".") for origin in self.imports.values())


#: Concrete leaf node types (Load, Store, Add, ...): shared singletons nobody asks about.
_LEAF_TYPES = frozenset(t for base in _LEAVES for t in base.__subclasses__())
_LOOP_TYPES = frozenset({ast.For, ast.AsyncFor, ast.While})
_INDEXED = frozenset({ast.Import, ast.ImportFrom, ast.ClassDef, ast.Assign, ast.AnnAssign})
#: Fields that never hold a node (names, numbers, flags): not looked at when indexing.
_SCALAR_FIELDS = frozenset({"id", "attr", "name", "arg", "n", "s", "level", "module", "type_comment", "is_async",
                            "kind", "conversion", "ctx", "op", "asname", "lineno", "col_offset"})
_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(kind: type) -> tuple[str, ...]:
    found = _FIELDS.get(kind)
    if found is None:
        found = _FIELDS[kind] = tuple(f for f in kind._fields if f not in _SCALAR_FIELDS)  # type: ignore[attr-defined]
    return found


def branches(module: ModuleIndex, node: ast.AST) -> dict[int, str]:
    """id(if statement) -> "body"/"orelse"/"test": the branch of every enclosing ``if`` that ``node`` is on."""
    found: dict[int, str] = {}
    child = node
    for parent in module.ancestors(node):
        if isinstance(parent, ast.If):
            found[id(parent)] = "body" if any(c is child for c in parent.body) else \
                "orelse" if any(c is child for c in parent.orelse) else "test"
        child = parent
    return found


def on_two_branches(left: dict[int, str], right: dict[int, str]) -> bool:
    """Whether two :func:`branches` lie on the two sides of one ``if``/``else`` (never both in one pass)."""
    return any(key in right and right[key] != side and "test" not in (side, right[key]) for key, side in left.items())


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements that run at module level: the body, and the bodies of top-level if/with/try blocks."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.With, ast.Try)):
            for part in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", []),
                         *(h.body for h in getattr(node, "handlers", []))):
                yield from _top_level(part)


def unwrap(value: ast.AST) -> ast.AST:
    """``Net().to(device).train()`` -> ``Net()``: drop pass-through method calls."""
    while (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
           and value.func.attr in _PASS_THROUGH and isinstance(value.func.value, (ast.Call, ast.Name, ast.Attribute))):
        value = value.func.value
    return value


#: What a call resolves to: the module and the function it runs.
Resolved = tuple["ModuleIndex", ast.FunctionDef | ast.AsyncFunctionDef]

#: Imported modules larger than this are not followed (generated or vendored code, not a training loop).
MAX_FOLLOW_BYTES = 512 * 1024


class Program:
    """Modules loaded on demand (each parsed once per run) and calls resolved between them.

    Calls are followed into modules under ``roots`` only (the folders being linted, and the folder of
    each linted file): the project's own code, never an installed library's internals.
    """

    #: Parsed modules kept for import resolution (least recently used dropped first): memory stays flat
    #: however many files one worker lints, and a module imported again later is simply parsed again.
    MAX_MODULES = 128

    def __init__(self, roots: Iterable[Path] = ()) -> None:
        self._modules: OrderedDict[Path, ModuleIndex | None] = OrderedDict()
        self.roots = tuple(sorted({Path(os.path.realpath(r)) for r in roots}))
        self._found: dict[tuple[str, Any], Any] = {}  # memo of module lookups (the file system is asked once)

    def clear_caches(self) -> None:
        """Forget every module and lookup (after an analysis was interrupted half-way)."""
        self._modules.clear()
        self._found.clear()

    def within_roots(self, path: Path) -> bool:
        key = ("within", path)
        if key not in self._found:
            resolved = Path(os.path.realpath(path))  # never raises on a link loop (Path.resolve() does)
            try:
                size = resolved.stat().st_size
            except OSError:  # vanished or a dangling link: not followed
                size = MAX_FOLLOW_BYTES + 1
            self._found[key] = any(resolved.is_relative_to(root) for root in self.roots) and size <= MAX_FOLLOW_BYTES
        return bool(self._found[key])

    def add(self, source: SourceFile) -> ModuleIndex:
        index = ModuleIndex.build(source)
        self._remember(Path(os.path.realpath(source.path)), index)
        return index

    def load(self, path: Path) -> ModuleIndex | None:
        key = Path(os.path.realpath(path))
        if key in self._modules:
            self._modules.move_to_end(key)
            return self._modules[key]
        try:
            index: ModuleIndex | None = ModuleIndex.build(read_source(path, str(path)))
        except InputError:
            index = None  # an import we cannot read is simply not followed
        self._remember(key, index)
        return index

    def _remember(self, key: Path, index: ModuleIndex | None) -> None:
        self._modules[key] = index
        self._modules.move_to_end(key)
        while len(self._modules) > self.MAX_MODULES:
            self._modules.popitem(last=False)

    def resolve(self, module: ModuleIndex, call: ast.Call, within: ast.AST | None = None, *,
                objects: bool = True) -> Resolved | None:
        """The function ``call`` runs, when a reader could tell: a local function, ``self.method()``, an import,
        or (``objects``) ``__call__``/a method of an object built from a project class. Memoised per call node
        (``within`` is always the call's enclosing function)."""
        if not objects:
            return self._resolve(module, call, within, objects)
        key = id(call)
        if key not in module._resolved:
            module._resolved[key] = self._resolve(module, call, within, objects)
        return module._resolved[key]

    def _resolve(self, module: ModuleIndex, call: ast.Call, within: ast.AST | None, objects: bool) -> Resolved | None:
        func = call.func
        if isinstance(func, ast.Name):
            if func.id in module.functions and "." not in func.id:
                return module, module.functions[func.id]
            for nested in module.nested_named(func.id):  # def run_validate(...) inside validate(), called there
                if within is not None and module.enclosing_function(nested) is within:
                    return module, nested
            if objects and func.id in module.classes:  # Loop(kind) runs Loop.__init__ (seeds set there count)
                init = module.functions.get(f"{func.id}.__init__")
                return (module, init) if init is not None else None
            origin = module.imports.get(func.id)
            if origin:
                return self._imported(module, origin, objects)
            return self._object_call(module, func) if objects else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id == "self" and within is not None:
                owner = module.owner.get(id(within))
                target = module.functions.get(f"{owner}.{func.attr}") if owner else None
                if target is not None:
                    return module, target
            origin = module.imports.get(func.value.id)
            if origin:
                return self._imported(module, f"{origin}.{func.attr}")
        return self._object_call(module, func) if objects else None

    def _object_call(self, module: ModuleIndex, func: ast.expr) -> Resolved | None:
        """A call on an object built from a project class, one level: ``loss_scaler(loss, opt)`` runs
        ``NativeScaler.__call__``, ``trainer.fit_step(b)`` runs ``Trainer.fit_step`` (the class in this module
        or imported from a module of the project)."""
        if isinstance(func, (ast.Name, ast.Attribute)) and dotted(func) in module.bindings:
            holder, method = dotted(func), "__call__"
        elif isinstance(func, ast.Attribute) and dotted(func.value) in module.bindings:
            holder, method = dotted(func.value), func.attr
        else:
            return None
        for constructor in sorted(module.constructors(holder)):
            found = self.method_of(module, constructor, method)
            if found is not None:
                return found
        return None

    def method_of(self, module: ModuleIndex, constructor: str,
                  method: str) -> tuple[ModuleIndex, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        """``Class.method`` for a class named as ``module`` names it (defined there or imported from the project)."""
        if constructor in module.classes:
            target = module.functions.get(f"{constructor}.{method}")
            return (module, target) if target is not None else None
        module_name, _, name = constructor.rpartition(".")  # qualified through the imports: util.misc.NativeScaler
        path = self._find_module(module.source.path, module_name) if module_name else None
        if path is None or not self.within_roots(path):
            return None
        target_module = self.load(path)
        if target_module is None or name not in target_module.classes:
            return None
        function = target_module.functions.get(f"{name}.{method}")
        return (target_module, function) if function is not None else None

    def imported_mentions(self, module: ModuleIndex, call: ast.Call, words: tuple[str, ...]) -> bool:
        """For a call of a name imported from another file of the project (``load()``, ``prep.load()``): whether
        that file's text holds one of ``words`` — read, not parsed, once per file — so a rule can skip parsing
        modules that cannot matter to it. True for any other call (resolving it parses nothing)."""
        func = call.func
        if isinstance(func, ast.Name) and func.id in module.imports and func.id not in module.functions:
            origin = module.imports[func.id]
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in module.imports:
            origin = f"{module.imports[func.value.id]}.{func.attr}"
        else:
            return True
        module_name = origin.rpartition(".")[0]
        path = self._find_module(module.source.path, module_name) if module_name or origin.startswith(".") else None
        if path is None or not self.within_roots(path):
            return False  # not project code: never resolved
        key = ("mentions", (path, words))
        if key not in self._found:
            try:
                text = read_regular(path, str(path))
            except InputError:
                text = b""
            self._found[key] = any(word.encode() in text for word in words)
        return bool(self._found[key])

    def _imported(self, module: ModuleIndex, origin: str, objects: bool = False) -> Resolved | None:
        module_name, _, attr = origin.rpartition(".")
        if not module_name and not origin.startswith("."):
            return None
        path = self._find_module(module.source.path, module_name)
        if path is None or not self.within_roots(path):
            return None
        target = self.load(path)
        if target is None:
            return None
        function = target.functions.get(attr)
        if function is None and objects and attr in target.classes:
            function = target.functions.get(f"{attr}.__init__")  # a project class built: its __init__ runs
        return (target, function) if function is not None else None

    def _find_module(self, importer: Path, name: str) -> Path | None:
        key = ("module", (importer.parent, name))
        if key not in self._found:
            self._found[key] = self._search_module(importer, name)
        return self._found[key]  # type: ignore[no-any-return]

    def _search_module(self, importer: Path, name: str) -> Path | None:
        level = len(name) - len(name.lstrip("."))
        parts = [p for p in name.lstrip(".").split(".") if p]
        if level:
            base = importer.parent
            for _ in range(level - 1):
                base = base.parent
            candidates = [base]
        else:
            candidates = [importer.parent, _package_root(importer.parent)]
        for base in candidates:
            stem = base.joinpath(*parts) if parts else base
            for candidate in (stem.with_suffix(".py") if parts else None, stem / "__init__.py"):
                if candidate is not None and candidate.is_file():
                    return candidate
        return None


def _package_root(folder: Path) -> Path:
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        folder = folder.parent
    return folder


class Step(NamedTuple):
    """One node met by :func:`flow`: the module it belongs to, and the call in the linted code that led there.

    A named tuple, not a dataclass: flow makes one per node met (millions on a large repository)."""

    module: ModuleIndex
    node: ast.AST
    via: ast.Call | None  # the outermost call in the starting code (None for the code itself)


def flow(program: Program, module: ModuleIndex, roots: Iterable[ast.AST], *,
         depth: int = MAX_DEPTH, only: tuple[type, ...] | None = None) -> Iterator[Step]:
    """Nodes of ``roots`` in source order, stepping into each resolved call right after the call node
    (``only``: yield just nodes of these types; calls are followed all the same)."""
    yield from _flow(program, module, list(roots), depth, None, frozenset(), only)


def _flow(program: Program, module: ModuleIndex, roots: list[ast.AST], depth: int, via: ast.Call | None,
          active: frozenset[int], only: tuple[type, ...] | None = None) -> Iterator[Step]:
    for root in roots:
        for node in module.walk(root):
            if only is None or isinstance(node, only):
                yield Step(module, node, via)
            if depth <= 0 or not isinstance(node, ast.Call):
                continue
            within = module.enclosing_function(node)
            targets = [program.resolve(module, node, within=within)]
            # A function handed to another call (TorchTrainer(train_func), mp.spawn(worker), map(step, ...))
            # is run by it: follow it too.
            targets += [program.resolve(module, ast.Call(func=arg, args=[], keywords=[]), within=within, objects=False)
                        for arg in [*node.args, *(k.value for k in node.keywords)]
                        if isinstance(arg, ast.Name) or (isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name)
                                                         and arg.value.id == "self")]
            for resolved in targets:
                if resolved is None or id(resolved[1]) in active:
                    continue
                target_module, function = resolved
                yield from _flow(program, target_module, list(function.body), depth - 1, via or node,
                                 active | {id(function)}, only)
