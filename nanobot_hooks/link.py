"""Redis from inside nanobot.

One lazy client per event loop, every call bounded, trouble rate-limited, and the Redis host's name resolved in a thread
of our own, its address kept."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from arq.connections import ArqRedis
from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection, parse_url
from redis.asyncio.sentinel import SentinelConnectionPool, SentinelManagedConnection, SentinelManagedSSLConnection
from redis.exceptions import ConnectionError as RedisConnectionError

from nanobot_hooks import logs
from nanobot_hooks.contract.client import close_client, open_client
from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.redis_url import redacted_url, sentinel_target

T = TypeVar("T")

# Seconds for one group of Redis calls. Short: nothing waits on it but our own background tasks,
# and a `nanobot agent -m` process waits for those before it exits.
CALL_TIMEOUT = 2.0
TROUBLE = "redis"
# Seconds a resolved address serves before it is looked up again (in the background: it serves meanwhile),
# so a Redis host that moved (a container started again) is found; and a name that failed waits before another try.
ADDRESS_SECONDS = 60.0
RETRY_SECONDS = 5.0


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class Resolver:
    """Host names looked up in a daemon thread of our own, one look-up per name at a time, the address kept.

    asyncio looks names up in its default thread pool, which nanobot's LLM client needs for its own; our bound
    cancels the wait, not the look-up, so with the Redis host's DNS hung every call held one more of those
    threads until the pool was full and nanobot's turns waited. Here a hung look-up holds one thread of ours;
    once it ran past a call's bound, calls fail at once until it ends, and a kept address serves while it is
    looked up again."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[str, float]] = {}  # host -> (address, when looked up)
        self._pending: dict[str, tuple[concurrent.futures.Future[str], float]] = {}  # host -> (look-up, start)
        self._failed: dict[str, float] = {}  # host -> when its last look-up failed
        self._lock = threading.Lock()

    def known(self, host: str) -> str | None:
        if _is_address(host):
            return host
        entry = self._known.get(host)
        return entry[0] if entry is not None else None

    async def resolve(self, host: str, port: int, timeout: float) -> str:
        """`host`'s address: the kept one, or a look-up's awaited at most `timeout` from its start.

        Raises redis-py's ConnectionError (what the link catches) when there is none in time."""
        if (address := self.known(host)) is not None:
            if not _is_address(host) and time.monotonic() - self._known[host][1] > ADDRESS_SECONDS:
                self._look_up(host, port)  # looked up again in the background; the kept one serves
            return address
        if time.monotonic() - self._failed.get(host, float("-inf")) < RETRY_SECONDS:
            raise RedisConnectionError(f"{host} does not resolve (tried less than {RETRY_SECONDS:g} s ago)")
        future, started = self._look_up(host, port)
        left = timeout - (time.monotonic() - started)
        if left <= 0:
            raise RedisConnectionError(f"{host} does not resolve yet (its look-up is taking over {timeout:g} s)")
        try:
            # A wait that ends cancels only its own asyncio future: the look-up is running and cannot be cancelled.
            return await asyncio.wait_for(asyncio.wrap_future(future), left)
        except (TimeoutError, asyncio.TimeoutError):
            raise RedisConnectionError(f"{host} did not resolve within {timeout:g} s") from None
        except OSError as exc:
            raise RedisConnectionError(f"{host} does not resolve ({exc})") from None

    async def resolve_any(self, hosts: list[tuple[str, int]], timeout: float) -> None:
        """One of `hosts` resolved, the others looked up meanwhile.

        A Sentinel whose name hangs is skipped (its connection fails at once, see _ResolvedAddress) while another
        answers. Raises the last failure when none resolves in time."""
        waits = [asyncio.ensure_future(self.resolve(host, port, timeout)) for host, port in hosts]
        failure: RedisConnectionError | None = None
        try:
            for next_done in asyncio.as_completed(waits):
                try:
                    await next_done
                    return
                except RedisConnectionError as exc:
                    failure = exc
        finally:
            for wait in waits:
                wait.cancel()  # only the waits: the look-ups go on in their threads
        raise failure or RedisConnectionError("no host to look up")

    def look_up_soon(self, host: str, port: int) -> None:
        """Start looking `host` up now, without waiting.

        Its first call then finds the address, or a hung look-up already past the call's bound."""
        if self.known(host) is None and time.monotonic() - self._failed.get(host, float("-inf")) >= RETRY_SECONDS:
            self._look_up(host, port)

    def _look_up(self, host: str, port: int) -> tuple[concurrent.futures.Future[str], float]:
        with self._lock:
            if (pending := self._pending.get(host)) is None:
                future: concurrent.futures.Future[str] = concurrent.futures.Future()
                future.set_running_or_notify_cancel()  # a caller that stops waiting cannot cancel it
                pending = self._pending[host] = (future, time.monotonic())
                threading.Thread(
                    target=self._run, args=(host, port, future), name=f"nanobot-summary resolve {host}", daemon=True
                ).start()
            return pending

    def _run(self, host: str, port: int, future: concurrent.futures.Future[str]) -> None:
        try:
            address = str(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0])
        except Exception as exc:  # noqa: BLE001 - whatever it is, the look-up must end, or the name would wait forever
            with self._lock:
                self._failed[host] = time.monotonic()
                del self._pending[host]
            future.set_exception(OSError(str(exc) or type(exc).__name__))
            return
        with self._lock:
            self._known[host] = (address, time.monotonic())
            self._failed.pop(host, None)
            del self._pending[host]
        future.set_result(address)


