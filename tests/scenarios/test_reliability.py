"""Reliability: old Redis, odd session keys, a model's broken characters, a notes write that failed, records of
deleted sessions, and bad input of every shape (property-based)."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.fakellm import Reply
from harness.models import Summarizer, summary_json, user_lines
from harness.redis_server import RedisServer
from harness.transcripts import conversation
from nanobot_hooks.contract.marker import SessionMarker
from nanobot_hooks.contract.queue import load_record, store_record
from nanobot_hooks.contract.records import SummarizeRequest, SummaryRecord
from nanobot_hooks.contract.session_format import storage_name
from tests.support.commands import run_in_process
from tests.support.workers import run_burst, summarize_now
from worker.connections import queue_client, version_problem
from worker.keep_rule import KeepRule
from worker.memory import longterm
from worker.memory.entries import Fact
from worker.memory.notes import is_noted, noted_spans
from worker.nanobot.sessions import list_session_keys, parse_session
from worker.state.budget import Rest, Spend, start_rest
from worker.state.outcomes import JobOutcome, load_outcome
from worker.state.progress import Progress
from worker.summarize.cut import plan_cut
from worker.summarize.daily import daily_summaries
from worker.text.prepare import transcript
from worker.text.tokens import count_message, estimate_tokens

KEY = "telegram:42"
# Commands of Redis 6.0 and later (GETDEL and GETEX are 6.2): switched off, the server answers like a 5.0.
NEWER_COMMANDS = (
    "GETDEL",
    "GETEX",
    "LMOVE",
    "BLMOVE",
    "COPY",
    "ZRANGESTORE",
    "SMISMEMBER",
    "ZMSCORE",
    "LPOS",
    "HRANDFIELD",
    "ZRANDMEMBER",
    "ZDIFF",
    "ZINTER",
    "ZUNION",
    "GEOSEARCH",
    "XAUTOCLAIM",
    "RESET",
)


@pytest.mark.slow  # a worker process, nanobot's python or a pip run
async def test_a_redis_without_the_commands_of_6_x_runs_jobs_and_the_daily_run(
    tmp_path, nanobot_home, fake_llm, deps_for
):
    server = RedisServer(tmp_path / "redis", [f'rename-command {name} ""' for name in NEWER_COMMANDS]).start()
    try:
        url = server.url()
        redis = queue_client(url, TEST_KEYS.queue)
        fake_llm.responder = Summarizer()
        nanobot_home.write_session(KEY, conversation(15, start=datetime.now().replace(hour=8)))
        deps = deps_for(redis_url=url)
        assert await daily_summaries({"deps": deps, "redis": redis}) == 1
        await run_burst(deps)
        outcome = await load_outcome(redis, KEY)
        assert outcome is not None and outcome.status == "summarized", outcome
        assert "noted" in outcome.detail and not await redis.exists(TEST_KEYS.daily_flag(KEY))
        await redis.aclose()
    finally:
        server.stop()


@pytest.mark.parametrize(
    "version, problem",
    [("4.0.14", True), ("2.8.24", True), ("5.0.7", False), ("6.0.16", False), ("7.2.4", False), ("valkey-8", False)],
)
def test_a_redis_older_than_5_0_is_refused_in_one_line(version: str, problem: bool) -> None:
    found = version_problem(version)
    assert (found is not None) is problem
    if problem:
        assert found == f"Redis {version} is too old: 5.0 or later is needed"


async def test_a_flagged_session_that_rests_is_not_queued_again_and_again(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.responder = Summarizer()
    nanobot_home.write_session(KEY, conversation(15, start=datetime.now().replace(hour=8)))
    await start_rest(redis, KEY, "a failed job", 600, 600)
    deps = deps_for()
    assert await daily_summaries({"deps": deps, "redis": redis}) == 1
    worker = await run_burst(deps)
    assert worker.jobs_complete == 1, "after_job_end did not queue the resting session again"
    assert await redis.exists(TEST_KEYS.daily_flag(KEY)), "its flag waits for a job after the rest"
    assert fake_llm.requests == []


def _longest_key() -> str:
    key = "email:" + "a" * 200 + "@example.com"
    while len(storage_name(key)) > 255:
        key = key[:6] + key[7:]
    return key


async def test_every_key_nanobot_can_store_is_served_and_a_bad_file_stops_no_run(
    redis, redis_url, nanobot_home, fake_llm, deps_for, capsys
):
    longest = _longest_key()
    assert len(longest.encode()) >= 185
    fake_llm.responder = Summarizer()
    for key in (longest, KEY):
        nanobot_home.write_session(key, conversation(15, start=datetime.now().replace(hour=8)))
    # A file whose key the worker refuses (a control character), beside them.
    bad = nanobot_home.sessions_dir / storage_name("telegram:\x07bell")
    bad.write_text(nanobot_home.session_file(KEY).read_text(encoding="utf-8"), encoding="utf-8")
    assert set(list_session_keys(nanobot_home.sessions_dir)) == {longest, KEY}
    deps = deps_for()
    assert await daily_summaries({"deps": deps, "redis": redis}) == 2
    await run_burst(deps)
    for key in (longest, KEY):
        outcome = await load_outcome(redis, key)
        assert outcome is not None and outcome.status == "summarized", (key, outcome)
    listed = await asyncio.to_thread(
        run_in_process, capsys, "enqueue", "--all", "--dry-run", env=process_env(nanobot_home, redis_url, config=True)
    )
    assert listed.returncode == 0 and longest in listed.stdout and "skipping session file" in listed.stderr


async def test_a_broken_character_in_the_models_answer_does_not_fail_the_job(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.default = Reply(summary_json("## What happened\n- the user sent \ud83d half an emoji"))
    nanobot_home.write_session(KEY, conversation(15))
    done = await summarize_now(redis, deps_for(), KEY)
    outcome, record = done.outcome, done.record
    assert outcome is not None and outcome.status == "summarized", outcome
    assert record is not None and "half an emoji" in record.summary


async def test_a_notes_write_that_failed_is_caught_up_never_skipped(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.responder = Summarizer()
    morning = datetime.now().replace(hour=8, minute=0, second=0, microsecond=0)
    messages = conversation(15, start=morning)
    nanobot_home.write_session(KEY, messages)
    memory = nanobot_home.workspace / "memory"
    memory.write_text("not a folder", encoding="utf-8")  # the memory folder cannot be made
    deps = deps_for(summary_keep="messages:2")
    outcome = (await summarize_now(redis, deps, KEY)).outcome
    assert outcome is not None and outcome.status == "summarized" and "memory files not written" in outcome.detail
    memory.unlink()
    # nanobot applies the summary (its hidden marker at the boundary); later messages are summarized and
    # noted: the earlier ones must not count as noted because of that.
    record = await load_record(redis, KEY)
    assert record is not None
    messages.insert(
        record.boundary,
        {
            "role": "user",
            "content": "Continue from the checkpoint.",
            "_hidden_history": True,
            "timestamp": messages[record.boundary]["timestamp"],
        },
    )
    messages += conversation(10, start=morning.replace(hour=11), user="later question {i}")
    nanobot_home.write_session(
        KEY,
        messages,
        last_archived=record.boundary,
        metadata={"_last_summary": {"text": record.summary, "last_active": "x"}},
    )
    await redis.delete(TEST_KEYS.record(KEY))
    await summarize_now(redis, deps, KEY)
    day = morning.date().isoformat()
    spans = noted_spans(memory, KEY, day)
    assert spans and not is_noted(messages[0]["timestamp"], spans)
    # The daily run notes what the failed write left out.
    await daily_summaries({"deps": deps, "redis": redis})
    await run_burst(deps)
    spans = noted_spans(memory, KEY, day)
    visible = [m for m in messages if not m.get("_hidden_history")]
    assert all(is_noted(m["timestamp"], spans) for m in visible), "every message of the day is in its notes"


@pytest.fixture
def in_new_york(monkeypatch):
    """This process's local time is New York's, as a nanobot there stamps its messages."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


