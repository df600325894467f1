"""The memory page: the facts of MEMORY.md's managed part with their provenance (the sidecar's session, day and
importance, the heading they sit under), the facts held for the next quiet moment, a search; forgetting a fact
and undoing that (worker.memory.longterm.forget: the worker's own lock and write rules; the user's own lines
are counted here, never changed)."""

from __future__ import annotations

import asyncio
import logging
import secrets
import sqlite3
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from filelock import Timeout

from worker.errors import MemoryFilesError
from worker.files import read_bytes
from worker.memory.longterm import load_meta, locate, parse, read_held, sidecar_path
from worker.memory.longterm import Held
from worker.memory.longterm.forget import Forgotten, forget_fact, forget_held, restore_fact, restore_held
from worker.memory.longterm.part import outside_lines
from worker.memory.recall_index import RecallIndex, RecallIndexError
from worker.text.language import language as language_table
from worker.web.guard import BROWSER, form_of, see_other
from worker.web.instance import Instance
from worker.web.render import INSTANCE, render

log = logging.getLogger("worker.web")
UNDO_KEPT = 100  # forgotten facts that can still be put back, newest kept (in this process only)


@dataclass(frozen=True)
class FactRow:
    text: str
    heading: str
    importance: int
    date: str
    session: str | None


# What an undo puts back: a fact of the managed part, or the copies of a fact that was still held.
Undoable = Forgotten | list[Held]


def undo_text(undoable: Undoable) -> str:
    return undoable.text if isinstance(undoable, Forgotten) else undoable[0].batch.facts[0].text


class UndoShelf:
    """Facts just forgotten, kept in this process's memory only (never on disk: a forgotten private fact
    must not linger in a file), each reachable only from the browser that forgot it."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, tuple[str, Undoable]] = OrderedDict()

    def put(self, browser: str, fact: Undoable) -> str:
        ticket = secrets.token_urlsafe(12)
        self._kept[ticket] = (browser, fact)
        while len(self._kept) > UNDO_KEPT:
            self._kept.popitem(last=False)
        return ticket

    def peek(self, browser: str, ticket: str) -> Undoable | None:
        owner, fact = self._kept.get(ticket, ("", None))
        return fact if owner and owner == browser else None

    def take(self, browser: str, ticket: str) -> Undoable | None:
        fact = self.peek(browser, ticket)
        if fact is not None:
            del self._kept[ticket]
        return fact


UNDO: web.AppKey[UndoShelf] = web.AppKey("undo", UndoShelf)


def read_facts(path: Path, today: str) -> tuple[list[FactRow], int]:
    """The managed part's facts in the file's order, and how many lines of the user's own the file has."""
    raw = read_bytes(path)
    text = raw.decode("utf-8", errors="replace") if raw is not None else ""
    span = locate(text)
    if span is None:
        return [], len(outside_lines(text))
    part = parse(text[span[0]:span[1]], today, meta=load_meta(sidecar_path(path)))
    headings = language_table(part.language).memory_groups
    rows = [FactRow(line.text, headings.get(line.group, line.group), line.importance, line.date, line.session)
            for line in part.lines]
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
    undoable = request.app[UNDO].peek(BROWSER.get(), ticket)
    return render(request, "memory.html", facts=shown, total=len(rows), query=query, held=held,
                  own_lines=own_lines, undo=undo_text(undoable) if undoable else None, ticket=ticket,
                  note=request.query.get("note", ""), max_facts=instance.settings.memory_max_facts)


async def forget(request: web.Request) -> web.Response:
    """Forgets a fact of MEMORY.md's managed part (`held` in the form: one still held for it)."""
    instance = request.app[INSTANCE]
    form = await form_of(request)
    change = forget_held if form.get("held") else forget_fact
    args = (form.get("text", ""),) if form.get("held") else (form.get("text", ""), instance.today())
    done = await _write(request, change, instance.memory.memory_path, *args)
    if isinstance(done, web.Response):
        return done
    if not done:
        return see_other("/memory?note=missing")
    if not form.get("held"):
        await refresh_recall(instance)
    ticket = request.app[UNDO].put(BROWSER.get(), done)
    return see_other(f"/memory?undo={ticket}")


async def undo(request: web.Request) -> web.Response:
    instance = request.app[INSTANCE]
    fact = request.app[UNDO].take(BROWSER.get(), (await form_of(request)).get("ticket", ""))
    if fact is None:
        return see_other("/memory?note=gone")
    if isinstance(fact, Forgotten):
        done = await _write(request, restore_fact, instance.memory.memory_path, fact, instance.today())
    else:
        done = await _write(request, restore_held, instance.memory.memory_path, fact)
    if isinstance(done, web.Response):
        return done
    if isinstance(fact, Forgotten):
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
