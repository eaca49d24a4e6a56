"""Lazy command loading: ``gapcheck --help`` and ``gapcheck explain`` never import torch.

The root group lists commands from a static table (name -> module, attribute, one-line help).
A command's module is imported only when that command runs or its own ``--help`` is asked
for; listing uses a placeholder that carries the static help line.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperGroup


@dataclass(frozen=True)
class LazyCommand:
    module: str
    attribute: str  # a command function, or a typer.Typer for a command with sub-commands
    help: str
    no_args_is_help: bool = True


def load_command(name: str, spec: LazyCommand) -> Any:
    """The real click command for ``spec`` (imports its module)."""
    target = getattr(importlib.import_module(spec.module), spec.attribute)
    if isinstance(target, typer.Typer):
        command = typer.main.get_command(target)
        command.name = name
        return command
    holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    holder.command(name, no_args_is_help=spec.no_args_is_help)(target)
    return typer.main.get_command(holder)


class _Placeholder(typer.core.TyperCommand):
    """Stands in for a command in the root listing; resolves to the real command when invoked."""

    def __init__(self, name: str, spec: LazyCommand) -> None:
        super().__init__(name=name, help=spec.help, short_help=spec.help)
        self._spec = spec

    def make_context(self, info_name: Any, args: list[str], parent: Any = None, **extra: Any) -> Any:
        return load_command(self.name or "", self._spec).make_context(info_name, args, parent=parent, **extra)


def lazy_group(commands: dict[str, LazyCommand]) -> type[TyperGroup]:
    class LazyGroup(TyperGroup):
        def list_commands(self, ctx: Any) -> list[str]:
            return sorted(set(super().list_commands(ctx)) | set(commands))

        def get_command(self, ctx: Any, cmd_name: str) -> Any:
            if cmd_name in commands:
                return _Placeholder(cmd_name, commands[cmd_name])
            return super().get_command(ctx, cmd_name)

    return LazyGroup
