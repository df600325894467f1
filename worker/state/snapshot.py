"""What `nanobot-summary status` and the web page show of an instance, read from Redis in one place (`gather`).

The worker's health and reports, versions that differ between the hooks and the worker, the queue, jobs in flight,
records waiting for nanobot, resting sessions, spend and last outcomes, as plain data. Only this instance's namespace is
read (worker.state.liveness)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from arq.connections import ArqRedis

from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.queue import DAMAGED, pending_sessions, read_waiting_records, reply
from nanobot_hooks.contract.records import utcnow
from worker.state import budget, formats, index, liveness
from worker.state.outcomes import read_outcome


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def gather(redis: ArqRedis, lists: bool = True) -> dict[str, Any]:
    """Everything status and the page show, as plain data (also what `status --json` prints).

    Without `lists`, the waiting records and the rests are left out (the page reads the page of them it shows:
    `records`, `rests`)."""
    keys = Keys.of(redis)
    workers, reports = await liveness.workers(redis)
    # arq keeps a running job in the queue until it ends, and marks it with an in-progress key.
    in_flight = await liveness.in_flight(redis, workers["alive"], reports)
    running = {job["job_id"] for job in in_flight}
    now_ms = utcnow().timestamp() * 1000
    queue = [
        (_text(job), score)
        for job, score in await redis.zrange(keys.queue, 0, -1, withscores=True)
        if _text(job) not in running
    ]
    # Idle checks wait by design (one per recently active session, until it has been quiet long enough).
    idle_checks = sum(1 for job, _ in queue if job.startswith(keys.idle_job_id("")))
    waiting = [score for job, score in queue if not job.startswith(keys.idle_job_id(""))]
    spend = {
        key: budget.Spend.from_hash(await reply(redis.hgetall(keys.spend(f"session:{key}")))).model_dump()
        for key in await index.members(redis, "spend", lambda session: keys.spend(f"session:{session}"))
    }
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
        **(await records(redis, await pending_sessions(redis)) if lists else {}),
        **({"resting": await rests(redis, await resting_sessions(redis))} if lists else {}),
        "outcomes": await _outcomes(redis),
        "spend": {
            "total": budget.Spend.from_hash(await reply(redis.hgetall(keys.spend("total")))).model_dump(),
            "sessions": spend,
        },
        "pickups": stats,
        "answer_formats": await formats.all_learned(redis),
    }


async def records(redis: ArqRedis, sessions: list[str]) -> dict[str, Any]:
    """The sessions' waiting records, those this version cannot read and damaged ones, in one MGET.

    The sessions' waiting records (`pending_records`), the sessions whose waiting record this version cannot read
    (`other_version_records`: another version's, kept for it), and those whose stored bytes are no record of any version
    (`damaged_records`: the hooks drop them at the session's next turn). One MGET for them all: a GET each took 2.6 s of
    the web page's overview for 1,000 waiting records."""
    found, others, damaged = [], [], []
    for key, record in zip(sessions, await read_waiting_records(redis, sessions), strict=True):
        if record == DAMAGED:
            damaged.append(key)
        elif isinstance(record, str):
            others.append(key)
        elif record is not None:
            found.append(
                {
                    "session": key,
                    "reason": record.reason,
                    "start": record.start,
                    "boundary": record.boundary,
                    "tokens_before": record.tokens_before,
                    "tokens_after": record.tokens_after,
                    "messages_before": record.messages_before,
                    "messages_after": record.messages_after,
                    "created_at": record.created_at.isoformat(),
                }
            )
    return {"pending_records": found, "other_version_records": others, "damaged_records": damaged}


async def resting_sessions(redis: ArqRedis) -> list[str]:
    """The sessions resting now (`status`'s list, `end-rest --all`'s)."""
    return await index.members(redis, "resting", Keys.of(redis).rest)


async def rests(redis: ArqRedis, sessions: list[str]) -> list[dict[str, Any]]:
    """Each of these sessions' rest (those resting), in one MGET."""
    resting = []
    for key, rest in zip(sessions, await budget.rests_of(redis, sessions), strict=True):
        if rest is not None:
            resting.append({"session": key, **rest.model_dump(mode="json")})
    return resting


async def _outcomes(redis: ArqRedis) -> list[dict[str, Any]]:
    """Every session's last outcome and failure streak, in two round trips.

    Every session's last outcome and failure streak, in two round trips however many sessions there are (one GET each
    took 300 ms for 1,000 sessions, on every load of the web page's overview)."""
    keys = Keys.of(redis)
    sessions = await index.members(redis, "outcomes", keys.outcome)
    if not sessions:
        return []
    raws = await redis.mget([keys.outcome(key) for key in sessions])
    streaks = await redis.mget([keys.failures(key) for key in sessions])
    return [
        {**_outcome_fields(key, raw), "failures_in_a_row": int(streak or 0)}
        for key, raw, streak in zip(sessions, raws, streaks, strict=True)
        if raw
    ]


# Each outcome as last read, by its stored bytes: parsing 1,000 outcomes was most of the web page's overview
# (about 200 ms on a busy machine) on every load, and an outcome's bytes change only when a job ends.
_PARSED: OrderedDict[tuple[str, bytes | str], dict[str, Any]] = OrderedDict()
PARSED_KEPT = 5_000


def _outcome_fields(key: str, raw: bytes | str) -> dict[str, Any]:
    """read_outcome's fields (as JSON), from the last reading of the same bytes."""
    mark = (key, raw)
    found = _PARSED.get(mark)
    if found is None:
        found = _PARSED[mark] = read_outcome(raw, key).model_dump(mode="json")
        while len(_PARSED) > PARSED_KEPT:
            _PARSED.popitem(last=False)
    return found
