"""The web application.

Its routes, the guard in front of every one, the templates; Redis is opened when a page first needs it
(worker.web.instance) and closed when the application ends."""

from __future__ import annotations

from aiohttp import web

from worker.web import actions, facts, memory, notes, overview, recall, sessions, undo
from worker.web.guard import GUARD, MAX_BODY, Guard, add_headers, guard_middleware, sign_out
from worker.web.instance import Instance
from worker.web.render import INSTANCE, JINJA, STATIC, environment


def make_app(instance: Instance, guard: Guard) -> web.Application:
    app = web.Application(middlewares=[guard_middleware], client_max_size=MAX_BODY)
    app[INSTANCE] = instance
    app[GUARD] = guard
    app[JINJA] = environment(instance.tz)
    app[undo.UNDO] = undo.UndoShelf()
    app.router.add_get("/", overview.page)
    app.router.add_get("/memory", memory.page)
    app.router.add_post("/memory/forget", memory.forget)
    app.router.add_post("/memory/edit", memory.edit)
    app.router.add_post("/memory/forget-everywhere", memory.forget_everywhere)
    app.router.add_post("/memory/pin", memory.pin)
    app.router.add_post("/memory/add", facts.add)
    app.router.add_post("/memory/forget-many", facts.forget_many)
    app.router.add_get("/memory/export.json", facts.export)
    app.router.add_get("/memory/export.md", facts.export)
    app.router.add_post("/memory/undo", memory.undo)
    app.router.add_get("/notes", notes.page)
    app.router.add_get("/recall", recall.page)
    app.router.add_get("/sessions", sessions.index)
    app.router.add_get("/session", sessions.page)
    app.router.add_post("/session/summarize", actions.summarize)
    app.router.add_post("/session/retry", actions.retry)
    app.router.add_post("/session/end-rest", actions.end_rest)
    app.router.add_post("/session/forget-learned", actions.forget_learned)
    app.router.add_post("/sign-out", sign_out)
    app.router.add_post("/sign-out-all", sign_out)
    app.router.add_get("/style.css", style)
    app.on_response_prepare.append(add_headers)
    app.on_cleanup.append(_close)
    return app


async def style(request: web.Request) -> web.Response:
    return web.Response(body=(STATIC / "style.css").read_bytes(), content_type="text/css", charset="utf-8")


async def _close(app: web.Application) -> None:
    await app[INSTANCE].close()
