"""What `/new` took from a session.

The copies the hooks keep in nanobot's sessions folder (RETIRED_FOLDER), noted (their facts offered to MEMORY.md as any
notes call's are) and indexed for recall by the session's next job, whatever queued it; a copy whose every message is
noted is marked so and not read by later jobs, and the daily run removes it once it is `summary_retired_days` old
(`remove_expired`): the folder holds what is not noted yet and the last days' copies, not every conversation ever
emptied."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from nanobot_hooks.contract.recall import retired_source
from worker.errors import NanobotConfigError, SessionError
from worker.memory.recall_index import RecallIndexError
from worker.memory.recall_index.messages import WINDOW_BYTES
from worker.nanobot.sessions import Retired, retired_files
from worker.summarize.deps import Deps
from worker.summarize.notes_only import note_unnoted
from worker.summarize.run import Run
from worker.text.prepare import dated_from

log = logging.getLogger("worker.summarize.retired")
# The key in a job's arq context naming the copies the job looked at: one kept while it ran (its `/new` found the
# job's id taken) gets one more job when this one ends (`kept_meanwhile`).
SEEN = "retired_seen"


async def note_retired(run: Run) -> str:
    """Notes and recall for every copy of the session kept at `/new` and not noted yet; what was done."""
    done = []
    copies = retired_files(run.deps.sessions_dir, run.key)
    run.retired_seen = {copy.name for copy in copies}
    for copy in copies:
        done.append(await _note_copy(run, copy))
    return "; ".join(part for part in done if part)


async def _note_copy(run: Run, copy: Retired) -> str:
    since = since_day(copy, run.deps)
    try:
        session = copy.read(keep_from=dated_from(since, run.deps.tz))  # before that day, notes are never written
    except SessionError as exc:
        log.warning("%s: %s", run.key, exc)
        return ""
    written, complete = await note_unnoted(run, session, set(), since)
    del session  # the index reads the copy in windows of its own
    await index_copy(run.deps, copy)
    if complete:
        try:
            copy.mark_noted()
        except OSError as exc:  # read again by the next job: its notes are idempotent
            log.warning("%s: %s not marked noted: %s", run.key, copy.name, exc)
    return f"before /new (generation {copy.generation}): {written or 'notes up to date'}"


def kept_meanwhile(ctx: dict[str, Any], key: str) -> bool:
    """after_job_end: was a copy of the session kept after the job looked (a `/new` while it ran)?"""
    seen = ctx.get(SEEN)
    if seen is None:  # the job never got to look (refused, resting): a later job notes the copies
        return False
    deps: Deps = ctx["deps"]
    try:
        return any(copy.name not in seen for copy in retired_files(deps.sessions_dir, key))
    except NanobotConfigError:
        return False


def since_day(copy: Retired, deps: Deps) -> str:
    """The first day whose messages the copy's notes may still lack.

    The day before its last save (the daily run noted the kept tail of each day before), the daily run's own reach."""
    try:
        moment = datetime.fromtimestamp(copy.path.stat().st_mtime, deps.tz)  # nanobot's last save before it
    except OSError:
        moment = datetime.now(deps.tz)
    return (moment - timedelta(days=1)).strftime("%Y-%m-%d")


async def index_copy(deps: Deps, copy: Retired) -> None:
    """The copy's messages, every one, in the recall index as a source of the session's own; never fatal."""
    if deps.recall is None:
        return
    try:
        session = copy.read(as_key=retired_source(copy.key, copy.name), hold_bytes=WINDOW_BYTES)  # then windows
        done = await asyncio.to_thread(deps.recall.refresh, deps.sessions_dir, session, len(session.messages))
    except (SessionError, RecallIndexError, sqlite3.Error, OSError) as exc:
        log.warning("%s: recall index not updated with %s: %s", copy.key, copy.name, exc)
        return
    log.info("%s: before /new: %s", copy.key, done)


def expired(copies: list[Retired], ages: dict[str, float], days: float) -> list[Retired]:
    """The copies to remove.

    Every message noted, and older than `days` (`ages`: seconds since each one's last message was saved, by name). A
    copy not noted yet stays whatever its age: its notes are not written."""
    return [copy for copy in copies if copy.noted and ages.get(copy.path.name, 0.0) >= days * 86_400]


def remove_expired(sessions_dir: Path, days: float, now: float | None = None) -> list[str]:
    """The daily run's clean-up.

    Each noted copy older than `days` removed (its age from its file's time, nanobot's last save before `/new`); the
    names removed. One that cannot be removed is logged and tried again next day."""
    now = time.time() if now is None else now
    copies = retired_files(sessions_dir, noted=True)
    ages = {}
    for copy in copies:
        try:
            ages[copy.path.name] = now - copy.path.stat().st_mtime
        except OSError:  # removed meanwhile
            continue
    removed = []
    for copy in expired(copies, ages, days):
        try:
            copy.path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("%s: the copy kept at /new, %s, not removed: %s", copy.key, copy.name, exc)
            continue
        removed.append(copy.path.name)
    return removed
