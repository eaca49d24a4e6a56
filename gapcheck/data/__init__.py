"""Data checks before training: split leakage (:func:`gapcheck.data.api.leakage`) and drift
(:func:`gapcheck.data.api.drift`), both jobs on :mod:`gapcheck.engines`; and a pytest plugin
(:mod:`gapcheck.data.pytest_plugin`). Importing this package imports nothing heavy."""
