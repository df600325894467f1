"""Undo for the memory page's changes.

What each change took away, kept in this process's memory only (never on disk: a forgotten private fact must not linger
in a file), each reachable only from the browser that made it; and what an undo did, said as it is (a fact a job changed
meanwhile is not put back over the change)."""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from worker.memory.longterm.edit import Edit, EditRefused, pin_fact, undo_edit
from worker.memory.longterm.forget import Forgot, now_reads, restore_forgotten

KEPT = 100  # changes that can still be undone, newest kept


@dataclass(frozen=True)
class Pinned:
    """A pin set (or taken off): the fact's text and the pin it has now."""

    text: str
    pinned: bool


@dataclass(frozen=True)
class Said:
    """What a change or an undo did, for the page, in words that are true."""

    what: str  # the sentence, before the fact's text
    text: str  # the fact concerned
    now: str | None = None  # what the fact reads now, when someone else changed it meanwhile


# A forget (of a written fact, its held copies, or both), an edit, or a pin.
Undoable = Forgot | Edit | Pinned


def describe(change: Undoable) -> tuple[str, str]:
    """What the change did, for the page: its verb and the fact's text."""
    if isinstance(change, Edit):
        where = "" if change.before is not None else " (it was held, not yet written)"
        return f"Edited{where}", f"{change.old} → {change.new}"
    if isinstance(change, Pinned):
        return ("Pinned: the cap never evicts it before an unpinned fact" if change.pinned else "Unpinned"), change.text
    if change.written is None:
        return "Forgotten (it was held, not yet written)", change.text
    return (f"Forgotten (with its {len(change.held)} held copies)" if change.held else "Forgotten"), change.text


def changed_meanwhile(path: Path, verb: str, text: str, today: str) -> Said:
    """The fact `text` is neither written nor held as it was: what it reads now, if a fact is close to it."""
    now = now_reads(path, text, today)
    if now is None:
        return Said(
            f"Not {verb}: no fact of MEMORY.md reads like this any more (forgotten, or changed meanwhile), "
            "and none is held",
            text,
        )
    return Said(f"Not {verb}: the fact changed meanwhile", text, now)


def put_back(path: Path, change: Undoable, today: str) -> Said:
    """Undoes the change in MEMORY.md (`path`) or its held facts, and says what it did.

    Blocking: run it in a thread."""
    if isinstance(change, Edit):
        try:
            done = undo_edit(path, change, today)
        except EditRefused as exc:
            return Said(f"Not undone: {exc}", change.new)
        return (
            Said("Undone: the fact reads as before", change.old)
            if done
            else changed_meanwhile(path, "undone", change.new, today)
        )
    if isinstance(change, Pinned):
        if pin_fact(path, change.text, not change.pinned, today) is None:
            return changed_meanwhile(path, "undone", change.text, today)
        return Said("Undone: " + ("unpinned again" if change.pinned else "pinned again"), change.text)
    restored = restore_forgotten(path, change, today)
    if restored == "again":
        return Said("Nothing to put back: MEMORY.md holds the fact again already (written meanwhile)", change.text)
    if restored == "no part":
        return Said(
            "Not undone: MEMORY.md has no part of the worker's any more (removed by hand?), nothing to put "
            "the fact back in",
            change.text,
        )
    return Said(
        "Undone: the fact is back as it was" if change.written is not None else "Undone: the fact is held again",
        change.text,
    )


class UndoShelf:
    def __init__(self) -> None:
        self._kept: OrderedDict[str, tuple[str, Undoable]] = OrderedDict()

    def put(self, browser: str, change: Undoable, ticket: str = "") -> str:
        """Keeps the change under a new ticket (or `ticket` again: an undo that could not be written now)."""
        ticket = ticket or secrets.token_urlsafe(12)
        self._kept[ticket] = (browser, change)
        while len(self._kept) > KEPT:
            self._kept.popitem(last=False)
        return ticket

    def peek(self, browser: str, ticket: str) -> Undoable | None:
        owner, change = self._kept.get(ticket, ("", None))
        return change if owner and owner == browser else None

    def take(self, browser: str, ticket: str) -> Undoable | None:
        change = self.peek(browser, ticket)
        if change is not None:
            del self._kept[ticket]
        return change


UNDO: web.AppKey[UndoShelf] = web.AppKey("undo", UndoShelf)
