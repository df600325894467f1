"""Re-validation before a record is applied, against a stand-in with nanobot 0.3.5's Session semantics.

The real Session is exercised end to end in test_nanobot_e2e.py; these cover the cases that are slow or
awkward to produce through nanobot: a native compaction that moved the watermark, a record applied twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from harness.transcripts import conversation
from nanobot_hooks.contract.marker import METADATA_KEY, AppliedMark, SessionMarker
from nanobot_hooks.contract.records import SummaryRecord
from nanobot_hooks.turn.apply import apply_record, pending_in_metadata, refusal
from nanobot_hooks.turn.decide import count_from, decide, user_turns_since
from tests.support.standins import StandInSession, record_for


def test_a_fitting_record_is_applied_once_and_marked():
    session = StandInSession("telegram:1", conversation(10))
    record = record_for(session, 12)
    assert apply_record(session, record) == ("applied", True)
    assert session.last_archived == 12 and session.messages[12]["_hidden_history"]
    assert len(session.messages) == 21 and session.metadata["_last_summary"]["text"] == "rolling summary"
    assert session.metadata[METADATA_KEY]["applied"]["boundary"] == 12
    assert session.metadata[METADATA_KEY]["applied"]["through"] == 21, "the message count right after applying"
    assert apply_record(session, record) == ("duplicate", False), "a second delivery changes nothing"
    assert len(session.messages) == 21


def test_applying_drops_the_providers_replay_as_nanobots_own_checkpoints_do():
    """A Responses-API provider replays `provider_state` (every earlier input item) instead of the history:
    kept, it would still carry every covered message after the summary."""
    session = StandInSession("telegram:1", conversation(10), provider_state=object())
    record = record_for(session, 12)
    assert apply_record(session, record) == ("applied", True)
    assert session.provider_state is None
    replay = object()
    after_new = StandInSession("telegram:1", [], provider_state=replay)
    assert apply_record(after_new, record) == ("stale", False)
    assert after_new.provider_state is replay, "a record that does not apply leaves the session as it was"


def test_a_copy_of_the_record_in_metadata_is_read_and_forgotten_once_applied():
    session = StandInSession("telegram:1", conversation(10))
    record = record_for(session, 12)
    session.metadata[METADATA_KEY] = {"pending": record.model_dump(mode="json")}
    found = pending_in_metadata(session)
    assert found is not None and found.boundary == 12
    apply_record(session, found)
    assert pending_in_metadata(session) is None


def test_a_native_compaction_past_the_boundary_makes_the_record_stale():
    session = StandInSession("telegram:1", conversation(10))
    record = record_for(session, 8)
    session.commit_summary_checkpoint("nanobot's own summary", insert_at=14)
    assert apply_record(session, record) == ("stale", False)
    assert session.metadata["_last_summary"]["text"] == "nanobot's own summary"


def test_a_native_compaction_before_the_boundary_shifts_the_messages_and_makes_the_record_stale():
    session = StandInSession("telegram:1", conversation(10))
    record = record_for(session, 12)
    session.commit_summary_checkpoint("nanobot's own summary", insert_at=6)  # message 11 is now at 12
    assert apply_record(session, record) == ("stale", False)
    assert sum(1 for m in session.messages if m.get("_hidden_history")) == 1


def test_new_makes_the_record_stale_and_its_metadata_copy_is_dropped():
    session = StandInSession("telegram:1", conversation(10))
    record = record_for(session, 12)
    session.messages, session.last_archived = [], 0  # what /new leaves
    session.metadata[METADATA_KEY] = {"pending": record.model_dump(mode="json")}
    assert apply_record(session, record) == ("stale", True)
    assert pending_in_metadata(session) is None and session.messages == []


def test_a_record_of_another_session_is_never_applied():
    session = StandInSession("telegram:1", conversation(10))
    record = record_for(session, 12).model_copy(update={"session_key": "telegram:2"})
    assert apply_record(session, record) == ("stale", False)
    assert session.last_archived == 0


def interval_fires(session: StandInSession, interval: int = 10) -> bool:
    """What the integration decides after a turn, for the every-N-user-messages rule alone."""
    start = count_from(session.messages, session.last_archived, session.metadata)
    turns = user_turns_since(session.messages, start, enough=interval)
    return (
        decide(prompt_tokens=None, context_window=None, threshold=0.6, user_turns=turns, interval=interval) is not None
    )


def test_after_a_summary_is_applied_the_interval_waits_for_n_new_user_messages():
    session = StandInSession("telegram:1", conversation(20))
    apply_record(session, record_for(session, 30))  # 5 user turns kept after the boundary
    for _ in range(9):
        session.messages += conversation(1)
        assert not interval_fires(session), "the kept tail does not count towards the next summary"
    session.messages += conversation(1)
    assert interval_fires(session), "the 10th new user message fires"


def test_a_record_without_a_boundary_timestamp_is_never_applied():
    session = StandInSession("telegram:1", [{k: v for k, v in m.items() if k != "timestamp"} for m in conversation(10)])
    record = SummaryRecord(
        session_key=session.key,
        summary="s",
        start=0,
        boundary=12,
        boundary_timestamp=None,
        messages_before=20,
        messages_after=9,
        tokens_before=1000,
        tokens_after=300,
    )
    assert not record.fits(0, 20, None)
    assert apply_record(session, record) == ("stale", False)
    assert session.last_archived == 0 and len(session.messages) == 20


# -- the marker in line 1, as both sides read it ------------------------------------------------------

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
MARKER_FIELDS = st.sampled_from(
    ["pending", "applied", "undone", "created_at", "boundary", "through", "session_key", "x"]
)


@given(st.dictionaries(MARKER_FIELDS, JSON | st.dictionaries(MARKER_FIELDS, JSON, max_size=4), max_size=3) | JSON)
def test_a_hand_edited_marker_reads_as_absent_parts_never_as_an_error(entry):
    marker = SessionMarker.from_metadata({METADATA_KEY: entry})
    assert marker.pending is None or isinstance(marker.pending, SummaryRecord)
    assert marker.undone is None or isinstance(marker.undone, str)
    applied = marker.applied
    if applied is not None:
        assert applied.through is None or type(applied.through) is int
        assert applied.boundary is None or type(applied.boundary) is int


def test_the_marker_writers_round_trip_through_its_reader():
    session = StandInSession("telegram:1", conversation(10))
    record = record_for(session, 12)
    metadata: dict[str, Any] = {"other": 1}
    metadata[METADATA_KEY] = SessionMarker.pending_entry(record)
    marker = SessionMarker.from_metadata(metadata)
    assert marker.pending == record and marker.applied is None
    other = record.model_copy(update={"created_at": datetime(2020, 1, 1)})
    assert not SessionMarker.forget_pending(metadata, other), "another record's copy stays"
    assert SessionMarker.forget_pending(metadata, record) and SessionMarker.from_metadata(metadata).pending is None

    at = datetime(2026, 5, 1, 12, 0)
    SessionMarker.mark_applied(metadata, record, through=21, at=at)
    assert SessionMarker.from_metadata(metadata).applied == AppliedMark(record.stamp, 12, 21, "manual", at.isoformat())
    assert SessionMarker.from_metadata(
        {METADATA_KEY: {"applied": {"through": True, "boundary": "12"}}}
    ).applied == AppliedMark(None, None, None), "a boolean or a string is no message index"
    assert SessionMarker.remove(metadata) and metadata == {"other": 1} and not SessionMarker.remove(metadata)


def test_an_undo_applies_only_to_the_summary_it_undid_and_leaves_every_message():
    session = StandInSession("telegram:1", conversation(5))
    summary = record_for(session, 6)
    assert apply_record(session, summary) == ("applied", True)
    messages = list(session.messages)
    undo = SummaryRecord.undoing(session.key, "rolling summary", 6)
    other = StandInSession("telegram:1", conversation(5))
    apply_record(other, record_for(other, 6, summary="a newer summary"))
    assert apply_record(other, undo) == ("stale", False), "another summary than the one undone stays"
    assert other.metadata["_last_summary"]["text"] == "a newer summary" and other.last_archived == 6

    session.provider_state = {"replay": "after the summary"}
    assert apply_record(session, undo) == ("applied", True)
    assert session.messages == messages and session.last_archived == 0 and session.provider_state is None
    assert "_last_summary" not in session.metadata and set(session.metadata[METADATA_KEY]) == {"undone"}
    assert apply_record(session, undo) == ("duplicate", False), "undone already"
    assert not undo.fits(0, len(messages), None), "never applies as a summary"


def test_a_record_applies_once_so_the_same_record_after_an_undo_is_refused_and_a_newer_one_applies():
    session = StandInSession("telegram:1", conversation(5))
    summary = record_for(session, 6)
    assert apply_record(session, summary) == ("applied", True)
    undo = SummaryRecord.undoing(session.key, "rolling summary", 6)
    assert apply_record(session, undo) == ("applied", True)
    messages = list(session.messages)
    assert apply_record(session, summary) == ("replayed", False), "the same bytes, stored again after the undo"
    assert session.messages == messages and session.last_archived == 0 and "_last_summary" not in session.metadata
    assert "undo" in (refusal(session, summary) or "")
    assert apply_record(session, record_for(session, 6)) == ("applied", True), "a record made after the undo"


def test_a_record_expired_or_older_than_the_one_applied_is_refused_and_an_unreadable_stamp_never_crashes():
    session = StandInSession("telegram:1", conversation(5))
    now = datetime.now(timezone.utc)
    old = record_for(session, 6).model_copy(update={"created_at": now - timedelta(days=15)})
    assert apply_record(session, old) == ("replayed", False) and "expired" in (refusal(session, old) or "")
    newer = record_for(session, 6)
    earlier = record_for(session, 6, summary="made first").model_copy(update={"created_at": now - timedelta(hours=1)})
    assert apply_record(session, newer) == ("applied", True)
    assert (
        SessionMarker.from_metadata(session.metadata).refusal(earlier, now)
        == "replayed: older than the summary applied since"
    )
    # A hand-edited or another version's marker: a stamp that is no time is no refusal, never an error.
    marker = SessionMarker({"applied": {"created_at": "yesterday"}, "undone": {"created_at": 5}})
    assert marker.refusal(newer, now) is None and marker.undone is None
