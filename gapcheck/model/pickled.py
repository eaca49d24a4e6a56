"""What a checkpoint holds besides tensors, read without running code from it.

Training scripts save more than weights: timm's ``train.py`` stores its ``args`` (an ``argparse.Namespace``),
Lightning its ``hyper_parameters`` (whatever the model's ``__init__`` was given: a ``pathlib.Path``, an omegaconf
``DictConfig``...). ``torch.load(weights_only=True)`` refuses every class it does not know, so such a file was
refused as a whole although its weights are plain tensors. Two steps make them load, neither runs the file's code:

- :data:`INERT_GLOBALS` are classes allowed to be built (see the comment there for why each is safe);
- every other class the file names is replaced by a stand-in: torch's weights-only unpickler builds our inert
  :class:`StandIn` instead (``torch.serialization.safe_globals`` with ``(class, "module.Name")`` pairs), so the name
  is never imported and nothing it defines runs. A class the file fills like a dict or a list (Lightning's
  ``AttributeDict``, an ``EasyDict`` config) is read as a plain OrderedDict or list instead: torch fills no other
  type, and says so, naming our class, so a second load knows. The loader then checks where stand-ins ended up
  (:func:`stand_ins`): an object stand-in that is the weights (a pickled model) or inside them is refused, named
  with its key; the others (metadata gapcheck never reads) are named in a warning and the weights are used.

torch still refuses what no allowlist can change (its blocked modules ``os``, ``sys``...; opcodes it does not
support); the loader then refuses the file as before.
"""
from __future__ import annotations

import argparse
import pickle
import re
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

# argparse.Namespace is an attribute bag (CPython's Lib/argparse.py: `class Namespace(_AttributeHolder)` defines only
# __init__(**kwargs) -> setattr, __eq__ and __contains__; _AttributeHolder adds __repr__ and two getters). Protocol 2+
# pickles it as NEWOBJ(Namespace, ()) + BUILD(state). For an allowlisted class torch's weights-only unpickler
# (torch/_weights_only_unpickler.py) runs: NEWOBJ -> cls.__new__(cls, *args) (object.__new__; __init__ is not called);
# REDUCE -> Namespace(*args), whose __init__ takes keywords only (positional args raise TypeError); BUILD -> the
# instance's __setstate__ if it has one (Namespace has none, nor has object: Python 3.11 added only __getstate__),
# else inst.__dict__.update(state), a plain dict update (an entry named like a special method lands in the instance
# dict, which Python never consults for special methods), and setattr for a (state, slots) pair: Namespace has no
# properties or slots, so that writes the instance dict too (only `__class__` is special, and accepts nothing but a
# layout-compatible class the same unpickler already allowed). Every value set is built by that same restricted
# unpickler. So a Namespace read from a file runs no code beyond setting attributes.
INERT_GLOBALS: tuple[type, ...] = (argparse.Namespace,)
_MAX_WALK = 2_000_000  # containers and values visited when looking for stand-ins (a checkpoint has thousands)
_MAX_SHOWN = 8
_MAX_NAME = 200  # characters of a class name from the file shown in a message
_MAX_TRIES = 12  # loads of one file while learning names and which classes it uses as dicts or lists
_MAX_NAMES = 1000  # classes a checkpoint may name and still be read with stand-ins (training tools name a few)


class StandIn:
    """An object of a class the file names but gapcheck does not build: it keeps nothing and runs nothing."""

    pickled_name = "?"  # the module.Name the file gave, set on each per-name subclass

    def __new__(cls, *args: Any, **kwargs: Any) -> StandIn:  # NEWOBJ: cls.__new__(cls, *args)
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # REDUCE: cls(*args)
        pass

    def __setstate__(self, state: Any) -> None:  # BUILD: the state is dropped, never applied
        pass


