"""The recall search's hits and answer (pure): who sees which sources, the best passages in order, the
snippet shown of each, and the plain text the model reads."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import date as Date

from nanobot_hooks.contract.recall import SOURCE_BITS, source_owner
from nanobot_hooks.text import CJK_RUN

RESULTS = 5
SNIPPET_CHARS = 180
NEIGHBORS_OF = 3  # the best message hits whose neighbours are brought in
PROBE = 500  # passages a word is first counted up to (plan_terms)
SUMMARY_SLOTS = 2  # of the passages shown, at most this many from the notes and MEMORY.md (choose)
SOURCE_POSITION = (1 << SOURCE_BITS) - 1  # a rowid's position part
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class Source:
    id: int
    kind: str  # messages | notes | memory
    session: str
    size: int = 0  # messages: how many are indexed (the collection the words' rarity is counted in)


@dataclass(frozen=True)
class Hit:
    source: Source
    position: int
    score: float  # bm25, higher is better; a neighbour's is a share of its hit's
    day: str | None
    at: str | None
    label: str
    body: str
    matched: bool = True  # holds a query word itself (a neighbour need not)
    context: tuple[Hit, ...] = ()  # the neighbours shown under it (choose), that hold no query word

    @property
    def rowid(self) -> int:
        return self.source.id << SOURCE_BITS | self.position

    def order(self) -> tuple[float, bool, str, str, int]:
        # MEMORY.md is in every prompt already: of equal score, what the conversation said comes first.
        return self.score, self.source.kind != "memory", self.at or self.day or "", self.day or "", self.position


# -- pure ------------------------------------------------------------------------------------------


def visible_sources(sources: Sequence[Source], asker: str | None, trusted: Callable[[str], bool], scope: str) -> list[Source]:
    """The sources a session may search: its own, MEMORY.md, and (scope "trusted", asker trusted) other trusted ones."""
    widen = scope == "trusted" and asker is not None and trusted(asker)
    return [p for p in sources if p.kind == "memory"
            or (asker is not None and source_owner(p.session) == asker)
            or (widen and p.session and trusted(source_owner(p.session)))]


def search_order(sources: Sequence[Source], asker: str | None) -> list[list[Source]]:
    """The sources to search, in groups searched one after the other: the asker's own material and MEMORY.md
    first (with many trusted sessions, the budget could otherwise run out before it), then the others."""
    own = [p for p in sources if p.kind == "memory" or (asker is not None and source_owner(p.session) == asker)]
    others = [p for p in sources if p not in own]
    return [group for group in (own, others) if group]


def best(hits: Sequence[Hit], count: int = RESULTS) -> list[Hit]:
    """The `count` best hits, each passage once: a neighbour that is also a hit keeps the better score, and
    is a match (its snippet shows the word found)."""
    kept: dict[int, Hit] = {}
    for hit in hits:
        known = kept.get(hit.rowid)
        if known is None or hit.order() > known.order():
            kept[hit.rowid] = hit if known is None else replace(hit, matched=hit.matched or known.matched)
        elif hit.matched and not known.matched:
            kept[hit.rowid] = replace(known, matched=True)
    return sorted(kept.values(), key=Hit.order, reverse=True)[:count]


def choose(hits: Sequence[Hit], count: int = RESULTS, summaries: int = SUMMARY_SLOTS) -> list[Hit]:
    """The passages shown: the best of those holding the query's words, of which at most `summaries` from the
    daily notes and MEMORY.md while messages holding the words are left to show. Notes and facts are summaries
    already; what a summary dropped is in the messages, and a notes line that matches well would otherwise push
    the message it came from out. A message next to a hit that holds none of the words ("ok", the answer to
    the question found) is no passage of its own: it is shown under its hit (`with_context`)."""
    ranked = best(hits, len(hits))
    matched = [hit for hit in ranked if hit.matched]
    matched_left = sum(1 for hit in matched if hit.source.kind == "messages")
    chosen: list[Hit] = []
    for hit in matched:
        taken = sum(1 for h in chosen if h.source.kind != "messages")
        if hit.source.kind == "messages":
            matched_left -= 1
        elif taken >= summaries and matched_left > 0:
            continue
        chosen.append(hit)
    chosen = chosen[:count]
    chosen += [hit for hit in matched if hit not in chosen][:count - len(chosen)]  # fewer messages than slots
    return with_context(sorted(chosen, key=Hit.order, reverse=True), [hit for hit in ranked if not hit.matched])


def with_context(chosen: Sequence[Hit], near: Sequence[Hit]) -> list[Hit]:
    """Each chosen message hit with the neighbours next to it that are not shown themselves (a neighbour of two
    hits goes under the better one), in the conversation's order."""
    shown = {hit.rowid for hit in chosen}
    placed: list[Hit] = []
    for hit in chosen:
        context = tuple(sorted((n for n in near if n.source == hit.source and abs(n.position - hit.position) == 1
                                and n.rowid not in shown), key=lambda n: n.position))
        shown.update(n.rowid for n in context)
        placed.append(replace(hit, context=context) if hit.source.kind == "messages" else hit)
    return placed


