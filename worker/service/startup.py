"""What the worker does at start-up, as arq's on_startup.

arq's on_startup: the worker's Deps, the Redis version check, the start-up log lines and the recall index's catch-up."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
from typing import Any

from worker.connections import version_problem
from worker.errors import NanobotConfigError
from worker.files import remove_stale_temps
from worker.memory.recall_index import RecallIndexError
from worker.memory.writer import MemoryFiles
from worker.nanobot.config import utc_by_default
from worker.service.build import build_deps
from worker.service.config_watch import ConfigWatch
from worker.service.logs import quiet_and_redacted
from worker.settings import SettingsError, load_settings
from worker.summarize.deps import Deps

log = logging.getLogger("worker")


async def startup(ctx: dict[str, Any]) -> None:
    quiet_and_redacted()  # `nanobot-summary run` did it already; `arq worker.app.WorkerSettings` did not
    if "deps" not in ctx:
        ctx["deps"] = build_deps(load_settings())
    ctx.setdefault("config_watch", ConfigWatch(ctx["deps"]))
    deps: Deps = ctx["deps"]
    if problem := version_problem(str((await ctx["redis"].info("server")).get("redis_version", ""))):
        raise SettingsError(problem)  # `arq worker.app.WorkerSettings` stops here; `python -m worker` earlier
    log.info(
        "summary model %s (from %s); keep %s; sessions in %s; queue %s",
        deps.model.model,
        deps.model.source,
        deps.settings.summary_keep,
        deps.nanobot.sessions_root,
        deps.settings.keys.queue,
    )
    if not deps.nanobot.path.exists():
        log.warning("nanobot config %s not found: using nanobot's defaults (set NANOBOT_CONFIG)", deps.nanobot.path)
    if deps.settings.summary_timezone is None and deps.tz is not None and utc_by_default(deps.nanobot, str(deps.tz)):
        # Said of "the zone this worker sees": the marker files that tell a container may sit on a machine that
        # its user does not think of as one (a VM's image, a sandbox), so the line does not call it a container.
        log.warning(
            "notes are dated in UTC: nanobot's config leaves the zone to the host (timezoneMode auto) and "
            "the zone this worker sees is UTC, with no TZ set; to date them in yours, give nanobot's config "
            '"timezoneMode": "manual" and "timezone" (agents.defaults), or set NANOBOT_SUMMARY_TIMEZONE '
            "(e.g. Asia/Shanghai), or pass TZ in (deploy/docker-compose.yml does)"
        )
    try:
        _ = deps.nanobot.sessions_dir
    except NanobotConfigError as exc:
        # Not fatal: nanobot may simply not have run yet; each job reports it again until it has.
        log.warning("%s", exc)
        return
    await asyncio.to_thread(remove_interrupted_writes, deps)
    await sweep_recall_index(deps)


def remove_interrupted_writes(deps: Deps) -> None:
    """Removes the temporary files a killed worker's writes left in the sessions and memory folders.

    The temporary files that writes of a killed worker left in the sessions and memory folders (the next write in a
    folder removes them too; a session that is never written again would keep them)."""
    folders = [deps.sessions_dir] + ([deps.memory.memory_dir] if isinstance(deps.memory, MemoryFiles) else [])
    for folder in folders:
        if removed := remove_stale_temps(folder):
            log.info("removed %d temporary files of interrupted writes from %s", removed, folder)


async def sweep_recall_index(deps: Deps) -> None:
    """Catch the recall index up with the files that changed while no worker ran.

    Catch the recall index up with sessions and memory files that changed while no worker ran (and build it when
    missing); off the turn's path, and never fatal.

    In a daemon thread, not asyncio's pool, whose threads the interpreter waits for at exit: a rebuild of a
    year's messages takes seconds, and a worker stopped meanwhile (Ctrl-C, a restart) exited only once it was
    done. The index is safe to leave half-built: every step is a transaction, and the next start goes on."""
    recall = deps.recall
    if recall is None:
        return
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any) -> None:
        if done.done():
            return
        if isinstance(result, BaseException):
            done.set_exception(result)
        else:
            done.set_result(result)

    def sweep() -> None:
        try:
            result: Any = recall.refresh(deps.sessions_dir)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task, which sorts it out
            result = exc
        with contextlib.suppress(RuntimeError):  # the loop is gone: the worker stopped meanwhile
            loop.call_soon_threadsafe(settle, result)

    threading.Thread(target=sweep, name="recall-index-sweep", daemon=True).start()
    try:
        log.info("%s", await done)
    except (RecallIndexError, sqlite3.Error, OSError, NanobotConfigError) as exc:
        log.warning("recall index not refreshed: %s", exc)