def weights_only_load(source: Path) -> Any:
    """``torch.load(weights_only=True)`` with :data:`INERT_GLOBALS` allowed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own advice is replaced by the loader's messages
        with torch.serialization.safe_globals(list(INERT_GLOBALS)):
            return torch.load(source, map_location="cpu", weights_only=True)


@dataclass(frozen=True)
class Found:
    """A stand-in in a loaded checkpoint: where (keys and list positions), the class the file named, and whether it
    was read as a plain dict or list (a container: its items are what torch's unpickler built, its class is not)."""

    where: tuple[Any, ...]
    name: str
    container: bool


@dataclass(frozen=True)
class StandInLoad:
    """A checkpoint loaded with stand-ins; ``containers`` keeps every dict/list stand-in alive, known by its id."""

    obj: Any
    containers: dict[int, tuple[Any, str]]

    def found(self) -> list[Found]:
        return stand_ins(self.obj, self.containers)


def _stand_in_class(index: int, name: str, mode: str, made: dict[int, tuple[Any, str]]) -> type[StandIn]:
    """The class the file's ``name`` resolves to. torch fills only exact dicts and lists (SETITEMS/APPENDS) and
    BUILDs an OrderedDict's ``__dict__``: a class the file treats as one ("dict", "list": an AttributeDict, an
    EasyDict) is read as an OrderedDict or list, remembered in ``made``; any other is a :class:`StandIn`."""
    attributes: dict[str, Any] = {"pickled_name": name, "__module__": __name__}
    if mode != "object":
        def make(cls: type, *args: Any, **kwargs: Any) -> Any:  # not an instance of cls: __init__ is not called
            container: Any = OrderedDict() if mode == "dict" else []
            made[id(container)] = (container, name)
            return container
        attributes["__new__"] = make
    return type(f"StandIn{index}", (StandIn,), attributes)


# what torch says when a stand-in is used as a dict or a list (torch/_weights_only_unpickler.py)
_CONTAINER_USE = re.compile(r"Can only (SETITEMS?|append|extend)\b[^<]*<class '[\w.]*\.StandIn(\d+)'>")
_UNSUPPORTED = re.compile(r"Unsupported global: GLOBAL ([\w.]+) was not an allowed global")


def load_with_stand_ins(source: Path, names: Iterable[str]) -> StandInLoad | None:
    """The checkpoint loaded weights-only with each class in ``names`` replaced by a stand-in; None when torch
    refuses it even so (a blocked module, an unsupported opcode, a stand-in BUILT with a state it cannot take)."""
    modes = dict.fromkeys(sorted(set(names)), "object")
    made: dict[int, tuple[Any, str]]
    for _ in range(_MAX_TRIES):  # each try may learn one more name, or that one more class is a dict or a list
        if len(modes) > _MAX_NAMES:
            return None
        ordered, made = list(modes), {}  # made: id -> (dict or list stand-in, the name it stands for)
        allowed: list[Any] = [*INERT_GLOBALS,
                              *((_stand_in_class(i, n, modes[n], made), n) for i, n in enumerate(ordered))]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with torch.serialization.safe_globals(allowed):
                    return StandInLoad(torch.load(source, map_location="cpu", weights_only=True), made)
        except pickle.UnpicklingError as exc:
            if not _learn(str(exc), ordered, modes):
                return None
        except (TypeError, AttributeError, ValueError, RuntimeError, IndexError):
            return None
    return None


def _learn(message: str, ordered: list[str], modes: dict[str, str]) -> bool:
    """Update ``modes`` from torch's refusal: a stand-in it had to fill as a dict or list, or a name the scan missed
    (the legacy format's scan leaves out builtins and collections names). False: nothing new to try."""
    used = _CONTAINER_USE.search(message)
    if used is not None:
        name = ordered[int(used.group(2))]
        if modes[name] != "object":
            return False
        modes[name] = "dict" if used.group(1).startswith("SETITEM") else "list"
        return True
    missing = _UNSUPPORTED.search(message)
    if missing is None:
        return False
    name = missing.group(1) if "." in missing.group(1) else f"builtins.{missing.group(1)}"  # torch drops "builtins."
    if name in modes:
        return False
    modes[name] = "object"
    return True


def unsafe_globals(source: Path, scanned: list[str]) -> list[str]:
    """The classes/functions in the file torch's weights-only loader does not allow (torch's own scan of a zip
    checkpoint; ``scanned``, gapcheck's opcode scan, for the legacy format it cannot read)."""
    try:
        found = torch.serialization.get_unsafe_globals_in_checkpoint(source)
    except Exception:  # noqa: BLE001 - legacy (non-zip) files, torch versions without it
        return scanned
    return [name for name in found if name not in {f"{c.__module__}.{c.__qualname__}" for c in INERT_GLOBALS}]


class TooManyObjects(Exception):
    """The checkpoint holds more objects than :data:`_MAX_WALK`: not searched through for stand-ins to the end."""


def stand_ins(obj: Any, containers: dict[int, tuple[Any, str]]) -> list[Found]:
    """Where stand-ins are inside ``obj``, in file order; a dict/list stand-in is named and its items searched too.
    :class:`TooManyObjects` when the search would go past :data:`_MAX_WALK` (never a partial answer: a stand-in
    beyond it could be the weights)."""
    found: list[Found] = []
    seen: set[int] = set()
    todo: list[tuple[tuple[Any, ...], Any]] = [((), obj)]
    while todo and len(seen) < _MAX_WALK:
        where, value = todo.pop()
        if isinstance(value, StandIn) or (isinstance(value, type) and issubclass(value, StandIn)):
            found.append(Found(where, value.pickled_name, False))
            continue
        if id(value) in seen or isinstance(value, (torch.Tensor, str, bytes, int, float)):
            continue
        seen.add(id(value))
        made = containers.get(id(value))
        if made is not None and made[0] is value:
            found.append(Found(where, made[1], True))
        if isinstance(value, Mapping):
            todo.extend(reversed([((*where, k), v) for k, v in value.items()]))
        elif isinstance(value, (list, tuple)):
            todo.extend(reversed([((*where, i), v) for i, v in enumerate(value)]))
        elif isinstance(value, argparse.Namespace):
            todo.extend(reversed([((*where, k), v) for k, v in vars(value).items()]))
    if todo:
        raise TooManyObjects(f"more than {_MAX_WALK:,} objects")
    return found


def describe_stand_ins(found: list[Found], show_path: Callable[[tuple[Any, ...]], str]) -> str:
    """``where (module.Name), ...`` for the first few, with a count of the rest (names from the file are cut)."""
    shown = [f"{show_path(f.where) or 'the file itself'} ({f.name[:_MAX_NAME]}"
             f"{', read as a plain dict or list' if f.container else ''})" for f in found[:_MAX_SHOWN]]
    more = len(found) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")
