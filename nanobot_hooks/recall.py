"""The recall search: a few short, dated passages of what summaries left out, from the worker's index.

Runs inside nanobot for the `recall` tool (recall_tool.RecallTool). Light and read-only: the standard
library's sqlite3 on the index the worker keeps (layout: contract/recall.py), opened with `mode=ro`, stopped
at a fixed time budget. A missing or unreadable index gives "nothing found", never an error.

Who sees what (`visible_sources`): a session sees its own archived messages, its own sections of the daily
notes, and MEMORY.md (which nanobot already puts in every session's prompt). Only when the user set
NANOBOT_SUMMARY_RECALL_SCOPE=trusted does a trusted session (NANOBOT_MEMORY_SESSIONS) also see the other
trusted sessions; a session that is not trusted (a group, an email sender, a web client) never does.

Ranking: the passages holding the most of the query's terms first, then the most recent. The search
asks for passages holding every term, then every choice of one term fewer, and so on (`_find`), so a
passage's score counts all of its terms however many newer passages hold fewer of them. The asker's own
material is searched first (`search_order`): the time budget never runs out before it.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import date as Date
from itertools import combinations
from pathlib import Path

from nanobot_hooks.contract import SOURCE_BITS, RECALL_INDEX, RECALL_SCHEMA_VERSION

BUDGET_SECONDS = 0.5  # nanobot gives tools no timeout: the search bounds its own
RESULTS = 5
SNIPPET_CHARS = 180
MAX_TERMS = 8
MAX_CHOICES = 8  # a level of more choices of terms (3 of 5: 10) is not searched as such; see _find
MIN_TRIGRAM = 3  # shorter terms (most Chinese words) are looked up in the bigram table
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_EDGE_PUNCTUATION = "\"'“”‘’「」『』()（）[]【】,，。.、;；:：!！?？"
_PROGRESS_STEPS = 1_000  # SQLite virtual-machine steps between two looks at the clock


@dataclass(frozen=True)
class Source:
    id: int
    kind: str  # messages | notes | memory
    session: str


@dataclass(frozen=True)
class Hit:
    source: Source
    position: int
    score: int  # how many of the query's terms it holds
    day: str | None
    at: str | None
    label: str
    body: str


# -- pure ------------------------------------------------------------------------------------------


def query_terms(query: str) -> list[str]:
    """The query's words, two characters or more, each once (case aside), at most MAX_TERMS."""
    seen: dict[str, str] = {}
    for raw in query.split():
        term = raw.strip(_EDGE_PUNCTUATION)
        if len(term) >= 2 and term.casefold() not in seen:
            seen[term.casefold()] = term
    return list(seen.values())[:MAX_TERMS]


def phrase(term: str) -> str:
    """An FTS5 string literal: the term must appear as it is (a substring, or a bigram token)."""
    return '"' + term.replace('"', '""') + '"'


def visible_sources(sources: Sequence[Source], asker: str | None, trusted: Callable[[str], bool], scope: str) -> list[Source]:
    """The sources a session may search: its own, MEMORY.md, and (scope "trusted", asker trusted) other trusted ones."""
    widen = scope == "trusted" and asker is not None and trusted(asker)
    return [p for p in sources if p.kind == "memory"
            or (asker is not None and p.session == asker)
            or (widen and p.session and trusted(p.session))]


def search_order(sources: Sequence[Source], asker: str | None) -> list[list[Source]]:
    """The sources to search, in groups searched one after the other: the asker's own material and MEMORY.md
    first (with many trusted sessions, the budget could otherwise run out before it), then the others."""
    own = [p for p in sources if p.kind == "memory" or (asker is not None and p.session == asker)]
    others = [p for p in sources if p not in own]
    return [group for group in (own, others) if group]


def term_sets(terms: Sequence[str]) -> Iterator[tuple[int, list[tuple[str, ...]]]]:
    """(k, every choice of k terms), from all the terms down to one."""
    for size in range(len(terms), 0, -1):
        yield size, list(combinations(terms, size))


def holds(body: str, term: str) -> bool:
    """Whether the index would find `term` in `body`: as a substring, case aside; a two-character Latin
    term as a whole word (the bigram table keeps short words whole)."""
    if len(term) < MIN_TRIGRAM and term.isascii():
        return re.search(rf"(?<!\w){re.escape(term)}(?!\w)", body, re.IGNORECASE) is not None
    return term.casefold() in body.casefold()


def check_day(value: str | None, name: str) -> str | None:
    """A YYYY-MM-DD date or None; raises ValueError naming the parameter."""
    if value is None or value == "":
        return None
    try:
        if not _DAY.match(value):
            raise ValueError
        return Date.fromisoformat(value).isoformat()
    except ValueError:
        raise ValueError(f"{name} must be a date written YYYY-MM-DD, not {value!r}") from None


