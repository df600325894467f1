"""Is a worker alive, what is it running, and what runs nowhere: read from Redis for `status` and `doctor`.

Only this instance's namespace is read: arq marks a running job with `arq:in-progress:<job id>`, and every job
id of an instance starts with `nanobot-summary:<namespace>:`; the jobs are found from the instance's own queue and
its reports from its own index (worker.state.index), never by listing keys, which its Redis ACL user may not."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from arq.connections import ArqRedis
from arq.constants import health_check_key_suffix, in_progress_key_prefix, keep_cronjob_progress, retry_key_prefix

from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.records import utcnow
from nanobot_hooks.contract.version import version_mismatch, versions_of
from worker.state import index
from worker.state.workers import WorkerReport, process_gone, reports

# arq's in-progress mark lives the longest job timeout + 10 s; a mark with less left belongs to a job past its
# timeout, which arq would have cancelled in a live worker: its worker is gone or frozen.
PAST_TIMEOUT_MS = 10_000


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def health_line(redis: ArqRedis) -> str | None:
    """arq's health-check line of this queue (any live worker rewrites it every 30 s; it expires after 31 s)."""
    raw = await redis.get(Keys.of(redis).queue + health_check_key_suffix)
    return text(raw) if raw else None


# arq's health line's counters, as `status --json` names them: every job the worker process ran since it started,
# summaries, idle checks and scheduled ticks alike.
HEALTH_FIELDS = {
    "j_complete": "jobs_done",
    "j_failed": "jobs_failed",
    "j_retried": "jobs_retried",
    "j_ongoing": "jobs_running",
    "queued": "queued",
}


def health_fields(line: str | None) -> dict[str, Any] | None:
    """arq's health line as named numbers (None: no line).

    arq's health line "Nov-25 14:10:02 j_complete=3 j_failed=0 j_retried=0 j_ongoing=1 queued=1" as named numbers (None:
    no line): the one reading of it that status's text, its JSON and doctor share."""
    if line is None:
        return None
    stamp, _, rest = line.partition(" j_")
    fields = dict(part.split("=", 1) for part in f"j_{rest}".split() if "=" in part) if rest else {}
    numbers = {name: int(fields[raw]) for raw, name in HEALTH_FIELDS.items() if fields.get(raw, "").isdigit()}
    return {"last_beat": stamp, **numbers, **({"written_by": fields["worker"]} if "worker" in fields else {})}


def job_kind(keys: Keys, job_id: str) -> tuple[str, str]:
    """What a job id stands for: the job's kind, and its session or name.

    (what the job is, its session or name): summary / idle check of a session, or a scheduled job (a cron job's id is
    `Keys.cron(name)` + `:<tick in ms>`: shown as its name)."""
    if (session := keys.session_of_job(job_id)) is not None:
        return "summary", session
    if job_id.startswith(keys.idle_job_id("")):
        return "idle check", job_id[len(keys.idle_job_id("")) :]
    if job_id.startswith(keys.cron("")):
        return "scheduled", job_id[len(keys.cron("")) :].rpartition(":")[0] or job_id[len(keys.cron("")) :]
    return "scheduled", job_id.removeprefix(keys.prefix)


async def in_flight(redis: ArqRedis, alive: bool, found: Sequence[WorkerReport] = ()) -> list[dict[str, Any]]:
    """This namespace's running jobs; `stale` with the reason when no live worker can be running them."""
    keys = Keys.of(redis)
    # arq keeps a job in the queue until it ends, and marks it running with `arq:in-progress:<id>` meanwhile (a job
    # whose worker died keeps both): the queue names every job that can be running, no SCAN needed.
    queued = [text(job) for job in await redis.zrange(keys.queue, 0, -1)]
    async with redis.pipeline(transaction=False) as pipe:
        for job_id in queued:
            pipe.pttl(in_progress_key_prefix + job_id)
            pipe.get(retry_key_prefix + job_id)
        answers = await pipe.execute() if queued else []
    jobs = []
    for job_id, left_ms, tries in zip(queued, answers[::2], answers[1::2], strict=True):
        if left_ms == -2:
            continue  # no mark: waiting, not running
        kind, name = job_kind(keys, job_id)
        if kind == "scheduled" and 0 <= left_ms <= keep_cronjob_progress * 1000:
            # A finished cron tick: arq keeps its mark this long so no other worker runs the tick again.
            continue
        jobs.append(
            {
                "job_id": job_id,
                "kind": kind,
                "session": name if kind != "scheduled" else None,
                "name": name,
                "try": int(tries) if tries else None,
                "rerun_in_seconds": round(left_ms / 1000) if left_ms >= 0 else None,
                "stale": stale_because(job_id, left_ms, alive, found),
            }
        )
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
    live = [report for report in found if not dead(report, now)]
    if not live or any(r.running is None or r.heartbeat_at is None or "job_timeout" not in r.settings for r in live):
        return None  # a worker that does not say what it runs: only the rules above can tell
    lifetime = max(float(r.settings["job_timeout"]) for r in live) + PAST_TIMEOUT_MS / 1000
    started = now.timestamp() - (lifetime - max(left_ms, 0) / 1000)
    if all(
        r.heartbeat_at is not None and r.heartbeat_at.timestamp() > started and job_id not in (r.running or [])
        for r in live
    ):
        return "no live worker runs it: its worker was killed or froze"
    return None


def dead(report: WorkerReport, now: datetime, gone: bool | None = None) -> bool:
    """Whether a worker is dead.

    Its process is gone (seen at once from its own machine), or its report went without a beat for STALE_BEATS beats
    (from anywhere)."""
    return report.stale(now) or (process_gone(report) if gone is None else gone)


