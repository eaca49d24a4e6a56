"""Code written for several torch versions: a deprecated spelling kept on purpose for old torch.

A call is a compatibility fallback when the code around it picks between the new API and the old
one, so rewriting or reporting it would break the old torch the project still supports:

- it sits in an ``except`` handler of a ``try`` whose body uses the new API (timm's ``NativeScaler``:
  ``try: torch.amp.GradScaler(device=...) except (AttributeError, TypeError): torch.cuda.amp.GradScaler()``);
- it sits in a branch of an ``if`` / conditional expression whose test checks the torch version or the
  presence of the new API (``if hasattr(torch, "amp")``, ``if version.parse(torch.__version__) < ...``,
  Lightning's ``... if _TORCH_GREATER_EQUAL_2_4 else torch.cuda.amp.GradScaler()``).
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from gapcheck.lint.symbols import ModuleIndex, dotted, ordered

#: Words of a version test's names: ``torch.__version__``, ``version.parse``, ``TORCH_VERSION``,
#: ``_TORCH_GREATER_EQUAL_2_4``, ``is_torch_greater_or_equal``, ``TORCH_2_4``, ``torch_older_than``.
_VERSION_WORDS = re.compile(r"version|greater|less_than|older|newer|torch_?\d|_(ge|gt|le|lt)_?\d", re.IGNORECASE)
_PROBES = frozenset({"hasattr", "getattr"})


def is_fallback(module: ModuleIndex, node: ast.AST, new_api: tuple[str, ...]) -> bool:
    """Whether ``node`` is the old-torch side of a choice between ``new_api`` (qualified name prefixes) and it."""
    child = node
    for parent in module.ancestors(node):
        if isinstance(parent, ast.Try) and isinstance(child, ast.ExceptHandler) and _uses(module, parent.body, new_api):
            return True
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test and _version_test(parent.test):
            return True
        child = parent
    return False


def imported_either_way(module: ModuleIndex, call: ast.Call, new_api: tuple[str, ...]) -> bool:
    """Whether the name ``call`` starts with is imported from ``new_api`` somewhere in the module, or its old
    import is a fallback (``try: from torch.amp import autocast`` / ``except ImportError: from torch.cuda.amp
    import autocast``): the index keeps the last binding, which is not the one new torch runs."""
    head = (dotted(call.func) or "").split(".")[0]
    for node, origin in _imports_of(module.tree, head):
        if origin.startswith(new_api) or is_fallback(module, node, new_api):
            return True
    return False


def _imports_of(tree: ast.AST, name: str) -> Iterator[tuple[ast.stmt, str]]:
    """(import statement, what it binds ``name`` to) for every import of ``name`` in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                if local != name:
                    continue
                if isinstance(node, ast.Import):
                    yield node, alias.name if alias.asname else local
                else:
                    yield node, f"{node.module or ''}.{alias.name}"


def _uses(module: ModuleIndex, body: list[ast.stmt], new_api: tuple[str, ...]) -> bool:
    for stmt in body:
        for node in ordered(stmt):
            if isinstance(node, (ast.Attribute, ast.Name)) and (module.qualname(node) or "").startswith(new_api):
                return True
            if isinstance(node, ast.ImportFrom) and any(f"{node.module}.{a.name}".startswith(new_api)
                                                        or (node.module or "").startswith(new_api) for a in node.names):
                return True
    return False


def _version_test(test: ast.expr) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _PROBES and any(
                (dotted(arg) or "").split(".")[0] == "torch" for arg in node.args):
            return True  # hasattr(torch, "amp"), getattr(torch.amp, "GradScaler", None)
        word = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if word is not None and _VERSION_WORDS.search(word):
            return True
    return False
