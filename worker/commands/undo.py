"""`nanobot-summary undo`: undo a session's summary: nanobot replays the covered messages again (they never left the session file), and
no record waiting in Redis or in line 1 is applied. For a summary that went wrong; run it while nanobot is stopped."""

from __future__ import annotations

import argparse
import asyncio
import copy
import sys
from pathlib import Path
from typing import Any

from arq.constants import in_progress_key_prefix

from nanobot_hooks.contract import (LAST_SUMMARY, METADATA_KEY, METADATA_TYPE, SessionMarker, drop_record,
                                    key_from_name, load_record)
from worker.connections import open_pool, redis_problem
from worker.errors import MemoryFilesError, NanobotConfigError, SessionKeyError
from worker.memory.writer import MemoryFiles
from worker.nanobot.config import NanobotConfig
from worker.nanobot.metadata_line import edit_line_one
from worker.nanobot.sessions import read_session, session_path
from worker.settings import SettingsError, load_settings
from worker.text.clock import zone_or_utc

# nanobot 0.3.x reads its watermark from the first of these it finds, and saves both.
WATERMARKS = ("last_archived", "last_consolidated")


class Refused(Exception):
    """Why nothing was undone, in one line."""


def undone_line_one(head: dict[str, Any]) -> list[str]:
    """What undoing changes in line 1 (changing `head` in place): nothing when it carries no summary."""
    metadata = found if isinstance(found := head.get("metadata"), dict) else {}
    done = []
    if metadata.pop(LAST_SUMMARY, None) is not None:
        done.append("removed the summary nanobot sends instead of the covered messages (metadata._last_summary)")
    watermark = next((head[k] for k in WATERMARKS if isinstance(head.get(k), int) and head[k] > 0), 0)
    if watermark:
        done.append(f"moved the watermark from {watermark} to 0: messages 0..{watermark - 1} are replayed again")
        head.update({k: 0 for k in WATERMARKS if k in head})
    if SessionMarker.remove(metadata):
        done.append(f"removed the worker's marks (metadata.{METADATA_KEY}: a waiting copy, the applied mark)")
    head["metadata"] = metadata
    return done


def rewrite_line_one(path: Path, dry_run: bool) -> list[str]:
    """Line 1 undone the way the worker writes it (worker.nanobot.metadata_line.edit_line_one): every message line copied
    byte for byte, the file's permissions and modification time kept (nanobot keeps an unfinished turn's
    recovery file only when the session file is not newer)."""
    if dry_run:
        record = read_session(path.parent, key_from_name(path.name) or "").metadata_record
        return undone_line_one(copy.deepcopy(record)) if record.get("_type") == METADATA_TYPE else []
    done = edit_line_one(path.parent, path, undone_line_one)
    if done is None:
        raise Refused(f"line 1 of {path.name} is not nanobot's metadata line: not touched")
    return done


async def undo(key: str, dry_run: bool) -> list[str]:
    settings = load_settings()
    try:
        nanobot = NanobotConfig.load(settings.config_path)
        path = session_path(nanobot.sessions_dir, key)
        settings = settings.for_workspace(nanobot.workspace)
    except (NanobotConfigError, SessionKeyError, SettingsError) as exc:
        raise Refused(str(exc)) from None
    if not path.exists():
        raise Refused(f"no session {key!r} ({path.name} is not in {path.parent})")
    if problem := redis_problem(settings.redis_url, **settings.redis_options()):
        raise Refused(f"{problem} (a summary waiting there would still be applied)")
    redis = await open_pool(settings)
    keys = settings.keys
    try:
        # A job running or queued now would store a record over the undone state.
        if await redis.exists(in_progress_key_prefix + keys.job_id(key)) or \
                await redis.zscore(keys.queue, keys.job_id(key)) is not None:
            raise Refused(f"a summary job for {key!r} is queued or running: let it end (nanobot-summary status), "
                          "then run this again")
        done = rewrite_line_one(path, dry_run)
        record = await load_record(redis, key)
        if record is not None:
            if not dry_run:
                await drop_record(redis, record)
            done.append(f"dropped the summary waiting in Redis (messages {record.start}..{record.boundary - 1})")
    finally:
        await redis.aclose()
    return done


def forget_facts(key: str, dry_run: bool) -> list[str]:
    """The facts `key` taught MEMORY.md, removed (listed on a dry run); the worker's lock keeps this safe
    while the worker and nanobot run."""
    settings = load_settings()
    try:
        nanobot = NanobotConfig.load(settings.config_path)
    except NanobotConfigError as exc:
        raise Refused(str(exc)) from None
    memory = MemoryFiles(settings.summary_workspace or nanobot.workspace,
                         zone_or_utc(settings.summary_timezone or nanobot.timezone).key)
    removed = memory.forget(key, dry_run)
    return [f"removed from MEMORY.md: {text}" for text in removed] or ["no fact of this session in MEMORY.md"]


# A dry run says what it would do: each line's past tense ("removed ...") as the future ("would remove ...").
FUTURE = {"removed": "would remove", "moved": "would move", "dropped": "would drop"}


def would(line: str) -> str:
    verb, _, rest = line.partition(" ")
    return f"{FUTURE[verb]} {rest}" if verb in FUTURE else line


def main(args: argparse.Namespace) -> int:
    if args.keep_summary and not args.forget_facts:
        print("error: --keep-summary only goes with --forget-facts", file=sys.stderr)
        return 2
    try:
        done = [] if args.keep_summary else asyncio.run(undo(args.session, args.dry_run))
        if args.forget_facts:
            done += forget_facts(args.session, args.dry_run)
    except (Refused, SettingsError, MemoryFilesError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    shown = [would(line) for line in done] if args.dry_run else done
    print("\n".join(f"{args.session}: {line}" for line in shown) if done else f"{args.session}: no summary to undo")
    return 0
