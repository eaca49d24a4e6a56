from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a few fixture files (flagged and clean), as the working directory."""
    for code in ("GC101", "GC201", "GC801", "GC802"):
        for name in ("case.py", "ok.py"):
            shutil.copy(FIXTURES / code / name, tmp_path / f"{code.lower()}_{name}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GAPCHECK_LINT__SELECT", raising=False)
    return tmp_path
