"""Session files: locating by key, tolerant parsing, and line-1 rewrites that never touch a message line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import tracemalloc
from pathlib import Path

import pytest
from filelock import FileLock

from harness.transcripts import conversation
from nanobot_hooks.contract.marker import METADATA_KEY
from nanobot_hooks.contract.session_format import SESSION_FILES_LOCK, key_from_name, storage_name
from tests.support.paths import ROOT
from worker.nanobot.metadata_line import edit_attempt, write_metadata_entry
from worker.nanobot.sessions import (
    SessionKeyError,
    SessionNotFound,
    ensure_inside,
    list_session_keys,
    read_session,
    session_path,
)


def test_storage_name_matches_nanobot() -> None:
    assert storage_name("telegram:123") == "dGVsZWdyYW06MTIz.jsonl"
    assert key_from_name("dGVsZWdyYW06MTIz.jsonl") == "telegram:123"
    assert key_from_name("not base64!.jsonl") is None


def test_keys_that_would_escape_are_refused(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    # the encoding alone cannot leave the folder: every name is [A-Za-z0-9_-]
    assert session_path(sessions, "../../etc/passwd").parent == sessions
    for bad in ("", "   ", "tele\ngram:1", "x" * 500):
        with pytest.raises(SessionKeyError):
            session_path(sessions, bad)
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text("{}\n")
    link = sessions / storage_name("cli:direct")
    link.symlink_to(outside)
    with pytest.raises(SessionKeyError):
        session_path(sessions, "cli:direct")
    with pytest.raises(SessionKeyError):
        ensure_inside(sessions, tmp_path / "x.jsonl")


def test_tolerant_parse_of_every_message_shape(nanobot_home) -> None:
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "看这张图"}, {"type": "image_url", "image_url": {"url": "x"}}],
            "timestamp": "2026-11-20T10:00:00",
            "media": ["a.png"],
            "_runtime_context": {"channel": "telegram"},
        },
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "thinking...",
            "thinking_blocks": [{"x": 1}],
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "exec", "arguments": "{}"}}],
            "timestamp": "2026-11-20T10:00:01",
            "latency_ms": 12,
        },
        {"role": "tool", "tool_call_id": "c1", "name": "exec", "content": "ok", "timestamp": "2026-11-20T10:00:02"},
        {"role": "user", "content": "/status", "_command": True, "timestamp": "2026-11-20T10:00:03"},
        {"role": "mystery", "content": None, "unknown_key": [1, 2], "timestamp": "2026-11-20T10:00:04"},
    ]
    path = nanobot_home.write_session("telegram:7", messages, last_archived=99)
    lines = path.read_text().split("\n")
    lines.insert(1, json.dumps({"_type": "provider_state", "state": {"x": 1}}))
    lines.insert(3, "[1, 2, 3]")
    lines.insert(4, "")
    path.write_text("\n".join(lines))
    session = read_session(nanobot_home.sessions_dir, "telegram:7")
    assert len(session.messages) == 5
    assert session.skipped_lines == 1 and "not a JSON object" in session.skipped_reasons[0]
    assert session.last_archived == 0, "an out-of-range watermark is reset, as nanobot does"
    assert session.timestamp_before(2) == "2026-11-20T10:00:01"
    assert list_session_keys(nanobot_home.sessions_dir) == ["telegram:7"]
    with pytest.raises(SessionNotFound):
        read_session(nanobot_home.sessions_dir, "telegram:8")


def test_metadata_write_copies_every_other_byte(nanobot_home) -> None:
    path = nanobot_home.write_session("cli:direct", conversation(5, user="中文 {i} \u2028 odd"))
    raw = path.read_bytes()
    raw = raw.replace(b'"role": "user"', b'"role":"user"', 1)  # unusual spacing must survive
    path.write_bytes(raw)
    assert write_metadata_entry(nanobot_home.sessions_dir, "cli:direct", METADATA_KEY, {"pending": {"boundary": 4}})
    after = path.read_bytes()
    assert after.split(b"\n", 1)[1] == raw.split(b"\n", 1)[1]
    head = json.loads(after.split(b"\n", 1)[0])
    assert head["metadata"][METADATA_KEY] == {"pending": {"boundary": 4}} and head["last_archived"] == 0
    assert not write_metadata_entry(nanobot_home.sessions_dir, "cli:none", METADATA_KEY, 1)
    # the hooks' own keys in the same entry survive a new pending record
    write_metadata_entry(nanobot_home.sessions_dir, "cli:direct", METADATA_KEY, {"applied": {"through": 9}})
    write_metadata_entry(nanobot_home.sessions_dir, "cli:direct", METADATA_KEY, {"pending": {"boundary": 8}})
    head = json.loads(path.read_bytes().split(b"\n", 1)[0])
    assert head["metadata"][METADATA_KEY] == {"applied": {"through": 9}, "pending": {"boundary": 8}}
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_the_line_one_write_of_a_big_session_copies_through_a_small_buffer(nanobot_home) -> None:
    path = nanobot_home.write_session("telegram:7", conversation(10_000, user="question {i} " + "x" * 400))
    raw = path.read_bytes()
    tracemalloc.start()
    try:
        assert write_metadata_entry(nanobot_home.sessions_dir, "telegram:7", METADATA_KEY, {"pending": {"b": 1}})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(raw) > 5 * 2**20 and peak < 3 * 2**20, f"{peak / 2**20:.1f} MB for a {len(raw) / 2**20:.0f} MB file"
    assert path.read_bytes().split(b"\n", 1)[1] == raw.split(b"\n", 1)[1]


def test_reading_a_big_session_holds_its_messages_not_its_bytes(nanobot_home) -> None:
    path = nanobot_home.write_session("telegram:9", conversation(10_000, user="question {i} " + "x" * 400))
    tracemalloc.start()
    try:
        session = read_session(nanobot_home.sessions_dir, "telegram:9")
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = path.stat().st_size
    assert len(session.messages) == 20_000
    assert peak - kept < size / 4, (
        f"{(peak - kept) / 2**20:.1f} MB beyond the messages for a {size / 2**20:.0f} MB file"
    )


def test_a_read_from_the_watermark_holds_only_what_follows_it_under_the_sessions_own_indices(nanobot_home) -> None:
    messages = conversation(10_000, user="question {i} " + "x" * 400)
    nanobot_home.write_session("telegram:9", messages, last_archived=19_900)
    tracemalloc.start()
    try:
        session = read_session(nanobot_home.sessions_dir, "telegram:9", from_watermark=True)
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert kept < 1 << 20, f"{kept / 2**20:.1f} MB kept for 101 messages"
    assert len(session.messages) == 20_000 and session.last_archived == 19_900 and session.first == 19_899
    assert session.messages[19_899] == messages[19_899] and session.messages[-1] == messages[-1]
    assert session.messages[19_950:] == messages[19_950:]
    assert session.timestamp_before(19_900) == messages[19_899]["timestamp"]
    assert session.timestamp_before(100) is None, "a cut before the watermark never fits: no need to read it"
    with pytest.raises(ValueError, match="before 19899"):
        session.messages[5]
    with pytest.raises(ValueError):
        list(session.messages)


def test_a_daily_jobs_read_holds_messages_from_its_days_first_on_not_the_whole_history(nanobot_home) -> None:
    from types import SimpleNamespace
    from zoneinfo import ZoneInfo

    from nanobot_hooks.contract.records import SummarizeRequest
    from worker.summarize.jobs import read_for_job

    # A year of history, all summarized but the last 100 messages; the day to note starts at message 19,000.
    messages = conversation(10_000, user="question {i} " + "x" * 400)
    for index, message in enumerate(messages):
        message["timestamp"] = f"2026-11-{20 if index >= 19_000 else 19}T10:00:00"
    nanobot_home.write_session("telegram:9", messages, last_archived=19_900)
    deps = SimpleNamespace(sessions_dir=nanobot_home.sessions_dir, tz=ZoneInfo("UTC"))
    daily = SummarizeRequest(session_key="telegram:9", notes_through_end=True, notes_since="2026-11-20")
    tracemalloc.start()
    try:
        session = read_for_job(deps, daily)  # type: ignore[arg-type]
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert session.first == 19_000 and len(session.messages) == 20_000 and session.last_archived == 19_900
    assert session.messages[19_000:] == messages[19_000:], "every message of the day is held"
    assert kept < 2 << 20, f"{kept / 2**20:.1f} MB kept for 1,000 messages of a {20_000}-message history"
    # A catch-up without a day reads them all; an ordinary job from the watermark.
    assert read_for_job(deps, daily.model_copy(update={"notes_since": None})).first == 0  # type: ignore[arg-type]
    assert read_for_job(deps, SummarizeRequest(session_key="telegram:9")).first == 19_899  # type: ignore[arg-type]


def test_a_window_of_a_huge_session_holds_about_its_bytes_and_says_where_it_ends(nanobot_home) -> None:
    from worker.nanobot.sessions import held_end, read_window

    messages = conversation(1_000, user="question {i} " + "x" * 400)
    nanobot_home.write_session("telegram:9", messages, last_archived=2_000)
    window = read_window(nanobot_home.sessions_dir, "telegram:9", 500, 50_000)
    end = held_end(window.messages)
    assert window.first == 499 and len(window.messages) == 2_000 and 500 < end < 800
    assert window.messages[499:end] == messages[499:end]
    with pytest.raises(ValueError, match="where this window of the session ended"):
        window.messages[end]
    with pytest.raises(ValueError):
        window.messages[600 : end + 1]
    whole = read_window(nanobot_home.sessions_dir, "telegram:9", 0, 1 << 30)
    assert held_end(whole.messages) == 2_000 and list(whole.messages) == messages
    # The next window goes on from where this one ended, under the same indices and positions.
    from worker.text.prepare import Lines

    following = read_window(nanobot_home.sessions_dir, "telegram:9", end, 50_000, after=window)
    later = held_end(following.messages)
    assert following.first == end - 1 and len(following.messages) == 2_000 and end + 100 < later < end + 300
    assert following.messages[end - 1 : later] == messages[end - 1 : later]
    assert Lines(following.messages).position(later - 1) == Lines(whole.messages).position(later - 1)
    # Once the file changed, the next window is read from the start again, not from a stale offset.
    messages.insert(0, {"role": "user", "content": "one more at the start", "timestamp": "2026-11-19T10:00:00"})
    nanobot_home.write_session("telegram:9", messages, last_archived=2_001)
    again = read_window(nanobot_home.sessions_dir, "telegram:9", later, 50_000, after=following)
    assert again.messages[later - 1 : held_end(again.messages)] == messages[later - 1 : held_end(again.messages)]


def test_a_messages_position_skips_hidden_rows_and_is_the_same_from_the_watermark_or_the_start(nanobot_home):
    """A noted span records positions among the visible messages: nanobot's checkpoint markers, inserted in the
    middle, move no one's position, and a read from the watermark counts the ones it did not keep."""
    from worker.text.prepare import Lines

    messages = conversation(30)
    for at in (50, 20):  # two applied summaries, each with its hidden marker at its boundary
        messages.insert(
            at, {"role": "user", "content": "Continue.", "_hidden_history": True, "timestamp": "2026-11-20T11:00:00"}
        )
    nanobot_home.write_session("telegram:9", messages, last_archived=51)
    whole = read_session(nanobot_home.sessions_dir, "telegram:9")
    tail = read_session(nanobot_home.sessions_dir, "telegram:9", from_watermark=True)
    assert tail.first == 50
    full, part = Lines(whole.messages), Lines(tail.messages)
    assert [part.position(i) for i in range(50, 62)] == [full.position(i) for i in range(50, 62)]
    assert [full.position(i) for i in (19, 20, 21, 52)] == [19, 20, 20, 50]
    visible = [m for m in messages if not m.get("_hidden_history")]
    assert all(
        visible[full.position(i)] is messages[i] for i in range(len(messages)) if not messages[i].get("_hidden_history")
    )


