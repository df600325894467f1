"""A private fact to forget, learned by a real job: a session where the user names a therapist, summarized by a
burst worker with the fake LLM remembering FACT, so MEMORY.md holds the fact, the day's notes a line of it and the
recall index the archived message; and the real recall tool, asked as that session."""

from __future__ import annotations

import json

import pytest
from arq.connections import ArqRedis

from harness.fakellm import FakeLLM, FakeRequest, Reply
from harness.models import echo_memory
from harness.sandbox import NanobotHome
from harness.transcripts import conversation
from nanobot_hooks.recall import tool as recall_tool
from nanobot_hooks.settings import HookSettings
from tests.support.workers import summarize_now
from worker.summarize.deps import Deps

KEY = "telegram:42"
SAID = "my therapist is Dr. Rowe on Thursdays"
FACT = "The user's therapist is Dr. Rowe on Thursdays"
QUERY = "therapist Rowe"  # "Thursdays" comes back only with a passage, never from the query's own words


def remembering(request: FakeRequest) -> Reply:
    """echo_memory's notes and summary (the user's lines), with FACT the one fact it remembers."""
    answer = json.loads(echo_memory(request).content)
    answer["facts"] = [{"text": FACT, "tag": "durable", "importance": 4, "source": "user", "category": "health"}]
    return Reply(json.dumps(answer, ensure_ascii=False))


async def therapist_remembered(
    redis: ArqRedis, home: NanobotHome, fake_llm: FakeLLM, deps: Deps, monkeypatch: pytest.MonkeyPatch, said_at: int = 2
) -> recall_tool.RecallTool:
    """KEY's 15 turns (message `said_at` SAID) summarized by a real job, which covers messages 0..19 (the tests keep
    the last 10); the recall tool as KEY asks it, which finds it."""
    fake_llm.responder = remembering
    messages = conversation(15, user="question {i} about the deploy script")
    messages[said_at]["content"] = SAID
    home.write_session(KEY, messages)
    await summarize_now(redis, deps, KEY)
    tool = recall_tool.RecallTool(home.workspace, HookSettings())
    monkeypatch.setattr(recall_tool, "_asking_session", lambda: KEY)
    assert "Thursdays" in await tool.execute(query=QUERY), "recalled before it is forgotten"
    return tool
