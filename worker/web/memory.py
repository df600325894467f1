"""The memory page.

The facts of MEMORY.md's managed part with their provenance (the sidecar's session, day and importance, the heading they
sit under, a pin), the facts held for the next quiet moment, a search, a MEMORY.md the user made read-only; forgetting,
editing or pinning a fact (held, written, or both), and undoing any of these (worker.memory.longterm.forget and .edit:
the worker's own lock and write rules; the user's own lines are counted here, never changed). Every answer says what
happened: a fact changed meanwhile is named as it reads now, and a typed text that was not saved is shown back in its
form."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from filelock import Timeout

from worker.errors import MemoryFilesError, MemoryReadOnly
from worker.files import read_bytes, read_only
from worker.memory.dedup import normalize
from worker.memory.elsewhere import too_short, where_else
from worker.memory.longterm import load_meta, locate, parse, read_held, sidecar_path
from worker.memory.longterm.edit import EditRefused, edit_fact, pin_fact
from worker.memory.longterm.forget import ADDED_ON_PAGE, Forgot, forget_fact
from worker.memory.longterm.part import own_lines
from worker.memory.recall_index import RecallIndex, RecallIndexError
from worker.text.language import language as language_table
from worker.web.guard import BROWSER, form_of, see_other
from worker.web.instance import Instance
from worker.web.limits import fact_too_long
from worker.web.paging import window
from worker.web.render import INSTANCE, render
from worker.web.undo import UNDO, Pinned, Said, Undoable, changed_meanwhile, describe, put_back

log = logging.getLogger("worker.web")
FACTS_PER_PAGE = 100  # about 1.5 KB of HTML each with its forms: a page stays near 150 KB


@dataclass(frozen=True)
class FactRow:
    text: str
    heading: str
    importance: int
    date: str
    session: str | None
    pinned: bool


def read_facts(path: Path, today: str) -> tuple[list[FactRow], int]:
    """The managed part's facts in order, and how many lines of the user's own the file has.

    The managed part's facts in the file's order, and how many lines of the user's own the file has (nanobot's
    template's headings and placeholders are not the user's)."""
    raw = read_bytes(path)
    text = raw.decode("utf-8", errors="replace") if raw is not None else ""
    span = locate(text)
    if span is None:
        return [], len(own_lines(text))
    part = parse(text[span[0] : span[1]], today, meta=load_meta(sidecar_path(path)))
    headings = language_table(part.language).memory_groups
    rows = [
        FactRow(line.text, headings.get(line.group, line.group), line.importance, line.date, line.session, line.pinned)
        for line in part.lines
    ]
    return rows, len(own_lines(text[: span[0]]) + own_lines(text[span[1] :]))


# The last reading of each MEMORY.md, under what its file and sidecar were then (inode, size, mtime): parsing
# 5,000 facts costs ~75 ms on every page load, and the worker replaces the files (a new inode) when it writes.
_READ: dict[Path, tuple[tuple[object, ...], tuple[list[FactRow], int]]] = {}


def _identity(path: Path, today: str) -> tuple[object, ...]:
    found: list[object] = [today]
    for one in (path, sidecar_path(path)):
        try:
            status = one.stat()
            found.append((status.st_ino, status.st_size, status.st_mtime_ns))
        except OSError:
            found.append(None)
    return tuple(found)


def read_facts_again(path: Path, today: str) -> tuple[list[FactRow], int]:
    """read_facts, from the last reading when neither file changed since."""
    identity = _identity(path, today)
    kept = _READ.get(path)
    if kept is not None and kept[0] == identity:
        return kept[1]
    found = read_facts(path, today)
    _READ[path] = (identity, found)
    return found


def matches(query: str, *values: str | None) -> bool:
    wanted = query.casefold()
    return any(wanted in (value or "").casefold() for value in values)


async def page(request: web.Request) -> web.Response:
    return await answer(request)


async def answer(
    request: web.Request, status: int = 200, said: Said | None = None, retry: tuple[str | None, str] | None = None
) -> web.Response:
    """The memory page.

    After a change that was not made (or an undo), what happened (`said`), and the text the user typed shown back in its
    form (`retry`: the fact it would now edit, or None, and the typed text)."""
    instance = request.app[INSTANCE]
    path = instance.memory.memory_path
    rows, own = await asyncio.to_thread(read_facts_again, path, instance.today())
    query = request.query.get("q", "").strip()
    shown = [row for row in rows if matches(query, row.text, row.heading, row.date, row.session)]
    held = [
        (fact.text, h.batch.session, h.held_at, normalize(fact.text) in h.batch.pinned)
        for h in await asyncio.to_thread(read_held, path)
        for fact in h.batch.facts
        if matches(query, fact.text, h.batch.session)
    ]
    params = {"q": query, "page": request.query.get("page", ""), "held": request.query.get("held", "")}
    pager = window(FACTS_PER_PAGE, len(shown), "/memory", params)
    held_pager = window(FACTS_PER_PAGE, len(held), "/memory", params, name="held")
    ticket = request.query.get("undo", "")
    change = request.app[UNDO].peek(BROWSER.get(), ticket)
    # After a forget: where else its text lives (the day's notes, the recall index), to forget it there too.
    elsewhere = (
        await asyncio.to_thread(where_else, instance.workspace, instance.sessions_dir, instance.tz, change.text)
        if isinstance(change, Forgot)
        else None
    )
    return render(
        request,
        "memory.html",
        status=status,
        facts=shown[pager.start : pager.stop],
        pager=pager,
        matched=len(shown),
        total=len(rows),
        query=query,
        held=held[held_pager.start : held_pager.stop],
        held_pager=held_pager,
        own_lines=own,
        undo=describe(change) if change else None,
        ticket=ticket,
        note=request.query.get("note", ""),
        max_facts=instance.settings.memory_max_facts,
        said=said,
        retry=retry,
        refused=await asyncio.to_thread(read_only, path),
        elsewhere=elsewhere,
        everywhere=everywhere_said(request.query),
        done=done_said(request.query),
        added=ADDED_ON_PAGE,
        groups=language_table("en").memory_groups,
    )


async def forget(request: web.Request) -> web.Response:
    """Forgets a fact: from MEMORY.md's managed part and every copy still held for it."""
    instance = request.app[INSTANCE]
    path, text = instance.memory.memory_path, (await form_of(request)).get("text", "")
    try:
        done = await write_memory(forget_fact, path, text, instance.today())
    except NotWritten as exc:
        return await answer(request, 503, Said(f"Not forgotten: {exc}", text))
    if done is None:
        return await answer(request, 409, await _meanwhile(instance, "forgotten", text))
    return await _changed(request, done)


