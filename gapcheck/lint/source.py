"""One source file: its text, its AST, and its ``# gapcheck: ignore[...]`` suppressions.

Suppressions are read with :mod:`tokenize` (only real comments count, never text inside a
string). A suppression silences the listed codes on its own line and on the whole statement it
belongs to, so a call spread over several lines can carry the comment on any of them. For a
compound statement (``for``, ``with``, ``def``) only the header counts, never the whole body.
"""
from __future__ import annotations

import ast
import io
import os
import re
import stat
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from gapcheck.errors import InputError
from gapcheck.lint.notebook import CellMap, is_notebook, join_cells

#: Files larger than this are refused (a generated or vendored file, not a training script).
MAX_FILE_BYTES = 5 * 1024 * 1024
#: A notebook's JSON may be larger: its outputs (plots as base64 images, tables) are not code. Its code cells are
#: held to MAX_FILE_BYTES once joined; the JSON itself to this (a notebook with 6 MB of figures is ordinary).
MAX_NOTEBOOK_BYTES = 64 * 1024 * 1024

#: Files with more tokens than this are refused before parsing. CPython's parser needs about 1 KB per
#: AST node at its peak (a 2.4 MB list literal of 1.2M numbers: 1.2 GB); a token is at most about one
#: node, so this bounds a worker near 1 GB. torch's largest module (1.4 MB) has 268k tokens.
MAX_TOKENS = 1_000_000
_TOKENISH = re.compile(r"\w+|[^\w\s]")

_IGNORE = re.compile(r"#\s*gapcheck:\s*ignore\[([A-Za-z0-9_,\s]+)\](?:\s*--\s*(.*))?")


@dataclass(frozen=True)
class Suppression:
    line: int
    codes: frozenset[str]
    reason: str


@dataclass
class SourceFile:
    path: Path
    display: str  # the path as reported (relative to where the user ran, when possible)
    text: str
    tree: ast.Module
    suppressions: dict[int, Suppression] = field(default_factory=dict)
    cells: CellMap | None = None  # a notebook: where each line of ``text`` comes from
    _statement_span: dict[int, tuple[int, int]] = field(default_factory=dict)

    def suppressed(self, code: str, line: int) -> bool:
        """Whether ``code`` is suppressed at ``line`` (on the line itself or on its statement)."""
        start, end = self._statement_span.get(line, (line, line))
        for number in range(start, end + 1):
            entry = self.suppressions.get(number)
            if entry is not None and any(code == c or code.startswith(c) for c in entry.codes):
                return True
        return False

    def where(self, line: int | None) -> str:
        """``path:line``, or ``nb.ipynb:cell N:line L`` for a line of a notebook."""
        spot = self.cells.locate(line or 0) if self.cells is not None else None
        if spot is not None:
            return f"{self.display}:cell {spot.cell}:line {spot.line}"
        return f"{self.display}:{line}"


def read_source(path: Path, display: str) -> SourceFile:
    """Read and parse ``path``; an unreadable or unparsable file is an :class:`InputError` naming it."""
    notebook = is_notebook(display) or is_notebook(path.name)
    raw = read_regular(path, display, limit=MAX_NOTEBOOK_BYTES if notebook else MAX_FILE_BYTES)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        text = raw.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        raise InputError(f"{display}: not a text file in a known encoding ({exc})") from exc
    if notebook:
        return parse_notebook(text, path, display)
    return parse_source(text, path, display)


def parse_notebook(text: str, path: Path, display: str) -> SourceFile:
    """A notebook's code cells as one module (see :mod:`gapcheck.lint.notebook`); errors name the cell."""
    code, cells = join_cells(text, display, max_code=MAX_FILE_BYTES)  # the limit is for code, not outputs
    try:
        source = parse_source(code, path, display, top_level_await=True)
    except InputError as exc:
        cause = exc.__cause__
        spot = cells.locate(cause.lineno or 0) if isinstance(cause, SyntaxError) else None
        if spot is None or not isinstance(cause, SyntaxError):
            raise
        raise InputError(f"{display}:cell {spot.cell}:line {spot.line}: does not parse: {cause.msg}") from cause
    source.cells = cells
    return source


