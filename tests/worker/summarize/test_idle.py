"""Idle summaries (a quiet session is summarized once the provider's cache is cold) and idle pickup's held
records: a real Redis, a real arq worker in this process, litellm over HTTP to the fake LLM, and the stand-in
AgentLoop of tests/support/standins for the hooks' side."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
from arq.jobs import Job
from arq.worker import Worker

from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.fakellm import Reply
from harness.models import (
    SUMMARY_MODEL,
    SUMMARY_TEXT,
    chat_requests,
    history_text,
    summarizer,
    summary_json,
    system_text,
)
from harness.nanobot_cli import ARCHIVED, turn
from harness.transcripts import conversation
from nanobot_hooks.contract.queue import enqueue_idle_check, enqueue_summary, load_record, store_record
from nanobot_hooks.contract.records import SummarizeRequest
from tests.support.commands import run_in_process
from tests.support.crossing import CHAT
from tests.support.paths import ROOT
from tests.support.queue_probes import applied
from tests.support.standins import KEY, TurnContext, idle_session, publish_turn_started, record_for, started
from tests.support.waiting import wait_until
from tests.support.workers import stop_worker
from worker.keep_rule import KeepRule
from worker.nanobot.sessions import read_session
from worker.service.arq_worker import worker_options
from worker.state.outcomes import load_outcome
from worker.summarize.cut import KEEP_NOTHING, idle_keep, saves_enough, saving_floor
from worker.summarize.deps import Deps
from worker.summarize.plan import plan_for, plan_job

TTL = 1.5
IDLE = {"summary_idle": True, "summary_cache_ttl": TTL, "summary_idle_keep": KeepRule("turns", 1)}


# -- the keep rule of an idle summary, beside nanobot's own idle compaction ---------------------------


def test_idle_keep_stands_aside_for_nanobots_idle_compaction_or_leaves_it_nothing():
    turns = KeepRule("turns", 1)
    assert idle_keep(turns, cache_ttl=300, nanobot_idle=0) == turns, "nanobot's idle compaction off: ours"
    assert idle_keep(turns, cache_ttl=300, nanobot_idle=900) == KEEP_NOTHING, "ours first: nothing left for nanobot"
    assert idle_keep(turns, cache_ttl=300, nanobot_idle=60) is None, "nanobot first: no second summary"
    assert idle_keep(turns, cache_ttl=300, nanobot_idle=330, nanobot_scan=60) is None, "too close to call"


def test_an_idle_summary_asks_an_absolute_floor_a_warm_one_a_share_of_the_window():
    assert saving_floor("idle", 128_000, 0.05, 2_000) == 2_000, "a cold cache: no miss to buy back"
    assert saving_floor("idle", 32_000, 0.05, 2_000) == 1_600, "never more than a warm summary asks"
    assert saving_floor("tokens", 128_000, 0.05, 2_000) == saving_floor("interval", 128_000, 0.05, 2_000) == 6_400
    assert saving_floor("manual", 128_000, 0.05, 2_000) == 0
    assert saves_enough(2_000, 2_000) and not saves_enough(1_999, 2_000)
    assert not saves_enough(0, 0.0) and not saves_enough(-10, 0.0), "a summary must shrink the context"


def test_at_a_large_window_a_pause_is_summarized_where_a_warm_trigger_would_wait(nanobot_home, deps_for):
    messages = conversation(12, user="question {i}: " + "the deploy script fails on the staging runner " * 30)
    nanobot_home.write_session(KEY, messages)
    session = read_session(nanobot_home.sessions_dir, KEY)
    deps = deps_for(summary_context_window=128_000, summary_min_saving=0.05, summary_idle_min_tokens=2_000)

    def plan(reason: str):
        return plan_job(deps, session, None, SummarizeRequest(session_key=KEY, reason=reason, keep="turns:1"))

    idle, warm = plan("idle"), plan("interval")
    assert 2_000 <= idle.covered_tokens < 6_400, "the case in point: more than the floor, under 5% of the window"
    assert idle.skip is None and idle.entries
    assert warm.skip is not None and "too little" in warm.skip


def test_the_idle_keep_rules_cut(nanobot_home, deps_for):
    messages = conversation(10)
    messages[-1:-1] = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "exec", "arguments": "{}"}}],
            "timestamp": messages[-1]["timestamp"],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok", "timestamp": messages[-1]["timestamp"]},
    ]
    nanobot_home.write_session(KEY, messages)
    session = read_session(nanobot_home.sessions_dir, KEY)
    deps = deps_for()
    last_turn = len(messages) - 4  # the last user turn: its tool call, the result and the answer follow

    def cut(keep: str | None) -> tuple[int, int]:
        planned, _ = plan_for(deps, session, 0, SummarizeRequest(session_key=KEY, reason="idle", keep=keep))
        return planned.start, planned.boundary

    assert cut("turns:1") == (0, last_turn), "the last exchange stays whole, tool call and result included"
    assert cut("turns:2") == (0, last_turn - 2)
    assert cut("messages:0") == (0, len(messages)), "keep nothing: everything is covered"
    assert cut(None) == (0, 12), "no keep on the request: NANOBOT_SUMMARY_KEEP (messages:10 in the tests)"


# -- the worker's idle check, in a real arq worker -----------------------------------------------------


@pytest.fixture
async def worker(redis) -> AsyncIterator[Any]:
    """A factory: `await worker(deps)` starts a real arq worker (not burst: deferred jobs must run)."""
    running: list[tuple[Worker, asyncio.Task[None]]] = []

    async def start(deps: Deps) -> Worker:
        options = {**worker_options(deps.settings), "ctx": {"deps": deps}, "poll_delay": 0.05, "handle_signals": False}
        instance = Worker(**options)
        running.append((instance, asyncio.create_task(instance.main())))
        return instance

    yield start
    for instance, task in running:
        # Bounded: a worker that does not stop must fail this test, not hang the run and leave it polling.
        await stop_worker(instance, task)


@pytest.fixture
def idle_deps(deps_for, fake_llm):
    def build(**overrides: Any) -> Deps:
        deps = deps_for(**{**IDLE, **overrides})
        deps.model = summarizer(fake_llm.url)
        deps.fallback = None
        return deps

    return build


def summary_calls(fake_llm) -> int:
    return summary_calls_named(fake_llm, SUMMARY_MODEL)


def saved_now(path: os.PathLike[str]) -> None:
    """What nanobot's save of a turn does to the file, as far as the idle check looks."""
    os.utime(path)


