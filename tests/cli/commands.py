"""Every command (and sub-command) of the CLI as typer builds it, with its options: what the matrix tests walk."""
from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any

from gapcheck.cli.app import COMMANDS
from gapcheck.cli.lazy import load_command


def commands() -> Iterator[tuple[tuple[str, ...], Any]]:
    """(argv prefix, command) for every leaf command."""
    def walk(path: tuple[str, ...], command: Any) -> Iterator[tuple[tuple[str, ...], Any]]:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                yield from walk((*path, name), sub)
        else:
            yield path, command

    for name, spec in COMMANDS.items():
        yield from walk((name,), load_command(name, spec))


def options(command: Any) -> dict[str, Any]:
    """Flag spelling -> the option (every spelling, hidden ones too)."""
    return {flag: param for param in command.params for flag in getattr(param, "opts", ())}


def annotation(param: Any) -> Any:
    descriptor = getattr(param, "type_descriptor", None)
    return getattr(descriptor, "annotation", None)


def is_float(param: Any) -> bool:
    kind = annotation(param)
    return kind is float or (typing.get_origin(kind) is typing.Union and float in typing.get_args(kind))
