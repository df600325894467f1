"""The marker both sides keep in line 1 of a session file.

A record to apply, the last one applied, and the last undo; the last two make a record apply once
(`SessionMarker.refusal`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from nanobot_hooks.contract.records import SummaryRecord

__all__ = ["METADATA_KEY", "AppliedMark", "SessionMarker"]

# The project's entry in a session's metadata (line 1 of the session file): `SessionMarker` reads and writes it.
METADATA_KEY = "_summary_worker"
# The session's generation, beside the marker (which applying or undoing a summary replaces whole): how many
# times `/new` emptied it since the hooks were installed. The notes' spans name it, so a new conversation's
# positions and times are never taken for the old one's (a `/new` inside a repeated hour).
GENERATION_KEY = "_summary_worker_generation"
_PENDING, _APPLIED, _UNDONE = "pending", "applied", "undone"
# A record made longer ago than this is refused; its copy in Redis expires then too (contract.queue.RECORD_SECONDS).
RECORD_LIFETIME = timedelta(days=14)


def _index(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(slots=True)
class AppliedMark:
    """Which record the hooks applied last, and the message count right after (`through`).

    The interval trigger counts new user turns from there. Any field may be None in a hand-edited file."""

    stamp: str | None  # the record's `SummaryRecord.stamp`
    boundary: int | None
    through: int | None
    reason: str | None = None
    applied_at: str | None = None  # local time, ISO

    @classmethod
    def read(cls, value: Any) -> AppliedMark | None:
        if not isinstance(value, dict):
            return None
        return cls(
            _text(value.get("created_at")),
            _index(value.get("boundary")),
            _index(value.get("through")),
            _text(value.get("reason")),
            _text(value.get("applied_at")),
        )


class SessionMarker:
    """The marker both sides keep in a session's metadata under METADATA_KEY.

    The worker's copy of a record waiting to be applied (`pending`, for a nanobot process that starts after the notice)
    and the hooks' mark of the record they applied (`applied`). Read tolerantly: whatever a hand edit left that does not
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

    @property
    def undone(self) -> str | None:
        """The stamp of the last `nanobot-summary undo` of the session (an undo record's `SummaryRecord.stamp`).

        Every record made before it was undone, or dropped by it."""
        value = self._entry.get(_UNDONE)
        return _text(value.get("created_at")) if isinstance(value, dict) else None

    def refusal(self, record: SummaryRecord, now: datetime, after_applied: bool = True) -> str | None:
        """Why `record` may not apply to this session although it is signed, or None: a record applies once.

        Each record is bound to its stamp (its creation time, under the MAC: the sequence) and expires RECORD_LIFETIME
        after it; the session remembers the stamp of the last record applied and of the last undo, so a genuine record
        stored again (replayed by a client of the shared Redis), one older than what was applied since, or one that an
        undo dropped, is refused. The same stamp as the last applied is not refused here: that is the usual duplicate
        (the copy in line 1 and the one in Redis), the caller's to tell. An undo is checked against the last undo only
        (`after_applied=False`): one older than the summary applied since is not replayed, it just does not fit that
        summary (turn/apply.undo_verdict says so)."""
        made = _when(record.stamp)
        if made is None:
            return "its creation time cannot be read"
        if now - made > RECORD_LIFETIME:
            return f"expired (made {made:%Y-%m-%d %H:%M} UTC, more than {RECORD_LIFETIME.days} days ago)"
        applied = self.applied
        if after_applied and applied is not None and (last := _when(applied.stamp)) is not None and made < last:
            return "replayed: older than the summary applied since"
        if (undo := _when(self.undone)) is not None and made <= undo:
            return "replayed: made before `nanobot-summary undo` undid the session's summary"
        return None

    @staticmethod
    def pending_entry(record: SummaryRecord) -> dict[str, Any]:
        """What the worker merges into the marker of line 1 (the hooks' `applied` mark stays)."""
        return {_PENDING: record.model_dump(mode="json")}

    @staticmethod
    def mark_applied(metadata: dict[str, Any], record: SummaryRecord, through: int, at: datetime) -> None:
        """Replace the marker (a pending copy included) with the mark of `record`, applied at `at`."""
        metadata[METADATA_KEY] = {
            _APPLIED: {
                "created_at": record.stamp,
                "boundary": record.boundary,
                "through": through,
                "reason": record.reason,
                "applied_at": at.isoformat(),
            }
        }

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
    def generation(metadata: Any) -> int:
        """The session's generation (0 until the first `/new`); never raises."""
        value = metadata.get(GENERATION_KEY) if isinstance(metadata, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    @classmethod
    def next_generation(cls, metadata: dict[str, Any]) -> int:
        """Count one more `/new` in the session's metadata; the generation that ends (the retired one)."""
        ended = cls.generation(metadata)
        metadata[GENERATION_KEY] = ended + 1
        return ended

    @staticmethod
    def remove(metadata: dict[str, Any]) -> bool:
        """Remove the whole marker; whether there was one."""
        return metadata.pop(METADATA_KEY, None) is not None

    @staticmethod
    def mark_undone(metadata: dict[str, Any], undo: SummaryRecord) -> bool:
        """Replace the marker with the mark of `undo`, so no record made before it applies again.

        Replace the marker (a pending copy and the applied mark included) with the mark of `undo`, so no record made
        before it applies again (`refusal`); whether a pending copy or an applied mark was there."""
        had = isinstance(entry := metadata.get(METADATA_KEY), dict) and bool({_PENDING, _APPLIED} & entry.keys())
        metadata[METADATA_KEY] = {_UNDONE: {"created_at": undo.stamp}}
        return had


def _when(stamp: str | None) -> datetime | None:
    """A record's stamp (ISO 8601, UTC) as a time to compare; None when it does not read as one."""
    if stamp is None:
        return None
    try:
        found = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return found if found.tzinfo is not None else None