async def edit(request: web.Request) -> web.Response:
    """Gives a fact, written or held, a new text (`text`: the fact as the page showed it, `new`: its new text).

    An edit not made shows the typed text back in its form."""
    instance = request.app[INSTANCE]
    form = await form_of(request)
    if (refused := fact_too_long(request, form)) is not None:
        return refused
    old, typed = form.get("text", ""), form.get("new", "")
    try:
        done = await write_memory(edit_fact, instance.memory.memory_path, old, typed, instance.today())
    except EditRefused as exc:
        return await answer(request, 400, Said(f"Not edited: {exc}", old), retry=(old, typed))
    except NotWritten as exc:
        return await answer(request, 503, Said(f"Not edited: {exc}", old), retry=(old, typed))
    if done is None:
        said = await _meanwhile(instance, "edited", old)
        return await answer(request, 409, said, retry=(said.now, typed))
    return await _changed(request, done)


async def pin(request: web.Request) -> web.Response:
    """Pins a fact, written or held, against the cap's eviction (`pin` 1), or unpins it (0)."""
    instance = request.app[INSTANCE]
    form = await form_of(request)
    text, pinned = form.get("text", ""), form.get("pin") == "1"
    try:
        found = await write_memory(pin_fact, instance.memory.memory_path, text, pinned, instance.today())
    except NotWritten as exc:
        return await answer(request, 503, Said(f"Not {'pinned' if pinned else 'unpinned'}: {exc}", text))
    if found is None:
        return await answer(request, 409, await _meanwhile(instance, "pinned" if pinned else "unpinned", text))
    return await _changed(request, Pinned(found, pinned))


async def _meanwhile(instance: Instance, verb: str, text: str) -> Said:
    return await asyncio.to_thread(changed_meanwhile, instance.memory.memory_path, verb, text, instance.today())


async def _changed(request: web.Request, done: Undoable) -> web.Response:
    """After a change: the page saying what changed, with its undo; the recall index follows MEMORY.md."""
    if not isinstance(done, Pinned):
        await refresh_recall(request.app[INSTANCE])
    ticket = request.app[UNDO].put(BROWSER.get(), done)
    return see_other(f"/memory?undo={ticket}")


