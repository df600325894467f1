"""Starting nanobot's and the worker's commands from tests as forks of a server that imported their libraries once.

A fresh `nanobot agent` turn, gateway or worker that runs a job spends most of its CPU importing nanobot's command
line or litellm; harness/fork_server.py imports them once per test process and Python and forks for each command.
`popen` and `run` take a command as subprocess does and start it as such a fork where a server serves it (`served`),
else as a process of its own. The tests' conftest switches forks on (FORKS); benchmarks run as scripts, and a run with
TEST_FRESH_PROCESSES=1, start every command as a process of its own, as a user's shell does.

What a fork does not share with a fresh process, by design: the preloaded libraries are in sys.modules from its
start. A forked worker has litellm loaded before its first job, so it checks the model in its own process, not in
the child process a worker at rest uses (tests/worker/model/test_llm.py checks that path in a fresh process).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

FORKS = {"on": False}
FRESH_PROCESSES = "TEST_FRESH_PROCESSES"

# What each server imports before it serves: the libraries its commands import before reading any setting, and those
# they import at run time, the largest first. Each only defines names as it is imported, so importing it early changes
# nothing a command reads; the project's own modules are not among them.
# nanobot's: its command line, the provider's OpenAI client, the MCP client, the WebSocket channel, the WebUI's
# settings, git for the workspace.
NANOBOT_PRELOADED = (
    "nanobot.cli.commands",
    "openai",
    "openai.resources.chat",
    "mcp.client.auth",
    "requests",
    "nanobot.channels.websocket.runtime",
    "nanobot.channels.email.validation",
    "nanobot.webui.settings_api",
    "dulwich.porcelain",
)
# The worker's: litellm and what worker.model.llm.load_litellm imports with it, arq and redis-py.
WORKER_PRELOADED = (
    "litellm",
    "openai.resources.chat",
    "litellm.proxy.openai_files_endpoints.common_utils",
    "arq",
    "redis.asyncio",
)
# The console scripts a server runs, as their entry points name them.
CONSOLE_SCRIPTS = {"nanobot": "nanobot.cli.entry:main", "nanobot-summary": "worker.commands.cli:main"}
# What the worker's Python runs as `python -m`.
MODULES = ("worker", "arq")


class ForkedProcess:
    """A command run by a fork server, with the part of subprocess.Popen's interface the tests use."""

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
    """harness/fork_server.py run by one Python, `preloaded` imported: this test process's, or the run's (`share`)."""

    def __init__(self, path: str, process: subprocess.Popen[str] | None = None) -> None:
        self.path, self.process = path, process

    @classmethod
    def launch(cls, python: str, env: dict[str, str], preloaded: tuple[str, ...], wait: bool = True) -> ForkServer:
        """A server of this process (it ends with it); `wait`: returned once it serves, else at once (`start` waits)."""
        path = os.path.join(tempfile.mkdtemp(prefix="fork-server-"), "socket")
        script = Path(__file__).with_name("fork_server.py")
        process = subprocess.Popen(
            [python, str(script), path, *preloaded], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        if wait and process.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
            process.kill()
            raise RuntimeError(f"the fork server of {python} did not start (exit {process.wait()})")
        return cls(path, process)

    def connect(self, timeout: float = 120.0) -> socket.socket:
        """A connection to the server, once it serves: it binds its socket when its imports are done."""
        deadline = time.monotonic() + timeout
        while True:
            connection = socket.socket(socket.AF_UNIX)
            try:
                connection.connect(self.path)
                return connection
            except (FileNotFoundError, ConnectionRefusedError):
                connection.close()
                ended = self.process is not None and self.process.poll() is not None
                if ended or time.monotonic() > deadline:
                    raise RuntimeError(f"the fork server at {self.path} does not serve") from None
                time.sleep(0.05)

    def start(
        self, argv: list[str], main: str, env: dict[str, str], fds: tuple[int, int, int], cwd: str | None = None
    ) -> ForkedProcess:
        """`argv` run by `main` ("module:function", or "-m module") with `env`, `cwd` (this folder if None) and the
        standard input, output and error `fds`, in a session of its own (Popen's start_new_session)."""
        connection = self.connect()
        request = {"argv": argv, "main": main, "env": env, "cwd": os.path.abspath(cwd or os.getcwd())}
        socket.send_fds(connection, [json.dumps(request).encode() + b"\n"], list(fds))
        return ForkedProcess(connection, argv)

    def close(self) -> None:
        """Close the server's input, which ends it, and wait for it (a server of another process is left alone)."""
        if self.process is None:
            return
        self.process.stdin.close()  # type: ignore[union-attr]
        self.process.wait(timeout=30)
        self.process.stdout.close()  # type: ignore[union-attr]
        shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)


# The run's servers, started by the test run's first process (`share`), as {server key: socket path}: every test
# process forks from them rather than importing nanobot and litellm again for servers of its own.
SHARED = "TEST_FORK_SERVERS"
_servers: dict[str, ForkServer] = {}
_servers_lock = threading.Lock()


def served(argv: list[str], env: dict[str, str]) -> tuple[str, str, tuple[str, ...]] | None:
    """(Python, main, preloaded) of a command a fork server runs, None for any other (pure but for PATH look-ups).

    The worker's Python running `-m worker` or `-m arq`, or a console script of CONSOLE_SCRIPTS beside the worker's
    Python or nanobot's (`_nanobot_python`). Another environment's (a wheel installed by a test),
    or a command with interpreter options, starts as a process of its own."""
    worker_python = os.path.abspath(sys.executable)
    preloads = {worker_python: WORKER_PRELOADED, _nanobot_python(): NANOBOT_PRELOADED}
    if len(argv) >= 3 and os.path.abspath(argv[0]) == worker_python and argv[1] == "-m" and argv[2] in MODULES:
        return worker_python, f"-m {argv[2]}", WORKER_PRELOADED
    name = os.path.basename(argv[0]) if argv else ""
    found = shutil.which(argv[0], path=env.get("PATH")) if name in CONSOLE_SCRIPTS else None
    python = os.path.join(os.path.dirname(os.path.abspath(found)), "python") if found else None
    if python in preloads:
        return python, CONSOLE_SCRIPTS[name], preloads[python]
    return None


