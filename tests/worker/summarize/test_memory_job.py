"""The memory files as the real worker writes them: midnight, re-runs, the daily run, secrets, language."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis as sync_redis

from harness.defaults import TEST_KEYS
from harness.fakellm import FakeRequest, Reply
from harness.models import echo_memory
from harness.transcripts import conversation
from nanobot_hooks.contract.marker import SessionMarker
from nanobot_hooks.contract.queue import enqueue_summary, load_record
from nanobot_hooks.contract.records import SummarizeRequest
from nanobot_hooks.contract.session_format import NOTED_SUFFIX, RETIRED_FOLDER, retired_name
from tests.support.workers import run_burst, summarize_now
from worker.memory.notes import noted_spans
from worker.state.formats import memory_off
from worker.state.outcomes import load_outcome
from worker.summarize.daily import daily_summaries

KEY = "telegram:42"
API_KEY = "sk-proj-" + "Zx9" * 12
PASSWORD = "hunter2-Correct-Horse"
PRIVATE_KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAvJ1xP0WlRk3q\n-----END RSA PRIVATE KEY-----"


def memory_files(workspace: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((workspace / "memory").glob("*.md"))}


async def test_midnight_rerun_and_idempotence_through_the_worker(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.responder = echo_memory
    messages = conversation(15, start=datetime(2026, 11, 20, 23, 45), user="topic {i} of the night")
    nanobot_home.write_session(KEY, messages)
    deps = deps_for()
    await summarize_now(redis, deps, KEY)
    files = memory_files(nanobot_home.workspace)
    assert set(files) == {"2026-11-20.md", "2026-11-21.md", "MEMORY.md"}
    night, morning = files["2026-11-20.md"].decode(), files["2026-11-21.md"].decode()
    assert "topic 0 of the night" in night and "topic 0 of the night" not in morning
    assert "topic 8 of the night" in morning  # 23:45 + 16 minutes is past midnight
    assert "./deploy.sh --env prod" in files["MEMORY.md"].decode()

    # arq is at-least-once: the same range again (the record lost) adds nothing anywhere.
    await redis.delete(TEST_KEYS.record(KEY))
    await summarize_now(redis, deps, KEY)
    assert await load_record(redis, KEY) is not None
    assert memory_files(nanobot_home.workspace) == files


async def test_daily_run_notes_every_message_once_whatever_the_keep_rule(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.responder = echo_memory
    today = datetime.now().replace(hour=9, minute=0, second=0, microsecond=0)
    messages = conversation(20, start=today, user="daily item {i}")
    nanobot_home.write_session(KEY, messages)
    deps = deps_for(summary_keep="messages:12")
    assert await daily_summaries({"deps": deps, "redis": redis}) == 1
    await run_burst(deps)
    outcome = await load_outcome(redis, KEY)
    assert outcome is not None and outcome.status == "summarized" and "noted 12 more messages" in outcome.detail
    day = today.strftime("%Y-%m-%d")
    notes = (nanobot_home.workspace / "memory" / f"{day}.md").read_text(encoding="utf-8")
    assert (
        max(span.last for span in noted_spans(nanobot_home.workspace / "memory", KEY, day)) == messages[-1]["timestamp"]
    )
    for i in range(20):
        assert notes.count(f"- daily item {i}\n") == 1, f"daily item {i} is noted exactly once"

    # A later ordinary job covers part of that tail: summarized, but not noted a second time.
    before = notes
    more = messages + conversation(10, start=today + timedelta(hours=2), user="afternoon {i}")
    nanobot_home.write_session(KEY, more)
    await redis.delete(TEST_KEYS.record(KEY))
    calls = len(fake_llm.requests)
    await summarize_now(redis, deps, KEY)
    after = (nanobot_home.workspace / "memory" / f"{day}.md").read_text(encoding="utf-8")
    assert after.startswith(before), "append only"
    assert after.count("daily item 19") == before.count("daily item 19")
    assert "afternoon 0" in after
    assert re.search(
        r"^\(in notes\) \[.*\] user: daily item 19$",
        fake_llm.requests[calls].body["messages"][-1]["content"],
        re.MULTILINE,
    )

    # The daily run notes the new tail; run again with nothing new, it calls no model and changes no file.
    await redis.delete(TEST_KEYS.record(KEY))
    nanobot_home.write_session(KEY, more, last_archived=len(more) - 4)
    await daily_summaries({"deps": deps, "redis": redis})
    await run_burst(deps)
    assert "afternoon 9" in (nanobot_home.workspace / "memory" / f"{day}.md").read_text(encoding="utf-8")
    files = memory_files(nanobot_home.workspace)
    calls = len(fake_llm.requests)
    await daily_summaries({"deps": deps, "redis": redis})
    await run_burst(deps)
    assert len(fake_llm.requests) == calls
    assert memory_files(nanobot_home.workspace) == files
    assert max(span.last for span in noted_spans(nanobot_home.workspace / "memory", KEY, day)) == more[-1]["timestamp"]


async def drain(redis, deps) -> None:
    """Burst workers until the queue is empty: a job's after_job_end may queue another after a burst has exited."""
    while await redis.zcard(TEST_KEYS.queue):
        await run_burst(deps)


