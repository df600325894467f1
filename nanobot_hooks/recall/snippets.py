"""What the model reads of a recall (pure).

Each passage's snippet, where it came from, and the whole answer as plain text."""

from __future__ import annotations

from collections.abc import Sequence

from nanobot_hooks.contract.recall import source_owner
from nanobot_hooks.recall.hits import Hit

SNIPPET_CHARS = 180


def snippet(body: str, focus: str | None = None, width: int = SNIPPET_CHARS) -> str:
    """The part of `body` around its first `focus`, on one line.

    The part of `body` around its first `focus` (the passage's rarest matched word), on one line, `width` characters at
    most."""
    text = " ".join(body.split())
    if len(text) <= width:
        return text
    at = text.casefold().find(focus.casefold()) if focus else -1
    start = max(0, min(at - width // 3, len(text) - width)) if at >= 0 else 0
    cut = text[start : start + width]
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
    lines = [
        f"Found {len(shown)} passage{'s' if len(shown) > 1 else ''} for {query!r} in {scope}{late}; dates are local:"
    ]
    for number, (hit, text) in enumerate(shown, start=1):
        lines.append(f"{number}. {where(hit, asker)}")
        lines.append(f"   {text}")
        lines += [
            f"   {'before' if near.position < hit.position else 'after'} it, message {near.position} "
            f"({near.label}): {snippet(near.body)}"
            for near in hit.context
        ]
    return "\n".join(lines)