def test_a_read_from_an_out_of_range_watermark_reads_every_message(nanobot_home) -> None:
    messages = conversation(10)
    nanobot_home.write_session("telegram:9", messages, last_archived=500)  # nanobot starts over from 0
    session = read_session(nanobot_home.sessions_dir, "telegram:9", from_watermark=True)
    assert session.first == 0 and session.last_archived == 0 and list(session.messages) == messages


class WatchedLock:
    """nanobot's lock as the worker takes it; on release, records whether the replaced file is still open."""

    def __init__(self, path: Path, lock: FileLock) -> None:
        self.inode, self.lock, self.open_at_release = path.stat().st_ino, lock, False

    def __enter__(self) -> None:
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        fds = Path("/proc/self/fd")
        self.open_at_release = any(_inode(fds / fd) == self.inode for fd in os.listdir(fds))
        self.lock.release()


def _inode(fd: Path) -> int | None:
    try:
        return fd.stat().st_ino
    except OSError:
        return None


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc")
def test_the_replaced_file_is_freed_after_the_lock_is_released(nanobot_home) -> None:
    # Freeing a big file's blocks takes milliseconds that nanobot's saves must not wait for.
    path = nanobot_home.write_session("telegram:8", conversation(3))
    lock = WatchedLock(path, FileLock(str(nanobot_home.sessions_dir / SESSION_FILES_LOCK)))
    done, result = edit_attempt(
        path, lambda record: record.setdefault("metadata", {}).update(b=1) or True, lock, hold=False
    )  # type: ignore[arg-type]
    assert done and result
    assert lock.open_at_release and path.stat().st_ino != lock.inode


