"""The Redis side of the contract.

Enqueue with single flight, store, find and drop result records (a record of another version is kept for the version
that reads it; only bytes no version could read are dropped), and the sessions' context histories."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Sequence
from typing import Any, Literal, TypeVar, cast

from arq.connections import ArqRedis
from arq.jobs import Job
from pydantic import ValidationError
from redis.asyncio.sentinel import SentinelConnectionPool

from nanobot_hooks.contract.keys import JOB_IDLE, JOB_SUMMARIZE, Keys
from nanobot_hooks.contract.marker import RECORD_LIFETIME
from nanobot_hooks.contract.records import SummarizeRequest, SummaryRecord

__all__ = [
    "DAMAGED",
    "CONTEXT_DAYS",
    "CONTEXT_KEPT",
    "RECORD_SECONDS",
    "REPLICA_WAIT_MS",
    "UNREADABLE",
    "context_history",
    "drop_record",
    "enqueue_idle_check",
    "enqueue_summary",
    "load_record",
    "load_waiting_record",
    "note_context",
    "read_waiting_record",
    "read_waiting_records",
    "pending_sessions",
    "reply",
    "store_record",
]

# Deletes a record only if it is still the same one, so a newer record is never lost: the one applied (the same
# identity, its `created_at`, read from the stored JSON) or the same unreadable bytes. A pending entry without a
# record is cleaned up too.
_DROP_IF_SAME = """
local raw = redis.call('GET', KEYS[1])
if not raw then
  redis.call('SREM', KEYS[2], ARGV[2])
  return 0
end
local same
if ARGV[3] == 'stamp' then
  local ok, record = pcall(cjson.decode, raw)
  same = ok and type(record) == 'table' and record['created_at'] == ARGV[1]
else
  same = raw == ARGV[1]
end
if same then
  redis.call('DEL', KEYS[1])
  redis.call('SREM', KEYS[2], ARGV[2])
  return 1
