"""What a recall search finds, and who may see it (pure).

A source (one conversation's archived messages, its daily notes, MEMORY.md) and a hit in it, a passage with its score:
plain data, shared by the ranking, the snippets and the search. A session sees its own material and MEMORY.md, a
trusted one (scope "trusted") the other trusted sessions too; the asker's own is searched first."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nanobot_hooks.contract.recall import SOURCE_BITS, source_owner

SOURCE_POSITION = (1 << SOURCE_BITS) - 1  # a rowid's position part


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


def visible_sources(
    sources: Sequence[Source], asker: str | None, trusted: Callable[[str], bool], scope: str
) -> list[Source]:
    """The sources a session may search: its own, MEMORY.md, and (scope "trusted", asker trusted) other trusted ones."""
    widen = widened(asker, trusted, scope)
    return [
        p
        for p in sources
        if p.kind == "memory"
        or (asker is not None and source_owner(p.session) == asker)
        or (widen and p.session and trusted(source_owner(p.session)))
    ]


def widened(asker: str | None, trusted: Callable[[str], bool], scope: str) -> bool:
    """Whether the asker sees the other trusted sessions too: only a trusted asker, and only with scope "trusted"."""
    return scope == "trusted" and asker is not None and trusted(asker)


def search_order(sources: Sequence[Source], asker: str | None) -> list[list[Source]]:
    """The sources to search, in groups searched one after the other.

    The asker's own material and MEMORY.md first (with many trusted sessions, the budget could otherwise run out before
    it), then the others."""
    own = [p for p in sources if p.kind == "memory" or (asker is not None and source_owner(p.session) == asker)]
    others = [p for p in sources if p not in own]
    return [group for group in (own, others) if group]
