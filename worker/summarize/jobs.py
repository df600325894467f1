"""The summarize job, arq's entry.

Admit the try, run the summary and (daily run) the notes stages, retry transient trouble, and keep an outcome of every
try for status."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sqlite3
import time
from datetime import datetime, timedelta, tzinfo
from typing import Any

from arq import Retry
from arq.connections import ArqRedis

from nanobot_hooks.contract.records import SummarizeRequest
from nanobot_hooks.contract.session_format import is_internal_session
from worker.connections import redis_back, redis_cut
from worker.errors import BadAnswer, OutOfTime, OverBudget, RecordOfAnotherVersion, RetryableError, WorkerError
from worker.memory.recall_index import RecallIndexError, archived_through
from worker.nanobot.sessions import SessionFile, read_session
from worker.state import budget, running
from worker.state.budget import Rest
from worker.state.outcomes import JobOutcome, keep_outcome
from worker.summarize import daily, retired
from worker.summarize.deps import Deps
from worker.summarize.notes_only import note_the_rest
from worker.summarize.retired import note_retired
from worker.summarize.run import Run
from worker.summarize.summary import summarize_range, waiting_record
from worker.text.clock import in_zone
from worker.text.prepare import Lines, dated_from
from worker.text.redact import redact

log = logging.getLogger("worker.summarize.jobs")
# The job a log line belongs to ("<session> <job id> try <n>"), for every line logged while it runs.
CURRENT_JOB: contextvars.ContextVar[str] = contextvars.ContextVar("job", default="")

# How long a job whose Redis went away waits for it to answer again before giving the try up (arq's job timeout
# bounds it too).
REDIS_WAIT_SECONDS = 60.0
RUN_LOCK = "summary_run_lock"  # the job's ctx: the run lock's token of its try, released again after a lost Redis
# A model that answered with nothing usable is asked once more (in a new try); then the job gives up and
# the session rests, rather than paying again and again for the same failure.
BAD_ANSWER_TRIES = 2
# Seconds kept free before arq's job timeout (at most a tenth of it): a call that might not finish by then
# is not started.
TIME_MARGIN = 10.0


async def summarize_session(ctx: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """arq entry point.

    Transient trouble is retried with backoff; every try leaves an outcome for status. One run of a session at a time: a
    start while another run holds the session's lock (arq's in-progress mark was lost) waits until that run is over,
    without a model call or a write."""
    deps: Deps = ctx["deps"]
    redis: ArqRedis = ctx["redis"]
    req = SummarizeRequest.model_validate(request)
    while True:
        try:
            return await locked_try(ctx, deps, redis, req)
        except Exception as exc:
            if not redis_cut(exc):
                raise
            # A Redis restarted or failed over mid-job: arq would end the job with the traceback (its queue entry
            # may be gone too, with a Redis that keeps nothing), and the session would wait for its next trigger.
            # The try runs again here, counted, once Redis answers.
            job_try = ctx.get("job_try", 1)
            if job_try >= deps.settings.summary_max_tries:
                log.warning("%s: Redis went away during try %d, the last (%s)", req.session_key, job_try, exc)
                raise
            log.warning(
                "%s: Redis went away during try %d (%s): the try runs again once Redis answers",
                req.session_key,
                job_try,
                exc,
            )
            if not await redis_back(redis, REDIS_WAIT_SECONDS):
                raise
            if (held := ctx.pop(RUN_LOCK, None)) is not None:
                await running.release(redis, req.session_key, held)  # given back while Redis was away: now
            ctx["job_try"] = job_try + 1


async def locked_try(ctx: dict[str, Any], deps: Deps, redis: ArqRedis, req: SummarizeRequest) -> dict[str, Any]:
    """One try under the session's run lock (or its deferral while another run holds it)."""
    CURRENT_JOB.set(f"{req.session_key} {ctx.get('job_id', '-')} try {ctx.get('job_try', 1)}")
    token = await running.take(redis, req.session_key, deps.job_timeout)
    ctx[RUN_LOCK] = token
    if token is None:
        wait = await running.held_for(redis, req.session_key)
        log.warning(
            "%s is being summarized by another run (arq's in-progress mark was lost): this start waits %.0f s",
            req.session_key,
            wait,
        )
        # The other run's end removes the job from the queue, this deferred start with it.
        raise Retry(defer=min(wait + 1.0, deps.job_timeout + running.LOCK_MARGIN))
    try:
        return await run_session(ctx, deps, redis, req)
    finally:
        await running.release(redis, req.session_key, token)