def successors(found: Sequence[WorkerReport], is_dead: Callable[[WorkerReport], bool]) -> dict[str, str]:
    """Which worker took each dead one's place.

    One that started after its last beat (a restart; the same host first), each taking at most one place. Maps a dead
    worker's id to its successor's; a dead worker with no successor (gone for good, or the second of two killed when one
    restarted) is not in it. A successor that died too is reported in its place, so a worker killed at every restart is
    one dead worker, not many."""

    def start(report: WorkerReport) -> float:
        return report.started_at.timestamp() if report.started_at else float("inf")

    def last(report: WorkerReport) -> float:
        return report.heartbeat_at.timestamp() if report.heartbeat_at else 0.0

    taken: dict[str, WorkerReport] = {}
    used: set[str] = set()
    for gone in sorted((r for r in found if is_dead(r)), key=last):
        later = [r for r in found if r.worker_id not in used and r is not gone and start(r) >= last(gone)]
        if later:
            after = min(later, key=lambda r: (r.host != gone.host, start(r)))
            taken[gone.worker_id] = after
            used.add(after.worker_id)
    return {worker_id: after.worker_id for worker_id, after in taken.items()}


def line_of_the_dead(line: str, gone: dict[str, bool]) -> bool:
    """Whether arq's health line was written by a worker now seen gone.

    The service's worker appends its id (`worker=<host>:<pid>`, service/arq_worker.py) to the line it writes; a line
    that names none was written by a worker that does not say (arq's own Worker, an older version), taken as alive."""
    writer = line.rpartition(" worker=")[2] if " worker=" in line else None
    return writer is not None and gone.get(writer, False)


def worker_view(line: str | None, found: list[WorkerReport]) -> dict[str, Any]:
    """What status and doctor say about the workers.

    Alive (arq's line, unless no worker that reports lives and the line is a worker's seen gone, left for its last 31 s:
    line_of_the_dead), each report (`dead`: killed or frozen and not replaced; `superseded_by`: the worker that took its
    place), and the settings of the running worker (the newest live report; None when no running worker publishes
    them)."""
    now = utcnow()
    gone = {report.worker_id: process_gone(report) for report in found}
    is_dead = {report.worker_id: dead(report, now, gone[report.worker_id]) for report in found}
    live = [report for report in found if not is_dead[report.worker_id]]
    alive = line is not None and not (not live and line_of_the_dead(line, gone))
    replaced = successors(found, lambda report: is_dead[report.worker_id] or not alive)
    return {
        "alive": alive,
        "health": line if alive else None,
        # A clean stop withdraws the report: one left while no worker beats belongs to a worker that died.
        "reports": [
            {
                **report.model_dump(mode="json"),
                "silent_seconds": report.silent_for(now),
                "stale": is_dead[report.worker_id] or not alive,
                "ended": gone[report.worker_id],
                "superseded_by": replaced.get(report.worker_id),
                "dead": (is_dead[report.worker_id] or not alive) and report.worker_id not in replaced,
            }
            for report in found
        ],
        "settings": live[0].settings if live and alive else None,
    }


async def workers(redis: ArqRedis) -> tuple[dict[str, Any], list[WorkerReport]]:
    """The view of the workers (worker_view) and their reports as read."""
    found = await reports(redis)
    return worker_view(await health_line(redis), found), found


async def nanobots(redis: ArqRedis) -> list[dict[str, Any]]:
    """The settings each running nanobot's hooks published, oldest first.

    The settings each running nanobot's hooks published (nanobot_hooks/turn/listener.py: host, pid, how it is run, its
    shared settings), oldest first; one that cannot be read is skipped."""
    keys = Keys.of(redis)
    processes = await index.members(redis, "hooks", keys.hooks)
    found = []
    for raw in await redis.mget([keys.hooks(process) for process in processes]) if processes else []:
        try:
            report = json.loads(raw or b"")
        except ValueError:
            continue
        if isinstance(report, dict) and isinstance(report.get("settings"), dict):
            found.append(report)
    return sorted(found, key=lambda report: float(report.get("started") or 0))


def version_mismatches(reports: list[dict[str, Any]], hooks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each running nanobot's hooks against each live worker, once per pair of versions that differ.

    Each running nanobot's hooks (their records, `nanobots`) against each live worker (`worker_view`'s reports), once
    per pair of versions that differ (nanobot_hooks.contract.version_mismatch): `serious` (the contracts differ), what
    differs, its fix, and the first nanobot and worker seen with them. Status, doctor and the page say them."""
    found: dict[tuple[tuple[str, int], tuple[str, int]], dict[str, Any]] = {}
    for nanobot in hooks:
        for report in (r for r in reports if not r["stale"]):
            pair = versions_of(nanobot), versions_of(report)
            if pair in found or (mismatch := version_mismatch(*pair)) is None:
                continue
            found[pair] = {
                "serious": mismatch.serious,
                "what": mismatch.what,
                "fix": mismatch.fix,
                "nanobot": f"{nanobot.get('host')}:{nanobot.get('pid')}",
                "worker": f"{report['host']}:{report['pid']}",
            }
    return list(found.values())


def oldest_due_seconds(queue: list[tuple[str, float]]) -> float | None:
    """How long the oldest job that is due (its time has come) has waited for a worker; None when none is."""
    now_ms = utcnow().timestamp() * 1000
    due = [score for _, score in queue if score <= now_ms]
    return round((now_ms - min(due)) / 1000, 1) if due else None