end
return 0
"""

UNREADABLE = "unreadable"  # a record this version cannot read: kept for the version that can (`load_waiting_record`)
DAMAGED = "damaged"  # bytes that are no record of any version: dropped

T = TypeVar("T")


async def reply(call: Awaitable[T] | T) -> T:
    """A Redis command's answer, awaited.

    redis-py types each command for its sync and asyncio clients at once (`Awaitable[X] | X`); on our asyncio clients
    (ArqRedis, not generic) it is always the awaitable. One typed await here, used wherever such an answer is read,
    instead of a cast at every call."""
    return await cast(Awaitable[T], call)


async def enqueue_summary(redis: ArqRedis, request: SummarizeRequest) -> Job | None:
    """None when a job for the session is already queued or running (single flight)."""
    keys = Keys.of(redis)
    return await redis.enqueue_job(
        JOB_SUMMARIZE,
        request.model_dump(mode="json"),
        _job_id=keys.job_id(request.session_key),
        _queue_name=keys.queue,
    )


async def enqueue_idle_check(redis: ArqRedis, session_key: str, defer_by: float) -> Job | None:
    """The session's idle check, run `defer_by` seconds from now.

    None when one is already waiting (it re-defers itself while the session is active, so one per session is enough)."""
    keys = Keys.of(redis)
    return await redis.enqueue_job(
        JOB_IDLE,
        SummarizeRequest(session_key=session_key, reason="idle").model_dump(mode="json"),
        _job_id=keys.idle_job_id(session_key),
        _queue_name=keys.queue,
        _defer_by=defer_by,
    )


# A record nobody applied for this long (its session deleted, its nanobot gone) expires; the hooks refuse one made
# longer ago than that (`SessionMarker.refusal`), wherever it comes from.
RECORD_SECONDS = int(RECORD_LIFETIME.total_seconds())


# Behind Sentinel, how long a stored record waits for a replica to confirm it (Redis's WAIT).
REPLICA_WAIT_MS = 2000


async def store_record(redis: ArqRedis, record: SummaryRecord) -> bool:
    """Keep the record until nanobot applies it, then tell listeners it is ready.

    Behind Sentinel the record is acknowledged only once a replica holds it too (WAIT 1): a failover
    promotes a replica, and replication is asynchronous, so a record only the old primary had would be
    gone. False when no replica confirmed it in time (a replica down or lagging; if none is connected there
    is nothing a failover could promote either). The copy in line 1 of the session file stays meanwhile."""
    keys = Keys.of(redis)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.set(keys.record(record.session_key), record.model_dump_json(), ex=RECORD_SECONDS)
        pipe.sadd(keys.pending, record.session_key)
        pipe.publish(keys.notice_channel, record.session_key)
        await pipe.execute()
    if isinstance(redis.connection_pool, SentinelConnectionPool):
        return int(await redis.wait(1, REPLICA_WAIT_MS)) >= 1
    return True


async def load_record(redis: ArqRedis, session_key: str) -> SummaryRecord | None:
    raw = await redis.get(Keys.of(redis).record(session_key))
    return SummaryRecord.model_validate_json(raw) if raw else None


async def load_waiting_record(redis: ArqRedis, session_key: str) -> SummaryRecord | str | None:
    """The session's waiting record, as `load_record` reads it, or what stands in its place.

    Never raises on what is stored (a Redis error still does).

    A JSON object this version does not read (a record written by another version of the worker: a new reason, a
    field it requires) is kept, pending, for the version that reads it, and UNREADABLE is returned: a rolling
    upgrade or a downgrade loses no summary. Until then it stands for the summary it holds (the hooks queue no job
    over it) and expires as every record does (RECORD_SECONDS). Bytes that are no JSON object are no record of any
    version: deleted (only if still the same bytes) and taken off the pending set, and DAMAGED is returned. None
    when nothing waits (a stray pending entry is removed)."""
    keys = Keys.of(redis)
    raw = await redis.get(keys.record(session_key))
    if not raw:
        await reply(redis.srem(keys.pending, session_key))  # expired or dropped: nothing to wait for
        return None
    found = _record_or_why(raw)
    if found == DAMAGED:
        await _drop_if_same(redis, session_key, raw, "bytes")
    return found


async def read_waiting_record(redis: ArqRedis, session_key: str) -> SummaryRecord | str | None:
    """The session's waiting record for `status` and the web page, read only.

    The session's waiting record as `load_waiting_record` sees it, read only (nothing dropped, never raising on what is
    stored): what `status` and the web page show."""
    raw = await redis.get(Keys.of(redis).record(session_key))
    return _record_or_why(raw) if raw else None


async def read_waiting_records(redis: ArqRedis, session_keys: list[str]) -> list[SummaryRecord | str | None]:
    """read_waiting_record for each of these sessions, in one MGET (status and the web page list 1,000)."""
    if not session_keys:
        return []
    raws = await redis.mget([Keys.of(redis).record(key) for key in session_keys])
    return [_record_or_why(raw) if raw else None for raw in raws]


def _record_or_why(raw: bytes | str) -> SummaryRecord | str:
    """Stored bytes as this version reads them.

    The record, UNREADABLE (a JSON object, another version's record) or DAMAGED (no record of any version)."""
    try:
        return SummaryRecord.model_validate_json(raw)
    except ValidationError:
        return UNREADABLE if _is_json_object(raw) else DAMAGED


def _is_json_object(raw: bytes | str) -> bool:
    """Could these bytes be a record of some version (a JSON object), or are they damage?"""
    try:
        return isinstance(json.loads(raw), dict)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError both are
        return False


async def pending_sessions(redis: ArqRedis) -> list[str]:
    members = await reply(redis.smembers(Keys.of(redis).pending))
    return sorted(m.decode() if isinstance(m, bytes) else m for m in members)


async def drop_record(redis: ArqRedis, record: SummaryRecord) -> bool:
    """Remove `record` once applied or found stale; a newer record for the session stays."""
    return await _drop_if_same(redis, record.session_key, record.stamp, "stamp")


async def _drop_if_same(redis: ArqRedis, session_key: str, same: str | bytes, by: Literal["stamp", "bytes"]) -> bool:
    keys = Keys.of(redis)
    names = [keys.record(session_key), keys.pending]
    # redis-py annotates EVAL's keys and arguments as str only; like every command's, bytes are sent as they are.
    return bool(await reply(redis.eval(_DROP_IF_SAME, len(names), *names, cast(str, same), session_key, by)))


CONTEXT_KEPT = 400  # entries of a session's context history: a year of a busy chat's turns would be too many
CONTEXT_DAYS = 30


async def note_context(redis: ArqRedis, entries: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Appends (session, entry) pairs to the sessions' context histories in one round trip.

    An entry is a turn's prompt tokens (`{"at", "tokens"}`) or a summary applied (`{"at", "applied": true, "before",
    "after"}`)."""
    keys = Keys.of(redis)
    async with redis.pipeline(transaction=False) as pipe:
        for session in dict.fromkeys(session for session, _ in entries):
            name = keys.context(session)
            pipe.rpush(name, *[json.dumps(entry) for key, entry in entries if key == session])
            pipe.ltrim(name, -CONTEXT_KEPT, -1)
            pipe.expire(name, CONTEXT_DAYS * 86400)
        await pipe.execute()


async def context_history(redis: ArqRedis, session_key: str) -> list[dict[str, Any]]:
    """A session's context history, oldest first; an entry that does not read is left out."""
    found = []
    for raw in await reply(redis.lrange(Keys.of(redis).context(session_key), 0, -1)):
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("at"), (int, float)):
            found.append(entry)
    return found