NANOBOT_STYLE_WRITER = textwrap.dedent('''
    """Rewrites the whole session file the way nanobot 0.3.5 saves: lock, temp file, os.replace."""
    import json, os, sys, secrets
    from filelock import FileLock
    sessions, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    path = os.path.join(sessions, name)
    for i in range(rounds):
        with FileLock(os.path.join(sessions, ".session-files.lock")):
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
            head = json.loads(lines[0])
            head["updated_at"] = f"round {i}"
            message = {"role": "user", "content": f"appended {i}", "timestamp": f"2026-11-21T00:00:{i % 60:02d}"}
            out = [json.dumps(head, ensure_ascii=False)] + lines[1:] + [json.dumps(message, ensure_ascii=False)]
            tmp = path + "." + secrets.token_hex(4) + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write("\\n".join(out) + "\\n")
            os.replace(tmp, path)
''')

REAL_NANOBOT_WRITER = textwrap.dedent('''
    """Appends and saves through nanobot's own JsonlSessionStore, as a live gateway does."""
    import sys
    from pathlib import Path
    from nanobot.session.manager import JsonlSessionStore
    workspace, root, key, rounds = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    store = JsonlSessionStore(workspace, sessions_root=root)
    for i in range(rounds):
        session = store.load(key)
        session.add_message("user", f"appended {i}")
        store.save(session)
''')


