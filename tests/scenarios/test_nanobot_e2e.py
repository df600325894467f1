"""End to end with the real nanobot-ai (subprocesses), a real arq worker, real Redis and the fake LLM."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess

import pytest

from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.fakellm import Error
from harness.models import (
    BIG_PROMPT,
    SMALL_PROMPT,
    SUMMARY_MODEL,
    SUMMARY_TEXT,
    LLMScript,
    Summarizer,
    chat_requests,
    history_text,
    system_text,
)
from harness.nanobot_cli import ARCHIVED, agent_turn, nanobot_python, turn
from harness.redis_server import free_port
from harness.sandbox import NanobotHome, session_lines
from harness.transcripts import conversation
from nanobot_hooks.contract.marker import METADATA_KEY
from nanobot_hooks.contract.queue import load_record
from tests.support.built import clean_copy
from tests.support.commands import run_in_process
from tests.support.crossing import (
    CHAT,
    SEEDED_TURNS,
    assert_summary_replaces_covered_messages,
    gateway_cross,
    seed_and_cross,
    seed_cross_and_summarize,
)
from tests.support.paths import HOOKS
from tests.support.queue_probes import applied, has_record, queued_jobs, queued_reason, stats
from tests.support.waiting import wait_until
from tests.support.workers import niceness, run_burst, running_worker, summarize_now
from worker.connections import answers, queue_client
from worker.settings import Settings
from worker.state.outcomes import load_outcome

NICENESS = Settings.model_fields["summary_niceness"].default


def assert_file_keeps_every_message(home: NanobotHome, key: str, seeded: list[dict], boundary: int) -> None:
    head, messages = session_lines(home, key)
    assert [m["content"] for m in messages[:boundary]] == [m["content"] for m in seeded[:boundary]]
    assert messages[boundary].get("_hidden_history") is True, "nanobot's checkpoint marker sits at the boundary"
    assert [m["content"] for m in messages[boundary + 1 : len(seeded) + 1]] == [m["content"] for m in seeded[boundary:]]
    assert head["last_archived"] == boundary
    assert head["metadata"]["_last_summary"]["text"] == SUMMARY_TEXT


async def test_gateway_applies_the_summary_between_turns_and_the_next_request_uses_it(
    gateway, nanobot_home, fake_llm, script, redis, worker_deps
):
    key = f"websocket:{CHAT}"
    seeded, gw, reply = await gateway_cross(gateway, nanobot_home, script, redis, "first live turn")
    assert reply.startswith("reply number")
    assert await queued_reason(redis, key) == "tokens"

    await run_burst(worker_deps())
    outcome = await load_outcome(redis, key)
    assert outcome is not None and outcome.status == "summarized" and outcome.boundary
    # The worker's notice reaches the gateway, which applies the record while the session is idle.
    await wait_until(lambda: applied(redis, key), what="the gateway to apply the record")
    assert_file_keeps_every_message(nanobot_home, key, seeded, outcome.boundary)

    script.prompt_tokens = SMALL_PROMPT
    await gw.say(CHAT, "second live turn")
    assert_summary_replaces_covered_messages(fake_llm, seeded, outcome.boundary)
    assert "second live turn" in history_text(chat_requests(fake_llm)[-1])
    head, messages = session_lines(nanobot_home, key)
    assert len(messages) == len(seeded) + 2 + 1 + 2, "every message stays in the file (plus the marker)"
    assert await queued_jobs(redis) == 0


async def test_idle_pickup_holds_the_summary_while_the_cache_is_warm_and_applies_it_once_cold(
    gateway, nanobot_home, fake_llm, script, redis, worker_deps
):
    key = f"websocket:{CHAT}"
    seeded = conversation(SEEDED_TURNS)
    nanobot_home.write_session(key, seeded)
    gw = await gateway(NANOBOT_SUMMARY_INTERVAL="0", NANOBOT_SUMMARY_PICKUP="idle", NANOBOT_SUMMARY_CACHE_TTL="8")
    script.prompt_tokens = BIG_PROMPT  # over the 60% trigger, under the 80% where idle pickup applies at once
    await gw.say(CHAT, "first live turn")
    await wait_until(lambda: queued_jobs(redis), what="the job nanobot enqueued")
    await run_burst(worker_deps())
    outcome = await load_outcome(redis, key)
    assert outcome is not None and outcome.status == "summarized"

    script.prompt_tokens = SMALL_PROMPT
    await gw.say(CHAT, "a turn while the cache is warm")
    assert ARCHIVED not in system_text(chat_requests(fake_llm)[-1]), "held: the cached prefix is kept"
    assert await has_record(redis, key) and not (await stats(redis)).get("applied")

    # Quiet for longer than the cache lasts: the gateway applies it between turns, on its own.
    await wait_until(lambda: applied(redis, key), timeout=30, what="the held summary to be applied")
    await gw.say(CHAT, "a turn after a pause")
    assert_summary_replaces_covered_messages(fake_llm, seeded, outcome.boundary)
    assert_file_keeps_every_message(nanobot_home, key, seeded, outcome.boundary)


async def test_idle_pickup_applies_at_once_when_the_context_nears_the_window(
    gateway, nanobot_home, fake_llm, script, redis, worker_deps
):
    key = f"websocket:{CHAT}"
    seeded = conversation(SEEDED_TURNS)
    nanobot_home.write_session(key, seeded)
    gw = await gateway(NANOBOT_SUMMARY_INTERVAL="0", NANOBOT_SUMMARY_PICKUP="idle", NANOBOT_SUMMARY_CACHE_TTL="3600")
    script.prompt_tokens = 110_000  # past 80% of the 128,000 window
    await gw.say(CHAT, "first live turn")
    await wait_until(lambda: queued_jobs(redis), what="the job nanobot enqueued")
    await run_burst(worker_deps())
    outcome = await load_outcome(redis, key)
    assert outcome is not None and outcome.status == "summarized"
    await wait_until(lambda: applied(redis, key), what="the summary to be applied between turns")
    script.prompt_tokens = SMALL_PROMPT
    await gw.say(CHAT, "next turn")
    assert_summary_replaces_covered_messages(fake_llm, seeded, outcome.boundary)


async def test_worker_stopped_the_job_waits_and_the_next_turn_after_it_runs_uses_the_summary(
    nanobot_exe, agent_home, fake_llm, script, redis, redis_url, worker_deps
):
    key = "telegram:7"
    seeded, env = await seed_and_cross(nanobot_exe, agent_home, redis_url, script, key)
    assert await queued_jobs(redis) == 1 and await queued_reason(redis, key) == "tokens"
    await turn(nanobot_exe, agent_home, env, key, "turn while the worker is down")
    assert await queued_jobs(redis) == 1, "single flight: still one job for the session"
    assert ARCHIVED not in system_text(chat_requests(fake_llm)[-1])

    await run_burst(worker_deps())
    record = await load_record(redis, key)
    assert record is not None and record.summary == SUMMARY_TEXT
    head, _ = session_lines(agent_home, key)
    assert head["metadata"][METADATA_KEY]["pending"]["boundary"] == record.boundary

    script.prompt_tokens = SMALL_PROMPT
    await turn(nanobot_exe, agent_home, env, key, "turn after the worker ran")
    assert_summary_replaces_covered_messages(fake_llm, seeded, record.boundary)
    assert_file_keeps_every_message(agent_home, key, seeded, record.boundary)
    assert await applied(redis, key)
    head, _ = session_lines(agent_home, key)
    assert "pending" not in head["metadata"][METADATA_KEY], "applied once, not again by a later process"
    assert await queued_jobs(redis) == 0


async def test_a_slash_command_turn_leaves_the_record_for_the_next_ordinary_turn_and_nothing_is_left_open(
    nanobot_exe, agent_home, fake_llm, script, redis, redis_url, worker_deps
):
    key = "telegram:17"
    seeded, env, record = await seed_cross_and_summarize(
        nanobot_exe, agent_home, redis_url, script, key, redis, worker_deps()
    )

    # ResourceWarnings shown: an unclosed Redis connection or an unawaited task would print one.
    python = [str(nanobot_python(nanobot_exe)), "-W", "always::ResourceWarning", "-m", "nanobot"]
    command = await asyncio.to_thread(agent_turn, nanobot_exe, agent_home, env, key, "/help", python)
    assert command.returncode == 0, command.stderr[-3000:]
    assert "ResourceWarning" not in command.stderr and "unclosed" not in command.stderr, command.stderr[-3000:]
    head, _ = session_lines(agent_home, key)
    assert head["metadata"][METADATA_KEY]["pending"]["boundary"] == record.boundary, "not applied before a command"
    assert head["last_archived"] == 0 and (await stats(redis)).get("applied") is None

    script.prompt_tokens = SMALL_PROMPT
    ordinary = await asyncio.to_thread(agent_turn, nanobot_exe, agent_home, env, key, "an ordinary turn", python)
    assert ordinary.returncode == 0, ordinary.stderr[-3000:]
    assert "ResourceWarning" not in ordinary.stderr and "unclosed" not in ordinary.stderr, ordinary.stderr[-3000:]
    assert_summary_replaces_covered_messages(fake_llm, seeded, record.boundary)
    assert await applied(redis, key)


async def test_a_record_waiting_in_redis_is_not_summarized_again_but_applied_after_the_next_turn(
    nanobot_exe, agent_home, fake_llm, script, redis, redis_url, worker_deps
):
    key = "telegram:8"
    seeded, env, record = await seed_cross_and_summarize(
        nanobot_exe, agent_home, redis_url, script, key, redis, worker_deps()
    )
    assert await queued_jobs(redis) == 0
    # As if nanobot had saved the session over the worker's copy in line 1: only Redis has the record.
    path = agent_home.session_file(key)
    head, *rest = path.read_text(encoding="utf-8").splitlines()
    meta = json.loads(head)
    del meta["metadata"][METADATA_KEY]
    path.write_text("\n".join([json.dumps(meta), *rest]) + "\n", encoding="utf-8")

    await turn(nanobot_exe, agent_home, env, key, "still over the threshold")
    assert ARCHIVED not in system_text(chat_requests(fake_llm)[-1])
    assert await queued_jobs(redis) == 0, "a pending record is not summarized a second time"
    assert await applied(redis, key), "found when the trigger fired again, applied after that turn"
    assert_file_keeps_every_message(agent_home, key, seeded, record.boundary)

    script.prompt_tokens = SMALL_PROMPT
    await turn(nanobot_exe, agent_home, env, key, "next turn")
    assert_summary_replaces_covered_messages(fake_llm, seeded, record.boundary)


async def test_every_n_user_messages_triggers_on_its_own_and_internal_sessions_are_left_alone(
    nanobot_exe, agent_home, fake_llm, script, redis, redis_url
):
    env = process_env(agent_home, redis_url, NANOBOT_SUMMARY_INTERVAL="2")
    script.prompt_tokens = SMALL_PROMPT
    await turn(nanobot_exe, agent_home, env, "telegram:100", "one")
    assert await queued_jobs(redis) == 0
    await turn(nanobot_exe, agent_home, env, "telegram:100", "two")
    assert await queued_jobs(redis) == 1 and await queued_reason(redis, "telegram:100") == "interval"

    script.prompt_tokens = BIG_PROMPT
    internal = process_env(agent_home, redis_url, NANOBOT_SUMMARY_INTERVAL="1")
    await turn(nanobot_exe, agent_home, internal, "cron:nightly", "scheduled work")
    assert await queued_jobs(redis) == 1, "a cron session crossing both rules enqueues nothing"


async def test_after_a_summary_is_applied_the_interval_waits_for_n_new_user_messages(
    nanobot_exe, agent_home, fake_llm, script, redis, redis_url, worker_deps
):
    key = "telegram:101"
    interval = 4
    agent_home.write_session(key, conversation(SEEDED_TURNS))
    env = process_env(agent_home, redis_url, NANOBOT_SUMMARY_INTERVAL=str(interval))
    script.prompt_tokens = SMALL_PROMPT
    await turn(nanobot_exe, agent_home, env, key, "crossing turn")
    assert await queued_reason(redis, key) == "interval"
    await run_burst(worker_deps())
    record = await load_record(redis, key)
    assert record is not None

    await turn(nanobot_exe, agent_home, env, key, "new message 1")  # applies the record first
    assert await applied(redis, key)
    head, messages = session_lines(agent_home, key)
    through = head["metadata"][METADATA_KEY]["applied"]["through"]
    kept = [m for m in messages[record.boundary : through] if m["role"] == "user" and not m.get("_hidden_history")]
    assert len(kept) >= interval, "the kept tail alone holds enough user turns to fire the rule"
    for text in ("new message 2", "new message 3"):
        await turn(nanobot_exe, agent_home, env, key, text)
        assert await queued_jobs(redis) == 0, "the kept tail is not counted again"
    await turn(nanobot_exe, agent_home, env, key, "new message 4")
    assert await queued_jobs(redis) == 1 and await queued_reason(redis, key) == "interval"


async def test_auto_summary_off_enqueues_nothing_but_a_manual_summary_is_still_picked_up(
    nanobot_exe, agent_home, fake_llm, script, redis, redis_url, worker_deps
):
    key = "telegram:200"
    seeded = conversation(SEEDED_TURNS)
    agent_home.write_session(key, seeded)
    env = process_env(agent_home, redis_url, NANOBOT_AUTO_SUMMARY="false", NANOBOT_SUMMARY_INTERVAL="1")
    script.prompt_tokens = BIG_PROMPT
    await turn(nanobot_exe, agent_home, env, key, "over both thresholds")
    assert await redis.keys("*") == [], "nothing enqueued, nothing written to Redis"

    record = (await summarize_now(redis, worker_deps(), key)).record
    assert record is not None
    await turn(nanobot_exe, agent_home, env, key, "after a manual summary")
    assert_summary_replaces_covered_messages(fake_llm, seeded, record.boundary)
    assert await queued_jobs(redis) == 0


async def test_new_between_the_job_and_its_pickup_drops_the_record_and_leaves_the_fresh_session_alone(
    nanobot_exe, agent_home, fake_llm, script, redis, redis_url, worker_deps
):
    key = "telegram:300"
    agent_home.write_session(key, conversation(SEEDED_TURNS))
    env = process_env(agent_home, redis_url, NANOBOT_SUMMARY_INTERVAL="0")
    script.prompt_tokens = BIG_PROMPT
    await turn(nanobot_exe, agent_home, env, key, "crossing turn")
    assert await queued_jobs(redis) == 1

    # Hold the job after it read the session and got its summary, just before it stores the record.
    summarized, release = asyncio.Event(), asyncio.Event()

    class HeldMemory:
        def noted_spans(self, session_key: str, date: str, generation: int = 0) -> list:
            return []

        def known_facts(self, limit: int | None = None) -> list[str]:
            return []

        async def write(self, session_key: str, notes: list, facts: list, language: str, *where: object) -> str:
            summarized.set()
            await release.wait()
            return "held"

    deps = worker_deps()
    deps.memory = HeldMemory()
    worker = asyncio.create_task(run_burst(deps))
    await asyncio.wait_for(summarized.wait(), 15)
    script.prompt_tokens = SMALL_PROMPT
    await turn(nanobot_exe, agent_home, env, key, "/new")
    release.set()
    await worker
    assert await has_record(redis, key), "the record of the old conversation was stored after /new"

    await turn(nanobot_exe, agent_home, env, key, "fresh start")
    request = chat_requests(fake_llm)[-1]
    assert ARCHIVED not in system_text(request) and SUMMARY_TEXT not in system_text(request)
    assert "fresh start" in history_text(request) and "question" not in history_text(request)
    assert not await has_record(redis, key) and (await stats(redis)).get("stale") == 1
    head, messages = session_lines(agent_home, key)
    assert [m["role"] for m in messages] == ["user", "assistant"] and messages[0]["content"] == "fresh start"
    assert head["last_archived"] == 0 and "_last_summary" not in head["metadata"]
    assert not any(m.get("_hidden_history") for m in messages)


async def test_a_gateway_restart_between_the_job_and_the_pickup_applies_the_record_at_the_next_turn(
    gateway, nanobot_home, fake_llm, script, redis, worker_deps
):
    key = f"websocket:{CHAT}"
    seeded, first, _ = await gateway_cross(gateway, nanobot_home, script, redis, "crossing turn")
    await first.stop()

    await run_burst(worker_deps())
    outcome = await load_outcome(redis, key)
    assert outcome is not None and outcome.boundary and await has_record(redis, key)

    second = await gateway(NANOBOT_SUMMARY_INTERVAL="0")
    # Not loaded at start-up (sixty waiting sessions would be parsed on nanobot's event loop): the session's
    # next turn applies the record from line 1, before nanobot reads its history.
    await asyncio.sleep(1.0)
    assert not await applied(redis, key) and await has_record(redis, key)
    script.prompt_tokens = SMALL_PROMPT
    await second.say(CHAT, "after the restart")
    await wait_until(lambda: applied(redis, key), what="the restarted gateway to apply the record")
    assert_file_keeps_every_message(nanobot_home, key, seeded, outcome.boundary)
    assert_summary_replaces_covered_messages(fake_llm, seeded, outcome.boundary)


async def test_redis_down_turns_go_on_with_one_warning_and_enqueueing_resumes_when_it_is_back(
    gateway, fake_llm, script, tmp_path
):
    server_bin = shutil.which("redis-server")
    if server_bin is None:
        pytest.skip("needs a redis-server binary to start and stop a throwaway Redis")
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    gw = await gateway(redis=url, NANOBOT_SUMMARY_INTERVAL="0")
    script.prompt_tokens = BIG_PROMPT
    for text in ("turn one, Redis down", "turn two, Redis down"):
        assert (await gw.say(CHAT, text)).startswith("reply number")
    warnings = [line for line in gw.log().splitlines() if "summary worker: Redis at" in line]
    assert len(warnings) == 1, warnings

    server = subprocess.Popen(
        [
            server_bin,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await wait_until(lambda: answers(url), what="the throwaway Redis")
        back = queue_client(url, TEST_KEYS.queue)
        try:
            assert await queued_jobs(back) == 0
            await gw.say(CHAT, "turn three, Redis back")
            await wait_until(lambda: queued_jobs(back), what="the enqueue after Redis came back")
            assert await queued_reason(back, f"websocket:{CHAT}") == "tokens"
        finally:
            await back.aclose()
    finally:
        server.terminate()
        server.wait(10)


async def test_nanobot_runs_with_every_setting_of_ours_in_its_environment(
    nanobot_exe, agent_home, fake_llm, script, redis, redis_url, tmp_path
):
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text("Summarize.", encoding="utf-8")
    values = {
        "auto_summary": "true",
        "summary_model": "openai/summarizer",
        "summary_fallback_model": "openai/other",
        "summary_interval": "0",
        "summary_threshold": "0.5",
        "summary_context_window": "100000",
        "summary_keep": "messages:6",
        "summary_input_tokens": "20000",
        "summary_max_chars": "4000",
        "summary_prompt_file": str(prompt_file),
        "summary_timeout": "30",
        "summary_job_timeout": "600",
        "summary_max_tries": "3",
        "summary_retry_delay": "1",
        "summary_workspace": str(agent_home.workspace),
        "summary_daily_at": "23:30",
        "summary_timezone": "Asia/Shanghai",
        "memory_max_facts": "100",
        "config": str(agent_home.config_path),
        "redis_url": redis_url,
        "summary_json": "json_object",
        "summary_min_carry": "0.4",
        "summary_cooldown": "600",
        "summary_cooldown_max": "7200",
        "summary_daily_tokens": "100000",
        "summary_daily_tokens_total": "1000000",
        "memory_sessions": "direct,slack:D*",
        "summary_recall": "true",
        "summary_recall_scope": "trusted",
        "redis_ca_file": str(prompt_file),
        "summary_min_saving": "0.02",
        "summary_pickup": "idle",
        "summary_cache_ttl": "600",
        "summary_idle": "true",
        "summary_idle_keep": "turns:2",
        "summary_idle_min_tokens": "3000",
        "summary_niceness": "5",
        "memory_write": "idle",
        "summary_namespace": TEST_KEYS.namespace,
        "summary_demo": "false",
        "summary_embedding_model": "",
        "summary_embedding_api_base": "",
        "summary_embedding_api_key": "",
        "summary_retired_days": "30",
    }
    assert set(values) == set(Settings.model_fields), "a new setting needs a value here"
    env = process_env(agent_home, redis_url, **{Settings.env_name(k): v for k, v in values.items()})
    # 60000 tokens: under 60% of nanobot's 128000 window, over 50% of our 100000 override.
    script.prompt_tokens = 60_000
    result = await turn(nanobot_exe, agent_home, env, "telegram:400", "hello")
    assert "reply number 1" in result.stdout
    assert "integration off" not in result.stderr
    assert await queued_reason(redis, "telegram:400") == "tokens"


async def test_a_bad_setting_switches_the_integration_off_with_one_line_and_nanobot_answers(
    nanobot_exe, agent_home, fake_llm, script, redis, redis_url
):
    env = process_env(agent_home, redis_url, NANOBOT_SUMMARY_THRESHOLD="1.5", NANOBOT_SUMMARY_INTERVAL="1")
    script.prompt_tokens = BIG_PROMPT
    result = await turn(nanobot_exe, agent_home, env, "telegram:500", "hello")
    assert "reply number 1" in result.stdout
    off = [line for line in result.stderr.splitlines() if "integration off" in line]
    assert len(off) == 1 and "NANOBOT_SUMMARY_THRESHOLD" in off[0], result.stderr[-2000:]
    assert await redis.keys("*") == []


# Runs nanobot's CLI after changing one thing about nanobot, the way a future release might.
WRAPPED_CLI = """
import sys
change = sys.argv.pop(1)
if change == "version":
    import importlib.metadata as md
    real = md.version
    md.version = lambda name: "0.4.0" if name == "nanobot-ai" else real(name)
