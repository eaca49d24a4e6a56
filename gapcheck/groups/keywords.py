"""The library's keyword spellings of group fields (``checkpoint=``, ``input_specs=``, ``rtol=``, ...): what a Python
caller passes to a request; the request keeps only the groups they build."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gapcheck.groups.base import Group
from gapcheck.groups.export import ExportSpec
from gapcheck.groups.inputs import InputSource
from gapcheck.groups.model import ModelSource
from gapcheck.groups.tolerance import ToleranceSpec

#: library keyword -> (group, field)
KEYWORDS: dict[str, tuple[type[Group], str]] = {
    "checkpoint": (ModelSource, "checkpoint"), "factory": (ModelSource, "factory"),
    "unsafe_pickle": (ModelSource, "unsafe_pickle"), "strict": (ModelSource, "strict"),
    "input_specs": (InputSource, "specs"), "inputs_file": (InputSource, "file"),
    "num_samples": (InputSource, "num_samples"), "seed": (InputSource, "seed"),
    "max_input_elements": (InputSource, "max_elements"),
    "rtol": (ToleranceSpec, "rtol"), "atol": (ToleranceSpec, "atol"), "overrides": (ToleranceSpec, "overrides"),
    "exporter": (ExportSpec, "exporter"), "opset": (ExportSpec, "opset"), "cache_dir": (ExportSpec, "cache_dir"),
    "no_cache": (ExportSpec, "no_cache"), "save_onnx": (ExportSpec, "save_onnx"),
}


def with_keywords(groups: Mapping[type[Group], Group], keywords: Mapping[str, Any], owner: str) -> dict[type[Group], Group]:
    """``groups`` with the fields named by library ``keywords`` replaced (each group validated once more)."""
    changes: dict[type[Group], dict[str, Any]] = {}
    for keyword, value in keywords.items():
        if keyword not in KEYWORDS:
            raise TypeError(f"{owner}() got an unexpected keyword argument {keyword!r}")
        group, name = KEYWORDS[keyword]
        if group not in groups:
            raise TypeError(f"{owner}() does not take {keyword!r}")
        changes.setdefault(group, {})[name] = tuple(value) if name == "specs" else value
    return {group: dataclasses.replace(value, **changes[group]) if group in changes else value  # type: ignore[type-var]
            for group, value in groups.items()}


def fill_request(request: Any, values: dict[str, Any], groups: Mapping[str, Group]) -> None:
    """Set the fields of a frozen request dataclass from ``values``: its group fields (``groups``: field name -> the
    default group) given as groups or built from library keywords, the rest as given or their defaults.
    A name that is neither is a TypeError, as a dataclass's own ``__init__`` would raise."""
    owner = type(request).__name__
    keywords = {k: values.pop(k) for k in list(values) if k in KEYWORDS}
    built = {type(default): values.pop(name, None) or default for name, default in groups.items()}
    built = with_keywords(built, keywords, owner)
    for name, default in groups.items():
        object.__setattr__(request, name, built[type(default)])
    for f in dataclasses.fields(request):
        if f.name in groups:
            continue
        if f.name in values:
            value = values.pop(f.name)
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            raise TypeError(f"{owner}() missing required argument {f.name!r}")
        object.__setattr__(request, f.name, tuple(value) if isinstance(value, list) else value)
    if values:
        raise TypeError(f"{owner}() got an unexpected keyword argument {next(iter(values))!r}")
