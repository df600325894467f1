"""Redis clients of both sides, made in one place: every connect and call bounded, and behind Sentinel
(`redis+sentinel://`) the primary asked for at each new connection, so after a failover the next call reaches
the promoted replica. The hooks and the worker's jobs use the asyncio client; the worker's checks (a ping
before start, doctor) the synchronous one."""

from __future__ import annotations

from typing import Any

import redis
from arq.connections import ArqRedis
from redis.asyncio import ConnectionPool
from redis.asyncio.sentinel import Sentinel
from redis.sentinel import Sentinel as SyncSentinel

from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.redis_url import sentinel_target


def _bounds(timeout: float) -> dict[str, float]:
    return {"socket_connect_timeout": timeout, "socket_timeout": timeout}


def open_client(url: str, timeout: float, options: dict[str, Any] | None = None, keys: Keys | None = None) -> ArqRedis:
    """An asyncio client for `url`, bound to the namespace of `keys` (`Keys.of(client)`)."""
    bounds = _bounds(timeout)
    target = sentinel_target(url)
    if target is None:
        client = ArqRedis(pool_or_conn=ConnectionPool.from_url(url, **bounds, **(options or {})))
    else:
        client = Sentinel(target.sentinels, sentinel_kwargs=bounds, **bounds).master_for(
            target.service, redis_class=ArqRedis, db=target.db, username=target.username, password=target.password)
    if keys is not None:
        client.default_queue_name = keys.queue
    return client


def sync_client(url: str, timeout: float, **options: Any) -> redis.Redis:
    """A synchronous client for `url`, for checks made outside an event loop."""
    bounds = _bounds(timeout)
    target = sentinel_target(url)
    if target is None:
        return redis.Redis.from_url(url, **bounds, **options)
    return SyncSentinel(target.sentinels, sentinel_kwargs=bounds, **bounds).master_for(
        target.service, db=target.db, username=target.username, password=target.password)
