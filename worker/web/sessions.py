"""The sessions pages.

Every session of nanobot's sessions folder with its last job's outcome, and one session's page: its context turn by turn
with the summaries applied (the sawtooth), the last outcome in full (what it covered, why it skipped or failed), its
rest, its spend, a job queued or running, the summary waiting in Redis and the summary nanobot now sends (line 1)."""

from __future__ import annotations

import asyncio
import json
from datetime import tzinfo
from typing import Any

from aiohttp import web
from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix

from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.queue import DAMAGED, UNREADABLE, context_history, read_waiting_record, reply
from nanobot_hooks.contract.session_format import METADATA_TYPE, summary_text
from worker.errors import SessionKeyError
from worker.nanobot.sessions import session_path, watermark
from worker.state import budget
from worker.state.outcomes import JobOutcome, read_outcome
from worker.web.actions import said, worker_alive
from worker.web.charts import sawtooth
from worker.web.instance import Instance
from worker.web.names import names, session_keys, session_name
from worker.web.paging import window
from worker.web.render import INSTANCE, render

SESSIONS_PER_PAGE = 100


async def last_outcomes(redis: ArqRedis, keys: list[str]) -> dict[str, JobOutcome]:
    """Each session's last outcome, in one round trip."""
    if not keys:
        return {}
    raws = await redis.mget([Keys.of(redis).outcome(key) for key in keys])
    return {key: read_outcome(raw, key) for key, raw in zip(keys, raws, strict=True) if raw}


def channel(key: str) -> str:
    """The channel a session key names (`telegram` of `telegram:42`)."""
    return key.split(":", 1)[0]


def chosen(keys: list[str], wanted_channel: str, query: str) -> list[str]:
    """The keys of one channel (all when none is named) that hold `query` (any case)."""
    wanted = query.casefold()
    return [key for key in keys if (not wanted_channel or channel(key) == wanted_channel) and wanted in key.casefold()]


async def index(request: web.Request) -> web.Response:
    """The sessions, a page at a time, of one channel or all, found by a part of their key.

    The last outcomes are read for the page's sessions only."""
    instance = request.app[INSTANCE]
    every = await asyncio.to_thread(session_keys, instance.sessions_dir)
    params = {name: request.query.get(name, "").strip() for name in ("channel", "q", "page")}
    keys = chosen(every, params["channel"], params["q"])
    pager = window(SESSIONS_PER_PAGE, len(keys), "/sessions", params)
    keys = keys[pager.start : pager.stop]
    outcomes, problem = await instance.read(lambda redis: last_outcomes(redis, keys))
    named = await asyncio.to_thread(names, instance.sessions_dir, keys)
    return render(
        request,
        "sessions.html",
        sessions=keys,
        outcomes=outcomes or {},
        problem=problem,
        pager=pager,
        names=named,
        channels=sorted({channel(key) for key in every}),
        wanted=params,
        every=len(every),
    )


def line_one(instance: Instance, key: str) -> dict[str, Any] | None:
    """What the session file says.

    Its messages (lines counted, not parsed: a year is 100,000), nanobot's watermark and the summary nanobot sends now
    (line 1, its metadata record)."""
    try:
        with session_path(instance.sessions_dir, key).open("rb") as lines:
            head = json.loads(lines.readline() or b"{}")
            count = sum(chunk.count(b"\n") for chunk in iter(lambda: lines.read(1 << 20), b""))
    except (OSError, ValueError):
        return None
    head = head if isinstance(head, dict) and head.get("_type") == METADATA_TYPE else {}
    metadata = head.get("metadata") if isinstance(head.get("metadata"), dict) else {}
    return {"messages": count, "last_archived": watermark(head), "summary": summary_text(metadata)}


async def redis_view(redis: ArqRedis, key: str, tz: tzinfo) -> dict[str, Any]:
    keys = Keys.of(redis)
    raw = await redis.get(keys.outcome(key))
    record = await read_waiting_record(redis, key)  # UNREADABLE (another version's: kept) or DAMAGED: shown
    return {
        "outcome": read_outcome(raw, key) if raw else None,
        "failures": int(await redis.get(keys.failures(key)) or 0),
        "rest": await budget.rest_of(redis, key),
        "record": None if isinstance(record, str) else record,
        "record_unread": record == UNREADABLE,
        "record_damaged": record == DAMAGED,
        "spend": budget.Spend.from_hash(await reply(redis.hgetall(keys.spend(f"session:{key}")))),
        "queued": await redis.zscore(keys.queue, keys.job_id(key)) is not None,
        "running": bool(await redis.exists(in_progress_key_prefix + keys.job_id(key))),
        "context": sawtooth(await context_history(redis, key), tz),
        "worker_alive": await worker_alive(redis),
    }


async def page(request: web.Request) -> web.Response:
    instance = request.app[INSTANCE]
    key = request.query.get("key", "")
    try:
        session_path(instance.sessions_dir, key)
    except SessionKeyError:
        return render(
            request,
            "error.html",
            status=404,
            title="No such session",
            message="That is not a session key of this nanobot.",
        )
    file = await asyncio.to_thread(line_one, instance, key)
    state, problem = await instance.read(lambda redis: redis_view(redis, key, instance.tz))
    name = await asyncio.to_thread(session_name, instance.sessions_dir, key)
    return render(
        request,
        "session.html",
        key=key,
        name=name,
        file=file,
        state=state,
        problem=problem,
        said=said(request.query.get("done", ""), request.query.get("n", "")),
    )