def _hammer_line_one(sessions: Path, key: str, stop: threading.Event) -> int:
    writes = 0
    while not stop.is_set():
        assert write_metadata_entry(sessions, key, METADATA_KEY, {"pending": {"n": writes}})
        writes += 1
    return writes


def _run_concurrently(nanobot_home, key: str, command: list[str], rounds: int) -> list[bytes]:
    path = nanobot_home.write_session(key, conversation(20, user="原始消息 {i}"))
    original = path.read_bytes().split(b"\n")[1:-1]
    stop = threading.Event()
    counter: list[int] = []
    hammer = threading.Thread(target=lambda: counter.append(_hammer_line_one(nanobot_home.sessions_dir, key, stop)))
    hammer.start()
    try:
        subprocess.run(command, check=True, timeout=300)
    finally:
        stop.set()
        hammer.join()
    assert counter and counter[0] > 1, "the worker side really rewrote line 1 while the other process wrote"
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    messages = lines[1:-1]
    assert messages[: len(original)] == original, "no original message line lost or changed"
    appended = [json.loads(m)["content"] for m in messages[len(original) :]]
    assert appended == [f"appended {i}" for i in range(rounds)], "every concurrent append survived, in order"
    return messages


def test_line_one_rewrites_race_a_nanobot_style_writer(nanobot_home) -> None:
    key = "telegram:99"
    script = nanobot_home.root / "writer.py"
    script.write_text(NANOBOT_STYLE_WRITER)
    _run_concurrently(
        nanobot_home, key, [sys.executable, str(script), str(nanobot_home.sessions_dir), storage_name(key), "300"], 300
    )


@pytest.mark.skipif(
    not os.environ.get("NANOBOT_PYTHON"), reason="NANOBOT_PYTHON (set by scripts/test) names nanobot's venv"
)
def test_line_one_rewrites_race_the_real_nanobot_store(nanobot_home) -> None:
    key = "telegram:100"
    script = nanobot_home.root / "real_writer.py"
    script.write_text(REAL_NANOBOT_WRITER)
    _run_concurrently(
        nanobot_home,
        key,
        [
            os.environ["NANOBOT_PYTHON"],
            str(script),
            str(nanobot_home.workspace),
            str(nanobot_home.root / "sessions"),
            key,
            "150",
        ],
        150,
    )


