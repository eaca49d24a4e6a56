"""``gapcheck lint --fix`` / ``--diff``: the mechanical rewrites, with LibCST so formatting and comments survive.

Only two codes are fixed, both without judgement:

- **GC801** ``torch.load(path)`` -> ``torch.load(path, weights_only=True)``. A call that passes
  ``weights_only=False`` is left alone (someone decided that; the finding stays), and so is one
  with ``**kwargs`` (the linter does not report it).
- **GC305** ``torch.cuda.amp.autocast(...)`` -> ``torch.amp.autocast("cuda", ...)`` and
  ``torch.cuda.amp.GradScaler(...)`` -> ``torch.amp.GradScaler("cuda", ...)``; ``from torch.cuda.amp
  import autocast`` becomes ``from torch.amp import autocast`` with ``"cuda"`` added at each call, and
  ``from torch.cuda import amp`` / ``import torch.cuda.amp as amp`` become ``from torch import amp`` /
  ``import torch.amp as amp`` when the module is used only for ``amp.autocast(...)``/``amp.GradScaler(...)``
  calls being fixed (otherwise those calls become ``torch.amp.X("cuda", ...)`` where ``torch`` is imported,
  and are left alone where it is not).
  ``torch.cuda.amp.autocast``'s positional arguments (enabled, dtype, cache_enabled) are in another
  order than ``torch.amp.autocast``'s, so they are passed by name.

Only the calls the linter reported are touched (the findings' lines: suppressions and ``--select``
are respected). The old-torch side of a version choice (an ``except`` fallback of a ``try`` that uses
``torch.amp``, a branch under ``hasattr(torch, "amp")`` or a torch version test, a name imported from
either module) is not reported, so it is never rewritten: see :mod:`gapcheck.lint.compat`. Notebooks are not rewritten. A file is
replaced atomically and keeps its mode.
"""
from __future__ import annotations

import difflib
import io
import os
import tempfile
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from gapcheck.findings import Finding
from gapcheck.lint.config import Selection
from gapcheck.lint.notebook import is_notebook
from gapcheck.lint.result import LintResult

FIXABLE = frozenset({"GC305", "GC801"})
_AUTOCAST_ORDER = ("enabled", "dtype", "cache_enabled")  # torch.cuda.amp.autocast's positional parameters


@dataclass(frozen=True)
class FileFix:
    path: Path
    display: str
    before: str
    after: str
    fixed: int  # calls rewritten

    def diff(self) -> str:
        return "".join(difflib.unified_diff(self.before.splitlines(keepends=True), self.after.splitlines(keepends=True),
                                            fromfile=f"a/{self.display.lstrip('/')}",
                                            tofile=f"b/{self.display.lstrip('/')}"))


def plan(findings: Iterable[Finding], paths: dict[str, Path]) -> list[FileFix]:
    """The rewrites for the fixable findings (``paths``: display -> file); files with nothing to change omitted."""
    lines: dict[str, dict[int, set[str]]] = {}
    for finding in findings:
        display = finding.subject.path or ""
        if finding.code in FIXABLE and finding.subject.line and not is_notebook(display) and display in paths:
            lines.setdefault(display, {}).setdefault(finding.subject.line, set()).add(finding.code)
    fixes = []
    for display, wanted in sorted(lines.items()):
        path = paths[display]
        raw = path.read_bytes()
        encoding = tokenize.detect_encoding(io.BytesIO(raw).readline)[0]
        before = raw.decode(encoding)
        after, count = fix_text(before, wanted)
        if count and after != before:
            fixes.append(FileFix(path, display, before, after, count))
    return fixes


def fix_text(text: str, wanted: dict[int, set[str]]) -> tuple[str, int]:
    """``text`` with the calls on ``wanted`` lines (line -> codes) rewritten, and how many were."""
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError:
        return text, 0  # ast accepted it, LibCST does not (a newer syntax): leave it
    wrapper = MetadataWrapper(module)
    positions = wrapper.resolve(PositionProvider)
    scan = _AmpImports(positions)
    wrapper.module.visit(scan)
    # the import is rewritten only when every call of its names is being fixed (a suppressed one would break)
    imports_too = bool(scan.calls) and all("GC305" in wanted.get(line, set()) for line in scan.calls)
    # `from torch.cuda import amp`: the same, and the module must be used for nothing but those calls
    module_too = bool(scan.module_calls) and len(scan.module_calls) == scan.module_uses and all(
        "GC305" in wanted.get(line, set()) for line in scan.module_calls)
    fixer = _Fixer(wanted, positions, imports_too)
    fixer.amp_modules = {alias: "module" if module_too else ("torch" if scan.torch_bound else "")
                         for alias in scan.modules}
    return wrapper.module.visit(fixer).code, fixer.count