def snippet(body: str, terms: Sequence[str], width: int = SNIPPET_CHARS) -> str:
    """The part of `body` around the first term it holds, on one line, `width` characters at most."""
    text = " ".join(body.split())
    lowered = text.lower()
    found = [i for i in (lowered.find(t.lower()) for t in terms) if i >= 0]
    if len(text) <= width:
        return text
    at = min(found) if found else 0
    start = max(0, min(at - width // 3, len(text) - width))
    cut = text[start:start + width]
    return ("…" if start else "") + cut + ("…" if start + width < len(text) else "")


def where(hit: Hit, asker: str | None) -> str:
    """Where a passage came from, as the model reads it."""
    chat = "this conversation" if hit.source.session == asker else f"conversation {hit.source.session}"
    if hit.source.kind == "messages":
        return f"{hit.at or hit.day or 'undated'} · {chat}, message {hit.position} ({hit.label})"
    if hit.source.kind == "notes":
        label = f", {hit.label}" if hit.label else ""
        return f"{hit.at or hit.day} · daily notes memory/{hit.day}.md, {chat}{label}"
    learned = f"learned {hit.day}" if hit.day else "undated"
    return f"MEMORY.md line {hit.position + 1} ({learned}{', ' + hit.label if hit.label else ''})"


def describe_scope(widened: bool) -> str:
    if widened:
        return "your trusted conversations' archives and daily notes, and MEMORY.md"
    return "this conversation's archive, its daily notes and MEMORY.md"


def render(query: str, hits: Sequence[Hit], terms: Sequence[str], asker: str | None, widened: bool,
           stopped: bool, dated: str) -> str:
    """The tool's answer: plain text, one numbered passage per hit, each with its date and its source."""
    scope = describe_scope(widened) + dated
    late = " (the search stopped at its time limit)" if stopped else ""
    if not hits:
        return f"Nothing found for {query!r} in {scope}{late}."
    lines = [f"Found {len(hits)} passage{'s' if len(hits) > 1 else ''} for {query!r} in {scope}{late}; "
             "dates are local:"]
    for number, hit in enumerate(hits, start=1):
        lines.append(f"{number}. {where(hit, asker)}")
        lines.append(f"   {snippet(hit.body, terms)}")
    return "\n".join(lines)


# -- the index (read-only I/O) ---------------------------------------------------------------------


def search(workspace: Path, query: str, asker: str | None, trusted: Callable[[str], bool], scope: str = "session",
           date_from: str | None = None, date_to: str | None = None, budget: float = BUDGET_SECONDS) -> str:
    """The answer to one recall. Raises ValueError for a bad date only; the index's trouble is "nothing found"."""
    since, until = check_day(date_from, "date_from"), check_day(date_to, "date_to")
    if since and until and since > until:
        since, until = until, since
    dated = f" between {since or 'the start'} and {until or 'today'}" if since or until else ""
    terms = query_terms(query)
    if not terms:
        return f"Nothing to search for in {query!r}: give one or more keywords of two characters or more."
    path = Path(workspace) / RECALL_INDEX
    widened = scope == "trusted" and asker is not None and trusted(asker)
    if not path.is_file():
        return f"Nothing found for {query!r}: no archive has been indexed yet."
    deadline = time.monotonic() + budget
    hits: list[Hit] = []
    stopped = False
    try:
        # mode=ro: the tool can never change the index; WAL lets it read while the worker writes.
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=budget)) as db:
            db.set_progress_handler(lambda: int(time.monotonic() > deadline), _PROGRESS_STEPS)
            if db.execute("PRAGMA user_version").fetchone()[0] != RECALL_SCHEMA_VERSION:
                return f"Nothing found for {query!r}: the archive index is being rebuilt."
            sources = [Source(*row) for row in db.execute("SELECT id, kind, session FROM sources")]
            groups = search_order(visible_sources(sources, asker, trusted, scope), asker)
            _find(db, groups, terms, since, until, hits, deadline)
    except _OutOfTime:
        stopped = True
    except sqlite3.OperationalError as exc:
        if "interrupt" not in str(exc):
            return f"Nothing found for {query!r}: the archive index cannot be read right now."
        stopped = True  # what was found in time is still worth giving
    except sqlite3.Error:
        return f"Nothing found for {query!r}: the archive index cannot be read right now."
    # MEMORY.md is in every prompt already: of equal score, what the conversation said comes first.
    hits.sort(key=lambda h: (h.score, h.source.kind != "memory", h.day or "", h.at or ""), reverse=True)
    return render(query, hits[:RESULTS], terms, asker, widened, stopped, dated)


