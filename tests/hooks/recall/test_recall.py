"""The recall index (worker) and its search (nanobot_hooks): languages, dates, who sees what, rebuilds, crashes."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import subprocess
import sys
import tracemalloc
from contextlib import closing
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest

from harness.fakellm import Reply
from harness.models import summary_json
from harness.sandbox import NanobotHome
from harness.transcripts import conversation
from nanobot_hooks import plugin
from nanobot_hooks.contract.recall import PAGE_BYTES, RECALL_INDEX, index_text, length
from nanobot_hooks.contract.session_format import is_direct_chat
from nanobot_hooks.recall import rank
from nanobot_hooks.recall import search as recall
from nanobot_hooks.recall import tool as recall_tool
from nanobot_hooks.recall.hits import Hit, Source, search_order, visible_sources
from nanobot_hooks.recall.query import read_query, terms
from nanobot_hooks.recall.search import search
from nanobot_hooks.recall.snippets import snippet
from nanobot_hooks.settings import HookSettings, load_settings
from tests.support.bench import load_bench
from tests.support.paths import ROOT
from tests.support.workers import summarize_now
from worker.memory.recall_index import RecallIndex, memory_rows, note_rows
from worker.nanobot.sessions import read_session

UTC = ZoneInfo("UTC")
DM, OTHER_DM, GROUP = "telegram:42", "telegram:77", "telegram:-100123"
SECRET = "sk-proj-" + "Q7w" * 12

DM_MESSAGES = [
    ("2026-11-20T10:00:00", "user", "预发环境的数据库端口改成 54329 了，记一下"),
    ("2026-11-20T10:01:00", "assistant", "好的，预发数据库端口 54329。"),
    ("2026-11-21T09:00:00", "user", "本番サーバーのポートは 8443 にしてください"),
    ("2026-11-21T09:01:00", "assistant", "了解しました。ポート 8443 に変更します。"),
    ("2026-11-22T18:00:00", "user", f"The nginx upstream timeout is 75 seconds; my OpenAI key is {SECRET}"),
    ("2026-11-22T18:01:00", "assistant", "Noted: nginx upstream timeout 75s."),
    ("2026-11-23T08:00:00", "user", "still in context, not archived: 端口 99999"),
]
DAY_NOTES = """# 2026-11-20

<!-- nanobot-summary:notes session=telegram:42 first=2026-11-20T10:00:00 last=2026-11-20T10:01:00 digest=aaaaaaaaaaaa -->
## telegram:42 · 10:00–10:01

### 重要决定
- 预发数据库端口定为 54329

<!-- nanobot-summary:notes session=telegram:-100123 first=2026-11-20T11:00:00 last=2026-11-20T11:05:00 digest=bbbbbbbbbbbb -->
## telegram:-100123 · 11:00–11:05

### 主要话题
- 群里讨论团建地点：杭州西湖
"""  # noqa: E501  (the markers are one line each, as the worker writes them)
MEMORY = """# Long-term Memory

- I live in Hangzhou. (written by the user)

<!-- nanobot-summary:begin lang=en: facts kept by the summary worker -->
## Remembered from conversations

### Projects
- The blog is built with Hugo 0.139 <!-- i4 2026-11-21 -->
<!-- nanobot-summary:end -->
"""


def _messages(rows: list[tuple[str, str, str]]) -> list[dict]:
    return [{"role": role, "content": text, "timestamp": stamp} for stamp, role, text in rows]


@pytest.fixture
def home(tmp_path: Path) -> NanobotHome:
    """A DM with 6 archived messages (one still in context), another DM, a group, notes and MEMORY.md."""
    home = NanobotHome.create(tmp_path, "http://127.0.0.1:9/v1")
    home.write_session(DM, _messages(DM_MESSAGES), last_archived=6)
    home.write_session(
        OTHER_DM, _messages([("2026-11-20T12:00:00", "user", "另一个私聊：备份端口 6000")]), last_archived=1
    )
    home.write_session(
        GROUP, _messages([("2026-11-20T11:00:00", "user", "群聊：团建在杭州西湖，端口 7777")]), last_archived=1
    )
    memory = home.workspace / "memory"
    memory.mkdir()
    (memory / "2026-11-20.md").write_text(DAY_NOTES, encoding="utf-8")
    (memory / "MEMORY.md").write_text(MEMORY, encoding="utf-8")
    return home


@pytest.fixture
def index(home: NanobotHome) -> RecallIndex:
    built = RecallIndex(home.workspace, UTC)
    built.refresh(home.sessions_dir)
    return built


def trusted(key: str) -> bool:
    return is_direct_chat(key)


def ask(home: NanobotHome, query: str, asker: str | None = DM, **options) -> str:
    return search(home.workspace, query, asker, trusted, **options)


def archive(home: NanobotHome, index: RecallIndex, rows: list[tuple[str, str, str]]) -> None:
    """The DM's messages, every one archived, in the index."""
    home.write_session(DM, _messages(rows), last_archived=len(rows))
    index.refresh(home.sessions_dir)


def from_notes(answer: str) -> str:
    """The snippets of the daily-notes passages of an answer."""
    lines = answer.split("\n")
    return "\n".join(lines[n + 1] for n, line in enumerate(lines) if NUMBERED.match(line) and "daily notes" in line)


NUMBERED = re.compile(r"^\d+\. ")


def test_chinese_japanese_and_english_queries_find_the_archived_passages_with_dates(home, index):
    chinese = ask(home, "数据库 端口")  # a 3-letter word and a 2-letter one, both found by their bigrams
    assert "54329" in chinese and "2026-11-20 10:00 · this conversation, message 0 (user)" in chinese
    assert "daily notes memory/2026-11-20.md, this conversation, 重要决定" in chinese
    assert "99999" not in chinese, "a message still in the context is not archived"
    two_characters = ask(home, "端口")
    assert "54329" in two_characters
    japanese = ask(home, "ポート")
    assert "8443" in japanese and "2026-11-21 09:00" in japanese
    english = ask(home, "NGINX timeout")
    assert "75 seconds" in english and "2026-11-22 18:00" in english
    assert english.index("message 5 (assistant)") < english.index("message 4"), "both hold both terms: newer first"
    ranked = ask(home, "upstream seconds")
    assert ranked.index("message 4 (user)") < ranked.index("message 5"), "more of the terms first"
    memory = ask(home, "Hugo")
    assert "MEMORY.md line 9 (learned 2026-11-21, Projects)" in memory and "Hugo 0.139" in memory


def test_a_secret_is_not_searchable_and_never_shown(home, index):
    assert ask(home, SECRET).startswith("Nothing found")
    assert ask(home, SECRET[8:20]).startswith("Nothing found")
    shown = ask(home, "OpenAI key")
    assert "[REDACTED]" in shown and SECRET not in shown


