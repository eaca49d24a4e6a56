"""Renderers: console (rich), JSON, JUnit XML and HTML. Renderers format; they never decide verdicts."""
