"""Redis clients of both sides, made in one place.

Every connect and call bounded, and behind Sentinel (`redis+sentinel://`) the primary asked for at each new connection,
so after a failover the next call reaches the promoted replica. The hooks, the worker (arq's own pool), its jobs,
commands and page use the asyncio client; the worker's checks (a ping before start, doctor) the synchronous one. arq's
jobs travel as JSON, never pickled: a job another program (or version 0.1.0) wrote pickled is read as UNREAD_JOB, its
bytes never looked into, so no bytes in Redis can run code in the worker."""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from arq.connections import ArqRedis
from redis.asyncio import Redis
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.sentinel import Sentinel as SyncSentinel

from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.redis_url import sentinel_target

__all__ = ["UNREAD_JOB", "close_client", "close_sentinels", "open_client", "sync_client"]


def job_to_json(data: dict[str, Any]) -> bytes:
    """arq's job (and result) as JSON; what JSON cannot hold (an exception as a failed job's result) as its text."""
    return json.dumps(data, default=str).encode()


# What a queued job that is not JSON is read as: the worker's function of that name says so in one line and ends,
# which frees the job's id (the session's) for the next trigger. Version 0.1.0 queued its jobs pickled.
UNREAD_JOB = "unread_job"


def job_from_json(raw: bytes) -> dict[str, Any]:
    """arq's job (or result) read back from JSON.

    Anything else (a pickle) is never unpickled: it is read as a job of UNREAD_JOB without arguments, so the worker ends
    it in one line instead of arq failing it with a traceback."""
    try:
        data = json.loads(raw)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError both are
        data = None
    if not isinstance(data, dict):
        return {"t": 1, "f": UNREAD_JOB, "a": [], "k": {}, "et": int(time.time() * 1000)}
    return data


def _bounds(timeout: float) -> dict[str, float]:
    return {"socket_connect_timeout": timeout, "socket_timeout": timeout}


def open_client(url: str, timeout: float, options: dict[str, Any] | None = None, keys: Keys | None = None) -> ArqRedis:
    """An asyncio client for `url`, bound to the namespace of `keys` (`Keys.of(client)`)."""
    bounds = _bounds(timeout)
    target = sentinel_target(url)
    client: ArqRedis
    if target is None:
        # from_url: the client owns its connection pool, so closing the client closes its connections too.
        client = ArqRedis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout, **(options or {}))
    else:
        client = Sentinel(target.sentinels, sentinel_kwargs=bounds, **bounds).master_for(
            target.service, redis_class=ArqRedis, db=target.db, username=target.username, password=target.password
        )
    client.job_serializer, client.job_deserializer = job_to_json, job_from_json
    if keys is not None:
        client.default_queue_name = keys.queue
    return client


async def close_client(client: Redis) -> None:
    """Close `client`'s connections.

    Behind Sentinel the Sentinels' own too, which redis-py's `aclose` leaves open (they were only collected, with a
    ResourceWarning each)."""
    pool = client.connection_pool
    try:
        await client.aclose()
    finally:
        await close_sentinels(pool)


async def close_sentinels(pool: Any) -> None:
    """The connections to the Sentinels behind `pool` closed (none unless it is a Sentinel's)."""
    if isinstance(pool, SentinelConnectionPool):
        for sentinel in pool.sentinel_manager.sentinels:
            await sentinel.aclose()


def sync_client(url: str, timeout: float, **options: Any) -> redis.Redis:
    """A synchronous client for `url`, for checks made outside an event loop."""
    bounds = _bounds(timeout)
    target = sentinel_target(url)
    if target is None:
        return redis.Redis.from_url(url, **bounds, **options)
    master: redis.Redis = SyncSentinel(target.sentinels, sentinel_kwargs=bounds, **bounds).master_for(
        target.service, db=target.db, username=target.username, password=target.password
    )
    return master
