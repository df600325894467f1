"""A session with history whose next nanobot turn crosses the token threshold, through `nanobot agent` or the
gateway, and what a summary of it must look like in nanobot's next request (the end-to-end tests share these)."""

from __future__ import annotations

from arq.connections import ArqRedis

from harness.environment import process_env
from harness.fakellm import FakeLLM
from harness.models import BIG_PROMPT, SUMMARY_TEXT, LLMScript, chat_requests, history_text, system_text
from harness.nanobot_cli import ARCHIVED, turn
from harness.sandbox import NanobotHome
from harness.transcripts import conversation
from nanobot_hooks.contract.queue import load_record
from nanobot_hooks.contract.records import SummaryRecord
from tests.support.queue_probes import queued_jobs
from tests.support.waiting import wait_until
from tests.support.workers import run_burst
from worker.summarize.deps import Deps

CHAT = "5b0c7f3e-1111-4222-8333-444455556666"  # the WebSocket chat id of the gateway tests
SEEDED_TURNS = 10  # 20 messages already in the session before nanobot's first turn here


async def seed_and_cross(exe, home: NanobotHome, redis_url: str, script: LLMScript, key: str):
    """A session with history, and one `nanobot agent` turn whose prompt crosses the token threshold."""
    seeded = conversation(SEEDED_TURNS)
    home.write_session(key, seeded)
    env = process_env(home, redis_url, NANOBOT_SUMMARY_INTERVAL="0")
    script.prompt_tokens = BIG_PROMPT
    await turn(exe, home, env, key, "crossing turn")
    return seeded, env


async def seed_cross_and_summarize(
    exe, home: NanobotHome, redis_url: str, script: LLMScript, key: str, redis: ArqRedis, deps: Deps
) -> tuple[list[dict], dict[str, str], SummaryRecord]:
    """`seed_and_cross`, then the worker's job for it: the seeded messages, nanobot's environment and the
    record waiting in Redis."""
    seeded, env = await seed_and_cross(exe, home, redis_url, script, key)
    await run_burst(deps)
    record = await load_record(redis, key)
    assert record is not None
    return seeded, env, record


async def gateway_cross(gateway, home: NanobotHome, script: LLMScript, redis: ArqRedis, text: str):
    """A session with history, a gateway, and one WebSocket turn that crosses the threshold and enqueues."""
    seeded = conversation(SEEDED_TURNS)
    home.write_session(f"websocket:{CHAT}", seeded)
    gw = await gateway(NANOBOT_SUMMARY_INTERVAL="0")
    script.prompt_tokens = BIG_PROMPT
    reply = await gw.say(CHAT, text)
    await wait_until(lambda: queued_jobs(redis), what="the job nanobot enqueued")
    return seeded, gw, reply


def assert_summary_replaces_covered_messages(fake_llm: FakeLLM, seeded: list[dict], boundary: int) -> None:
    """The last nanobot request: summary in the system prompt, no covered message, every kept one."""
    request = chat_requests(fake_llm)[-1]
    system, history = system_text(request), history_text(request)
    assert ARCHIVED in system and SUMMARY_TEXT in system
    covered = [m["content"] for m in seeded[:boundary]]
    kept = [m["content"] for m in seeded[boundary:]]
    assert covered and not [c for c in covered if c in history], "covered messages are not replayed"
    assert all(k in history for k in kept), "the kept tail is replayed"
