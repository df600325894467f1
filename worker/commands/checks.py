"""What `doctor` prints: each check's level, what it found, and the one line that fixes it."""

from __future__ import annotations

from dataclasses import dataclass
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
