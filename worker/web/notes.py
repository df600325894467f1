"""The daily notes by day.

The workspace's `memory/YYYY-MM-DD.md` files listed newest first, one day's rendered (worker.web.markdown: escaped
first, its sections linked to their sessions), with the days before and after it and the sessions it notes (read-only
here: the user edits them by hand, the worker only appends)."""

from __future__ import annotations

import asyncio
import re
from datetime import date
from pathlib import Path

from aiohttp import web

from worker.files import read_bytes
from worker.memory.notes import spans
from worker.web.markdown import notes_html
from worker.web.names import names as session_names
from worker.web.paging import window
from worker.web.render import INSTANCE, render, session_url

_DAY_FILE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.md$")
MAX_SHOWN = 2_000_000  # bytes of one day shown; a day file is a few kilobytes
DAYS_LISTED = 31  # days in the list beside the day shown: a year is 12 pages of it


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


def neighbours(names: list[str], day: str) -> tuple[str | None, str | None]:
    """The day files just before and just after `day` (newest-first `names`; `day` need not have a file)."""
    earlier = [name for name in names if name < day]
    later = [name for name in names if name > day]
    return (earlier[0] if earlier else None), (later[-1] if later else None)


async def page(request: web.Request) -> web.Response:
    """One day's notes, links to the days around it, and a page of the list of days.

    One day's notes, links to the day before and after it, and a page of the list of days (the one holding the day
    shown, unless another is asked for)."""
    memory_dir = request.app[INSTANCE].memory.memory_dir
    listed = await asyncio.to_thread(days, memory_dir)
    names = [name for name, _ in listed]
    day = request.query.get("day") or (names[0] if names else "")
    text = await asyncio.to_thread(day_text, memory_dir, day) if day else None
    holding = sum(1 for name in names if name > day) // DAYS_LISTED + 1
    params = {"day": day, "list": request.query.get("list") or str(holding)}
    pager = window(DAYS_LISTED, len(listed), "/notes", params, name="list")
    before, after = neighbours(names, day)
    html = await asyncio.to_thread(notes_html, text, session_url) if text is not None else None
    sessions = list(dict.fromkeys(span.session for span in spans(text or "") if span.session))
    named = await asyncio.to_thread(session_names, request.app[INSTANCE].sessions_dir, sessions)
    return render(
        request,
        "notes.html",
        days=listed[pager.start : pager.stop],
        day=day,
        text=text,
        pager=pager,
        before=before,
        after=after,
        html=html,
        sessions=sessions,
        names=named,
    )
