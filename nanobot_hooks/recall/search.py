"""The recall search: a few short, dated passages of what summaries left out, from the worker's index.

Runs inside nanobot for the `recall` tool (tool.RecallTool). Light and read-only: the standard
library's sqlite3 on the index the worker keeps (layout: contract/recall.py), opened with `mode=ro`, stopped
at a fixed time budget. A missing or unreadable index gives "nothing found", never an error.

Who sees what (hits.py): a session sees its own archived messages, its own sections of the daily
notes, and MEMORY.md (which nanobot already puts in every session's prompt). Only when the user set
NANOBOT_SUMMARY_RECALL_SCOPE=trusted does a trusted session (NANOBOT_MEMORY_SESSIONS) also see the other
trusted sessions; a session that is not trusted (a group, an email sender, a web client) never does.

Ranking (rank.py): BM25 over the query's words (query.py): a rare word counts for more than a name found in every
other message, a short passage holding it for more than a long one. In a conversation the answer often follows the
question that holds the words ("How did the audition go?" - "I got the part"), so the messages next to a strong hit
are shown under it (a neighbour holding none of the words is no passage of its own). Recency breaks ties only. Days
the query names narrow the search, unless nothing is found in them. The asker's own material is searched first
(`search_order`): the time budget never runs out before it.

Meaning (off unless NANOBOT_SUMMARY_EMBEDDING_MODEL is set and the worker stored passages' vectors): the query's
embedding (meaning.py, asked within its own short bound) is compared with each source's newest passages and the
lexical candidates (a deep list), and a passage's score gains a share of the best BM25 score for each standard
deviation its cosine stands above the others' (`_fused`): a passage that says the same in other words ("that
sunset piece" for "what did she paint?") is found, and the words' evidence stays first. (Reciprocal rank fusion
was tried and lost a third of recall@1: the model's ranking of short chat turns is far noisier than BM25's.)
Without the query's embedding in time the search is the lexical one, as if meaning were off.
"""

from __future__ import annotations

import heapq
import math
import re
import sqlite3
import time
import zlib
from array import array
from bisect import bisect_right, insort
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, field, replace
from datetime import date as Date
from pathlib import Path

from nanobot_hooks.contract.recall import (
    RECALL_INDEX,
    RECALL_SCHEMA_VERSION,
    RETIRED_SOURCE,
    SOURCE_BITS,
    TOKENIZE,
    Block,
    Directory,
    Passage,
    index_text,
    lengths,
    read_block,
    similarity,
)
from nanobot_hooks.recall.hits import SOURCE_POSITION, Hit, Source, search_order, visible_sources, widened
from nanobot_hooks.recall.meaning import Embedder
from nanobot_hooks.recall.query import Asked, check_day, phrase, read_query
from nanobot_hooks.recall.rank import PROBE, around, bm25, choose, neighbours, plan_terms, rarity
from nanobot_hooks.recall.snippets import SNIPPET_CHARS, dates_phrase, describe_scope, render, snippet

BUDGET_SECONDS = 0.5  # nanobot gives tools no timeout: the search bounds its own
CANDIDATES = 12  # best passages taken from each source before they are merged
NEIGHBOR_SHARE = 0.5  # of a hit's score, for the message before and after it
LETTER_SHARE = 0.3  # of a word's weight, for one letter of a CJK word (query.Asked.letters)
MEMORY_SHARE = 0.5  # of a MEMORY.md line's score: nanobot puts the file in every prompt, the rest it never sees
ROWS_BUDGET = 4_000  # passages one search may score; see rank.plan_terms
SIZE_CAP = 1_000  # passages counted of a notes or MEMORY.md source, for its words' rarity
DEEP = 60  # passages of each ranking fused, by words and by meaning
MEANING_WEIGHT = 0.1  # of the source's best BM25 score, for each standard deviation of a passage's cosine
MEANING_FLOOR = 1.5  # standard deviations above the mean cosine, for a passage that holds none of the words
VECTOR_SCAN = 3_000  # a source's newest passages compared by meaning (besides the lexical candidates)
_MARKED = re.compile("\x01(.*?)\x02", re.S)
_WORD = re.compile(r"[^\W_]+")  # a word as SQLite's unicode61 tokenizer takes it: one term of the index
_PROGRESS_STEPS = 1_000  # SQLite virtual-machine steps between two looks at the clock


