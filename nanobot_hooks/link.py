"""Redis from inside nanobot: one lazy client per event loop, every call bounded, trouble rate-limited."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

from arq.connections import ArqRedis
from redis.asyncio import ConnectionPool

from nanobot_hooks import logs

T = TypeVar("T")

# Seconds for one group of Redis calls. Short: nothing waits on it but our own background tasks,
# and a `nanobot agent -m` process waits for those before it exits.
CALL_TIMEOUT = 2.0
TROUBLE = "redis"


def redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class RedisLink:
    """Connects on first use and again after any failure, so a Redis that comes back is used again
    without anyone restarting nanobot."""

    def __init__(self, url: str, throttle: logs.Throttle, timeout: float = CALL_TIMEOUT) -> None:
        self.url = url
        self.timeout = timeout
        self.throttle = throttle
        self._client: ArqRedis | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def client(self) -> ArqRedis:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            # A client is bound to the loop it was made in (`nanobot agent` runs one loop per turn).
            pool = ConnectionPool.from_url(
                self.url, socket_connect_timeout=self.timeout, socket_timeout=self.timeout,
            )
            self._client, self._loop = ArqRedis(pool_or_conn=pool), loop
        return self._client

    async def call(self, doing: str, work: Callable[[ArqRedis], Awaitable[T]]) -> T | None:
        """Run `work` within the timeout; on any failure log (at most once a minute) and return None."""
        try:
            async with asyncio.timeout(self.timeout):
                result = await work(self.client())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # Redis down, timeouts, refused connections, bad replies: never raise into nanobot
            self.trouble(doing, exc)
            return None
        self.ok()
        return result

    def trouble(self, doing: str, exc: BaseException) -> None:
        self.throttle.warning(
            TROUBLE,
            f"Redis at {redacted(self.url)} failed while {doing} ({logs.describe(exc)}); "
            "nanobot goes on, summaries wait until Redis answers again",
        )

    def ok(self) -> None:
        if self.throttle.clear(TROUBLE):
            logs.info(f"Redis at {redacted(self.url)} answers again")

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.connection_pool.disconnect()
