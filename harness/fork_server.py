"""A server that imports a program's libraries once, then forks for each of its commands: cheap starts for tests.

A `nanobot agent` turn, a gateway or a worker that runs a job spends most of its CPU importing (nanobot's command
line: about 2.8 s of 3; litellm: about 3 s), and the suite starts dozens of each. Here those imports are done once per
test process and Python; each command is a fork that runs as its own process would: the console script's `main`, or
the module `python -m` names, with the command's arguments, environment, folder and standard files, in a session of
its own, exiting as that process does. The project's own code is not preloaded: each fork imports it as a fresh
process does (nanobot loads our hooks through its entry points). The client is harness/forks.py.

Protocol, one connection per command: the client sends one JSON line {argv, env, cwd, main} with its standard input,
output and error as three file descriptors (SCM_RIGHTS); `main` is "module:function" (a console script) or
"-m module". The server answers with the fork's pid, then, once the fork has ended, with its exit status as
subprocess gives it (-N for signal N), and closes the connection. The server ends when its standard input closes (its
test process ended). Run as `python fork_server.py SOCKET MODULE...`, MODULE being what it imports before serving.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import random
import runpy
import select
import signal
import socket
import sys


def _run(request: dict, fds: list[int], server: list[socket.socket], pipes: list[int], started: int) -> None:
    """In the fork: become the command's process, then run it and exit as it does."""
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
    sys.exit(_main(request["main"], list(request["argv"])))


def _main(main: str, argv: list[str]) -> object:
    """Run the command as its interpreter would: sys.argv, sys.orig_argv and sys.path[0] set as Python sets them
    (a command that starts itself again reads them), then `main`."""
    if main.startswith("-m "):
        sys.orig_argv = argv
        sys.argv = ["-m", *argv[3:]]  # runpy puts the module's file first, as `python -m` does
        sys.path[0] = os.getcwd()
        runpy.run_module(main[3:], run_name="__main__", alter_sys=True)
        return 0
    sys.argv = argv
    sys.orig_argv = [sys.executable, *argv]  # the console script's interpreter, given the script by its first line
    sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))  # a script's folder, as for the console script
    module, _, function = main.partition(":")
    return getattr(importlib.import_module(module), function)()


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    """One request: its JSON line and the three descriptors sent with its first bytes."""
    data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
    while not data.endswith(b"\n"):
        more = connection.recv(1 << 16)
        if not more:
            raise EOFError("the request ended before its line did")
        data += more
    return json.loads(data), fds


def serve(path: str, preloaded: list[str]) -> None:
    """Import `preloaded`, then accept commands on the Unix socket `path` until standard input closes."""
    for name in preloaded:
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
    serve(sys.argv[1], sys.argv[2:])