_AMP_NAMES = ("autocast", "GradScaler")


class _AmpImports(cst.CSTVisitor):
    """Lines of the calls of names imported ``from torch.cuda.amp``; the local names of the ``torch.cuda.amp``
    module itself (``from torch.cuda import amp``, ``import torch.cuda.amp as amp``), how often they are used
    outside imports, and the lines of their ``autocast``/``GradScaler`` calls; whether ``torch`` is a name."""

    def __init__(self, positions: object) -> None:
        super().__init__()
        self.positions, self.names, self.calls = positions, set(), []  # type: ignore[var-annotated]
        self.modules: set[str] = set()
        self.module_calls: list[int] = []
        self.module_uses = 0
        self.torch_bound = False

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            name = _dotted(alias.name)
            if name == "torch.cuda.amp" and alias.asname is not None:
                self.modules.add(alias.evaluated_alias or "")
            self.torch_bound |= alias.asname is None and (name or "").split(".")[0] == "torch"
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        module = _dotted(node.module) if node.module is not None else None
        if module == "torch.cuda.amp" and not isinstance(node.names, cst.ImportStar):
            self.names |= {a.evaluated_alias or _dotted(a.name) for a in node.names}
        if module == "torch.cuda" and not isinstance(node.names, cst.ImportStar) and len(node.names) == 1 and \
                _dotted(node.names[0].name) == "amp":
            self.modules.add(node.names[0].evaluated_alias or "amp")
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)  # `x.amp` is not a use of a module named amp: its attribute name is skipped
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.module_uses += node.value in self.modules

    def visit_Call(self, node: cst.Call) -> None:
        name = _dotted(node.func) or ""
        if name in self.names:
            self.calls.append(self.positions[node].start.line)  # type: ignore[index]
        head, _, tail = name.rpartition(".")
        if head in self.modules and tail in _AMP_NAMES:
            self.module_calls.append(self.positions[node].start.line)  # type: ignore[index]