async def sent_as_new_and_noted(redis, deps, fake_llm, nanobot_home, said: str) -> str:
    """A job over KEY sends the messages `said, question 0..8` to the model as new (not as already in the notes) and
    notes each of them in 1 November's notes, which it returns."""
    sent = len(fake_llm.requests)
    assert (await summarize_now(redis, deps, KEY)).outcome.status == "summarized"
    asked = [text for request in fake_llm.requests[sent:] for _, text in user_lines(request)]
    assert [f"{said}, question {i}" for i in range(9)] == [t for t in asked if said in t], (
        "the messages are sent as new, not as already in the notes"
    )
    notes = (nanobot_home.workspace / "memory" / "2026-11-01.md").read_text(encoding="utf-8")
    assert all(f"{said}, question {i}" in notes for i in range(9)), notes
    return notes


async def test_the_hour_the_clock_repeats_is_noted_though_its_times_fall_in_a_noted_span(
    in_new_york, redis, nanobot_home, fake_llm, deps_for
):
    """nanobot stamps messages in naive local time. When summer time ends (New York, 1 November 2026, 02:00
    becomes 01:00 again), the repeated hour's messages carry times that a span noted an hour before covers;
    they come after it, and must be sent as new and noted."""
    nanobot_home.write_config(fake_llm.url, timezone="America/New_York")
    fake_llm.responder = Summarizer()
    summer = conversation(20, start=datetime(2026, 11, 1, 1, 0))  # 01:00-01:39, the first time round
    nanobot_home.write_session(KEY, summer)
    deps = deps_for(summary_keep="messages:2")
    assert (await summarize_now(redis, deps, KEY)).outcome.status == "summarized"
    record = await load_record(redis, KEY)
    assert record is not None
    # nanobot applies the summary (its hidden marker moves the later messages up by one); then the clock goes back.
    messages = summer[: record.boundary] + [
        {
            "role": "user",
            "content": "Continue from the checkpoint.",
            "_hidden_history": True,
            "timestamp": "2026-11-01T01:40:00",
        }
    ]
    messages += summer[record.boundary :]
    winter = conversation(10, start=datetime(2026, 11, 1, 1, 5), user="after the change, question {i}")
    nanobot_home.write_session(
        KEY,
        messages + winter,
        last_archived=record.boundary,
        metadata={"_last_summary": {"text": record.summary, "last_active": "x"}},
    )
    await redis.delete(TEST_KEYS.record(KEY))
    notes = await sent_as_new_and_noted(redis, deps, fake_llm, nanobot_home, "after the change")
    assert notes.count("question 3 about the deploy script") == 1, "the first hour is noted once"