async def undo(request: web.Request) -> web.Response:
    """Undoes a change, and says what it did: a fact someone changed meanwhile is not put back over the change."""
    instance = request.app[INSTANCE]
    ticket = (await form_of(request)).get("ticket", "")
    change = request.app[UNDO].take(BROWSER.get(), ticket)
    if change is None:
        return see_other("/memory?note=gone")
    try:
        said = await write_memory(put_back, instance.memory.memory_path, change, instance.today())
    except NotWritten as exc:
        request.app[UNDO].put(BROWSER.get(), change, ticket)  # the same Undo button works again later
        return await answer(request, 503, Said(f"Not undone: {exc}", describe(change)[1]))
    if not isinstance(change, Pinned):
        await refresh_recall(instance)
    return await answer(request, 200 if said.what.startswith("Undone") else 409, said)


def done_said(query: Any) -> str | None:
    """The sentence after adding a fact or forgetting several, from its redirect's code and numbers only (pure)."""
    added = {
        "added": 'Added: the fact is in MEMORY.md\'s managed part, its provenance "added on the page"',
        "already": "Not added: MEMORY.md holds that fact already",
        "no-part": "Not added: MEMORY.md has no part of the worker's yet (its first job makes it); "
        "add the line to the file itself meanwhile",
    }
    if query.get("added") in added:
        return added[query["added"]] + "."
    forgot, of = query.get("forgot", ""), query.get("of", "")
    if forgot.isdigit() and of.isdigit():
        return (
            f"Forgotten: {int(forgot)} of the {int(of)} fact(s) ticked (each with its held copies; one changed "
            "meanwhile is left as it reads now). This cannot be undone here."
        )
    return None


def everywhere_said(query: Any) -> str | None:
    """The sentence after a "forget everywhere", from its redirect's numbers only (pure)."""
    lines, passages, live = query.get("lines", ""), query.get("passages", ""), query.get("live", "0")
    if query.get("everywhere") != "1" or not lines.isdigit() or not passages.isdigit() or not live.isdigit():
        return None
    unarchived = (
        f" {int(live)} message(s) holding it that no summary covered yet stay out of the recall index "
        "when a summary archives them."
        if int(live)
        else ""
    )
    return (
        f"Forgotten everywhere the worker keeps it: {int(lines)} line(s) of the daily notes and "
        f"{int(passages)} passage(s) of the recall index removed; neither the recall tool nor Recall here "
        f"returns it now.{unarchived} nanobot's session files still hold the conversation itself: they are "
        "nanobot's, and this page never changes them."
    )


async def forget_everywhere(request: web.Request) -> web.Response:
    """Takes a text out of the daily notes (each line that holds it) and the recall index (each passage that does).

    After a forget, so that nothing the worker keeps recalls it."""
    instance = request.app[INSTANCE]
    text = (await form_of(request)).get("text", "").strip()
    if too_short(text):
        return await answer(request, 400, Said("Nothing removed: give at least a few letters of the text", text))
    try:
        done = await asyncio.to_thread(where_else, instance.workspace, instance.sessions_dir, instance.tz, text, True)
    except (Timeout, OSError) as exc:
        return await answer(
            request,
            503,
            Said(f"Nothing removed: the notes could not be written now ({type(exc).__name__}); try again", text),
        )
    if done.problem:
        return await answer(
            request,
            503,
            Said(
                f"The notes' lines were removed but the recall index could not be "
                f"changed now ({done.problem}); try again",
                text,
            ),
        )
    return see_other(
        f"/memory?everywhere=1&lines={done.note_lines}&passages={len(done.passages)}&live={done.unarchived}"
    )


class NotWritten(Exception):
    """MEMORY.md could not be changed now; the message says why, for the page."""


async def write_memory(change: Any, *args: Any) -> Any:
    """A change of MEMORY.md in a thread (file locks block); NotWritten when the file cannot be written."""
    try:
        return await asyncio.to_thread(change, *args)
    except MemoryReadOnly as exc:
        raise NotWritten(f"{exc}: the worker leaves it alone (make it writable to change it here)") from exc
    except (MemoryFilesError, Timeout, OSError) as exc:
        log.warning("MEMORY.md not changed: %s", exc)
        raise NotWritten(f"the memory file could not be written now ({type(exc).__name__}); try again") from exc


async def refresh_recall(instance: Instance) -> None:
    """The recall index follows MEMORY.md at once (a forgotten fact must not be recalled), when the worker keeps one.

    The worker's next job would do it otherwise."""
    index = RecallIndex(instance.workspace, instance.tz)
    if not index.path.exists():
        return
    try:
        await asyncio.to_thread(index.refresh, instance.sessions_dir)
    except (RecallIndexError, sqlite3.Error, OSError) as exc:
        log.warning("recall index not refreshed after a MEMORY.md change: %s", exc)
    finally:
        index.close()
