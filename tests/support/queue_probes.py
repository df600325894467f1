"""Reading what the hooks and the worker left in the tests' Redis namespace: queued jobs, records, counters."""

from __future__ import annotations

from arq.connections import ArqRedis
from arq.jobs import Job

from harness.defaults import TEST_KEYS


async def queued_jobs(redis: ArqRedis) -> int:
    return int(await redis.zcard(TEST_KEYS.queue))


async def queued_reason(redis: ArqRedis, key: str) -> str | None:
    """The reason of the session's queued summarize job, None when none is queued."""
    info = await Job(
        TEST_KEYS.job_id(key), redis, _queue_name=TEST_KEYS.queue, _deserializer=redis.job_deserializer
    ).info()
    return info.args[0]["reason"] if info is not None else None


async def has_record(redis: ArqRedis, key: str) -> bool:
    return bool(await redis.exists(TEST_KEYS.record(key)))


async def stats(redis: ArqRedis) -> dict[str, int]:
    raw = await redis.hgetall(TEST_KEYS.stats)
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}


async def applied(redis: ArqRedis, key: str, count: int = 1) -> bool:
    """The record was applied (counted by nanobot_hooks) and removed from Redis."""
    return (await stats(redis)).get("applied") == count and not await has_record(redis, key)
