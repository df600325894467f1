"""The project's scripts (scripts/*.py) loaded as modules, so a test runs a benchmark's `main` in its own process
instead of paying the worker's imports again in a new one."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py as a fresh module (its `if __name__ == "__main__"` part does not run)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec and spec.loader, name
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
