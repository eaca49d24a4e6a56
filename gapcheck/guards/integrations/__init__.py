"""Integrations built on the same guards: a Lightning callback and an Accelerate helper.

Each module imports its framework inside a guard: importing it without the framework installed works,
and using it raises a UsageError that says what to install.
"""
