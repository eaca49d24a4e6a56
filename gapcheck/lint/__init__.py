"""``gapcheck lint``: the training-code review checklist as a static checker.

Library entry point: :func:`lint_paths` (files, folders and notebooks -> :class:`LintResult`). The engine
(:mod:`.engine`) runs the rules of :mod:`.rules` on each file with the symbol/flow layer of
:mod:`.symbols`; notebooks become one module through :mod:`.notebook`; rules whose risk depends on the
torch version read it through :mod:`.versions`; :mod:`.fix` (LibCST, imported only for ``--fix``/``--diff``)
rewrites the mechanical findings. Codes and their documentation live in :mod:`gapcheck.codes.lint`.
"""
from __future__ import annotations

from gapcheck.lint.config import LintSection, Selection, make_selection, section_from
from gapcheck.lint.engine import lint_paths
from gapcheck.lint.result import FileError, LintResult

__all__ = ["FileError", "LintResult", "LintSection", "Selection", "lint_paths", "make_selection", "section_from"]