async def run_session(ctx: dict[str, Any], deps: Deps, redis: ArqRedis, req: SummarizeRequest) -> dict[str, Any]:
    """One try of the job, the session's run lock held."""
    job_try: int = ctx.get("job_try", 1)
    key = req.session_key
    started = time.monotonic()
    run = Run(deps, redis, req, job_try, started + deps.job_timeout - min(TIME_MARGIN, deps.job_timeout / 10))
    # Before any early exit: an outcome must never show (and be rested for) an earlier job's spend.
    rest = await budget.start_job(redis, key) if job_try == 1 else None
    refused = not_run(run, rest)
    if refused is not None:
        return await finish(run, refused, started)
    async with daily.flag_for_try(ctx, key) as since:
        if since:
            run.req = req.model_copy(update={"notes_through_end": True, "notes_since": since})
        try:
            outcome = await try_job(run)
            ctx[retired.SEEN] = run.retired_seen
        except asyncio.CancelledError:
            # arq's job timeout or a worker shutdown: say so, then let the cancellation go on. Not a failure of
            # the session (no rest): the retry, or the next job, resumes after the finished chunks
            # (worker.state.progress), and still notes through the end.
            outcome = JobOutcome(session_key=key, status="failed", detail="cancelled (job timeout or worker shutdown)")
            await finish(run, outcome, started, rest=False)
            raise
    return await finish(run, outcome, started)


def not_run(run: Run, rest: Rest | None) -> JobOutcome | None:
    """The outcome of a try that must not run, or None."""
    key, job_try = run.key, run.job_try
    if is_internal_session(key):
        return JobOutcome(session_key=key, status="noop", detail="an internal nanobot session")
    if job_try > run.deps.settings.summary_max_tries:
        # Only after the worker died or ran out of time during the last try: arq allows one more pickup so
        # that the job can say so.
        detail = f"gave up after {job_try - 1} tries (the worker stopped or the job ran out of time)"
        return JobOutcome(session_key=key, status="failed", detail=detail)
    # A retry (job_try > 1) belongs to a job already admitted: only a new job waits for the rest.
    if run.req.reason != "manual" and rest is not None:
        # In the zone the pages and notes use, named: the page shows this beside its own times.
        detail = (
            f"paused until resumed (nanobot-summary end-rest {key}): {rest.reason}"
            if rest.paused
            else f"resting until {in_zone(rest.until, run.deps.tz)}: {rest.reason}"
        )
        return JobOutcome(session_key=key, status="noop", detail=detail)
    return None


async def try_job(run: Run) -> JobOutcome:
    """One try's outcome; transient trouble raises arq's Retry while tries are left."""
    key, redis, settings = run.key, run.redis, run.deps.settings
    try:
        return await run_job(run)
    except RetryableError as exc:
        tries = settings.summary_max_tries
        if isinstance(exc, BadAnswer):
            tries = min(tries, BAD_ANSWER_TRIES)
        if run.job_try < tries:
            delay = 0.0 if isinstance(exc, OutOfTime) else settings.summary_retry_delay * 2 ** (run.job_try - 1)
            log.warning("summary of %s failed (try %d): %s; retrying", key, run.job_try, exc)
            raise Retry(defer=max(min(delay, 600.0), exc.retry_after or 0.0)) from None
        return JobOutcome(session_key=key, status="failed", detail=f"gave up after {run.job_try} tries: {exc}")
    except RecordOfAnotherVersion as exc:
        log.info("%s", exc)
        return JobOutcome(session_key=key, status="noop", detail=str(exc))
    except OverBudget as exc:
        outcome = JobOutcome(session_key=key, status="noop", detail=str(exc))
        rest = await budget.start_rest(redis, key, str(exc), 0, 0, seconds=_seconds_to_midnight(run.deps.tz))
        outcome.cooldown_until = rest.until if rest else None
        return outcome
    except WorkerError as exc:
        return JobOutcome(session_key=key, status="failed", detail=str(exc))
    except Exception as exc:  # a bug must still leave an outcome behind, not only a traceback in the log
        if redis_cut(exc):
            raise  # the job's try runs again once Redis answers (summarize_session)
        log.exception("summary of %s crashed", key)
        return JobOutcome(session_key=key, status="failed", detail=f"internal error: {exc!r}")


