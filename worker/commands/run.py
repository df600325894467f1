"""`nanobot-summary run`.

Check the set-up (one line per problem, exit code 2), then run the worker, with an embedded Redis when none answers, or
under a reloader."""

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
from typing import Any

from nanobot_hooks.contract.redis_url import redacted_url
from worker.commands.embedded import adopt_orphan, embedded_owner, start_recorded, stop_recorded
from worker.commands.startup import waiting_note
from worker.connections import port_taken, redis_problem, server_version, version_problem
from worker.errors import NanobotConfigError
from worker.model.llm import credentials_problem, light_start
from worker.service.arq_worker import SteadyWorker, worker_options
from worker.service.build import wait_for_nanobot
from worker.service.config_watch import ConfigWatch
from worker.service.logs import quiet_and_redacted
from worker.settings import Settings, SettingsError, load_settings
from worker.summarize.deps import Deps

log = logging.getLogger("worker")


def lower_priority(by: int) -> int:
    """Yield the CPU to nanobot: raise this process's niceness `by` (NANOBOT_SUMMARY_NICENESS).

    Returns the niceness now."""
    try:
        return os.nice(by)
    except (AttributeError, OSError):  # not on this platform, or not allowed: run as is
        return os.nice(0) if hasattr(os, "nice") else 0


def run_worker(args: argparse.Namespace) -> int:
    """`nanobot-summary run`: check the set-up (one line per problem, exit code 2), then run the worker."""
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s [%(job)s] %(message)s",
    )
    quiet_and_redacted()
    try:
        settings = load_settings()
        lower_priority(settings.summary_niceness)
        light_start()  # litellm is loaded by the first job, not at start-up: a worker at rest does without it
    except (SettingsError, NanobotConfigError) as exc:
        return refuse(exc)
    problem = redis_at_start(settings, args.no_embedded_redis)
    if problem is not None and (
        args.no_embedded_redis or port_taken(settings.redis_url) or not problem.endswith(REDIS_ABSENT)
    ):
        # A server that is there but refuses us (password, ACL, database) is never replaced by an embedded one.
        return refuse(problem)
    # Redis first, then nanobot's first turn: while the worker waits for it, the Redis it serves answers, and doctor
    # tells a worker waiting for nanobot (its note in the state folder) from no Redis at all.
    with cleanup_on_signals() as cleanups:
        if problem is not None:
            try:
                cleanups.append(embedded_redis(settings))
            except RuntimeError as exc:
                return refuse(exc)
        if args.reload:
            return run_reloading(args.verbose)  # its child inherits this process's lowered priority
        try:
            deps = nanobots_deps(settings)
        except (SettingsError, NanobotConfigError) as exc:
            return refuse(exc)
        if problem := served_redis_problem(deps.settings):
            return refuse(problem)
        options = worker_options(deps.settings, deps.tz)
        watch = ConfigWatch(deps)
        options["ctx"] = {"deps": deps, "config_watch": watch}
        # After a workspace move the process starts itself again as it exits (ConfigWatch): the embedded Redis
        # (if any) is stopped first, and the new process starts its own.
        SteadyWorker(**options, burst=args.burst).run()
    return 0


def served_redis_problem(settings: Settings) -> str | None:
    """Why the instance's Redis (its namespace known now) cannot serve it.

    The probe reads the instance's own key (an ACL user of another instance fails there, before any other command is
    refused by its rules), then its version."""
    return redis_problem(settings.redis_url, keys=settings.keys, **settings.redis_options()) or version_problem(
        server_version(settings.redis_url, **settings.redis_options())
    )


def nanobots_deps(settings: Settings) -> Deps:
    """The worker's Deps once nanobot has run, and a warning for a summary model without a key.

    The worker's Deps once nanobot has run (waiting for its first turn, with a note doctor reads), and a warning for a
    summary model without a key: not fatal, nanobot may get its key later (the worker follows it)."""
    with waiting_note(settings.config_path):
        deps = wait_for_nanobot(settings)
    if problem := credentials_problem(deps.model):
        log.warning("%s", problem)
    return deps


def redis_at_start(settings: Settings, no_embedded: bool) -> str | None:
    """Why the configured Redis cannot be used now (None: it answers).

    Why the configured Redis cannot be used now (None: it answers), after an orphaned embedded one is stopped (and
    said); an embedded one of another running worker is named."""
    if not no_embedded and (adopted := adopt_orphan(settings.redis_url)):
        log.warning("%s (killed before it could stop it)", adopted)
    problem = redis_problem(settings.redis_url, keys=None, **settings.redis_options())  # the namespace comes later
    if problem is None and (owner := embedded_owner(settings.redis_url)):
        log.warning(
            "Redis at %s is %s: this worker uses it; set REDIS_URL to use your own",
            redacted_url(settings.redis_url),
            owner,
        )
    return problem


def refuse(problem: object) -> int:
    """A set-up problem: one line on stderr, exit code 2."""
    print(f"error: {problem}", file=sys.stderr)
    return 2


def embedded_redis(settings: Settings) -> Callable[[], None]:
    """Start a redis-server at REDIS_URL (none answers there) and say so; returns what stops it."""
    embedded = start_recorded(settings.redis_url)
    log.warning(
        "Redis at %s did not answer: started an embedded redis-server there (pid %s, no persistence; "
        "data in %s, removed on exit; it stops with this worker, however it ends). Set REDIS_URL to use "
        "your own.",
        redacted_url(settings.redis_url),
        embedded.process.pid,
        embedded.directory,
    )
    return lambda: stop_recorded(embedded)


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
    run_process(
        root / "worker",
        root / "nanobot_hooks",
        target=shlex.join(child),
        target_type="command",
        watch_filter=PythonFilter(),
        sigint_timeout=30,
        sigkill_timeout=10,
    )  # a loaded machine may take more than watchfiles' 1 s to reap a killed child
    return 0


# The end of redis_problem's line for a server that is not there at all (the only case an embedded one may fill).
REDIS_ABSENT = "start it, or set REDIS_URL"


@contextlib.contextmanager
def cleanup_on_signals() -> Iterator[list[Callable[[], None]]]:
    """Run the cleanups (the embedded Redis's stop: its folder holds a config with the password) on every exit.

    Normal, an exception, SIGINT or SIGTERM before arq installs its own handlers (arq's handlers end its loop, so the
    `finally` below runs then too)."""
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
