"""What a job writes of a model's answer: the fallback's notes, the user's own lines (pure)."""

from __future__ import annotations

from worker.memory.entries import DailyNotes
from worker.memory.notes import has_notes
from worker.summarize.remember import FALLBACK_CHARS, dated_notes, fallback_note, user_said
from worker.text.prepare import Entry

SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"


def entries() -> list[Entry]:
    texts = [
        "[2026-11-20 09:00] user: I am allergic to peanuts",
        "[2026-11-20 09:01] assistant: Noted, I will keep that in mind.",
        f"[2026-11-20 09:02] user: my key is {SECRET}\n    and a second line",
        "[2026-11-20 09:03] tool result (web): user: not the user",
        f"[2026-11-20 09:04] user: {'long ' * 200}",
        "[2026-11-21 00:10] user: the next day",
        "user: no time at all",
    ]
    return [
        Entry(i, text[1:11] if text.startswith("[") else None, None, text, position=i) for i, text in enumerate(texts)
    ]


def test_the_fallback_writes_the_users_own_lines_of_the_day_redacted_trimmed_with_their_times() -> None:
    (first, second) = dated_notes([], entries())
    assert not has_notes(first), "no notes from the model: nothing to write"
    note = fallback_note(first, entries())
    assert note.verbatim and has_notes(note) and note.first_timestamp == first.first_timestamp
    assert note.topics[0] == "09:00 I am allergic to peanuts"
    assert note.topics[1].startswith("09:02 my key is ") and SECRET not in note.topics[1]
    assert note.topics[1].endswith("and a second line"), "one line"
    assert note.topics[2].startswith("09:04 long") and len(note.topics[2]) <= FALLBACK_CHARS + 6
    assert note.topics[2].endswith("…") and len(note.topics) == 3, "only the user's lines, only that day's"
    assert fallback_note(second, entries()).topics == ["00:10 the next day"]


def test_only_the_users_lines_are_the_users() -> None:
    said = [user_said(entry) for entry in entries()]
    assert [s is not None for s in said] == [True, False, True, False, True, True, True]
    assert said[-1] == ("", "no time at all")
    assert fallback_note(DailyNotes(date="2026-11-20"), []).topics == []
