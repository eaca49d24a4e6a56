"""The lint engine: find the files, lint each one (in parallel), apply suppressions, sort.

Each worker process keeps its own :class:`~gapcheck.lint.symbols.Program`, so a module imported by
several linted files is parsed once per worker. Results come back in the order the files were
listed and are then sorted by path, line, column and code: the same input gives the same report
whatever the number of workers.
"""
from __future__ import annotations

import dataclasses
import errno
import gc
import os
import re
import stat
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gapcheck.alarm import interval_alarm
from gapcheck.errors import InputError, UsageError
from gapcheck.findings import Finding, Subject
from gapcheck.lint.config import Selection, _matches
from gapcheck.lint.facts import managed
from gapcheck.lint.notebook import is_notebook
from gapcheck.lint.result import FileError, LintResult
from gapcheck.lint.rules import Context, all_rules
from gapcheck.lint.source import SourceFile, read_source
from gapcheck.lint.symbols import Program
from gapcheck.lint.versions import torch_floor

#: Folders never entered when walking a directory (explicit file arguments are always linted).
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", "node_modules",
                       ".mypy_cache", ".ruff_cache", ".pytest_cache", "build", "dist", ".eggs"})
#: Below this many files the process pool costs more than it saves.
PARALLEL_FROM = 8
#: CPU seconds one file may take (parse, index, every rule, calls followed). A 1 MB training file takes
#: about 10; beyond the budget the file is reported as not analysed and the run goes on.
FILE_CPU_SECONDS = 120.0


@dataclass(frozen=True)
class FileOutcome:
    findings: tuple[Finding, ...] = ()
    error: FileError | None = None
    lines: int = 0


def discover(paths: Sequence[str | Path], exclude: Sequence[str] = ()) -> list[tuple[Path, str]]:
    """(path, display) for every file to lint: explicit files as given, ``*.py`` and ``*.ipynb`` under
    folders (``exclude`` globs skip some), sorted, unique."""
    found: dict[Path, str] = {}
    for raw in paths:
        path = Path(raw)
        kind = _kind(path)
        if kind == "file":
            found.setdefault(_real(path), _display(str(path)))
        elif kind == "dir":
            for folder, dirs, files in os.walk(path):  # symlinked folders are not entered (no loops)
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
                for name in sorted(files):
                    item = Path(folder) / name
                    display = str(item)
                    # A FIFO, socket, device, dangling or looping link named *.py is not source code:
                    # skipped when walking (reading a FIFO would block the run).
                    if (name.endswith(".py") or is_notebook(name)) and _kind(item) == "file" and \
                            not any(_matches(display, pattern) for pattern in exclude):
                        found.setdefault(_real(item), _display(display))
        elif kind == "missing":
            raise UsageError(f"no such file or directory: {str(raw)!r}")  # repr: a newline in the name stays visible
        else:
            raise UsageError(f"not a file or folder that can be linted ({kind}): {str(raw)!r}")
    return sorted(found.items(), key=lambda item: item[1])


def _kind(path: Path) -> str:
    """"file", "dir", "missing", or what else ``path`` is (following links)."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop"
        return "dangling symbolic link" if os.path.islink(path) else "missing"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device or special file"


def _display(path: str) -> str:
    """The path as reported: a name that is not valid UTF-8 (``bad\\xff.py``, kept by Python as lone
    surrogates) is shown with ``\\xff`` escapes, so every report format stays valid UTF-8/XML/JSON."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    return path


def _real(path: Path) -> Path:
    # os.path.realpath, unlike Path.resolve() on Python 3.11, never raises on a link loop
    return Path(os.path.realpath(path))


_PROGRAM: Program | None = None  # one per worker process (see the module docstring)


#: The cyclic collector's first threshold while linting. ASTs, indexes and memo tables are millions of small
#: objects without cycles; at the default (700) the collector walks the growing heap over and over and took
#: 30% of the CPU time on a 137k-line corpus. The cost: garbage with cycles lives a little longer (peak RSS
#: 175 -> 217 MB on that corpus); the bound on memory stays Program.MAX_MODULES and the per-file limits.
GC_THRESHOLD = 50_000


@contextmanager
def _few_collections() -> Iterator[None]:
    previous = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, previous[1], previous[2])
    try:
        yield
    finally:
        gc.set_threshold(*previous)


def _start_worker(roots: tuple[Path, ...]) -> None:
    global _PROGRAM
    _PROGRAM = Program(roots)
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])  # the worker only lints (see _few_collections)


class _OverBudget(BaseException):  # BaseException: no rule's own handler may swallow it
    pass


@contextmanager
def _cpu_budget(seconds: float, fired: list[bool] | None = None) -> Iterator[None]:
    """Raise :class:`_OverBudget` after ``seconds`` of this process's CPU time (ITIMER_PROF).

    CPU time, not wall time, so a loaded machine does not turn into reported files. Only where a
    timer can be armed: POSIX, the main thread (every pool worker; the CLI), no profiler's timer running.
    """
    def expired() -> BaseException:
        if fired is not None:
            fired.append(True)
        return _OverBudget()

    with interval_alarm(seconds, expired, cpu=True):
        yield


