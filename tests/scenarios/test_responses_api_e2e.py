"""End to end on OpenAI's Responses API: the real nanobot's `openai` provider (which speaks it for gpt-5 and
o-series models, and for any model with `apiType: responses`) against the fake's `/v1/responses`, the real
worker summarizing through the fake's chat completions, real Redis.

On the Responses API nanobot keeps `session.provider_state`, a replay of every earlier input item, and sends
it instead of the history while it matches the provider and model; a summary that left it in place would
be added to the instructions while every covered message was still sent.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest

from harness.environment import process_env
from harness.fakellm import FakeLLM, FakeRequest, Reply
from harness.gateway import write_config
from harness.models import BIG_PROMPT, SMALL_PROMPT, SUMMARY_TEXT
from harness.nanobot_cli import ARCHIVED, agent_turn, nanobot_python, turn
from harness.sandbox import NanobotHome, session_lines
from harness.transcripts import conversation
from nanobot_hooks.contract.marker import METADATA_KEY
from tests.support.crossing import SEEDED_TURNS
from tests.support.queue_probes import queued_jobs, stats
from tests.support.workers import run_burst

# A name without "gpt-5" in it: the provider speaks the Responses API here because the config says so
# (`apiType: responses`), which is also what it takes for any base URL other than OpenAI's own.
RESPONSES_MODEL = "fake-reasoner"
KEY = "telegram:900"


@pytest.fixture
def responses_home(nanobot_home: NanobotHome, fake_llm: FakeLLM) -> NanobotHome:
    """nanobot answering through its `openai` provider on the Responses API; the worker on chat completions."""
    write_config(nanobot_home, fake_llm.url, provider="openai", model=RESPONSES_MODEL)
    config = json.loads(nanobot_home.config_path.read_text(encoding="utf-8"))
    config["providers"]["openai"]["apiType"] = "responses"
    nanobot_home.config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return nanobot_home


def responses_requests(llm: FakeLLM) -> list[FakeRequest]:
    """nanobot's turn requests, oldest first (the worker's go to chat completions)."""
    return [r for r in llm.requests if r.path.rstrip("/").endswith("/responses")]


def sent_text(request: FakeRequest) -> str:
    """Everything a Responses request sends besides its instructions, as one string."""
    return json.dumps(request.input, ensure_ascii=False)


def provider_state_lines(home: NanobotHome, key: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in home.session_file(key).read_text(encoding="utf-8").splitlines() if line]
    return [line for line in lines if line.get("_type") == "provider_state"]


async def test_after_a_summary_the_next_responses_request_sends_the_summary_not_the_covered_items(
    nanobot_exe, responses_home, fake_llm, script, redis, redis_url, worker_deps
):
    seeded = conversation(SEEDED_TURNS)
    responses_home.write_session(KEY, seeded)
    env = process_env(responses_home, redis_url, NANOBOT_SUMMARY_INTERVAL="0")
    script.prompt_tokens = BIG_PROMPT
    await turn(nanobot_exe, responses_home, env, KEY, "crossing turn")
    assert [r.path for r in fake_llm.requests] == ["/v1/responses"], "nanobot spoke the Responses API"
    assert seeded[0]["content"] in sent_text(fake_llm.requests[0])
    assert provider_state_lines(responses_home, KEY), "nanobot keeps its replay in the session file"
    assert await queued_jobs(redis) == 1

    await run_burst(worker_deps())
    head, _ = session_lines(responses_home, KEY)
    boundary = head["metadata"][METADATA_KEY]["pending"]["boundary"]
    assert provider_state_lines(responses_home, KEY), "the worker's write of line 1 keeps nanobot's other lines"

    # A fresh `nanobot agent` process applies the record at the start of its turn, before nanobot reads
    # the history and the provider's state.
    script.prompt_tokens = SMALL_PROMPT
    await turn(nanobot_exe, responses_home, env, KEY, "the turn after the summary")
    assert (await stats(redis)).get("applied") == 1
    request = responses_requests(fake_llm)[-1]
    assert ARCHIVED in request.instructions and SUMMARY_TEXT in request.instructions
    sent = sent_text(request)
    covered = [m["content"] for m in seeded[:boundary]]
    kept = [m["content"] for m in seeded[boundary:]]
    assert covered and [c for c in covered if c in sent] == [], "no covered message is replayed"
    assert all(k in sent for k in kept) and "the turn after the summary" in sent, "the kept tail and the turn are"
    assert SUMMARY_TEXT not in sent, "the summary travels in the instructions only"

    # nanobot builds its replay again from there: the turn after next still sends no covered message.
    await turn(nanobot_exe, responses_home, env, KEY, "and the next one")
    request = responses_requests(fake_llm)[-1]
    assert [c for c in covered if c in sent_text(request)] == [] and "the turn after the summary" in sent_text(request)
    assert SUMMARY_TEXT in request.instructions


# Runs nanobot's CLI with a Session that no longer declares `provider_state`, as a future release might.
RENAMED_STATE_CLI = """
import sys
import nanobot.session.manager as manager
cls = manager.Session
del cls.__annotations__["provider_state"]
cls.__dataclass_fields__.pop("provider_state")
delattr(cls, "provider_state")
from nanobot.cli.entry import main
sys.argv[0] = "nanobot"
sys.exit(main())
"""


async def test_a_nanobot_whose_session_has_no_provider_state_runs_without_the_integration_and_says_so_once(
    nanobot_exe, responses_home, fake_llm, script, redis, redis_url
):
    env = process_env(responses_home, redis_url, NANOBOT_SUMMARY_INTERVAL="1")
    script.prompt_tokens = BIG_PROMPT
    python = [str(nanobot_python(nanobot_exe)), "-c", RENAMED_STATE_CLI]
    result = await asyncio.to_thread(agent_turn, nanobot_exe, responses_home, env, KEY, "hello", python)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "reply number 1" in result.stdout
    off = [line for line in result.stderr.splitlines() if "integration off" in line]
    assert len(off) == 1 and "no Session.provider_state" in off[0], result.stderr[-2000:]
    assert await redis.keys("*") == [], "nothing enqueued"


# -- the fake itself, through OpenAI's own client ----------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_the_fake_speaks_the_responses_api_to_openais_client(fake_llm, stream):
    fake_llm.script(
        Reply("hello there", prompt_tokens=321),
        Reply("", tool_calls=[{"name": "recall", "arguments": {"query": "port"}}]),
    )
    client = openai.AsyncOpenAI(base_url=fake_llm.url, api_key="sk-fake")
    try:
        for expected in ("hello there", "recall"):
            kwargs: dict[str, Any] = {
                "model": RESPONSES_MODEL,
                "instructions": "be brief",
                "input": [{"role": "user", "content": "hi"}],
            }
            if stream:
                events = [event async for event in await client.responses.create(**kwargs, stream=True)]
                assert events[0].type == "response.created" and events[-1].type == "response.completed"
                response = events[-1].response
            else:
                response = await client.responses.create(**kwargs)
            if expected == "recall":
                call = response.output[0]
                assert call.type == "function_call" and call.name == "recall"
                assert json.loads(call.arguments) == {"query": "port"}
            else:
                assert response.output_text == expected and response.usage.input_tokens == 321
    finally:
        await client.close()
    assert [r.instructions for r in fake_llm.requests] == ["be brief", "be brief"]
    assert fake_llm.requests[0].input == [{"role": "user", "content": "hi"}]
