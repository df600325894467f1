"""Redis from inside nanobot: one lazy client per event loop, every call bounded, trouble rate-limited."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from arq.connections import ArqRedis

from nanobot_hooks import logs
from nanobot_hooks.contract import Keys
from nanobot_hooks.queue import open_client
from nanobot_hooks.settings import redacted_url

T = TypeVar("T")

# Seconds for one group of Redis calls. Short: nothing waits on it but our own background tasks,
# and a `nanobot agent -m` process waits for those before it exits.
CALL_TIMEOUT = 2.0
TROUBLE = "redis"


class RedisLink:
    """Connects on first use and again after any failure, so a Redis that comes back is used again
    without anyone restarting nanobot."""

    def __init__(self, url: str, throttle: logs.Throttle, timeout: float = CALL_TIMEOUT,
                 options: dict[str, Any] | None = None, keys: Keys | None = None) -> None:
        self.url = url
        self.keys = keys
        self.options = options or {}
        self.timeout = timeout
        self.throttle = throttle
        self._client: ArqRedis | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def client(self) -> ArqRedis:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            # A client is bound to the loop it was made in (`nanobot agent` runs one loop per turn).
            self._client, self._loop = open_client(self.url, self.timeout, self.options, self.keys), loop
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
            f"Redis at {redacted_url(self.url)} failed while {doing} ({logs.describe(exc)}); "
            "nanobot goes on, summaries wait until Redis answers again",
        )

    def ok(self) -> None:
        # Says once that Redis answers again, but keeps the rate limit: a Redis that is partly failing
        # (reads work, writes fail) still warns at most once a minute.
        if self.throttle.recovered(TROUBLE):
            logs.info(f"Redis at {redacted_url(self.url)} answers again")

    async def close(self) -> None:
        """Close the connections of this event loop's client (a client of another loop is just dropped). Never raises."""
        client, loop, self._client, self._loop = self._client, self._loop, None, None
        if client is None:
            return
        try:
            if loop is asyncio.get_running_loop():
                async with asyncio.timeout(self.timeout):
                    await client.connection_pool.disconnect()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - closing a broken connection must not matter
            pass
