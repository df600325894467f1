"""Daily notes: dated files, one section per session and span, append-only, idempotent, in the user's language."""

from __future__ import annotations

import string
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.memory.entries import DailyNotes, Fact, TechnicalIssue
from worker.memory.notes import (
    EMPTY_DIGEST,
    VERBATIM_HEADING,
    DayText,
    NothingNoted,
    Span,
    _append,
    append_notes,
    count_spans,
    is_noted,
    note_date,
    noted_spans,
    section,
    spans,
)
from worker.memory.writer import MemoryFiles
from worker.text.language import LANGUAGES

UTC = ZoneInfo("UTC")
KEY = "telegram:42"


def write(
    memory: MemoryFiles, notes: list[DailyNotes], language: str = "en", key: str = KEY, facts: list[Fact] | None = None
):
    """What a summary job hands the memory files."""
    return memory.write(key, notes, facts or [], language)


def stamps(noted: list) -> list[tuple[str, str]]:
    """The first and last timestamps of noted spans."""
    return [(span.first, span.last) for span in noted]


def late_evening() -> DailyNotes:
    return DailyNotes(
        date="2026-11-20",
        first_timestamp="2026-11-20T23:40:00",
        last_timestamp="2026-11-20T23:58:00",
        topics=["moving the blog to Hugo"],
        decisions=["keep the old URLs"],
        tasks=["export the posts"],
        technical_issues=[TechnicalIssue(problem="theme build failed", solution="pin Hugo 0.139")],
    )


def after_midnight() -> DailyNotes:
    return DailyNotes(
        date="2026-11-21",
        first_timestamp="2026-11-21T00:02:00",
        last_timestamp="2026-11-21T00:20:00",
        topics=["RSS feed"],
        insights=["feeds need absolute URLs"],
    )


def memory_bytes(workspace: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((workspace / "memory").glob("*.md"))}


async def test_a_conversation_across_midnight_lands_in_two_files(tmp_path: Path) -> None:
    memory = MemoryFiles(tmp_path, "UTC")
    result = await write(memory, [late_evening(), after_midnight()])
    assert result.notes_sections == 2
    first = (tmp_path / "memory" / "2026-11-20.md").read_text(encoding="utf-8")
    second = (tmp_path / "memory" / "2026-11-21.md").read_text(encoding="utf-8")
    assert first.startswith("# 2026-11-20\n") and second.startswith("# 2026-11-21\n")
    assert "moving the blog to Hugo" in first and "RSS feed" not in first
    assert "RSS feed" in second and "Hugo" not in second
    assert "- theme build failed → pin Hugo 0.139" in first
    assert f"## {KEY} · 23:40–23:58" in first and f"## {KEY} · 00:02–00:20" in second
    [span] = spans(second)
    assert (span.session, span.first, span.last) == (KEY, "2026-11-21T00:02:00", "2026-11-21T00:20:00")


FACTS = [
    Fact(text="The blog is built with Hugo 0.139", category="projects", importance=4),
    Fact(text="Prefers absolute URLs in feeds", category="preferences"),
    Fact(text="The blog now lives on Netlify", tag="correction", replaces="The blog lives on GitHub Pages"),
]