def lint_file(path: Path, display: str, selection: Selection, program: Program | None = None) -> FileOutcome:
    """Lint one file; a file that cannot be read, parsed or analysed in time is reported, never raised."""
    program = program or _PROGRAM or Program([path.parent])
    fired: list[bool] = []
    try:
        with _cpu_budget(FILE_CPU_SECONDS, fired):
            return _lint_file(path, display, selection, program)
    except (_OverBudget, SystemError) as exc:
        # The timer's exception can land inside CPython's parser, which then reports its own broken state as a
        # SystemError ("AST constructor recursion depth mismatch"): that is the budget too, nothing else is.
        if isinstance(exc, SystemError) and not fired:
            raise
        program.clear_caches()
        return FileOutcome(error=FileError(path=display, message=f"{display}: not analysed: more than "
                                           f"{FILE_CPU_SECONDS:g} CPU seconds (a generated or adversarial file?)"))


def _lint_file(path: Path, display: str, selection: Selection, program: Program) -> FileOutcome:
    try:
        source = read_source(path, display)
    except InputError as exc:
        return FileOutcome(error=FileError(path=display, message=exc.message))
    module = program.add(source)
    ctx = Context(program=program, module=module, managed=managed(module),
                  entry_functions=selection.entry_functions(display),
                  torch_floor=selection.target_torch or torch_floor(Path(os.path.abspath(path))))
    findings: list[Finding] = []
    for rule in all_rules():
        if not selection.enabled(rule.code.code, display) or (rule.aspect is not None and rule.aspect in ctx.managed):
            continue
        if not rule.applies(ctx):
            continue
        try:
            found = list(rule.check(ctx))
        except RecursionError:  # absurdly nested expressions: report the file, keep the others going
            module.cache.clear()
            return FileOutcome(error=FileError(path=display, message=f"{display}: too deeply nested to analyse"))
        findings.extend(f for f in found if not source.suppressed(f.code, f.subject.line or 0))
    module.cache.clear()  # rule memos are per run; the index stays for files that import this one
    if source.cells is not None:
        return FileOutcome(findings=tuple(_in_notebook(f, source) for f in _unique(findings)),
                           lines=len(source.cells.lines))
    return FileOutcome(findings=tuple(_unique(findings)), lines=source.text.count("\n") + 1)


_LINE_REF = re.compile(r"\bline (\d+)\b")


def _in_notebook(finding: Finding, source: SourceFile) -> Finding:
    """A finding on the joined cells, placed in its notebook: ``nb.ipynb:cell N:line L`` for people, the
    line and column of the ``.ipynb`` file for SARIF/JSON, and
    ``cell``/``cell_line``/``cell_col`` in the evidence. Line numbers inside the message are cell lines too."""
    cells = source.cells
    assert cells is not None
    spot = cells.locate(finding.subject.line or 0)
    if spot is None:
        return finding

    def cell_line(line: int) -> str | int:
        other = cells.locate(line)
        return f"cell {other.cell}:line {other.line}" if other is not None else line

    evidence = {key: (cell_line(value) if key.endswith("_line") and isinstance(value, int) else value)
                for key, value in finding.evidence.items()}
    evidence.update(cell=spot.cell, cell_line=spot.line, cell_col=finding.subject.col)
    return dataclasses.replace(finding, message=_LINE_REF.sub(lambda m: str(cell_line(int(m.group(1)))), finding.message),
                               where=f"{source.display}:cell {spot.cell}:line {spot.line}", evidence=evidence,
                               subject=Subject(path=finding.subject.path, line=spot.file_line,
                                               col=spot.file_column(finding.subject.col or 1)))


def _unique(findings: Iterable[Finding]) -> list[Finding]:
    seen: dict[tuple[str, int | None, int | None], Finding] = {}
    for finding in findings:
        seen.setdefault((finding.code, finding.subject.line, finding.subject.col), finding)
    return list(seen.values())


def _lint_star(args: tuple[Path, str, Selection]) -> FileOutcome:
    return lint_file(*args)


def roots_of(paths: Sequence[str | Path]) -> tuple[Path, ...]:
    """Where calls may be followed: each folder given, and the folder of each file given."""
    return tuple(sorted({_real(Path(p) if Path(p).is_dir() else Path(p).parent) for p in paths}))


def lint_paths(paths: Sequence[str | Path], selection: Selection | None = None, *, exclude: Sequence[str] = (),
               jobs: int | None = None) -> LintResult:
    """Lint files and folders; the library entry point behind ``gapcheck lint``."""
    selection = selection or Selection()
    started = time.perf_counter()
    files = discover(paths, exclude)
    if not files:
        raise UsageError("no Python files or notebooks to lint under " + ", ".join(str(p) for p in paths))
    work = [(path, display, selection) for path, display in files]
    cpus = os.cpu_count() or 1
    # never more processes than CPUs: the work is CPU-bound, and `jobs = 256` in a repository's own
    # gapcheck.toml must not turn a CI run into hundreds of interpreters
    workers = max(1, min(jobs or cpus, cpus, len(work)))
    roots = roots_of(paths)
    if workers > 1 and len(work) >= PARALLEL_FROM:
        with ProcessPoolExecutor(max_workers=workers, initializer=_start_worker, initargs=(roots,)) as pool:
            outcomes = list(pool.map(_lint_star, work, chunksize=max(1, len(work) // (workers * 4))))
    else:
        program = Program(roots)
        with _few_collections():
            outcomes = [lint_file(path, display, sel, program) for path, display, sel in work]
    findings = sorted((f for o in outcomes for f in o.findings),
                      key=lambda f: (f.subject.path or "", f.subject.line or 0, f.subject.col or 0, f.code))
    errors = tuple(o.error for o in outcomes if o.error is not None)
    return LintResult(findings=tuple(findings), errors=errors, files=len(files),
                      lines=sum(o.lines for o in outcomes), rules=tuple(r.code.code for r in all_rules()
                                                                       if selection.enabled(r.code.code, "")),
                      seconds=time.perf_counter() - started)
