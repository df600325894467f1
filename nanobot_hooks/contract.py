"""The one contract between nanobot and the worker: queue, job names, Redis keys, and the result record."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

KEY_PREFIX = "nanobot-summary"

JOB_SUMMARIZE = "summarize_session"
JOB_DAILY = "daily_summaries"
# Deferred by the cache lifetime after each turn; summarizes the session once it has been quiet that long.
JOB_IDLE = "idle_summary"

# A namespace: what NANOBOT_SUMMARY_NAMESPACE accepts, and what the default (below) always is.
NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
# nanobot names its sessions folder by this id (`<config dir>/sessions/<id>`), kept in the workspace.
WORKSPACE_ID_FILE = ".nanobot/workspace-id"
NAMESPACE_FROM_ID = 12  # hex digits of the workspace id: 48 bits, no collision among millions of instances


def default_namespace(workspace_id: str) -> str:
    """The namespace of a nanobot instance: the start of its workspace id, so its hooks (which read the id
    from nanobot's session manager) and its worker (from the file in the workspace) agree unconfigured,
    and an operator matches a namespace to its sessions folder by eye."""
    return workspace_id[:NAMESPACE_FROM_ID]


@dataclass(frozen=True)
class Keys:
    """Every Redis name of one nanobot instance, in one place: the queue, arq's job ids, the records, the
    notice channel, and the worker's own keys, all under `nanobot-summary:<namespace>:`. Any number of
    nanobot instances (and their workers) share one Redis database, each in its own namespace.

    A client is bound to one namespace by arq's own `default_queue_name` (arq's Worker hands every job a
    client made with its queue's name), so the functions taking a client name their keys with
    `Keys.of(client)` and two workers of two instances in one process never cross."""

    namespace: str

    def __post_init__(self) -> None:
        if not re.match(NAMESPACE_PATTERN, self.namespace):
            raise ValueError(f"not a namespace: {self.namespace!r}")

    @classmethod
    def of(cls, redis: Any) -> Keys:
        """The namespace a client was made for; a client of no namespace is a bug, never a guess."""
        queue = str(getattr(redis, "default_queue_name", ""))
        namespace = queue.removeprefix(f"{KEY_PREFIX}:").removesuffix(":queue")
        if queue != f"{KEY_PREFIX}:{namespace}:queue":
            raise ValueError(f"a Redis client not bound to a namespace (its queue is {queue!r})")
        return cls(namespace)

    @property
    def prefix(self) -> str:
        return f"{KEY_PREFIX}:{self.namespace}:"

    @property
    def queue(self) -> str:
        """arq's queue; also the `default_queue_name` of every client of this namespace."""
        return f"{self.prefix}queue"

    @property
    def notice_channel(self) -> str:
        """Published (payload: the session key) when a record is stored and ready for pickup."""
        return f"{self.prefix}ready"

    @property
    def outcome_channel(self) -> str:
        """Published by the worker at the end of every job (payload: JSON with `session`, `status` and `line`,
        the outcome in one line), so that why a summary was or was not made shows in nanobot's own log."""
        return f"{self.prefix}outcome"

    @property
    def pending(self) -> str:
        """Session keys whose record waits for pickup; read by nanobot at start-up."""
        return f"{self.prefix}pending"

    @property
    def stats(self) -> str:
        """Counters kept by nanobot_hooks (a hash): records "applied", "stale" (dropped, the session had
        changed), "duplicate" (already applied elsewhere)."""
        return f"{self.prefix}stats"

    def job_id(self, session_key: str) -> str:
        """One id per session: arq refuses a second job while one is queued or running."""
        return f"{self.prefix}job:{session_key}"

    def idle_job_id(self, session_key: str) -> str:
        """One waiting idle check per session, apart from the summarize job's id: a check deferred for the
        cache lifetime must not hold back the threshold trigger's job."""
        return f"{self.prefix}idle:{session_key}"

    def session_of_job(self, job_id: str) -> str | None:
        start = f"{self.prefix}job:"
        return job_id[len(start):] if job_id.startswith(start) else None

    def record(self, session_key: str) -> str:
        return f"{self.prefix}record:{session_key}"

    def daily_flag(self, session_key: str) -> str:
        """Set by the daily run: the next job for the session also notes the kept tail, from this date on."""
        return f"{self.prefix}daily:{session_key}"

    def cooldown(self, session_key: str) -> str:
        """Set by the worker after a failed or fruitless paid job: the trigger waits until it expires."""
        return f"{self.prefix}cooldown:{session_key}"

    def spend(self, scope: str) -> str:
        """A hash of spend: `total` since the first job; `session:<key>`; `job:<key>`, the session's current
        job over all its tries; `day:<YYYY-MM-DD>`, tokens of a day in nanobot's timezone (field `tokens`,
        and `tokens:<key>` per session)."""
        return f"{self.prefix}spend:{scope}"

    def failures(self, session_key: str) -> str:
        """Failed jobs of a session in a row (reset by a good one): each doubles the next cooldown."""
        return f"{self.prefix}failures:{session_key}"

    def progress(self, session_key: str) -> str:
        """Where a chunked summary of the session stopped."""
        return f"{self.prefix}progress:{session_key}"

    @property
    def outcome_prefix(self) -> str:
        return f"{self.prefix}outcome:"

    def outcome(self, session_key: str) -> str:
        """The last job's outcome for a session."""
        return self.outcome_prefix + session_key


Reason = Literal["tokens", "interval", "manual", "daily", "idle"]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class SummarizeRequest(BaseModel):
    """The argument of the summarize job."""

    session_key: str
    reason: Reason = "manual"
    requested_at: datetime = Field(default_factory=utcnow)
    prompt_tokens: int | None = None
    context_window: int | None = None
    # The daily run notes every message up to the end, not only up to the cut, from this date on.
    notes_through_end: bool = False
    notes_since: str | None = None  # YYYY-MM-DD
    # The keep rule of this job (messages:N, tokens:N, fraction:F or turns:N); None = NANOBOT_SUMMARY_KEEP.
    # An idle summary carries its own (NANOBOT_SUMMARY_IDLE_KEEP).
    keep: str | None = None


class SummaryRecord(BaseModel):
    """A finished summary, kept in Redis until nanobot applies it: only what applying it needs.

    The summary is redacted before it is stored. The day's notes and the facts go to the memory files
    and never ride in Redis. Fields added by another version of the worker are ignored on read.
    """

    session_key: str
    summary: str
    # Messages [start, boundary) are covered; nanobot inserts its checkpoint at `boundary`.
    start: int
    boundary: int
    boundary_timestamp: str | None  # the timestamp of message boundary-1, to re-check before applying
    messages_before: int  # replayed messages before / after applying
    messages_after: int
    tokens_before: int  # estimated replay tokens before / after (summary included after)
    tokens_after: int
    reason: Reason = "manual"
    created_at: datetime = Field(default_factory=utcnow)

    @property
    def stamp(self) -> str:
        """What identifies one record: the worker's creation time, as stored in its JSON."""
        return self.model_dump(mode="json")["created_at"]

    def fits(self, last_archived: int, message_count: int, timestamp_at_boundary: str | None) -> bool:
        """Does the record still describe the live session? (`/new` or a native compaction break it.)

        nanobot stamps every message it saves, so a record without the boundary's timestamp cannot
        be re-checked against the session and never fits.
        """
        if self.boundary_timestamp is None or not last_archived <= self.boundary <= message_count:
            return False
        return timestamp_at_boundary == self.boundary_timestamp


# The project's entry in a session's metadata (line 1 of the session file): `SessionMarker` reads and writes it.
METADATA_KEY = "_summary_worker"
_PENDING, _APPLIED = "pending", "applied"


def _index(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(slots=True)
class AppliedMark:
    """Which record the hooks applied last, and the message count right after (`through`): the interval
    trigger counts new user turns from there. Any field may be None in a hand-edited file."""

    stamp: str | None  # the record's `SummaryRecord.stamp`
    boundary: int | None
    through: int | None
    reason: str | None = None
    applied_at: str | None = None  # local time, ISO

    @classmethod
    def read(cls, value: Any) -> AppliedMark | None:
        if not isinstance(value, dict):
            return None
        return cls(_text(value.get("created_at")), _index(value.get("boundary")), _index(value.get("through")),
                   _text(value.get("reason")), _text(value.get("applied_at")))


class SessionMarker:
    """The marker both sides keep in a session's metadata under METADATA_KEY: the worker's copy of a record
    waiting to be applied (`pending`, for a nanobot process that starts after the notice) and the hooks'
    mark of the record they applied (`applied`). Read tolerantly: whatever a hand edit left that does not
    parse reads as absent. Each part is parsed when asked for: the turn's path reads one of them."""

    __slots__ = ("_entry",)

    def __init__(self, entry: Any = None) -> None:
        self._entry: dict[str, Any] = entry if isinstance(entry, dict) else {}

    @classmethod
    def from_metadata(cls, metadata: Any) -> SessionMarker:
        """The marker in a session's metadata; never raises."""
        return cls(metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None)

    @property
    def pending(self) -> SummaryRecord | None:
        value = self._entry.get(_PENDING)
        if not isinstance(value, dict):
            return None
        try:
            return SummaryRecord.model_validate(value)
        except ValidationError:
            return None

    @property
    def applied(self) -> AppliedMark | None:
        return AppliedMark.read(self._entry.get(_APPLIED))

    @staticmethod
    def pending_entry(record: SummaryRecord) -> dict[str, Any]:
        """What the worker merges into the marker of line 1 (the hooks' `applied` mark stays)."""
        return {_PENDING: record.model_dump(mode="json")}

    @staticmethod
    def mark_applied(metadata: dict[str, Any], record: SummaryRecord, through: int, at: datetime) -> None:
        """Replace the marker (a pending copy included) with the mark of `record`, applied at `at`."""
        metadata[METADATA_KEY] = {_APPLIED: {"created_at": record.stamp, "boundary": record.boundary,
                                             "through": through, "reason": record.reason,
                                             "applied_at": at.isoformat()}}

    @classmethod
    def forget_pending(cls, metadata: dict[str, Any], record: SummaryRecord) -> bool:
        """Remove the pending copy if it is `record`; whether it was there."""
        pending = cls.from_metadata(metadata).pending
        entry = metadata.get(METADATA_KEY)
        if pending is None or pending.stamp != record.stamp or not isinstance(entry, dict):
            return False
        entry.pop(_PENDING, None)
        return True

    @staticmethod
    def remove(metadata: dict[str, Any]) -> bool:
        """Remove the whole marker (undoing a summary); whether there was one."""
        return metadata.pop(METADATA_KEY, None) is not None


# --- The recall index: written by the worker (worker/memory/recall_index.py), read by the recall tool
# (nanobot_hooks/recall.py). SQLite in the workspace's memory folder, beside the files it is built from:
# the tool finds it from nanobot's workspace alone, and nanobot's git store commits only the files it
# tracks, so the index never enters the workspace's history. The files stay the source of truth; the
# index is rebuilt from them when it is missing or of another schema version.
RECALL_INDEX = "memory/.recall.sqlite"  # relative to the workspace
RECALL_SCHEMA_VERSION = 1  # PRAGMA user_version; any other value means "rebuild"
# A row's id is `part << PART_BITS | position`: the rows of one part (one session's archived messages,
# one session's notes lines, MEMORY.md) form one rowid range, which FTS5 filters inside its index.
# Positions: a message's index in the session; a notes line's `date.toordinal() << NOTE_LINE_BITS | n`;
# a MEMORY.md line's number.
PART_BITS = 32
NOTE_LINE_BITS = 12
RECALL_TABLES = """
CREATE TABLE IF NOT EXISTS parts(
  id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,                -- messages | notes | memory
  session TEXT NOT NULL,             -- '' for MEMORY.md, which every session sees
  through INTEGER NOT NULL DEFAULT 0, -- messages: how many of the session's messages are indexed
  stamp TEXT,                        -- messages: the timestamp of the last one (a reset session lacks it)
  UNIQUE(kind, session));
CREATE TABLE IF NOT EXISTS files(name TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS days(part INTEGER NOT NULL, day TEXT NOT NULL, low INTEGER NOT NULL,
  high INTEGER NOT NULL, PRIMARY KEY(part, day)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS state(name TEXT PRIMARY KEY, value TEXT NOT NULL);
-- The redacted text with its local day and time and a label (a message's role, a notes line's or a
-- MEMORY.md line's heading); trigram finds any substring of 3 or more characters, in any script.
CREATE VIRTUAL TABLE IF NOT EXISTS passages USING fts5(
  body, day UNINDEXED, at UNINDEXED, label UNINDEXED, tokenize='trigram');
-- Two-character words, which trigrams cannot find (most Chinese words): the body's CJK bigrams and its
-- short words, one token each. Contentless and without positions: it only answers "which rows".
CREATE VIRTUAL TABLE IF NOT EXISTS grams USING fts5(gram, content='', detail='none', tokenize='unicode61');
"""


@lru_cache(maxsize=1)
def fts_problem() -> str | None:
    """Why this Python's SQLite cannot hold the index (None when it can)."""
    import sqlite3  # here: the hooks import the contract on every nanobot start, most never need SQLite
    from contextlib import closing

    try:
        with closing(sqlite3.connect(":memory:")) as db:
            db.execute("CREATE VIRTUAL TABLE probe USING fts5(body, tokenize='trigram')")
    except sqlite3.Error as exc:
        return (f"this Python's SQLite {sqlite3.sqlite_version} has no FTS5 trigram tokenizer ({exc}); "
                "SQLite 3.34 or later with FTS5 is needed")
    return None
