"""Shared fixtures: a real Redis (own DB), the fake LLM server, a nanobot home on disk, and a real arq worker."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from arq.connections import ArqRedis, create_pool
from arq.worker import Worker

from nanobot_hooks.settings import Settings
from worker.app import build_deps, worker_options
from worker.connections import answers, redis_settings, start_embedded
from worker.fakellm import FakeLLM, Reply
from worker.jobs import Deps
from worker.sessions import storage_name

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


@dataclass
class NanobotHome:
    """A nanobot config dir with a workspace, as nanobot lays them out."""

    root: Path
    config_path: Path
    workspace: Path
    sessions_dir: Path

    def write_config(self, llm_url: str, **defaults: Any) -> None:
        config = {
            "agents": {"defaults": {
                "workspace": str(self.workspace), "provider": "custom", "model": "fake-model",
                "contextWindowTokens": 128000, "maxTokens": 1024, "idleCompactAfterMinutes": 0,
                "timezone": "UTC", "dream": {"enabled": False}, **defaults,
            }},
            "providers": {"custom": {"apiBase": llm_url, "apiKey": "sk-fake"}},
        }
        self.config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")

    def session_file(self, key: str) -> Path:
        return self.sessions_dir / storage_name(key)

    def write_session(self, key: str, messages: list[dict[str, Any]], last_archived: int = 0,
                      metadata: dict[str, Any] | None = None) -> Path:
        """Exactly the bytes nanobot 0.3.5 writes: metadata line, then one JSON line per message."""
        head = {"_type": "metadata", "key": key, "created_at": "2026-11-20T09:00:00",
                "updated_at": "2026-11-20T10:00:00", "metadata": metadata or {},
                "last_archived": last_archived, "last_consolidated": last_archived}
        lines = [json.dumps(head, ensure_ascii=False)] + [json.dumps(m, ensure_ascii=False) for m in messages]
        path = self.session_file(key)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path


@pytest.fixture
def nanobot_home(tmp_path: Path, fake_llm: FakeLLM) -> NanobotHome:
    root = tmp_path / "nanobot"
    workspace = tmp_path / "workspace"
    workspace_id = secrets.token_hex(16)
    (workspace / ".nanobot").mkdir(parents=True)
    (workspace / ".nanobot" / "workspace-id").write_text(workspace_id + "\n", encoding="utf-8")
    sessions_dir = root / "sessions" / workspace_id
    sessions_dir.mkdir(parents=True)
    # nanobot's own marker binding the namespace to the workspace; without it nanobot refuses the folder.
    (sessions_dir / ".workspace").write_text(f"{workspace.resolve()}\n", encoding="utf-8")
    home = NanobotHome(root, root / "config.json", workspace, sessions_dir)
    home.write_config(fake_llm.url)
    return home


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
