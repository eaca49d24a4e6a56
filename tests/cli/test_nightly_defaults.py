"""nightly's defaults are written once (issue 18): the config section, the request, the endpoint check and the help
all read the same constants."""
from __future__ import annotations

import dataclasses
import inspect

from typer.testing import CliRunner


def test_one_value_per_default():
    from gapcheck.nightly import NightlyRequest
    from gapcheck.nightly.config import DEFAULT_LOCK_WAIT_S, DEFAULT_MAX_IN_FLIGHT, DriftConfig, NightlyConfig
    from gapcheck.nightly.probe import check_endpoint
    from gapcheck.nightly.status import DriftParameters

    config = NightlyConfig()
    request = inspect.signature(NightlyRequest.__init__).parameters
    assert config.max_in_flight == request["max_in_flight"].default == DEFAULT_MAX_IN_FLIGHT
    assert inspect.signature(check_endpoint).parameters["max_in_flight"].default == DEFAULT_MAX_IN_FLIGHT
    assert config.lock_wait_s == request["lock_wait_s"].default == DEFAULT_LOCK_WAIT_S
    assert DriftConfig().model_dump() == dataclasses.asdict(DriftParameters())


def test_the_help_says_them():
    from gapcheck.cli.app import app
    from gapcheck.nightly.config import DEFAULT_LOCK_WAIT_S, DEFAULT_MAX_IN_FLIGHT

    result = CliRunner().invoke(app, ["nightly", "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
    shown = " ".join(result.output.split())
    assert result.exit_code == 0
    assert f"(default {DEFAULT_MAX_IN_FLIGHT};" in shown and f"(default {DEFAULT_LOCK_WAIT_S:g};" in shown
    assert "--text-samples" in shown and "--tokenizer" in shown
