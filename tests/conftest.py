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

from nanobot_hooks.contract import Keys
from worker.settings import Settings
from worker.app import build_deps, worker_options
from worker.connections import redis_settings
from tests.support.fakellm import FakeLLM, Reply
from worker.summarize.jobs import Deps
from tests.support.redis_server import RedisServer
from tests.support.sandbox import NanobotHome

# The tests' sessions are a few hundred tokens: the worker summarizes whatever they save, and keeps the
# last 10 messages, whose boundaries the tests assert (the worker processes the tests start inherit
# these too). Idle summaries are off: their deferred checks would keep a burst worker waiting and add jobs
# to the queue the tests count (tests/test_idle.py switches them on). MEMORY.md takes a job's facts at once,
# not at the next quiet moment (the sessions the tests write are all fresh). The tests of those rules set
# them themselves.
# One namespace for the tests' hooks, workers and `redis` client alike (tests/test_namespace.py tests the
# default, which derives it from each nanobot home's workspace id).
TEST_NAMESPACE = "test"
TEST_DEFAULTS = {"NANOBOT_SUMMARY_MIN_SAVING": "0", "NANOBOT_SUMMARY_KEEP": "messages:10",
                 "NANOBOT_SUMMARY_IDLE": "false", "NANOBOT_MEMORY_WRITE": "now",
                 "NANOBOT_SUMMARY_NAMESPACE": TEST_NAMESPACE}
for _name, _value in TEST_DEFAULTS.items():
    os.environ.setdefault(_name, _value)
TEST_KEYS = Keys(TEST_NAMESPACE)



@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of this test process's own, on a free port: two runs on one machine (two checkouts,
    or `pytest -n 2`, whose every process gets its own) never take each other's jobs or keys.
    TEST_REDIS_URL names an existing one instead (its database is flushed by the tests)."""
    configured = os.environ.get("TEST_REDIS_URL")
    if configured:
        yield configured
        return
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server.url()
    finally:
        server.stop()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[ArqRedis]:
    pool = await create_pool(redis_settings(redis_url), default_queue_name=TEST_KEYS.queue)
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
