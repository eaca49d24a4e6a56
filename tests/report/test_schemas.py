"""Every shipped JSON Schema is a valid Draft 2020-12 schema for the one envelope of its command."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from gapcheck.report.envelope import _HEAD, schema_for

SCHEMAS = sorted((Path(__file__).resolve().parents[2] / "gapcheck" / "schemas").glob("*.schema.json"))


def test_schemas_are_shipped():
    assert any(path.name == "export-diff.schema.json" for path in SCHEMAS)


@pytest.mark.parametrize("path", SCHEMAS, ids=[p.name for p in SCHEMAS])
def test_schema_is_valid_and_requires_the_envelope(path):
    schema = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    command = schema["properties"]["command"]["const"]
    shape = schema["properties"].get("input", {}).get("const")  # another report shape of the same command
    assert path.name == (f"{command}-{shape}.schema.json" if shape else f"{command}.schema.json")
    assert schema_for(command, shape) == schema
    assert set(_HEAD) <= set(schema.get("required", [])), f"{path.name} must require the envelope's head"


def test_unknown_command_has_no_schema():
    with pytest.raises(KeyError, match="no JSON Schema shipped"):
        schema_for("no-such-command")