def read_regular(path: Path, display: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, checked on the open descriptor.

    Opened non-blocking and checked with ``fstat`` (not a ``stat`` before the open): a FIFO named
    ``*.py`` would otherwise block the whole run, a device would never end, and a file swapped
    between the check and the read is still the file that was checked. Reads at most one byte more
    than the limit, so a file that grows while it is read cannot exhaust memory.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"{display}: cannot read: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{display}: not a regular file")
        if info.st_size > limit:
            raise InputError(f"{display}: {info.st_size} bytes is larger than the {limit} bytes "
                             "gapcheck lint reads")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, limit + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise InputError(f"{display}: larger than the {limit} bytes gapcheck lint reads")
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(f"{display}: cannot read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def parse_source(text: str, path: Path, display: str, *, top_level_await: bool = False) -> SourceFile:
    """``text`` parsed, with its suppressions. ``top_level_await``: IPython runs ``await``/``async for``/``async
    with`` at a cell's top level; the compiler's own flag accepts them there, positions unchanged."""
    # a token is at least one character, so only texts longer than the limit are counted (~0.1 s per MB)
    tokens = _TOKENISH.subn("", text)[1] if len(text) > MAX_TOKENS else 0
    if tokens > MAX_TOKENS:
        raise InputError(f"{display}: {tokens} tokens is more than the {MAX_TOKENS} gapcheck lint parses "
                         "(generated code or data, not a training script)")
    if "\r" in text:  # universal newlines, as Python reads a module: a lone CR ends a line for ast *and* tokenize
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    try:
        flags = ast.PyCF_ONLY_AST | (ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if top_level_await else 0)
        tree = compile(text, display, "exec", flags=flags, dont_inherit=True)
    except SyntaxError as exc:
        where = f"{display}:{exc.lineno}:{exc.offset or 1}" if exc.lineno else display
        raise InputError(f"{where}: does not parse: {exc.msg}") from exc
    except (ValueError, RecursionError) as exc:  # NUL bytes, absurd nesting
        raise InputError(f"{display}: does not parse: {exc}") from exc
    except MemoryError as exc:  # how CPython's parser reports some absurd nestings (10k chained `a if c else`);
        # the file is at most MAX_FILE_BYTES, so this is the file's shape, not a machine out of memory
        raise InputError(f"{display}: does not parse: too deeply nested") from exc
    source = SourceFile(path=path, display=display, text=text, tree=tree)
    source.suppressions = _suppressions(text)
    if source.suppressions:
        source._statement_span = _statement_spans(tree)
    return source


def _suppressions(text: str) -> dict[int, Suppression]:
    found: dict[int, Suppression] = {}
    if "gapcheck:" not in text:
        return found  # the common case: no need to tokenize at all
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type != tokenize.COMMENT:
                continue
            match = _IGNORE.search(token.string)
            if match:
                codes = frozenset(c.strip().upper() for c in match.group(1).split(",") if c.strip())
                found[token.start[0]] = Suppression(token.start[0], codes, (match.group(2) or "").strip())
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # ast accepted the file; a tokenizer hiccup only loses suppressions after it
    return found


def _statement_spans(tree: ast.Module) -> dict[int, tuple[int, int]]:
    """Line -> (first, last) line of the innermost statement (or compound header) holding it."""
    spans: dict[int, tuple[int, int]] = {}
    for node in ast.walk(tree):  # outer statements first, so inner ones overwrite them
        if not isinstance(node, ast.stmt):
            continue
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            end = max(node.lineno, body[0].lineno - 1)
        else:
            end = node.end_lineno or node.lineno
        for line in range(node.lineno, end + 1):
            previous = spans.get(line)
            if previous is None or (previous[1] - previous[0]) >= (end - node.lineno):
                spans[line] = (node.lineno, end)
    return spans