async def test_a_quiet_session_is_summarized_once_the_cache_lifetime_has_passed(
    redis, nanobot_home, fake_llm, idle_deps, worker
):
    fake_llm.default = Reply(summary_json("## What happened\n- deploy questions, summarized while idle"))
    messages = conversation(12)
    saved_now(nanobot_home.write_session(KEY, messages))
    assert await enqueue_idle_check(redis, KEY, TTL)
    assert await enqueue_idle_check(redis, KEY, TTL) is None, "one idle check per session"
    await worker(idle_deps())

    await asyncio.sleep(TTL / 2)
    assert summary_calls(fake_llm) == 0, "nothing is asked while the cache may still be warm"
    await wait_until(lambda: load_outcome(redis, KEY), 20)  # saved after the record
    record = await load_record(redis, KEY)
    assert record is not None and record.reason == "idle"
    assert (record.start, record.boundary) == (0, len(messages) - 2), "the last exchange stays verbatim"
    assert summary_calls(fake_llm) == 1
    outcome = await load_outcome(redis, KEY)
    assert outcome is not None and outcome.status == "summarized" and outcome.reason == "idle"
    # arq takes an ended job off the queue just after the job saved its outcome: a check that deferred itself again
    # would stay.
    await wait_until(lambda: _queue_empty(redis), 20, "no check left waiting")


async def _queue_empty(redis) -> bool:
    return await redis.zcard(TEST_KEYS.queue) == 0


def test_nanobots_idle_compaction_is_read_from_its_config_on_by_default(tmp_path):
    from worker.nanobot.config import NanobotConfig

    def seconds(**defaults: Any) -> tuple[float, float]:
        config = NanobotConfig(path=tmp_path / "config.json", data={"agents": {"defaults": defaults}})
        return config.idle_compact_seconds, config.idle_compact_scan_seconds

    assert seconds() == (900.0, 60.0), "nanobot's defaults: 15 minutes, scanned every minute"
    assert seconds(idleCompactAfterMinutes=0) == (0.0, 60.0)
    assert seconds(sessionTtlMinutes=2, idleCompactCheckIntervalSeconds=10) == (120.0, 10.0)