def apply(fixes: Sequence[FileFix]) -> None:
    """Write each fixed file atomically (temp file beside it, same mode, rename)."""
    for fix in fixes:
        encoding = tokenize.detect_encoding(io.BytesIO(fix.before.encode("utf-8", "surrogateescape")).readline)[0]
        mode = fix.path.stat().st_mode & 0o7777
        fd, tmp = tempfile.mkstemp(prefix=f".{fix.path.name}.", suffix=".tmp", dir=fix.path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(fix.after.encode(encoding))
            os.chmod(tmp, mode)
            os.replace(tmp, fix.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _dotted(node: cst.BaseExpression) -> str | None:
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


class _Fixer(cst.CSTTransformer):
    def __init__(self, wanted: dict[int, set[str]], positions: object, imports_too: bool) -> None:
        super().__init__()
        self.wanted, self.positions, self.count, self.imports_too = wanted, positions, 0, imports_too
        self.amp_names: dict[str, str] = {}  # local name -> autocast/GradScaler, from `from torch.cuda.amp import`
        self.load_names: set[str] = {"torch.load"}
        #: local name of the torch.cuda.amp module -> "module" (rewrite its import, keep the calls' names),
        #: "torch" (call torch.amp.X instead) or "" (leave it)
        self.amp_modules: dict[str, str] = {}

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> cst.Import:
        aliases = [a.with_changes(name=cst.parse_expression("torch.amp")) if _dotted(a.name) == "torch.cuda.amp"
                   and self.amp_modules.get(a.evaluated_alias or "") == "module" else a for a in updated.names]
        return updated.with_changes(names=aliases)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = _dotted(node.module) if node.module is not None else None
        if module == "torch" and not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                if _dotted(alias.name) == "load":
                    self.load_names.add(alias.evaluated_alias or "load")

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom) -> cst.ImportFrom:
        if original.module is not None and _dotted(original.module) == "torch.cuda" and \
                not isinstance(original.names, cst.ImportStar) and len(original.names) == 1 and \
                self.amp_modules.get(original.names[0].evaluated_alias or "amp") == "module":
            return updated.with_changes(module=cst.Name("torch"))  # from torch.cuda import amp -> from torch import amp
        if original.module is None or _dotted(original.module) != "torch.cuda.amp" or \
                isinstance(original.names, cst.ImportStar) or not self.imports_too:
            return updated
        names = [_dotted(a.name) for a in original.names]
        if not all(n in ("autocast", "GradScaler") for n in names):
            return updated  # something else from torch.cuda.amp: keep the import as it is
        for alias in original.names:
            self.amp_names[alias.evaluated_alias or _dotted(alias.name) or ""] = _dotted(alias.name) or ""
        return updated.with_changes(module=cst.parse_expression("torch.amp"))

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        line = self.positions[original].start.line  # type: ignore[index]
        codes = self.wanted.get(line, set())
        name = _dotted(original.func)
        if "GC801" in codes and name in self.load_names:
            return self._weights_only(updated)
        if "GC305" in codes and name in ("torch.cuda.amp.autocast", "torch.cuda.amp.GradScaler"):
            short = name.rsplit(".", 1)[-1]
            return self._amp(updated.with_changes(func=cst.parse_expression(f"torch.amp.{short}")), short)
        if "GC305" in codes and name in self.amp_names:
            return self._amp(updated, self.amp_names[name])
        head, _, short = (name or "").rpartition(".")
        how = self.amp_modules.get(head, "")
        if "GC305" in codes and short in _AMP_NAMES and how:
            if how == "torch":
                updated = updated.with_changes(func=cst.parse_expression(f"torch.amp.{short}"))
            return self._amp(updated, short)
        return updated

    def _weights_only(self, call: cst.Call) -> cst.Call:
        if any(a.star for a in call.args) or any(a.keyword and a.keyword.value == "weights_only" for a in call.args):
            return call
        self.count += 1
        return call.with_changes(args=_append(call, cst.Arg(
            keyword=cst.Name("weights_only"), value=cst.Name("True"),
            equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))))

    def _amp(self, call: cst.Call, short: str) -> cst.Call:
        args = list(call.args)
        if short == "autocast":  # positional -> by name: the orders differ
            args = [a.with_changes(keyword=cst.Name(_AUTOCAST_ORDER[i]), equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
                if a.keyword is None and not a.star and i < len(_AUTOCAST_ORDER) else a for i, a in enumerate(args)]
        device = cst.Arg(value=cst.SimpleString('"cuda"'),
                         comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if args else cst.MaybeSentinel.DEFAULT)
        self.count += 1
        return call.with_changes(args=[device, *args])


def _append(call: cst.Call, new: cst.Arg) -> list[cst.Arg]:
    """The call's arguments plus ``new``, laid out like the others: on its own line when the call is one
    argument per line with a trailing comma, else after ", "."""
    args = list(call.args)
    if not args:
        return [new]
    last = args[-1]
    if not isinstance(last.comma, cst.Comma):
        return [*args[:-1], last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), new]
    # trailing comma: the new argument takes the last one's place in the layout, the closing comma moves after it
    if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma):
        between = args[-2].comma.whitespace_after
    else:
        between = call.whitespace_before_args
    if isinstance(between, cst.ParenthesizedWhitespace):  # the line break and indent, without the line's comment
        between = between.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=())
    return [*args[:-1], last.with_changes(comma=cst.Comma(whitespace_after=between)), new.with_changes(comma=last.comma)]


def fix_paths(paths: Sequence[str | Path], selection: Selection | None = None, *, exclude: Sequence[str] = (),
              jobs: int | None = None, write: bool = False) -> tuple[list[FileFix], LintResult]:
    """Lint, plan the rewrites of the fixable findings, write them when ``write``, and lint again.

    Returns the rewrites and the result after them (with ``write=False``, the result before: nothing
    changed on disk).
    """
    from gapcheck.lint.engine import discover, lint_paths

    result = lint_paths(paths, selection, exclude=exclude, jobs=jobs)
    files = {display: path for path, display in discover(paths, exclude)}
    fixes = plan(result.findings, files)
    if write and fixes:
        apply(fixes)
        result = lint_paths(paths, selection, exclude=exclude, jobs=jobs)
    return fixes, result
