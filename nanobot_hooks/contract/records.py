"""What travels through Redis between the two sides.

The summarize job's argument and the finished record, which the instance's worker signs with the instance's key
(`record_key`) and its hooks apply only when the MAC holds."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

__all__ = ["RECORD_KEY_FILE", "Reason", "record_key", "SummarizeRequest", "SummaryRecord", "utcnow"]

Reason = Literal["tokens", "interval", "manual", "daily", "idle", "new"]


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
    # Asked by hand with --force: the model is called even when the plan says no summary could shrink the context.
    force: bool = False


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
    # "undo": not a summary but `nanobot-summary undo`'s request that the nanobot holding the session drop the
    # summary it applied (`undoing`); a hooks version that does not know it finds the record unreadable and drops it.
    reason: Reason | Literal["undo"] = "manual"
    created_at: datetime = Field(default_factory=utcnow)
    # HMAC-SHA256 (hex) of every other field under the instance's key: `signed`, `authentic`.
    mac: str | None = None

    def _digest(self, key: bytes) -> str:
        # Every field the record has but the MAC itself, in one canonical JSON text: a changed summary, boundary,
        # session key or stamp changes it. A field a later version adds is covered too, so both sides upgrade together.
        body = json.dumps(self.model_dump(mode="json", exclude={"mac"}), sort_keys=True, separators=(",", ":"))
        return hmac.new(key, body.encode("utf-8"), hashlib.sha256).hexdigest()

    def signed(self, key: bytes) -> SummaryRecord:
        """This record with its MAC under `key` (the worker signs what it stores)."""
        return self.model_copy(update={"mac": self._digest(key)})

    def authentic(self, key: bytes) -> bool:
        """Was it signed with `key`? A record without a MAC (forged, or made before records were signed) is not."""
        return self.mac is not None and hmac.compare_digest(self.mac, self._digest(key))

    @classmethod
    def undoing(cls, session_key: str, summary: str, watermark: int) -> SummaryRecord:
        """The undo of the summary `summary` whose watermark is `watermark`.

        It applies to a live session only while that session still has this summary there. Only a digest of the summary
        travels (it is nanobot's text, maybe its own compaction's, never redacted by the worker)."""
        return cls(
            session_key=session_key,
            summary=_digest(summary),
            start=0,
            boundary=watermark,
            boundary_timestamp=None,
            messages_before=0,
            messages_after=0,
            tokens_before=0,
            tokens_after=0,
            reason="undo",
        )

    @property
    def undoes(self) -> bool:
        return self.reason == "undo"

    def undoes_summary(self, summary: str, last_archived: int) -> bool:
        """Whether this undo was made for a session whose summary is `summary` at watermark `last_archived`."""
        return self.undoes and self.boundary == last_archived and self.summary == _digest(summary)

    @property
    def stamp(self) -> str:
        """What identifies one record: the worker's creation time, as stored in its JSON."""
        return str(self.model_dump(mode="json")["created_at"])

    def fits(self, last_archived: int, message_count: int, timestamp_at_boundary: str | None) -> bool:
        """Does the record still describe the live session, which `/new` or a native compaction changes?

        nanobot stamps every message it saves, so a record without the boundary's timestamp cannot
        be re-checked against the session and never fits.
        """
        if self.boundary_timestamp is None or not last_archived <= self.boundary <= message_count:
            return False
        return timestamp_at_boundary == self.boundary_timestamp


# The instance's key for records, in nanobot's sessions folder (`<config dir>/sessions/<workspace id>/`): outside the
# agent's workspace, so nanobot's file tools (restricted to the workspace) cannot show it, and readable only by the
# Unix user nanobot and its worker run as. Never in Redis: another instance on the same Redis cannot sign.
RECORD_KEY_FILE = ".summary-records.key"
_KEY_BYTES = 32


def record_key(sessions_dir: Path) -> bytes:
    """The instance's key, made by whichever side needs it first and read fresh every time.

    The instance's key, made by whichever side needs it first (32 random bytes, mode 0600) and read fresh every time, so
    a key replaced while both sides run is used by both from then on. Never makes the folder: nanobot refuses a sessions
    folder that holds files but not its own marker. Raises OSError, ValueError (damaged)."""
    path = Path(sessions_dir) / RECORD_KEY_FILE
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        key = _make_key(path)
    if len(key) < _KEY_BYTES:
        raise ValueError(
            f"{path} is damaged (shorter than {_KEY_BYTES} bytes): delete it and restart nanobot and the worker"
        )
    return key


def _make_key(path: Path) -> bytes:
    """A complete key file or none.

    Written under a temporary name, then linked into place, which fails when another process got there first (its key is
    the one both use)."""
    temp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    handle = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(secrets.token_bytes(_KEY_BYTES))
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temp, path)
        except FileExistsError:
            pass
    finally:
        temp.unlink(missing_ok=True)
    return path.read_bytes()


def _digest(summary: str) -> str:
    """What an undo record carries of the summary it undoes."""
    return "sha256:" + hashlib.sha256(summary.encode("utf-8")).hexdigest()
