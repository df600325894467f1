"""The operator's actions on a session, each through the worker's own queue and state, as the command line does them.

Retry a failed job and "summarize now" (`nanobot-summary enqueue`'s own manual job), end a rest, and forget everything
the session taught MEMORY.md (`nanobot-summary undo --forget-facts --keep-summary`'s own function). The guard asks every
one for the token and the CSRF token and refuses them read-only; each answers with the session's page saying what
happened (Post/Redirect/Get: a reload or the refresh never repeats an action)."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

from aiohttp import web
from arq.connections import ArqRedis

from worker.errors import NotSummarized, SessionKeyError
from worker.nanobot.sessions import session_path
from worker.state import budget, liveness
from worker.state.outcomes import load_outcome
from worker.summarize.manual import check_key, queue_one
from worker.web.guard import form_of, see_other
from worker.web.memory import NotWritten, refresh_recall, write_memory
from worker.web.render import INSTANCE, REFRESH_SECONDS, refreshing, render

# What each action did, by the code its redirect carries: fixed sentences, so a link cannot put words on the page.
SAID = {
    "queued": "Queued: a summary job for this session, made by hand (whatever it saves, without waiting for a rest, "
    "keeping the last exchange verbatim). A running worker takes it; its outcome shows here when it ends.",
    "retried": "Queued again: the failed job's session has a new job, made by hand (it does not wait for the rest "
    "the failure started). Its outcome shows here when it ends.",
    "queued-no-worker": "Queued, but no worker is running: the summary job waits in the queue, and nothing happens "
    "until a worker starts (`nanobot-summary run`, or its service); its outcome shows here then.",
    "retried-no-worker": "Queued again, but no worker is running: the job waits in the queue, and nothing happens "
    "until a worker starts (`nanobot-summary run`, or its service); its outcome shows here then.",
    "already": "Not queued: a job for this session is queued or running already; its outcome shows here when it ends.",
    "not-failed": "Not retried: the session's last job did not fail (another job ended meanwhile); use Summarize "
    "now for a new summary.",
    "rest-ended": "Rest ended: nanobot's trigger queues this session's jobs again from its next turn, and its "
    "failure streak starts afresh.",
    "no-rest": "Nothing to end: the session was not resting (the rest ran out, or a job ended it meanwhile).",
    "forgot": "Forgotten: {n} fact(s) this session taught MEMORY.md (held ones included); the file's own lines "
    "and other sessions' facts are as they were. This cannot be undone here.",
    "forgot-none": "Nothing forgotten: MEMORY.md holds no fact learned in this session, and none is held.",
}


def said(done: str, count: str = "") -> str | None:
    """The sentence of an action's code (pure); None for a code that is none of them."""
    if done not in SAID:
        return None
    return SAID[done].format(n=int(count) if count.isdigit() else "some")


async def _back(request: web.Request, key: str, done: str, count: int | None = None) -> web.Response:
    """The session's page saying what the action did; refreshing itself when the form's page did."""
    again = f"&refresh={REFRESH_SECONDS}" if refreshing(await form_of(request)) else ""
    return see_other(
        f"/session?key={quote(key, safe='')}&done={done}" + (f"&n={count}" if count is not None else "") + again
    )


def _refused(request: web.Request, status: int, title: str, message: str) -> web.Response:
    return render(request, "error.html", status=status, title=title, message=message)


async def _session(request: web.Request, queue: bool) -> str | web.Response:
    """The form's session key, checked as the command line checks it, or the refusal to answer.

    The form's session key, checked as the command line checks it (one it summarizes, for a job), or the refusal to
    answer."""
    key = (await form_of(request)).get("key", "")
    try:
        if queue:
            await asyncio.to_thread(check_key, request.app[INSTANCE].sessions_dir, key)
        else:
            session_path(request.app[INSTANCE].sessions_dir, key)
    except (NotSummarized, SessionKeyError) as exc:
        return _refused(request, 404, "No such session", f"Nothing was done: {exc}.")
    return key


async def _target(request: web.Request, queue: bool) -> tuple[str, ArqRedis] | web.Response:
    """The form's checked session key and the instance's Redis, or the refusal to answer (every action needs both)."""
    key = await _session(request, queue)
    if isinstance(key, web.Response):
        return key
    instance = request.app[INSTANCE]
    redis = await instance.client()
    if redis is None:
        return _refused(
            request,
            503,
            "Redis cannot be reached",
            f"Nothing was done: Redis cannot be read ({instance.redis_problem}).",
        )
    return key, redis


async def summarize(request: web.Request) -> web.Response:
    """Summarize now: `nanobot-summary enqueue KEY`."""
    target = await _target(request, queue=True)
    if isinstance(target, web.Response):
        return target
    key, redis = target
    if not await queue_one(redis, key):
        return await _back(request, key, "already")
    return await _back(request, key, "queued" if await worker_alive(redis) else "queued-no-worker")


async def retry(request: web.Request) -> web.Response:
    """A failed job again, as a job made by hand: the failure's rest would hold back a triggered one."""
    target = await _target(request, queue=True)
    if isinstance(target, web.Response):
        return target
    key, redis = target
    outcome = await load_outcome(redis, key)
    if outcome is None or outcome.status != "failed":
        return await _back(request, key, "not-failed")
    if not await queue_one(redis, key):
        return await _back(request, key, "already")
    return await _back(request, key, "retried" if await worker_alive(redis) else "retried-no-worker")


async def worker_alive(redis: ArqRedis) -> bool:
    """Whether a worker would take a queued job now (arq's health line, as `status` reads it)."""
    view, _ = await liveness.workers(redis)
    return bool(view["alive"])


async def end_rest(request: web.Request) -> web.Response:
    target = await _target(request, queue=False)
    if isinstance(target, web.Response):
        return target
    key, redis = target
    return await _back(request, key, "rest-ended" if await budget.end_rest(redis, key) is not None else "no-rest")


async def forget_learned(request: web.Request) -> web.Response:
    """Removes every fact the session taught MEMORY.md, written or held.

    Every fact the session taught MEMORY.md, written or held, removed (MemoryFiles.forget, as `undo --forget-facts`
    does); the recall index follows at once."""
    key = await _session(request, queue=False)
    if isinstance(key, web.Response):
        return key
    instance = request.app[INSTANCE]
    try:
        removed = await write_memory(instance.memory.forget, key)
    except NotWritten as exc:
        return _refused(request, 503, "Nothing forgotten", f"Nothing was forgotten: {exc}.")
    if not removed:
        return await _back(request, key, "forgot-none")
    await refresh_recall(instance)
    return await _back(request, key, "forgot", len(removed))
