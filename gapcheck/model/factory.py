"""Resolve a model factory given as ``pkg.module:callable`` or ``path/to/file.py:callable``.

The factory is user code: importing it may fail in every way Python code can fail.
Every failure becomes a :class:`~gapcheck.errors.UsageError` with one clear line
(what was asked for, what went wrong), never a traceback.
"""
from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import logging
import os
import sys
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from gapcheck.errors import UsageError, one_line

logger = logging.getLogger(__name__)

SPEC_FORMAT = "'pkg.module:callable' or 'path/to/file.py:callable'"
_MAX_LISTED_NAMES = 10
_GAPCHECK_ROOT = str(Path(__file__).resolve().parents[1])
# A file loaded by path lives in sys.modules under an internal name (see _load_module_from_file); messages show
# the file as the user gave it instead. Internal name -> that file, for the modules loaded in this process.
_SHOWN_FILES: dict[str, str] = {}


def shown_names(text: str) -> str:
    """``text`` with the internal module name of every file loaded by path (``gapcheck_factory_<stem>_<hash>``)
    replaced by the file as the user gave it: ``module 'stages.py' has no attribute 'x'``,
    ``<stages.py:Thing object at ...>``. Messages about a user's code must name their file, not ours."""
    for name, path in _SHOWN_FILES.items():
        if name in text:
            text = text.replace(f"{name}.", f"{path}:").replace(name, path)
    return text


def condense_exception(exc: BaseException) -> str:
    """``Type: first line of message (at file:line)`` — enough to act on, without a traceback."""
    summary = shown_names(one_line(exc))
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    # The innermost frame of the user's own code (not gapcheck, importlib, the standard library
    # or an installed package) is the line they need to look at.
    user_frames = [f for f in frames if _is_user_file(f.filename)]
    if user_frames:
        frame = user_frames[-1]
        summary += f" (at {frame.filename}:{frame.lineno})"
    return summary


def _is_user_file(filename: str) -> bool:
    if filename.startswith("<"):  # "<frozen importlib._bootstrap>", "<string>"
        return False
    resolved = os.path.abspath(filename)
    library_roots = {sysconfig.get_path("stdlib"), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    return not any(resolved.startswith(root + os.sep) for root in (*library_roots, _GAPCHECK_ROOT) if root)


def resolve_callable(spec: str, *, role: str = "factory") -> Callable[..., Any]:
    """Import ``spec`` ("module:attr" or "file.py:attr", attr may be dotted) and return the callable.

    ``role`` names what the spec is for in error messages ("factory", "stage 'train'").
    """
    label = f"{role} {spec!r}"
    if not isinstance(spec, str) or ":" not in spec:
        raise UsageError(f"{label} has no ':' — expected {SPEC_FORMAT}")
    # rpartition keeps Windows drive letters ("C:\\models\\net.py:build") in the module part.
    module_part, _, attr_path = spec.rpartition(":")
    if not module_part or not attr_path:
        raise UsageError(f"{label} is incomplete — expected {SPEC_FORMAT}")
    if _looks_like_path(module_part):
        module = _load_module_from_file(module_part, label)
    else:
        module = _import_module(module_part, label)
    target = _walk_attributes(module, attr_path, label)
    if not callable(target):
        raise UsageError(f"{label} names a {type(target).__name__}, which is not callable")
    return target


def _looks_like_path(module_part: str) -> bool:
    return module_part.endswith(".py") or "/" in module_part or os.sep in module_part


def _import_module(module_name: str, label: str) -> ModuleType:
    # The console script does not put the working directory on sys.path (``python -m`` does);
    # users expect ``--model mypkg.models:build`` to work from their project root, so add it
    # for the duration of the import only, and last, so it never shadows installed packages.
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.append(cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise UsageError(
                f"{label}: module '{missing}' not found",
                hint=f"check the spelling and that the package is installed or importable from {cwd}",
            ) from None
        raise UsageError(f"{label}: importing '{module_name}' failed: {condense_exception(exc)}") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code may raise anything at import time
        raise UsageError(f"{label}: importing '{module_name}' failed: {condense_exception(exc)}") from None
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _load_module_from_file(file_part: str, label: str) -> ModuleType:
    path = Path(file_part).expanduser()
    path = path if path.is_absolute() else Path.cwd() / path
    if not path.is_file():
        raise UsageError(f"{label}: file not found: {path}")
    resolved = path.resolve()
    # A unique name per file, so two different "model.py" files never collide in sys.modules.
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
    module_name = f"gapcheck_factory_{resolved.stem.replace('-', '_')}_{digest}"
    if module_name in sys.modules:  # loaded before in this process: the same file gives the same module
        return sys.modules[module_name]
    _SHOWN_FILES.setdefault(module_name, file_part)
    module_spec = importlib.util.spec_from_file_location(module_name, resolved)
    if module_spec is None or module_spec.loader is None:
        raise UsageError(f"{label}: {path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    # Registered before executing: dataclasses, typing and pickling look the module up by name.
    sys.modules[module_name] = module
    # Sibling imports ("from layers import Block") should work as they would when running the file.
    directory = str(resolved.parent)
    added = directory not in sys.path
    if added:
        sys.path.insert(0, directory)
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code may raise anything at import time
        sys.modules.pop(module_name, None)
        raise UsageError(f"{label}: loading {path} failed: {condense_exception(exc)}") from None
    finally:
        if added and directory in sys.path:
            sys.path.remove(directory)
    logger.debug("loaded factory module %s from %s", module_name, resolved)
    return module


def _walk_attributes(module: ModuleType, attr_path: str, label: str) -> Any:
    target: Any = module
    walked = module.__name__
    for part in attr_path.split("."):
        if not part:
            raise UsageError(f"{label}: empty attribute name in '{attr_path}'")
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError(
                shown_names(f"{label}: '{walked}' has no attribute '{part}'"),
                hint=_available_names_hint(target, part),
            ) from None
        except Exception as exc:  # noqa: BLE001 - properties and module __getattr__ run user code
            raise UsageError(shown_names(f"{label}: reading '{walked}.{part}' failed: {condense_exception(exc)}")) from None
        walked = f"{walked}.{part}"
    return target


def _available_names_hint(obj: Any, wanted: str) -> str:
    names = [name for name in dir(obj) if not name.startswith("_")]
    if not names:
        return "it defines no public names"
    close = difflib.get_close_matches(wanted, names, n=3)
    callables = [name for name in names if name not in close and callable(getattr(obj, name, None))]
    others = [name for name in names if name not in close and name not in callables]
    listed = (close + callables + others)[:_MAX_LISTED_NAMES]
    more = len(names) - len(listed)
    suffix = f" (and {more} more)" if more > 0 else ""
    prefix = f"did you mean {', '.join(close)}? " if close else ""
    return f"{prefix}available: {', '.join(listed)}{suffix}"
