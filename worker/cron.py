"""The daily run: flag every session with recent messages so its next job also notes the kept tail."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from arq.connections import ArqRedis

from nanobot_hooks.contract import Keys, Reason, SummarizeRequest, SummaryRecord
from nanobot_hooks.nanobot_format import is_internal_session
from nanobot_hooks.queue import drop_record, enqueue_summary, load_record_or_drop, pending_sessions
from worker.jobs import Deps
from worker.errors import SessionKeyError
from worker.sessions import list_session_keys, session_path

log = logging.getLogger("worker.cron")
# A session untouched for this long has nothing new to note; its file is not even read.
RECENT_SECONDS = 3 * 24 * 3600


async def flag_sessions(deps: Deps, redis: ArqRedis, since: str, keys: list[str] | None = None,
                        reason: Reason = "daily") -> list[str]:
    """Flag and enqueue; a session whose job is running gets its notes from the next job (after_job_end).

    A session resting after a failed job keeps its flag for a later job; `reason="manual"` (the user's own
    catch-up) does not wait for the rest."""
    if keys is None:
        cutoff = time.time() - RECENT_SECONDS
        keys = [k for k in list_session_keys(deps.sessions_dir)
                if not is_internal_session(k) and _modified_since(session_path(deps.sessions_dir, k), cutoff)]
    for key in keys:
        # NX: an older pending flag reaches further back, keep it.
        await redis.set(Keys.of(redis).daily_flag(key), since, nx=True)
        await enqueue_summary(redis, SummarizeRequest(session_key=key, reason=reason))
    return keys


def _modified_since(path: Path, cutoff: float) -> bool:
    try:
        return path.stat().st_mtime >= cutoff
    except OSError:  # deleted (/delete in nanobot) between the listing and now
        return False


async def daily_summaries(ctx: dict[str, Any]) -> int:
    """arq cron: only enqueues, so it stays short (a long cron timeout would slow every crash recovery)."""
    deps: Deps = ctx["deps"]
    if not deps.settings.auto_summary:
        return 0
    # Yesterday too: a run missed while the worker was down is caught up by the next one.
    since = (datetime.now(deps.tz) - timedelta(days=1)).strftime("%Y-%m-%d")
    keys = await flag_sessions(deps, ctx["redis"], since)
    log.info("daily run: %d sessions flagged for notes since %s", len(keys), since)
    dropped = await drop_orphaned_records(deps, ctx["redis"])
    if dropped:
        log.info("daily run: dropped the records of %d deleted sessions", dropped)
    return len(keys)


async def drop_orphaned_records(deps: Deps, redis: ArqRedis) -> int:
    """Records waiting for a session whose file is gone (deleted in nanobot) would wait forever, and nanobot
    would look them up again every minute: drop them."""
    dropped = 0
    for key in await pending_sessions(redis):
        try:
            gone = not session_path(deps.sessions_dir, key).exists()
        except SessionKeyError:
            gone = True
        record = await load_record_or_drop(redis, key) if gone else None
        if isinstance(record, SummaryRecord) and await drop_record(redis, record):
            dropped += 1
    return dropped


async def requeue_flagged(ctx: dict[str, Any]) -> None:
    """after_job_end: a flag set while the session's job ran needs one more job, now that the id is free.

    Only after a job that took its flag: a job that ended before (resting, failing early) leaves the flag
    for a later job, and queueing it again at once would loop."""
    redis: ArqRedis = ctx["redis"]
    keys = Keys.of(redis)
    key = keys.session_of_job(str(ctx.get("job_id", "")))
    if key is not None and ctx.get("daily_flag_taken") and await redis.exists(keys.daily_flag(key)):
        await enqueue_summary(redis, SummarizeRequest(session_key=key, reason="daily"))