# BM25's usual constants (Lucene's, SQLite's): how fast a repeated word saturates, how much length counts.
K1, B = 1.2, 0.75


def rarity(count: int, size: int) -> float:
    """A word's weight (BM25's idf, never negative) when `count` of `size` passages hold it."""
    size = max(size, count)
    return math.log(1 + (size - count + 0.5) / (count + 0.5))


def length(body: str) -> int:
    """A passage's length for BM25: the tokens its index text holds (a word, or a CJK letter's token)."""
    letters = sum(len(run) for run in CJK_RUN.findall(body))
    return letters + len(_WORD.findall(CJK_RUN.sub(" ", body) if letters else body))


def bm25(weights: Sequence[float], length: int, average: float) -> float:
    """BM25 of a passage of `length` words holding words of these weights (each counted once: chat messages
    seldom repeat a word, and the index is asked which passages hold a word, not how often)."""
    norm = 1 - B + B * length / max(average, 1.0)
    return sum(w * (K1 + 1) / (1 + K1 * norm) for w in weights)


def plan_terms(terms: Sequence[str], count: Callable[[str, int], int], budget: int,
               probe: int = PROBE) -> tuple[list[str], bool]:
    """The words to ask for, and whether to rank them, from `count(term, cap)`: how many passages hold a
    word, counted up to `cap`. Scoring costs a few microseconds per passage, so a search scores at most
    `budget` passages: the rarest words while their passages fit (a common word weighs little in BM25), at
    least the rarest. When even that one is held by more, a ranking would mean little: the newest passages
    holding every word are taken instead (False). Counting a common word costs as much as it counts, so every
    word is counted up to `probe` first, and only the common ones the budget could still take further."""
    first = {term: count(term, probe + 1) for term in terms}
    present = sorted((t for t in terms if first[t]), key=lambda t: first[t])
    kept: list[str] = []
    total = 0
    for term in present:
        held = first[term] if first[term] <= probe else count(term, budget - total + 1)
        if not kept and held > budget:
            return present, False
        if total + held > budget:
            break
        kept.append(term)
        total += held
    return kept, True


def neighbours(hits: Sequence[Hit]) -> list[tuple[Hit, int]]:
    """(hit, position) of the messages next to the best NEIGHBORS_OF message hits, to be looked up."""
    strong = [h for h in best([h for h in hits if h.matched]) if h.source.kind == "messages"][:NEIGHBORS_OF]
    return [(hit, hit.position + step) for hit in strong for step in (-1, 1) if hit.position + step >= 0]


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


def snippet(body: str, focus: str | None = None, width: int = SNIPPET_CHARS) -> str:
    """The part of `body` around its first `focus` (the passage's rarest matched word), on one line,
    `width` characters at most."""
    text = " ".join(body.split())
    if len(text) <= width:
        return text
    at = text.casefold().find(focus.casefold()) if focus else -1
    start = max(0, min(at - width // 3, len(text) - width)) if at >= 0 else 0
    cut = text[start:start + width]
    return ("…" if start else "") + cut + ("…" if start + width < len(text) else "")


def where(hit: Hit, asker: str | None) -> str:
    """Where a passage came from, as the model reads it."""
    owner = source_owner(hit.source.session)
    chat = "this conversation" if owner == asker else f"conversation {owner}"
    if owner != hit.source.session:
        chat += " (before /new)"
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


def dates_phrase(since: str | None, until: str | None) -> str:
    return f" between {since or 'the start'} and {until or 'today'}" if since or until else ""


def render(query: str, shown: Sequence[tuple[Hit, str]], asker: str | None, scope: str, late: str) -> str:
    """The tool's answer: plain text, one numbered passage per hit, each with its date and its source."""
    if not shown:
        return f"Nothing found for {query!r} in {scope}{late}."
    lines = [f"Found {len(shown)} passage{'s' if len(shown) > 1 else ''} for {query!r} in {scope}{late}; "
             "dates are local:"]
    for number, (hit, text) in enumerate(shown, start=1):
        lines.append(f"{number}. {where(hit, asker)}")
        lines.append(f"   {text}")
        lines += [f"   {'before' if near.position < hit.position else 'after'} it, message {near.position} "
                  f"({near.label}): {snippet(near.body)}" for near in hit.context]
    return "\n".join(lines)
