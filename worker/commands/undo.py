"""`nanobot-summary undo`.

Undo a session's summary: nanobot replays the covered messages again (they never left the session file), and no record
waiting in Redis or in line 1 is applied. For a summary that went wrong. Line 1 of the session file is undone here; a
running nanobot that holds the session in memory (and would write its copy back at its next save) is sent the undo the
way summaries are sent (a record and its notice): its hooks undo the live session, and the command waits for that before
it says done."""

from __future__ import annotations

import argparse
import asyncio
import copy
import sys
import time
from pathlib import Path
from typing import Any

from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix

from nanobot_hooks.contract.client import close_client
from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.marker import METADATA_KEY, SessionMarker
from nanobot_hooks.contract.queue import DAMAGED, drop_record, load_record, read_waiting_record, store_record
from nanobot_hooks.contract.records import SummaryRecord, record_key
from nanobot_hooks.contract.session_format import LAST_SUMMARY, METADATA_TYPE, summary_text
from worker.connections import open_pool, redis_problem
from worker.errors import MemoryFilesError, NanobotConfigError, SessionKeyError
from worker.memory.writer import MemoryFiles
from worker.nanobot.config import NanobotConfig
from worker.nanobot.metadata_line import edit_line_one
from worker.nanobot.sessions import read_metadata, session_path
from worker.settings import SettingsError, load_settings
from worker.state import budget, index
from worker.text.clock import zone_or_utc

# nanobot 0.3.x reads its watermark from the first of these it finds, and saves both.
WATERMARKS = ("last_archived", "last_consolidated")


# How long the command waits for a running nanobot's hooks to undo the session they hold: a pickup takes
# milliseconds, unless a turn of the session runs (the undo waits for its end, as a summary does).
NANOBOT_WAIT_SECONDS = 15.0


class Refused(Exception):
    """Why nothing was undone, in one line."""


def undone_line_one(head: dict[str, Any], undo: SummaryRecord, waiting: bool = False) -> list[str]:
    """What undoing changes in line 1 (changing `head` in place): nothing when it carries no summary.

    The marker keeps the undo's stamp, so no record made before it (a waiting one, one stored again) applies later: also
    when only a record waiting in Redis (`waiting`) is undone."""
    metadata = found if isinstance(found := head.get("metadata"), dict) else {}
    done = []
    if metadata.pop(LAST_SUMMARY, None) is not None:
        done.append("removed the summary nanobot sends instead of the covered messages (metadata._last_summary)")
    if watermark := watermark_of(head):
        done.append(f"moved the watermark from {watermark} to 0: messages 0..{watermark - 1} are replayed again")
        head.update({k: 0 for k in WATERMARKS if k in head})
    marker = SessionMarker.from_metadata(metadata)
    if done or waiting or marker.pending is not None or marker.applied is not None:
        if SessionMarker.mark_undone(metadata, undo):
            done.append(f"removed the worker's marks (metadata.{METADATA_KEY}: a waiting copy, the applied mark)")
        elif not done:
            done.append(f"marked line 1 undone (metadata.{METADATA_KEY}): the summary that waited never applies")
    head["metadata"] = metadata
    return done


def watermark_of(head: dict[str, Any]) -> int:
    return next((head[k] for k in WATERMARKS if isinstance(head.get(k), int) and head[k] > 0), 0)


def read_line_one(path: Path) -> dict[str, Any]:
    record = read_metadata(path)  # line by line, no message held: a huge session costs its longest line
    return record if record.get("_type") == METADATA_TYPE else {}


def rewrite_line_one(path: Path, key: str, dry_run: bool, waiting: bool = False) -> tuple[list[str], SummaryRecord]:
    """Line 1 undone the way the worker writes it (worker.nanobot.metadata_line.edit_line_one).

    Every message line copied byte for byte, the file's permissions and modification time kept (nanobot keeps an
    unfinished turn's recovery file only when the session file is not newer). With what was undone, as the undo nanobot
    is sent."""
    seen: list[SummaryRecord] = []

    def undone(head: dict[str, Any]) -> list[str]:
        seen.append(SummaryRecord.undoing(key, summary_text(head.get("metadata")), watermark_of(head)))
        return undone_line_one(head, seen[-1], waiting)

    if dry_run:
        head = read_line_one(path)
        return (undone(copy.deepcopy(head)) if head else []), SummaryRecord.undoing(key, "", 0)
    done = edit_line_one(path.parent, path, undone)
    if done is None:
        raise Refused(f"line 1 of {path.name} is not nanobot's metadata line: not touched")
    return done, seen[-1]


async def listening(redis: Any) -> int:
    """How many of this instance's nanobots listen for notices now.

    Each listener keeps a report of its own while it runs (turn/listener.py, indexed), the presence read here; the
    channel's subscribers are not counted (the instance's Redis ACL user may not)."""
    return len(await index.members(redis, "hooks", Keys.of(redis).hooks))


def signing_key(path: Path) -> bytes:
    """The instance's record key, read before anything is changed.

    An undo the running nanobot cannot be sent is refused whole."""
    try:
        return record_key(path.parent)
    except (OSError, ValueError) as exc:
        raise Refused(
            f"the instance's record key cannot be read ({exc}): a running nanobot could not be told, "
            "so nothing was undone"
        ) from None


