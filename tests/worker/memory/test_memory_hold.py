"""MEMORY.md's facts wait for a quiet moment: held on disk while a session is active, written by the real worker's
minute check once no session file was written for the cache lifetime; nothing lost, doubled, or overwritten."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from arq import Retry

from harness.defaults import TEST_KEYS
from harness.models import echo_memory
from harness.sandbox import NanobotHome
from harness.transcripts import conversation
from nanobot_hooks.contract.queue import enqueue_summary
from nanobot_hooks.contract.records import SummarizeRequest
from tests.support.waiting import wait_until
from tests.support.workers import run_burst, summarize_now
from worker.memory import longterm
from worker.memory.dedup import normalize
from worker.memory.entries import Fact
from worker.memory.writer import MemoryFiles, last_session_write, quiet
from worker.state.outcomes import load_outcome
from worker.summarize.daily import JOB_FLUSH_MEMORY, daily_summaries
from worker.summarize.idle import idle_summary

KEY = "telegram:42"
OTHER = "cli:direct"
FACT = "The user deploys with ./deploy.sh --env prod"  # what echo_memory remembers
USER_FILE = "# Long-term Memory\n- my own line\n"


def backdate(home: NanobotHome, seconds: float, keys: list[str] | None = None) -> None:
    """The sessions (all files of the folder, or these keys' files) were last written `seconds` ago."""
    moment = time.time() - seconds
    paths = [home.session_file(key) for key in keys] if keys is not None else list(home.sessions_dir.iterdir())
    for path in paths:
        os.utime(path, (moment, moment))


def seeded_memory(home: NanobotHome) -> Path:
    path = home.workspace / "memory" / "MEMORY.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(USER_FILE, encoding="utf-8")
    longterm.write_facts(
        path, [Fact(text="Remember: prefers short answers", source="user")], "en", "2026-11-19", 300, session=OTHER
    )
    return path


async def test_facts_wait_until_every_session_is_quiet_and_are_written_once(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.responder = echo_memory
    path = seeded_memory(nanobot_home)
    pending = longterm.pending_path(path)
    before = path.read_bytes()
    nanobot_home.write_session(KEY, conversation(15))
    nanobot_home.write_session(OTHER, conversation(3))
    deps = deps_for(memory_write="idle", summary_cache_ttl=60)
    await summarize_now(redis, deps, KEY)  # its minute check runs too, at start-up

    outcome = await load_outcome(redis, KEY)
    assert outcome is not None and outcome.status == "summarized", outcome
    assert "1 facts held for MEMORY.md" in outcome.detail
    assert path.read_bytes() == before, "an active conversation: MEMORY.md's bytes do not change"
    assert FACT in pending.read_text(encoding="utf-8")
    assert "question 0 about the deploy script" in (nanobot_home.workspace / "memory" / "2026-11-20.md").read_text(
        encoding="utf-8"
    ), "daily notes are written as before"
    assert FACT in MemoryFiles(nanobot_home.workspace).known_facts(), "the next job's model knows it is kept"

    # The user edits MEMORY.md meanwhile, inside the part and around it.
    text = before.decode()
    edited = (
        text.replace("- my own line\n", "- my own line\n- a line added meanwhile\n").replace(
            "Remember: prefers short answers", "Remember: prefers short answers, in German"
        )
        + "\nbelow the part\n"
    )
    path.write_text(edited, encoding="utf-8")

    backdate(nanobot_home, 120, [KEY])  # one session is quiet, the other still active: still held
    await run_burst(deps)
    assert path.read_text(encoding="utf-8") == edited and pending.exists()

    backdate(nanobot_home, 120)  # every session quiet past the cache lifetime: the next check writes
    await run_burst(deps)
    text = path.read_text(encoding="utf-8")
    assert FACT in text and not pending.exists()
    assert text.startswith("# Long-term Memory\n- my own line\n- a line added meanwhile\n")
    assert text.endswith("\nbelow the part\n") and "Remember: prefers short answers, in German\n" in text
    meta = longterm.load_meta(longterm.sidecar_path(path))
    assert meta[normalize(FACT)].session == KEY
    assert meta[normalize("Remember: prefers short answers, in German")].session == OTHER, "the edit keeps its record"

    # arq is at-least-once: the same range again holds the same fact again, and the flush adds it no twice.
    written = path.read_bytes()
    await redis.delete(TEST_KEYS.record(KEY))
    await summarize_now(redis, deps, KEY)
    await run_burst(deps)
    assert path.read_bytes() == written and not pending.exists()
    assert path.read_text(encoding="utf-8").count("./deploy.sh") == 1


async def test_a_jobs_facts_go_in_at_once_when_every_session_is_quiet_and_wait_while_one_is_active(
    redis, nanobot_home, fake_llm, deps_for
):
    fake_llm.responder = echo_memory
    path = seeded_memory(nanobot_home)
    pending = longterm.pending_path(path)
    nanobot_home.write_session(KEY, conversation(15))
    nanobot_home.write_session(OTHER, conversation(3))
    deps = deps_for(memory_write="idle", summary_cache_ttl=60)
    backdate(nanobot_home, 120)  # every session quiet past the cache lifetime
    # The worker's start-up check runs before the job, with nothing held yet: only the job itself can write.
    done = await summarize_now(redis, deps, KEY, reason="idle")
    assert done.outcome is not None and done.outcome.status == "summarized", done.outcome
    assert FACT in path.read_text(encoding="utf-8") and not pending.exists(), "written at once: nobody is active"

    written = path.read_bytes()
    await redis.delete(TEST_KEYS.record(KEY))
    nanobot_home.write_session(KEY, conversation(18))
    backdate(nanobot_home, 120, [KEY])
    nanobot_home.write_session(OTHER, conversation(4))  # the other conversation is active: the facts wait
    done = await summarize_now(redis, deps, KEY, reason="idle")
    assert done.outcome is not None and done.outcome.status == "summarized", done.outcome
    assert path.read_bytes() == written and pending.exists()


async def test_the_idle_check_writes_what_was_held_before_it_queues_the_summary(redis, nanobot_home, deps_for):
    path = seeded_memory(nanobot_home)
    nanobot_home.write_session(KEY, conversation(15))
    deps = deps_for(memory_write="idle", summary_cache_ttl=60, summary_idle=True)
    longterm.hold_facts(path, longterm.Batch([Fact(text=FACT, source="user")], "en", "2026-11-20", KEY), time.time())
    ctx = {"deps": deps, "redis": redis}
    request = SummarizeRequest(session_key=KEY, reason="idle").model_dump(mode="json")
    with pytest.raises(Retry):  # the session was written just now: the check waits, the facts too
        await idle_summary(ctx, request)
    assert FACT not in path.read_text(encoding="utf-8")
    backdate(nanobot_home, 120)
    assert (await idle_summary(ctx, request))["status"] == "queued"
    assert FACT in path.read_text(encoding="utf-8") and not longterm.pending_path(path).exists(), (
        "written at the cold moment, before the summary's pickup writes the session file"
    )


async def test_a_worker_killed_between_hold_and_flush_loses_nothing(
    redis, agent_home, fake_llm, deps_for, procfile_worker
):
    fake_llm.responder = echo_memory
    path = seeded_memory(agent_home)
    pending = longterm.pending_path(path)
    before = path.read_bytes()
    agent_home.write_session(KEY, conversation(15))
    worker = procfile_worker(NANOBOT_MEMORY_WRITE="idle", NANOBOT_SUMMARY_CACHE_TTL="3600")
    await enqueue_summary(redis, SummarizeRequest(session_key=KEY))

    async def summarized() -> bool:
        outcome = await load_outcome(redis, KEY)
        return outcome is not None and outcome.status == "summarized"

    try:
        await wait_until(summarized, 90, "the job's outcome")
    except AssertionError:
        raise AssertionError(worker.log()[-3000:]) from None
    assert worker.process is not None
    os.killpg(worker.process.pid, signal.SIGKILL)
    worker.process.wait(10)
    assert path.read_bytes() == before and FACT in pending.read_text(encoding="utf-8"), "held on disk"

    backdate(agent_home, 7200)
    await run_burst(deps_for(memory_write="idle", summary_cache_ttl=3600))  # the next worker's start-up check
    assert FACT in path.read_text(encoding="utf-8") and not pending.exists()
    assert path.read_bytes().startswith(USER_FILE.encode())


async def test_the_daily_run_writes_what_waited_a_day_even_while_a_session_is_active(redis, nanobot_home, deps_for):
    path = seeded_memory(nanobot_home)
    nanobot_home.write_session(OTHER, conversation(3, user="x {i}"))  # active now
    deps = deps_for(memory_write="idle", summary_cache_ttl=60, auto_summary=True)
    fresh = longterm.Batch([Fact(text="Remember: the cat is called Mochi", source="user")], "en", "2026-11-20", KEY)
    longterm.hold_facts(path, fresh, time.time())
    await daily_summaries({"deps": deps, "redis": redis})
    assert "Mochi" not in path.read_text(encoding="utf-8"), "held for less than a day: still waits"
    old = longterm.Batch(
        [Fact(text="Remember: backups go to the NAS in the basement", source="user")], "en", "2026-11-19", KEY
    )
    longterm.hold_facts(path, old, time.time() - 25 * 3600)
    await daily_summaries({"deps": deps, "redis": redis})
    text = path.read_text(encoding="utf-8")
    assert "NAS in the basement" in text and "Mochi" in text and not longterm.pending_path(path).exists()


def test_the_minute_check_is_an_arq_cron_only_when_facts_are_held(settings_for):
    from worker.service.arq_worker import worker_options

    settings = settings_for(memory_write="idle")
    names = {job.name: job for job in worker_options(settings)["cron_jobs"]}
    flush = settings.keys.cron(JOB_FLUSH_MEMORY)
    assert names[flush].run_at_startup and names[flush].unique
    assert names[flush].minute is None, "every minute"
    assert flush not in {job.name for job in worker_options(settings_for(memory_write="now"))["cron_jobs"]}


def test_write_now_merges_what_an_idle_worker_held(tmp_path: Path) -> None:
    path = tmp_path / "memory" / "MEMORY.md"
    held = longterm.Batch([Fact(text="Remember: the cat is called Mochi", source="user")], "en", "2026-11-20", KEY)
    longterm.hold_facts(path, held, time.time())
    memory = MemoryFiles(tmp_path)
    result = memory.write_now(OTHER, [], [Fact(text="Remember: prefers tea", source="user")], "en")
    assert result.facts_added == 2 and not longterm.pending_path(path).exists()


def test_forgetting_a_session_drops_its_held_facts_too(tmp_path: Path) -> None:
    memory = MemoryFiles(tmp_path, hold=True)
    memory.write_now(KEY, [], [Fact(text="Remember: the cat is called Mochi", source="user")], "en")
    memory.write_now(OTHER, [], [Fact(text="Remember: prefers tea", source="user")], "en")
    assert memory.forget(KEY, dry_run=True) == ["Remember: the cat is called Mochi"]
    assert memory.forget(KEY) == ["Remember: the cat is called Mochi"]
    assert memory.flush(None, 60) is not None
    text = memory.memory_path.read_text(encoding="utf-8")
    assert "Mochi" not in text and "prefers tea" in text


def test_the_last_session_write_is_the_newest_file_nanobot_wrote(tmp_path: Path) -> None:
    assert last_session_write(tmp_path / "missing") is None and quiet(None, time.time(), 300)
    session, checkpoint, lock = (tmp_path / n for n in ("a.jsonl", "a.runtime.json", ".session-files.lock"))
    for path, age in ((session, 900), (checkpoint, 100), (lock, 1)):
        path.write_text("x", encoding="utf-8")
        os.utime(path, (time.time() - age, time.time() - age))
    newest = last_session_write(tmp_path)
    assert newest is not None and abs(time.time() - 100 - newest) < 5, "a running turn's file counts, a lock does not"
    assert not quiet(newest, time.time(), 300) and quiet(newest, time.time(), 60)


def test_held_facts_are_appended_a_cut_line_stays_its_own_and_every_job_reads_only_what_was_added(tmp_path):
    """A workspace that is never quiet holds facts all day: each job appends one line (the file is never
    rewritten, so its inode stays), a line cut short by a crash is skipped and costs no later batch, and the
    facts every job reads for its prompt are parsed once, then only as they grow."""
    path = tmp_path / "memory" / "MEMORY.md"
    pending = longterm.pending_path(path)

    def batch(n: int) -> longterm.Batch:
        return longterm.Batch([Fact(text=f"fact number {n}", source="user")], "en", "2026-11-20", KEY)

    longterm.hold_facts(path, batch(0), 100.0)
    inode = pending.stat().st_ino
    with pending.open("ab") as crashed:  # a worker killed mid-append left half a line
        crashed.write(b'{"held_at": 101.0, "session": "telegram:42", "facts": [{"text": "half a fa')
    parses = []
    real_parse = longterm.HELD._parse
    longterm.HELD._parse = lambda text: parses.append(len(text)) or real_parse(text)
    try:
        assert longterm.known_facts(path) == ["fact number 0"] and len(parses) == 1
        for n in range(1, 4):
            longterm.hold_facts(path, batch(n), 101.0 + n)
            assert longterm.known_facts(path)[-1] == f"fact number {n}"
        assert len(parses) == 1, "this process's own appends are followed, never read again"
    finally:
        longterm.HELD._parse = real_parse
    assert pending.stat().st_ino == inode, "appended, not rewritten"
    held = longterm.read_held(path)
    assert [h.batch.facts[0].text for h in held] == [f"fact number {n}" for n in range(4)], "the cut line alone lost"
    assert MemoryFiles(tmp_path).held_since() == 100.0
    stats = longterm.flush(path, 300)
    assert stats is not None and stats.added == 4 and not pending.exists()
    written = path.read_text(encoding="utf-8")
    assert all(written.count(f"fact number {n}") == 1 for n in range(4)) and "half a fa" not in written


@pytest.mark.parametrize("workers", [1, 2])
def test_the_busy_day_benchmark_runs_in_its_smoke_size(capsys, workers):
    """With two workers sharing the day, each reads only what the other appended: the followed files used to
    be read whole after every append of the other (0.05 -> 1.45 MB a job over 2,000 jobs)."""
    from tests.support.bench import load_bench

    assert load_bench("bench_memory_day").main(["--smoke", "--workers", str(workers)]) == 0
    out = capsys.readouterr().out
    assert f"300 jobs on one day, 1,000 sessions, {workers} worker" in out and "resident memory" in out
    assert "memory-file work per job (CPU time): first 50" in out and "followed files read per job" in out
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["first_ms"] > 0 and figures["last_ms"] > 0 and figures["rss_growth_mb"] < 200
    # Another worker's sections and held lines (under 1 kB a job here) and the bytes compared before them.
    assert figures["read_last_mb"] < 0.02, figures


@pytest.mark.parametrize("requires_token", [True, False])
async def test_nanobots_web_chat_writes_memory_when_its_channel_asks_for_a_token(
    redis, nanobot_home, fake_llm, deps_for, requires_token
):
    """The first chat most users have is nanobot's web UI (`websocket:<id>`): onboard sets a password for it,
    so with the default NANOBOT_MEMORY_SESSIONS=direct its facts reach MEMORY.md; an open channel's do not."""
    config = json.loads(nanobot_home.config_path.read_text(encoding="utf-8"))
    config["channels"] = {"websocket": {"enabled": True, "websocketRequiresToken": requires_token}}
    nanobot_home.config_path.write_text(json.dumps(config), encoding="utf-8")
    fake_llm.responder = echo_memory
    key = "websocket:8f2a1c3e-9b7d-4e11-a2c4-5d6e7f8a9b0c"
    nanobot_home.write_session(key, conversation(15))
    backdate(nanobot_home, 3600)  # every session quiet: facts are written at once
    await summarize_now(redis, deps_for(memory_write="idle", summary_cache_ttl=60), key)
    path = nanobot_home.workspace / "memory" / "MEMORY.md"
    written = path.read_text(encoding="utf-8") if path.exists() else ""
    assert (FACT in written) is requires_token, written
    outcome = await load_outcome(redis, key)
    assert outcome is not None and ("an untrusted session" in outcome.detail) is not requires_token, outcome.detail


async def test_a_read_only_memory_md_is_left_alone_its_facts_held_until_it_is_writable_and_the_reason_logged_once(
    redis, nanobot_home, fake_llm, deps_for, caplog
):
    fake_llm.responder = echo_memory
    path = seeded_memory(nanobot_home)
    pending = longterm.pending_path(path)
    before = path.read_bytes()
    path.chmod(0o444)  # the user's wish: nobody rewrites it
    nanobot_home.write_session(KEY, conversation(15))
    deps = deps_for(memory_write="now")  # the job would write MEMORY.md at once
    done = await summarize_now(redis, deps, KEY)
    assert done.outcome is not None and done.outcome.status == "summarized", done.outcome
    assert "1 facts held for MEMORY.md: MEMORY.md is read-only (mode 0444)" in done.outcome.detail, done.outcome
    assert path.read_bytes() == before and (path.stat().st_mode & 0o7777) == 0o444, "not a byte, not the mode"
    assert FACT in pending.read_text(encoding="utf-8"), "held, not lost"
    assert "question 0 about the deploy script" in (nanobot_home.workspace / "memory" / "2026-11-20.md").read_text(
        encoding="utf-8"
    ), "the notes are written as ever"

    idle = deps_for(memory_write="idle", summary_cache_ttl=60)
    backdate(nanobot_home, 120)
    caplog.clear()
    await run_burst(idle)  # the minute's flush, twice: the file stays, the reason is said once
    await run_burst(idle)
    said = [r.getMessage() for r in caplog.records if "read-only" in r.getMessage()]
    assert len(said) == 1 and "facts stay held until it is writable again" in said[0], said
    assert path.read_bytes() == before and FACT in pending.read_text(encoding="utf-8")

    path.chmod(0o644)
    await run_burst(idle)
    assert FACT in path.read_text(encoding="utf-8") and not pending.exists(), "written once it is writable again"
    assert path.read_text(encoding="utf-8").startswith(USER_FILE)


def test_the_busy_day_benchmarks_jobs_list_no_more_known_facts_late_in_the_day_than_the_prompt_takes(tmp_path):
    """The benchmark's job asks for the facts the summarizer's prompt takes, as the job does: asked for all of
    them, every job listed the whole day's held facts (5,600 at 2,000 jobs), the late jobs' slowdown that one
    worker showed too. Counted in facts listed, not timed."""
    from tests.support.bench import load_bench
    from worker.summarize.remember import KNOWN_FACTS_IN_PROMPT

    bench = load_bench("bench_memory_day")
    listed: list[int] = []

    class Counted(MemoryFiles):
        def known_facts(self, limit: int | None = None) -> list[str]:
            found = super().known_facts(limit)
            listed.append(len(found))
            return found

    home = NanobotHome.create(tmp_path, "http://127.0.0.1:9/v1")
    home.write_session("telegram:1", [{"role": "user", "content": "hi", "timestamp": bench.DAY.isoformat()}])
    memory = Counted(home.workspace, "UTC", hold=True)
    jobs = 2 * KNOWN_FACTS_IN_PROMPT // 3 + 10  # three facts each: held facts past twice the prompt's number
    for n in range(jobs):
        bench.one_job(memory, home.sessions_dir, n)
    assert len(longterm.HELD.get(longterm.pending_path(memory.memory_path)).texts) == 3 * jobs
    assert max(listed) <= KNOWN_FACTS_IN_PROMPT, max(listed)
