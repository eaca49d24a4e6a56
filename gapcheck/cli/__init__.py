"""The thin Typer layer: parse, call the library, render, pick the exit code."""
