"""Daily notes: one section per session and covered span, appended to memory/YYYY-MM-DD.md, idempotently."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date as Date
from datetime import datetime
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote, unquote
from zoneinfo import ZoneInfo

from filelock import FileLock

from worker.files import LOCK_TIMEOUT, append_whole, temp_beside
from worker.memory.dedup import DEFAULT_THRESHOLD, find_duplicate, normalize_uncached
from worker.memory.entries import DailyNotes
from worker.memory.followed import Followed, stamp
from worker.text.clock import local_time
from worker.text.language import NOTE_FIELDS
from worker.text.language import language as language_table
from worker.text.redact import one_line, one_line_uncached

LOCK_NAME = ".notes.lock"  # one lock for all day files: appends take milliseconds
_MARKER = re.compile(
    r"^<!-- nanobot-summary:notes session=(?P<session>\S+) first=(?P<first>\S+) last=(?P<last>\S+)"
    r"(?: at=(?P<at_first>\d+)-(?P<at_last>\d+))?(?: gen=(?P<gen>\d+))?(?: by=(?P<by>fallback))?"
    r" digest=(?P<digest>[0-9a-f]+) -->[ \t\r]*$",
    re.MULTILINE,
)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
_SAFE = ":@+._~/"  # what stays readable of a session key in a marker: the rest is url-quoted
# The digest of no notes at all. A marker with it says a span was noted when nothing was written: none is written
# (`_append` refuses it), and one an older version wrote is not taken for noted (`noted_spans`), so its messages
# are asked for again.
EMPTY_DIGEST = hashlib.sha256(b"").hexdigest()[:12]
# The heading of a section the fallback wrote (worker.summarize.remember): the user's own lines, no model's words.
VERBATIM_HEADING = "The user's own lines, verbatim (the model's answer had no notes)"


class NothingNoted(ValueError):
    """A span would be marked noted with no notes written."""


@dataclass(frozen=True)
class Span:
    """What a section's hidden marker records.

    Whose messages, from when to when, at which positions among the session's visible messages (markers written before
    positions were kept have none), and of which of the session's generations (`gen=N`, written from the first `/new`
    on: a new conversation's positions start at 0 again, and inside a repeated hour its times fall inside the old one's
    span)."""

    session: str
    first: str | None
    last: str | None
    digest: str
    at: tuple[int, int] | None = None
    generation: int = 0
    fallback: bool = False  # its notes are the user's own lines, written by the fallback, not by a model

    def same(self, other: Span) -> bool:
        """The same covered span; without timestamps, the same content."""
        if self.session != other.session or self.generation != other.generation:
            return False
        if self.at and other.at and self.at != other.at:
            return False
        if self.first or self.last:
            return (self.first, self.last) == (other.first, other.last)
        return self.digest == other.digest

    def marker(self) -> str:
        def field(value: str | None) -> str:
            return quote_key(value) if value else "-"

        at = f" at={self.at[0]}-{self.at[1]}" if self.at else ""
        gen = f" gen={self.generation}" if self.generation else ""
        by = " by=fallback" if self.fallback else ""
        return (
            f"<!-- nanobot-summary:notes session={field(self.session)} first={field(self.first)}"
            f" last={field(self.last)}{at}{gen}{by} digest={self.digest} -->"
        )


class Noted(NamedTuple):
    """A noted span as a job checks its messages against it: their first and last timestamps and positions."""

    first: str
    last: str
    at: tuple[int, int] | None = None


def quote_key(key: str) -> str:
    """A session key as markers write it: one token, never "-->", readable where it can be."""
    return quote(key, safe=_SAFE)


def clean(item: str) -> str:
    """One redacted line of text: notes are bullets, so a newline in an item would break the list.

    Uncached, as the items' keys below: a note's items are met once (the day's parse keeps their keys), and a daily job
    noting a huge day filled one_line's and normalize's caches with them, holding their memory to the job's end."""
    text = one_line_uncached(item)
    match = _BULLET.match(text)
    return match.group(1).strip() if match else text


def note_items(note: DailyNotes) -> dict[str, list[str]]:
    items: dict[str, list[str]] = {}
    for part in NOTE_FIELDS:
        values = getattr(note, part)
        if part == "technical_issues":
            lines = [
                f"{clean(v.problem)} → {clean(v.solution)}" if clean(v.solution) else clean(v.problem) for v in values
            ]
        else:
            lines = [clean(v) for v in values]
        items[part] = [line for line in lines if line]
    return items


def digest(items: dict[str, list[str]]) -> str:
    joined = "\n".join(f"{part}:{normalize_uncached(line)}" for part in NOTE_FIELDS for line in items.get(part, []))
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()[:12]


def _span(match: re.Match[str]) -> Span:
    def value(raw: str) -> str | None:
        return None if raw == "-" else unquote(raw)

    at = (int(match["at_first"]), int(match["at_last"])) if match["at_first"] else None
    return Span(
        value(match["session"]) or "",
        value(match["first"]),
        value(match["last"]),
        match["digest"],
        at,
        int(match["gen"] or 0),
        match["by"] == "fallback",
    )


def marker_session(line: str) -> str | None:
    """The session a section's hidden marker line names, or None for any other line."""
    match = _MARKER.match(line)
    return _span(match).session if match else None


def spans(text: str) -> list[Span]:
    return [_span(m) for m in _MARKER.finditer(text)]


def section_items(text: str) -> Iterator[tuple[Span, str, str]]:
    """Every bullet of a day's text inside a section: (its span, its `###` heading, the bullet's text).

    Lines before the first marker belong to no session and are left out."""
    current: Span | None = None
    heading = ""
    for line in text.splitlines():
        marker = _MARKER.match(line)
        if marker:
            current, heading = _span(marker), ""
            continue
        if line.startswith("### "):
            heading = line[4:].strip()
            continue
        bullet = _BULLET.match(line)
        if current is not None and bullet:
            yield current, heading, bullet.group(1)


@dataclass
class DayText:
    """What the next section depends on in a day's file.

    The spans noted, each session's normalized items, and how the text ends."""

    spans: dict[str, list[Span]] = field(default_factory=dict)  # by session: a job looks up its own
    items: dict[str, list[str]] = field(default_factory=dict)
    empty: bool = True
    ends_line: bool = True

    def add(self, text: str) -> None:
        """Text appended to the day's file."""
        for span in spans(text):
            self.spans.setdefault(span.session, []).append(span)
        for span, _, item in section_items(text):
            self.items.setdefault(span.session, []).append(normalize_uncached(item))
        if text:
            self.empty, self.ends_line = False, text.endswith("\n")


def _parse_day(text: str) -> DayText:
    day = DayText()
    day.add(text)
    return day


# Day files and the markers held beside them, as this process last read and appended them (followed.py).
DAYS: Followed[DayText] = Followed(_parse_day, DayText.add)


def _clock(stamp: str | None, tz: ZoneInfo) -> str | None:
    # The same conversion that dated the message, so a heading's times match its file's date.
    moment = local_time(stamp, tz)
    return moment.strftime("%H:%M") if moment else None


def note_date(note: DailyNotes, tz: ZoneInfo) -> str:
    """The day file for a note: its own date when valid, else its first timestamp's, else today's."""
    if _DATE.match(note.date):
        try:
            Date.fromisoformat(note.date)
            return note.date
        except ValueError:
            pass
    moment = local_time(note.first_timestamp, tz)
    return (moment or datetime.now(tz)).date().isoformat()


def section(
    note: DailyNotes,
    session: str,
    language: str,
    existing: DayText,
    tz: ZoneInfo,
    threshold: float = DEFAULT_THRESHOLD,
    held: DayText | None = None,
) -> str:
    """The text to append to a day file holding `existing`, or "" when this span is already noted.

    The text to append to a day file holding `existing`, or "" when this span is already noted (in the day file, or in
    the markers `held` beside it).

    Items this session already has that day are left out; when nothing new is left the section is
    the hidden marker alone, so `noted_spans` still sees the span. A note without one item raises NothingNoted:
    a span is noted only when its notes are written.
    """
    items = note_items(note)
    if not any(items.values()):
        raise NothingNoted(f"{session}: no notes for the span of {note.date}; it stays un-noted")
    at = (
        (note.first_position, note.last_position)
        if note.first_position is not None and note.last_position is not None
        else None
    )
    span = Span(session, note.first_timestamp, note.last_timestamp, digest(items), at, note.generation, note.verbatim)
    if any(span.same(old) for day in (existing, held or DayText()) for old in day.spans.get(session, [])):
        return ""
    known = list(existing.items.get(session, []))
    headings = language_table(language).note_headings
    blocks: list[str] = []
    for part in NOTE_FIELDS:
        fresh: list[str] = []
        for line in items[part]:
            key = normalize_uncached(line)
            if not key or find_duplicate(key, known, threshold) is not None:
                continue
            known.append(key)
            fresh.append(line)
        if fresh:
            heading = VERBATIM_HEADING if note.verbatim else headings[part]
            blocks.append(f"### {heading}\n" + "".join(f"- {line}\n" for line in fresh))
    text = "" if existing.ends_line else "\n"
    text += f"\n{span.marker()}\n"
    if blocks:
        text += f"## {one_line(session)}{_when(note, tz)}\n\n" + "\n".join(blocks)
    return text


def _when(note: DailyNotes, tz: ZoneInfo) -> str:
    first, last = _clock(note.first_timestamp, tz), _clock(note.last_timestamp, tz)
    if first and last and first != last:
        return f" · {first}–{last}"
    return f" · {first or last}" if first or last else ""


def day_path(memory_dir: Path, day: str) -> Path:
    if not _DATE.match(day):
        raise ValueError(f"not a YYYY-MM-DD date: {day!r}")
    return memory_dir / f"{day}.md"


def held_path(day_file: Path) -> Path:
    """`memory/.YYYY-MM-DD.noted`, where older versions kept the markers of spans a model found nothing to note in.

    Still read (its markers with notes count), never written: a span without notes is not marked noted at all."""
    return day_file.with_name(f".{day_file.stem}.noted")


def has_notes(note: DailyNotes) -> bool:
    """Whether a note holds one item to write: only then may its span be marked noted."""
    return any(note_items(note).values())


def append_notes(
    memory_dir: Path,
    session: str,
    notes: list[DailyNotes],
    language: str,
    tz: ZoneInfo,
    threshold: float = DEFAULT_THRESHOLD,
) -> int:
    """Appends each note that holds an item to its day's file.

    Returns how many sections were added (markers alone count not). A note without items writes nothing, no marker
    either: its span stays un-noted."""
    memory_dir.mkdir(parents=True, exist_ok=True)
    added = 0
    # Read, check and append under one cross-process lock: two workers on one day lose nothing.
    with FileLock(str(memory_dir / LOCK_NAME), timeout=LOCK_TIMEOUT):
        for note in notes:
            if not has_notes(note):
                continue
            path = day_path(memory_dir, note_date(note, tz))
            existing = DAYS.get(path)
            text = section(note, session, language, existing, tz, threshold, DAYS.get(held_path(path)))
            if not text:
                continue
            if existing.empty:
                text = f"# {path.stem}\n" + text
            _append(path, text)
            added += 1 if "\n## " in text else 0
    return added


def _append(path: Path, text: str) -> None:
    """Appends to a day file and keeps its parse in step.

    Refuses a marker of no notes (NothingNoted): whatever the caller did, no span is marked noted without its notes."""
    if any(span.digest == EMPTY_DIGEST for span in spans(text)):
        raise NothingNoted(f"{path.name}: a span marked noted without notes; not written")
    before = stamp(path)
    append_whole(path, text.encode("utf-8"))
    DAYS.appended(path, before, text)


def noted_spans(memory_dir: Path, session_key: str, date: str, generation: int = 0) -> list[Noted]:
    """Every span of a session's generation noted in that day's file (or held beside it by an older version).

    Another generation's spans say nothing of this one's messages: its positions started over. A marker of no notes
    (EMPTY_DIGEST, which older versions wrote for a model's empty answer) does not count: those messages were never
    noted, and are asked for again."""
    path = day_path(memory_dir, date)
    return [
        Noted(span.first or span.last or "", span.last or span.first or "", span.at)
        for day in (DAYS.get(path), DAYS.get(held_path(path)))
        for span in day.spans.get(session_key, [])
        if (span.first or span.last) and span.generation == generation and span.digest != EMPTY_DIGEST
    ]


def count_spans(memory_dir: Path, since: float = 0.0) -> tuple[int, int]:
    """How many spans the recent day files note, and how many of them the fallback wrote.

    How many spans the day files written since `since` (epoch seconds) note, and how many of them the fallback wrote
    (the model's answer had no notes), for doctor. Read line by line: a huge day is never held whole."""
    total = fallback = 0
    for path in sorted(memory_dir.glob("????-??-??.md")):
        try:
            if path.stat().st_mtime < since:
                continue
            with path.open(encoding="utf-8", errors="replace") as lines:
                for line in lines:
                    if line.startswith("<!-- nanobot-summary:notes ") and (match := _MARKER.match(line.rstrip("\n"))):
                        total += 1
                        fallback += match["by"] == "fallback"
        except OSError:
            continue
    return total, fallback


def is_noted(stamp: str, noted: list[Noted], position: int | None = None) -> bool:
    """Does a noted span cover this message?

    Spans, not a high-water mark: messages whose notes were never written (a failed write, history from before the
    install) stay un-noted until they are.

    By position where the span has them: when the clock goes back, the repeated hour's messages come after the
    span although their times fall inside it. The time still has to be no later than the span's last: `/new`
    empties a session and its positions start again, with later times."""
    for span in noted:
        if span.at is not None and position is not None:
            if span.at[0] <= position <= span.at[1] and not _before(span.last, stamp):
                return True
        elif not _before(stamp, span.first) and not _before(span.last, stamp):
            return True
    return False


def _before(one: str, other: str) -> bool:
    try:
        return datetime.fromisoformat(one) < datetime.fromisoformat(other)
    except (ValueError, TypeError):  # odd formats: ISO strings of one format compare as text
        return one < other


# Words that say nothing of what a fact is about: a note line need not repeat them to hold the fact.
_COMMON = frozenset(
    "a an and are as at be been by for from has have he her his i in is it its my of on or our she "
    "that the their them they this to user users was were with you your".split()
)


def key_words(text: str) -> frozenset[str]:
    """The words a line must hold to hold `text` (pure).

    Its normalized words but the commonest (all of them when that leaves none)."""
    words = normalize_uncached(text).split()
    return frozenset(word for word in words if word not in _COMMON) or frozenset(words)


def holds(line: str, words: frozenset[str]) -> bool:
    """Whether `line` holds every one of `words` (pure).

    A whole word each, or, for a word of a script written without spaces (Chinese, Japanese), anywhere in it."""
    if line.isascii() and not _may_hold_ascii(line, words):
        return False  # most lines, told without normalizing them (a search over 100,000 passages: 2.1 s -> 0.6 s)
    normalized = normalize_uncached(line)
    found = set(normalized.split())
    return bool(words) and all(word in found or (not word.isascii() and word in normalized) for word in words)


def _may_hold_ascii(line: str, words: frozenset[str]) -> bool:
    """Whether an ASCII `line` may hold `words` (pure).

    Normalizing ASCII lowers it, drops its apostrophes and turns other punctuation into spaces, so each word it holds is
    a run of its lowered letters once the apostrophes are out; and it holds no word that is not ASCII."""
    lowered = line.lower().replace("'", "").replace("`", "")
    return all(word.isascii() and word in lowered for word in words)


def drop_lines_holding(memory_dir: Path, text: str, remove: bool = True) -> dict[str, list[str]]:
    """Removes each note line that holds `text` from every day file.

    Removes from every day file each note line that holds `text` (every one of its key_words), under the notes' lock,
    each file replaced whole; headings and span markers stay. Returns the lines removed (only found, when not `remove`)
    by day file name."""
    words = key_words(text)
    removed: dict[str, list[str]] = {}
    if not words or not memory_dir.is_dir():
        return removed
    with FileLock(str(memory_dir / LOCK_NAME), timeout=LOCK_TIMEOUT):
        for path in sorted(memory_dir.glob("????-??-??.md")):
            lines = path.read_bytes().decode("utf-8", errors="surrogateescape").splitlines(keepends=True)
            gone = [line for line in lines if not line.lstrip().startswith(("#", "<!--")) and holds(line, words)]
            if not gone:
                continue
            removed[path.name] = [line.rstrip("\r\n") for line in gone]
            if not remove:
                continue
            kept = "".join(line for line in lines if line not in gone)
            os.replace(temp_beside(path, kept.encode("utf-8", errors="surrogateescape")), path)
    return removed
