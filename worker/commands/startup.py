"""How an operator command starts.

This nanobot instance's settings and config read once, and the one way a command that cannot start says why (a line on
stderr, exit code 2)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from worker.errors import NanobotConfigError
from worker.files import alive, state_folder
from worker.nanobot.config import NanobotConfig
from worker.settings import Settings, SettingsError, load_settings

# What stops a command before it does anything: its settings or nanobot's config cannot be read.
STARTUP_ERRORS: tuple[type[Exception], ...] = (SettingsError, NanobotConfigError)


def instance() -> tuple[Settings, NanobotConfig]:
    """The settings bound to this instance's namespace (its queue and keys), and nanobot's config they follow."""
    settings = load_settings()
    nanobot = NanobotConfig.load(settings.config_path)
    return settings.for_workspace(nanobot.workspace), nanobot


def refuse(reason: object) -> int:
    """Say why the command cannot go on; its exit code."""
    print(f"error: {reason}", file=sys.stderr)
    return 2


def run_command(
    main: Coroutine[Any, Any, int], *errors: type[Exception], on_refusal: Callable[[], None] | None = None
) -> int:
    """Run a command's coroutine.

    A startup error (or one of `errors`) refused in one line, then `on_refusal` (e.g. the metrics a scrape still
    needs)."""
    try:
        return asyncio.run(main)
    except (*STARTUP_ERRORS, *errors) as exc:
        code = refuse(exc)
        if on_refusal is not None:
            on_refusal()
        return code


@contextlib.contextmanager
def waiting_note(config_path: Path) -> Iterator[None]:
    """While `nanobot-summary run` waits for nanobot's first turn (the workspace's id).

    A note in the state folder naming this process and nanobot's config, which doctor reads (waiting_worker)."""
    path = state_folder() / f"worker-{os.getpid()}.waiting"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.write_text(json.dumps({"pid": os.getpid(), "config": str(config_path)}), encoding="utf-8")
    except OSError:
        pass  # a read-only home: doctor then only says nanobot has not run
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def waiting_worker(config_path: Path) -> int | None:
    """The process id of a running worker waiting for the first turn of the nanobot of this config, or None."""
    for note in sorted(state_folder().glob("worker-*.waiting")):
        try:
            found = json.loads(note.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        pid = found.get("pid") if isinstance(found, dict) else None
        if isinstance(pid, int) and found.get("config") == str(config_path) and alive(pid):
            return pid
    return None
