"""`nanobot-summary forget`.

Forget a fact of MEMORY.md by its text, as the web page's Forget does (worker.memory.longterm.forget), and say where
else the worker keeps the text: the day's notes, the recall index; `--everywhere` takes it out there too, as the page's
Forget everywhere does (worker.memory.elsewhere). nanobot's session files are never changed: they are nanobot's."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from filelock import Timeout

from worker.errors import MemoryFilesError, MemoryReadOnly, NanobotConfigError
from worker.memory.elsewhere import Elsewhere, too_short, where_else
from worker.memory.longterm.forget import Forgot, find_fact, forget_fact, near_facts
from worker.memory.recall_index import RecallIndex, RecallIndexError
from worker.nanobot.config import NanobotConfig
from worker.settings import SettingsError, load_settings
from worker.text.clock import zone_or_utc

# The exit codes: done; nothing found to forget (nothing changed); the command could not do its work.
DONE, NOT_FOUND, FAILED = 0, 1, 2
SESSIONS_STAY = (
    "nanobot's session files still hold the conversation itself: they are nanobot's, and this command "
    "never changes them"
)


class Refused(Exception):
    """Why the command stopped, in one line."""


@dataclass(frozen=True)
class Place:
    """Where this instance keeps its memory, as the worker and the page read it."""

    workspace: Path
    sessions_dir: Path
    tz: ZoneInfo

    @property
    def memory_path(self) -> Path:
        return self.workspace / "memory" / "MEMORY.md"

    def today(self) -> str:
        return datetime.now(self.tz).date().isoformat()

    @classmethod
    def load(cls) -> Place:
        settings = load_settings()
        try:
            nanobot = NanobotConfig.load(settings.config_path)
            workspace = Path(settings.summary_workspace or nanobot.workspace).expanduser()
            return cls(workspace, nanobot.sessions_dir, zone_or_utc(settings.summary_timezone or nanobot.timezone))
        except NanobotConfigError as exc:
            raise Refused(str(exc)) from None


def forgotten_line(forgot: Forgot | str | None, dry_run: bool) -> list[str]:
    """What the forget of the fact did, or would do (pure)."""
    if forgot is None:
        return []
    if isinstance(forgot, str):
        return [f"would forget from MEMORY.md: {forgot} (and any copy of it held for the next write)"]
    held = f" and {len(forgot.held)} held copy(ies) of it" if forgot.held else ""
    where = "MEMORY.md" if forgot.written is not None else "the facts held for MEMORY.md"
    return [f"forgot from {where}: {forgot.text}{held} (the recall index follows)"]


def elsewhere_lines(found: Elsewhere, removed: bool, dry_run: bool) -> list[str]:
    """Where else the worker keeps the text, and what was (or would be) taken out there (pure)."""
    words = " ".join(found.words)
    if not found.anywhere:
        if found.problem:
            return [
                f"the recall index could not be searched now ({found.problem}): the recall tool may still find "
                "the text there",
                SESSIONS_STAY,
            ]
        return [
            f'no daily note and no passage of the recall index holds each of the words "{words}" (a note may '
            "say it in other words: give fewer words)",
            SESSIONS_STAY,
        ]
    notes = ", ".join(day.removesuffix(".md") for day in found.notes)
    archived = sum(1 for _, kind, _ in found.passages if kind == "messages")
    sessions = ", ".join(found.archives)
    if removed or dry_run:
        verb = "would remove" if dry_run else "removed"
        days = f" ({notes})" if notes else ""
        of = f" (archived messages of {sessions})" if sessions else ""
        # Before the notes change, the index still holds their lines too: a dry run counts the archive's alone.
        passages = archived if dry_run else len(found.passages)
        done = [
            f"{verb} {found.note_lines} line(s) of the daily notes{days} and {passages} passage(s) of the "
            f'recall index{of}, each holding the words "{words}"'
        ]
        if not dry_run:
            done.append(
                "neither the recall tool nor the page's Recall returns it now; the archived messages stay out "
                "of the recall index when it indexes their session again"
            )
        if found.unarchived:
            done.append(
                f"{found.unarchived} message(s) holding it that no summary covered yet (nanobot still sends "
                f"them) {'would stay' if dry_run else 'stay'} out of the recall index when a summary archives "
                "them"
            )
        return [*done, SESSIONS_STAY]
    lines = [
        f'the worker still keeps the text elsewhere (each line or passage holding the words "{words}"), and '
        "the recall tool finds it there:"
    ]
    lines += [
        f"  the daily notes of {day.removesuffix('.md')}: {len(held)} line(s)" for day, held in found.notes.items()
    ]
    if archived:
        lines.append(f"  the recall index: {archived} archived message(s) of {sessions}")
    if found.problem:
        lines.append(f"  (the recall index could not be searched now: {found.problem})")
    return [
        *lines,
        SESSIONS_STAY,
        "`nanobot-summary forget --everywhere TEXT` removes it there too (fewer words "
        "catch a note that says it otherwise; --dry-run first shows what would go)",
    ]


def refresh_index(place: Place) -> None:
    """The recall index follows MEMORY.md at once (a forgotten fact must not be recalled), when there is one."""
    index = RecallIndex(place.workspace, place.tz)
    try:
        if index.path.exists():
            index.refresh(place.sessions_dir)
    except (RecallIndexError, sqlite3.Error, OSError) as exc:
        print(
            f"warning: the recall index did not follow MEMORY.md now ({type(exc).__name__}): the worker's next "
            "job brings it up to date",
            file=sys.stderr,
        )
    finally:
        index.close()


def forget(place: Place, text: str, everywhere: bool, dry_run: bool) -> tuple[int, list[str]]:
    """The exit code and what to print."""
    path, today = place.memory_path, place.today()
    try:
        if dry_run:
            fact: Forgot | str | None = find_fact(path, text, today)
        else:
            fact = forget_fact(path, text, today)
            if fact is not None and not everywhere:
                refresh_index(place)  # with --everywhere, where_else refreshes it
        found = where_else(
            place.workspace,
            place.sessions_dir,
            place.tz,
            text,
            everywhere and not dry_run,
            unarchived=everywhere and dry_run,
        )
    except MemoryReadOnly as exc:
        raise Refused(f"{exc}: the worker leaves it alone (make it writable to forget a fact)") from None
    except (MemoryFilesError, Timeout, OSError) as exc:
        raise Refused(f"the memory files could not be changed now ({type(exc).__name__}: {exc}); try again") from None
    if everywhere and not dry_run and found.problem:
        raise Refused(
            f"the notes' lines were removed but the recall index could not be changed now "
            f"({found.problem}); run this again"
        )
    lines = forgotten_line(fact, dry_run)
    if fact is None:
        near = near_facts(path, text, today)
        lines.append(
            f"MEMORY.md holds no fact that reads {text!r}"
            + (
                "; the nearest: " + "; ".join(repr(each) for each in near)
                if near
                else " (`nanobot-summary web`'s memory page lists them all)"
            )
        )
    lines += elsewhere_lines(found, removed=everywhere and not dry_run, dry_run=dry_run and everywhere)
    if fact is None and not (everywhere and found.anywhere):
        return NOT_FOUND, [f"error: {lines[0]}", *lines[1:]]
    return DONE, lines


def main(args: argparse.Namespace) -> int:
    text = " ".join(args.text).strip()
    if too_short(text):
        print(
            "error: give the fact's text (at least a few letters), as MEMORY.md or the web page shows it",
            file=sys.stderr,
        )
        return FAILED
    try:
        code, lines = forget(Place.load(), text, args.everywhere, args.dry_run)
    except (Refused, SettingsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return FAILED
    print("\n".join(lines), file=sys.stdout if code == DONE else sys.stderr)  # nothing forgotten: all of it an error
    return code
