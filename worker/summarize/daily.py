"""The daily run.

Flag every session with recent messages so its next job also notes the kept tail; and the minute's check that writes
MEMORY.md's held facts once no session is active."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from arq import Retry
from arq.connections import ArqRedis
from filelock import Timeout

from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.queue import drop_record, enqueue_summary, load_waiting_record, pending_sessions
from nanobot_hooks.contract.records import Reason, SummarizeRequest, SummaryRecord
from nanobot_hooks.contract.session_format import is_internal_session
from worker.errors import MemoryFilesError, MemoryReadOnly, NanobotConfigError, SessionKeyError
from worker.memory.writer import MemoryFiles
from worker.nanobot.sessions import list_session_keys, session_path
from worker.summarize.deps import Deps
from worker.summarize.retired import kept_meanwhile, remove_expired

log = logging.getLogger("worker.summarize.daily")
# A session untouched for this long has nothing new to note; its file is not even read.
RECENT_SECONDS = 3 * 24 * 3600
JOB_FLUSH_MEMORY = "flush_memory"
# The daily run writes held facts that waited this long even while some session is active: a workspace
# never quiet for the cache lifetime still gets its memory once a day.
MAX_HOLD_SECONDS = 24 * 3600


# The daily flag, `Keys.daily_flag(session)`: the day (YYYY-MM-DD) from which the session's next job also notes
# the messages it keeps. Set here (the daily run, a manual catch-up), taken by the job as it starts, put back
# when its retry must still note through the end; a flag set while the job ran queues one more after it.
# The key in a job's arq context that says the job took its flag (after_job_end reads it).
_FLAG_TAKEN = "daily_flag_taken"


async def set_flag(redis: ArqRedis, key: str, since: str) -> None:
    """NX: an older pending flag reaches further back, keep it."""
    await redis.set(Keys.of(redis).daily_flag(key), since, nx=True)


async def take_flag(ctx: dict[str, Any], key: str) -> str | None:
    """The job's start: the session's flag read and cleared in one step, and the job marked as its taker."""
    redis: ArqRedis = ctx["redis"]
    async with redis.pipeline(transaction=True) as pipe:  # GET and DEL as one: GETDEL needs Redis 6.2
        pipe.get(Keys.of(redis).daily_flag(key))
        pipe.delete(Keys.of(redis).daily_flag(key))
        since, _ = await pipe.execute()
    ctx[_FLAG_TAKEN] = True  # after_job_end re-queues only a flag set after this point
    if not since:
        return None
    return since.decode() if isinstance(since, bytes) else str(since)


@asynccontextmanager
async def flag_for_try(ctx: dict[str, Any], key: str) -> AsyncIterator[str | None]:
    """The session's daily flag for one try of its job.

    Taken at the start (None when there is none), and put back when the try ends in a retry or is cancelled (a job
    timeout, a worker stopping), so the next try still notes through the end. Not after the last try: a flag left then
    would make after_job_end queue it again, forever."""
    since = await take_flag(ctx, key)
    try:
        yield since
    except (Retry, asyncio.CancelledError):
        if since:
            await set_flag(ctx["redis"], key, since)
        raise


def recent_sessions(sessions_dir: Path) -> list[str]:
    """The sessions whose files changed within RECENT_SECONDS, nanobot's internal ones left out."""
    cutoff = time.time() - RECENT_SECONDS
    return [
        k
        for k in list_session_keys(sessions_dir)
        if not is_internal_session(k) and _modified_since(session_path(sessions_dir, k), cutoff)
    ]


async def flag_sessions(redis: ArqRedis, keys: list[str], since: str, reason: Reason = "daily") -> None:
    """Flag and enqueue; a session whose job is running gets its notes from the next job (after_job_end).

    A session resting after a failed job keeps its flag for a later job; `reason="manual"` (the user's own
    catch-up) does not wait for the rest."""
    for key in keys:
        await set_flag(redis, key, since)
        await enqueue_summary(redis, SummarizeRequest(session_key=key, reason=reason))


def _modified_since(path: Path, cutoff: float) -> bool:
    try:
        return path.stat().st_mtime >= cutoff
    except OSError:  # deleted (/delete in nanobot) between the listing and now
        return False


