"""Idle summaries: a session quiet for longer than the provider's prompt cache lasts is summarized in the background.

The next turn pays a cold cache anyway, so a summary applied then costs no extra cache miss; nanobot's own
idle compaction works the same way, on the main model. The hooks queue one deferred check per session after
each saved turn (`idle_job_id`); the check runs here once the session could have been quiet for
NANOBOT_SUMMARY_CACHE_TTL:
- active since (the session file was saved later): it defers itself to the last save + the cache lifetime;
- quiet long enough: it first writes MEMORY.md's held facts if no session is active (a cold moment for all),
  then plans the cut with the idle keep rule and, only when that is worth
  NANOBOT_SUMMARY_IDLE_MIN_TOKENS (worker.summarize.cut.saving_floor), queues the ordinary summarize job
  with reason "idle" under the session's job id
  (single flight with the threshold trigger: a job already queued or running covers the session instead).
  Nothing is asked of any model when it is not worth it, nor while the session rests after a failure.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from arq import Retry
from arq.connections import ArqRedis

from nanobot_hooks.contract.queue import enqueue_summary
from nanobot_hooks.contract.records import SummarizeRequest
from nanobot_hooks.contract.session_format import is_internal_session
from worker.errors import NanobotConfigError, RecordOfAnotherVersion, SessionError
from worker.nanobot.sessions import read_session, session_path
from worker.state import budget
from worker.summarize.cut import idle_keep
from worker.summarize.daily import flush_memory
from worker.summarize.deps import Deps
from worker.summarize.jobs import CURRENT_JOB
from worker.summarize.plan import plan_job
from worker.summarize.summary import waiting_record

log = logging.getLogger("worker.summarize.idle")

# Looking a little after the cache lifetime has passed, never a little before.
SLACK_SECONDS = 0.05
# What the idle check waits for MEMORY.md's lock before it leaves the held facts to the minute's check.
FLUSH_SECONDS = 10.0
# The check re-defers itself (arq's Retry) while the session is active: as many times as it takes.
MAX_DEFERRALS = 1_000_000


def quiet_seconds(deps: Deps, key: str) -> float | None:
    """Seconds since nanobot last saved the session file (its modification time: the worker's own writes keep it).

    None when there is no such file."""
    try:
        return max(time.time() - session_path(deps.sessions_dir, key).stat().st_mtime, 0.0)
    except (OSError, NanobotConfigError, SessionError):
        return None


async def _flush_held_facts(ctx: dict[str, Any]) -> None:
    """A cold moment, perhaps for every session: MEMORY.md's held facts may go in now.

    Before the summary, whose pickup writes the session file, so that no session looks active again. Bounded, and never
    an error of the check: a held write must not cost the pause its summary (the minute's check tries again)."""
    try:
        await asyncio.wait_for(flush_memory(ctx), FLUSH_SECONDS)
    except Exception as exc:  # noqa: BLE001 - a lock held long, a bug: the facts stay held, nothing is lost
        log.warning("MEMORY.md: held facts not written at the idle check (%s)", type(exc).__name__)


async def idle_summary(ctx: dict[str, Any], request: dict[str, Any]) -> dict[str, str]:
    """arq entry point of the idle check. Returns what it did (for the log; arq keeps no result)."""
    deps: Deps = ctx["deps"]
    redis: ArqRedis = ctx["redis"]
    key = SummarizeRequest.model_validate(request).session_key
    CURRENT_JOB.set(f"{key} {ctx.get('job_id', '-')} idle check")
    settings = deps.settings
    ttl = settings.summary_cache_ttl
    keep = idle_keep(
        settings.summary_idle_keep, ttl, deps.nanobot.idle_compact_seconds, deps.nanobot.idle_compact_scan_seconds
    )
    if not settings.auto_summary or not settings.summary_idle or is_internal_session(key):
        return {"status": "off"}
    if keep is None:
        return {"status": "off", "detail": "nanobot's own idle compaction comes first"}
    quiet = quiet_seconds(deps, key)
    if quiet is None:
        return {"status": "gone"}
    if quiet < ttl:
        raise Retry(defer=ttl - quiet + SLACK_SECONDS)
    await _flush_held_facts(ctx)
    summary = SummarizeRequest(session_key=key, reason="idle", keep=str(keep))
    if await budget.rest_of(redis, key) is not None:
        return {"status": "resting"}
    # The record first, then the file, as the job reads them.
    try:
        pending = await waiting_record(redis, deps.sessions_dir, key)
    except RecordOfAnotherVersion as exc:
        return {"status": "noop", "detail": str(exc)}
    try:
        session = read_session(deps.sessions_dir, key, from_watermark=True)
    except (SessionError, NanobotConfigError) as exc:
        return {"status": "gone", "detail": str(exc)}
    plan = plan_job(deps, session, pending, summary)
    if plan.skip is not None:
        log.debug("%s quiet for %.0f s: %s", key, quiet, plan.skip)
        return {"status": "noop", "detail": plan.skip}
    queued = await enqueue_summary(redis, summary) is not None
    log.info(
        "%s quiet for %.0f s: %s", key, quiet, "summary queued" if queued else "a summary is already queued or running"
    )
    return {"status": "queued" if queued else "running"}
