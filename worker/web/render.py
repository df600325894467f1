"""Pages from the package's Jinja2 templates, every value escaped (autoescape: a message holding `<script>` is
shown as text), with what every page needs: the CSRF token of its forms, read-only mode, the instance; the
bidirectional controls of conversation text shown as visible marks (`[U+202E]`) instead of reordering the page."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import re

import jinja2
from aiohttp import web

from worker.web.guard import BROWSER, GUARD
from worker.web.instance import Instance

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
INSTANCE: web.AppKey[Instance] = web.AppKey("instance", Instance)
JINJA: web.AppKey[jinja2.Environment] = web.AppKey("jinja", jinja2.Environment)
# Unicode's bidirectional controls (embeddings, overrides, isolates, marks): from a conversation they would turn
# text around on the page (`telegram:\u202e1337` read as `telegram:7331`).
BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_TAG_OR_TEXT = re.compile(r"(<[^>]*>)|([^<]+)")


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["ago"] = ago
    env.filters["number"] = lambda value: "—" if value is None else f"{value:,}"
    env.filters["money"] = lambda value: f"${value:,.4f}"
    env.filters["session_url"] = lambda key: "/session?key=" + quote(str(key), safe="")
    return env


def ago(moment: datetime | str | float | None) -> str:
    """'3 min ago', 'in 2 h': when a moment (a datetime, its ISO text or epoch seconds) is, from now, in words."""
    if moment is None:
        return "—"
    if isinstance(moment, (int, float)):
        moment = datetime.fromtimestamp(moment, timezone.utc)
    if isinstance(moment, str):
        try:
            moment = datetime.fromisoformat(moment)
        except ValueError:
            return str(moment)  # not a moment after all: shown as it is
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    seconds = (datetime.now(timezone.utc) - moment).total_seconds()
    return f"{duration(abs(seconds))} ago" if seconds >= 0 else f"in {duration(-seconds)}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    instance = request.app[INSTANCE]
    page = request.app[JINJA].get_template(template).render(
        csrf=request.app[GUARD].csrf_for(BROWSER.get()), read_only=request.app[GUARD].read_only, path=request.path,
        namespace=instance.settings.summary_namespace, **context)
    return web.Response(status=status, text=visible_bidi(page), content_type="text/html", charset="utf-8")


def visible_bidi(page: str) -> str:
    """`page` with each bidirectional control in its text shown as `[U+202E]` (pure). Inside tags nothing
    changes: a form's hidden field keeps a fact's or a session key's exact text, and autoescape leaves no `>`
    inside an attribute, so a tag ends at its first `>`."""
    if not BIDI.search(page):
        return page
    return _TAG_OR_TEXT.sub(lambda found: found.group(1) or BIDI.sub(_mark, found.group(2)), page)


def _mark(control: re.Match[str]) -> str:
    return f"[U+{ord(control.group()):04X}]"