async def tell_nanobot(redis: Any, path: Path, undo: SummaryRecord, listening: int) -> list[str]:
    """The undo sent to the running nanobots, and waited for.

    The undo (signed, as the worker signs summaries: the hooks apply no record without the instance's MAC) sent to the
    running nanobots, and waited for: the one holding the session undoes its live copy and saves it. Refused when the
    session nanobot holds has another summary by now."""
    await store_record(redis, undo)
    deadline = time.monotonic() + NANOBOT_WAIT_SECONDS
    while (waiting := await load_record(redis, undo.session_key)) is not None and waiting.stamp == undo.stamp:
        if time.monotonic() > deadline:
            return [
                f"sent the undo to the running nanobot ({listening} process(es) listening): none took it in "
                f"{NANOBOT_WAIT_SECONDS:.0f} s, so none holds the session in memory now (the file is what it will "
                "read), or a turn of it is running (the undo is applied when that turn ends)"
            ]
        await asyncio.sleep(0.1)
    head = await asyncio.to_thread(read_line_one, path)
    if summary_text(head.get("metadata")) or watermark_of(head):
        raise Refused(
            "the running nanobot's session has another summary since (a new one, or nanobot's own "
            "compaction): that one was not undone; run undo again to undo it"
        )
    return ["the running nanobot that holds the session undid it there too (its next turn sends every message)"]


async def undoable_record(redis: ArqRedis, keys: Keys, key: str) -> SummaryRecord | None:
    """The record waiting for `key` (None: none waits).

    Refused while a job is queued or running (it would store a record over the undone state) or when the record cannot
    be read."""
    if (
        await redis.exists(in_progress_key_prefix + keys.job_id(key))
        or await redis.zscore(keys.queue, keys.job_id(key)) is not None
    ):
        raise Refused(
            f"a summary job for {key!r} is queued or running: let it end (nanobot-summary status), then run this again"
        )
    record = await read_waiting_record(redis, key)
    if isinstance(record, str):
        what = "damaged" if record == DAMAGED else "another version's, which this version cannot read"
        raise Refused(
            f"the summary record waiting for {key!r} is {what}: nothing was undone; upgrade nanobot's "
            "hooks and the worker to one version (a damaged one is dropped at the session's next "
            "turn), then run this again"
        )
    return record


async def undo(key: str, dry_run: bool, pause: bool = False) -> list[str]:
    settings = load_settings()
    try:
        nanobot = NanobotConfig.load(settings.config_path)
        path = session_path(nanobot.sessions_dir, key)
        settings = settings.for_workspace(nanobot.workspace)
    except (NanobotConfigError, SessionKeyError, SettingsError) as exc:
        raise Refused(str(exc)) from None
    if not path.exists():
        raise Refused(f"no session {key!r} ({path.name} is not in {path.parent})")
    if problem := redis_problem(settings.redis_url, keys=settings.keys, **settings.redis_options()):
        raise Refused(f"{problem} (a summary waiting there would still be applied)")
    redis = await open_pool(settings)
    keys = settings.keys
    try:
        # Everything the undo needs is read first: nothing changes before it is known that it can finish.
        record = await undoable_record(redis, keys, key)
        nanobots = 0 if dry_run else await listening(redis)
        secret = signing_key(path) if nanobots else b""
        paused = []
        if pause:  # before line 1 changes: a turn meanwhile queues no fresh summary of what is being undone
            if not dry_run:
                await budget.pause(redis, key, "paused by `nanobot-summary undo --pause`")
            paused = [f"paused its summaries: nanobot queues none for it until `nanobot-summary end-rest {key}`"]
        done, undone = rewrite_line_one(path, key, dry_run, waiting=record is not None)
        if record is not None:
            if not dry_run:
                await drop_record(redis, record)
            if not record.undoes:
                done.append(f"dropped the summary waiting in Redis (messages {record.start}..{record.boundary - 1})")
        if done and nanobots:
            done += await tell_nanobot(redis, path, undone.signed(secret), nanobots)
    finally:
        await close_client(redis)
    return done + paused


def forget_facts(key: str, dry_run: bool) -> list[str]:
    """The facts `key` taught MEMORY.md, removed (listed on a dry run).

    The worker's lock keeps this safe while the worker and nanobot run."""
    settings = load_settings()
    try:
        nanobot = NanobotConfig.load(settings.config_path)
    except NanobotConfigError as exc:
        raise Refused(str(exc)) from None
    memory = MemoryFiles(
        settings.summary_workspace or nanobot.workspace, zone_or_utc(settings.summary_timezone or nanobot.timezone).key
    )
    removed = memory.forget(key, dry_run)
    return [f"removed from MEMORY.md: {text}" for text in removed] or ["no fact of this session in MEMORY.md"]


# A dry run says what it would do: each line's past tense ("removed ...") as the future ("would remove ...").
FUTURE = {"removed": "would remove", "moved": "would move", "dropped": "would drop", "paused": "would pause"}


def would(line: str) -> str:
    verb, _, rest = line.partition(" ")
    return f"{FUTURE[verb]} {rest}" if verb in FUTURE else line


def main(args: argparse.Namespace) -> int:
    if args.keep_summary and not args.forget_facts:
        print("error: --keep-summary only goes with --forget-facts", file=sys.stderr)
        return 2
    try:
        done = [] if args.keep_summary else asyncio.run(undo(args.session, args.dry_run, args.pause))
        if args.forget_facts:
            done += forget_facts(args.session, args.dry_run)
    except (Refused, SettingsError, MemoryFilesError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    shown = [would(line) for line in done] if args.dry_run else done
    print("\n".join(f"{args.session}: {line}" for line in shown) if done else f"{args.session}: no summary to undo")
    return 0