def search(
    workspace: Path,
    query: str,
    asker: str | None,
    trusted: Callable[[str], bool],
    scope: str = "session",
    date_from: str | None = None,
    date_to: str | None = None,
    budget: float = BUDGET_SECONDS,
    today: Date | None = None,
    meaning: Embedder | None = None,
) -> str:
    """The answer to one recall.

    Raises ValueError for a bad date only; the index's trouble is "nothing found". `meaning`: the query's embedder
    (meaning.embedder), asked only when the index holds vectors."""
    since, until = check_day(date_from, "date_from"), check_day(date_to, "date_to")
    if since and until and since > until:
        since, until = until, since
    asked = read_query(query, today or Date.today())
    if since or until:  # the tool's own arguments win over days the query's words name
        asked = replace(asked, since=since, until=until, named=False)
    if not asked.terms and asked.since is None:
        return f"Nothing to search for in {query!r}: give one or more keywords."
    path = Path(workspace) / RECALL_INDEX
    if not path.is_file():
        return f"Nothing found for {query!r}: no archive has been indexed yet."
    deadline = time.monotonic() + budget
    try:
        # mode=ro: the tool can never change the index; WAL lets it read while the worker writes.
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=budget)) as db:
            db.set_progress_handler(lambda: int(time.monotonic() > deadline), _PROGRESS_STEPS)
            if db.execute("PRAGMA user_version").fetchone()[0] != RECALL_SCHEMA_VERSION:
                return f"Nothing found for {query!r}: the archive index is being rebuilt."
            vector = _query_meaning(db, meaning, query) if asked.terms else None
            deadline = time.monotonic() + budget  # the embedding's wait has its own bound, not the search's
            sources = _sources(db, asker, widened(asker, trusted, scope))
            groups = search_order(visible_sources(sources, asker, trusted, scope), asker)
            return _answer(
                _Search(db, asked, deadline, meaning=vector), groups, query, asker, widened(asker, trusted, scope)
            )
    except sqlite3.Error:
        return f"Nothing found for {query!r}: the archive index cannot be read right now."


def _sources(db: sqlite3.Connection, asker: str | None, wide: bool) -> list[Source]:
    """The index's sources the asker may see (hits.py decides), read from SQLite.

    With the asker's own only (and MEMORY.md) when it sees no other, since a busy workspace has a notes source for each
    of thousands of sessions."""
    if wide:
        rows = db.execute("SELECT id, kind, session, through FROM sources")
    else:  # the session itself and its pre-`/new` copies (`<key>` RETIRED_SOURCE `<copy>`)
        rows = db.execute(
            "SELECT id, kind, session, through FROM sources WHERE kind = 'memory' OR session = ?1 "
            "OR substr(session, 1, length(?1) + 1) = ?1 || ?2",
            (asker or "", RETIRED_SOURCE),
        )
    return [Source(*row) for row in rows]


def _query_meaning(db: sqlite3.Connection, meaning: Embedder | None, query: str) -> bytes | None:
    """The query's embedding, when there is an embedder and the index holds vectors to compare it with."""
    if meaning is None:
        return None
    try:
        if db.execute("SELECT 1 FROM vectors WHERE length(v) > 0 LIMIT 1").fetchone() is None:
            return None
    except sqlite3.Error:  # an index the worker has not given vectors yet
        return None
    return meaning(query)


def _answer(run: _Search, groups: Sequence[Sequence[Source]], query: str, asker: str | None, wide: bool) -> str:
    """The search on the open index, rendered.

    Days the query named are let go when nothing is in them; what was found when the clock ran out is still worth
    giving."""
    asked = run.asked
    described, late = describe_scope(wide) + dates_phrase(asked.since, asked.until), ""
    try:
        run.plan()
        _find(run, groups)
        if not run.hits and asked.named and asked.terms:
            described = describe_scope(wide)
            late = f" (nothing dated{dates_phrase(asked.since, asked.until)}: from any day)"
            run.asked = replace(asked, since=None, until=None)
            _find(run, groups)
        return render(query, _shown(run, choose(run.hits)), asker, described, late)
    except _OutOfTime:
        pass
    except sqlite3.OperationalError as exc:
        if "interrupt" not in str(exc):
            raise
    run.db.set_progress_handler(None, 0)
    return render(
        query,
        _shown(run, choose(run.hits), focus=False),
        asker,
        described,
        late + " (the search stopped at its time limit)",
    )


