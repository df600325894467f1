"""The daily notes as HTML.

The small Markdown the worker writes (headings, bullets, paragraphs, **bold** and `code`), everything escaped first, so
no HTML of a note (a message quoting `<script>`) passes through; each session's section heading links to that session's
page (its hidden marker names the session)."""

from __future__ import annotations

import re
from collections.abc import Callable

from markupsafe import Markup, escape

from worker.memory.notes import marker_session

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
_COMMENT = re.compile(r"^\s*<!--.*-->\s*$")  # hidden in every Markdown viewer: hidden here too
_STRONG = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")


def inline(text: str) -> Markup:
    """One line's text as HTML (pure): `code` spans and **bold**, everything else escaped."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick is a backtick
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    html = []
    for number, part in enumerate(parts):
        if number % 2:
            html.append(Markup("<code>{}</code>").format(part))
        else:
            html.append(Markup(_STRONG.sub(r"<strong>\1</strong>", str(escape(part)))))
    return Markup("").join(html)


def notes_html(text: str, session_url: Callable[[str], str]) -> Markup:
    """A day file as HTML (pure).

    Headings go one level down (the page has its own h1 and h2, up to h6); a section heading after a marker links to
    `session_url(its session)`."""
    blocks = _Blocks()
    session: str | None = None
    for line in text.splitlines():
        if (named := marker_session(line)) is not None:
            blocks.close()
            session = named
        elif _COMMENT.match(line):
            continue
        elif heading := _HEADING.match(line):
            blocks.close()
            blocks.out.append(_heading(len(heading.group(1)) + 1, inline(heading.group(2)), session, session_url))
        elif bullet := _BULLET.match(line):
            blocks.item(inline(bullet.group(1)))
        elif line.strip():
            blocks.line(inline(line.strip()))
        else:
            blocks.close()
    blocks.close()
    return Markup("\n").join(blocks.out)


def _heading(level: int, words: Markup, session: str | None, session_url: Callable[[str], str]) -> Markup:
    level = min(level, 6)
    if level == 3 and session:  # a section's `## key · 10:00–10:19`
        words = Markup('<a href="{}">{}</a>').format(session_url(session), words)
    return Markup("<h{0}>{1}</h{0}>").format(level, words)


class _Blocks:
    """The HTML so far, and the list or paragraph being gathered."""

    def __init__(self) -> None:
        self.out: list[Markup] = []
        self.items: list[Markup] = []
        self.lines: list[Markup] = []

    def item(self, html: Markup) -> None:
        if self.lines:
            self.close()
        self.items.append(html)

    def line(self, html: Markup) -> None:
        if self.items:
            self.close()
        self.lines.append(html)

    def close(self) -> None:
        if self.items:
            self.out.append(
                Markup("<ul>{}</ul>").format(Markup("").join(Markup("<li>{}</li>").format(i) for i in self.items))
            )
            self.items.clear()
        if self.lines:
            self.out.append(Markup("<p>{}</p>").format(Markup("<br>").join(self.lines)))
            self.lines.clear()
