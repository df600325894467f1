"""nanobot-summary forget: a fact learned by a real job is forgotten from MEMORY.md by its text, as the page's Forget
does; the command says where else the worker keeps the text (the day's notes, the archive in the recall index) and
that the session files are nanobot's; `--everywhere` takes it out there too, with the page's code, and then the
real recall tool no longer returns it. A mistyped text names the nearest facts and changes nothing."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from harness.environment import process_env
from tests.support.commands import run_in_process
from tests.support.forgetting import FACT, QUERY, SAID, therapist_remembered
from tests.support.paths import ROOT


def forget(capsys, home, redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`nanobot-summary forget` in this process (from an async test: through asyncio.to_thread)."""
    return run_in_process(capsys, "forget", *args, env=process_env(home, redis_url, config=True))


async def test_forget_then_everywhere_leaves_nothing_the_recall_tool_returns(
    redis, redis_url, nanobot_home, fake_llm, worker_deps, monkeypatch, capsys
):
    tool = await therapist_remembered(redis, nanobot_home, fake_llm, worker_deps(), monkeypatch)
    memory_dir = nanobot_home.workspace / "memory"
    memory = memory_dir / "MEMORY.md"
    before = {path.name: path.read_bytes() for path in memory_dir.iterdir() if path.is_file()}

    typo = await asyncio.to_thread(forget, capsys, nanobot_home, redis_url, "The user's therapist is Dr. Row")
    assert typo.returncode == 1, typo
    assert "error: MEMORY.md holds no fact that reads" in typo.stderr and f'the nearest: "{FACT}"' in typo.stderr
    dry = await asyncio.to_thread(forget, capsys, nanobot_home, redis_url, "--everywhere", "--dry-run", FACT)
    assert dry.returncode == 0, dry
    assert f"would forget from MEMORY.md: {FACT}" in dry.stdout
    assert "would remove 1 line(s) of the daily notes (2026-11-20) and" in dry.stdout
    assert "1 passage(s) of the recall index (archived messages of telegram:42)" in dry.stdout, dry.stdout
    assert {path.name: path.read_bytes() for path in memory_dir.iterdir() if path.is_file()} == before, (
        "a mistyped text and a dry run change nothing"
    )

    done = await asyncio.to_thread(forget, capsys, nanobot_home, redis_url, FACT)
    assert done.returncode == 0, done
    assert f"forgot from MEMORY.md: {FACT}" in done.stdout and FACT.encode() not in memory.read_bytes()
    assert "the daily notes of 2026-11-20: 1 line(s)" in done.stdout
    assert "the recall index: 1 archived message(s) of telegram:42" in done.stdout, done.stdout
    assert "they are nanobot's, and this command never changes them" in done.stdout
    assert "forget --everywhere TEXT" in done.stdout
    assert "Thursdays" in await tool.execute(query=QUERY), "a forget alone leaves the notes and the archive"

    everywhere = await asyncio.to_thread(forget, capsys, nanobot_home, redis_url, "--everywhere", FACT)
    assert everywhere.returncode == 0, everywhere
    assert "MEMORY.md holds no fact that reads" in everywhere.stdout, "it was forgotten already: said, not an error"
    assert "removed 1 line(s) of the daily notes (2026-11-20) and" in everywhere.stdout
    assert "neither the recall tool nor the page's Recall returns it now" in everywhere.stdout
    answered = await tool.execute(query=QUERY)
    assert "Thursdays" not in answered and answered.startswith("Nothing found"), answered
    assert not any(b"Rowe" in day.read_bytes() for day in memory_dir.glob("????-??-??.md"))
    assert SAID.encode() in nanobot_home.session_file("telegram:42").read_bytes(), "the session file is nanobot's"

    # As users run it (its own process): nothing left anywhere is a "not found", with the code scripts can test.
    again = subprocess.run(
        [sys.executable, "-m", "worker", "forget", "--everywhere", FACT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=process_env(nanobot_home, redis_url, config=True),
        timeout=60,
    )
    assert again.returncode == 1, again
    assert "no daily note and no passage of the recall index holds each of the words" in again.stderr


def test_forget_refuses_a_text_too_short_and_a_missing_config(nanobot_home, redis_url, capsys) -> None:
    short = forget(capsys, nanobot_home, redis_url, " a ")
    assert short.returncode == 2 and "at least a few letters" in short.stderr
    nanobot_home.config_path.unlink()
    missing = forget(capsys, nanobot_home, redis_url, "any fact at all")
    assert missing.returncode == 2 and missing.stderr.startswith("error: "), missing