RESOLVER = Resolver()


class _ResolvedAddress(Connection):
    """A redis-py connection to the address RESOLVER keeps for its host.

    Never a look-up in asyncio's default thread pool. With TLS the host's name is still the one sent (SNI) and
    checked."""

    def _connection_arguments(self) -> dict[str, Any]:
        arguments = dict(super()._connection_arguments())
        address = RESOLVER.known(self.host)
        if address is None:
            raise RedisConnectionError(f"{self.host} is not resolved yet")
        if arguments.get("ssl") is not None:
            arguments["server_hostname"] = self.host
        arguments["host"] = address
        return arguments


class ResolvedConnection(_ResolvedAddress, Connection):
    pass


class ResolvedSSLConnection(_ResolvedAddress, SSLConnection):
    pass


class _ResolvedPrimary(_ResolvedAddress, SentinelManagedConnection):
    """The primary a Sentinel names: an address as a rule, a host name where the Sentinels announce names."""

    async def connect_to(self, address: tuple[str, int]) -> None:
        host, port = address
        await RESOLVER.resolve(str(host), int(port), self.socket_connect_timeout or CALL_TIMEOUT)
        await super().connect_to(address)


class ResolvedPrimaryConnection(_ResolvedPrimary, SentinelManagedConnection):
    pass


class ResolvedPrimarySSLConnection(_ResolvedPrimary, SentinelManagedSSLConnection):
    pass


RESOLVED: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: ResolvedConnection,
    SSLConnection: ResolvedSSLConnection,
    SentinelManagedConnection: ResolvedPrimaryConnection,
    SentinelManagedSSLConnection: ResolvedPrimarySSLConnection,
}


def _through_resolver(pool: Any) -> None:
    """`pool`'s TCP connections (a Unix socket's need no name) go to the addresses RESOLVER keeps.

    Behind Sentinel, the Sentinels' own connections too."""
    pool.connection_class = RESOLVED.get(pool.connection_class, pool.connection_class)
    if isinstance(pool, SentinelConnectionPool):
        for sentinel in pool.sentinel_manager.sentinels:
            _through_resolver(sentinel.connection_pool)


