"""The golden tests share the nightly tests' fixtures (a tiny CNN, an isolated export cache)."""
from tests.nightly.conftest import isolated_export_cache  # noqa: F401 - registers the autouse fixture here