# -- the index (read-only I/O) ---------------------------------------------------------------------


@dataclass
class _Search:
    """One search's connection, terms and clock, and the hits found so far (kept when the clock runs out)."""

    db: sqlite3.Connection
    asked: Asked
    deadline: float
    hits: list[Hit] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # the words searched for (plan_terms)
    match: str = ""  # the FTS5 query of the newest passages, when the words are too common to rank
    ranked: bool = True  # by BM25; else the newest passages holding every word
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # passages holding a word, and the cap
    blocks: dict[int, tuple[int, Directory]] = field(default_factory=dict)  # read so far, by id: (last, directory)
    starts: list[int] = field(default_factory=list)  # their ids, ascending
    texts: dict[int, Block | None] = field(default_factory=dict)  # blocks decompressed (None: damaged)
    meaning: bytes | None = None  # the query's embedding, quantized: the ranks by meaning are fused in

    def plan(self) -> None:
        """Choose what to ask SQLite (plan_terms): the rarest words; their CJK letters where room is left."""
        self.kept, self.ranked = plan_terms(self.asked.terms, self.count, ROWS_BUDGET)
        self.match = " AND ".join(self.kept)
        if not (self.ranked and self.kept and self.asked.letters):
            return
        room = ROWS_BUDGET - sum(self.count(term, ROWS_BUDGET + 1) for term in self.kept)  # counted already
        letters, fits = plan_terms(self.asked.letters, self.count, room) if room > 0 else ([], False)
        self.kept += letters if fits else []

    def count(self, term: str, cap: int = PROBE + 1) -> int:
        """How many passages hold the term, counted up to `cap` (a count already made further is reused)."""
        self.check_clock()
        known = self.counts.get(term)
        if known is not None and (known[0] < known[1] or known[1] >= cap):
            return min(known[0], cap)
        try:
            held = self.db.execute(
                "SELECT count(*) FROM (SELECT 1 FROM passages WHERE passages MATCH ? LIMIT ?)", (term, cap)
            ).fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "interrupt" in str(exc):
                raise
            held = 0  # a term FTS5 refuses (a phrase, which an index without positions cannot match): no passage
        self.counts[term] = (held, cap)
        return int(held)

    def block(self, rowid: int) -> int | None:
        """The block that holds the passage, None when none does.

        The block that holds the passage, None when none does (blocks never overlap; those read are kept: hits and
        neighbours share them)."""
        number = self.covering(rowid)
        if number is None:
            self.read_blocks([rowid])
            number = self.covering(rowid)
        return number if number is not None and self.blocks[number][1].length(rowid) is not None else None

    def covering(self, rowid: int) -> int | None:
        """The block read so far whose rowids' range holds this one."""
        at = bisect_right(self.starts, rowid)
        return self.starts[at - 1] if at and rowid <= self.blocks[self.starts[at - 1]][0] else None

    def read_blocks(self, rowids: Sequence[int]) -> None:
        """The directories of the blocks that may hold these passages, in one query.

        The directories of the blocks that may hold these passages (each the last beginning at or before it), in one
        query."""
        if not rowids:
            return
        asked = ",".join("(?)" for _ in rowids)
        for number, last, data in self.db.execute(
            f"WITH asked(r) AS (VALUES {asked}) SELECT DISTINCT blocks.id, blocks.last, blocks.lengths FROM asked "
            "JOIN blocks ON blocks.id = (SELECT max(id) FROM blocks WHERE id <= asked.r)",
            list(rowids),
        ):
            self._keep(number, last, data)

    def _keep(self, number: int, last: int, data: bytes) -> Directory:
        if number not in self.blocks:
            try:
                directory = lengths(number, data)
            except (zlib.error, ValueError, TypeError):  # a damaged block: as if its passages were not there
                directory = Directory(number, array("I"), array("H"))
            self.blocks[number] = (last, directory)
            insort(self.starts, number)
        return self.blocks[number][1]

    def length(self, rowid: int) -> int | None:
        """A passage's length in words (BM25's), read without its text; None when the index lacks it."""
        number = self.block(rowid)
        return None if number is None else self.blocks[number][1].length(rowid)

    def newest(self, span: tuple[int, int], count: int) -> list[int]:
        """The rowids of the span's `count` newest passages, newest first, from the blocks' directories."""
        found: list[int] = []
        for number, last, data in self.db.execute(
            "SELECT id, last, lengths FROM blocks WHERE id <= ? AND id >= ? - ? ORDER BY id DESC",
            (span[1], span[0], SOURCE_POSITION),
        ):
            if last < span[0]:
                break
            held = self._keep(number, last, data).rowids()
            found += [r for r in reversed(held) if span[0] <= r <= span[1]][: count - len(found)]
            if len(found) >= count:
                break
        return found

    def passage(self, rowid: int) -> Passage | None:
        """A passage as shown, from its block (decompressed once a search: hits and neighbours share blocks)."""
        number = self.block(rowid)
        if number is None:
            return None
        if number not in self.texts:
            row = self.db.execute("SELECT passages FROM blocks WHERE id = ?", (number,)).fetchone()
            try:
                self.texts[number] = read_block(row[0]) if row else None
            except (zlib.error, ValueError, TypeError):  # a damaged block: as if its passages were not there
                self.texts[number] = None
        held = self.texts[number]
        try:
            return None if held is None else held.passage(rowid)
        except (ValueError, TypeError):
            return None

    def check_clock(self) -> None:
        if time.monotonic() > self.deadline:
            raise _OutOfTime


