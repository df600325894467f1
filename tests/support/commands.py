"""The `nanobot-summary` commands run in the test's own process, seen as a subprocess would see them.

A command's own process pays the worker's imports again (litellm alone takes seconds); here `cli.main`, the
function the console script calls, runs with the environment, output and exit code a process would have.
Each command keeps one real-process test (tests/worker/commands/test_commands.py and beside it), so the entry
point stays tested.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from unittest import mock

import pytest

from harness.environment import process_env
from harness.sandbox import NanobotHome
from worker.commands import cli
from worker.service.logs import PAYLOAD_LOGGERS


def run_in_process(
    capsys: pytest.CaptureFixture[str], *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`nanobot-summary ARGV` in this process: `env` (when given) is the whole environment, stdout and stderr are
    captured, argparse's exit is the exit code. From a test with a running loop call it through
    asyncio.to_thread (the commands start their own loop). The worker's `run` would raise this process's
    niceness for good: that one step is left out here, the real-process tests of `run` check it."""
    capsys.readouterr()  # what came before is not this command's output
    # Log lines reach stderr as in the command's own process: the worker's (INFO and up; its basicConfig finds
    # pytest's handlers and leaves them) or Python's last resort (WARNING and up) for the others.
    runs_worker = not argv or argv[0] == "run" or (argv[0].startswith("-") and argv[0] not in ("-h", "--help"))
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.INFO if runs_worker else logging.WARNING)
    root = logging.getLogger()
    # `run` sets levels and adds its redacting filter to every handler there is (pytest's too): undone after,
    # so the next tests see logging as they would have.
    loggers = [root, *(logging.getLogger(name) for name in PAYLOAD_LOGGERS)]
    levels = {logger: logger.level for logger in loggers}
    filters = {h: list(h.filters) for logger in loggers for h in logger.handlers}
    root.addHandler(handler)
    root.setLevel(min(root.level, handler.level))
    try:
        with (
            mock.patch.dict(os.environ, env or {}, clear=env is not None),
            mock.patch("worker.commands.run.lower_priority", return_value=0),
        ):
            try:
                code = cli.main(list(argv))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        root.removeHandler(handler)
        for logger, level in levels.items():
            logger.setLevel(level)
        for h, kept in filters.items():
            h.filters[:] = kept
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["nanobot-summary", *argv], code, out.out, out.err)


async def doctor(
    capsys: pytest.CaptureFixture[str], home: NanobotHome, redis_url: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """`nanobot-summary doctor` in this process for `home`; the hooks' probe is pointed at this Python (which has
    no nanobot: that check FAILs, and the tests that use this look at other checks)."""
    return await asyncio.to_thread(
        run_in_process,
        capsys,
        "doctor",
        "--nanobot-python",
        sys.executable,
        env=process_env(home, redis_url, config=True, **env),
    )


def check(out: str, words: str) -> tuple[str, str]:
    """(level, the line and its fix) of the first of doctor's checks whose line holds `words`."""
    lines = out.splitlines()
    at = next((i for i, line in enumerate(lines) if words in line), None)
    assert at is not None, (words, out)
    fix = lines[at + 1] if at + 1 < len(lines) and lines[at + 1].startswith("      ") else ""
    return lines[at].split()[0], lines[at] + "\n" + fix
