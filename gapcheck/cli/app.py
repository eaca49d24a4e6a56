"""The root Typer app and the CLI's one error boundary.

Each command lives in its own module (``gapcheck/cli/<command>.py``) and is joined
here. :func:`main` is the only place where exceptions become exit codes:
0 no gap, 1 gap found, 2 usage/config/input error, 3 backend or endpoint failure.
"""
from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Sequence

import typer
from rich.console import Console
from rich.markup import escape

from gapcheck.cli.lazy import LazyCommand, lazy_group
from gapcheck.errors import ExitCode, GapcheckError, exit_code_for, one_line
from gapcheck.report.text import safe_line, safe_text

#: Every command: name -> (module, attribute, one-line help). Modules load only when their command runs,
#: so `gapcheck --help` and `gapcheck explain` never import torch. A new command is one line here.
COMMANDS: dict[str, LazyCommand] = {
    "export-diff": LazyCommand("gapcheck.cli.export_diff", "command",
                               "Compare a checkpoint with its ONNX export (and a Triton deployment), layer by layer."),
    "preprocess-audit": LazyCommand("gapcheck.cli.preprocess_audit", "command",
                                    "Run the same raw samples through train/val/inference preprocessing; name root causes."),
    "triton-audit": LazyCommand("gapcheck.cli.triton_audit", "command",
                                "Audit a Triton deployment's config and metadata against the ONNX graph."),
    "export": LazyCommand("gapcheck.cli.export", "command",
                          "Export a checkpoint to ONNX and a Triton model repository."),
    "explain": LazyCommand("gapcheck.cli.explain", "command", "Explain a finding code (or --list them all).",
                           no_args_is_help=False),
    "golden": LazyCommand("gapcheck.cli.golden", "app", "Record or verify a golden bundle (record / verify)."),
    "nightly": LazyCommand("gapcheck.cli.nightly", "command", "Check deployed endpoints against a golden bundle; record history; alert."),
    "history": LazyCommand("gapcheck.cli.history", "command", "Show the nightly history: statuses and error trends.", no_args_is_help=False),
    "lint": LazyCommand("gapcheck.cli.lint", "command", "Static checks for training code (leakage, DDP, AMP, evaluation, seeds)."),
    "leakage": LazyCommand("gapcheck.cli.leakage", "command", "Find samples shared across data splits: exact/near duplicates, groups, labels, target leakage."),
    "drift": LazyCommand("gapcheck.cli.drift", "command", "Compare a current split's distributions with a reference (KS + effect sizes, BH, coverage)."),
    "cache": LazyCommand("gapcheck.cli.cache", "app", "Show, trim or empty the export cache (info / prune / clear)."),
    "precision": LazyCommand("gapcheck.cli.precision", "command", "FP16/INT8: find the modules that break, write the fixed model, verify it."),
}

app = typer.Typer(
    name="gapcheck",
    help="Find where a PyTorch model's behaviour breaks between training, validation and inference.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=lazy_group(COMMANDS),
)


class _OneLineFormatter(logging.Formatter):
    """Log lines quote outside text (file names, stage errors): one line each, control characters neutralized.

    Only the message is cleaned; a traceback that ``--debug`` adds keeps its own lines.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        return safe_line(super().formatMessage(record))


@app.callback()
def root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks and debug logs."),
) -> None:
    """gapcheck: exit 0 no gap, 1 gap found, 2 usage/config/input error, 3 backend/endpoint failure."""
    handler = logging.StreamHandler()
    handler.setFormatter(_OneLineFormatter("%(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, handlers=[handler])




def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code (``python -m gapcheck`` and the ``gapcheck`` script exit with it)."""
    args = _config_only(list(sys.argv[1:] if argv is None else argv))
    debug = "--debug" in args
    err = Console(emoji=False, stderr=True, highlight=False, soft_wrap=True)
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name="gapcheck", standalone_mode=False)
    except typer.Exit as exc:  # raised by a command with its exit code
        return int(exc.exit_code)
    except typer.TyperException as exc:  # bad options, missing arguments (typer's click exceptions)
        show = getattr(exc, "show", None)
        show() if show else err.print(f"error: {escape(exc.format_message())}")
        return ExitCode.USAGE
    except typer.Abort:
        err.print("aborted")
        return ExitCode.USAGE
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    except GapcheckError as exc:
        if debug:
            err.print(escape(traceback.format_exc()))
        err.print(f"[bold red]error:[/bold red] {escape(safe_text(_bounded(str(exc))))}{_flag_hint(exc)}")
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the boundary: anything else is a failure, never a pass
        if debug:
            err.print(escape(traceback.format_exc()))
        err.print(f"[bold red]error:[/bold red] {escape(safe_text(one_line(exc)))}")
        if not debug:
            err.print("[dim](run with --debug for the traceback)[/dim]")
        return exit_code_for(exc)
    # In non-standalone mode the return value is ctx.exit()'s code or the command's own return value.
    return int(result) if isinstance(result, int) else ExitCode.NO_GAP


#: The config sections that can drive a command with no flags at all (``[text]`` samples and stages, ``[nightly]``
#: endpoints, ...). A bare ``gapcheck CMD`` runs when one of them is set; otherwise it shows the command's help.
CONFIG_SECTIONS: dict[str, tuple[str, ...]] = {
    "preprocess-audit": ("preprocess", "text"),
    "leakage": ("leakage",),
    "drift": ("drift",),
    "nightly": ("nightly",),
    "export-diff": ("export_diff",),
    "precision": ("precision",),
    "lint": ("lint",),
}


def _config_only(args: list[str]) -> list[str]:
    """``[CMD, "--"]`` for a bare ``gapcheck CMD`` whose config section is set (the command then runs and says what
    is missing, if anything); ``args`` unchanged otherwise (a bare command without config shows its help)."""
    if len(args) != 1 or args[0] not in CONFIG_SECTIONS:
        return args
    from gapcheck.config import load_config

    try:
        tables = load_config().sections
    except GapcheckError:  # a broken config: the command reports it in one line (exit 2), rather than the help
        return [*args, "--"]
    return [*args, "--"] if any(tables.get(name) for name in CONFIG_SECTIONS[args[0]]) else args


MESSAGE_LIMIT = 2000  # characters of one error message: a value echoed back (a 100k-character flag) is cut


def _bounded(text: str) -> str:
    """One readable message even when it quotes a huge user value: its head and tail, the middle counted."""
    if len(text) <= MESSAGE_LIMIT:
        return text
    half = MESSAGE_LIMIT // 2
    return f"{text[:half]} ... ({len(text) - 2 * half} characters not shown) ... {text[-half:]}"


def _flag_hint(exc: GapcheckError) -> str:
    """The library names a parameter; the CLI names its flag."""
    from gapcheck.cli.options import flag_for

    flag = flag_for(exc.parameter)
    return f"\n[dim](see {flag})[/dim]" if flag else ""
