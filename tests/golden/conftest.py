"""The golden tests share the nightly tests' fixtures (a tiny CNN, an isolated export cache) and one recorded bundle."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gapcheck.cli.app import main
from tests.nightly.conftest import (
    FACTORY,
    INPUT,
    isolated_export_cache,  # noqa: F401 - registers the autouse fixture here
    validate_report,
)
from tests.nightly.models import build_tiny


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ckpt") / "tiny.pt"
    torch.save(build_tiny(seed=3).state_dict(), path)
    return path


@pytest.fixture(scope="session")
def recorded(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rec") / "golden"
    report = out.parent / "record.json"
    assert main(["golden", "record", "--checkpoint", str(checkpoint), "--model", FACTORY, "--input", INPUT,
                 "--num-samples", "6", "--exporter", "torchscript", "--tolerance", "*=1e-3,1e-5", "--out", str(out),
                 "--json", str(report)]) == 0
    validate_report(json.loads(report.read_text()), "golden")
    return out
