"""What goes into the recall index (pure).

Archived messages, daily-notes lines and MEMORY.md lines as redacted rows, and how far a session's messages have left
the context."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date as Date
from datetime import tzinfo
from typing import Any

from nanobot_hooks.contract.marker import SessionMarker
from nanobot_hooks.contract.recall import NOTE_LINE_BITS
from worker.memory import longterm, notes
from worker.nanobot.sessions import SessionFile
from worker.text.clock import local_time
from worker.text.prepare import Lines
from worker.text.redact import redact


@dataclass(frozen=True)
class Row:
    """One searchable passage of a source."""

    position: int
    day: str | None  # YYYY-MM-DD, local
    at: str | None  # "YYYY-MM-DD HH:MM", local
    label: str
    body: str  # redacted


def _local(stamp: Any, tz: tzinfo | None) -> tuple[str | None, str | None]:
    moment = local_time(stamp, tz)  # the same conversion that dates the notes
    return (moment.date().isoformat(), moment.strftime("%Y-%m-%d %H:%M")) if moment else (None, None)


def message_rows(
    messages: Sequence[dict[str, Any]], start: int, end: int, tz: tzinfo | None, lines: Lines | None = None
) -> list[Row]:
    """Messages [start, end) as the summarizer read them (hidden rows and empty ones left out), redacted.

    `lines`: those the job already rendered of these messages."""
    if lines is None or lines.messages is not messages:
        lines = Lines(messages)
    rows = []
    for index in range(start, end):
        message = messages[index]
        line = lines(index)
        if line is None:
            continue
        role = str(message.get("role") or "")
        day, at = _local(message.get("timestamp"), tz)
        rows.append(Row(index, day, at, role, redact(line.removeprefix(f"{role}: "))))  # the label says who
    return rows


def note_rows(text: str, day: str, tz: tzinfo | None, counts: dict[str, int] | None = None) -> list[tuple[str, Row]]:
    """(session, row) for every bullet of a day file's sections; a session's lines keep their order.

    `counts`: how many lines each session already has that day (for text appended to an indexed file)."""
    base = Date.fromisoformat(day).toordinal() << NOTE_LINE_BITS
    counts = dict(counts or {})
    rows = []
    for span, heading, item in notes.section_items(text):
        number = counts.get(span.session, 0)
        body = notes.clean(item)
        if not span.session or not body or number >> NOTE_LINE_BITS:
            continue
        counts[span.session] = number + 1
        rows.append((span.session, Row(base | number, day, _local(span.first, tz)[1], heading, body)))
    return rows


def starts_a_section(text: str) -> bool:
    """Does text appended to a day file open a section of its own (its first non-blank line a notes marker)?

    Only then can it be indexed apart from what precedes it; anything else is a mid-file edit."""
    for line in text.splitlines():
        if line.strip():
            return bool(notes.spans(line))
    return True  # blank lines alone add nothing


def memory_rows(text: str, meta: Mapping[str, longterm.Meta] | None = None) -> list[Row]:
    """Every text line of MEMORY.md, dated by the day it was learned when its sidecar record (`meta`) says so."""
    return [
        Row(number, learned, None, heading, line) for number, heading, line, learned in longterm.dated_lines(text, meta)
    ]


def archived_through(session: SessionFile) -> int:
    """How many of the session's messages have left the context.

    nanobot's watermark, or the boundary of the worker's record waiting in line 1 when it still fits (it is applied at
    the next turn)."""
    through = session.last_archived
    record = SessionMarker.from_metadata(session.metadata).pending
    if record is not None and record.fits(through, len(session.messages), session.timestamp_before(record.boundary)):
        through = max(through, record.boundary)
    return through