class _OutOfTime(Exception):
    """The budget ran out between two queries (SQLite's progress handler stops one that runs long)."""


def _find(run: _Search, groups: Sequence[Sequence[Source]]) -> None:
    """Adds the best passages of every source and the neighbours of the best message hits to the hits.

    Adds to the hits the best passages of every source (group by group), and the neighbours of the best message hits (of
    the asker's own group first: they are its answers)."""
    for group in groups:
        for source in group:
            run.check_clock()
            span = _rowid_span(run.db, source, run.asked.since, run.asked.until)
            if span is not None:
                run.hits += _best_of(run, source, span)
        if run.asked.terms and run.ranked:
            run.hits += _neighbour_hits(run, run.hits)


def _best_of(run: _Search, source: Source, span: tuple[int, int]) -> list[Hit]:
    """A source's CANDIDATES best passages in the days asked.

    By BM25, or the newest when no word is asked or the words are too common to rank; fused with the ranking by meaning
    when the query's embedding is had."""
    lexical = _lexical(run, source, span)
    return _fused(run, source, span, lexical) if run.meaning else lexical[:CANDIDATES]


def _lexical(run: _Search, source: Source, span: tuple[int, int]) -> list[Hit]:
    if run.asked.terms and not run.kept:
        return []  # no passage holds any of the words
    if run.ranked and run.kept:
        return _ranked(run, source, span)
    rows = (
        [
            rowid
            for (rowid,) in run.db.execute(
                "SELECT rowid FROM passages WHERE passages MATCH ? AND rowid BETWEEN ? AND ? "
                "ORDER BY rowid DESC LIMIT ?",
                (run.match, *span, CANDIDATES * 2),
            )
        ]
        if run.kept
        else run.newest(span, CANDIDATES * 2)
    )
    found = (_hit(run, source, rowid & SOURCE_POSITION, 0.0) for rowid in rows)
    return [hit for hit in found if hit is not None]


