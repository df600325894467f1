"""What travels through Redis between the two sides: the summarize job's argument and the finished record."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, Field

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
    # "undo": not a summary but `nanobot-summary undo`'s request that the nanobot holding the session drop the
    # summary it applied (`undoing`); a hooks version that does not know it finds the record unreadable and drops it.
    reason: Reason | Literal["undo"] = "manual"
    created_at: datetime = Field(default_factory=utcnow)

    @classmethod
    def undoing(cls, session_key: str, summary: str, watermark: int) -> SummaryRecord:
        """The undo of the summary `summary` whose watermark is `watermark`: it applies to a live session only
        while that session still has this summary there. Only a digest of the summary travels (it is nanobot's
        text, maybe its own compaction's, never redacted by the worker)."""
        return cls(session_key=session_key, summary=_digest(summary), start=0, boundary=watermark,
                   boundary_timestamp=None, messages_before=0, messages_after=0, tokens_before=0, tokens_after=0,
                   reason="undo")

    @property
    def undoes(self) -> bool:
        return self.reason == "undo"

    def undoes_summary(self, summary: str, last_archived: int) -> bool:
        """Whether this undo was made for a session whose summary is `summary` at watermark `last_archived`."""
        return self.undoes and self.boundary == last_archived and self.summary == _digest(summary)

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


def _digest(summary: str) -> str:
    """What an undo record carries of the summary it undoes."""
    return "sha256:" + hashlib.sha256(summary.encode("utf-8")).hexdigest()