async def test_beside_nanobots_own_idle_compaction_the_idle_summary_leaves_it_nothing(
    redis, nanobot_home, fake_llm, idle_deps, worker
):
    fake_llm.default = Reply(summary_json())
    nanobot_home.write_config(fake_llm.url, idleCompactAfterMinutes=15)  # nanobot's default: on
    messages = conversation(12)
    path = nanobot_home.write_session(KEY, messages)
    os.utime(path, (time.time() - 10, time.time() - 10))
    assert await enqueue_idle_check(redis, KEY, 0)
    await worker(idle_deps())
    await wait_until(lambda: load_outcome(redis, KEY), 20)
    record = await load_record(redis, KEY)
    assert record is not None and record.boundary == len(messages), "everything covered: nothing left for nanobot"


async def test_an_active_session_is_not_summarized_its_check_waits_for_the_pause(
    redis, nanobot_home, fake_llm, idle_deps, worker
):
    fake_llm.default = Reply(summary_json())
    path = nanobot_home.write_session(KEY, conversation(12))
    saved_now(path)
    assert await enqueue_idle_check(redis, KEY, TTL)
    await worker(idle_deps())

    active_until = time.monotonic() + 2.5 * TTL
    while time.monotonic() < active_until:  # a turn every 0.3 s: the cache never goes cold
        saved_now(path)
        await asyncio.sleep(0.3)
    assert summary_calls(fake_llm) == 0 and not await redis.exists(TEST_KEYS.record(KEY))
    assert (
        await Job(
            TEST_KEYS.idle_job_id(KEY), redis, _queue_name=TEST_KEYS.queue, _deserializer=redis.job_deserializer
        ).info()
        is not None
    ), "the check deferred itself to the last activity + the cache lifetime"

    await wait_until(lambda: load_record(redis, KEY), 20)  # the pause after the last turn
    assert summary_calls(fake_llm) == 1


async def test_nothing_is_asked_when_the_summary_would_not_be_worth_it(
    redis, nanobot_home, fake_llm, idle_deps, worker
):
    fake_llm.default = Reply(summary_json())
    saved_now(nanobot_home.write_session(KEY, conversation(3)))
    assert await enqueue_idle_check(redis, KEY, TTL)
    await worker(idle_deps(summary_min_saving=0.05, summary_idle_min_tokens=2_000))  # far more than 3 exchanges

    async def check_done() -> bool:
        return not await redis.zcard(TEST_KEYS.queue) and not await redis.exists(
            f"arq:in-progress:{TEST_KEYS.idle_job_id(KEY)}"
        )

    await wait_until(check_done, 20)
    await asyncio.sleep(0.3)
    assert summary_calls(fake_llm) == 0 and not await redis.exists(TEST_KEYS.record(KEY))
    assert await load_outcome(redis, KEY) is None, "no summarize job was even queued"


async def test_an_idle_check_leaves_the_session_to_a_summary_job_already_queued(
    redis, nanobot_home, fake_llm, idle_deps, worker
):
    fake_llm.default = Reply(summary_json())
    saved_now(nanobot_home.write_session(KEY, conversation(12)))
    os.utime(nanobot_home.session_file(KEY), (time.time() - 10, time.time() - 10))  # quiet already
    assert await enqueue_summary(redis, SummarizeRequest(session_key=KEY, reason="tokens"))
    await redis.zadd(TEST_KEYS.queue, {TEST_KEYS.job_id(KEY): (time.time() + 3600) * 1000})  # queued, not yet due
    assert await enqueue_idle_check(redis, KEY, 0)
    await worker(idle_deps())

    await wait_until(lambda: _gone(redis, TEST_KEYS.idle_job_id(KEY)), 20)
    assert summary_calls(fake_llm) == 0
    info = await Job(
        TEST_KEYS.job_id(KEY), redis, _queue_name=TEST_KEYS.queue, _deserializer=redis.job_deserializer
    ).info()
    assert info is not None and info.args[0]["reason"] == "tokens", "single flight: the queued job stays the one"


async def _gone(redis, job: str) -> bool:
    return not await redis.exists(f"arq:job:{job}")


# -- the hooks: one idle check per session after each saved turn ----------------------------------------


async def test_each_saved_turn_makes_sure_one_idle_check_waits(make, redis):
    integration = make(summary_idle=True, summary_cache_ttl=300, summary_interval=0)
    integration.ctx.nanobot.sessions.cached[KEY] = idle_session(prompt_tokens=1_000, quiet_for=0)
    for _ in range(2):
        integration.triggering.on_turn_persisted(started(KEY))
        await asyncio.gather(*integration.ctx.pending())
    assert await redis.zcard(TEST_KEYS.queue) == 1
    due = await redis.zscore(TEST_KEYS.queue, TEST_KEYS.idle_job_id(KEY))
    # arq keeps the time in whole milliseconds, rounded: up to half of one past the 300 s
    assert due is not None and 290 < due / 1000 - time.time() <= 300.001, "deferred by the cache lifetime"


