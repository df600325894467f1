"""The benchmarks and examples (bench/*.py) imported afresh, so a test runs a benchmark's `main` in its own process
instead of paying the worker's imports again in a new one."""

from __future__ import annotations

import importlib
from types import ModuleType


def load_bench(name: str) -> ModuleType:
    """bench/<name>.py as the module bench.<name>, run again from the top (a benchmark may keep state in its module;
    its `if __name__ == "__main__"` part does not run)."""
    return importlib.reload(importlib.import_module(f"bench.{name}"))