def _hosts_to_resolve(url: str) -> list[tuple[str, int]]:
    """The names a client of `url` connects to.

    The Sentinels behind Sentinel, else the Redis host (a Unix socket: none). Read as redis-py reads the URL; one that
    cannot be read gives none (its client's first call says why)."""
    try:
        target = sentinel_target(url)
        if target is not None:
            return list(target.sentinels)
        parts = parse_url(url)
    except ValueError:
        return []
    return [] if "path" in parts else [(str(parts.get("host", "localhost")), int(parts.get("port", 6379)))]


class RedisLink:
    """A Redis client that connects on first use and again after any failure.

    Connects on first use and again after any failure, so a Redis that comes back is used again without anyone
    restarting nanobot."""

    def __init__(
        self,
        url: str,
        throttle: logs.Throttle,
        timeout: float = CALL_TIMEOUT,
        options: dict[str, Any] | None = None,
        keys: Keys | None = None,
    ) -> None:
        self.url = url
        self.keys = keys
        self.options = options or {}
        self.timeout = timeout
        self.throttle = throttle
        self._client: ArqRedis | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._hosts = _hosts_to_resolve(url)

    def client(self) -> ArqRedis:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            # A client is bound to the loop it was made in (`nanobot agent` runs one loop per turn).
            client = open_client(self.url, self.timeout, self.options, self.keys)
            _through_resolver(client.connection_pool)
            self._client, self._loop = client, loop
        return self._client

    def look_up_soon(self) -> None:
        """The Redis host's name (behind Sentinel: each Sentinel's) looked up from now on, in the background.

        Started as nanobot sets up: a `nanobot agent -m` whose Redis name hangs then finds that look-up past its bound
        by its first call, instead of waiting it out before it exits."""
        for host, port in self._hosts:
            RESOLVER.look_up_soon(host, port)

    async def resolved(self) -> None:
        """The Redis host resolved off asyncio's shared pool before any connection is made to it.

        The Redis host (behind Sentinel: one of the Sentinels) resolved off asyncio's shared pool before any connection
        is made to it."""
        if len(self._hosts) == 1:
            await RESOLVER.resolve(*self._hosts[0], self.timeout)
        elif self._hosts:
            await RESOLVER.resolve_any(self._hosts, self.timeout)

    async def call(self, doing: str, work: Callable[[ArqRedis], Awaitable[T]]) -> T | None:
        """Run `work` within the timeout; on any failure log (at most once a minute) and return None."""
        try:
            async with asyncio.timeout(self.timeout):
                client = self.client()
                await self.resolved()
                result = await work(client)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001  # Redis down, timeouts, bad replies...: never raise into nanobot
            self.trouble(doing, exc)
            return None
        self.ok()
        return result

    def call_apart(self, doing: str, work: Callable[[ArqRedis], Awaitable[Any]]) -> threading.Thread:
        """`work` on a client of its own, in an event loop and a thread of their own, within the timeout.

        For a call that must not wait on nanobot's event loop (nanobot's own `/new` work can hold it for seconds, past
        the bound of any call made there). Its trouble is logged as `call`'s. Not a daemon thread: a `nanobot agent -m`
        process lets it end (within the timeout) before it exits."""

        async def run() -> None:
            async with asyncio.timeout(self.timeout):
                client = open_client(self.url, self.timeout, self.options, self.keys)
                _through_resolver(client.connection_pool)
                try:
                    await self.resolved()
                    await work(client)
                finally:
                    await close_client(client)

        def main() -> None:
            try:
                asyncio.run(run())
            except Exception as exc:  # noqa: BLE001 - Redis down, timeouts: never raise, say it
                self.trouble(doing, exc)
            else:
                self.ok()

        thread = threading.Thread(target=main, name="summary-worker-redis-apart", daemon=False)
        thread.start()
        return thread

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
        """Close the connections of this event loop's client (a client of another loop is just dropped).

        Never raises."""
        client, loop, self._client, self._loop = self._client, self._loop, None, None
        if client is None:
            return
        try:
            if loop is asyncio.get_running_loop():
                async with asyncio.timeout(self.timeout):
                    await close_client(client)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - closing a broken connection must not matter
            pass
