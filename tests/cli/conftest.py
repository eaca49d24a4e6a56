"""Fixtures shared by the CLI tests that feed commands hostile inputs and report paths."""
from __future__ import annotations

import pytest


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    """The export cache in the test's own folder (never the user's, never shared between tests).

    Not autouse: the report baseline test runs with the environment it documents."""
    monkeypatch.setenv("GAPCHECK_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def no_model(monkeypatch):
    """Any attempt to load a model fails the test: what is refused must be refused before any work."""
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded: the input should have been refused before any work")
    monkeypatch.setattr("gapcheck.model.loading.load_model", refuse)
