"""What a recall search finds.

A source (one conversation's archived messages, its daily notes, MEMORY.md) and a hit in it, a passage with its score.
Plain data, shared by the ranking, the snippets and the search."""

from __future__ import annotations

from dataclasses import dataclass

from nanobot_hooks.contract.recall import SOURCE_BITS

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
