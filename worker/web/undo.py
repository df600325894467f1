"""Undo for the memory page's changes: what each change took away, kept in this process's memory only (never on
disk: a forgotten private fact must not linger in a file), each reachable only from the browser that made it."""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from worker.memory.longterm import Held
from worker.memory.longterm.edit import pin_fact, undo_edit
from worker.memory.longterm.forget import Forgotten, restore_fact, restore_held

KEPT = 100  # changes that can still be undone, newest kept


@dataclass(frozen=True)
class Edited:
    """An edit: the fact as it was, and the text it was given."""

    before: Forgotten
    text: str


@dataclass(frozen=True)
class Pinned:
    """A pin set (or taken off): the fact's text and the pin it has now."""

    text: str
    pinned: bool


# A fact taken out of the managed part, the copies of a fact that was still held, an edit, or a pin.
Undoable = Forgotten | list[Held] | Edited | Pinned


def describe(change: Undoable) -> tuple[str, str]:
    """What the change did, for the page: its verb and the fact's text."""
    if isinstance(change, Edited):
        return "Edited", f"{change.before.text} → {change.text}"
    if isinstance(change, Pinned):
        return ("Pinned: the cap never evicts it before an unpinned fact" if change.pinned else "Unpinned"), change.text
    if isinstance(change, Forgotten):
        return "Forgotten", change.text
    return "Forgotten (it was held, not yet written)", change[0].batch.facts[0].text


def put_back(path: Path, change: Undoable, today: str) -> bool:
    """Undoes the change in MEMORY.md (`path`) or its held facts. Blocking: run it in a thread."""
    if isinstance(change, Edited):
        return undo_edit(path, change.text, change.before, today)
    if isinstance(change, Pinned):
        return pin_fact(path, change.text, not change.pinned, today) is not None
    if isinstance(change, Forgotten):
        return restore_fact(path, change, today)
    restore_held(path, change)
    return True


class UndoShelf:
    def __init__(self) -> None:
        self._kept: OrderedDict[str, tuple[str, Undoable]] = OrderedDict()

    def put(self, browser: str, change: Undoable) -> str:
        ticket = secrets.token_urlsafe(12)
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
