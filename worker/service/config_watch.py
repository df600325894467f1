"""Following nanobot's config file while the worker runs: a change is used from the next job on."""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

from worker.errors import NanobotConfigError
from worker.model.llm import credentials_problem, litellm_loaded, load_litellm
from worker.service.build import build_deps
from worker.settings import SettingsError
from worker.summarize.daily import JOB_FLUSH_MEMORY
from worker.summarize.deps import Deps
from worker.text.redact import redact

log = logging.getLogger("worker")


def config_stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes when nanobot's config file is saved (or appears): a stat, no read."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


class ConfigWatch:
    """nanobot's config file, looked at before each job (one stat).

    A changed model, provider key, base URL, timezone or workspace is used from the next job on, without a restart, and
    said in one log line. A worker started before nanobot was configured picks the config up the same way."""

    def __init__(self, deps: Deps, namespace_named: bool | None = None) -> None:
        self.deps = deps
        self.stamp = config_stamp(deps.settings.config_path)
        # Named by NANOBOT_SUMMARY_NAMESPACE (the settings read the environment only): it stays whatever the
        # workspace. Else the namespace is the workspace's.
        self.namespace_named = (
            bool(os.environ.get("NANOBOT_SUMMARY_NAMESPACE")) if namespace_named is None else namespace_named
        )
        self.moved = False

    def current(self) -> Deps:
        stamp = config_stamp(self.deps.settings.config_path)
        if stamp == self.stamp:
            return self.deps
        self.stamp = stamp
        try:
            settings = self.deps.settings
            fresh = build_deps(
                settings if self.namespace_named else settings.model_copy(update={"summary_namespace": None})
            )
        except (SettingsError, NanobotConfigError) as exc:
            log.warning(
                "nanobot config %s changed, but cannot be used (%s): keeping the previous one",
                self.deps.settings.config_path,
                exc,
            )
            return self.deps
        if fresh.settings.keys != self.deps.settings.keys:
            # arq polls one queue for the worker's life: the new workspace's jobs are queued under its own
            # namespace, which this worker does not read. Serving its files from the old queue would summarize
            # nothing nanobot asked for, silently: stop, and start again serving the new one.
            log.warning(
                "nanobot's workspace changed to %s, whose jobs are queued under %s; this worker serves %s: "
                "stopping to start again, serving it",
                fresh.nanobot.workspace,
                fresh.settings.keys.queue,
                self.deps.settings.keys.queue,
            )
            self.moved = True
            # Once arq has shut down and the process is exiting (its connections closed, an embedded Redis
            # stopped), whichever command started it: `nanobot-summary run` or `arq worker.app.WorkerSettings`.
            atexit.register(start_again)
            os.kill(os.getpid(), signal.SIGTERM)  # arq's own shutdown: this job is handed back to the queue
            return self.deps
        log.info("nanobot config %s changed: %s", self.deps.settings.config_path, config_changes(self.deps, fresh))
        if problem := credentials_problem(fresh.model):
            log.warning("%s", problem)
        # What the process learned stays: the tokenizer (how models answer notes is kept in Redis).
        self.deps = dataclasses.replace(fresh, counter=self.deps.counter)
        return self.deps


def start_again() -> NoReturn:
    """Replaces this process by a fresh one started as it was.

    Replaces this process by a fresh one started as it was (the same arguments, environment and process id), which
    serves the new workspace's queue. Nothing outside sees an exit: not a terminal, not systemd (whose
    Restart=on-failure never restarts a clean exit), not a container (its PID 1 stays) and not honcho (which stops every
    process when one ends)."""
    log.warning("starting again, serving the new workspace")
    for handler in logging.getLogger().handlers + log.handlers:
        handler.flush()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])  # the atexit handlers after this one never run


def config_changes(old: Deps, new: Deps) -> str:
    """What a config change means for the worker, in one line (no key value: only whether it changed)."""
    changes = []
    if (old.model.model, old.model.source) != (new.model.model, new.model.source):
        changes.append(f"summary model {old.model.model} -> {new.model.model} (from {new.model.source})")
    if old.model.api_key != new.model.api_key:
        changes.append("its API key changed" if new.model.api_key else "its API key was removed")
    if old.model.api_base != new.model.api_base:
        changes.append(f"base URL {old.model.api_base or 'none'} -> {new.model.api_base or 'none'}")
    if str(old.tz) != str(new.tz):
        changes.append(f"timezone {old.tz} -> {new.tz} (notes; the daily run keeps its start-up time)")
    if old.nanobot.workspace != new.nanobot.workspace:
        changes.append(f"workspace {old.nanobot.workspace} -> {new.nanobot.workspace}")
    return "; ".join(redact(change) for change in changes) or "nothing the worker uses"


async def follow_config(ctx: dict[str, Any]) -> None:
    """arq's on_job_start: the job sees the config as it is now (arq hands each job a copy of ctx).

    The first job that may call the model loads litellm (a worker at rest does without it), off the event loop, before
    the config's checks need it."""
    if not litellm_loaded() and not without_model(ctx):
        await asyncio.to_thread(load_litellm)
    watch = ctx.get("config_watch")
    if watch is not None:
        ctx["deps"] = watch.current()


def without_model(ctx: dict[str, Any]) -> bool:
    """Is the job one that never calls the model (pure)?

    The minute's flush of held facts, which also runs at start-up: loading litellm for it would end the worker's rest
    (~50 MB, not ~240 MB) in its first second. arq names a unique cron job's id after the cron (`Keys.cron`)."""
    deps = ctx.get("deps")
    job_id = str(ctx.get("job_id") or "")
    return isinstance(deps, Deps) and job_id.startswith(deps.settings.keys.cron(JOB_FLUSH_MEMORY) + ":")
