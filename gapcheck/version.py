"""gapcheck's version, on the lowest floor: reports, bundles and history rows stamp it without importing the
package face (``gapcheck/__init__.py`` re-exports it as ``gapcheck.__version__``). Keep it equal to
``[project] version`` in pyproject.toml (a test checks)."""
from __future__ import annotations

__version__ = "0.1.0"
