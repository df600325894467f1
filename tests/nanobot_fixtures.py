"""Driving the real nanobot from tests: its executable, a config, `nanobot agent` turns, and a gateway."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from arq.connections import ArqRedis
from arq.jobs import Job

from tests.support.fakellm import FakeLLM, FakeRequest, Reply
# Re-exported: the tests import them from here.
from tests.support import gateway as _gateway
from tests.support.gateway import Gateway, write_config  # noqa: F401
from tests.support.redis_server import free_port  # noqa: F401
from worker.nanobot.config import ModelChoice

from .conftest import TEST_KEYS, TEST_DEFAULTS, NanobotHome, summary_json

# What scripts/test makes; NANOBOT_BIN points elsewhere.
DEFAULT_NANOBOT_BIN = Path(__file__).resolve().parent.parent / ".venv-nanobot" / "bin" / "nanobot"
# The worker summarizes with this model name, so the fake LLM can tell its calls from nanobot's.
SUMMARY_MODEL = "summarizer"
SUMMARY_TEXT = "SUMMARY-7F3A: the user asked about the deploy script; flags and environments were explained"
ARCHIVED = "[Archived Context Summary]"
BIG_PROMPT = 90_000  # over 60% of the 128000-token window
SMALL_PROMPT = 2_000


def find_nanobot() -> Path:
    """NANOBOT_BIN (scripts/test sets it) must exist if set; else the project's .venv-nanobot; else skip."""
    configured = os.environ.get("NANOBOT_BIN")
    if configured:
        path = Path(configured)
        if not path.is_file():
            pytest.fail(f"NANOBOT_BIN={configured} does not exist", pytrace=False)
        return path
    default = Path(DEFAULT_NANOBOT_BIN)
    if default.is_file():
        return default
    pytest.skip("no nanobot executable: set NANOBOT_BIN to the `nanobot` of an environment with nanobot-ai "
                "and this project installed")


def nanobot_python(exe: Path) -> Path:
    """The Python of nanobot's environment (scripts/test sets NANOBOT_PYTHON)."""
    configured = os.environ.get("NANOBOT_PYTHON")
    return Path(configured) if configured else exe.parent / "python"


class LLMScript:
    """FakeLLM responder: nanobot's calls get `prompt_tokens` as set; the worker's get a JSON summary."""

    def __init__(self) -> None:
        self.prompt_tokens = SMALL_PROMPT
        self.summary = SUMMARY_TEXT
        self.replies = 0

    def __call__(self, request: FakeRequest) -> Reply:
        if (request.body or {}).get("model") == SUMMARY_MODEL:
            return Reply(summary_json(self.summary))
        self.replies += 1
        return Reply(f"reply number {self.replies}", prompt_tokens=self.prompt_tokens)


def chat_requests(llm: FakeLLM) -> list[FakeRequest]:
    """nanobot's own turn requests (they carry its tool schemas), oldest first."""
    return [r for r in llm.requests if (r.body or {}).get("model") != SUMMARY_MODEL and (r.body or {}).get("tools")]


def system_text(request: FakeRequest) -> str:
    first = request.messages[0] if request.messages else {}
    return first.get("content") if first.get("role") == "system" and isinstance(first.get("content"), str) else ""


def history_text(request: FakeRequest) -> str:
    """Everything but the system prompt, as one string."""
    return json.dumps([m for m in request.messages if m.get("role") != "system"], ensure_ascii=False)


def nanobot_env(home: NanobotHome, redis_url: str, **settings: str) -> dict[str, str]:
    """nanobot's (and the worker's) environment for a test, with the tests' defaults (conftest)."""
    return _gateway.nanobot_env(home, redis_url, **{**TEST_DEFAULTS, **settings})


@dataclass
class Turn:
    returncode: int
    stdout: str
    stderr: str


def agent_turn(exe: Path, home: NanobotHome, env: dict[str, str], key: str, text: str,
               argv_prefix: list[str] | None = None) -> Turn:
    """One `nanobot agent -m` turn in its own process (blocking: call through asyncio.to_thread)."""
    argv = (argv_prefix or [str(exe)]) + ["agent", "-c", str(home.config_path), "-s", key, "-m", text,
                                         "--no-markdown"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    return Turn(done.returncode, done.stdout, done.stderr)


async def turn(exe: Path, home: NanobotHome, env: dict[str, str], key: str, text: str) -> Turn:
    result = await asyncio.to_thread(agent_turn, exe, home, env, key, text)
    assert result.returncode == 0, f"nanobot agent failed ({result.returncode}):\n{result.stderr[-3000:]}"
    return result


def summarizer(llm_url: str) -> ModelChoice:
    return ModelChoice(model=f"openai/{SUMMARY_MODEL}", api_base=llm_url, api_key="sk-fake", source="test")


async def wait_until(condition: Any, timeout: float = 30.0, what: str = "condition") -> None:
    """Poll an async or plain predicate; waiting is not asserting anything about time."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def queued_jobs(redis: ArqRedis) -> int:
    return int(await redis.zcard(TEST_KEYS.queue))


async def queued_reason(redis: ArqRedis, key: str) -> str | None:
    info = await Job(TEST_KEYS.job_id(key), redis, _queue_name=TEST_KEYS.queue).info()
    return info.args[0]["reason"] if info is not None else None


async def has_record(redis: ArqRedis, key: str) -> bool:
    return bool(await redis.exists(TEST_KEYS.record(key)))


async def stats(redis: ArqRedis) -> dict[str, int]:
    raw = await redis.hgetall(TEST_KEYS.stats)
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}


def session_lines(home: NanobotHome, key: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = [json.loads(line) for line in home.session_file(key).read_text(encoding="utf-8").splitlines() if line]
    head = next(line for line in lines if line.get("_type") == "metadata")
    return head, [line for line in lines if "_type" not in line]


@dataclass
class ProcfileWorker:
    """The worker exactly as the Procfile starts it (`worker:` line), in its own process."""

    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        root = Path(__file__).resolve().parent.parent
        line = next(line for line in (root / "Procfile").read_text(encoding="utf-8").splitlines()
                    if line.startswith("worker:"))
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(line.partition(":")[2].split(), cwd=root, env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""