async def daily_summaries(ctx: dict[str, Any]) -> int:
    """arq cron: only enqueues, so it stays short (a long cron timeout would slow every crash recovery)."""
    deps: Deps = ctx["deps"]
    removed = await asyncio.to_thread(remove_expired, deps.sessions_dir, deps.settings.summary_retired_days)
    if removed:
        log.info(
            "daily run: removed %d copies kept at /new, noted and older than %g days",
            len(removed),
            deps.settings.summary_retired_days,
        )
    if not deps.settings.auto_summary:
        return 0
    # Yesterday too: a run missed while the worker was down is caught up by the next one.
    since = (datetime.now(deps.tz) - timedelta(days=1)).strftime("%Y-%m-%d")
    keys = recent_sessions(deps.sessions_dir)
    await flag_sessions(ctx["redis"], keys, since)
    log.info("daily run: %d sessions flagged for notes since %s", len(keys), since)
    dropped = await drop_orphaned_records(deps, ctx["redis"])
    if dropped:
        log.info("daily run: dropped the records of %d deleted sessions", dropped)
    await flush_memory(ctx, max_hold=MAX_HOLD_SECONDS)
    return len(keys)


async def flush_memory(ctx: dict[str, Any], max_hold: float | None = None) -> str:
    """Writes MEMORY.md's held facts once no session was written within the cache lifetime.

    MEMORY.md's held facts are written when no session was written within the cache lifetime (a change to the file then
    costs no session a warm cache), or when they waited `max_hold` seconds. Run by arq's cron every minute, by the daily
    run (with `max_hold`) and by the idle check. A failure leaves them held."""
    deps: Deps = ctx["deps"]
    memory = deps.memory
    if not isinstance(memory, MemoryFiles):
        return "no memory files"
    try:
        sessions_dir = deps.sessions_dir
    except NanobotConfigError:
        sessions_dir = None  # nanobot has not run yet: no session is active
    try:
        since = await asyncio.to_thread(memory.held_since) if max_hold is not None else None
        force = deps.settings.memory_write == "now" or (
            since is not None and max_hold is not None and time.time() - since >= max_hold
        )
        stats = await asyncio.to_thread(memory.flush, sessions_dir, deps.settings.summary_cache_ttl, force)
    except MemoryReadOnly as exc:
        _read_only(memory.memory_path, str(exc))
        return f"not written: {exc}"
    except (OSError, Timeout, MemoryFilesError) as exc:
        log.warning("MEMORY.md: held facts not written yet (%s); the next run tries again", exc)
        return f"not written: {exc}"
    _read_only(memory.memory_path, None)
    if stats is None:
        return "nothing written"
    log.info(
        "MEMORY.md: held facts written: +%d added, %d replaced, %d skipped, %d evicted",
        stats.added,
        stats.replaced,
        stats.skipped,
        stats.evicted,
    )
    return f"+{stats.added} facts"


# Why each MEMORY.md is left alone, as last said in the log.
_said_read_only: dict[Path, str] = {}


def _read_only(path: Path, reason: str | None) -> None:
    """Says when MEMORY.md turns read-only, and when it is writable again.

    One warning when MEMORY.md turns read-only (the minute's check would say it every minute), one line when it is
    writable again."""
    if reason == _said_read_only.get(path):
        return
    if reason is not None:
        log.warning(
            "MEMORY.md: held facts not written: %s; the worker leaves it alone and the facts stay held "
            "until it is writable again",
            reason,
        )
        _said_read_only[path] = reason
    else:
        log.info("MEMORY.md is writable again: the held facts go in at the next quiet moment")
        del _said_read_only[path]


async def drop_orphaned_records(deps: Deps, redis: ArqRedis) -> int:
    """Drops the records waiting for a session whose file is gone.

    Records waiting for a session whose file is gone (deleted in nanobot) would wait forever, and nanobot would look
    them up again every minute: drop them."""
    dropped = 0
    for key in await pending_sessions(redis):
        try:
            gone = not session_path(deps.sessions_dir, key).exists()
        except SessionKeyError:
            gone = True
        record = await load_waiting_record(redis, key) if gone else None
        if isinstance(record, SummaryRecord) and await drop_record(redis, record):
            dropped += 1
    return dropped


async def requeue_flagged(ctx: dict[str, Any]) -> None:
    """after_job_end: a flag set while the session's job ran needs one more job, now that the id is free.

    So does a copy kept at a `/new` while it ran (retired.kept_meanwhile).

    Only after a job that took its flag: a job that ended before (resting, failing early) leaves the flag
    for a later job, and queueing it again at once would loop."""
    redis: ArqRedis = ctx["redis"]
    keys = Keys.of(redis)
    key = keys.session_of_job(str(ctx.get("job_id", "")))
    if key is not None and ctx.get(_FLAG_TAKEN) and await redis.exists(keys.daily_flag(key)):
        await enqueue_summary(redis, SummarizeRequest(session_key=key, reason="daily"))
    elif key is not None and kept_meanwhile(ctx, key):
        await enqueue_summary(redis, SummarizeRequest(session_key=key, reason="new"))