async def finish(run: Run, outcome: JobOutcome, started: float, rest: bool = True) -> dict[str, Any]:
    """Adds the job's spend and timing to its outcome, starts or ends the session's rest, and keeps it."""
    redis, key, settings = run.redis, run.key, run.deps.settings
    spend = await budget.job_spend(redis, key)
    # Details quote models and providers: redacted like every other text the worker keeps.
    skipped = (
        f"{'facts' if run.notes_fallback else 'notes and facts'} skipped: {run.notes_skipped}"
        if run.notes_skipped
        else ""
    )
    detail = redact("; ".join(p for p in (outcome.detail, skipped, spend.describe()) if p))
    outcome = outcome.model_copy(
        update={
            "seconds": round(time.monotonic() - started, 3),
            "job_try": run.job_try,
            "reason": run.req.reason,
            "model": run.deps.model.model,
            "spend": spend,
            "detail": detail,
            "memory_skipped": redact(run.notes_skipped or run.memory_unwritten),
            "notes_fallback": redact(run.notes_fallback),
        }
    )
    # A failure, or paid calls that changed nothing, rests the session (a rest already set by a cap stays).
    fruitless = outcome.status == "failed" or (outcome.status == "noop" and spend.calls > 0)
    if fruitless and rest and outcome.cooldown_until is None:
        new_rest = await budget.start_rest(
            redis, key, outcome.detail[:200], settings.summary_cooldown, settings.summary_cooldown_max
        )
        if new_rest is not None:
            outcome.cooldown_until = new_rest.until
    # The work is done: no rest, and the next failure starts the doubling afresh.
    ended = budget.rest_keys(redis, key) if outcome.status in ("summarized", "noted") else []
    log.info("%s %s in %.1fs: %s", outcome.status, key, outcome.seconds, outcome.detail)
    await keep_outcome(redis, outcome, delete=ended)
    return outcome.model_dump(mode="json")


def _seconds_to_midnight(tz: tzinfo | None) -> float:
    now = datetime.now(tz)
    tomorrow = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), tzinfo=now.tzinfo)
    return max(60.0, (tomorrow - now).total_seconds())


async def run_job(run: Run) -> JobOutcome:
    """The summary of what leaves the context, then (daily run) notes for every message not yet noted."""
    deps, req = run.deps, run.req
    # What `/new` took from the session first: the copies' messages are older than the session's.
    before = await note_retired(run)
    # The record first, then the file: if nanobot applies the record in between, the file read after it
    # shows it applied, and the job folds it in; the other order would cover the old range again.
    pending = await waiting_record(run.redis, deps.sessions_dir, req.session_key)
    # From the watermark: older messages of a daily run's day are noted in windows of their own (note_before).
    session = read_session(deps.sessions_dir, req.session_key, from_watermark=True)
    if session.skipped_lines:
        log.warning(
            "%s: skipped %d malformed lines (%s)",
            req.session_key,
            session.skipped_lines,
            "; ".join(session.skipped_reasons[:3]),
        )
    lines = Lines(session.messages)  # rendered once for the summary's transcript and the recall index
    outcome, covered = await summarize_range(run, session, pending, lines)
    if req.notes_through_end:
        written = await note_the_rest(run, session, covered)
        status = "noted" if outcome.status == "noop" and written else outcome.status
        detail = f"{outcome.detail}; {written or 'notes up to date'}"
        outcome = outcome.model_copy(update={"status": status, "detail": detail})
    await index_for_recall(deps, session, outcome.boundary, lines)
    if before:
        status = "noted" if outcome.status == "noop" else outcome.status
        outcome = outcome.model_copy(update={"status": status, "detail": f"{before}; {outcome.detail}"})
    return outcome


def read_for_job(deps: Deps, req: SummarizeRequest) -> SessionFile:
    """What a dry run of the job shows.

    From the watermark (what it covers is all a summary reads), and for a daily run from the first message of its day on
    (or all), every un-noted message it notes (before that day, notes are never written). The job itself reads from the
    watermark and the rest in windows (note_before)."""
    since = req.notes_since if req.notes_through_end else None
    if req.notes_through_end and since is None:
        return read_session(deps.sessions_dir, req.session_key)
    return read_session(
        deps.sessions_dir, req.session_key, from_watermark=True, keep_from=dated_from(since, deps.tz) if since else None
    )


async def index_for_recall(deps: Deps, session: SessionFile, boundary: int | None, lines: Lines | None = None) -> None:
    """The recall index follows what this job archived and noted; its trouble is logged, never fatal."""
    if deps.recall is None:
        return
    through = max(archived_through(session), boundary or 0)
    try:
        done = await asyncio.to_thread(deps.recall.refresh, session.path.parent, session, through, lines)
    except (RecallIndexError, sqlite3.Error, OSError) as exc:
        log.warning("%s: recall index not updated: %s", session.key, exc)
        return
    log.info("%s: %s", session.key, done)
