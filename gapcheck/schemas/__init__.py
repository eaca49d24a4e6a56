"""JSON Schemas of the report envelope, one file per command: ``<command>.schema.json``."""