elif change == "private":
    import nanobot.agent.tools.runtime_control as rc
    init = rc.AgentRuntimeControl.__init__
    def renamed(self, target):
        init(self, target)
        self._elsewhere = self.__dict__.pop("_AgentRuntimeControl__target")
    rc.AgentRuntimeControl.__init__ = renamed
from nanobot.cli.entry import main
sys.argv[0] = "nanobot"
sys.exit(main())
"""


@pytest.mark.parametrize(
    "change, reason",
    [
        ("version", "nanobot-ai 0.4.0 is not supported"),
        ("private", "no AgentRuntimeControl's loop reference"),
    ],
)
async def test_an_unsupported_nanobot_runs_without_the_integration_and_says_why_once(
    nanobot_exe, agent_home, fake_llm, script, redis, redis_url, change, reason
):
    python = nanobot_python(nanobot_exe)
    env = process_env(agent_home, redis_url, NANOBOT_SUMMARY_INTERVAL="1")
    script.prompt_tokens = BIG_PROMPT
    result = await asyncio.to_thread(
        agent_turn, nanobot_exe, agent_home, env, "telegram:600", "hello", [str(python), "-c", WRAPPED_CLI, change]
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "reply number 1" in result.stdout
    off = [line for line in result.stderr.splitlines() if "integration off" in line]
    assert len(off) == 1 and reason in off[0], result.stderr[-2000:]
    assert await redis.keys("*") == []


def test_installing_the_hooks_leaves_nanobots_own_dependencies_unchanged(nanobot_exe, tmp_path):
    python = str(nanobot_python(nanobot_exe))
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    # What installing the hooks into nanobot's environment would change: only the hooks. From a copy of their
    # folder: pip's dry run writes an egg-info into the folder it installs from.
    source = clean_copy(HOOKS, tmp_path / "nanobot_hooks")
    dry = subprocess.run(
        [python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-", "-e", str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dry.returncode == 0, dry.stderr[-3000:]
    would_install = [item["metadata"]["name"] for item in json.loads(dry.stdout)["install"]]
    assert would_install == ["nanobot-summary-hooks"], would_install
    probe = subprocess.run([python, "-c", IMPORT_PROBE], capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = json.loads(probe.stdout)
    assert found["unsatisfied"] == [], found
    assert found["heavy"] == [], "the hooks add none of the worker's heavy imports to nanobot"
    assert not found["litellm_installed"], "litellm must not be in nanobot's environment"
    assert found["versions"]["openai"].split(".")[0] == "3" and found["versions"]["filelock"].split(".")[0] == "4"


IMPORT_PROBE = """
import importlib.metadata as md, importlib.util, json, sys
from packaging.requirements import Requirement
unsatisfied = []
for dist in ("nanobot-ai", "nanobot-summary-hooks"):
    for text in md.requires(dist) or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            installed = md.version(req.name)
        except md.PackageNotFoundError:
            unsatisfied.append(f"{dist}: {text} (missing)")
            continue
        if not req.specifier.contains(installed, prereleases=True):
            unsatisfied.append(f"{dist}: {text} (found {installed})")