async def test_a_turn_within_the_cache_lifetime_of_the_last_queued_check_costs_no_redis_call(make, redis):
    integration = make(summary_idle=True, summary_cache_ttl=1, summary_interval=0)
    integration.ctx.nanobot.sessions.cached[KEY] = idle_session(prompt_tokens=1_000, quiet_for=0)
    integration.triggering.on_turn_persisted(started(KEY))
    await asyncio.gather(*integration.ctx.pending())
    assert await redis.zcard(TEST_KEYS.queue) == 1
    # Gone from Redis: were the next turn to ask, the check would be queued again.
    await redis.delete(TEST_KEYS.queue, f"arq:job:{TEST_KEYS.idle_job_id(KEY)}")
    integration.triggering.on_turn_persisted(started(KEY))
    await asyncio.gather(*integration.ctx.pending())
    assert await redis.zcard(TEST_KEYS.queue) == 0, "the check queued a moment ago cannot have run: not asked"
    await asyncio.sleep(1.1)  # past the cache lifetime: the check may have run and ended
    integration.triggering.on_turn_persisted(started(KEY))
    await asyncio.gather(*integration.ctx.pending())
    assert await redis.zcard(TEST_KEYS.queue) == 1


async def test_no_idle_check_when_idle_summaries_are_off(make, redis):
    integration = make(summary_idle=False, summary_interval=0)
    integration.ctx.nanobot.sessions.cached[KEY] = idle_session(prompt_tokens=1_000, quiet_for=0)
    integration.triggering.on_turn_persisted(started(KEY))
    await asyncio.gather(*integration.ctx.pending())
    assert await redis.zcard(TEST_KEYS.queue) == 0


# -- idle pickup: a held record is re-checked, and a stale one no longer blocks the trigger --------------


async def held_then_new(make, redis) -> tuple[Any, Any]:
    integration = make(summary_pickup="idle", summary_cache_ttl=300, summary_context_window=100_000, summary_interval=0)
    session = idle_session(prompt_tokens=65_000, quiet_for=0)
    integration.ctx.nanobot.sessions.cached[KEY] = session
    await store_record(redis, record_for(session, 12))
    assert await integration.pickups.pickup(KEY) == "held"
    # /new: nanobot clears the session; the user goes on talking in the fresh one.
    session.messages, session.last_archived = conversation(3), 0
    session.updated_at = datetime.now()
    return integration, session


async def test_after_new_the_trigger_drops_the_held_stale_record_and_queues_a_job(make, redis):
    integration, session = await held_then_new(make, redis)
    integration.triggering.usage[KEY] = (65_000, 100_000)  # the fresh session crosses the threshold
    integration.triggering.on_turn_persisted(started(KEY))
    await asyncio.gather(*integration.ctx.pending())

    assert KEY not in integration.pickups.held and not integration.pickups.timed()
    assert not await redis.exists(TEST_KEYS.record(KEY))
    assert (await redis.hgetall(TEST_KEYS.stats)).get(b"stale") == b"1"
    info = await Job(
        TEST_KEYS.job_id(KEY), redis, _queue_name=TEST_KEYS.queue, _deserializer=redis.job_deserializer
    ).info()
    assert info is not None and info.args[0]["reason"] == "tokens", "the trigger queues the fresh session"
    assert session.last_archived == 0


async def test_a_held_record_that_went_stale_is_dropped_at_the_next_turn_start(make, redis):
    integration, session = await held_then_new(make, redis)
    publish_turn_started(integration, TurnContext("hello again"))
    assert KEY not in integration.pickups.held and session.last_archived == 0
    await asyncio.gather(*integration.ctx.pending())
    assert not await redis.exists(TEST_KEYS.record(KEY))
    assert (await redis.hgetall(TEST_KEYS.stats)).get(b"stale") == b"1"


# -- end to end with the real nanobot ---------------------------------------------------------------


