"""Stages: what turns a raw sample into the tensor a model sees.

A stage is described by a :class:`StageSpec`, which is small and picklable, so worker
processes can rebuild the callable themselves: ``module:callable`` is imported,
``path/to/file.py:callable`` is loaded from the file, a step list becomes a
:class:`~gapcheck.preprocess.recipe.Recipe`, and a plain Python callable is sent
by pickle (top-level functions and picklable objects only).

A stage receives the sample's path as ``str`` (``accepts="path"``, the default) or the
raw file bytes (``accepts="bytes"``, for serving code that receives uploads), and
returns anything array-like: a torch tensor, a numpy array, a PIL image.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import pickle
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gapcheck.errors import ConfigError, UsageError
from gapcheck.model.factory import condense_exception, resolve_callable
from gapcheck.preprocess.recipe import Recipe, parse_steps

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


@dataclass(frozen=True)
class StageSpec:
    name: str
    target: str = ""  # "module:callable" or "path/file.py:callable"
    recipe: Recipe | None = None
    function: Callable[..., Any] | None = None  # a Python callable given directly
    augmented: bool = False  # random augmentation is expected here (training): nondeterminism is not a gap
    accepts: str = "path"  # "path" or "bytes"

    @property
    def description(self) -> str:
        if self.recipe is not None:
            return f"recipe ({len(self.recipe.steps)} steps)"
        if self.function is not None:
            return getattr(self.function, "__qualname__", type(self.function).__name__)
        return self.target


ACCEPTS = ("path", "bytes")


def parse_stage_option(option: str) -> StageSpec:
    """Parse ``name=module:callable`` or ``name=path/to/file.py:callable`` from the command line; a trailing
    ``,bytes`` (or ``,path``, the default) says what the callable takes, as ``accepts`` does in the config."""
    name, sep, target = option.partition("=")
    if not sep or not name or not target:
        raise UsageError(f"--stage {option!r} is not NAME=TARGET", hint="e.g. --stage val=mypkg.data:val_transform")
    target, comma, accepts = target.strip().rpartition(",")
    if not comma or accepts.strip() not in ACCEPTS:
        target, accepts = f"{target}{comma}{accepts}", "path"
    return make_spec(name.strip(), target=target.strip(), accepts=accepts.strip())


def given_text(spec: StageSpec) -> str:
    """What a stage is called with, and how to say otherwise (for the error of a stage that expected the other)."""
    if spec.accepts == "bytes":
        target = spec.target or "TARGET"
        return (f"stage {spec.name} was given the file's bytes (it is declared ,bytes / accepts = \"bytes\"); a stage "
                f"that takes a path must not be declared so: --stage {spec.name}={target} (without ,bytes), or "
                f"accepts = \"path\" in [preprocess.stages.{spec.name}]")
    return (f"stage {spec.name} was given the sample's path (a str); a stage that takes the file's bytes must be "
            f"declared so: --stage {spec.name}={spec.target or 'TARGET'},bytes, or accepts = \"bytes\" in "
            f"[preprocess.stages.{spec.name}]")


_DECODE_BYTES = "cv2.imdecode(np.frombuffer(data, np.uint8), flags)"
#: the OpenCV symptoms of a wrong argument, as :func:`opencv_given_text` opens its hint
OPENCV_SYMPTOMS = {
    "none": "it returned None",  # cv2.imread / cv2.imdecode return None rather than raise
    # None with no read in the stage's code that returns None for the input kind it was given: no declaration to advise
    "none_unexplained": "it returned None",
    "empty": "an OpenCV call got an empty image (None from cv2.imread / cv2.imdecode)",
    # an empty image with no sign of a read given the wrong kind of input: no declaration to advise
    "empty_unexplained": "an OpenCV call got an empty image",
    "filename": "an OpenCV call wanted a file name",
    "array": "an OpenCV call wanted a numpy array",
}


_EMPTY_CAUSES = ("a crop or ROI outside the image, or a read that returned None (cv2.imread returns None for a file it "
                 "cannot open or decode)")


_NONE_CAUSES = ("a function without a return statement returns None, and cv2.imread / cv2.imdecode return None for "
                "what they cannot open or decode")


def _given(spec: StageSpec) -> str:
    if spec.accepts == "bytes":
        return f"stage {spec.name} was given the file's bytes (a bytes object: it is declared ,bytes / accepts = \"bytes\")"
    return f"stage {spec.name} was given the sample's path (a str)"


def opencv_given_text(spec: StageSpec, symptom: str) -> str:
    """What a stage was given, for its error when OpenCV got the wrong kind of argument (``symptom``, a key of
    :data:`OPENCV_SYMPTOMS`), the likely cause and how to declare the stage's input kind; for an empty image that
    nothing ties to the input kind (``empty_unexplained``, ``none_unexplained``), what it was given and the usual causes,
    no declaration."""
    target, lead = spec.target or "TARGET", OPENCV_SYMPTOMS[symptom]
    if symptom == "empty_unexplained":
        return f"{_given(spec)} and {lead}: {_EMPTY_CAUSES}"
    if symptom == "none_unexplained":
        return f"{_given(spec)} and {lead}: {_NONE_CAUSES}"
    if spec.accepts == "bytes":
        given = _given(spec)
        as_path = (f"a stage that reads a path with cv2.imread must not be declared so: --stage {spec.name}={target} "
                   f"(without ,bytes), or accepts = \"path\" in [preprocess.stages.{spec.name}]")
        if symptom == "array":
            return f"{given} and {lead}: decode the bytes with {_DECODE_BYTES}, or {as_path}"
        return f"{given} and {lead}: cv2.imread takes a path (it returns None for bytes); {as_path}; or decode the " \
               f"bytes with {_DECODE_BYTES}"
    given = _given(spec)
    as_bytes = (f"a stage that takes the file's bytes must be declared so: --stage {spec.name}={target},bytes, or "
                f"accepts = \"bytes\" in [preprocess.stages.{spec.name}]")
    if symptom == "array":
        return f"{given} and {lead}: read the path with cv2.imread(path), or {as_bytes} and decode them with {_DECODE_BYTES}"
    if symptom == "filename":
        return f"{given} and {lead}: pass that str to cv2.imread as given, or {as_bytes}"
    return (f"{given} and {lead}: cv2.imdecode returns None unless given the file's bytes as a uint8 array, so "
            f"{as_bytes}; cv2.imread(path) returns None on a file OpenCV cannot decode"
            + ("; a function without a return statement returns None too" if symptom == "none" else ""))


def make_spec(
    name: str,
    *,
    target: str = "",
    steps: list[dict[str, Any]] | None = None,
    function: Callable[..., Any] | None = None,
    augmented: bool = False,
    accepts: str = "path",
) -> StageSpec:
    if not _NAME.match(name or ""):
        raise UsageError(f"stage name {name!r} may only use letters, digits, '_', '-' and '.'")
    if accepts not in ACCEPTS:
        raise UsageError(f"stage {name!r}: accepts must be 'path' or 'bytes', not {accepts!r}")
    given = sum(x is not None and x != "" for x in (target or None, steps, function))
    if given != 1:
        raise UsageError(f"stage {name!r} needs exactly one of: an import target, a step list, a callable")
    recipe = None
    if steps is not None:
        try:
            recipe = parse_steps(steps)
        except ValueError as exc:
            raise ConfigError(f"stage {name!r}: {exc}") from exc
    if target:
        _split_target(name, target)  # validate the shape early, import later (possibly in a worker)
    if function is not None and not callable(function):
        raise UsageError(f"stage {name!r} is not callable: {function!r}")
    return StageSpec(name=name, target=target, recipe=recipe, function=function, augmented=augmented, accepts=accepts)


def _split_target(name: str, target: str) -> tuple[str, str]:
    module, sep, attr = target.rpartition(":")
    if not sep or not module or not attr:
        raise UsageError(
            f"stage {name!r}: target {target!r} must be 'module:callable' or 'path/to/file.py:callable'"
        )
    return module, attr


def resolve(spec: StageSpec) -> Callable[..., Any]:
    """The callable behind a spec; raises UsageError naming the stage when it cannot be loaded."""
    if spec.recipe is not None:
        return spec.recipe
    if spec.function is not None:
        return spec.function
    _split_target(spec.name, spec.target)  # the shape of the target, with a stage-worded message
    return resolve_callable(spec.target, role=f"stage {spec.name!r}")


def locate_target(spec: StageSpec) -> None:
    """Check that a ``module:callable`` / ``file.py:callable`` target exists, without importing the module.

    Only the module's parent packages are imported (that is how Python finds a submodule); the
    attribute itself is checked when a worker resolves the stage.
    """
    module_name, _ = _split_target(spec.name, spec.target)
    label = f"stage {spec.name!r} {spec.target!r}"
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        path = Path(module_name).expanduser()
        if not (path if path.is_absolute() else Path.cwd() / path).is_file():
            raise UsageError(f"{label}: file not found: {path}")
        return
    # The same search path the import will use (see model.factory: the working directory, last).
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.append(cwd)
    found, failure = None, None
    try:
        found = importlib.util.find_spec(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if not (missing and (module_name == missing or module_name.startswith(missing + "."))):
            failure = exc  # a parent package exists but its __init__ imports something missing
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a parent package's __init__ may raise anything
        failure = exc
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)
    if failure is not None:
        raise UsageError(f"{label}: importing '{module_name}' failed: {condense_exception(failure)}")
    if found is None:
        raise UsageError(f"{label}: module '{module_name}' not found",
                         hint=f"check the spelling and that the package is installed or importable from {cwd}")


def check_stages(specs: list[StageSpec], isolated: bool) -> None:
    """Fail early (exit 2) on duplicate names, unloadable targets, or callables workers cannot receive.

    ``isolated``: the stages will run in worker processes. Then import targets are only located
    here (the workers import them; a failure there is the same UsageError), so the parent does
    not pay for torch & co. before any work starts, and callables must pickle.
    """
    if len(specs) < 2:
        raise UsageError("preprocess-audit needs at least two stages to compare", hint="e.g. --stage train=... --stage infer=...")
    names = [s.name for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UsageError(f"duplicate stage name(s): {', '.join(duplicates)}")
    for spec in specs:
        if isolated and spec.target:
            locate_target(spec)
        else:
            resolve(spec)
        if isolated and spec.function is not None:
            try:
                pickle.dumps(spec.function)
            except Exception as exc:
                raise UsageError(
                    f"stage {spec.name!r} cannot be sent to worker processes ({type(exc).__name__}: {exc})",
                    hint="give it as 'module:callable' or 'file.py:callable', or use one worker",
                ) from exc
