"""What `doctor` prints: each check's level, what it found, and the one line that fixes it."""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

Level = Literal["ok", "warn", "FAIL"]


@dataclass
class Check:
    level: Level
    what: str
    fix: str = ""  # the one line that fixes it (a command, or what to set where); for an ok check, what to do next


def render(checks: list[Check]) -> str:
    lines = []
    for check in checks:
        lines.append(f"{check.level:<4}  {check.what}")
        if check.fix and check.level != "ok":
            lines.append(f"      fix: {check.fix}")
        elif check.fix:
            lines.append(f"      next: {check.fix}")
    failed = sum(c.level == "FAIL" for c in checks)
    warned = sum(c.level == "warn" for c in checks)
    lines.append("all good" if not failed and not warned else f"{failed} problem(s), {warned} warning(s)")
    return "\n".join(lines)


# The command's name where a line tells the user to run it (not `nanobot-summary-worker`, nor a key's prefix).
_COMMAND = re.compile(r"(?<![\w./-])nanobot-summary(?= )")


def command_here() -> str:
    """How to type this command here.

    `nanobot-summary` when PATH finds this one, else its path (relative to the current folder when it lies under it, as
    a checkout's `.venv/bin/nanobot-summary`)."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    script = argv0 if argv0.name == "nanobot-summary" else Path(sys.executable).parent / "nanobot-summary"
    found = shutil.which("nanobot-summary")
    if not script.exists() or (found and Path(found).resolve() == script.resolve()):
        return "nanobot-summary"
    try:
        return str(script.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(script.absolute())


def as_run_here(checks: list[Check]) -> list[Check]:
    """The checks with each `nanobot-summary ...` they suggest written as it runs here (command_here)."""
    command = command_here()
    if command == "nanobot-summary":
        return checks
    return [
        replace(check, what=_COMMAND.sub(command, check.what), fix=_COMMAND.sub(command, check.fix)) for check in checks
    ]
