"""The option groups: library objects every command is declared from (issue 18; Polygraphy's ``tools/args``).

Each group is a frozen dataclass that owns, once: its fields and defaults, its flags (``OPTIONS``), its config keys
(in its own section, or the command's), its validation (every number finite and in range, headers without control
characters, paths checked before work), and the one method that builds what it describes:

========================  =====================================================
``ModelSource``           ``load()``: the model
``InputSource``           ``samples()``: the inputs
``ToleranceSpec``         ``policy(precision)``: THE tolerance policy
``ExportSpec``            ``obtain()``: one export, one cache key, one cache
``TritonTarget``          ``endpoint()`` / ``target()``: TLS, headers, retries
``EngineSpec``            ``open()``: the data engine
``ReportTargets``         ``check()`` / ``write()`` / ``emit()``: reports and the exit code
========================  =====================================================

The CLI derives its typer options from ``OPTIONS`` (:mod:`gapcheck.cli.groups`). This package imports no torch,
numpy, ONNX or tritonclient: the build methods import what they need when called.
"""
from __future__ import annotations

from gapcheck.groups.base import Group, Opt, check_header, check_number, parse_headers
from gapcheck.groups.engine import EngineSpec
from gapcheck.groups.export import ExportSpec
from gapcheck.groups.inputs import InputSource
from gapcheck.groups.model import ModelSource
from gapcheck.groups.remote import RemoteSpec
from gapcheck.groups.reports import ReportTargets, exit_code
from gapcheck.groups.tolerance import ToleranceSpec
from gapcheck.groups.triton import TritonTarget

#: Every group, in the order a command's --help lists them.
GROUPS: tuple[type[Group], ...] = (ModelSource, InputSource, ToleranceSpec, ExportSpec, TritonTarget, EngineSpec,
                                   ReportTargets)

__all__ = ["GROUPS", "EngineSpec", "ExportSpec", "Group", "InputSource", "ModelSource", "Opt", "RemoteSpec", "ReportTargets",
           "ToleranceSpec", "TritonTarget", "check_header", "check_number", "exit_code", "parse_headers"]
