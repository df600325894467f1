"""Shared fixtures: a real Redis (own DB), the fake LLM server, a nanobot home on disk, and a real arq worker."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from arq.connections import ArqRedis, create_pool
from arq.worker import Worker

from worker.settings import Settings
from worker.app import build_deps, worker_options
from worker.connections import answers, redis_settings, start_embedded
from tests.support.fakellm import FakeLLM, Reply
from worker.jobs import Deps
from tests.support.sandbox import NanobotHome

# The tests' sessions are a few hundred tokens: the worker summarizes whatever they save, and keeps the
# last 10 messages, whose boundaries the tests assert (the worker processes the tests start inherit
# these too). The tests of those rules set them themselves.
TEST_DEFAULTS = {"NANOBOT_SUMMARY_MIN_SAVING": "0", "NANOBOT_SUMMARY_KEEP": "messages:10"}
for _name, _value in TEST_DEFAULTS.items():
    os.environ.setdefault(_name, _value)

# DB 13 keeps the tests away from anything a developer keeps in DB 0.
TEST_REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/13")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    embedded = None
    if not answers(TEST_REDIS_URL):
        embedded = start_embedded(TEST_REDIS_URL)
    yield TEST_REDIS_URL
    if embedded is not None:
        embedded.stop()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[ArqRedis]:
    pool = await create_pool(redis_settings(redis_url))
    await pool.flushdb()
    yield pool
    await pool.flushdb()
    await pool.aclose()


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    with FakeLLM() as llm:
        yield llm


@pytest.fixture
def nanobot_home(tmp_path: Path, fake_llm: FakeLLM) -> NanobotHome:
    return NanobotHome.create(tmp_path, fake_llm.url)


def conversation(turns: int, start: datetime | None = None, step: timedelta = timedelta(minutes=1),
                 user: str = "question {i} about the deploy script",
                 assistant: str = "answer {i}: run ./deploy.sh --env prod") -> list[dict[str, Any]]:
    """user/assistant pairs with nanobot-style naive local ISO timestamps."""
    moment = start or datetime(2026, 11, 20, 10, 0, 0)
    messages = []
    for i in range(turns):
        messages.append({"role": "user", "content": user.format(i=i), "timestamp": moment.isoformat()})
        moment += step
        messages.append({"role": "assistant", "content": assistant.format(i=i), "timestamp": moment.isoformat()})
        moment += step
    return messages


def summary_json(summary: str = "## What happened\n- the user asked about deploys", **extra: Any) -> str:
    return json.dumps({"summary": summary, "daily_notes": [], "facts": [], **extra}, ensure_ascii=False)


@pytest.fixture
def settings_for(redis_url: str, nanobot_home: NanobotHome):
    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "redis_url": redis_url, "config": nanobot_home.config_path, "summary_retry_delay": 0.05,
            "summary_timeout": 10.0,
        }
        values.update(overrides)
        return Settings(**values)
    return make


@pytest.fixture
def deps_for(settings_for):
    def make(**overrides: Any) -> Deps:
        return build_deps(settings_for(**overrides))
    return make


async def run_burst(deps: Deps, **worker_overrides: Any) -> Worker:
    """A real arq worker in this process, until the queue is empty."""
    options = {**worker_options(deps.settings), "ctx": {"deps": deps}, "burst": True, "poll_delay": 0.02,
               "handle_signals": False, **worker_overrides}
    worker = Worker(**options)
    try:
        await worker.main()
    finally:
        await worker.close()
    return worker


@pytest.fixture
def default_reply(fake_llm: FakeLLM) -> FakeLLM:
    fake_llm.default = Reply(summary_json())
    return fake_llm
