"""Merging facts into MEMORY.md's managed part (pure).

Dedup against the whole file, corrections in place, then the cap on the number of facts."""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from worker.memory.dedup import DEFAULT_THRESHOLD, best_match, category, find_duplicate, importance, normalize
from worker.memory.entries import Fact
from worker.memory.longterm.part import Line, Part, locate, metas, outside_lines, parse, render
from worker.memory.longterm.sidecar import Meta
from worker.text.language import LANGUAGES
from worker.text.redact import one_line


@dataclass
class MergeStats:
    added: int = 0
    replaced: int = 0
    skipped: int = 0
    evicted: int = 0


@dataclass
class _Candidate:
    text: str
    norm: str
    level: int
    group: str
    order: int
    correction: bool
    replaces: str  # the old fact as the model quoted it; "" when it did not


# A fact is written as a plain line. One that would read back as a heading, a list item or a comment would not be
# found again as a fact, so the next merge would add it once more: those leading marks go.
_NOT_A_FACTS_START = re.compile(r"^(?:\s*(?:#+|[-*+]|\d+[.)])\s+|\s*<!--)+")


def fact_text(raw: str) -> str:
    """The text a fact is written with: one line, without what would make it read as something else."""
    return _NOT_A_FACTS_START.sub("", one_line(raw)).strip()


def _candidates(facts: Sequence[Fact], stats: MergeStats) -> list[_Candidate]:
    found = []
    for order, fact in enumerate(facts):
        text = fact_text(fact.text)
        level = importance(fact.model_copy(update={"text": text})) if text else None
        if level is None:  # ephemeral, unimportant or empty
            stats.skipped += 1
            continue
        found.append(
            _Candidate(
                text,
                normalize(text),
                level,
                category(fact),
                order,
                fact.tag == "correction",
                one_line(fact.replaces or ""),
            )
        )
    return found


@dataclass
class _Known:
    """Every text the file holds, normalized; the managed lines' texts sit at [offset, offset + count)."""

    norms: list[str]
    offset: int
    count: int
    exact: Counter[str]

    @classmethod
    def of(cls, outside: Sequence[str], lines: Sequence[Line]) -> _Known:
        norms = [normalize(text) for text in outside] + [normalize(line.text) for line in lines]
        return cls(norms, len(norms) - len(lines), len(lines), Counter(norms))

    def managed(self) -> list[str]:
        return self.norms[self.offset : self.offset + self.count]

    def replace(self, target: int, norm: str) -> None:
        self.exact[self.norms[self.offset + target]] -= 1
        self.norms[self.offset + target] = norm
        self.exact[norm] += 1

    def holds(self, norm: str, threshold: float) -> bool:
        """The text is in the file already, exactly or nearly."""
        return bool(self.exact[norm]) or find_duplicate(norm, self.norms, threshold) is not None

    def add(self, norm: str) -> None:
        self.norms.append(norm)
        self.exact[norm] += 1


def merge(
    part: Part,
    outside: Sequence[str],
    facts: Sequence[Fact],
    today: str,
    max_facts: int,
    threshold: float = DEFAULT_THRESHOLD,
    session: str | None = None,
    pinned: AbstractSet[str] = frozenset(),
) -> MergeStats:
    """Merges facts into `part` in place: dedup against the whole file, corrections in place, then the cap.

    A fact whose normalized text is in `pinned` (the user pinned it while it was held) is pinned where it lands."""
    stats = MergeStats()
    lines = part.lines
    for seq, line in enumerate(lines):
        line.seq = seq
    known = _Known.of(outside, lines)
    regular = _correct(lines, known, _candidates(facts, stats), today, threshold, session, stats)
    accepted = _admit(lines, known, regular, today, max_facts, threshold, session, stats, pinned)
    part.lines = _capped(lines, accepted, max_facts, stats)
    if pinned:  # a correction's line, or the line an exact copy of it was a duplicate of
        for line in part.lines:
            line.pinned = line.pinned or normalize(line.text) in pinned
    return stats


def _correct(
    lines: list[Line],
    known: _Known,
    candidates: list[_Candidate],
    today: str,
    threshold: float,
    session: str | None,
    stats: MergeStats,
) -> list[_Candidate]:
    """Applies the corrections to the lines they correct, in place; returns the candidates still to add."""
    regular: list[_Candidate] = []
    for cand in candidates:
        if not cand.correction:
            regular.append(cand)
            continue
        if known.exact[cand.norm]:
            stats.skipped += 1
            continue
        managed = known.managed()
        target = best_match(normalize(cand.replaces), managed, threshold) if cand.replaces else None
        if target is None:
            target = best_match(cand.norm, managed, threshold)
        if target is None:
            regular.append(cand)  # nothing of ours to correct: the corrected fact is still a fact
            continue
        line = lines[target]
        known.replace(target, cand.norm)
        line.text, line.importance, line.date = cand.text, max(line.importance, cand.level), today
        line.session = session
        stats.replaced += 1
    return regular


