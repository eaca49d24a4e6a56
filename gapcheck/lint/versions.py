"""The torch versions a project declares it runs on, for rules whose risk depends on the version.

``torch.load`` unpickles safely by default from torch 2.6 (``weights_only=True``); the DataLoader seeds
numpy, ``random`` and torch in every worker from torch 1.9. Whether a finding is a gap therefore
depends on the oldest torch the project allows. That floor comes from ``--target-torch`` (or
``[lint] target-torch``), else from the project's own declaration: the nearest folder above the
linted file that holds ``pyproject.toml``, ``setup.cfg``, ``setup.py`` or ``requirements*.txt``
(every ``torch`` requirement there; one without a lower bound means "any version"). Nothing
declared means the floor is unknown, and each rule decides what unknown means for it.
"""
from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

Version = tuple[int, ...]

#: torch >= this loads with weights_only=True unless told otherwise.
WEIGHTS_ONLY_DEFAULT: Version = (2, 6)
#: torch >= this seeds numpy, random and torch in each DataLoader worker (base_seed + worker id).
WORKER_SEEDING: Version = (1, 9)

_PROJECT_FILES = ("pyproject.toml", "setup.cfg", "setup.py")
_MAX_UP = 8  # folders climbed from the linted file
_MAX_BYTES = 1024 * 1024
# a torch requirement inside any text: `torch>=2.6,<3`, "torch==2.7.1", torch (bare) — not torchvision
_TORCH = re.compile(r"(?<![\w.-])torch(?![\w.-])\s*(?:\[[^\]]*\])?\s*((?:[<>=!~]=?\s*[\w.*+!-]+\s*,?\s*)*)")
_CLAUSE = re.compile(r"(~=|==|>=|<=|!=|>|<)\s*([0-9][\w.*+!-]*)")


def parse_version(text: str) -> Version | None:
    """``"2.6"`` / ``"2.6.0+cu121"`` -> (2, 6) / (2, 6, 0); None when it does not start with a number."""
    parts = []
    for piece in text.strip().split("."):
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group()))
        if match.group() != piece:
            break
    return tuple(parts) if parts else None


def floor_of(specifiers: str) -> Version | None:
    """The lowest version a specifier set allows (``>=2.6,<3`` -> (2, 6)); None when unbounded below."""
    floors = []
    for operator, version in _CLAUSE.findall(specifiers):
        parsed = parse_version(version.rstrip(".*"))
        if parsed is None:
            continue
        if operator in (">=", "==", "~="):
            floors.append(parsed)
        elif operator == ">":
            floors.append((*parsed, 1))  # strictly above: the next patch release
    return max(floors) if floors else None


def torch_floor(path: Path) -> Version | None:
    """The oldest torch the project of ``path`` (a linted file) declares; None when it says nothing or allows any."""
    folder = path.parent
    for _ in range(_MAX_UP):
        if folder.name in ("site-packages", "dist-packages"):
            return None
        found = _declared(str(folder))
        if found is not _NOTHING:
            return found  # type: ignore[return-value]
        if (folder / ".git").exists() or folder.parent == folder or folder.name in ("site-packages", "dist-packages"):
            return None  # the project's root, or an installed package (never the requirements of the venv's owner)
        folder = folder.parent
    return None


_NOTHING = object()


@functools.lru_cache(maxsize=256)
def _declared(folder: str) -> object:
    """A project folder's torch floor, None (declared without a floor), or _NOTHING (no project files here)."""
    base = Path(folder)
    files = [base / name for name in _PROJECT_FILES if (base / name).is_file()]
    files += sorted(p for p in base.glob("requirements*.txt") if p.is_file())
    if not files:
        return _NOTHING
    floors: list[Version | None] = []
    for file in files:
        floors.extend(_mentions(file))
    if not floors:
        return None
    if any(f is None for f in floors):
        return None  # one declaration allows any version
    return min(f for f in floors if f is not None)


def _mentions(file: Path) -> list[Version | None]:
    try:
        if file.stat().st_size > _MAX_BYTES:
            return []
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    if file.name == "pyproject.toml":
        text = _requirement_strings(text)
    elif file.name == "setup.py":  # only quoted requirement strings: `import torch` is no declaration
        text = "\n".join(m.group(1) for m in re.finditer(r"[\"'](torch(?![\w.-])[^\"']*)[\"']", text))
    elif file.suffix == ".txt":
        text = "\n".join(line.split("#")[0] for line in text.splitlines() if not line.lstrip().startswith("-"))
    return [floor_of(match.group(1)) for match in _TORCH.finditer(text)]


def _requirement_strings(text: str) -> str:
    """Dependency strings of a pyproject (PEP 621 and Poetry); a file that is not TOML gives nothing."""
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError):
        return ""
    project = data.get("project", {}) if isinstance(data.get("project"), dict) else {}
    lines = [str(d) for d in project.get("dependencies", []) or []]
    for group in (project.get("optional-dependencies", {}) or {}).values():
        lines += [str(d) for d in group or []]
    poetry = data.get("tool", {}).get("poetry", {}) if isinstance(data.get("tool"), dict) else {}
    for table in (poetry.get("dependencies", {}) or {}, *((g or {}).get("dependencies", {})
                                                          for g in (poetry.get("group", {}) or {}).values())):
        spec = table.get("torch") if isinstance(table, dict) else None
        if isinstance(spec, dict):
            spec = spec.get("version")
        if isinstance(spec, str):
            lines.append("torch" + (spec.replace("^", ">=") if spec.strip() != "*" else ""))
    return "\n".join(lines)


def format_version(version: Version) -> str:
    return ".".join(str(p) for p in version)