import nanobot.agent.loop  # what nanobot has loaded before it loads its tool plugins
before = set(sys.modules)
import nanobot_hooks.plugin, nanobot_hooks.integration
added = {m.split(".")[0] for m in set(sys.modules) - before}
heavy = sorted(added & {"litellm", "worker", "tiktoken", "aiohttp"})
print(json.dumps({"unsatisfied": unsatisfied, "heavy": heavy,
                  "litellm_installed": importlib.util.find_spec("litellm") is not None,
                  "versions": {n: md.version(n) for n in ("openai", "filelock")}}))
"""


async def test_dry_run_plans_the_cut_of_a_session_file_nanobot_wrote(
    nanobot_exe, agent_home, fake_llm, script, redis_url, capsys
):
    env = process_env(agent_home, redis_url, NANOBOT_AUTO_SUMMARY="false")
    script.prompt_tokens = SMALL_PROMPT
    for text in ("first", "second", "third"):  # long enough that a summary of two of them could shrink them
        await turn(
            nanobot_exe,
            agent_home,
            env,
            "telegram:321",
            f"{text} question: compare the train and the bus "
            "from Kyoto to Osaka for a family of four, with prices, times, luggage rules and the stations",
        )
    asked = len(fake_llm.requests)
    dry = await asyncio.to_thread(
        run_in_process,
        capsys,
        "enqueue",
        "--dry-run",
        "telegram:321",
        env=process_env(agent_home, redis_url, config=True, NANOBOT_SUMMARY_KEEP="messages:2"),
    )
    assert dry.returncode == 0, dry.stderr
    _, messages = session_lines(agent_home, "telegram:321")
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    assert f"telegram:321: {len(messages)} messages, none summarized yet" in dry.stdout, dry.stdout
    assert f"would cover messages 0..{users[-1] - 1}" in dry.stdout, dry.stdout
    assert len(fake_llm.requests) == asked, "a dry run calls no model"


def _route(script: LLMScript, summary_model):
    """nanobot's own calls go to `script`; the worker's (model `summarizer`) to `summary_model`."""
    return lambda request: (
        summary_model(request) if (request.body or {}).get("model") == SUMMARY_MODEL else script(request)
    )


async def test_a_model_that_only_answers_prose_keeps_the_summary_rolling_through_nanobot(
    gateway, nanobot_home, fake_llm, script, redis, procfile_worker
):
    fact = {"text": "The user deploys to host-N.example.com hosts", "source": "user", "importance": 4}
    prose = Summarizer("prose", facts=[fact])
    fake_llm.responder = _route(script, prose)
    # The harness's web chat asks for no token: trusted here by name, as a user who alone uses it would.
    settings = {
        "NANOBOT_SUMMARY_INTERVAL": "2",
        "NANOBOT_SUMMARY_KEEP": "messages:2",
        "NANOBOT_MEMORY_SESSIONS": "websocket:*",
    }
    # The tests' workers keep their priority (harness.defaults); this one lowers it by the default.
    worker = procfile_worker(**settings, NANOBOT_SUMMARY_NICENESS=str(NICENESS))
    gw = await gateway(**settings)
    key = f"websocket:{CHAT}"
    summaries: list[str] = []
    for number in range(1, 8):
        await gw.say(CHAT, f"turn {number}: deploy host-{number}.example.com")
        if number % 2 == 0:  # the interval fired: wait for the worker's summary of it, applied by the gateway
            count = len(summaries) + 1
            await wait_until(
                lambda count=count: applied(redis, key, count),
                timeout=60,
                what=f"summary {count} applied\n" + worker.log()[-2000:],
            )
            head, _ = session_lines(nanobot_home, key)
            summaries.append(head["metadata"]["_last_summary"]["text"])
    assert len(summaries) == 3
    for before, after in zip(summaries, summaries[1:], strict=False):
        assert before in after, "each summary folds in the one before"
    assert "host-5.example.com" in summaries[-1]  # turn 6 is the kept tail (messages:2)
    # The gateway applied the third summary between turns 6 and 7: turn 7's request carried it, not the
    # covered turns.
    request = chat_requests(fake_llm)[-1]
    assert ARCHIVED in system_text(request) and summaries[-1] in system_text(request)
    assert "turn 1: deploy" not in history_text(request)
    assert (await stats(redis)).get("applied") == 3
    # Its notes and facts came too, asked for in plain lines: daily notes of the covered turns, and the fact.
    memory = nanobot_home.workspace / "memory"
    notes = "".join(path.read_text(encoding="utf-8") for path in sorted(memory.glob("????-??-??.md")))
    assert "turn 1: deploy host-1.example.com" in notes and "turn 5: deploy host-5.example.com" in notes
    assert fact["text"] in (memory / "MEMORY.md").read_text(encoding="utf-8")
    assert niceness(worker.process.pid) == min(os.getpriority(os.PRIO_PROCESS, 0) + NICENESS, 19), (
        "the worker yields the CPU to nanobot's turns"
    )


async def test_a_summary_provider_that_always_fails_costs_at_most_two_jobs_and_every_turn_is_answered(
    gateway, fake_llm, script, redis, worker_deps
):
    failing = []

    def broken(request):
        failing.append(request)
        return Error.server()

    fake_llm.responder = _route(script, broken)
    gw = await gateway(NANOBOT_SUMMARY_INTERVAL="2", NANOBOT_SUMMARY_KEEP="messages:2")
    key = f"websocket:{CHAT}"
    deps = worker_deps(summary_keep="messages:2", summary_max_tries=3, summary_retry_delay=0.2)
    async with running_worker(deps):
        for number in range(1, 17):
            assert f"reply number {number}" in await gw.say(CHAT, f"turn {number}")
            if number == 2:
                # The first job has failed before the next trigger: what keeps the later triggers from
                # paying again is the rest it left, not single flight.
                await wait_until(lambda: _rests(redis, key), timeout=60, what="the first job to fail")
        await wait_until(lambda: _idle(redis, key), timeout=60, what="the worker to finish")
    assert 3 <= len(failing) <= 6, f"{len(failing)} summarizing calls: at most two jobs of three tries"
    outcome = await load_outcome(redis, key)
    assert outcome is not None and outcome.cooldown_until is not None


async def _rests(redis, key: str) -> bool:
    """The session's job gave up and left it resting."""
    outcome = await load_outcome(redis, key)
    return outcome is not None and outcome.status == "failed" and outcome.cooldown_until is not None


async def _idle(redis, key: str) -> bool:
    return await queued_jobs(redis) == 0 and not await redis.exists(f"arq:in-progress:{TEST_KEYS.job_id(key)}")
