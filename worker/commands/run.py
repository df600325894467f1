"""`nanobot-summary run`: check the set-up (one line per problem, exit code 2), then run the worker, with an
embedded Redis when none answers, or under a reloader."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from nanobot_hooks.contract.redis_url import redacted_url
from worker.connections import port_taken, redis_problem, server_version, start_embedded, version_problem
from worker.errors import NanobotConfigError
from worker.model.llm import credentials_problem
from worker.service.arq_worker import SteadyWorker, worker_options
from worker.service.build import wait_for_nanobot
from worker.service.config_watch import ConfigWatch
from worker.service.logs import quiet_and_redacted
from worker.settings import Settings, SettingsError, load_settings

log = logging.getLogger("worker")


def lower_priority(by: int) -> int:
    """Yield the CPU to nanobot: raise this process's niceness `by` (NANOBOT_SUMMARY_NICENESS). Returns the
    niceness now."""
    try:
        return os.nice(by)
    except (AttributeError, OSError):  # not on this platform, or not allowed: run as is
        return os.nice(0) if hasattr(os, "nice") else 0


def run_worker(args: argparse.Namespace) -> int:
    """`nanobot-summary run`: check the set-up (one line per problem, exit code 2), then run the worker."""
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s [%(job)s] %(message)s")
    quiet_and_redacted()
    try:
        settings = load_settings()
        lower_priority(settings.summary_niceness)
        deps = wait_for_nanobot(settings)
    except (SettingsError, NanobotConfigError) as exc:
        return refuse(exc)
    if problem := credentials_problem(deps.model):
        # Not fatal: nanobot may get its key after the worker started (the worker follows its config).
        log.warning("%s", problem)
    problem = redis_problem(settings.redis_url, **settings.redis_options())
    if problem is not None and (args.no_embedded_redis or port_taken(settings.redis_url)
                                or not problem.endswith(REDIS_ABSENT)):
        # A server that is there but refuses us (password, ACL, database) is never replaced by an embedded one.
        return refuse(problem)
    with cleanup_on_signals() as cleanups:
        if problem is not None:
            try:
                cleanups.append(embedded_redis(settings))
            except RuntimeError as exc:
                return refuse(exc)
        if problem := version_problem(server_version(settings.redis_url, **settings.redis_options())):
            return refuse(problem)
        if args.reload:
            return run_reloading(args.verbose)  # its child inherits this process's lowered priority
        options = worker_options(deps.settings, deps.tz)
        watch = ConfigWatch(deps, start_again=True)
        options["ctx"] = {"deps": deps, "config_watch": watch}
        SteadyWorker(**options, burst=args.burst).run()
    if watch.moved:
        start_again()  # the embedded Redis (if any) stopped above: the new process starts its own
    return 0


def start_again() -> NoReturn:
    """This process replaced by a fresh one started as it was (the same arguments, environment and process
    id): nanobot moved to another workspace, whose namespace arq's queue is fixed at start-up. A supervisor
    (systemd, compose, honcho, the reloader) sees no exit at all: a clean exit was never restarted by
    systemd's Restart=on-failure, and honcho stops every process when one ends."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def refuse(problem: object) -> int:
    """A set-up problem: one line on stderr, exit code 2."""
    print(f"error: {problem}", file=sys.stderr)
    return 2


def embedded_redis(settings: Settings) -> Callable[[], None]:
    """Start a redis-server at REDIS_URL (none answers there) and say so; returns what stops it."""
    embedded = start_embedded(settings.redis_url)
    log.warning("Redis at %s did not answer: started an embedded redis-server there (no persistence; "
                "data in %s, removed on exit). Set REDIS_URL to use your own.",
                redacted_url(settings.redis_url), embedded.directory)
    return embedded.stop


def run_reloading(verbose: bool) -> int:
    """The worker in a child process, started again whenever the code changes."""
    # `arq --watch` restarts but keeps running the old code; a fresh process does not.
    from watchfiles import PythonFilter, run_process

    root = Path(__file__).resolve().parents[2]  # the checkout: worker/commands/run.py
    child = [sys.executable, "-m", "worker", "run", "--no-embedded-redis"] + (["-v"] if verbose else [])
    # The child inherits this process's niceness: lowered again, it ran at up to 19, starved beside any load.
    os.environ["NANOBOT_SUMMARY_NICENESS"] = "0"  # watchfiles starts it with this process's environment
    # A worker's shutdown closes its Redis pool and cancels its jobs: on a busy machine that takes
    # longer than watchfiles' 5 s, whose SIGKILL then takes this process down with a traceback.
    run_process(root / "worker", root / "nanobot_hooks", target=shlex.join(child),
                target_type="command", watch_filter=PythonFilter(), sigint_timeout=30,
                sigkill_timeout=10)  # a loaded machine may take more than watchfiles' 1 s to reap a killed child
    return 0


# The end of redis_problem's line for a server that is not there at all (the only case an embedded one may fill).
REDIS_ABSENT = "start it, or set REDIS_URL"


@contextlib.contextmanager
def cleanup_on_signals() -> Iterator[list[Callable[[], None]]]:
    """Run the cleanups (the embedded Redis's stop: its folder holds a config with the password) on every
    exit: normal, an exception, SIGINT or SIGTERM before arq installs its own handlers (arq's handlers end
    its loop, so the `finally` below runs then too)."""
    cleanups: list[Callable[[], None]] = []

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield cleanups
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for cleanup in reversed(cleanups):
            cleanup()