def _ranked(run: _Search, source: Source, span: tuple[int, int]) -> list[Hit]:
    """BM25 within the source.

    A word's rarity is counted among this conversation's passages, not the whole workspace's, where a name said in every
    other message of one chat would look rare."""
    held: dict[int, list[str]] = {}
    counts: Counter[str] = Counter()
    whole = source.id << SOURCE_BITS, source.id << SOURCE_BITS | SOURCE_POSITION
    for term in run.kept:
        run.check_clock()
        # Counted in the whole source (the days asked are no collection of their own), kept in the span.
        for (rowid,) in run.db.execute(
            "SELECT rowid FROM passages WHERE passages MATCH ? AND rowid BETWEEN ? AND ?", (term, *whole)
        ):
            counts[term] += 1
            if span[0] <= rowid <= span[1]:
                held.setdefault(rowid, []).append(term)
    size = _size(run, source)
    weight = {
        term: rarity(count, size) * (LETTER_SHARE if term in run.asked.letters else 1.0)
        for term, count in counts.items()
    }
    share = MEMORY_SHARE if source.kind == "memory" else 1.0
    nearby = around(held, weight) if source.kind == "messages" else {}
    pool = sorted(held, key=lambda r: (sum(weight[t] for t in held[r]) + nearby.get(r, 0.0), r), reverse=True)[
        : max(CANDIDATES * 4, DEEP if run.meaning else 0)
    ]
    average = _average_length(run, span)
    run.read_blocks([rowid for rowid in pool if run.covering(rowid) is None])
    scored = {}
    for rowid in pool:  # by the passages' lengths alone: only those kept are read (and decompressed)
        words = run.length(rowid)
        if words is not None:
            scored[rowid] = (bm25([weight[t] for t in held[rowid]], words, average) + nearby.get(rowid, 0.0)) * share
    hits: list[Hit] = []
    for rowid in sorted(scored, key=lambda r: (scored[r], r), reverse=True):
        hit = _hit(run, source, rowid & SOURCE_POSITION, scored[rowid])
        hits += [hit] if hit is not None else []
        if len(hits) >= (DEEP if run.meaning else CANDIDATES):
            break
    return sorted(hits, key=Hit.order, reverse=True)


def _fused(run: _Search, source: Source, span: tuple[int, int], lexical: list[Hit]) -> list[Hit]:
    """The source's CANDIDATES best when meaning counts too.

    Each candidate's BM25 score (0 for a passage found by meaning alone) plus MEANING_WEIGHT of the source's best BM25
    score for each standard deviation its cosine to the query stands above the mean of the passages compared (any
    model's cosines, whatever their range, weigh alike)."""
    near = _nearest(run, span, [hit.rowid for hit in lexical[:DEEP]])
    if len(near) < 2:
        return lexical[:CANDIDATES]
    mean = sum(near.values()) / len(near)
    spread = math.sqrt(sum((c - mean) ** 2 for c in near.values()) / len(near)) or 1.0
    known = {hit.rowid: hit for hit in lexical[:DEEP]}
    unit = max((hit.score for hit in known.values()), default=0.0) or (MEMORY_SHARE if source.kind == "memory" else 1.0)
    floor = mean + MEANING_FLOOR * spread  # a passage found by meaning alone must stand out by it
    rowids = set(known) | {rowid for rowid in heapq.nlargest(DEEP, near, key=near.__getitem__) if near[rowid] >= floor}
    scored = {
        rowid: (known[rowid].score if rowid in known else 0.0) + MEANING_WEIGHT * unit * (near[rowid] - mean) / spread
        if rowid in near
        else known[rowid].score
        for rowid in rowids
    }
    hits = []
    for rowid in sorted(scored, key=lambda r: (scored[r], r), reverse=True)[: CANDIDATES * 2]:
        found = known.get(rowid) or _hit(run, source, rowid & SOURCE_POSITION, 0.0)
        if found is not None:
            hits.append(replace(found, score=scored[rowid]))
    return sorted(hits, key=Hit.order, reverse=True)[:CANDIDATES]


def _nearest(run: _Search, span: tuple[int, int], candidates: Sequence[int]) -> dict[int, float]:
    """The cosine to the query of the span's VECTOR_SCAN newest passages and of the candidates (those embedded)."""
    assert run.meaning is not None
    rows = run.db.execute(
        "SELECT rowid, v FROM vectors WHERE rowid BETWEEN ? AND ? ORDER BY rowid DESC LIMIT ?", (*span, VECTOR_SCAN)
    ).fetchall()
    seen = {rowid for rowid, _ in rows}
    for rowid in candidates:
        if rowid not in seen:
            rows += run.db.execute("SELECT rowid, v FROM vectors WHERE rowid = ?", (rowid,)).fetchall()
    near = {}
    for number, (rowid, vector) in enumerate(rows):
        if not number % 256:
            run.check_clock()
        if vector:
            near[rowid] = similarity(run.meaning, vector)
    return near