async def test_a_flag_set_while_the_job_runs_gets_its_own_job_afterwards(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.responder = echo_memory
    nanobot_home.write_session(KEY, conversation(15, start=datetime.now().replace(hour=8)))
    deps = deps_for()
    await enqueue_summary(redis, SummarizeRequest(session_key=KEY))
    original = deps.memory.noted_spans
    flagged = False

    def set_flag_during_job(session_key: str, date: str, generation: int = 0) -> list[tuple[str, str]]:
        # the daily run fires while the job runs: after the job took (no) flag at its start
        nonlocal flagged
        if not flagged:
            flagged = True
            client = sync_redis.Redis.from_url(deps.settings.redis_url)
            client.set(TEST_KEYS.daily_flag(KEY), "2000-01-01")
            client.close()
        return original(session_key, date, generation)

    deps.memory.noted_spans = set_flag_during_job  # type: ignore[method-assign]
    await run_burst(deps)
    assert flagged
    await drain(redis, deps)  # after_job_end queued a second job
    assert not await redis.exists(TEST_KEYS.daily_flag(KEY))
    outcome = await load_outcome(redis, KEY)
    assert outcome is not None and outcome.status == "noted" and "noted 10 more messages" in outcome.detail


async def test_a_copy_kept_at_new_while_the_job_runs_gets_its_own_job_and_is_noted(
    redis, nanobot_home, fake_llm, deps_for
):
    """A `/new` while the session's job runs finds the job's id taken; the copy it kept gets one more job, which
    notes what the first job did not (the kept tail, the turns said meanwhile)."""
    fake_llm.responder = echo_memory
    read = conversation(15, start=datetime.now().replace(hour=8))
    meanwhile = conversation(3, start=datetime.now().replace(hour=9), user="said before the reset {i}")
    nanobot_home.write_session(KEY, read)
    deps = deps_for()
    await enqueue_summary(redis, SummarizeRequest(session_key=KEY))
    original = deps.memory.noted_spans
    kept: list[Path] = []

    def new_during_job(session_key: str, date: str, generation: int = 0) -> list[tuple[str, str]]:
        if not kept:  # what the hooks and nanobot do at /new: the file kept, the session emptied, one generation on
            folder = nanobot_home.sessions_dir / RETIRED_FOLDER
            folder.mkdir(exist_ok=True)
            copy = nanobot_home.write_session(KEY, read + meanwhile)
            kept.append(copy.rename(folder / retired_name(KEY, 0, 1)))
            metadata: dict[str, object] = {}
            SessionMarker.next_generation(metadata)
            nanobot_home.write_session(KEY, [], metadata=metadata)
        return original(session_key, date, generation)

    deps.memory.noted_spans = new_during_job  # type: ignore[method-assign]
    await run_burst(deps)
    assert kept
    await drain(redis, deps)  # after_job_end queued one more job
    outcome = await load_outcome(redis, KEY)
    assert outcome is not None and outcome.reason == "new" and "before /new" in outcome.detail, outcome
    assert [path.name for path in (nanobot_home.sessions_dir / RETIRED_FOLDER).iterdir()] == [
        retired_name(KEY, 0, 1) + NOTED_SUFFIX
    ]
    day = (nanobot_home.workspace / "memory" / f"{datetime.now().date().isoformat()}.md").read_text(encoding="utf-8")
    assert all(f"said before the reset {i}" in day for i in range(3)), day
    assert all(f"question {i} about the deploy script" in day for i in range(15)), "the kept tail too"


async def test_planted_secrets_reach_no_memory_file(redis, nanobot_home, fake_llm, deps_for):
    def leaky(request: FakeRequest) -> Reply:
        secret_text = f"API key {API_KEY}, password: {PASSWORD}, key {PRIVATE_KEY}"
        return Reply(
            json.dumps(
                {
                    "summary": f"## Important details\n- the user pasted {secret_text}",
                    "daily_notes": [
                        {
                            "date": "2026-11-20",
                            "decisions": [f"store {secret_text}"],
                            "tasks": [f"rotate password={PASSWORD}"],
                        }
                    ],
                    "facts": [
                        {
                            "text": f"The DeepSeek API key is {API_KEY} in providers.deepseek.apiKey",
                            "tag": "durable",
                            "importance": 5,
                            "category": "configuration",
                            "source": "user",
                        },
                        {
                            "text": f"Server private key: {PRIVATE_KEY}",
                            "tag": "durable",
                            "importance": 5,
                            "source": "user",
                        },
                    ],
                }
            )
        )

    fake_llm.responder = leaky
    nanobot_home.write_session(KEY, conversation(15, user=f"my key is {API_KEY} {{i}}"))
    await summarize_now(redis, deps_for(), KEY)
    files = memory_files(nanobot_home.workspace)
    assert files, "the job wrote memory files"
    for name, data in files.items():
        text = data.decode()
        for secret in (API_KEY, PASSWORD, "MIIEowIBAAKCAQEAvJ1xP0WlRk3q"):
            assert secret not in text, f"{secret[:8]}... leaked into {name}"
    assert "providers.deepseek.apiKey" in files["MEMORY.md"].decode(), "where the key lives is kept"
    record = await load_record(redis, KEY)
    assert record is not None and API_KEY not in record.summary and PASSWORD not in record.summary


async def test_a_chinese_conversation_gets_chinese_notes_and_headings(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.responder = echo_memory
    nanobot_home.write_session(KEY, conversation(15, user="请帮我检查部署脚本 {i}", assistant="好的，脚本 {i} 没问题"))
    await summarize_now(redis, deps_for(), KEY)
    notes = (nanobot_home.workspace / "memory" / "2026-11-20.md").read_text(encoding="utf-8")
    assert "### 主要话题" in notes and "请帮我检查部署脚本 0" in notes
    assert "Topics" not in notes
    system = fake_llm.requests[0].body["messages"][0]["content"]
    assert "Chinese (简体中文)" in system


async def test_a_daily_job_that_gives_up_does_not_requeue_itself_forever(redis, nanobot_home, fake_llm, deps_for):
    from harness.fakellm import Error

    fake_llm.default = Error.server()
    nanobot_home.write_session(KEY, conversation(15, start=datetime.now().replace(hour=8)))
    deps = deps_for(summary_max_tries=2)
    await daily_summaries({"deps": deps, "redis": redis})
    for _ in range(3):
        await run_burst(deps)
    assert await redis.zcard(TEST_KEYS.queue) == 0, "nothing left to run"
    assert not await redis.exists(TEST_KEYS.daily_flag(KEY))
    assert len(fake_llm.requests) == 2, "one job, two tries, then it gave up"
    outcome = await load_outcome(redis, KEY)
    assert outcome is not None and outcome.status == "failed"


async def test_broken_memory_files_never_block_the_summary(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.responder = echo_memory
    (nanobot_home.workspace / "memory").write_text("a file where the folder should be")
    nanobot_home.write_session(KEY, conversation(15))
    record = (await summarize_now(redis, deps_for(), KEY)).record
    assert record is not None, "the summary is stored although the notes cannot be written"
    outcome = await load_outcome(redis, KEY)
    assert outcome is not None and outcome.status == "summarized" and "memory files not written" in outcome.detail
    # doctor, status and the page say memory is off for the session, and why.
    assert outcome.memory_skipped.startswith("memory files not written")
    (line,) = memory_off({}, [outcome.model_dump(mode="json")])
    assert line.startswith(f"{KEY}: its last job wrote no notes or facts (memory files not written")


async def test_one_odd_item_does_not_cost_the_days_notes(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.default = Reply(
        json.dumps(
            {
                "summary": "## What happened\n- the user asked about the deploy script",
                "facts": [],
                "daily_notes": [
                    {
                        "date": "2026-11-20",
                        "topics": ["kept topic", {"odd": 1}],
                        "technical_issues": ["a plain string issue", {"problem": "p", "solution": "s"}, 7],
                    }
                ],
            }
        )
    )
    nanobot_home.write_session(KEY, conversation(15))
    await summarize_now(redis, deps_for(), KEY)
    notes = (nanobot_home.workspace / "memory" / "2026-11-20.md").read_text(encoding="utf-8")
    assert "kept topic" in notes and "a plain string issue" in notes and "- p → s" in notes


async def test_a_rerun_adds_no_notes_even_when_the_model_ignores_the_in_notes_marks(
    redis, nanobot_home, fake_llm, deps_for
):
    calls = 0

    def disobedient(request: FakeRequest) -> Reply:
        nonlocal calls
        calls += 1
        return Reply(
            json.dumps(
                {
                    "summary": "## What happened\n- the user asked about the deploy script",
                    "facts": [],
                    "daily_notes": [{"date": "2026-11-20", "topics": [f"wording {calls}"]}],
                }
            )
        )

    fake_llm.responder = disobedient
    nanobot_home.write_session(KEY, conversation(15))
    deps = deps_for()
    await summarize_now(redis, deps, KEY)
    files = memory_files(nanobot_home.workspace)
    assert "wording 1" in files["2026-11-20.md"].decode()
    await redis.delete(TEST_KEYS.record(KEY))
    await summarize_now(redis, deps, KEY)
    assert calls == 2 and memory_files(nanobot_home.workspace) == files


async def test_the_daily_run_is_off_with_auto_summary_false_and_skips_internal_sessions(
    redis, nanobot_home, fake_llm, deps_for
):
    nanobot_home.write_session(KEY, conversation(15, start=datetime.now().replace(hour=8)))
    nanobot_home.write_session("heartbeat", conversation(15, start=datetime.now().replace(hour=8)))
    assert await daily_summaries({"deps": deps_for(auto_summary=False), "redis": redis}) == 0
    assert await redis.zcard(TEST_KEYS.queue) == 0 and not await redis.exists(TEST_KEYS.daily_flag(KEY))
    assert await daily_summaries({"deps": deps_for(), "redis": redis}) == 1
    assert await redis.exists(TEST_KEYS.daily_flag(KEY)) and not await redis.exists(TEST_KEYS.daily_flag("heartbeat"))


def test_the_daily_run_is_an_arq_cron_at_the_configured_time(settings_for):
    from zoneinfo import ZoneInfo

    from worker.service.arq_worker import worker_options

    options = worker_options(settings_for(summary_daily_at="06:30"), ZoneInfo("Asia/Shanghai"))
    [job] = options["cron_jobs"]
    assert (job.hour, job.minute, job.second, job.unique) == (6, 30, 0, True)
    assert options["timezone"] == ZoneInfo("Asia/Shanghai") and options["keep_result"] == 0
    [job] = worker_options(settings_for(summary_daily_at="06:30:15"))["cron_jobs"]
    assert (job.hour, job.minute, job.second) == (6, 30, 15)


WINDOW = 64 * 1024  # the huge-day test's windows (the worker reads 4 MB at a time)


@pytest.mark.slow  # five daily runs under tracemalloc
async def test_a_daily_job_on_a_huge_day_holds_one_window_of_it_at_a_time_and_notes_every_message(
    redis, nanobot_home, fake_llm, deps_for, monkeypatch
):
    """The worst case: the day is the whole session (everything summarized, nothing noted yet). A day twice as
    long costs the job no more memory (its model calls cost the same whatever the day's length)."""
    import tracemalloc

    from worker.summarize import notes_only

    # 64 KB windows of ~0.8 and ~1.5 MB days prove the windowing as 4 MB windows of 200 MB do
    # (bench/bench_bigsession.py measures that), in seconds.
    monkeypatch.setattr(notes_only, "WINDOW_BYTES", WINDOW)

    def answer(request: FakeRequest) -> Reply:  # the fake model keeps no request: its memory is not the job's
        fake_llm.clear()
        return echo_memory(request)

    fake_llm.responder = answer
    deps = deps_for()
    deps.recall = None  # its first fill is bounded on its own (tests/hooks/recall)
    today = datetime.now().replace(hour=0, minute=5, second=0, microsecond=0)
    nanobot_home.write_session("telegram:7", conversation(3, start=today))
    await summarize_now(redis, deps, "telegram:7")  # the model's client warmed up: its first call imports
    peaks: dict[int, list[int]] = {50: [], 100: []}
    sizes: dict[int, int] = {}
    # A first day is run unmeasured: the first daily run's one-off allocations (the job's first note, caches)
    # outweigh a small day's windows. A run's peak also holds what else happens to be alive then (one run's peak
    # may be 0.4 MB above the next one's, for a day of the same length) and creeps up from one run to the next, so
    # the two lengths run in the order short, long, long, short, and their mean peaks are compared: the creep cancels
    # out, and the days are large enough that the rest stays well under the difference between them.
    days = (("telegram:6", 20), ("telegram:8", 50), ("telegram:9", 100), ("telegram:10", 100), ("telegram:11", 50))
    for n, (key, turns) in enumerate(days):
        messages = conversation(
            turns,
            start=today,
            step=timedelta(seconds=10),
            user=f"{key} day {{i}}",
            assistant="answer {i}: " + "z" * 16_000,
        )
        sizes[turns] = nanobot_home.write_session(key, messages, last_archived=len(messages) - 10).stat().st_size
        assert await daily_summaries({"deps": deps, "redis": redis}) >= 1
        tracemalloc.start()
        try:
            await run_burst(deps)
            if n:
                peaks[turns].append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        notes = (nanobot_home.workspace / "memory" / f"{today:%Y-%m-%d}.md").read_text(encoding="utf-8")
        for i in range(turns):
            assert notes.count(f"- {key} day {i}\n") == 1, f"{key} day {i} is noted exactly once"
    small, big = sum(peaks[50]) / 2, sum(peaks[100]) / 2
    # Holding the day whole grows the peak about twice the day's growth; one window at a time grows it by what the notes
    # file and the run's other state add.
    assert big - small < sizes[100] - sizes[50], (
        f"{small / 2**20:.2f} MB at the peak for a {sizes[50] / 2**20:.2f} MB day, {big / 2**20:.2f} MB "
        f"for {sizes[100] / 2**20:.2f} MB (the means of two runs each)"
    )


async def test_the_daily_run_removes_copies_kept_at_new_once_noted_and_older_than_the_setting(
    redis, nanobot_home, deps_for
):
    import os
    import time

    folder = nanobot_home.sessions_dir / RETIRED_FOLDER
    folder.mkdir()
    copies = {}
    for name, key, days, noted in (
        ("old noted", "telegram:1", 40, True),
        ("recent noted", "telegram:2", 5, True),
        ("old not noted", "telegram:3", 100, False),
    ):
        path = nanobot_home.write_session(key, conversation(2))
        target = folder / (retired_name(key, 0, 1) + (NOTED_SUFFIX if noted else ""))
        path.rename(target)
        os.utime(target, (time.time() - days * 86_400,) * 2)
        copies[name] = target
    live = nanobot_home.write_session(KEY, conversation(2))
    await daily_summaries({"deps": deps_for(), "redis": redis})  # the default: 30 days
    assert not copies["old noted"].exists()
    assert copies["recent noted"].exists() and copies["old not noted"].exists(), "a copy not noted is never removed"
    assert live.exists()
    await daily_summaries({"deps": deps_for(summary_retired_days=3), "redis": redis})
    assert sorted(folder.iterdir()) == [copies["old not noted"]]
