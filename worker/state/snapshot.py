"""What `nanobot-summary status` and the web page show of an instance, read from Redis in one place (`gather`): the
worker's health and reports, versions that differ between the hooks and the worker, the queue, jobs in flight,
records waiting for nanobot, resting sessions, spend and last outcomes, as plain data. Only this instance's
namespace is read (worker.state.liveness)."""

from __future__ import annotations

from typing import Any

from arq.connections import ArqRedis

from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.queue import DAMAGED, pending_sessions, read_waiting_record, reply
from nanobot_hooks.contract.records import utcnow
from worker.state import budget, formats, index, liveness
from worker.state.outcomes import read_outcome


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def gather(redis: ArqRedis) -> dict[str, Any]:
    """Everything status and the page show, as plain data (also what `status --json` prints)."""
    keys = Keys.of(redis)
    workers, reports = await liveness.workers(redis)
    # arq keeps a running job in the queue until it ends, and marks it with an in-progress key.
    in_flight = await liveness.in_flight(redis, workers["alive"], reports)
    running = {job["job_id"] for job in in_flight}
    now_ms = utcnow().timestamp() * 1000
    queue = [(_text(job), score) for job, score in await redis.zrange(keys.queue, 0, -1, withscores=True)
             if _text(job) not in running]
    # Idle checks wait by design (one per recently active session, until it has been quiet long enough).
    idle_checks = sum(1 for job, _ in queue if job.startswith(keys.idle_job_id("")))
    waiting = [score for job, score in queue if not job.startswith(keys.idle_job_id(""))]
    spend = {key: budget.Spend.from_hash(await reply(redis.hgetall(keys.spend(f"session:{key}")))).model_dump()
             for key in await index.members(redis, "spend", lambda session: keys.spend(f"session:{session}"))}
    stats = {_text(k): int(v) for k, v in (await reply(redis.hgetall(keys.stats))).items()}
    return {
        "worker": workers["health"],
        "workers": workers["reports"],
        "worker_settings": workers["settings"],
        # Running nanobots' hooks of another version than a live worker's (liveness.version_mismatches).
        "versions": liveness.version_mismatches(workers["reports"], await liveness.nanobots(redis)),
        "queued": len(waiting),
        "deferred": sum(1 for score in waiting if score > now_ms),
        "idle_checks": idle_checks,
        "oldest_due_seconds": liveness.oldest_due_seconds(queue),
        "in_flight": in_flight,
        **await _records(redis),
        "resting": await _resting(redis),
        "outcomes": await _outcomes(redis),
        "spend": {"total": budget.Spend.from_hash(await reply(redis.hgetall(keys.spend("total")))).model_dump(),
                  "sessions": spend},
        "pickups": stats,
        "answer_formats": await formats.all_learned(redis),
    }


async def _records(redis: ArqRedis) -> dict[str, Any]:
    """The waiting records (`pending_records`), the sessions whose waiting record this version cannot read
    (`other_version_records`: another version's, kept for it), and those whose stored bytes are no record of any
    version (`damaged_records`: the hooks drop them at the session's next turn)."""
    records, others, damaged = [], [], []
    for key in await pending_sessions(redis):
        record = await read_waiting_record(redis, key)
        if record == DAMAGED:
            damaged.append(key)
        elif isinstance(record, str):
            others.append(key)
        elif record is not None:
            records.append({"session": key, "reason": record.reason, "start": record.start,
                            "boundary": record.boundary, "tokens_before": record.tokens_before,
                            "tokens_after": record.tokens_after, "messages_before": record.messages_before,
                            "messages_after": record.messages_after, "created_at": record.created_at.isoformat()})
    return {"pending_records": records, "other_version_records": others, "damaged_records": damaged}


async def resting_sessions(redis: ArqRedis) -> list[str]:
    """The sessions resting now (`status`'s list, `end-rest --all`'s)."""
    return await index.members(redis, "resting", Keys.of(redis).cooldown)


async def _resting(redis: ArqRedis) -> list[dict[str, Any]]:
    resting = []
    for key in await resting_sessions(redis):
        rest = await budget.cooling(redis, key)
        if rest is not None:
            resting.append({"session": key, **rest.model_dump(mode="json")})
    return resting


async def _outcomes(redis: ArqRedis) -> list[dict[str, Any]]:
    """Every session's last outcome and failure streak, in two round trips however many sessions there are
    (one GET each took 300 ms for 1,000 sessions, on every load of the web page's overview)."""
    keys = Keys.of(redis)
    sessions = await index.members(redis, "outcomes", keys.outcome)
    if not sessions:
        return []
    raws = await redis.mget([keys.outcome(key) for key in sessions])
    streaks = await redis.mget([keys.failures(key) for key in sessions])
    return [{**read_outcome(raw, key).model_dump(mode="json"), "failures_in_a_row": int(streak or 0)}
            for key, raw, streak in zip(sessions, raws, streaks, strict=True) if raw]
