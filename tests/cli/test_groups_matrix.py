"""Commands x groups: every command that loads a model, talks to Triton, writes reports or picks an engine accepts
the same spellings, with the same defaults, for what it shares (issue 18)."""
from __future__ import annotations

import pytest

from gapcheck.groups import EngineSpec, ExportSpec, InputSource, ModelSource, ReportTargets, ToleranceSpec, TritonTarget
from tests.cli.commands import commands, options

#: which commands must take which group (the options they leave out are listed in SKIPPED)
USES = {
    ModelSource: {"export-diff", "golden record", "export"},
    InputSource: {"export-diff", "golden record", "export", "nightly"},
    ToleranceSpec: {"export-diff", "golden record"},
    ExportSpec: {"export-diff", "golden record", "export", "cache info", "cache prune", "cache clear"},
    TritonTarget: {"export-diff", "triton-audit", "nightly"},
    EngineSpec: {"leakage", "drift", "preprocess-audit"},
    ReportTargets: {"export-diff", "preprocess-audit", "triton-audit", "export", "golden record", "golden verify",
                    "nightly", "history", "leakage", "drift", "lint"},
}
#: (command, group) -> options the command does not take, and why (the declarations in gapcheck/cli say the same)
SKIPPED = {
    ("golden record", ExportSpec): {"save_onnx"},  # the bundle holds the ONNX file
    ("export", InputSource): {"file", "num_samples", "seed"},  # one random draw traces the export
    ("nightly", InputSource): {"specs", "file", "num_samples", "seed"},  # the bundle holds the inputs; text only
    ("triton-audit", TritonTarget): {"deadline_s"},  # the maps pair renamed tensors (gapcheck.triton.names)
    ("export-diff", TritonTarget): {"deadline_s"},
    ("nightly", TritonTarget): {"url", "model", "protocol", "version"},  # --endpoint NAME=URL names each one
    **{(c, ExportSpec): {"exporter", "opset", "no_cache", "save_onnx"} for c in ("cache info", "cache prune",
                                                                                  "cache clear")},
}
#: older spellings a command still accepts, hidden, though a group now owns the flag: (command, flag)
LEGACY = {("preprocess-audit", "--tolerance")}  # now --range-tolerance (a fraction, not PATTERN=RTOL,ATOL)
#: a command's own option that shares a group's spelling, meaning and default: (command, flag)
SAME_MEANING = {("drift", "--seed")}  # the seed of drift's row sample, default 0 like --seed everywhere
#: (command, field) -> the command's own default, on purpose
DEFAULTS = {("golden record", "num_samples"): 16, ("preprocess-audit", "workers"): 2}

ALL = {" ".join(path): command for path, command in commands()}


def test_the_table_names_real_commands():
    named = set().union(*USES.values())
    assert named <= set(ALL), named - set(ALL)


def _check(name: str, group, flags: dict) -> None:
    """``name`` takes every option of ``group`` (less its listed skips) with the group's spelling and default."""
    skipped = SKIPPED.get((name, group), set())
    for opt in group.OPTIONS:
        if opt.field in skipped:
            assert opt.flag not in flags, f"{name} takes {opt.flag} though it is listed as skipped"
            continue
        assert opt.flag in flags, f"{name} lacks {opt.flag} ({group.__name__}.{opt.field})"
        for alias in opt.aliases:
            assert alias in flags and flags[alias].hidden, f"{name}: the older spelling {alias} is not accepted"
        default = DEFAULTS.get((name, opt.field), group.defaults()[opt.field])
        shown = flags[opt.flag].default
        if opt.field == "strict":  # --non-strict is the negative form
            shown = not shown
        if isinstance(default, (tuple, dict)):
            assert not shown and not default, f"{name} {opt.flag}: default {shown!r}"
        else:
            assert shown == default, f"{name} {opt.flag}: default {shown!r}, the group's is {default!r}"


@pytest.mark.parametrize("group", list(USES), ids=lambda g: g.__name__)
def test_every_command_takes_the_group_with_one_spelling_and_one_default(group):
    for name in sorted(USES[group]):
        _check(name, group, options(ALL[name]))


def test_any_command_that_takes_one_option_of_a_group_takes_the_group():
    """A command added later (not in USES) that takes, say, --checkpoint takes all of ModelSource, spelled and
    defaulted the same: a group is declared whole, never copied flag by flag."""
    owners = {opt.flag: group for group in USES for opt in group.OPTIONS}
    for name, command in ALL.items():
        flags = options(command)
        for group in {owners[f] for f in flags if f in owners}:
            own = [f for f in flags if owners.get(f) is group and (name, f) not in LEGACY | SAME_MEANING]
            if own and name not in USES[group]:
                _check(name, group, flags)
        for flag in flags:
            if (name, flag) in LEGACY:
                assert flags[flag].hidden, f"{name}: the older spelling {flag} must be hidden"
            if (name, flag) in SAME_MEANING:
                field = next(o.field for o in owners[flag].OPTIONS if o.flag == flag)
                assert flags[flag].default == owners[flag].defaults()[field]
