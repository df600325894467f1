"""The nanobot fork server (harness/nanobot_fork.py): a forked command does what the console script does in a
process of its own, so the tests that run nanobot through it test what a user runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness.environment import process_env
from harness.fakellm import FakeLLM
from harness.gateway import write_config
from harness.models import chat_requests
from harness.nanobot_cli import FORKS, FRESH_PROCESSES, ForkServer, agent_turn, fork_server, nanobot_python
from harness.redis_server import free_port
from harness.sandbox import NanobotHome

KEY = "telegram:77"


def tools_offered(llm: FakeLLM) -> list[str]:
    """The names of the tools nanobot offered the model in its last turn."""
    return sorted(tool["function"]["name"] for tool in chat_requests(llm)[-1].body["tools"])  # type: ignore[index]


def session_roles(home: NanobotHome) -> list[str]:
    """The roles of the messages nanobot saved for KEY, in order (its file's first line is its metadata)."""
    lines = home.session_file(KEY).read_text(encoding="utf-8").splitlines()[1:]
    return [json.loads(line)["role"] for line in lines]


def test_a_forked_turn_answers_saves_and_offers_the_same_tools_as_a_fresh_process(
    nanobot_exe: Path, agent_home: NanobotHome, redis_url: str, fake_llm: FakeLLM, monkeypatch
) -> None:
    env = process_env(agent_home, redis_url)
    assert fork_server(nanobot_exe, env) is not None, "the tests' conftest switches forks on"

    forked = agent_turn(nanobot_exe, agent_home, env, KEY, "first, forked")
    forked_tools, forked_roles = tools_offered(fake_llm), session_roles(agent_home)
    monkeypatch.setenv(FRESH_PROCESSES, "1")
    assert fork_server(nanobot_exe, env) is None
    fresh = agent_turn(nanobot_exe, agent_home, env, KEY, "second, fresh")

    assert forked.returncode == fresh.returncode == 0, forked.stderr + fresh.stderr
    assert forked.stdout.strip() and fresh.stdout.strip(), (forked.stdout, fresh.stdout)
    # Our hooks reach nanobot through its entry points in the fork too: the recall tool is offered either way.
    assert "recall" in forked_tools and forked_tools == tools_offered(fake_llm)
    assert forked_roles == ["user", "assistant"] and session_roles(agent_home) == ["user", "assistant"] * 2


def test_a_forked_command_that_fails_exits_with_the_status_and_words_of_a_fresh_one(
    nanobot_exe: Path, agent_home: NanobotHome, redis_url: str, tmp_path: Path, monkeypatch
) -> None:
    env = process_env(agent_home, redis_url)
    missing = NanobotHome.create(tmp_path / "elsewhere", "http://127.0.0.1:9/v1")
    missing.config_path.unlink()  # no config file: nanobot refuses to start
    forked = agent_turn(nanobot_exe, missing, env, KEY, "hi")
    monkeypatch.setenv(FRESH_PROCESSES, "1")
    fresh = agent_turn(nanobot_exe, missing, env, KEY, "hi")
    assert fresh.returncode != 0 and forked.returncode == fresh.returncode, (forked, fresh)
    assert forked.stdout + forked.stderr == fresh.stdout + fresh.stderr


def test_a_forked_process_can_be_polled_waited_for_and_signalled_as_popen_can(
    nanobot_exe: Path, agent_home: NanobotHome, redis_url: str, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    assert FORKS["on"]
    write_config(agent_home, fake_llm.url, free_port())  # a gateway's WebSocket channel on a free port
    server = ForkServer(nanobot_python(nanobot_exe), process_env(agent_home, redis_url))
    try:
        log = tmp_path / "gateway.log"
        with open(log, "ab") as out:
            argv = [
                str(nanobot_exe),
                "gateway",
                "-c",
                str(agent_home.config_path),
                "--foreground",
                "-p",
                str(free_port()),
            ]
            process = server.start(argv, process_env(agent_home, redis_url), out.fileno(), out.fileno())
            assert os.getsid(process.pid) == process.pid, "a session of its own, as start_new_session gives"
            assert process.poll() is None
            with pytest.raises(subprocess.TimeoutExpired):
                process.wait(0.2)
            deadline = time.monotonic() + 60
            while "nanobot" not in log.read_text(errors="replace") and time.monotonic() < deadline:
                time.sleep(0.1)
            process.send_signal(signal.SIGKILL)
            assert process.wait(30) == -signal.SIGKILL
            assert process.poll() == -signal.SIGKILL
    finally:
        server.close()
    assert server.process.returncode == 0, "the server ends when its test process closes its input"
