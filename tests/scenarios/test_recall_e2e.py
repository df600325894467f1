"""The recall tool in the real nanobot: a summarized detail comes back through a tool call, and only the asker's."""

from __future__ import annotations

import json

from harness.environment import process_env
from harness.fakellm import FakeRequest, Reply
from harness.models import BIG_PROMPT, SMALL_PROMPT, SUMMARY_MODEL, LLMScript, chat_requests, system_text
from harness.nanobot_cli import ARCHIVED, turn
from harness.transcripts import conversation
from nanobot_hooks.contract.queue import load_record
from tests.support.crossing import CHAT
from tests.support.waiting import wait_until
from tests.support.workers import run_burst
from worker.memory.recall_index import RecallIndex

KEY, GROUP = "telegram:900", "telegram:-100900"
PLANTED = "预发环境的数据库端口改成 54329 了，记一下"
QUESTION = "RECALL-TURN: what was the staging database port again?"


class RecallScript(LLMScript):
    """LLMScript, plus a model that answers QUESTION by calling `recall` first, then answers from its result."""

    def __call__(self, request: FakeRequest) -> Reply:
        if (request.body or {}).get("model") != SUMMARY_MODEL and request.messages:
            last = request.messages[-1]
            if last.get("role") == "user" and QUESTION in json.dumps(last, ensure_ascii=False):
                self.replies += 1
                return Reply(
                    tool_calls=[{"name": "recall", "arguments": {"query": "数据库 端口"}}],
                    prompt_tokens=self.prompt_tokens,
                )
            if last.get("role") == "tool":
                self.replies += 1
                return Reply("the port was 54329", prompt_tokens=self.prompt_tokens)
        return super().__call__(request)


def tool_names(request: FakeRequest) -> set[str]:
    return {tool.get("function", {}).get("name") for tool in (request.body or {}).get("tools") or []}


def tool_result(request: FakeRequest) -> str:
    (message,) = [m for m in request.messages if m.get("role") == "tool"]
    content = message["content"]
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


async def test_a_detail_the_summary_dropped_comes_back_through_the_recall_tool_and_only_the_askers(
    nanobot_exe, agent_home, fake_llm, redis, redis_url, worker_deps
):
    script = RecallScript()
    fake_llm.responder = script
    seeded = conversation(10)
    seeded[0]["content"] = PLANTED
    agent_home.write_session(KEY, seeded)
    # A group chat said something alike; it is archived too, and must never reach the private chat.
    group = conversation(2, user="群里说数据库端口是 11111", assistant="好的")
    agent_home.write_session(GROUP, group, last_archived=len(group))
    env = process_env(agent_home, redis_url, NANOBOT_SUMMARY_INTERVAL="0")
    script.prompt_tokens = BIG_PROMPT
    await turn(nanobot_exe, agent_home, env, KEY, "crossing turn")
    await run_burst(worker_deps())  # summarizes, then refreshes the recall index
    record = await load_record(redis, KEY)
    assert record is not None and record.boundary > 0

    script.prompt_tokens = SMALL_PROMPT
    before = len(chat_requests(fake_llm))
    result = await turn(nanobot_exe, agent_home, env, KEY, QUESTION)
    asked, answered = chat_requests(fake_llm)[before:]
    assert "recall" in tool_names(asked)
    assert ARCHIVED in system_text(asked), "the summary was applied at the start of the turn"
    assert "54329" not in json.dumps(asked.messages, ensure_ascii=False), "the detail left the context"
    found = tool_result(answered)
    assert "54329" in found and "2026-11-20" in found and "this conversation, message 0 (user)" in found
    assert "11111" not in found, "a group chat's archive is not the private chat's"
    assert "the port was 54329" in result.stdout


async def test_recall_switched_off_is_not_offered_to_the_model(nanobot_exe, agent_home, fake_llm, redis_url):
    fake_llm.responder = LLMScript()
    env = process_env(agent_home, redis_url, NANOBOT_SUMMARY_RECALL="false", NANOBOT_SUMMARY_INTERVAL="0")
    result = await turn(nanobot_exe, agent_home, env, "telegram:901", "hello")
    assert "reply number 1" in result.stdout
    (request,) = chat_requests(fake_llm)
    assert "recall" not in tool_names(request) and "read_file" in tool_names(request)


async def test_the_gateway_offers_recall_too(gateway, nanobot_home, fake_llm, worker_deps):
    key = f"websocket:{CHAT}"  # a web client: not trusted, still sees its own archive
    seeded = conversation(4)
    seeded[0]["content"] = PLANTED
    nanobot_home.write_session(key, seeded, last_archived=4)
    RecallIndex(nanobot_home.workspace).refresh(worker_deps().sessions_dir)  # as the worker's start-up sweep does
    fake_llm.responder = RecallScript()
    gw = await gateway(NANOBOT_SUMMARY_INTERVAL="0")
    await gw.say(CHAT, QUESTION)  # the first message back is the tool hint; the answer follows
    answered = lambda: [r for r in chat_requests(fake_llm) if r.messages[-1].get("role") == "tool"]  # noqa: E731
    await wait_until(answered, what="the request carrying the tool's result")
    found = tool_result(answered()[0])
    assert "54329" in found and "this conversation, message 0 (user)" in found
