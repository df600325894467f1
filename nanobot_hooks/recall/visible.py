"""Who sees which sources (pure).

A session its own material and MEMORY.md, a trusted one (scope "trusted") the other trusted sessions too; and the order
they are searched in, the asker's own first."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nanobot_hooks.contract.recall import source_owner
from nanobot_hooks.recall.hits import Source


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
