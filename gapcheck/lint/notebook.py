"""Jupyter notebooks: the code cells of an ``.ipynb`` file as one Python module, and the way back.

A notebook runs its cells in the order they were executed, not the order they are shown, so the
code cells are joined in execution order (``execution_count``; cells never run follow in document
order). IPython syntax is not Python: a line magic (``%timeit``), a shell line (``!pip install``,
``files = !ls``) or a help line (``np.mean?``) at the start of a statement becomes ``pass`` at the same
indentation (the line count and the block structure stay; a ``%`` or ``!`` line inside brackets or a
string is Python, as IPython reads it). A cell magic whose body is Python run in the notebook
(``%%time``, ``%%capture``, ``%%prun``) loses only its first line: dropping the cell would lose the
split, the seed or the ``eval()`` it holds and make a false finding of it. Any other cell magic
(``%%bash``, ``%%writefile``, ``%%timeit``) drops the whole cell. The joined text is linted like any module;
:class:`CellMap` turns a line of it back into ``cell N, line L`` (N counts every cell of the
notebook from 1, as ``cells[N-1]`` in its JSON) and into the line of the ``.ipynb`` file that holds
that source line, so SARIF points at a real line of the real file.

A file that is not a notebook (not JSON, no ``cells`` list, a cell whose source is not text) is an
input error naming what is wrong: never read as Python, never a silent pass.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from gapcheck.errors import InputError

_ASSIGNED_MAGIC = re.compile(r"^\s*[\w.,\s\[\]()*]+=\s*[!%]")
_HELP = re.compile(r"^\s*\??[\w.]+\?{1,2}\s*$|^\s*\?")
#: Cell magics whose body is Python run in the notebook's namespace (its names stay bound for the next
#: cells): linted. Others (``%%bash``, ``%%writefile``, ``%%html``; ``%%timeit``, whose body runs in a
#: throwaway scope many times) drop the cell.
PYTHON_CELL_MAGICS = frozenset({"time", "capture", "prun", "debug", "memit"})


@dataclass(frozen=True)
class CellLine:
    """Where one line of the joined text comes from."""

    cell: int  # 1-based index among all cells of the notebook
    line: int  # 1-based line inside that cell
    file_line: int  # 1-based line of the .ipynb file holding it
    file_col: int = 1  # 1-based column of the line's first character in that file line
    text: str = ""  # the source line as written in the cell

    def file_column(self, col: int) -> int:
        """The .ipynb column of 1-based cell column ``col`` (inside a JSON string: escapes widen it)."""
        return self.file_col + len(json.dumps(self.text[:max(0, col - 1)], ensure_ascii=False)) - 2


@dataclass(frozen=True)
class CellMap:
    """Joined-text line -> :class:`CellLine` (index 0 is the first line)."""

    lines: tuple[CellLine, ...]

    def locate(self, line: int) -> CellLine | None:
        return self.lines[line - 1] if 0 < line <= len(self.lines) else None


@dataclass(frozen=True)
class _Cell:
    index: int  # 1-based among all cells
    count: int | None  # execution_count
    lines: tuple[str, ...]
    file_spots: tuple[tuple[int, int], ...]  # the .ipynb (line, column) of each source line


def is_notebook(name: str) -> bool:
    return name.lower().endswith(".ipynb")


def join_cells(text: str, display: str, max_code: int | None = None) -> tuple[str, CellMap]:
    """The notebook's code as one module and its line map (an :class:`InputError` when not a notebook, or when its
    code cells hold more than ``max_code`` characters: outputs such as figures do not count)."""
    cells = _code_cells(text, display, max_code)
    executed = sorted((c for c in cells if c.count is not None), key=lambda c: (c.count, c.index))
    ordered = executed + [c for c in cells if c.count is None]
    out: list[str] = []
    where: list[CellLine] = []
    for cell in ordered:
        lines = python_lines(cell.lines)
        if lines is None:
            continue  # a cell magic: not Python
        for number, (line, spot, original) in enumerate(zip(lines, cell.file_spots, cell.lines, strict=False), 1):
            out.append(line)
            where.append(CellLine(cell.index, number, spot[0], spot[1], original))
    return "\n".join(out) + ("\n" if out else ""), CellMap(tuple(where))


def python_lines(lines: tuple[str, ...]) -> list[str] | None:
    """The cell's lines with IPython-only lines made ``pass``; None for a cell magic whose body is not Python."""
    first = next((number for number, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        words = lines[first].lstrip()[2:].split()
        if not words or words[0] not in PYTHON_CELL_MAGICS:
            return None
        lines = (*lines[:first], "", *lines[first + 1:])  # %%time / %%capture: the body runs as Python
    out: list[str] = []
    depth, quote, continued, magic_continued = 0, None, False, False
    for line in lines:
        if magic_continued:  # `!pip install \` goes on
            out.append("")
            magic_continued = line.rstrip().endswith("\\")
        elif depth == 0 and quote is None and not continued and _is_magic(line):
            out.append(line[:len(line) - len(line.lstrip())] + "pass")
            magic_continued = line.rstrip().endswith("\\")
        else:  # code, or a line inside brackets or a string: `% b)` there is the modulo operator
            out.append(line)
            depth, quote, continued = _scan(line, depth, quote)
    return out


def _is_magic(line: str) -> bool:
    """A line magic, shell line, ``x = !cmd`` / ``x = %magic`` or help line (only at the start of a statement)."""
    return line.strip().startswith(("%", "!")) or bool(_ASSIGNED_MAGIC.match(line)) or bool(_HELP.match(line))


def _scan(line: str, depth: int, quote: str | None) -> tuple[int, str | None, bool]:
    """After ``line``: the bracket depth, the quote of a string still open, and a backslash continuation."""
    index = 0
    while index < len(line):
        char = line[index]
        if quote is not None:
            if char == "\\":
                index += 2
                continue
            if line.startswith(quote, index):
                index, quote = index + len(quote), None
                continue
        elif char == "#":
            break
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif char in "'\"":
            quote = line[index:index + 3] if line[index:index + 3] in ('"""', "'''") else char
            index += len(quote)
            continue
        index += 1
    continued = line.rstrip().endswith("\\") and (quote is None or len(quote) == 1)
    if quote is not None and len(quote) == 1 and not continued:
        quote = None  # an unterminated one-line string: Python refuses it, the line ends it
    return depth, quote, continued


def _code_cells(text: str, display: str, max_code: int | None = None) -> list[_Cell]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{display}: not a notebook: the file is not valid JSON ({_short(exc)})") from exc
    cells = _cell_list(data, display)
    if max_code is not None:  # before the line map, whose cost grows with the code
        size = sum(len(_source_text(c)) for c in cells if isinstance(c, dict) and c.get("cell_type", "code") == "code")
        if size > max_code:
            raise InputError(f"{display}: its code cells hold {size} characters, more than the {max_code} gapcheck "
                             "lint reads")
    positions = _source_lines(text, cells)
    found = []
    for index, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict):
            raise InputError(f"{display}: not a notebook: cell {index} is not an object")
        if cell.get("cell_type", "code") != "code":
            continue
        source = cell.get("source", cell.get("input", ""))
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise InputError(f"{display}: not a notebook: cell {index}'s source is not text")
        count = cell.get("execution_count", cell.get("prompt_number"))
        lines = tuple(source.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
        starts = positions.get(index - 1, [])
        spots = tuple(_file_spot(starts, lines, number) for number in range(len(lines)))
        found.append(_Cell(index, count if isinstance(count, int) and not isinstance(count, bool) else None,
                           lines, spots))
    return found


def _source_text(cell: dict) -> str:
    source = cell.get("source", cell.get("input", ""))
    if isinstance(source, list):
        return "".join(s for s in source if isinstance(s, str))
    return source if isinstance(source, str) else ""


def _cell_list(data: object, display: str) -> list[object]:
    if isinstance(data, dict) and isinstance(data.get("cells"), list):
        return data["cells"]  # type: ignore[no-any-return]
    if isinstance(data, dict) and isinstance(data.get("worksheets"), list):  # nbformat 3
        cells: list[object] = []
        for sheet in data["worksheets"]:
            if isinstance(sheet, dict) and isinstance(sheet.get("cells"), list):
                cells.extend(sheet["cells"])
        return cells
    raise InputError(f"{display}: not a notebook: no 'cells' list at the top level")


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


def _file_spot(starts: list[tuple[int, int, int]], lines: tuple[str, ...], number: int) -> tuple[int, int]:
    """The .ipynb (line, column) of source line ``number`` (0-based), from (first source line, file line,
    column after the opening quote) of each source string. A source kept as one string holds all its
    lines on one file line: the column then counts the escaped text before it."""
    if not starts:
        return 1, 1
    first, file_line, col = starts[0]
    for entry in starts:
        if entry[0] > number:
            break
        first, file_line, col = entry
    before = "".join(line + "\n" for line in lines[first:number])
    return file_line, col + len(json.dumps(before, ensure_ascii=False)) - 2


_SOURCE_KEY = re.compile(r'"(?:source|input)"\s*:\s*')


def _source_lines(text: str, cells: list[object]) -> dict[int, list[tuple[int, int, int]]]:
    """Cell index -> [(first source line of a source string, its file line, column after its quote)].

    Only the ``"source"`` values are scanned, not the outputs (which can be megabytes of base64): each
    ``"source":`` key in the text, in order, is decoded where it stands and accepted for the next cell
    whose source it equals (a metadata key that happens to be called "source" does not match).
    """
    decoder = json.JSONDecoder()
    found: dict[int, list[tuple[int, int, int]]] = {}
    keys = _SOURCE_KEY.finditer(text)
    counted = [0, 1]  # (offset, line at that offset): lines are counted once, forward
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict):
            continue
        expected = cell.get("source", cell.get("input"))
        for match in keys:
            try:
                value, end = decoder.raw_decode(text, match.end())
            except ValueError:
                continue
            if value == expected:
                counted[1] += text.count("\n", counted[0], match.end())
                counted[0] = match.end()
                found[index] = _string_starts(text, match.end(), end, decoder, counted[1])
                break
    return found


def _string_starts(text: str, start: int, end: int, decoder: json.JSONDecoder,
                   line: int) -> list[tuple[int, int, int]]:
    """(first source line, file line, column after the quote) of each string between ``start`` (on ``line``)
    and ``end``."""
    starts: list[tuple[int, int, int]] = []
    position, first = start, 0
    while position < end:
        char = text[position]
        if char == '"':
            value, after = decoder.raw_decode(text, position)
            column = position - text.rfind("\n", 0, position) + 1
            starts.append((first, line, column))
            first += value.count("\n")
            position = after
        else:
            line += char == "\n"
            position += 1
    return starts