def _admit(
    lines: list[Line],
    known: _Known,
    regular: list[_Candidate],
    today: str,
    max_facts: int,
    threshold: float,
    session: str | None,
    stats: MergeStats,
    pinned: AbstractSet[str] = frozenset(),
) -> list[tuple[_Candidate, Line]]:
    """The new facts that are no duplicate and that the cap would keep, in the order the model gave them."""
    # Most important first (a pinned one before all: it ranks above every unpinned line), so a candidate the cap
    # would evict anyway needs no fuzzy search.
    regular = sorted(regular, key=lambda c: (c.norm not in pinned, -c.level))
    top = len(lines) + len(regular) + 1
    existing = sorted(line.rank() for line in lines)
    accepted: list[tuple[_Candidate, Line]] = []
    for k, cand in enumerate(regular):
        new = Line(cand.text, cand.group, cand.level, today, top + len(regular) - k, session, cand.norm in pinned)
        above = len(accepted) + len(existing) - bisect.bisect_right(existing, new.rank())
        if above >= max_facts or known.holds(cand.norm, threshold):
            stats.skipped += 1
            continue
        accepted.append((cand, new))
        known.add(cand.norm)
    accepted.sort(key=lambda pair: pair[0].order)
    return accepted


def _capped(
    lines: list[Line], accepted: list[tuple[_Candidate, Line]], max_facts: int, stats: MergeStats
) -> list[Line]:
    """The old lines and the accepted new ones, the least important dropped beyond `max_facts`."""
    merged = lines + [line for _, line in accepted]
    if len(merged) > max_facts:
        # The least important go first (a pinned one last: it ranks above all others); among equals the oldest.
        cut = sorted(merged, key=Line.rank, reverse=True)[max_facts:]
        gone = {id(line) for line in cut}
        stats.evicted = sum(1 for line in lines if id(line) in gone)
        stats.skipped += sum(1 for _, line in accepted if id(line) in gone)
        merged = [line for line in merged if id(line) not in gone]
    kept = {id(line) for line in merged}
    stats.added = sum(1 for _, line in accepted if id(line) in kept)
    return merged


@dataclass(frozen=True)
class Batch:
    """The facts of one job, merged with that job's day, session and language."""

    facts: Sequence[Fact]
    language: str
    today: str
    session: str | None = None
    asked: float | None = None  # when its model call was made (epoch seconds); None: made now
    pinned: frozenset[str] = frozenset()  # normalized texts of its facts the user pinned while they were held


@dataclass
class Merged:
    """A merge's outcome: the whole file's new text and what the sidecar must hold for it."""

    text: str
    meta: dict[str, Meta]  # the part's records before and after: a crash between the two writes loses none
    stats: MergeStats


def merge_text(
    text: str,
    batches: Sequence[Batch],
    max_facts: int,
    threshold: float = DEFAULT_THRESHOLD,
    meta: Mapping[str, Meta] | None = None,
) -> Merged:
    """Merges batches, in order, into the file's text.

    Only the managed part differs (or is appended when the file had none). Pure: `meta` is the sidecar as read."""
    stats = MergeStats()
    if not batches:
        return Merged(text, dict(meta or {}), stats)
    first = batches[0]
    span = locate(text)
    if span is None:
        part = Part(first.language if first.language in LANGUAGES else "en")
        outside, before = outside_lines(text), {}
    else:
        part = parse(text[span[0] : span[1]], first.today, first.language, meta, threshold)
        outside = outside_lines(text[: span[0]]) + outside_lines(text[span[1] :])
        before = metas(part)
    for batch in batches:
        done = merge(part, outside, batch.facts, batch.today, max_facts, threshold, batch.session, batch.pinned)
        stats.added += done.added
        stats.replaced += done.replaced
        stats.skipped += done.skipped
        stats.evicted += done.evicted
    if span is None:
        if not part.lines:
            return Merged(text, {}, stats)
        separator = "" if not text or text.endswith("\n\n") else "\n" if text.endswith("\n") else "\n\n"
        return Merged(f"{text}{separator}{render(part)}\n", metas(part), stats)
    return Merged(text[: span[0]] + render(part) + text[span[1] :], {**before, **metas(part)}, stats)


def apply(
    text: str,
    facts: Sequence[Fact],
    language: str,
    today: str,
    max_facts: int,
    threshold: float = DEFAULT_THRESHOLD,
    session: str | None = None,
) -> tuple[str, MergeStats]:
    """The whole file's new text after one batch (no sidecar: lines without a comment get the defaults)."""
    merged = merge_text(text, [Batch(facts, language, today, session)], max_facts, threshold)
    return merged.text, merged.stats
