"""The `nanobot-summary` command's entry point: the command line itself is the worker's (worker/commands/cli.py, in the
worker's own environment, where scripts/run-worker makes `worker` importable). The same package, without the
worker, is installed into nanobot's environment; there the command says where to run it instead of failing
with an import error. Nothing in nanobot loads this module."""

from __future__ import annotations

import importlib
import sys


def main() -> int:
    try:
        # By name, at run time: the hooks never depend on the worker (tests/test_design.py), and this
        # module is only the command's door into it.
        cli = importlib.import_module("worker.commands.cli")
    except ModuleNotFoundError as exc:
        if exc.name not in ("worker", "worker.commands.cli"):
            raise
        print("error: nanobot-summary runs in the worker's environment, not in nanobot's (which holds only the "
              "hooks): run scripts/run-worker once in the checkout, then use <checkout>/.venv/bin/nanobot-summary",
              file=sys.stderr)
        return 2
    return int(cli.main())


if __name__ == "__main__":
    raise SystemExit(main())
