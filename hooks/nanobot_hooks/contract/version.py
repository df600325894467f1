"""The one version of this project (the hooks and the worker are released together) and the version of the
contract between them (records, keys, session marker, recall index): a change either side must understand."""

__all__ = ["CONTRACT", "RELEASE"]

RELEASE = "0.2.0"
CONTRACT = 1
