"""Is a worker alive, what is it running, and what runs nowhere: read from Redis for `status` and `doctor`.

Only this instance's namespace is read: arq marks a running job with `arq:in-progress:<job id>`, and every job
id of an instance starts with `nanobot-summary:<namespace>:`, so the scan never sees another instance's jobs
(whose ids carry session keys, which name people)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arq.connections import ArqRedis
from arq.constants import health_check_key_suffix, in_progress_key_prefix, keep_cronjob_progress, retry_key_prefix

from nanobot_hooks.contract import Keys, utcnow
from worker.state.workers import WorkerReport, reports

# arq's in-progress mark lives the longest job timeout + 10 s; a mark with less left belongs to a job past its
# timeout, which arq would have cancelled in a live worker: its worker is gone or frozen.
PAST_TIMEOUT_MS = 10_000


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def health_line(redis: ArqRedis) -> str | None:
    """arq's health-check line of this queue (any live worker rewrites it every 30 s; it expires after 31 s)."""
    raw = await redis.get(Keys.of(redis).queue + health_check_key_suffix)
    return text(raw) if raw else None


def job_kind(keys: Keys, job_id: str) -> tuple[str, str]:
    """(what the job is, its session or name): summary / idle check of a session, or a scheduled job (a cron
    job's id is `Keys.cron(name)` + `:<tick in ms>`: shown as its name)."""
    if (session := keys.session_of_job(job_id)) is not None:
        return "summary", session
    if job_id.startswith(keys.idle_job_id("")):
        return "idle check", job_id[len(keys.idle_job_id("")):]
    if job_id.startswith(keys.cron("")):
        return "scheduled", job_id[len(keys.cron("")):].rpartition(":")[0] or job_id[len(keys.cron("")):]
    return "scheduled", job_id.removeprefix(keys.prefix)


async def in_flight(redis: ArqRedis, alive: bool, found: Sequence[WorkerReport] = ()) -> list[dict[str, Any]]:
    """This namespace's running jobs; `stale` with the reason when no live worker can be running them."""
    keys = Keys.of(redis)
    jobs = []
    async for raw in redis.scan_iter(match=f"{in_progress_key_prefix}{keys.prefix}*", count=500):
        mark = text(raw)
        job_id = mark[len(in_progress_key_prefix):]
        left_ms = await redis.pttl(mark)
        tries = await redis.get(retry_key_prefix + job_id)
        kind, name = job_kind(keys, job_id)
        if kind == "scheduled" and 0 <= left_ms <= keep_cronjob_progress * 1000:
            # A finished cron tick: arq keeps its mark this long so no other worker runs the tick again.
            continue
        jobs.append({"job_id": job_id, "kind": kind, "session": name if kind != "scheduled" else None,
                     "name": name, "try": int(tries) if tries else None,
                     "rerun_in_seconds": round(left_ms / 1000) if left_ms >= 0 else None,
                     "stale": stale_because(job_id, left_ms, alive, found)})
    return sorted(jobs, key=lambda job: job["job_id"])


def stale_because(job_id: str, left_ms: int, alive: bool, found: Sequence[WorkerReport]) -> str | None:
    """Why no live worker can be running a job marked running (None: one may be).

    arq's mark lives the longest job timeout + 10 s from the job's start. Live workers that list the jobs they
    ran at their last beat, a beat after the job started, and none of them lists it: it is a dead worker's."""
    if not alive:
        return "no worker is alive: its worker was stopped hard, killed or froze"
    if 0 <= left_ms < PAST_TIMEOUT_MS:
        return "past its timeout: its worker was killed or froze"
    now = utcnow()
    live = [report for report in found if not report.stale(now)]
    if not live or any(r.running is None or r.heartbeat_at is None or "job_timeout" not in r.settings for r in live):
        return None  # a worker that does not say what it runs: only the rules above can tell
    lifetime = max(float(r.settings["job_timeout"]) for r in live) + PAST_TIMEOUT_MS / 1000
    started = now.timestamp() - (lifetime - max(left_ms, 0) / 1000)
    if all(r.heartbeat_at is not None and r.heartbeat_at.timestamp() > started and job_id not in (r.running or [])
           for r in live):
        return "no live worker runs it: its worker was killed or froze"
    return None


def worker_view(line: str | None, found: list[WorkerReport]) -> dict[str, Any]:
    """What status and doctor say about the workers: alive (arq's line), each report, and the settings of the
    running worker (the newest report still beating; None when no running worker publishes them)."""
    now = utcnow()
    live = [report for report in found if not report.stale(now)]
    return {
        "alive": line is not None,
        "health": line,
        # A clean stop withdraws the report: one left while no worker beats belongs to a worker that died.
        "reports": [{**report.model_dump(mode="json"), "silent_seconds": report.silent_for(now),
                     "stale": report.stale(now) or line is None} for report in found],
        "settings": live[0].settings if live and line is not None else None,
    }


async def workers(redis: ArqRedis) -> tuple[dict[str, Any], list[WorkerReport]]:
    """The view of the workers (worker_view) and their reports as read."""
    found = await reports(redis)
    return worker_view(await health_line(redis), found), found


def oldest_due_seconds(queue: list[tuple[str, float]]) -> float | None:
    """How long the oldest job that is due (its time has come) has waited for a worker; None when none is."""
    now_ms = utcnow().timestamp() * 1000
    due = [score for _, score in queue if score <= now_ms]
    return round((now_ms - min(due)) / 1000, 1) if due else None
