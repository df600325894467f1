"""Applying a finished summary to a live nanobot Session.

Re-validate, commit the checkpoint, mark it; and an undo (`nanobot-summary undo` while nanobot holds the session): drop
the summary, replay from the first message.

Everything here is synchronous on purpose: the caller holds the session's turn lock (or is the turn
itself, before it reads any history), and no await between the check and the commit means no other
coroutine can change the session in between. The caller saves through nanobot's SessionManager.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal, Protocol

from nanobot_hooks.contract.marker import SessionMarker
from nanobot_hooks.contract.records import SummaryRecord
from nanobot_hooks.contract.session_format import LAST_SUMMARY, summary_text, timestamp_before

# "forged": a record from Redis not signed with the instance's key (turn/pickup refuses it, never applies it);
# "replayed": a signed record that may not apply again (expired, older than what the session applied or undid since:
# `SessionMarker.refusal`, which `refusal` below says in words).
Outcome = Literal["applied", "stale", "duplicate", "forged", "replayed"]


class LiveSession(Protocol):
    """The part of nanobot's `Session` this module touches (all public in nanobot 0.3.x)."""

    key: str
    messages: list[dict[str, Any]]
    metadata: dict[str, Any]
    # Responses-API providers (OpenAI's gpt-5 and o-series, Azure, Codex, Copilot): an opaque replay of
    # every earlier input item, sent instead of the history while it matches the provider and model.
    provider_state: Any

    @property
    def last_archived(self) -> int: ...

    @last_archived.setter
    def last_archived(self, value: int) -> None: ...

    def commit_summary_checkpoint(
        self, summary: str, *, insert_at: int | None = None, last_active: datetime | None = None
    ) -> None: ...


def pending_in_metadata(session: LiveSession) -> SummaryRecord | None:
    """The record the worker wrote into the session file's metadata line, if this copy carries one.

    A session freshly loaded from disk (a new `nanobot agent` process, a gateway after a restart)
    has it; a cached one usually does not, because nanobot never re-reads a cached session.
    """
    return SessionMarker.from_metadata(session.metadata).pending


def already_applied(session: LiveSession, record: SummaryRecord) -> bool:
    applied = SessionMarker.from_metadata(session.metadata).applied
    if applied is not None and applied.stamp == record.stamp:
        return True
    # Also without our marker (e.g. the metadata was replaced): same boundary and same summary text.
    last = session.metadata.get(LAST_SUMMARY)
    return session.last_archived == record.boundary and isinstance(last, dict) and last.get("text") == record.summary


def apply_record(session: LiveSession, record: SummaryRecord) -> tuple[Outcome, bool]:
    """Apply `record` if it still describes this session.

    Returns the outcome and whether the session changed (the caller then saves it)."""
    refused = verdict(session, record)
    if refused is not None:
        return refused, forget_pending(session, record)
    if record.undoes:
        undo_summary(session, record)
        return "applied", True
    messages = session.messages
    session.commit_summary_checkpoint(record.summary, insert_at=record.boundary)
    # As nanobot's own checkpoints do: the next request resumes from the summary and the kept tail, not
    # from the provider's replay of every earlier item (which would still carry what was just covered).
    session.provider_state = None
    # The message count right after applying: the interval trigger counts new user turns from there
    # (trigger.count_from), not from the boundary, which the kept tail follows.
    SessionMarker.mark_applied(session.metadata, record, through=len(messages), at=datetime.now())
    return "applied", True


def forget_pending(session: LiveSession, record: SummaryRecord) -> bool:
    """Remove the metadata copy of a record that will never apply, so no later turn re-checks it."""
    return SessionMarker.forget_pending(session.metadata, record)


def verdict(session: LiveSession, record: SummaryRecord) -> Outcome | None:
    """What applying `record` would come to, without changing anything.

    "stale" or "duplicate" when it never will apply, None while it still fits. Also asked of a record held back by idle
    pickup, so a stale one is dropped at once rather than when it would have been due."""
    if record.session_key != session.key:
        return "stale"
    marker = SessionMarker.from_metadata(session.metadata)
    if record.undoes:
        if marker.undone == record.stamp:
            return "duplicate"  # this undo, applied already (the command's line 1, or its notice twice)
        return "replayed" if refusal(session, record, after_applied=False) else undo_verdict(session, record)
    if already_applied(session, record):
        return "duplicate"
    if refusal(session, record):
        return "replayed"
    messages = session.messages
    if not record.fits(session.last_archived, len(messages), timestamp_before(messages, record.boundary)):
        # `/new` emptied the session, or nanobot compacted on its own and moved the boundary.
        return "stale"
    return None


def refusal(session: LiveSession, record: SummaryRecord, after_applied: bool = True) -> str | None:
    """Why a signed record may not apply to this session again (`SessionMarker.refusal`), in words; None if it may."""
    now = datetime.now(timezone.utc)
    return SessionMarker.from_metadata(session.metadata).refusal(record, now, after_applied)


def undo_verdict(session: LiveSession, record: SummaryRecord) -> Outcome | None:
    """An undo applies while the live session still has the summary the command undid in the file.

    "duplicate" when it has none (undone already, or loaded from the undone file); "stale" when it has another (a newer
    summary, nanobot's own compaction): undoing that would drop what the user never asked to drop."""
    summary = summary_text(session.metadata)
    if not summary and session.last_archived == 0 and SessionMarker.from_metadata(session.metadata).applied is None:
        return "duplicate"
    return None if record.undoes_summary(summary, session.last_archived) else "stale"


def undo_summary(session: LiveSession, undo: SummaryRecord) -> None:
    """What `nanobot-summary undo` does to line 1, done to the live session.

    No summary in the system prompt, every message replayed from the first, no mark of ours but the undo's own (no
    record made before it applies again); the provider's replay (which starts after the summary) goes too. Every message
    stays (nanobot's checkpoint marker included, as in the file)."""
    session.metadata.pop(LAST_SUMMARY, None)
    SessionMarker.mark_undone(session.metadata, undo)
    session.last_archived = 0
    session.provider_state = None
