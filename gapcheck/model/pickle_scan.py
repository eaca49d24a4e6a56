"""Read which Python globals a pickle references, without unpickling it (pickletools parses opcodes only).

Used to name the classes a checkpoint would import and run before refusing it.
"""
from __future__ import annotations

import pickletools
import zipfile
from pathlib import Path
from typing import IO


def pickled_globals(path: Path) -> list[str] | None:
    """Globals (beyond tensor plumbing) a checkpoint's pickle references, read without executing it.

    None when the file is not a pickle at all (random bytes, a damaged archive).
    """
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                pkl_names = [name for name in archive.namelist() if name.endswith("data.pkl")]
                if not pkl_names:
                    return None
                with archive.open(pkl_names[0]) as stream:
                    names = _scan_globals(stream, max_pickles=1)
        else:
            # Legacy format: magic number, protocol, sys info, then the object; raw storage bytes
            # follow, so read the pickles from the open file rather than the whole file into memory.
            with path.open("rb") as stream:
                names = _scan_globals(stream, max_pickles=4)
    except Exception:  # noqa: BLE001 - any parse failure means "not a pickle we understand"
        return None
    found: list[str] = []
    for name in names:
        if name not in found and not _is_tensor_plumbing(name):
            found.append(name)
    return found


def _scan_globals(stream: IO[bytes], max_pickles: int) -> list[str]:
    """Names of GLOBAL/STACK_GLOBAL references in up to ``max_pickles`` consecutive pickles.

    pickletools only parses opcodes; nothing is imported or executed. The first pickle must
    parse; later ones may be absent (raw storage bytes follow the pickles in the legacy format).
    """
    names: list[str] = []
    for index in range(max_pickles):
        try:
            names.extend(_scan_one_pickle(stream))
        except Exception:  # noqa: BLE001
            if index == 0:
                raise
            break
    return names


def _scan_one_pickle(stream: IO[bytes]) -> list[str]:
    names: list[str] = []
    strings: list[str] = []  # recent string pushes: STACK_GLOBAL takes module and name from the stack
    memo: dict[int, str] = {}
    last_string: str | None = None
    for opcode, arg, _ in pickletools.genops(stream):
        name = opcode.name
        if name == "GLOBAL":
            names.append(str(arg).replace(" ", "."))
        elif name == "STACK_GLOBAL" and len(strings) >= 2:
            names.append(f"{strings[-2]}.{strings[-1]}")
        if isinstance(arg, str) and ("UNICODE" in name or "STRING" in name):
            strings.append(arg)
            last_string = arg
            continue
        if name in ("BINPUT", "LONG_BINPUT", "PUT") and last_string is not None and isinstance(arg, (int, str)):
            memo[int(arg)] = last_string
        elif name == "MEMOIZE" and last_string is not None:
            memo[len(memo)] = last_string
        elif name in ("BINGET", "LONG_BINGET", "GET") and isinstance(arg, (int, str)) and int(arg) in memo:
            strings.append(memo[int(arg)])
            continue
        if name not in ("BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE"):
            last_string = None
        if name == "STOP":
            break
    return names


def _is_tensor_plumbing(name: str) -> bool:
    """Globals every plain state dict references (storages, dtypes, rebuild helpers, OrderedDict)."""
    if name.startswith(("torch._utils.", "torch._tensor.", "torch.storage.", "collections.", "builtins.", "__builtin__.",
                        "_codecs.")):
        return True
    return name.startswith("torch.") and name.count(".") == 1  # torch.FloatStorage, torch.float32, torch.device