RECOVERY = textwrap.dedent('''
    """nanobot's own SessionManager: `checkpoint` starts a long turn and keeps its recovery file;
    `load` is a restarted nanobot loading the session and printing what it recovered."""
    import json, sys
    from pathlib import Path
    from nanobot.session.manager import SessionManager
    workspace, root, key, step = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    manager = SessionManager(workspace, sessions_root=root)
    session = manager.get_or_create(key)
    if step == "checkpoint":
        for i in range(6):
            session.add_message("user" if i % 2 == 0 else "assistant", f"message {i}")
        manager.save(session)
        session.add_message("user", "run the long tool task")
        manager.save(session)
        session.metadata["runtime_checkpoint"] = {"phase": "tools_completed",
                                                  "completed_tool_results": [{"tool_call_id": "c1", "content": "done"}]}
        manager.save_runtime_checkpoint(session)
    print(json.dumps({"checkpoint": session.metadata.get("runtime_checkpoint"), "messages": len(session.messages)}))
''')


@pytest.mark.skipif(
    not os.environ.get("NANOBOT_PYTHON"), reason="NANOBOT_PYTHON (set by scripts/test) names nanobot's venv"
)
def test_a_line_one_write_during_a_long_turn_keeps_nanobots_recovery_file(nanobot_home) -> None:
    key = "telegram:101"
    script = nanobot_home.root / "recovery.py"
    script.write_text(RECOVERY)

    def nanobot(step: str) -> dict:
        done = subprocess.run(
            [
                os.environ["NANOBOT_PYTHON"],
                str(script),
                str(nanobot_home.workspace),
                str(nanobot_home.root / "sessions"),
                key,
                step,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    started = nanobot("checkpoint")
    assert started["checkpoint"]["phase"] == "tools_completed"
    path = nanobot_home.session_file(key)
    mtime = path.stat().st_mtime_ns
    # The worker finishes a summary job while the turn runs, then nanobot crashes and starts again.
    assert write_metadata_entry(nanobot_home.sessions_dir, key, METADATA_KEY, {"pending": {"boundary": 4}})
    assert METADATA_KEY in json.loads(path.read_bytes().split(b"\n")[0])["metadata"]
    assert path.stat().st_mtime_ns == mtime
    recovered = nanobot("load")
    assert recovered == started, "the unfinished turn's finished tool results are recovered"


@pytest.mark.slow  # the benchmark's child processes, each importing the worker
def test_the_big_session_benchmark_runs_in_its_smoke_size() -> None:
    done = subprocess.run(
        [sys.executable, "bench/bench_bigsession.py", "--smoke"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2,000 messages" in done.stdout and "peak memory:" in done.stdout, done.stdout
    assert "max RSS, the tokens job" in done.stdout and "max RSS, the daily job" in done.stdout, done.stdout
    assert "recall index: " in done.stdout and "MB of indexed text" in done.stdout, done.stdout
    assert done.stdout.count("line-1 write, ") == 2 and "a nanobot save waited" in done.stdout, done.stdout


def _huge_session(nanobot_home, key: str = "telegram:9") -> tuple[Path, list[dict]]:
    """About 6 MB: 6,000 messages of the days before 2026-11-25, then 50 of that day."""
    messages = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"old {i} " + "y" * 1_000,
            "timestamp": f"2026-11-{1 + i // 250:02d}T{i // 10 % 24:02d}:{i % 60:02d}:00",
        }
        for i in range(6_000)
    ]
    messages += [{"role": "user", "content": f"today {i}", "timestamp": f"2026-11-25T10:{i:02d}:00"} for i in range(50)]
    return nanobot_home.write_session(key, messages, last_archived=6_000), messages


def _peak(read) -> tuple[object, int]:
    tracemalloc.start()
    try:
        value = read()
        return value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_undos_line_one_read_holds_no_message_of_a_huge_session(nanobot_home) -> None:
    from worker.commands.undo import read_line_one

    path, _ = _huge_session(nanobot_home)
    head, peak = _peak(lambda: read_line_one(path))
    assert head["last_archived"] == 6_000 and head["key"] == "telegram:9"  # type: ignore[index]
    assert peak < path.stat().st_size / 20, f"{peak / 2**20:.1f} MB at the peak to read line 1"


def test_a_copy_kept_at_new_is_read_from_its_notes_day_on_holding_no_earlier_message(nanobot_home) -> None:
    from nanobot_hooks.contract.session_format import RETIRED_FOLDER, retired_name
    from worker.nanobot.sessions import retired_files
    from worker.text.prepare import dated_from

    path, messages = _huge_session(nanobot_home)
    folder = nanobot_home.sessions_dir / RETIRED_FOLDER
    folder.mkdir()
    path.rename(folder / retired_name("telegram:9", 0, 1_700_000_000_000))
    (copy,) = retired_files(nanobot_home.sessions_dir, "telegram:9")
    session, peak = _peak(lambda: copy.read(keep_from=dated_from("2026-11-25", None)))
    assert session.first == 6_000 and len(session.messages) == 6_050  # type: ignore[attr-defined]
    assert session.messages[6_000:] == messages[6_000:]  # type: ignore[attr-defined]
    assert peak < copy.path.stat().st_size / 20, f"{peak / 2**20:.1f} MB at the peak for 50 short messages"
    assert len(copy.read().messages) == 6_050, "read whole, without a day"


def _pasted(size: int, head: str = "START of the log ", row: str = 'INFO 部署 "quoted" back\\slash\tline\n') -> str:
    """A pasted log of about `size` bytes as JSON writes it: escapes and CJK all through, known ends."""
    return head + row * (size // len(json.dumps(row, ensure_ascii=False))) + " END of the log"


def test_a_message_longer_than_a_read_holds_is_an_excerpt_with_its_size_and_keeps_its_place(nanobot_home) -> None:
    from worker.nanobot.sessions import MESSAGE_BYTES, read_session

    messages = conversation(3)
    messages.insert(2, {"role": "user", "content": _pasted(8 * 2**20), "timestamp": "2026-11-20T10:02:30"})
    path = nanobot_home.write_session("telegram:7", messages)
    line = path.read_bytes().split(b"\n")[3]
    session, peak = _peak(lambda: read_session(nanobot_home.sessions_dir, "telegram:7"))
    assert peak < 2**21, f"{peak / 2**20:.1f} MB at the peak for an 8 MB line"
    read = list(session.messages)  # type: ignore[attr-defined]
    assert len(read) == len(messages) and read[:2] == messages[:2] and read[3:] == messages[3:]
    long = read[2]
    assert long["role"] == "user" and long["timestamp"] == "2026-11-20T10:02:30"
    text = long["content"]
    assert text.startswith('START of the log INFO 部署 "quoted" back\\slash\tline\n')
    assert text.endswith("back\\slash\tline\n END of the log")
    assert len(text.encode()) < MESSAGE_BYTES
    note = re.search(r"\[\.\.\. ([\d,]+) bytes of this message left out \.\.\.\]", text)
    assert note is not None
    left_out = int(note.group(1).replace(",", ""))
    assert len(line) - MESSAGE_BYTES < left_out < len(line) - MESSAGE_BYTES // 2, (left_out, len(line))


def test_a_long_line_cut_between_values_keeps_its_role_time_and_the_note(nanobot_home) -> None:
    from worker.nanobot.sessions import MESSAGE_BYTES, read_session

    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "ls", "arguments": "{}"}} for i in range(40_000)]
    messages = conversation(2)
    messages.insert(1, {"role": "assistant", "content": "", "tool_calls": calls, "timestamp": "2026-11-20T10:01:30"})
    path = nanobot_home.write_session("telegram:8", messages)
    assert path.stat().st_size > 2 * MESSAGE_BYTES
    session = read_session(nanobot_home.sessions_dir, "telegram:8")
    read = list(session.messages)  # type: ignore[attr-defined]
    assert len(read) == len(messages) and read[2:] == messages[2:]
    assert read[1]["role"] == "assistant" and read[1]["timestamp"] == "2026-11-20T10:01:30"
    assert "bytes of this message left out" in json.dumps(read[1]) and session.skipped_lines == 0


def test_a_window_read_goes_on_past_a_long_line_at_the_right_offset(nanobot_home) -> None:
    from worker.nanobot.sessions import read_window

    messages = conversation(4)
    messages[3]["content"] = _pasted(2**20)
    nanobot_home.write_session("telegram:6", messages)
    first = read_window(nanobot_home.sessions_dir, "telegram:6", 0, 1_000)
    window = first
    while window.messages.held_end < len(messages):  # type: ignore[attr-defined]
        window = read_window(nanobot_home.sessions_dir, "telegram:6", window.messages.held_end, 1_000, after=window)  # type: ignore[attr-defined]
    assert window.messages[len(messages) - 1] == messages[-1]