def test_a_date_range_keeps_only_passages_of_those_days(home, index):
    everything = ask(home, "端口")
    assert "2026-11-20" in everything
    later = ask(home, "8443 端口 ポート", date_from="2026-11-21", date_to="2026-11-21")
    assert "2026-11-21 09:00" in later and "2026-11-20" not in later.split("\n", 1)[1]
    assert "between 2026-11-21 and 2026-11-21" in later
    assert ask(home, "端口", date_to="2026-11-19").startswith("Nothing found")
    assert "MEMORY.md" in ask(home, "Hugo", date_from="2026-11-21") and ask(
        home, "Hugo", date_to="2026-11-20"
    ).startswith("Nothing found"), "facts are dated by when they were learned"
    with pytest.raises(ValueError, match="date_from must be a date written YYYY-MM-DD"):
        ask(home, "端口", date_from="last tuesday")


def test_a_session_never_sees_what_it_must_not(home, index):
    group = ask(home, "端口", asker=GROUP)
    assert "7777" in group and "54329" not in group and "6000" not in group
    assert "54329" not in ask(home, "端口", asker=GROUP, scope="trusted"), "an untrusted session never widens"
    assert ask(home, "杭州西湖").startswith("Nothing found"), "the group's notes are the group's"
    assert "6000" not in ask(home, "端口"), "by default not even the user's other private chat"
    widened = ask(home, "端口", scope="trusted")
    assert "6000" in widened and "conversation telegram:77, message 0" in widened and "7777" not in widened
    nobody = ask(home, "端口 Hugo", asker=None)
    assert "Hugo" in nobody and "54329" not in nobody, "no session: MEMORY.md only"


def test_visible_sources_is_the_rule_in_one_place():
    sources = [
        Source(1, "messages", DM),
        Source(2, "notes", DM),
        Source(3, "memory", ""),
        Source(4, "messages", GROUP),
        Source(5, "messages", OTHER_DM),
    ]
    ids = lambda *args: [p.id for p in visible_sources(sources, *args)]  # noqa: E731
    assert ids(DM, trusted, "session") == [1, 2, 3]
    assert ids(DM, trusted, "trusted") == [1, 2, 3, 5]
    assert ids(GROUP, trusted, "trusted") == [3, 4]
    assert ids(None, trusted, "trusted") == [3]


def test_a_missing_or_unreadable_index_is_nothing_found_not_an_error(home, tmp_path):
    assert ask(home, "端口") == "Nothing found for '端口': no archive has been indexed yet."
    (home.workspace / RECALL_INDEX).parent.mkdir(exist_ok=True)
    (home.workspace / RECALL_INDEX).write_bytes(b"not a database at all" * 100)
    assert ask(home, "端口").startswith("Nothing found for '端口': the archive index cannot be read")
    assert ask(home, "x").startswith("Nothing to search for")


def test_the_index_is_rebuilt_from_the_files_when_missing_damaged_or_of_another_version(home, index):
    before = ask(home, "数据库 端口")
    path = home.workspace / RECALL_INDEX
    index.discard()
    assert not path.exists()
    assert "rebuilt" in str(index.refresh(home.sessions_dir, None))
    assert ask(home, "数据库 端口") == before
    path.write_bytes(b"garbage" * 1000)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    assert "rebuilt" in str(index.refresh(home.sessions_dir))
    assert ask(home, "数据库 端口") == before
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    assert ask(home, "端口").endswith("the archive index is being rebuilt.")
    assert "rebuilt" in str(index.refresh(home.sessions_dir))
    assert ask(home, "数据库 端口") == before


def test_changed_files_are_followed_a_reset_session_forgets_and_a_deleted_day_goes(home, index):
    day = home.workspace / "memory" / "2026-11-20.md"
    day.write_text(DAY_NOTES.replace("54329", "54330"), encoding="utf-8")
    assert "files re-read" in str(index.refresh(home.sessions_dir))
    notes = from_notes(ask(home, "预发数据库端口定为"))
    assert "54330" in notes and "54329" not in notes
    day.unlink()
    index.refresh(home.sessions_dir)
    assert "daily notes memory/" not in ask(home, "端口")
    home.write_session(DM, _messages([("2026-11-24T10:00:00", "user", "a fresh start after /new")]))
    index.refresh(home.sessions_dir)
    assert ask(home, "端口").startswith("Nothing found"), "nanobot's /new emptied the session"
    assert "7777" in ask(home, "端口", asker=GROUP)
    home.session_file(GROUP).unlink()
    index.refresh(home.sessions_dir)
    assert ask(home, "端口", asker=GROUP).startswith("Nothing found"), "a deleted session file is forgotten"


APPENDED = """
<!-- nanobot-summary:notes session=telegram:42 first=2026-11-20T15:00:00 last=2026-11-20T15:10:00 digest=cccccccccccc -->
## telegram:42 · 15:00–15:10

### 待办事项
- 周五前把备份脚本迁到 cron 7731
"""  # noqa: E501  (the marker is one line, as the worker writes it)


def _passages(home: NanobotHome) -> tuple[list[tuple], list[tuple]]:
    """The index's passages (each with its text, unpacked) and every word instance its full-text index holds:
    a passage dropped with other words than it was indexed from would leave words behind."""
    from nanobot_hooks.contract.recall import lengths, unpack

    with closing(sqlite3.connect(f"{(home.workspace / RECALL_INDEX).as_uri()}?mode=ro", uri=True)) as db:
        held: dict[int, tuple] = {}
        for (packed,) in db.execute("SELECT passages FROM blocks"):
            held.update(unpack(packed))
        listed = sorted(
            rowid
            for number, data in db.execute("SELECT id, lengths FROM blocks")
            for rowid in lengths(number, data).rowids()
        )
        rows = [(rowid, *held.pop(rowid)) for rowid in listed]
        assert not held, "no text is kept of a passage that went"
        db.execute("CREATE VIRTUAL TABLE temp.words USING fts5vocab(main, passages, 'instance')")
        return rows, db.execute("SELECT term, doc, col, offset FROM temp.words ORDER BY 1, 2, 3, 4").fetchall()