def assert_starts_from_the_idle_summary(fake_llm, seeded: list[dict[str, Any]], kept: list[str]) -> None:
    request = chat_requests(fake_llm)[-1]
    system, history = system_text(request), history_text(request)
    assert ARCHIVED in system and SUMMARY_TEXT in system, "the summary made during the pause is in the prompt"
    assert not [m["content"] for m in seeded if m["content"] in history], "no covered message is replayed"
    assert all(text in history for text in kept), "the last exchange before the pause stays verbatim"


async def test_nanobot_agent_a_pause_past_the_cache_lifetime_and_the_next_turn_starts_from_the_summary(
    nanobot_exe, agent_home, fake_llm, script, redis, redis_url, worker_deps, worker
):
    key = "telegram:77"
    seeded = conversation(10)
    agent_home.write_session(key, seeded)
    env = process_env(
        agent_home,
        redis_url,
        NANOBOT_SUMMARY_INTERVAL="0",
        NANOBOT_SUMMARY_IDLE="true",
        NANOBOT_SUMMARY_CACHE_TTL=str(TTL),
    )
    await turn(nanobot_exe, agent_home, env, key, "the last question before the pause")
    assert (
        await Job(
            TEST_KEYS.idle_job_id(key), redis, _queue_name=TEST_KEYS.queue, _deserializer=redis.job_deserializer
        ).info()
        is not None
    ), "the process queued the session's idle check before it exited"
    assert not await redis.exists(f"arq:job:{TEST_KEYS.job_id(key)}"), "no threshold job: the prompt was small"

    await worker(worker_deps(**IDLE))  # the pause: no nanobot process is alive
    await wait_until(lambda: load_outcome(redis, key), 20)
    record = await load_record(redis, key)
    assert record is not None and record.reason == "idle" and record.boundary == len(seeded)
    assert summary_calls(fake_llm) == 1

    await turn(nanobot_exe, agent_home, env, key, "back after the pause")
    assert_starts_from_the_idle_summary(
        fake_llm, seeded, ["the last question before the pause", "reply number 1", "back after the pause"]
    )


async def test_gateway_a_pause_past_the_cache_lifetime_applies_the_idle_summary_before_the_next_turn(
    gateway, nanobot_home, fake_llm, script, redis, worker_deps, worker
):
    key = f"websocket:{CHAT}"
    seeded = conversation(10)
    nanobot_home.write_session(key, seeded)
    gw = await gateway(
        NANOBOT_SUMMARY_INTERVAL="0",
        NANOBOT_SUMMARY_IDLE="true",
        NANOBOT_SUMMARY_CACHE_TTL=str(TTL),
        NANOBOT_SUMMARY_PICKUP="idle",
    )
    await worker(worker_deps(**IDLE))
    await gw.say(CHAT, "the last question before the pause")
    await wait_until(lambda: applied(redis, key), 30, "the gateway applying the record during the pause")
    assert summary_calls(fake_llm) == 1
    await gw.say(CHAT, "back after the pause")
    assert_starts_from_the_idle_summary(
        fake_llm, seeded, ["the last question before the pause", "reply number 1", "back after the pause"]
    )


def summary_calls_named(fake_llm, model: str) -> int:
    return sum(1 for r in fake_llm.requests if (r.body or {}).get("model") == model)


def test_the_keep_rule_benchmark_runs_and_an_idle_summary_shrinks_the_turn_after_a_pause(capsys):
    import importlib.util
    import sys

    path = ROOT / "bench" / "bench_idle_keep.py"
    spec = importlib.util.spec_from_file_location("bench_idle_keep", path)
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclass looks itself up there
    spec.loader.exec_module(bench)
    bench.main(["--window", "32000", "--turns", "32", "--rule", "off", "messages:0", "turns:1"])
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[2:]}
    assert set(rows) == {"off", "messages:0", "turns:1"}
    first_after_pause = {name: int(row[5].replace(",", "")) for name, row in rows.items()}
    assert first_after_pause["messages:0"] < first_after_pause["turns:1"] < first_after_pause["off"]
    assert int(rows["turns:1"][4].replace(",", "")) > 0, "the last exchange is kept"


async def test_status_counts_idle_checks_apart_from_queued_summary_jobs(redis, redis_url, capsys):
    import json

    assert await enqueue_idle_check(redis, KEY, 300)
    shown = await asyncio.to_thread(
        run_in_process, capsys, "status", "--json", env={**os.environ, "REDIS_URL": redis_url}
    )
    state = json.loads(shown.stdout)
    assert state["idle_checks"] == 1 and state["queued"] == 0 and state["deferred"] == 0