def _size(run: _Search, source: Source) -> int:
    """How many passages the source holds: its indexed messages, or (notes, MEMORY.md) a bounded count."""
    if source.kind == "messages" and source.size:
        return source.size
    base = source.id << SOURCE_BITS
    held = run.db.execute(
        "SELECT total(n) FROM (SELECT n FROM blocks WHERE id BETWEEN ? AND ? LIMIT ?)",
        (base, base | SOURCE_POSITION, SIZE_CAP),
    ).fetchone()[0]
    return min(int(held), SIZE_CAP)


def _average_length(run: _Search, span: tuple[int, int]) -> float:
    """The average passage length of a source, in words, from its newest passages."""
    found = [size for size in map(run.length, run.newest(span, 50)) if size is not None]
    return sum(found) / max(len(found), 1)


def _neighbour_hits(run: _Search, hits: Sequence[Hit]) -> list[Hit]:
    found = []
    for hit, position in neighbours(hits):
        run.check_clock()
        near = _hit(run, hit.source, position, hit.score * NEIGHBOR_SHARE, matched=False)
        if near is not None:
            found.append(near)
    return found


def _hit(run: _Search, source: Source, position: int, score: float, matched: bool = True) -> Hit | None:
    """The passage at `position` of `source` as a hit, when it exists and is dated within the days asked."""
    rowid = source.id << SOURCE_BITS | position
    shown = run.passage(rowid)
    if shown is None or not _in_range(shown.day, run.asked.since, run.asked.until):
        return None
    return Hit(source, position, score, shown.day, shown.at, shown.label, shown.body, matched)


def _shown(run: _Search, hits: Sequence[Hit], focus: bool = True) -> list[tuple[Hit, str]]:
    """Each hit with its snippet, cut around its rarest matched word (a passage shown whole needs none)."""
    cut = [hit for hit in hits if focus and hit.matched and len(hit.body) > SNIPPET_CHARS]
    marked = _focus(run, cut) if cut else {}
    return [(hit, snippet(hit.body, marked.get(hit.rowid))) for hit in hits]


def _focus(run: _Search, hits: Sequence[Hit]) -> dict[int, str]:
    """Each passage's rarest word that matched the query, as its text has it (SQLite marks what matched), by rowid."""
    if not run.asked.terms:
        return {}
    # The index holds no copy of the text to mark (contentless): the passages are indexed in memory for it, together.
    with closing(sqlite3.connect(":memory:")) as alone:
        alone.execute(f"CREATE VIRTUAL TABLE passage USING fts5(terms, tokenize={TOKENIZE!r})")
        alone.executemany(
            "INSERT INTO passage(rowid, terms) VALUES(?, ?)", [(n, index_text(hit.body)) for n, hit in enumerate(hits)]
        )
        rows = alone.execute(
            "SELECT rowid, highlight(passage, 0, char(1), char(2)) FROM passage WHERE passage MATCH ?",
            (" OR ".join(run.asked.terms),),
        ).fetchall()
    found = {}
    for n, text in rows:
        words = {w for marked in _MARKED.findall(text or "") for w in _WORD.findall(marked)}
        best = min(words, key=lambda w: (run.count(phrase(w.casefold())), -len(w)), default=None)
        if best is not None:
            found[hits[n].rowid] = best
    return found


def _rowid_span(db: sqlite3.Connection, source: Source, since: str | None, until: str | None) -> tuple[int, int] | None:
    base = source.id << SOURCE_BITS
    if since is None and until is None:
        return base, base | SOURCE_POSITION
    low, high = db.execute(
        "SELECT min(low), max(high) FROM days WHERE source = ? AND day BETWEEN ? AND ?",
        (source.id, since or "0000-00-00", until or "9999-99-99"),
    ).fetchone()
    return None if low is None else (base | low, base | high)


def _in_range(day: str | None, since: str | None, until: str | None) -> bool:
    if since is None and until is None:
        return True
    return day is not None and (since or "") <= day <= (until or "9999-99-99")