async def test_a_new_conversation_inside_the_repeated_hour_is_noted_though_its_times_and_positions_were(
    in_new_york, redis, nanobot_home, fake_llm, deps_for
):
    """`/new` inside the hour the clock repeats: the new conversation's positions start at 0 again and its times
    fall inside the span noted for the old one an hour before. Its generation (counted up by the hooks at `/new`)
    tells them apart: its messages are sent as new and noted."""
    nanobot_home.write_config(fake_llm.url, timezone="America/New_York")
    fake_llm.responder = Summarizer()
    nanobot_home.write_session(KEY, conversation(20, start=datetime(2026, 11, 1, 1, 0)))  # 01:00-01:39
    deps = deps_for(summary_keep="messages:2")
    assert (await summarize_now(redis, deps, KEY)).outcome.status == "summarized"
    await redis.delete(TEST_KEYS.record(KEY))
    # `/new` after the clock went back: an empty session of the next generation, then its first messages.
    metadata: dict[str, object] = {}
    assert SessionMarker.next_generation(metadata) == 0
    fresh = conversation(10, start=datetime(2026, 11, 1, 1, 5), user="after /new, question {i}")
    nanobot_home.write_session(KEY, fresh, metadata=metadata)
    await sent_as_new_and_noted(redis, deps, fake_llm, nanobot_home, "after /new")
    spans = noted_spans(nanobot_home.workspace / "memory", KEY, "2026-11-01", generation=1)
    assert spans and all(span.at is not None and span.at[0] < 20 for span in spans)


async def test_records_of_deleted_sessions_are_dropped_and_every_record_expires(redis, nanobot_home, deps_for):
    for key in ("telegram:gone", KEY):
        await store_record(
            redis,
            SummaryRecord(
                session_key=key,
                summary="s",
                start=0,
                boundary=2,
                boundary_timestamp="t",
                messages_before=4,
                messages_after=3,
                tokens_before=10,
                tokens_after=5,
            ),
        )
    nanobot_home.write_session(KEY, conversation(3))
    assert 0 < await redis.ttl(TEST_KEYS.record(KEY))
    await daily_summaries({"deps": deps_for(), "redis": redis})
    assert await load_record(redis, "telegram:gone") is None
    assert await load_record(redis, KEY) is not None
    assert {m.decode() for m in await redis.smembers(TEST_KEYS.pending)} == {KEY}


# -- bad input, property-based -------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
MESSAGE = st.dictionaries(
    st.sampled_from(
        [
            "role",
            "content",
            "timestamp",
            "tool_calls",
            "tool_call_id",
            "name",
            "_hidden_history",
            "_command",
            "media",
            "reasoning_content",
        ]
    ),
    JSON | st.sampled_from(["user", "assistant", "tool", "system", "wizard", "2026-11-20T10:00:00"]),
    max_size=6,
)