async def test_the_same_write_twice_changes_nothing(tmp_path: Path) -> None:
    memory = MemoryFiles(tmp_path, "UTC")
    first = await write(memory, [late_evening(), after_midnight()], facts=FACTS)
    assert (first.notes_sections, first.facts_added) == (2, 3)
    before = memory_bytes(tmp_path)
    assert set(before) == {"2026-11-20.md", "2026-11-21.md", "MEMORY.md"}
    again = await write(memory, [late_evening(), after_midnight()], facts=FACTS)
    assert (again.notes_sections, again.facts_added, again.facts_replaced) == (0, 0, 0)
    assert memory_bytes(tmp_path) == before
    # arq is at-least-once: a re-run's model may word things differently; the span decides.
    reworded = after_midnight().model_copy(update={"topics": ["the RSS feed, reworded"]})
    result = await write(memory, [late_evening(), reworded])
    assert result.notes_sections == 0
    assert memory_bytes(tmp_path) == before


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=200))
def test_appending_never_changes_a_byte_already_in_the_day_file(existing: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "2026-11-20.md"
        path.write_bytes(existing)
        append_notes(Path(folder), KEY, [late_evening()], "en", UTC)
        data = path.read_bytes()
        assert data.startswith(existing) and b"moving the blog to Hugo" in data


def test_empty_parts_are_left_out(tmp_path: Path) -> None:
    note = DailyNotes(
        date="2026-11-20",
        first_timestamp="2026-11-20T09:00:00",
        last_timestamp="2026-11-20T09:10:00",
        decisions=["ship on Friday"],
    )
    append_notes(tmp_path, KEY, [note], "en", UTC)
    text = (tmp_path / "2026-11-20.md").read_text(encoding="utf-8")
    assert "### Decisions\n- ship on Friday\n" in text
    for part, heading in LANGUAGES["en"].note_headings.items():
        if part != "decisions":
            assert heading not in text


@pytest.mark.parametrize("language", ["zh", "ja", "ko"])
def test_notes_get_headings_in_the_conversation_language(tmp_path: Path, language: str) -> None:
    note = DailyNotes(
        date="2026-11-20",
        first_timestamp="2026-11-20T09:00:00",
        last_timestamp="2026-11-20T09:30:00",
        topics=["部署脚本"],
        preferences=["喜欢简洁的回答"],
        decisions=["周五上线"],
        tasks=["写迁移脚本"],
        technical_issues=[TechnicalIssue(problem="登录失败", solution="清除缓存")],
        insights=["先测后发"],
    )
    append_notes(tmp_path, KEY, [note], language, UTC)
    text = (tmp_path / "2026-11-20.md").read_text(encoding="utf-8")
    for heading in LANGUAGES[language].note_headings.values():
        assert f"### {heading}\n" in text
    for heading in LANGUAGES["en"].note_headings.values():
        assert heading not in text


async def test_a_chinese_conversation_gets_chinese_notes(tmp_path: Path) -> None:
    memory = MemoryFiles(tmp_path, "Asia/Shanghai")
    note = DailyNotes(
        date="2026-11-20",
        first_timestamp="2026-11-20T20:00:00",
        last_timestamp="2026-11-20T20:30:00",
        topics=["博客迁移到 Hugo"],
        technical_issues=[TechnicalIssue(problem="主题构建失败", solution="固定 Hugo 版本")],
    )
    await write(memory, [note], language="zh")
    text = (tmp_path / "memory" / "2026-11-20.md").read_text(encoding="utf-8")
    assert "### 主要话题\n- 博客迁移到 Hugo\n" in text
    assert "### 技术问题与解决方案\n- 主题构建失败 → 固定 Hugo 版本\n" in text
    assert "Topics" not in text


def test_items_already_noted_for_the_session_that_day_are_not_repeated(tmp_path: Path) -> None:
    first = DailyNotes(
        date="2026-11-20",
        first_timestamp="2026-11-20T09:00:00",
        last_timestamp="2026-11-20T09:30:00",
        topics=["moving the blog to Hugo"],
        tasks=["export the posts"],
    )
    later = DailyNotes(
        date="2026-11-20",
        first_timestamp="2026-11-20T09:00:00",
        last_timestamp="2026-11-20T10:15:00",
        topics=["Moving the blog to Hugo.", "comments with giscus"],
        tasks=["export the posts"],
    )
    assert append_notes(tmp_path, KEY, [first], "en", UTC) == 1
    assert append_notes(tmp_path, KEY, [later], "en", UTC) == 1
    text = (tmp_path / "2026-11-20.md").read_text(encoding="utf-8")
    assert text.lower().count("moving the blog to hugo") == 1
    assert text.count("export the posts") == 1
    assert text.count("comments with giscus") == 1
    # Another session's identical item is its own note.
    other = first.model_copy(update={"first_timestamp": "2026-11-20T11:00:00", "last_timestamp": "2026-11-20T11:05:00"})
    append_notes(tmp_path, "cli:direct", [other], "en", UTC)
    assert (tmp_path / "2026-11-20.md").read_text(encoding="utf-8").count("export the posts") == 2


def test_a_new_span_with_nothing_new_leaves_only_its_marker(tmp_path: Path) -> None:
    note = DailyNotes(
        date="2026-11-20",
        first_timestamp="2026-11-20T09:00:00",
        last_timestamp="2026-11-20T09:30:00",
        topics=["moving the blog to Hugo"],
    )
    append_notes(tmp_path, KEY, [note], "en", UTC)
    again = note.model_copy(update={"last_timestamp": "2026-11-20T09:45:00"})
    assert append_notes(tmp_path, KEY, [again], "en", UTC) == 0
    text = (tmp_path / "2026-11-20.md").read_text(encoding="utf-8")
    assert text.count("moving the blog to Hugo") == 1 and text.count(f"## {KEY}") == 1
    assert stamps(noted_spans(tmp_path, KEY, "2026-11-20")) == [
        ("2026-11-20T09:00:00", "2026-11-20T09:30:00"),
        ("2026-11-20T09:00:00", "2026-11-20T09:45:00"),
    ]


def test_noted_spans_tell_which_messages_are_noted_with_gaps_left_open(tmp_path: Path) -> None:
    assert noted_spans(tmp_path, KEY, "2026-11-20") == []
    spans_of_day = [
        ("2026-11-20T09:00:00", "2026-11-20T09:30:00"),
        ("2026-11-20T13:00:00", "2026-11-20T14:05:00"),
        ("2026-11-20T10:00:00", "2026-11-20T10:10:00"),
    ]
    for number, (first, last) in enumerate(spans_of_day):
        note = DailyNotes(date="2026-11-20", first_timestamp=first, last_timestamp=last, topics=[f"topic {number}"])
        append_notes(tmp_path, KEY, [note], "en", UTC)
    other = DailyNotes(
        date="2026-11-20", first_timestamp="2026-11-20T22:00:00", last_timestamp="2026-11-20T23:00:00", topics=["x"]
    )
    append_notes(tmp_path, "websocket:a b-->c", [other], "en", UTC)
    noted = noted_spans(tmp_path, KEY, "2026-11-20")
    assert sorted(stamps(noted)) == sorted(spans_of_day)
    assert is_noted("2026-11-20T09:10:00", noted) and is_noted("2026-11-20T14:05:00", noted)
    assert not is_noted("2026-11-20T11:00:00", noted), "a gap between spans stays un-noted"
    assert not is_noted("2026-11-20T15:00:00", noted)
    assert stamps(noted_spans(tmp_path, "websocket:a b-->c", "2026-11-20")) == [
        ("2026-11-20T22:00:00", "2026-11-20T23:00:00")
    ]
    assert noted_spans(tmp_path, KEY, "2026-11-21") == []
    with pytest.raises(ValueError):
        noted_spans(tmp_path, KEY, "../MEMORY")


def test_spans_with_positions_hold_when_the_clock_goes_back_and_after_new_empties_the_session(tmp_path):
    """Positions decide where a marker has them; the time only has to be no later than the span's end."""
    note = DailyNotes(
        date="2026-11-01",
        first_timestamp="2026-11-01T01:00:00",
        last_timestamp="2026-11-01T01:39:00",
        first_position=0,
        last_position=39,
        topics=["the first time round"],
    )
    append_notes(tmp_path, KEY, [note], "en", UTC)
    assert "at=0-39 digest=" in (tmp_path / "2026-11-01.md").read_text(encoding="utf-8")
    noted = noted_spans(tmp_path, KEY, "2026-11-01")
    assert noted[0].at == (0, 39)
    assert is_noted("2026-11-01T01:10:00", noted, 10)
    assert not is_noted("2026-11-01T01:10:00", noted, 45), "the repeated hour comes after the span"
    assert not is_noted("2026-11-01T09:00:00", noted, 5), "/new: positions start again, at later times"
    assert is_noted("2026-11-01T01:10:00", noted), "a message of unknown position is judged by its time"
    old = [noted_spans(tmp_path, KEY, "2026-11-01")[0]._replace(at=None)]
    assert is_noted("2026-11-01T01:10:00", old, 45), "a marker written before positions: by time, as before"
    same = note.model_copy(update={"topics": ["the first time round"]})
    assert append_notes(tmp_path, KEY, [same], "en", UTC) == 0, "the same span again is no new section"
    moved = note.model_copy(update={"first_position": 40, "last_position": 79, "topics": ["after the change"]})
    assert append_notes(tmp_path, KEY, [moved], "en", UTC) == 1, "same times, later positions: a new span"


def test_a_span_of_the_next_generation_is_its_own_though_its_times_and_positions_match(tmp_path):
    """`/new` inside the repeated hour: the new conversation's positions and times fall inside the old span; the
    generation in the marker (`gen=1`) keeps the two apart, and markers without it are generation 0."""
    note = DailyNotes(
        date="2026-11-01",
        first_timestamp="2026-11-01T01:00:00",
        last_timestamp="2026-11-01T01:39:00",
        first_position=0,
        last_position=39,
        topics=["the first time round"],
    )
    append_notes(tmp_path, KEY, [note], "en", UTC)
    assert noted_spans(tmp_path, KEY, "2026-11-01", generation=1) == []
    assert is_noted("2026-11-01T01:10:00", noted_spans(tmp_path, KEY, "2026-11-01"), 10)
    after = note.model_copy(
        update={
            "first_timestamp": "2026-11-01T01:05:00",
            "last_timestamp": "2026-11-01T01:14:00",
            "last_position": 9,
            "generation": 1,
            "topics": ["after /new"],
        }
    )
    assert append_notes(tmp_path, KEY, [after], "en", UTC) == 1
    text = (tmp_path / "2026-11-01.md").read_text(encoding="utf-8")
    assert "at=0-9 gen=1 digest=" in text and [span.generation for span in spans(text)] == [0, 1]
    assert append_notes(tmp_path, KEY, [after], "en", UTC) == 0, "the same span of generation 1 again: nothing"
    (noted,) = noted_spans(tmp_path, KEY, "2026-11-01", generation=1)
    assert noted.at == (0, 9) and is_noted("2026-11-01T01:10:00", [noted], 5)


def test_appends_never_change_earlier_bytes(tmp_path: Path) -> None:
    path = tmp_path / "2026-11-20.md"
    user_bytes = b"# my own notes\n\xff\xfe not utf-8, and no newline at the end"
    path.write_bytes(user_bytes)
    append_notes(tmp_path, KEY, [late_evening().model_copy(update={"date": "2026-11-20"})], "en", UTC)
    after_first = path.read_bytes()
    assert after_first.startswith(user_bytes)
    assert after_first[len(user_bytes) :].startswith(b"\n\n<!-- nanobot-summary:notes")
    append_notes(tmp_path, "cli:direct", [after_midnight().model_copy(update={"date": "2026-11-20"})], "en", UTC)
    assert path.read_bytes().startswith(after_first)


def test_a_bad_date_from_the_model_never_escapes_the_folder(tmp_path: Path) -> None:
    note = DailyNotes(
        date="../../etc/passwd",
        first_timestamp="2026-11-20T09:00:00+00:00",
        last_timestamp="2026-11-20T09:05:00+00:00",
        topics=["x"],
    )
    assert note_date(note, ZoneInfo("Asia/Tokyo")) == "2026-11-20"
    late = note.model_copy(update={"first_timestamp": "2026-11-20T20:00:00+00:00"})
    assert note_date(late, ZoneInfo("Asia/Tokyo")) == "2026-11-21", "an aware stamp is dated in nanobot's timezone"
    append_notes(tmp_path / "memory", KEY, [note], "en", ZoneInfo("Asia/Tokyo"))
    assert sorted(p.name for p in (tmp_path / "memory").glob("*.md")) == ["2026-11-20.md"]


def test_notes_without_timestamps_are_deduplicated_by_content(tmp_path: Path) -> None:
    note = DailyNotes(date="2026-11-20", topics=["undated topic"])
    assert append_notes(tmp_path, KEY, [note], "en", UTC) == 1
    assert append_notes(tmp_path, KEY, [note], "en", UTC) == 0
    assert (tmp_path / "2026-11-20.md").read_text(encoding="utf-8").count("undated topic") == 1


def test_every_language_names_every_note_part_and_fact_group() -> None:
    from worker.text.language import CATEGORIES, NOTE_FIELDS

    assert set(LANGUAGES) >= {"en", "zh", "ja", "ko"}
    for lang in LANGUAGES.values():
        assert list(lang.note_headings) == list(NOTE_FIELDS) and all(lang.note_headings.values())
        assert list(lang.memory_groups) == list(CATEGORIES) and all(lang.memory_groups.values())


async def test_a_job_whose_model_noted_nothing_marks_nothing_noted_and_writes_no_file(
    nanobot_home, fake_llm, redis, deps_for
) -> None:
    """A real job whose model returned no notes for the user's messages: no marker anywhere says they were noted
    (once a digest of no text, e3b0c44298fc, in a hidden `.noted` file: the daily run then never noted them)."""
    from harness.fakellm import Reply
    from harness.models import summary_json
    from harness.transcripts import conversation
    from tests.support.workers import summarize_now

    fake_llm.default = Reply(summary_json())  # no daily notes
    nanobot_home.write_session(KEY, conversation(15))
    done = await summarize_now(redis, deps_for(), KEY)
    assert done.outcome.status == "summarized"
    assert "notes: none yet (the model's answer had no notes; asked again at the next run)" in done.outcome.detail
    memory = nanobot_home.workspace / "memory"
    assert sorted(memory.glob("*.md")) + sorted(memory.glob(".*.noted")) == [], "no file of markers"
    assert noted_spans(memory, KEY, "2026-11-20") == []
    empty = DailyNotes(date="2026-11-20", first_timestamp="2026-11-20T10:00:00", last_timestamp="2026-11-20T10:19:00")
    assert append_notes(memory, KEY, [empty], "en", UTC) == 0
    assert noted_spans(memory, KEY, "2026-11-20") == [], "a note without items marks nothing"
    later = DailyNotes(
        date="2026-11-20",
        first_timestamp="2026-11-20T10:20:00",
        last_timestamp="2026-11-20T10:29:00",
        topics=["the deploy script"],
    )
    assert append_notes(memory, KEY, [later], "en", UTC) == 1
    text = (memory / "2026-11-20.md").read_text(encoding="utf-8")
    assert (
        text.startswith("# 2026-11-20\n") and text.count("nanobot-summary:notes") == 1 and "the deploy script" in text
    )
    assert len(noted_spans(memory, KEY, "2026-11-20")) == 1


def test_no_marker_of_no_notes_is_ever_written_and_an_old_one_counts_as_not_noted(tmp_path: Path) -> None:
    """The check in the code that writes markers: a span is never marked noted without notes, whoever asks. A marker
    of no notes an older version left (in a day file or the hidden `.noted` file) is not taken for noted."""
    empty = Span(KEY, "2026-11-20T10:00:00", "2026-11-20T10:19:00", EMPTY_DIGEST)
    with pytest.raises(NothingNoted):
        section(DailyNotes(date="2026-11-20", first_timestamp="2026-11-20T10:00:00"), KEY, "en", DayText(), UTC)
    memory = tmp_path / "memory"
    memory.mkdir()
    with pytest.raises(NothingNoted):
        _append(memory / "2026-11-20.md", f"\n{empty.marker()}\n")
    assert not (memory / "2026-11-20.md").exists()
    assert EMPTY_DIGEST == "e3b0c44298fc"
    (memory / ".2026-11-20.noted").write_text(f"{empty.marker()}\n", encoding="utf-8")
    older = replace(empty, first="2026-11-21T09:00:00", last="2026-11-21T09:30:00")
    (memory / "2026-11-21.md").write_text(f"# 2026-11-21\n\n{older.marker()}\n", encoding="utf-8")
    assert noted_spans(memory, KEY, "2026-11-20") == [] and noted_spans(memory, KEY, "2026-11-21") == []
    for old in (memory / ".2026-11-20.noted", memory / "2026-11-21.md"):
        old.unlink()  # an older version's files: the suite checks that no test leaves one


def test_a_fallback_section_says_it_is_verbatim_in_its_marker_and_heading(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    note = DailyNotes(
        date="2026-11-20",
        first_timestamp="2026-11-20T10:00:00",
        last_timestamp="2026-11-20T10:19:00",
        topics=["10:00 I am allergic to peanuts"],
        verbatim=True,
    )
    assert append_notes(memory, KEY, [note, late_evening()], "en", UTC) == 2
    text = (memory / "2026-11-20.md").read_text(encoding="utf-8")
    assert f"### {VERBATIM_HEADING}\n- 10:00 I am allergic to peanuts" in text and " by=fallback " in text
    (span, other) = spans(text)
    assert span.fallback and not other.fallback
    assert count_spans(memory) == (2, 1)
    assert count_spans(memory, since=time.time() + 60) == (0, 0), "only the files written since"


def test_a_day_file_is_parsed_once_and_followed_yet_another_writers_append_or_an_edit_is_seen(tmp_path: Path):
    """A busy day appends a section per job: the notes are read whole once, then only what this process
    appends; another worker's append is read alone, and the user's edit is seen in the file's stamp."""
    from worker.memory import notes as notes_module

    def note(hour: int, topic: str, key: str = KEY) -> DailyNotes:
        return DailyNotes(
            date="2026-11-20",
            first_timestamp=f"2026-11-20T{hour:02d}:00:00",
            last_timestamp=f"2026-11-20T{hour:02d}:30:00",
            topics=[topic],
        )

    path = tmp_path / "2026-11-20.md"
    append_notes(tmp_path, KEY, [note(9, "the nginx port")], "en", UTC)
    parses = []
    real_parse = notes_module.DAYS._parse
    notes_module.DAYS._parse = lambda text: parses.append(len(text)) or real_parse(text)
    try:
        for hour in range(10, 14):
            append_notes(tmp_path, KEY, [note(hour, f"topic of {hour}")], "en", UTC)
            noted_spans(tmp_path, KEY, "2026-11-20")
        assert parses == [], "this process's own appends are followed, never read again"
        with path.open("a", encoding="utf-8") as other_worker:  # another worker's section, by hand
            span = notes_module.Span("cli:direct", "2026-11-20T15:00:00", "2026-11-20T15:10:00", "a" * 12)
            other_worker.write(f"\n{span.marker()}\n## cli:direct\n\n### Topics\n- the backup script\n")
        assert stamps(noted_spans(tmp_path, "cli:direct", "2026-11-20")) == [
            ("2026-11-20T15:00:00", "2026-11-20T15:10:00")
        ]
        assert parses == [], "another worker's append is parsed alone"
        assert append_notes(tmp_path, "cli:direct", [note(16, "The backup script.", "cli:direct")], "en", UTC) == 0, (
            "its items count as noted too"
        )
        path.write_text(path.read_text(encoding="utf-8").replace("the nginx port", "the NGINX port!"), encoding="utf-8")
        assert append_notes(tmp_path, KEY, [note(17, "the NGINX port!")], "en", UTC) == 0, "the user's edit is seen"
        assert len(parses) == 1, "an edit is read whole"
    finally:
        notes_module.DAYS._parse = real_parse
    assert stamps(noted_spans(tmp_path, KEY, "2026-11-20")) == [
        (f"2026-11-20T{hour:02d}:00:00", f"2026-11-20T{hour:02d}:30:00") for hour in (9, 10, 11, 12, 13, 17)
    ]


def test_another_processs_appends_to_a_long_day_file_are_read_alone_and_an_edit_in_the_middle_is_seen(tmp_path: Path):
    """Two workers of one instance append to one day file: each used to read the file whole after the other's
    every append (1.22 MB a job late on a busy day). What another process appended is read alone (the bytes
    read count it); an edit in the middle of the file, with an append after it, is still read whole."""
    import subprocess
    import sys

    from worker.memory import notes as notes_module
    from worker.memory.followed import EDGE

    def note(n: int, topic: str, key: str = KEY) -> DailyNotes:
        return DailyNotes(
            date="2026-11-20",
            first_timestamp=f"2026-11-20T10:{n // 60:02d}:{n % 60:02d}",
            last_timestamp=f"2026-11-20T10:{n // 60:02d}:{n % 60:02d}",
            topics=[topic],
        )

    def other_worker_appends(text: str) -> int:
        subprocess.run(
            [sys.executable, "-c", "import sys; open(sys.argv[1], 'ab').write(sys.argv[2].encode())", str(path), text],
            check=True,
        )
        return len(text.encode("utf-8"))

    path = tmp_path / "2026-11-20.md"
    for n in range(120):
        append_notes(tmp_path, KEY, [note(n, f"the topic number {n} of a long morning")], "en", UTC)
    assert path.stat().st_size > 4 * EDGE
    noted_spans(tmp_path, KEY, "2026-11-20")
    read_before = notes_module.DAYS.bytes_read
    section = (
        f"{notes_module.Span('cli:direct', '2026-11-20T15:00:00', '2026-11-20T15:10:00', 'a' * 12).marker()}"
        "\n## cli:direct\n\n### Topics\n- the backup script\n"
    )
    appended = other_worker_appends(section)
    assert stamps(noted_spans(tmp_path, "cli:direct", "2026-11-20")) == [("2026-11-20T15:00:00", "2026-11-20T15:10:00")]
    read = notes_module.DAYS.bytes_read - read_before
    assert appended <= read <= appended + EDGE, f"{read} bytes read for an append of {appended}"
    assert append_notes(tmp_path, "cli:direct", [note(200, "The backup script.", "cli:direct")], "en", UTC) == 0

    text = path.read_bytes()
    with path.open("r+b") as editor:  # the user edits a line far from the end, in place; another append follows
        editor.write(text.replace(b"the topic number 7 of", b"the topic number SEVEN of", 1))
    other_worker_appends(section.replace("15:", "16:"))
    read_before = notes_module.DAYS.bytes_read
    assert append_notes(tmp_path, KEY, [note(201, "the topic number SEVEN of a long morning")], "en", UTC) == 0, (
        "the edit in the middle is seen"
    )
    assert notes_module.DAYS.bytes_read - read_before >= path.stat().st_size, "read whole"
    assert ("2026-11-20T16:00:00", "2026-11-20T16:10:00") in stamps(noted_spans(tmp_path, "cli:direct", "2026-11-20"))


def test_a_notes_items_stay_out_of_the_caches_of_memory_lines(tmp_path: Path) -> None:
    """one_line's and normalize's caches are for MEMORY.md's lines, which come back on every merge; a note's items
    are met once (the day's parse keeps their keys). A daily job noting a huge day filled both caches with its items
    and held them to its end (65,536 of each, tens of MB: issue 33 point 10)."""
    from worker.memory.dedup import normalize
    from worker.text.redact import one_line

    one_line.cache_clear()
    normalize.cache_clear()
    notes = [
        DailyNotes(
            date="2026-11-20",
            first_timestamp=f"2026-11-20T{hour:02d}:00:00",
            last_timestamp=f"2026-11-20T{hour:02d}:30:00",
            topics=[f"topic {i} of {hour}" for i in range(50)],
            technical_issues=[TechnicalIssue(problem=f"problem of {hour}", solution=f"fix of {hour}")],
        )
        for hour in range(20)
    ]
    assert append_notes(tmp_path, KEY, notes, "en", UTC) == 20
    assert append_notes(tmp_path, KEY, notes, "en", UTC) == 0, "the second time, every span is noted already"
    assert len(noted_spans(tmp_path, KEY, "2026-11-20")) == 20
    cached = one_line.cache_info().currsize + normalize.cache_info().currsize
    assert cached <= 2, f"{cached} texts cached for 1,040 items (the session key's heading may be)"


@given(
    st.text(alphabet=string.printable + "'`", max_size=60),
    st.integers(0, 60),
    st.integers(0, 60),
    st.text(alphabet=string.printable, max_size=8),
)
@settings(max_examples=300, deadline=None)
def test_holds_tells_an_ascii_line_without_normalizing_it_as_normalizing_it_would(line, start, end, extra) -> None:
    """forget everywhere's test of a line (notes.holds) skips the normalization of an ASCII line that lacks a word:
    it answers as the whole rule does, apostrophes, punctuation and symbols inside words included."""
    from worker.memory.dedup import normalize_uncached
    from worker.memory.notes import holds, key_words

    words = key_words(line[start:end] + extra)
    normalized = normalize_uncached(line)
    whole = bool(words) and all(
        word in normalized.split() or (not word.isascii() and word in normalized) for word in words
    )
    assert holds(line, words) == whole


def test_holds_finds_words_across_apostrophes_widths_and_scripts() -> None:
    from worker.memory.notes import holds, key_words

    assert holds("I don't like C++, said Dr. O'Rowe", key_words("dont c++ orowe"))
    assert holds("ＤＲ ＲＯＷＥ on Thursdays", key_words("Dr. Rowe"))  # full-width letters: not ASCII, normalized
    assert not holds("Dr Rowe", key_words("Dr. Rowe 周四")) and holds("Dr Rowe 周四见", key_words("Dr. Rowe 周四"))