def _nanobot_python() -> str:
    """The Python of the nanobot the tests run: NANOBOT_PYTHON, else the one beside NANOBOT_BIN or scripts/test's."""
    configured = os.environ.get("NANOBOT_PYTHON")
    if configured:
        return os.path.abspath(configured)
    default = Path(__file__).resolve().parents[1] / ".venv-nanobot" / "bin" / "nanobot"
    exe = os.environ.get("NANOBOT_BIN") or str(default)
    return os.path.join(os.path.dirname(os.path.abspath(exe)), "python")


def _key(python: str, preloaded: tuple[str, ...], env: dict[str, str]) -> str:
    """The server for commands of `python` with `env`: what Python and litellm read only as they start must be the same
    in the server as in the command's own process."""
    startup = sorted((k, v) for k, v in env.items() if k.startswith(("PYTHON", "LITELLM_")))
    return json.dumps([python, list(preloaded), startup])


def _server_env(env: dict[str, str], preloaded: tuple[str, ...]) -> dict[str, str]:
    """The server's environment: the command's, and for the worker's server what its package sets before it imports
    litellm (worker/__init__.py)."""
    return {"LITELLM_LOCAL_MODEL_COST_MAP": "True", **env} if preloaded == WORKER_PRELOADED else env


def fork_server(argv: list[str], env: dict[str, str]) -> tuple[ForkServer, str] | None:
    """The fork server that runs `argv` (the run's, or one started at this process's first such command) and the
    command's `main`; None where commands must be processes of their own: forks not switched on, or a command no
    server runs (`served`)."""
    found = served(argv, env) if FORKS["on"] and os.environ.get(FRESH_PROCESSES) != "1" else None
    if found is None:
        return None
    python, main, preloaded = found
    key = _key(python, preloaded, env)
    with _servers_lock:
        if key not in _servers:
            shared = json.loads(os.environ.get(SHARED) or "{}").get(key)
            if shared:
                _servers[key] = ForkServer(shared)
            else:
                _servers[key] = ForkServer.launch(python, _server_env(env, preloaded), preloaded)
            atexit.register(_servers[key].close)
        return _servers[key], main


def share(env: dict[str, str]) -> None:
    """Start the run's servers for the commands the tests start with `env`'s interpreter settings (nanobot's command
    line, the worker's modules), without waiting for their imports, and name them to this process's children
    (SHARED): the test processes. They end with this process."""
    if not FORKS["on"] or os.environ.get(FRESH_PROCESSES) == "1":
        return
    shared = {}
    nanobot = os.path.join(os.path.dirname(_nanobot_python()), "nanobot")
    for argv in ([sys.executable, "-m", "worker"], [nanobot]):
        found = served(argv, env) if os.path.exists(argv[0]) else None
        if found is not None:
            python, _, preloaded = found
            key = _key(python, preloaded, env)
            _servers[key] = ForkServer.launch(python, _server_env(env, preloaded), preloaded, wait=False)
            atexit.register(_servers[key].close)
            shared[key] = _servers[key].path
    os.environ[SHARED] = json.dumps(shared)


def _fd(target: IO[Any] | int | None, default: int) -> int:
    if target is None:
        return default
    return target if isinstance(target, int) else target.fileno()


def popen(
    argv: list[str],
    env: dict[str, str],
    *,
    cwd: str | Path | None = None,
    stdout: IO[Any] | int | None = None,
    stderr: IO[Any] | int | None = None,
    fork: bool = True,
) -> subprocess.Popen[bytes] | ForkedProcess:
    """`argv` started in a session of its own (Popen's start_new_session), as a fork where a server runs it.

    `stdout` and `stderr`: files or descriptors (None: this process's); `stderr` may be subprocess.STDOUT. No input.
    `fork=False`: a child of this process whatever the switch, for a test that needs to be its parent (its zombie)."""
    started = fork_server(argv, env) if fork else None
    if started is None:
        return subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, start_new_session=True
        )
    server, main = started
    out = _fd(stdout, 1)
    err = out if stderr == subprocess.STDOUT else _fd(stderr, 2)
    with open(os.devnull, "rb") as nothing:
        return server.start(argv, main, env, (nothing.fileno(), out, err), None if cwd is None else str(cwd))


def run(
    argv: list[str],
    env: dict[str, str],
    *,
    timeout: float,
    cwd: str | Path | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`argv` run to its end with its output captured as text, as subprocess.run(capture_output=True, text=True)
    does, in a session of its own; a fork where a server runs it. A command past `timeout` is killed, with its
    session, and TimeoutExpired raised."""
    started = fork_server(argv, env)
    if started is None:
        return subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
        )
    server, main = started
    with tempfile.TemporaryFile() as given, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        given.write((input or "").encode())
        given.seek(0)
        process = server.start(
            argv, main, env, (given.fileno(), out.fileno(), err.fileno()), None if cwd is None else str(cwd)
        )
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)  # its status, which closes the connection, as subprocess.run reaps what it killed
            raise
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            argv, code, out.read().decode(errors="replace"), err.read().decode(errors="replace")
        )
