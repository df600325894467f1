"""A write killed half-way (the worker SIGKILLed while it rewrites line 1 of a session, or MEMORY.md) leaves its
temporary copy, as large as the file, beside it: the next write in that folder and the worker's start remove
it; a write still in progress, and nanobot's own temporary files, are left alone."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from harness.sandbox import NanobotHome, session_lines
from harness.transcripts import conversation
from nanobot_hooks.contract.session_format import SESSION_FILES_LOCK
from tests.support.workers import ROOT, run_burst
from worker import files
from worker.files import _STARTED, temp_beside
from worker.nanobot.metadata_line import write_metadata_entry

KEY = "telegram:42"
# A child that rewrites line 1 of a session, as a job does; it makes its copy, then waits for nanobot's lock.
LINE_ONE_WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from worker.nanobot.metadata_line import write_metadata_entry
    write_metadata_entry(Path(sys.argv[1]), sys.argv[2], "probe", {"written": True})
""")
# A child that makes MEMORY.md's new copy, as a merge does, and is killed before it renames it.
MEMORY_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from worker.files import temp_beside
    temp_beside(Path(sys.argv[1]), b"# Memory\\n" * 100_000)
    time.sleep(600)
""")


def new_files(folder: Path, before: set[str]) -> list[Path]:
    return sorted(path for path in folder.iterdir() if path.name not in before)


def wait_for(condition: Callable[[], object], what: str, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert (process is None or process.poll() is None) and time.monotonic() < deadline, f"no {what}"
        time.sleep(0.01)


@contextmanager
def writing_line_one(home: NanobotHome, key: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A real process in the middle of rewriting line 1 of `key`'s session: its whole copy made, waiting for
    nanobot's lock, which this block holds as a saving nanobot would. Yields the process and its copy."""
    folder, size = home.sessions_dir, home.session_file(key).stat().st_size
    before = {path.name for path in folder.iterdir()}
    with FileLock(str(folder / SESSION_FILES_LOCK)):
        process = subprocess.Popen([sys.executable, "-c", LINE_ONE_WRITER, str(folder), key], cwd=ROOT)
        try:
            wait_for(
                lambda: (copies := new_files(folder, before)) and copies[0].stat().st_size >= size,
                "whole copy from the writer",
                process,
            )
            yield process, new_files(folder, before)[0]
        finally:
            process.kill()
            process.wait(10)


def killed(argv: list[str], folder: Path) -> Path:
    """Runs `argv` until it made a file in `folder`, SIGKILLs it, and returns that file."""
    before = {path.name for path in folder.iterdir()}
    process = subprocess.Popen(argv, cwd=ROOT)
    try:
        wait_for(lambda: new_files(folder, before), "file from the writer", process)
        time.sleep(0.5)  # its copy written through
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    [left] = new_files(folder, before)
    return left


def nanobots_own_temp(target: Path) -> Path:
    """A temporary file named as nanobot 0.3.5 names its own (session/manager.py): never ours to remove."""
    path = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
    path.write_text("nanobot's save in progress", encoding="utf-8")
    return path


def test_a_line_one_write_killed_mid_way_leaves_a_copy_the_next_write_removes(nanobot_home, monkeypatch) -> None:
    monkeypatch.setattr(files, "SWEEP_SECONDS", 0.0)  # every write looks (by default: once a minute per folder)
    nanobot_home.write_session(KEY, conversation(3000))
    nanobot_home.write_session("telegram:7", conversation(4))
    theirs = nanobots_own_temp(nanobot_home.session_file(KEY))
    folder = nanobot_home.sessions_dir
    with writing_line_one(nanobot_home, KEY) as (process, copy):
        # Another session's write meanwhile (a thread, waiting for the lock too once its copy is made, after its
        # clean-up): the copy belongs to a write in progress and stays.
        before = {path.name for path in folder.iterdir()}
        other = threading.Thread(target=write_metadata_entry, args=(folder, "telegram:7", "probe", {"n": 1}))
        other.start()
        wait_for(lambda: new_files(folder, before), "the other write's copy")
        assert copy.exists() and process.poll() is None
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    other.join(60)
    assert copy.exists() and copy.stat().st_size >= nanobot_home.session_file(KEY).stat().st_size, (
        "the killed write left its copy, as large as the session"
    )
    messages = nanobot_home.session_file(KEY).read_bytes().split(b"\n", 1)[1]

    monkeypatch.setattr(files, "SWEEP_SECONDS", 3600.0)
    assert write_metadata_entry(nanobot_home.sessions_dir, "telegram:7", "probe", {"n": 2})
    assert copy.exists(), "a folder looked through a moment ago is not listed again at every write"
    monkeypatch.setattr(files, "SWEEP_SECONDS", 0.0)
    assert write_metadata_entry(nanobot_home.sessions_dir, "telegram:7", "probe", {"n": 3})
    assert not copy.exists(), "the next write in the folder removed the dead write's copy"
    assert theirs.exists(), "nanobot's own temporary file is never touched"
    assert nanobot_home.session_file(KEY).read_bytes().split(b"\n", 1)[1] == messages
    head, _ = session_lines(nanobot_home, KEY)
    assert "probe" not in head["metadata"], "the killed write changed nothing"


async def test_the_worker_removes_at_start_what_killed_writes_left(nanobot_home, deps_for, redis) -> None:
    nanobot_home.write_session(KEY, conversation(3000))
    memory = nanobot_home.workspace / "memory"
    memory.mkdir(exist_ok=True)
    # Left by an earlier process that had this process's id (a restarted container's worker): made before
    # this process started.
    reused = temp_beside(nanobot_home.session_file(KEY), json.dumps({"earlier": 1}).encode())
    os.utime(reused, (_STARTED - 60, _STARTED - 60))
    with writing_line_one(nanobot_home, KEY) as (process, session_copy):
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    memory_copy = killed([sys.executable, "-c", MEMORY_WRITER, str(memory / "MEMORY.md")], memory)
    theirs = [nanobots_own_temp(nanobot_home.session_file(KEY)), nanobots_own_temp(memory / "MEMORY.md")]
    assert session_copy.exists() and memory_copy.exists() and reused.exists()

    await run_burst(deps_for())  # a real worker: its start-up, then an empty queue

    assert not session_copy.exists() and not memory_copy.exists() and not reused.exists()
    assert all(path.exists() for path in theirs), "nanobot's own temporary files are never touched"
