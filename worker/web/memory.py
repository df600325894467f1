"""The memory page: the facts of MEMORY.md's managed part with their provenance (the sidecar's session, day and
importance, the heading they sit under, a pin), the facts held for the next quiet moment, a search; forgetting a
fact (held or written), editing or pinning one, and undoing any of these (worker.memory.longterm.forget and
.edit: the worker's own lock and write rules; the user's own lines are counted here, never changed)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from filelock import Timeout

from worker.errors import MemoryFilesError
from worker.files import read_bytes
from worker.memory.longterm import load_meta, locate, parse, read_held, sidecar_path
from worker.memory.longterm.edit import EditRefused, edit_fact, pin_fact
from worker.memory.longterm.forget import Forgotten, forget_fact, forget_held
from worker.memory.longterm.merge import fact_text
from worker.memory.longterm.part import outside_lines
from worker.memory.recall_index import RecallIndex, RecallIndexError
from worker.text.language import language as language_table
from worker.web.guard import BROWSER, form_of, see_other
from worker.web.instance import Instance
from worker.web.limits import fact_too_long
from worker.web.render import INSTANCE, render
from worker.web.undo import UNDO, Edited, Pinned, describe, put_back

log = logging.getLogger("worker.web")


@dataclass(frozen=True)
class FactRow:
    text: str
    heading: str
    importance: int
    date: str
    session: str | None
    pinned: bool


def read_facts(path: Path, today: str) -> tuple[list[FactRow], int]:
    """The managed part's facts in the file's order, and how many lines of the user's own the file has."""
    raw = read_bytes(path)
    text = raw.decode("utf-8", errors="replace") if raw is not None else ""
    span = locate(text)
    if span is None:
        return [], len(outside_lines(text))
    part = parse(text[span[0]:span[1]], today, meta=load_meta(sidecar_path(path)))
    headings = language_table(part.language).memory_groups
    rows = [FactRow(line.text, headings.get(line.group, line.group), line.importance, line.date, line.session,
                    line.pinned) for line in part.lines]
    return rows, len(outside_lines(text[:span[0]]) + outside_lines(text[span[1]:]))


def matches(row: FactRow, query: str) -> bool:
    wanted = query.casefold()
    return any(wanted in (value or "").casefold() for value in (row.text, row.heading, row.date, row.session))


async def page(request: web.Request) -> web.Response:
    instance = request.app[INSTANCE]
    path = instance.memory.memory_path
    rows, own_lines = await asyncio.to_thread(read_facts, path, instance.today())
    query = request.query.get("q", "").strip()
    shown = [row for row in rows if matches(row, query)] if query else rows
    held = [(fact.text, h.batch.session, h.held_at) for h in await asyncio.to_thread(read_held, path)
            for fact in h.batch.facts]
    ticket = request.query.get("undo", "")
    change = request.app[UNDO].peek(BROWSER.get(), ticket)
    return render(request, "memory.html", facts=shown, total=len(rows), query=query, held=held,
                  own_lines=own_lines, undo=describe(change) if change else None, ticket=ticket,
                  note=request.query.get("note", ""), max_facts=instance.settings.memory_max_facts)


async def forget(request: web.Request) -> web.Response:
    """Forgets a fact of MEMORY.md's managed part (`held` in the form: one still held for it)."""
    instance = request.app[INSTANCE]
    form = await form_of(request)
    change = forget_held if form.get("held") else forget_fact
    args = (form.get("text", ""),) if form.get("held") else (form.get("text", ""), instance.today())
    return await _changed(request, await _write(request, change, instance.memory.memory_path, *args))


async def edit(request: web.Request) -> web.Response:
    """Gives a fact of the managed part a new text (`text`: the fact as the page showed it, `new`: its new text)."""
    instance = request.app[INSTANCE]
    form = await form_of(request)
    if (refused := fact_too_long(request, form)) is not None:
        return refused
    try:
        before = await _write(request, edit_fact, instance.memory.memory_path, form.get("text", ""),
                              form.get("new", ""), instance.today())
    except EditRefused as exc:
        return render(request, "error.html", status=400, title="The fact was not changed", message=str(exc))
    if isinstance(before, Forgotten):
        before = Edited(before, fact_text(form.get("new", "")))
    return await _changed(request, before)


async def pin(request: web.Request) -> web.Response:
    """Pins a fact against the cap's eviction (`pin` 1), or unpins it (0)."""
    instance = request.app[INSTANCE]
    form = await form_of(request)
    pinned = form.get("pin") == "1"
    before = await _write(request, pin_fact, instance.memory.memory_path, form.get("text", ""), pinned,
                          instance.today())
    return await _changed(request, Pinned(before.text, pinned) if isinstance(before, Forgotten) else before)


async def _changed(request: web.Request, done: Any) -> web.Response:
    """After a change: the page saying what changed, with its undo; the recall index follows MEMORY.md."""
    if isinstance(done, web.Response):
        return done
    if not done:
        return see_other("/memory?note=missing")
    if not isinstance(done, list):
        await refresh_recall(request.app[INSTANCE])
    ticket = request.app[UNDO].put(BROWSER.get(), done)
    return see_other(f"/memory?undo={ticket}")


async def undo(request: web.Request) -> web.Response:
    instance = request.app[INSTANCE]
    change = request.app[UNDO].take(BROWSER.get(), (await form_of(request)).get("ticket", ""))
    if change is None:
        return see_other("/memory?note=gone")
    done = await _write(request, put_back, instance.memory.memory_path, change, instance.today())
    if isinstance(done, web.Response):
        return done
    if not isinstance(change, list):
        await refresh_recall(instance)
    return see_other("/memory?note=restored")


async def _write(request: web.Request, change: Any, *args: Any) -> Any:
    """A change of MEMORY.md in a thread (file locks block); a file that cannot be written is a page saying so."""
    try:
        return await asyncio.to_thread(change, *args)
    except (MemoryFilesError, Timeout, OSError) as exc:
        log.warning("MEMORY.md not changed: %s", exc)
        return render(request, "error.html", status=503, title="MEMORY.md was not changed",
                      message=f"The memory file could not be written now ({type(exc).__name__}); try again.")


async def refresh_recall(instance: Instance) -> None:
    """The recall index follows MEMORY.md at once (a forgotten fact must not be recalled), when the worker
    keeps one; the worker's next job would do it otherwise."""
    index = RecallIndex(instance.workspace, instance.tz)
    if not index.path.exists():
        return
    try:
        await asyncio.to_thread(index.refresh, instance.sessions_dir)
    except (RecallIndexError, sqlite3.Error, OSError) as exc:
        log.warning("recall index not refreshed after a MEMORY.md change: %s", exc)
    finally:
        index.close()