@given(st.binary(max_size=400))
def test_the_session_reader_never_raises_on_random_bytes(raw: bytes) -> None:
    session = parse_session(KEY, Path("x.jsonl"), raw)
    assert all(isinstance(m, dict) for m in session.messages)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MESSAGE, max_size=12), st.integers(0, 14))
@example([{}, {"role": "user"}, {"tool_calls": True}], 0)  # once found by chance: now tried every run
def test_odd_messages_never_break_reading_counting_or_planning(messages: list[dict], start: int) -> None:
    raw = "\n".join([json.dumps({"_type": "metadata", "metadata": {}})] + [json.dumps(m) for m in messages])
    session = parse_session(KEY, Path("x.jsonl"), raw.encode())
    counts = [count_message(m, estimate_tokens) for m in session.messages]
    cut = plan_cut(session.messages, start, counts, KeepRule("messages", 2), 1000)
    assert cut.start <= cut.boundary <= cut.read == len(session.messages)
    transcript(session.messages, cut.start, cut.boundary, estimate_tokens)


FACT = st.builds(
    Fact,
    text=st.text(min_size=1, max_size=40),
    tag=st.sampled_from(["permanent", "durable"]),
    importance=st.integers(3, 5),
    category=st.sampled_from(["preferences", "people", None]),
)


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(FACT, max_size=6), st.text(max_size=80))
@example([Fact(text="#\r0", tag="permanent", importance=3, category="preferences")], "")  # read back as a heading
@example([Fact(text="- 1. <!-- x", tag="permanent", importance=3, category=None)], "")
def test_merging_facts_twice_equals_merging_once(facts: list[Fact], user_text: str) -> None:
    once, _ = longterm.apply(user_text, facts, "en", "2026-11-20", 300, session=KEY)
    twice, stats = longterm.apply(once, facts, "en", "2026-11-20", 300, session=KEY)
    assert twice == once and stats.added == 0


MODELS = [
    st.builds(SummarizeRequest, session_key=st.text(min_size=1, max_size=30)),
    st.builds(
        SummaryRecord,
        session_key=st.text(max_size=30),
        summary=st.text(max_size=80),
        boundary_timestamp=st.none() | st.text(max_size=20),
    ),
    st.builds(
        JobOutcome,
        session_key=st.text(max_size=30),
        detail=st.text(max_size=60),
        spend=st.builds(Spend, cost=st.floats(0, 1e6)),
    ),
    st.builds(Progress, running=st.text(max_size=60)),
    st.builds(Rest, reason=st.text(max_size=40)),
]


@pytest.mark.parametrize("strategy", MODELS, ids=lambda s: repr(s)[7:40])
def test_every_model_kept_in_redis_round_trips(strategy) -> None:
    @given(strategy)
    def check(model) -> None:
        assert type(model).model_validate_json(model.model_dump_json()) == model

    check()


async def test_facts_the_disk_refused_are_asked_for_again_not_lost(redis, nanobot_home, fake_llm, deps_for):
    """A job whose held facts could not be written leaves its messages un-noted, says so in its outcome, and
    once the disk takes writes again a later run (the daily one) notes them and holds their facts."""
    from harness.models import echo_memory

    fake_llm.responder = echo_memory
    morning = datetime.now().replace(hour=8, minute=0, second=0, microsecond=0)
    nanobot_home.write_session(KEY, conversation(15, start=morning))
    path = nanobot_home.workspace / "memory" / "MEMORY.md"
    pending = longterm.pending_path(path)
    pending.mkdir(parents=True)  # the held facts cannot be written (as on a full disk: the append fails)
    deps = deps_for(summary_keep="messages:2", memory_write="idle", summary_cache_ttl=3600)  # a session active
    outcome = (await summarize_now(redis, deps, KEY)).outcome
    assert outcome is not None and outcome.status == "summarized" and "memory files not written" in outcome.detail
    day = morning.date().isoformat()
    assert noted_spans(nanobot_home.workspace / "memory", KEY, day) == [], "nothing marked done"
    pending.rmdir()  # space again
    await daily_summaries({"deps": deps, "redis": redis})
    await run_burst(deps)
    spans = noted_spans(nanobot_home.workspace / "memory", KEY, day)
    assert spans and is_noted(morning.isoformat(timespec="seconds"), spans), "the daily run noted them"
    held = [fact.text for h in longterm.read_held(path) for fact in h.batch.facts]
    assert "The user deploys with ./deploy.sh --env prod" in held, "and the facts came back"
