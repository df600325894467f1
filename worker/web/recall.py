"""The recall page.

The recall tool's own search (nanobot_hooks.recall.search) run with the scope a chosen session would have, so a user
sees what the assistant would find and what it would not. Sessions are offered and named as on the other pages
(worker.web.names): a web chat by its title, its key beside it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from nanobot_hooks.contract.session_format import storage_name
from nanobot_hooks.recall import search
from worker.web.names import names, session_keys
from worker.web.render import INSTANCE, render

MAX_QUERY = 500  # characters: the tool's own queries are a few keywords
OFFERED = 50  # sessions offered in the form's list; any other is typed (1,000 options made the page heavy)


def recent_sessions(sessions_dir: Path, limit: int = OFFERED) -> list[str]:
    """The `limit` sessions whose files changed last, the most recent first."""

    def changed(key: str) -> float:
        try:  # a listed key's file is already checked to be inside the folder: no second resolve
            return (sessions_dir / storage_name(key)).stat().st_mtime
        except OSError:
            return 0.0

    return sorted(session_keys(sessions_dir), key=changed, reverse=True)[:limit]


async def page(request: web.Request) -> web.Response:
    instance = request.app[INSTANCE]
    settings = instance.settings
    sessions = await asyncio.to_thread(recent_sessions, instance.sessions_dir)
    query = request.query.get("q", "").strip()[:MAX_QUERY]
    asker = request.query.get("session", "").strip() or (sessions[0] if sessions else "")
    answer = None
    if query:
        try:
            answer = await asyncio.to_thread(
                search.search,
                instance.workspace,
                query,
                asker or None,
                settings.is_trusted,
                settings.summary_recall_scope,
            )
        except ValueError as exc:  # a bad date, the search's only error
            answer = str(exc)
    named = await asyncio.to_thread(names, instance.sessions_dir, [*sessions, asker] if asker else sessions)
    return render(
        request,
        "recall.html",
        query=query,
        asker=asker,
        sessions=sessions,
        answer=answer,
        names=named,
        scope=settings.summary_recall_scope,
        trusted=bool(asker) and settings.is_trusted(asker),
        enabled=settings.summary_recall,
    )
