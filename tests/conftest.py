"""Shared fixtures: a real Redis of this test process's own, the fake LLM server, a nanobot home on disk, and the
worker's settings and deps for them; the helpers the tests import live in tests/support."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit
from typing import Any

import pytest
from arq.connections import ArqRedis, create_pool

from tests.support.defaults import TEST_DEFAULTS, TEST_KEYS, apply_test_defaults
from tests.support.fakellm import FakeLLM, Reply
from tests.support.models import summary_json
from tests.support.redis_server import RedisServer
from tests.support.sandbox import NanobotHome
from tests.support.transcripts import conversation
from tests.support.workers import run_burst
from worker.service.build import build_deps
from worker.connections import redis_settings
from worker.settings import Settings
from worker.summarize.deps import Deps

# Before any worker module reads its settings, and inherited by every process the tests start.
apply_test_defaults()
# Old import names, kept until every test imports them from tests.support (defaults, sandbox, transcripts,
# models, workers): this file holds fixtures only.
__all__ = ["TEST_DEFAULTS", "TEST_KEYS", "NanobotHome", "conversation", "run_burst", "summary_json"]


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist's own marker, named here too for runs without xdist (`-p no:xdist`).
    config.addinivalue_line("markers", "xdist_group(name): run in the same test process as the group's other tests")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of this test process's own, on a free port: two runs on one machine (two checkouts,
    or `pytest -n 2`, whose every process gets its own) never take each other's jobs or keys.
    TEST_REDIS_URL names an existing one instead (its database is flushed by the tests; under `pytest -n`,
    each test process takes the database after it: gw0 the one named, gw1 the next)."""
    configured = os.environ.get("TEST_REDIS_URL")
    if configured:
        yield database_of_this_process(configured)
        return
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server.url()
    finally:
        server.stop()


def database_of_this_process(url: str) -> str:
    """`url` with its database number moved on by this xdist process's number (none outside xdist)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return url
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0) + int(worker[2:])
    return urlunsplit(parts._replace(path=f"/{database}"))


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


@pytest.fixture
def default_reply(fake_llm: FakeLLM) -> FakeLLM:
    fake_llm.default = Reply(summary_json())
    return fake_llm
