"""The recall search's ranking (pure).

Which words to ask the index for, BM25's parts (rarity, length, score), the best hits, the neighbours to look up, and
the passages shown, in order."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from nanobot_hooks.recall.hits import Hit

RESULTS = 5
NEIGHBORS_OF = RESULTS  # the best message hits whose neighbours are brought in: each one shown can have its answer
PROBE = 500  # passages a word is first counted up to (plan_terms)
SUMMARY_SLOTS = 2  # of the passages shown, at most this many from the notes and MEMORY.md (choose)


def plan_terms(
    terms: Sequence[str], count: Callable[[str, int], int], budget: int, probe: int = PROBE
) -> tuple[list[str], bool]:
    """The words to ask for, and whether to rank them, from `count(term, cap)`.

    How many passages hold a word, counted up to `cap`. Scoring costs a few microseconds per passage, so a search scores
    at most `budget` passages: the rarest words while their passages fit (a common word weighs little in BM25), at least
    the rarest. When even that one is held by more, a ranking would mean little: the newest passages holding every word
    are taken instead (False). Counting a common word costs as much as it counts, so every word is counted up to `probe`
    first, and only the common ones the budget could still take further."""
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


# BM25's constants for chat turns: a word saturates fast (K1) and length counts little (B), since turns are short and
# alike in length and a longer one holding the rare word is no worse for it (Lucene's and SQLite's are 1.2 and 0.75;
# bench/bench_retrieval.py and docs/performance.md compare them).
K1, B = 0.9, 0.3
EVIDENCE_SHARE = 0.4  # of the query words' weight held next to a message and not in it (around)


def rarity(count: int, size: int) -> float:
    """A word's weight (BM25's idf, never negative) when `count` of `size` passages hold it."""
    size = max(size, count)
    return math.log(1 + (size - count + 0.5) / (count + 0.5))


def bm25(weights: Sequence[float], length: int, average: float) -> float:
    """BM25 of a passage of `length` words holding words of these weights.

    BM25 of a passage of `length` words holding words of these weights (each counted once: chat messages seldom repeat a
    word, and the index is asked which passages hold a word, not how often)."""
    norm = 1 - B + B * length / max(average, 1.0)
    return sum(w * (K1 + 1) / (1 + K1 * norm) for w in weights)


def around(held: Mapping[int, Sequence[str]], weight: Mapping[str, float]) -> dict[int, float]:
    """What each message holding a query word gains from the messages next to it.

    `share` of the weight of the query's words they hold and it lacks. In a chat the words of a question are often split
    over a turn and its reply ("Anna, how did the audition go?" - "I got the part of Nora!"): a turn whose neighbours
    hold the rest of the query is likelier the one asked about than a turn alone with the same words
    (EVIDENCE_SHARE)."""
    share = EVIDENCE_SHARE
    gained = {}
    for rowid, own in held.items():
        lacking = {term for step in (-1, 1) for term in held.get(rowid + step, ())} - set(own)
        if lacking:
            gained[rowid] = share * sum(weight[term] for term in lacking)
    return gained


def neighbours(hits: Sequence[Hit]) -> list[tuple[Hit, int]]:
    """(hit, position) of the messages next to the best NEIGHBORS_OF message hits, to be looked up."""
    strong = [h for h in best([h for h in hits if h.matched]) if h.source.kind == "messages"][:NEIGHBORS_OF]
    return [(hit, hit.position + step) for hit in strong for step in (-1, 1) if hit.position + step >= 0]


def best(hits: Sequence[Hit], count: int = RESULTS) -> list[Hit]:
    """The `count` best hits, each passage once.

    A neighbour that is also a hit keeps the better score, and is a match (its snippet shows the word found)."""
    kept: dict[int, Hit] = {}
    for hit in hits:
        known = kept.get(hit.rowid)
        if known is None or hit.order() > known.order():
            kept[hit.rowid] = hit if known is None else replace(hit, matched=hit.matched or known.matched)
        elif hit.matched and not known.matched:
            kept[hit.rowid] = replace(known, matched=True)
    return sorted(kept.values(), key=Hit.order, reverse=True)[:count]


def choose(hits: Sequence[Hit], count: int = RESULTS, summaries: int = SUMMARY_SLOTS) -> list[Hit]:
    """The passages shown.

    The best of those holding the query's words, of which at most `summaries` from the daily notes and MEMORY.md while
    messages holding the words are left to show. Notes and facts are summaries already; what a summary dropped is in the
    messages, and a notes line that matches well would otherwise push the message it came from out. A message next to a
    hit that holds none of the words ("ok", the answer to the question found) is no passage of its own: it is shown
    under its hit (`with_context`)."""
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
    chosen += [hit for hit in matched if hit not in chosen][: count - len(chosen)]  # fewer messages than slots
    return with_context(sorted(chosen, key=Hit.order, reverse=True), [hit for hit in ranked if not hit.matched])


def with_context(chosen: Sequence[Hit], near: Sequence[Hit]) -> list[Hit]:
    """Each chosen message hit with the neighbours next to it that are not shown themselves.

    Each chosen message hit with the neighbours next to it that are not shown themselves (a neighbour of two hits goes
    under the better one), in the conversation's order."""
    shown = {hit.rowid for hit in chosen}
    placed: list[Hit] = []
    for hit in chosen:
        context = tuple(
            sorted(
                (
                    n
                    for n in near
                    if n.source == hit.source and abs(n.position - hit.position) == 1 and n.rowid not in shown
                ),
                key=lambda n: n.position,
            )
        )
        shown.update(n.rowid for n in context)
        placed.append(replace(hit, context=context) if hit.source.kind == "messages" else hit)
    return placed
