"""Pages from the package's Jinja2 templates, every value escaped.

Pages from the package's Jinja2 templates, every value escaped (autoescape: a message holding `<script>` is shown as
text), with what every page needs: the CSRF token of its forms, read-only mode, the instance, its time zone (every
moment written by worker.text.clock), the refresh toggle of the pages that have one; the bidirectional controls that can
spoof text (overrides, embeddings, isolates) shown as visible marks (`[U+202E]`) in the page's text, never in what a
form sends back."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from aiohttp import web
from markupsafe import Markup, escape

from worker.text.clock import duration, when
from worker.web.guard import BROWSER, GUARD
from worker.web.instance import Instance

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
INSTANCE: web.AppKey[Instance] = web.AppKey("instance", Instance)
JINJA: web.AppKey[jinja2.Environment] = web.AppKey("jinja", jinja2.Environment)
# Unicode's bidirectional controls that turn a run of text around (embeddings, overrides, isolates): from a
# conversation they would spoof the page (`telegram:\u202e1337` read as `telegram:7331`). The marks (U+200E, U+200F,
# U+061C) only nudge neutral characters, are common in Hebrew and Arabic text, and are left as they are.
BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
# A tag, or a textarea whole (its text is what the form sends: it must hold the exact text; autoescape leaves no
# `<` inside it), or text.
_TAG_OR_TEXT = re.compile(r"(<textarea\b[^>]*>[^<]*</textarea>|<[^>]*>)|([^<]+)")


def environment(tz: tzinfo) -> jinja2.Environment:
    """The templates' environment; every moment is written in `tz`, the instance's zone (worker.text.clock)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = lambda value: moment_html(value, tz, datetime.now(timezone.utc))
    env.filters["duration"] = duration
    env.filters["number"] = lambda value: "—" if value is None else f"{value:,}"
    env.filters["money"] = lambda value: f"${value:,.4f}"
    env.filters["session_url"] = session_url
    env.globals["zone"] = getattr(tz, "key", str(tz))
    return env


def session_url(key: str) -> str:
    """A session's page, its key quoted whole (a key may hold `&`, `#` or `/`)."""
    return "/session?key=" + quote(str(key), safe="")


def moment_html(value: datetime | str | float | None, tz: tzinfo, now: datetime) -> Markup:
    """A moment on the page (pure).

    Its time in the page's zone, how long ago it was beside it, and the machine-readable UTC time; a value that is no
    moment is shown as the text it is."""
    found = when(value, tz, now)
    if found is None:
        return Markup("—") if value is None else escape(str(value))
    return Markup('<time datetime="{}">{}</time> <small class="ago">({})</small>').format(
        found.iso, found.absolute, found.relative
    )


@dataclass(frozen=True)
class Refresh:
    """A page's refresh toggle.

    The seconds between reloads (None: off), the link that turns it on or off, and the address a reload opens (the
    page's own, without an action's answer: it is said once)."""

    seconds: int | None
    toggle: str
    target: str = ""


REFRESH_SECONDS = 10
# The pages whose state moves while one watches them: the queue, jobs, outcomes, a session's job.
REFRESHED = frozenset({"/", "/session"})
# An action's answer (worker.web.actions) is said once: a reload must not say it again.
_NOT_KEPT = frozenset({"refresh", "done", "n"})


def refresh(path: str, params: Mapping[str, str]) -> Refresh | None:
    """The refresh toggle of the page `path` (one of REFRESHED) with `params` (pure).

    On with `refresh=10` in the address (a meta refresh: the CSP allows no script), off by default; None for a page
    without one."""
    if path not in REFRESHED:
        return None
    on = params.get("refresh") == str(REFRESH_SECONDS)
    kept = {name: value for name, value in params.items() if name not in _NOT_KEPT}
    query = urlencode(kept if on else {**kept, "refresh": str(REFRESH_SECONDS)})
    toggle = f"{path}?{query}" if query else path
    if not on:
        return Refresh(None, toggle)
    return Refresh(REFRESH_SECONDS, toggle, f"{path}?{urlencode({**kept, 'refresh': str(REFRESH_SECONDS)})}")


def refreshing(form: Mapping[str, str]) -> bool:
    """An action's form came from a page that refreshes itself (its `refresh` field): its answer's page does too."""
    return form.get("refresh") == str(REFRESH_SECONDS)


def render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    instance = request.app[INSTANCE]
    page = (
        request.app[JINJA]
        .get_template(template)
        .render(
            csrf=request.app[GUARD].csrf_for(BROWSER.get()),
            read_only=request.app[GUARD].read_only,
            path=request.path,
            namespace=instance.settings.summary_namespace,
            refresh=refresh(request.path, request.query),
            **context,
        )
    )
    return web.Response(status=status, text=visible_bidi(page), content_type="text/html", charset="utf-8")


def visible_bidi(page: str) -> str:
    """`page` with each spoofing bidirectional control in its text shown as `[U+202E]` (pure).

    Inside tags and textareas nothing changes: a form's hidden field and an edit box keep a fact's or a session key's
    exact text (autoescape leaves no `>` inside an attribute, so a tag ends at its first `>`)."""
    if not BIDI.search(page):
        return page
    return _TAG_OR_TEXT.sub(lambda found: found.group(1) or BIDI.sub(_mark, found.group(2)), page)


def _mark(control: re.Match[str]) -> str:
    return f"[U+{ord(control.group()):04X}]"