def test_a_day_file_that_grew_has_only_its_new_sections_read_and_an_edited_one_is_read_whole(home, index, monkeypatch):
    from worker.memory.recall_index import memory_files

    read: list[str] = []
    real = memory_files.note_rows
    monkeypatch.setattr(memory_files, "note_rows", lambda text, *args: read.append(text) or real(text, *args))
    day = home.workspace / "memory" / "2026-11-20.md"
    with day.open("a", encoding="utf-8") as out:
        out.write(APPENDED)
    index.refresh(home.sessions_dir)
    assert read == [APPENDED], "only the appended section is read"
    assert "7731" in ask(home, "备份脚本") and "54329" in ask(home, "预发数据库端口定为")
    grown = _passages(home)
    index.discard()
    index.refresh(home.sessions_dir)
    assert _passages(home) == grown, "the same rows as a rebuild from the whole file"

    # An edit before the indexed point (same size, so only the digest can tell), with a section appended.
    read.clear()
    day.write_text(
        day.read_text(encoding="utf-8").replace("54329", "54330") + APPENDED.replace("7731", "7732"), encoding="utf-8"
    )
    index.refresh(home.sessions_dir)
    assert len(read) == 1 and read[0].startswith("# 2026-11-20"), "the edited file is read whole"
    notes = from_notes(ask(home, "预发数据库端口定为"))
    assert "54330" in notes and "54329" not in notes
    # Text appended under the last section (no marker of its own), then a file truncated: read whole.
    for change in (lambda text: text + "- 追加在最后一节里 6061\n", lambda text: text[: len(text) // 2]):
        read.clear()
        day.write_text(change(day.read_text(encoding="utf-8")), encoding="utf-8")
        index.refresh(home.sessions_dir)
        assert len(read) == 1 and read[0].startswith("# 2026-11-20")
    edited = _passages(home)
    index.discard()
    index.refresh(home.sessions_dir)
    assert _passages(home) == edited


def test_a_job_that_read_from_the_watermark_still_indexes_what_came_before_it(home):
    from worker.nanobot.sessions import read_session

    rows = [(f"2026-11-25T10:{m:02d}:00", "user", f"behind the watermark {m} 端口") for m in range(30)]
    home.write_session(DM, _messages(DM_MESSAGES + rows), last_archived=len(DM_MESSAGES) + 20)
    session = read_session(home.sessions_dir, DM, from_watermark=True)
    assert session.first > 0
    fresh = RecallIndex(home.workspace, UTC)
    fresh.refresh(home.sessions_dir, session, len(DM_MESSAGES) + 25)  # a new index: every session is read
    assert "54329" in ask(home, "数据库 端口") and "behind the watermark 24 " in ask(home, "behind the watermark 24")
    # A session reset with /new, then read from its (new) watermark: indexed anew from its first message.
    reset = [(f"2026-11-26T10:{m:02d}:00", "user", f"after new code{m:03d}q") for m in range(9)]
    home.write_session(DM, _messages(reset), last_archived=8)
    session = read_session(home.sessions_dir, DM, from_watermark=True)
    fresh.refresh(home.sessions_dir, session, 8)
    assert "code000q" in ask(home, "code000q") and "改成 54329" not in ask(home, "预发环境的数据库端口")


def test_an_update_killed_midway_leaves_a_usable_index_and_the_next_refresh_completes(home, index):
    long = [
        (f"2026-11-25T{h:02d}:{m:02d}:00", "user", f"kill test line {h * 60 + m} 端口")
        for h in range(3)
        for m in range(60)
    ]
    home.write_session(DM, _messages(DM_MESSAGES + long), last_archived=len(DM_MESSAGES) + len(long))
    crash = f"""
import os, sys
sys.path.insert(0, {str(ROOT)!r})
from pathlib import Path
from zoneinfo import ZoneInfo
from worker.memory import recall_index
from worker.memory.recall_index import messages
messages.MESSAGES_PER_TRANSACTION = 50
calls = []
real = messages.insert
def insert_then_die(db, part, rows):
    real(db, part, rows)
    calls.append(1)
    if len(calls) == 3:
        os._exit(9)  # inside the third transaction: no rollback, no close, as in a crash
messages.insert = insert_then_die
recall_index.RecallIndex(Path({str(home.workspace)!r}), ZoneInfo("UTC")).refresh(Path({str(home.sessions_dir)!r}))
"""
    died = subprocess.run([sys.executable, "-c", crash], capture_output=True, text=True, timeout=60)
    assert died.returncode == 9, died.stderr
    with sqlite3.connect(f"{(home.workspace / RECALL_INDEX).as_uri()}?mode=ro", uri=True) as db:
        (through,) = db.execute("SELECT through FROM sources WHERE kind = 'messages' AND session = ?", (DM,)).fetchone()
    assert through == 6 + 2 * 50, "two steps of 50 were committed, the third was not"
    assert "54329" in ask(home, "数据库 端口"), "what was committed before the crash is still found"
    latest = ask(home, "kill")
    assert "kill test line 98 " in latest and "kill test line 99 " not in latest
    index.refresh(home.sessions_dir)
    assert "kill test line 179" in ask(home, "kill test line 179")
    assert "54329" in ask(home, "数据库 端口")


# A "huge" session of the tests: ~2 MB read in 16 KB windows (some 120 of them) proves the windowing as a
# 200 MB one in 4 MB windows does (bench/bench_bigsession.py measures that), in a few seconds instead of a minute.
HUGE_ROWS, HUGE_WINDOW = 3_000, 16 * 1024


@pytest.mark.slow  # a whole first fill under tracemalloc
def test_a_huge_sessions_first_fill_holds_one_window_of_it_at_a_time_and_indexes_every_message(home, monkeypatch):
    from worker.memory.recall_index import messages

    # The window shrunk with the file: the windowing is what is tested (bench/bench_bigsession.py, 200 MB).
    monkeypatch.setattr(messages, "WINDOW_BYTES", HUGE_WINDOW)
    monkeypatch.setattr(messages, "MESSAGES_PER_TRANSACTION", 50)
    rows = [
        (
            f"2026-11-{1 + i // 1440:02d}T{i // 60 % 24:02d}:{i % 60:02d}:00",
            "user",
            f"huge line {i} zq{i}q " + "端口 deploy " * 40,
        )
        for i in range(HUGE_ROWS)
    ]
    path = home.write_session(DM, _messages(rows), last_archived=len(rows) - 10)
    session = read_session(home.sessions_dir, DM, from_watermark=True)  # as the job reads it
    fresh = RecallIndex(home.workspace, UTC)
    tracemalloc.start()
    try:
        fresh.refresh(home.sessions_dir, session, len(rows) - 10)  # an empty index: the whole history to fill
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = path.stat().st_size
    assert peak < size / 3, f"{peak / 2**20:.1f} MB at the peak to index a {size / 2**20:.1f} MB session"
    for number in (0, HUGE_ROWS // 2, HUGE_ROWS - 11):
        assert f"huge line {number} " in ask(home, f"zq{number}q"), number
    last = HUGE_ROWS - 10
    assert f"huge line {last} " not in ask(home, f"zq{last}q"), "what is still in the context is not indexed"


def test_the_search_stops_at_its_time_budget_and_says_so(home, index):
    lines = [(f"2026-11-26T{i // 60:02d}:{i % 60:02d}:00", "user", f"budget line {i} port") for i in range(1200)]
    home.write_session(DM, _messages(lines), last_archived=len(lines))
    index.refresh(home.sessions_dir)
    answer = ask(home, "budget line port", budget=0.0)
    assert answer.startswith("Nothing found") and "time limit" in answer
    assert "budget line 1199" in ask(home, "budget line port")


def test_a_passage_holding_every_term_comes_first_however_many_newer_passages_hold_one(home, index):
    old = [("2026-10-01T09:00:00", "user", "zx00007 lives on the staging server, rack 4")]
    start = datetime(2026, 11, 1, 8, 0)
    newer = [
        (
            (start + i * (datetime(2026, 11, 1, 8, 1) - start)).isoformat(),
            "assistant",
            f"zx00007 build log line {i}" if i % 2 else f"the server restarted, line {i}",
        )
        for i in range(800)
    ]
    home.write_session(DM, _messages(old + newer), last_archived=1 + len(newer))
    index.refresh(home.sessions_dir)
    both = ask(home, "zx00007 server")
    assert both.split("\n")[1].endswith("this conversation, message 0 (user)"), both
    assert "rack 4" in both.split("\n")[2]
    assert "line 799" in both and "line 798" in both, "then the newest passages holding one of the terms"
    two_of_three = ask(home, "zx00007 server kubernetes")
    assert "rack 4" in two_of_three.split("\n")[2], "fewer terms, still ranked by how many it holds"
    dated = ask(home, "zx00007 server", date_to="2026-10-31")
    assert "rack 4" in dated and "line" not in dated


def test_a_rare_word_outranks_a_name_found_everywhere_and_the_answer_after_the_question_comes_too(home, index):
    start = datetime(2026, 6, 1, 9, 0)
    said = [
        "Did you go to the audition for the musical yesterday?",
        "I did! They offered me the lead role.",
        "小明，你的面试怎么样？",
        "面试通过了，下周一入职。",
        "我家的猫叫咪咪。",
        "Going to an art show always comforts me; the last one impressed my sister.",
        "My sister was there too. " + "And more. " * 40 + "Her brother is a sculptor.",
    ]
    chat = [f"Bye Anna! See you {n}" if n % 2 else f"小明，早上好 {n}" for n in range(300)]
    rows = [
        ((start + n * (datetime(2026, 6, 1, 9, 1) - start)).isoformat(), ("user", "assistant")[n % 2], text)
        for n, text in enumerate(said + chat)
    ]
    archive(home, index, rows)
    first = ask(home, "Anna audition").split("\n")
    assert first[1].endswith("message 0 (user)"), "the one rare word, not the newest of 150 'Bye Anna!'"
    assert "message 1 (assistant)" in "\n".join(first) and "lead role" in "\n".join(first), "and the answer to it"
    assert ask(home, "What did I tell you about the audition?").split("\n")[1].endswith("message 0 (user)")
    assert ask(home, "小明面试").split("\n")[1].endswith("message 2 (user)"), "Chinese: the rare word too"
    assert [line for line in ask(home, "小明面试怎么样").split("\n") if NUMBERED.match(line)][1].endswith(
        "message 3 (assistant)"
    )
    assert "咪咪" in ask(home, "猫"), "a one-letter Chinese word"
    shows = ask(home, "What does she find comforting about going to art shows?").split("\n")
    assert shows[1].endswith("message 5 (assistant)"), "inflections: shows/show, comforting/comforts"
    assert "impressed" in ask(home, "impresses"), "impresses finds impressed"
    lines = ask(home, "sister sculptor").split("\n")
    long = lines[lines.index(next(line for line in lines if line.endswith("message 6 (user)"))) + 1]
    assert "sculptor" in long and long.startswith("   …"), "the snippet shows the rarest matched word"


def test_a_neighbour_is_shown_under_its_hit_not_as_a_passage_unless_it_holds_the_words(home, index):
    said = [
        "Where does the staging database run?",
        "ok reply 1",
        "filler two",
        "ok reply 3",
        "The staging database runs on port 54329.",
        "ok reply 5",
        "filler six",
        "the port of staging is fixed",
        "noted, staging it is",
    ] + [f"filler {n}" for n in range(9, 40)]
    rows = [(f"2026-06-01T09:{n:02d}:00", ("user", "assistant")[n % 2], text) for n, text in enumerate(said)]
    archive(home, index, rows)
    lines = ask(home, "staging database").split("\n")
    headers = [line for line in lines if NUMBERED.match(line)]
    assert [h.rsplit("message ", 1)[1] for h in headers] == ["0 (user)", "4 (user)", "8 (user)", "7 (assistant)"], (
        "the passages holding the words, and only those"
    )
    context = [line.strip() for line in lines if line.startswith("   ") and " it, message " in line]
    assert context == [
        "after it, message 1 (assistant): ok reply 1",
        "before it, message 3 (assistant): ok reply 3",
        "after it, message 5 (assistant): ok reply 5",
        "after it, message 9 (assistant): filler 9",
        "before it, message 6 (user): filler six",
    ], "the neighbours of every message hit shown, once each, not the one that holds a word itself (7 and 8)"
    assert lines.index("   after it, message 1 (assistant): ok reply 1") == lines.index(headers[0]) + 2, "under its hit"


def test_a_chinese_word_said_otherwise_is_found_by_its_letters_after_the_exact_word(home, index):
    rows = [
        ("2026-11-18T10:00:00", "user", "昨晚去看了告五人的演唱会，人生最佳！"),
        ("2026-11-18T10:01:00", "assistant", "哇，太棒了！"),
        ("2026-11-19T10:00:00", "user", "周末的演出票还没买到。"),
    ]
    archive(home, index, rows)
    lines = ask(home, "演出").split("\n")
    assert lines[1].endswith("message 2 (user)"), "the exact word first"
    assert any(line.endswith("message 0 (user)") for line in lines[3:] if NUMBERED.match(line)), (
        "演唱会 shares 演 with 演出"
    )


def test_days_named_in_the_query_narrow_the_search_unless_nothing_is_there(home, index):
    rows = [
        ("2026-10-05T10:00:00", "user", "the deploy of the blog went fine"),
        ("2026-11-18T10:00:00", "user", "the deploy of the shop failed twice"),
        ("2026-11-18T10:05:00", "user", "部署商店的时候报错了"),
    ]
    archive(home, index, rows)
    today = datetime(2026, 11, 25).date()

    def on(query: str) -> str:
        return search(home.workspace, query, DM, trusted, today=today)

    october = on("What did we deploy in October 2026?")
    assert "blog" in october and "shop" not in october and "between 2026-10-01 and 2026-10-31" in october
    assert "shop" in on("deploy last week") and "blog" not in on("deploy last week")
    assert "商店" in on("上周部署") and "blog" not in on("上个月部署") and "blog" in on("deploy 2026年10月")
    march = on("deploy in March 2026")
    assert "blog" in march and "shop" in march and "nothing dated between 2026-03-01 and 2026-03-31" in march
    assert "shop" in on("what did we talk about on November 18") and "blog" not in on("what happened on 18 Nov")
    own_dates = search(home.workspace, "deploy in October", DM, trusted, date_from="2026-11-01", today=today)
    assert "blog" not in own_dates and "shop" in own_dates, "the tool's own dates win and are kept"


def test_words_too_common_to_rank_give_the_newest_passages_holding_them_all(home, index, monkeypatch):
    rows = [
        (f"2026-11-20T10:{n:02d}:00", "user", f"deploy note {n}" + (" nginx" if n % 3 == 0 else "")) for n in range(40)
    ]
    archive(home, index, rows)
    monkeypatch.setattr(recall, "ROWS_BUDGET", 5)  # a 100,000-message archive's common words, in small
    lines = ask(home, "deploy nginx").split("\n")
    assert [line.rsplit("message ", 1)[1] for line in lines[1::2]] == [f"{n} (user)" for n in (39, 36, 33, 30, 27)]


class SlowClock:
    """time.monotonic for the search: each look at the clock is 10 ms later, as on a slow disk or a busy
    machine, so what the budget covers depends on the work done, not on how fast this machine is."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 0.01
        return self.now


def test_with_many_trusted_sessions_the_askers_own_material_is_searched_before_the_budget_runs_out(
    tmp_path, monkeypatch
):
    home = NanobotHome.create(tmp_path, "http://127.0.0.1:9/v1")
    for n in range(120):  # indexed first: their sources come before the asker's in the index
        lines = [(f"2026-11-2{n % 5}T10:{m:02d}:00", "user", f"zx00007 deploy log {n}.{m}") for m in range(30)]
        home.write_session(f"telegram:{1000 + n}", _messages(lines), last_archived=len(lines))
    built = RecallIndex(home.workspace, UTC)
    built.refresh(home.sessions_dir)
    own = [("2026-11-01T09:00:00", "user", "zx00007 is the server in rack 4")]
    home.write_session(DM, _messages(own), last_archived=1)
    built.refresh(home.sessions_dir)
    assert "this conversation, message 0" in ask(home, "zx00007 server", scope="trusted")

    monkeypatch.setattr(recall, "time", SlowClock())
    answer = ask(home, "zx00007 server", scope="trusted")
    assert "time limit" in answer, "the budget ran out in the other sessions"
    assert "this conversation, message 0 (user)" in answer.split("\n")[1] and "rack 4" in answer


def test_pure_search_order_and_the_best_hits_each_once():
    sources = [
        Source(1, "messages", OTHER_DM),
        Source(2, "memory", ""),
        Source(3, "notes", DM),
        Source(4, "messages", DM),
    ]
    assert [[p.id for p in group] for group in search_order(sources, DM)] == [[2, 3, 4], [1]]
    assert [[p.id for p in group] for group in search_order(sources, None)] == [[2], [1, 3, 4]]
    own, memory = sources[3], sources[1]

    def hit(source, position, score, day="2026-11-20", matched=True):
        return Hit(source, position, score, day, None, "user", f"text {position}", matched)

    hits = [
        hit(own, 5, 2.0),
        hit(own, 6, 1.0, matched=False),
        hit(own, 6, 3.0),
        hit(memory, 1, 2.0),
        hit(own, 1, 2.0, day="2026-11-01"),
    ]
    assert [(h.position, h.score) for h in rank.best(hits)] == [(6, 3.0), (5, 2.0), (1, 2.0), (1, 2.0)]
    assert rank.best(hits)[3].source is memory, "of equal score MEMORY.md comes last, the newest first"

    def plan(held: dict[str, int], budget: int = 4000) -> tuple[list[str], bool]:
        counted.clear()
        return rank.plan_terms(list(held), lambda t, cap: counted.append(cap) or min(held[t], cap), budget)

    counted: list[int] = []
    assert plan({'"a"': 10, '"b"': 3000, '"c"': 0}) == (['"a"', '"b"'], True)
    assert counted == [501, 501, 501, 3991], "every word up to the probe, a common one only as far as room is left"
    assert plan({'"a"': 10, '"b"': 3995}) == (['"a"'], True), "the commonest left out"
    assert plan({'"a"': 40_000, '"b"': 40_000}) == (['"a"', '"b"'], False), "too common: the newest holding both"
    assert max(counted) == 4001, "no word counted past the budget"
    assert plan({'"a"': 0}) == ([], True)
    notes = Source(5, "notes", DM)
    summaries = [hit(notes, n, 9.0 - n) for n in range(4)] + [hit(memory, 9, 8.5)]
    chosen = rank.choose(summaries + [hit(own, 40 + n, 1.0) for n in range(4)])
    assert [h.source.kind for h in chosen] == ["notes", "memory", "messages", "messages", "messages"], (
        "two notes or MEMORY.md lines at most while messages are left"
    )
    assert len(rank.choose(summaries + [hit(own, 40, 1.0)])) == 5, "too few messages: notes fill the rest"
    near = rank.choose(summaries + [hit(own, 40, 9.5), hit(own, 41, 4.0, matched=False)])
    assert [h.source.kind for h in near] == ["messages", "notes", "memory", "notes", "notes"], (
        "a message shown only as a hit's neighbour holds no notes line back"
    )
    assert [n.position for n in near[0].context] == [41], "it is shown under its hit"
    merged = rank.best([hit(own, 7, 0.5), hit(own, 7, 1.5, matched=False)])
    assert [(h.score, h.matched) for h in merged] == [(1.5, True)], "a neighbour's score, a hit's own words"
    assert [(h.position, p) for h, p in rank.neighbours(hits)] == [(6, 5), (6, 7), (5, 4), (5, 6), (1, 0), (1, 2)]


def test_pure_parts_terms_snippets_index_text_and_file_rows():
    assert terms('"端口" nginx, NGINX 端 a ポート') == ('"端口"', '"nginx"', '"端"*', '"ポー"', '"ート"')
    assert terms("What does Maria find comforting about going to art shows?") == (
        '"maria"',
        '"find"',
        '"comforting"',
        '"art"',
        '"shows"',
    ), "stop words out, nothing cut"
    assert terms("what is it") == ('"what"', '"is"', '"it"'), "a query of stop words alone is searched as it is"
    assert terms("玛丽亚为什么喜欢去看画展？") == ('"玛丽"', '"丽亚"', '"喜欢"', '"欢去"', '"去看"', '"看画"', '"画展"')
    assert terms("子豪最近买了什么？") == ('"子豪"', '"豪最"', '"最近"', '"近买"', '"买了"'), (
        "买了 as the answer says it"
    )
    assert terms("我的猫叫什么名字") == ('"的猫"', '"猫叫"', '"名字"'), "我的 alone is no term"
    asked = read_query("李娜上周的演出", datetime(2026, 11, 25).date())
    assert asked.terms == ('"李娜"', '"的演"', '"演出"') and (asked.since, asked.until) == ("2026-11-16", "2026-11-22")
    assert asked.letters == ('"李"*', '"娜"*', '"演"*', '"出"*'), "演出 also finds 演唱会, at a share of its weight"
    long = " x".join(f"word{n}" for n in range(60))
    assert len(terms(long)) == 60, "no cap drops the content words at the end of a long question"
    text = "x" * 300 + " the port is 8443 " + "y" * 300
    assert snippet(text, "8443", 60).startswith("…") and "8443" in snippet(text, "8443", 60)
    assert snippet(text, None, 60) == "x" * 60 + "…"
    assert snippet("short\n text", "t") == "short text"
    assert index_text("数据库端口 is on db 22") == " 数据 据库 库端 端口 口  is on db 22"
    for text in ("数据库端口 is on db 22", "本番サーバーのポートは 8443", "plain words, v1.2"):
        assert length(text) == len(re.findall(r"[^\W_]+", index_text(text))), text
    assert rank.rarity(1, 300) > rank.rarity(100, 300) > rank.rarity(300, 300) > 0
    assert rank.bm25([2.0], 5, 10.0) > rank.bm25([2.0], 20, 10.0), "a shorter passage first"
    rows = note_rows(DAY_NOTES, "2026-11-20", UTC)
    assert [(session, row.label, row.body) for session, row in rows] == [
        (DM, "重要决定", "预发数据库端口定为 54329"),
        (GROUP, "主要话题", "群里讨论团建地点：杭州西湖"),
    ]
    assert [(r.position, r.day, r.body) for r in memory_rows(MEMORY)] == [
        (2, None, "I live in Hangzhou. (written by the user)"),
        (8, "2026-11-21", "The blog is built with Hugo 0.139"),
    ]


async def test_a_summary_job_indexes_what_it_archived(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.default = Reply(summary_json("## What happened\n- talk about a deploy"))
    messages = conversation(
        12,
        start=datetime(2026, 11, 20, 9, 0),
        user="question {i} about the 部署脚本",
        assistant="answer {i}: use flag --zone-{i}",
    )
    nanobot_home.write_session(DM, messages)
    await summarize_now(redis, deps_for(summary_keep="messages:4"), DM)
    found = search(nanobot_home.workspace, "zone-3", DM, trusted)
    assert "answer 3: use flag --zone-3" in found and "2026-11-20 09:07" in found
    kept = search(nanobot_home.workspace, "zone-11", DM, trusted)
    assert "flag --zone-11" not in kept and "flag --zone-9" in kept, "kept, not archived; the archived ones found"
    assert "部署脚本" in search(nanobot_home.workspace, "部署", DM, trusted)


async def test_an_index_that_cannot_be_kept_never_fails_a_summary(redis, nanobot_home, fake_llm, deps_for, monkeypatch):
    from worker.memory.recall_index import index

    monkeypatch.setattr(index, "fts_problem", lambda: "no FTS5 here")
    fake_llm.default = Reply(summary_json())
    nanobot_home.write_session(DM, conversation(12))
    outcome = (await summarize_now(redis, deps_for(summary_keep="messages:4"), DM)).outcome
    assert outcome is not None and outcome.status == "summarized", outcome


def test_without_fts5_ranking_the_worker_reports_it_and_the_tool_is_not_offered(home, monkeypatch, caplog):
    from worker.memory.recall_index import RecallIndexError, index

    monkeypatch.setattr(index, "fts_problem", lambda: "this Python's SQLite 3.20 cannot rank full-text searches")
    with pytest.raises(RecallIndexError, match="cannot rank full-text"):
        RecallIndex(home.workspace, UTC).refresh(home.sessions_dir)
    assert not (home.workspace / RECALL_INDEX).exists()
    monkeypatch.setattr(recall_tool, "check_version", lambda: "0.3.5")
    from nanobot_hooks.contract import recall as layout

    monkeypatch.setattr(layout, "fts_problem", lambda: "no FTS5")
    said: list[str] = []
    monkeypatch.setattr(recall_tool, "switch_off", lambda why, what: said.append(f"{what}: {why}"))
    # enabled() says False for any exception too: the line it gives tells that it is off for FTS5's sake.
    assert recall_tool.RecallTool.enabled(SimpleNamespace(workspace="/tmp/ws")) is False
    assert said == ["recall tool off: this Python's SQLite cannot rank full-text searches (FTS5)"]


def test_the_recall_tool_is_offered_unless_switched_off(monkeypatch):
    ctx = SimpleNamespace(workspace="/tmp/ws")
    for name in ("NANOBOT_SUMMARY_RECALL", "NANOBOT_SUMMARY_THRESHOLD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(recall_tool, "check_version", lambda: "0.3.5")
    assert recall_tool.RecallTool.enabled(ctx) is True
    monkeypatch.setenv("NANOBOT_SUMMARY_RECALL", "false")
    assert recall_tool.RecallTool.enabled(ctx) is False
    assert load_settings().summary_recall is False, "off for the setting's sake, not for an exception"
    monkeypatch.setenv("NANOBOT_SUMMARY_RECALL", "true")
    monkeypatch.setenv("NANOBOT_SUMMARY_THRESHOLD", "1.5")
    assert recall_tool.RecallTool.enabled(ctx) is False, "a bad setting: off, without raising"
    monkeypatch.delenv("NANOBOT_SUMMARY_THRESHOLD")
    monkeypatch.setattr(recall_tool, "check_version", lambda: (_ for _ in ()).throw(plugin.Off("0.4.0")))
    assert recall_tool.RecallTool.enabled(ctx) is False


async def test_the_recall_tool_answers_in_plain_text_and_never_raises(home, index, monkeypatch):
    tool = recall_tool.RecallTool(home.workspace, HookSettings())
    assert tool.read_only and tool.name == "recall" and "Archived Context Summary" in tool.description
    monkeypatch.setattr(recall_tool, "_asking_session", lambda: DM)
    assert "54329" in await tool.execute(query="数据库 端口")
    assert (await tool.execute(query="端口", date_from="yesterday")).startswith("Error: date_from")
    monkeypatch.setattr(recall, "search", lambda *a, **k: 1 / 0)
    assert (await tool.execute(query="端口")).startswith("Nothing found for '端口': the search failed")
    slow = recall_tool.RecallTool(home.workspace, HookSettings())
    monkeypatch.setattr(recall, "BUDGET_SECONDS", -1.9)
    monkeypatch.setattr(recall, "search", lambda *a, **k: __import__("time").sleep(0.5))
    assert (await slow.execute(query="端口")).endswith("did not answer in time.")
    assert json.dumps(tool.parameters) and asyncio.iscoroutinefunction(tool.execute)


def test_the_benchmark_runs_in_its_smoke_size(capsys):
    assert load_bench("bench_recall").main(["--smoke"]) == 0
    stdout = capsys.readouterr().out
    assert "query latency, all (60)" in stdout and "queries with passages found: 40 of 60" in stdout


CHAT_WORDS = (
    "the",
    "deploy",
    "server",
    "config",
    "Redis",
    "port",
    "timeout",
    "backup",
    "we",
    "asked",
    "about",
    "logs",
    "nginx",
    "restart",
    "error",
    "fixed",
    "Friday",
    "staging",
    "database",
    "migration",
    "to",
    "is",
    "部署",
    "服务器",
    "端口",
    "日志",
)


def _index_bytes(path: Path) -> int:
    return sum(Path(f"{path}{suffix}").stat().st_size for suffix in ("", "-wal") if Path(f"{path}{suffix}").exists())


def test_the_index_is_no_larger_than_the_text_it_indexes(home):
    import random

    rng = random.Random(3)  # short chat messages, as most are: a passage's own compression would not do
    rows = [
        (
            f"2026-11-{1 + i // 1440:02d}T{i // 60 % 24:02d}:{i % 60:02d}:00",
            "user" if i % 2 else "assistant",
            f"note {i}: " + " ".join(rng.choices(CHAT_WORDS, k=rng.randint(8, 60))),
        )
        for i in range(6_000)
    ]
    home.write_session(DM, _messages(rows), last_archived=len(rows))
    built = RecallIndex(home.workspace, UTC)
    built.refresh(home.sessions_dir)
    built.close()  # the WAL folded into the file
    size = _index_bytes(home.workspace / RECALL_INDEX)
    text = sum(len(body.encode("utf-8")) for *_, body in rows)  # each message is one passage, as it was said
    assert text > 1_000_000
    assert size <= text, f"the index is {size / text:.2f}x the {text / 2**20:.1f} MB of text it indexes"
    assert "note 4321:" in ask(home, "note 4321")


def test_an_index_of_a_few_thousand_short_turns_is_no_larger_than_their_text(tmp_path):
    import random

    home = NanobotHome.create(tmp_path, "http://127.0.0.1:9/v1")  # this conversation alone
    rng = random.Random(11)  # turns of a few words, as most chat turns are (42 bytes on average here)
    rows = [
        (
            f"2026-{1 + i // 300:02d}-{1 + i // 12 % 25:02d}T{8 + i % 12:02d}:{i % 60:02d}:00",
            "user" if i % 2 else "assistant",
            " ".join(rng.choices(CHAT_WORDS, k=rng.randint(3, 11))),
        )
        for i in range(3_000)
    ]
    home.write_session(DM, _messages(rows), last_archived=len(rows))
    built = RecallIndex(home.workspace, UTC)
    built.refresh(home.sessions_dir)
    built.close()
    size = _index_bytes(home.workspace / RECALL_INDEX)
    text = sum(len(body.encode("utf-8")) for *_, body in rows)
    assert 30 <= text / len(rows) <= 60
    assert size <= text, f"the index is {size / text:.2f}x the {text / 2**10:.0f} KB of text it indexes"


def test_an_index_filled_job_by_job_stays_no_larger_than_its_text_while_the_worker_runs(tmp_path):
    import random

    home = NanobotHome.create(tmp_path, "http://127.0.0.1:9/v1")  # this conversation alone
    rng = random.Random(5)
    rows = [
        (
            f"2026-11-{1 + i // 1440:02d}T{i // 60 % 24:02d}:{i % 60:02d}:00",
            "user" if i % 2 else "assistant",
            " ".join(rng.choices(CHAT_WORDS, k=rng.randint(8, 40))),
        )
        for i in range(6_000)
    ]
    built = RecallIndex(home.workspace, UTC)
    for end in range(200, len(rows) + 1, 200):  # one summary job's archive at a time, the writer kept open
        home.write_session(DM, _messages(rows[:end]), last_archived=end)
        built.refresh(home.sessions_dir)
    path = home.workspace / RECALL_INDEX
    size, wal = path.stat().st_size, Path(f"{path}-wal").stat().st_size
    text = sum(len(body.encode("utf-8")) for *_, body in rows)
    built.close()
    assert size <= text, f"the index is {size / text:.2f}x the {text / 2**10:.0f} KB of text"
    # Copied into the file every WAL_PAGES pages and cut back: at SQLite's default it grew to 1,000 pages (4 MB).
    assert wal <= 2**18, f"the WAL beside it holds {wal / 2**10:.0f} KB"


def test_a_turn_whose_neighbour_holds_the_rest_of_the_query_comes_before_one_alone_with_the_same_words(home, index):
    said = [
        "Hi Anna!",
        "Hi Jon",
        "I went to an audition for Lady Macbeth!",
        "Wow, that's amazing, Anna!",
        "the weather is gloomy",
        "same here",
        "My cousin has an audition coming up too",
        "I need a vacation",
        "Bye Anna!",
        "Bye Jon",
    ]
    archive(
        home, index, [(f"2026-06-01T09:{n:02d}:00", ("user", "assistant")[n % 2], text) for n, text in enumerate(said)]
    )
    headers = [line for line in ask(home, "Anna audition").split("\n") if NUMBERED.match(line)]
    assert headers[0].endswith("message 2 (user)"), "the newer lone 'audition' (message 6) ties without its neighbour"
    assert rank.around({10: ['"a"'], 11: ['"b"'], 12: ['"a"', '"b"'], 20: ['"a"']}, {'"a"': 1.0, '"b"': 2.0}) == {
        10: rank.EVIDENCE_SHARE * 2.0,
        11: rank.EVIDENCE_SHARE * 1.0,
    }, "only words a turn lacks, from next to it"


# The recall index as schema 3 made it (each passage's text twice: the words and the shown text).
SCHEMA_3 = """
CREATE TABLE sources(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, session TEXT NOT NULL,
  through INTEGER NOT NULL DEFAULT 0, stamp TEXT, UNIQUE(kind, session));
CREATE TABLE files(name TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL);
CREATE TABLE days(source INTEGER NOT NULL, day TEXT NOT NULL, low INTEGER NOT NULL,
  high INTEGER NOT NULL, PRIMARY KEY(source, day)) WITHOUT ROWID;
CREATE TABLE state(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE VIRTUAL TABLE passages USING fts5(terms, body UNINDEXED, day UNINDEXED, at UNINDEXED, label UNINDEXED,
  tokenize='porter unicode61 remove_diacritics 2');
INSERT INTO sources VALUES(1, 'messages', 'telegram:42', 1, '2026-11-20T10:00:00');
INSERT INTO passages(rowid, terms, body, day, at, label) VALUES(4294967296, 'port 54329', 'port 54329',
  '2026-11-20', '2026-11-20 10:00', 'user');
INSERT INTO state VALUES('complete', '1');
PRAGMA user_version = 3;
"""


# The recall index as schema 4 made it (0.2.x): 4 KB pages, word positions kept, a row a passage naming its block.
SCHEMA_4 = """
PRAGMA page_size = 4096;
CREATE TABLE sources(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, session TEXT NOT NULL,
  through INTEGER NOT NULL DEFAULT 0, stamp TEXT, UNIQUE(kind, session));
CREATE TABLE files(name TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL);
CREATE TABLE days(source INTEGER NOT NULL, day TEXT NOT NULL, low INTEGER NOT NULL,
  high INTEGER NOT NULL, PRIMARY KEY(source, day)) WITHOUT ROWID;
CREATE TABLE state(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE VIRTUAL TABLE passages USING fts5(terms, content='', columnsize=0,
  tokenize='porter unicode61 remove_diacritics 2');
CREATE TABLE passage_rows(rowid INTEGER PRIMARY KEY, block INTEGER NOT NULL);
CREATE TABLE blocks(id INTEGER PRIMARY KEY, passages BLOB NOT NULL);
CREATE TABLE vectors(rowid INTEGER PRIMARY KEY, v BLOB NOT NULL);
INSERT INTO sources VALUES(1, 'messages', 'telegram:42', 1, '2026-11-20T10:00:00');
INSERT INTO passages(rowid, terms) VALUES(4294967296, 'port 54329');
INSERT INTO passage_rows VALUES(4294967296, 1);
INSERT INTO state VALUES('complete', '1');
PRAGMA user_version = 4;
"""


@pytest.mark.parametrize("schema", [SCHEMA_3, SCHEMA_4], ids=["schema 3", "schema 4"])
def test_an_index_of_the_old_schema_is_answered_with_a_clear_message_and_rebuilt_to_the_same_answers(
    home, index, schema
):
    before = [ask(home, query) for query in ("数据库 端口", "nginx timeout", "Hugo")]
    path = home.workspace / RECALL_INDEX
    index.discard()
    with closing(sqlite3.connect(path)) as db:
        db.executescript(schema)
    # New hooks, old index: a message, never an error raised into nanobot.
    assert ask(home, "端口").endswith("the archive index is being rebuilt.")
    assert "rebuilt" in str(RecallIndex(home.workspace, UTC).refresh(home.sessions_dir))
    assert [ask(home, query) for query in ("数据库 端口", "nginx timeout", "Hugo")] == before
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA page_size").fetchone()[0] == PAGE_BYTES, "made anew, with the small pages"
    # Old hooks (they know schema 3 only), new index: the same message.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recall, "RECALL_SCHEMA_VERSION", 3)
        assert ask(home, "端口").endswith("the archive index is being rebuilt.")


@pytest.mark.slow  # a whole first fill under tracemalloc
def test_a_huge_copy_kept_at_new_is_indexed_one_window_at_a_time_every_message(home, monkeypatch):
    from nanobot_hooks.contract.session_format import RETIRED_FOLDER, retired_name
    from worker.memory.recall_index import messages

    monkeypatch.setattr(messages, "WINDOW_BYTES", HUGE_WINDOW)
    monkeypatch.setattr(messages, "MESSAGES_PER_TRANSACTION", 50)
    rows = [
        (
            f"2026-11-{1 + i // 1440:02d}T{i // 60 % 24:02d}:{i % 60:02d}:00",
            "user",
            f"kept line {i} zk{i}k " + "端口 deploy " * 40,
        )
        for i in range(HUGE_ROWS)
    ]
    folder = home.sessions_dir / RETIRED_FOLDER
    folder.mkdir()
    path = home.write_session(DM, _messages(rows), last_archived=len(rows) - 10)
    path = path.rename(folder / retired_name(DM, 0, 1_700_000_000_000))
    home.write_session(DM, [])  # nanobot's `/new` emptied the session
    fresh = RecallIndex(home.workspace, UTC)
    tracemalloc.start()
    try:
        fresh.refresh(home.sessions_dir)  # the sweep: the copy, every message of it
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = path.stat().st_size
    assert peak < size / 3, f"{peak / 2**20:.1f} MB at the peak to index a {size / 2**20:.1f} MB copy"
    for number in (0, HUGE_ROWS // 2, HUGE_ROWS - 1):
        assert f"kept line {number} " in ask(home, f"zk{number}k"), number


def test_a_block_gives_back_every_passage_as_it_was_packed_and_its_directory_their_lengths():
    from nanobot_hooks.contract.recall import Passage, directory, lengths, pack, read_block, unpack

    first = 7 << 32
    held = {
        first: Passage('hi \x1e \x1d "quoted" 端口', "2026-11-20", "2026-11-20 10:00", "user"),
        first + 2: Passage("after midnight, UTC", "2026-11-21", "2026-11-20 23:59", "assistant"),
        first + 3: Passage("a MEMORY.md line", "2026-01-01", None, ""),
        first + 9: Passage("undated", None, None, "## heading"),
        first + 4096: Passage("an odd time", None, "yesterday noon", "x"),
        first + 4100: Passage("earlier than the one before", "2025-02-03", "2025-02-03 07:05", "user"),
    }
    assert unpack(pack(held)) == held
    block = read_block(pack(held))
    assert block.passage(first + 1) is None and block.passage(first + 9) == held[first + 9]
    listed = lengths(first, directory(first, held))
    assert listed.rowids() == sorted(held) and listed.length(first + 1) is None
    assert [listed.length(rowid) for rowid in sorted(held)] == [length(p.body) for _, p in sorted(held.items())]
