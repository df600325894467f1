"""The daily notes by day: the workspace's `memory/YYYY-MM-DD.md` files listed newest first, one day's shown as
the text it is (read-only here: the user edits them by hand, the worker only appends)."""

from __future__ import annotations

import asyncio
import re
from datetime import date
from pathlib import Path

from aiohttp import web

from worker.files import read_bytes
from worker.web.render import INSTANCE, render

_DAY_FILE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.md$")
MAX_SHOWN = 2_000_000  # bytes of one day shown; a day file is a few kilobytes


def days(memory_dir: Path) -> list[tuple[str, int]]:
    """(day, size in bytes) of every day file, newest first."""
    found = []
    try:
        entries = list(memory_dir.iterdir())
    except OSError:
        return []
    for path in entries:
        match = _DAY_FILE.match(path.name)
        if match and path.is_file():
            found.append((match.group(1), path.stat().st_size))
    return sorted(found, reverse=True)


def day_text(memory_dir: Path, day: str) -> str | None:
    """The day's notes as text, or None for no such day (a name that is no date is never read)."""
    try:
        wanted = date.fromisoformat(day).isoformat()
    except ValueError:
        return None
    raw = read_bytes(memory_dir / f"{wanted}.md")
    return raw[:MAX_SHOWN].decode("utf-8", errors="replace") if raw is not None else None


async def page(request: web.Request) -> web.Response:
    memory_dir = request.app[INSTANCE].memory.memory_dir
    listed = await asyncio.to_thread(days, memory_dir)
    day = request.query.get("day") or (listed[0][0] if listed else "")
    text = await asyncio.to_thread(day_text, memory_dir, day) if day else None
    return render(request, "notes.html", days=listed, day=day, text=text)
