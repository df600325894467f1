"""A server, run by nanobot's Python, that imports nanobot's command line once and forks it for each command.

A `nanobot agent` turn or a gateway's start spends nearly all of its CPU importing nanobot (about 2.8 s of 3 on a
2-core machine), and the suite starts dozens. Here the import is done once per test process; each command is a
fork that runs the console script's own `main` with the command's arguments, environment, folder and standard
files, in a session of its own, and exits as the console script does. Everything nanobot does at run time,
loading the plugins (our hooks among them, through nanobot's entry points), reading its config, talking to the
model, is done in the fork, as in a fresh process. The client is harness/nanobot_cli.py's `ForkServer`.

Protocol, one connection per command: the client sends one JSON line {argv, env, cwd} with its standard input,
output and error as three file descriptors (SCM_RIGHTS); the server answers with the fork's pid, then, once the
fork has ended, with its exit status as subprocess gives it (-N for signal N), and closes the connection. The
server ends when its standard input closes (its test process ended).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import random
import select
import signal
import socket
import sys

from nanobot.cli.entry import main

# What the console script (`nanobot = nanobot.cli.entry:main`) imports for `nanobot agent -m` and `nanobot gateway`
# before reading any setting, then the modules they import at run time (the provider's OpenAI client, the MCP
# client, the WebSocket channel, the WebUI's settings, git for the workspace), the largest first: each only defines
# names as it is imported, so importing it here changes nothing a command reads. Our hooks, and what they import, are
# not among them: each fork loads them through nanobot's entry points, as a fresh nanobot does.
PRELOADED = (
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


def _run(request: dict, fds: list[int], server: list[socket.socket], pipes: list[int], started: int) -> None:
    """In the fork: become the command's process, then run nanobot's console script and exit with it."""
    os.setsid()
    os.close(started)  # the server tells the client the pid only now, as Popen returns after the child's setsid
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for sock in server:  # the server's connection stays open in the server alone, until it reaped this fork
        sock.close()
    for fd in pipes:
        os.close(fd)
    random.seed()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    sys.argv = list(request["argv"])
    sys.exit(main())


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    """One request: its JSON line and the three descriptors sent with its first bytes."""
    data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
    while not data.endswith(b"\n"):
        more = connection.recv(1 << 16)
        if not more:
            raise EOFError("the request ended before its line did")
        data += more
    return json.loads(data), fds


def serve(path: str) -> None:
    """Accept commands on the Unix socket `path` until standard input closes."""
    for name in PRELOADED:
        importlib.import_module(name)
    # What is loaded stays out of the forks' garbage collections, which would otherwise touch, and so copy, every
    # page of it in each fork.
    gc.freeze()
    wake = os.pipe()
    for fd in wake:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so an ended fork writes to the wake-up pipe
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    running: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([listener, sys.stdin, wake[0]], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            return
        if wake[0] in readable:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake[0], 512):
                    pass
        if listener in readable:
            _start(listener, wake, running)
        _reap(running)


def _start(listener: socket.socket, wake: tuple[int, int], running: dict[int, socket.socket]) -> None:
    """Fork the command of the connection waiting on `listener`, and tell its client the fork's pid."""
    connection, _ = listener.accept()
    request, fds = _receive(connection)
    started_read, started_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        _run(request, fds, [listener, connection], [*wake, started_read], started_write)
    os.close(started_write)
    os.read(started_read, 1)  # end of file once the fork has its own session
    os.close(started_read)
    for fd in set(fds):
        os.close(fd)
    connection.sendall(f"{pid}\n".encode())
    running[pid] = connection


def _reap(running: dict[int, socket.socket]) -> None:
    """Send each ended fork's exit status to its client and close that connection."""
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = running.pop(pid, None)
        if connection is not None:
            try:
                connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:  # the client gave up on it (a timeout): nobody to tell
                pass
            connection.close()


if __name__ == "__main__":
    serve(sys.argv[1])
