"""Driving the real nanobot's command line from tests: finding its executable and Python, and `nanobot agent` turns."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.sandbox import NanobotHome

# What scripts/test makes; NANOBOT_BIN points elsewhere.
DEFAULT_NANOBOT_BIN = Path(__file__).resolve().parents[1] / ".venv-nanobot" / "bin" / "nanobot"
# The heading nanobot puts above an archived summary in the history it sends.
ARCHIVED = "[Archived Context Summary]"


def find_nanobot() -> Path:
    """NANOBOT_BIN (scripts/test sets it) must exist if set; else the project's .venv-nanobot; else skip."""
    configured = os.environ.get("NANOBOT_BIN")
    if configured:
        path = Path(configured)
        if not path.is_file():
            pytest.fail(f"NANOBOT_BIN={configured} does not exist", pytrace=False)
        return path
    default = Path(DEFAULT_NANOBOT_BIN)
    if default.is_file():
        return default
    pytest.skip(
        "no nanobot executable: set NANOBOT_BIN to the `nanobot` of an environment with nanobot-ai "
        "and this project installed"
    )


def nanobot_python(exe: Path) -> Path:
    """The Python of nanobot's environment (scripts/test sets NANOBOT_PYTHON)."""
    configured = os.environ.get("NANOBOT_PYTHON")
    return Path(configured) if configured else exe.parent / "python"


@dataclass
class Turn:
    returncode: int
    stdout: str
    stderr: str


# Whether nanobot's commands may be forks of a process that imported nanobot already (harness/nanobot_fork.py), which
# the tests' conftest switches on; benchmarks, and a run with TEST_NANOBOT_FRESH_PROCESSES=1, start each command as a
# process of its own, as a user's shell does.
FORKS = {"on": False}
FRESH_PROCESSES = "TEST_NANOBOT_FRESH_PROCESSES"


class ForkedProcess:
    """A command run by the fork server, with the part of subprocess.Popen's interface the tests use."""

    def __init__(self, connection: socket.socket, argv: list[str]) -> None:
        self.args = argv
        self._connection = connection
        self._answer = b""
        self.returncode: int | None = None
        self._read(1, 60)
        self.pid = int(self._answer.split(b"\n", 1)[0])

    def _read(self, lines: int, timeout: float | None) -> None:
        """Read the server's answer until it has `lines` lines (1: the pid, 2: the exit status too), or ended, or
        `timeout` seconds have passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None and self._answer.count(b"\n") < lines:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._connection.settimeout(left)
            try:
                chunk = self._connection.recv(64)
            except (TimeoutError, BlockingIOError):
                return
            if not chunk:  # the server ended without an answer: it was stopped, as its test process ends
                self.returncode = -signal.SIGKILL
            self._answer += chunk
        if self.returncode is None and self._answer.count(b"\n") >= 2:
            self.returncode = int(self._answer.split(b"\n")[1])
        if self.returncode is not None:
            self._connection.close()

    def poll(self) -> int | None:
        self._read(2, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._read(2, timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """harness/nanobot_fork.py run by nanobot's Python for this test process: nanobot's commands as its forks."""

    def __init__(self, python: Path, env: dict[str, str]) -> None:
        self.folder = tempfile.mkdtemp(prefix="nanobot-fork-")
        self.path = os.path.join(self.folder, "socket")
        script = Path(__file__).with_name("nanobot_fork.py")
        self.process = subprocess.Popen(
            [str(python), str(script), self.path], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        ready = self.process.stdout.readline()  # type: ignore[union-attr]
        if ready.strip() != "ready":
            self.process.kill()
            raise RuntimeError(f"nanobot's fork server did not start (exit {self.process.wait()})")

    def start(self, argv: list[str], env: dict[str, str], stdout: int, stderr: int) -> ForkedProcess:
        """`argv` (nanobot's console script and its arguments) run with `env`, this folder, no input and the given
        output and error descriptors, in a session of its own (Popen's start_new_session)."""
        connection = socket.socket(socket.AF_UNIX)
        connection.connect(self.path)
        with open(os.devnull, "rb") as nothing:
            request = json.dumps({"argv": argv, "env": env, "cwd": os.getcwd()}).encode() + b"\n"
            socket.send_fds(connection, [request], [nothing.fileno(), stdout, stderr])
        return ForkedProcess(connection, argv)

    def close(self) -> None:
        """Close the server's input, which ends it, and wait for it."""
        self.process.stdin.close()  # type: ignore[union-attr]
        self.process.wait(timeout=30)
        self.process.stdout.close()  # type: ignore[union-attr]


_servers: dict[tuple[str, frozenset[tuple[str, str]]], ForkServer] = {}
_servers_lock = threading.Lock()


def fork_server(exe: Path, env: dict[str, str]) -> ForkServer | None:
    """The fork server for `exe`'s Python and `env`'s interpreter settings (PYTHON*), started at its first command;
    None where commands must be processes of their own: forks not switched on, or a `nanobot` that is not the
    console script beside that Python (another nanobot's environment)."""
    python = nanobot_python(exe)
    if not FORKS["on"] or os.environ.get(FRESH_PROCESSES) == "1" or exe.parent != python.parent:
        return None
    # What Python reads only as it starts must be the same in the server as in the command's own process.
    key = (str(python), frozenset((k, v) for k, v in env.items() if k.startswith("PYTHON")))
    with _servers_lock:
        if key not in _servers:
            _servers[key] = ForkServer(python, env)
            atexit.register(_servers[key].close)
        return _servers[key]


def agent_turn(
    exe: Path, home: NanobotHome, env: dict[str, str], key: str, text: str, argv_prefix: list[str] | None = None
) -> Turn:
    """One `nanobot agent -m` turn (blocking: call through asyncio.to_thread).

    With `argv_prefix` (a wrapped command line), a process of its own; otherwise through the fork server where it is
    switched on (`fork_server`): the same console script with the same arguments and environment, for a tenth of the
    CPU."""
    args = ["agent", "-c", str(home.config_path), "-s", key, "-m", text, "--no-markdown"]
    server = None if argv_prefix else fork_server(exe, env)
    if server is None:
        done = subprocess.run((argv_prefix or [str(exe)]) + args, env=env, capture_output=True, text=True, timeout=120)
        return Turn(done.returncode, done.stdout, done.stderr)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = server.start([str(exe), *args], env, out.fileno(), err.fileno())
        try:
            code = process.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)  # its status, which closes the connection, as subprocess.run reaps what it killed
            raise
        out.seek(0)
        err.seek(0)
        return Turn(code, out.read().decode(errors="replace"), err.read().decode(errors="replace"))


async def turn(exe: Path, home: NanobotHome, env: dict[str, str], key: str, text: str) -> Turn:
    """One turn that must succeed."""
    result = await asyncio.to_thread(agent_turn, exe, home, env, key, text)
    assert result.returncode == 0, f"nanobot agent failed ({result.returncode}):\n{result.stderr[-3000:]}"
    return result