class _OutOfTime(Exception):
    """The budget ran out between two queries (SQLite's progress handler stops one that runs long)."""


def _find(db: sqlite3.Connection, groups: Sequence[Sequence[Source]], terms: Sequence[str], since: str | None,
          until: str | None, hits: list[Hit], deadline: float) -> None:
    """Adds to `hits`, as found, the passages holding the most terms, the most recent of each source first.

    Group by group, level by level: the passages holding all k terms of some choice of k, for k from all
    the terms down to one. A passage holding more terms was found at a higher level (a higher level of a
    source is searched whole before a lower one, or the lower one is not needed), so its score is the number
    of terms it holds. A level is skipped once RESULTS passages hold more terms than it does. Of a long
    query only the levels of few choices are searched, and a passage found below a level left out is
    scored by reading its text (`holds`).
    """
    found: dict[int, set[int]] = {}  # source id -> rowids already in `hits`
    spans: dict[int, tuple[int, int] | None] = {}
    for group in groups:
        skipped = False
        for size, choices in term_sets(terms):
            if sum(1 for hit in hits if hit.score > size) >= RESULTS:
                break
            if len(choices) > MAX_CHOICES and size > 1:
                skipped = True
                continue
            for source in group:
                if source.id not in spans:
                    spans[source.id] = _rowid_span(db, source, since, until)
                span = spans[source.id]
                if span is None:
                    continue
                seen = found.setdefault(source.id, set())
                for chosen in choices:
                    if time.monotonic() > deadline:
                        raise _OutOfTime
                    # Below a skipped level, the terms not chosen are counted in the text itself.
                    unchosen = [t for t in terms if t not in chosen] if skipped else []
                    _add_hits(db, source, _holding(db, chosen, span), size, unchosen, seen, (since, until), hits)


def _add_hits(db: sqlite3.Connection, source: Source, rowids: sqlite3.Cursor, size: int, unchosen: Sequence[str],
              seen: set[int], dates: tuple[str | None, str | None], hits: list[Hit]) -> None:
    """The first RESULTS passages of `rowids` not found before (those hold more terms) and in the dates,
    as hits scored `size` plus the unchosen terms they hold."""
    new = 0
    for (rowid,) in rowids:
        if rowid in seen:  # holds more terms: found at a higher level
            continue
        row = db.execute("SELECT body, day, at, label FROM passages WHERE rowid = ?", (rowid,)).fetchone()
        if row is None or not _in_range(row[1], *dates):
            continue
        seen.add(rowid)
        score = size + sum(holds(row[0], t) for t in unchosen)
        hits.append(Hit(source, rowid & ((1 << SOURCE_BITS) - 1), score, row[1], row[2], row[3] or "", row[0]))
        new += 1
        if new == RESULTS:
            break


def _holding(db: sqlite3.Connection, chosen: Sequence[str], span: tuple[int, int]) -> sqlite3.Cursor:
    """The rowids of `span` holding every term in `chosen`, newest first, read as they are needed. Terms of
    three characters or more are found in the trigram table, shorter ones (most Chinese words) in the
    bigram table. FTS5 intersects one table's terms; SQLite merges the two tables' ordered lists (a lookup
    of one table's rows in the other costs a search per row, and the terms may have no row in common)."""
    selects: list[str] = []
    values: list[object] = []
    for table, wanted in (("passages", [t for t in chosen if len(t) >= MIN_TRIGRAM]),
                          ("grams", [t for t in chosen if len(t) < MIN_TRIGRAM])):
        if wanted:
            selects.append(f"SELECT rowid FROM {table} WHERE {table} MATCH ? AND rowid BETWEEN ? AND ?")
            values += [" AND ".join(phrase(t) for t in wanted), *span]
    return db.execute(" INTERSECT ".join(selects) + " ORDER BY 1 DESC", values)


def _rowid_span(db: sqlite3.Connection, source: Source, since: str | None, until: str | None) -> tuple[int, int] | None:
    base = source.id << SOURCE_BITS
    if since is None and until is None:
        return base, base | ((1 << SOURCE_BITS) - 1)
    low, high = db.execute("SELECT min(low), max(high) FROM days WHERE source = ? AND day BETWEEN ? AND ?",
                           (source.id, since or "0000-00-00", until or "9999-99-99")).fetchone()
    return None if low is None else (low, high)


def _in_range(day: str | None, since: str | None, until: str | None) -> bool:
    if since is None and until is None:
        return True
    return day is not None and (since or "") <= day <= (until or "9999-99-99")
