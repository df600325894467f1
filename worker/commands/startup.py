"""How an operator command starts: this nanobot instance's settings and config read once, and the one way a
command that cannot start says why (a line on stderr, exit code 2)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from worker.errors import NanobotConfigError
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


def run_command(main: Coroutine[Any, Any, int], *errors: type[Exception],
                on_refusal: Callable[[], None] | None = None) -> int:
    """Run a command's coroutine; a startup error (or one of `errors`) refused in one line, then `on_refusal`
    (e.g. the metrics a scrape still needs)."""
    try:
        return asyncio.run(main)
    except (*STARTUP_ERRORS, *errors) as exc:
        code = refuse(exc)
        if on_refusal is not None:
            on_refusal()
        return code
