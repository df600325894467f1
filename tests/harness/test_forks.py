"""The fork servers (harness/forks.py, harness/fork_server.py): a forked command does what the same command does in a
process of its own, nanobot's and the worker's, so the tests that run them through a server test what a user runs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.environment import process_env
from harness.fakellm import FakeLLM, Reply
from harness.forks import (
    FORKS,
    FRESH_PROCESSES,
    NANOBOT_PRELOADED,
    SHARED,
    WORKER_PRELOADED,
    ForkServer,
    fork_server,
    run,
    served,
)
from harness.gateway import write_config
from harness.models import chat_requests, summary_json
from harness.nanobot_cli import agent_turn, nanobot_python
from harness.redis_server import free_port
from harness.sandbox import NanobotHome
from harness.transcripts import conversation
from nanobot_hooks.contract.queue import enqueue_summary, load_record
from nanobot_hooks.contract.records import SummarizeRequest

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
    assert fork_server([str(nanobot_exe)], env) is not None, "the tests' conftest switches forks on"

    forked = agent_turn(nanobot_exe, agent_home, env, KEY, "first, forked")
    forked_tools, forked_roles = tools_offered(fake_llm), session_roles(agent_home)
    monkeypatch.setenv(FRESH_PROCESSES, "1")
    assert fork_server([str(nanobot_exe)], env) is None
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
    server = ForkServer.launch(str(nanobot_python(nanobot_exe)), process_env(agent_home, redis_url), NANOBOT_PRELOADED)
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
            main = "nanobot.cli.entry:main"
            with open(os.devnull, "rb") as nothing:
                process = server.start(
                    argv, main, process_env(agent_home, redis_url), (nothing.fileno(), out.fileno(), out.fileno())
                )
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


def test_the_worker_and_nanobot_commands_a_server_runs_and_those_it_leaves_to_a_process_of_their_own(
    nanobot_exe: Path, tmp_path: Path
) -> None:
    python = os.path.abspath(sys.executable)
    path = {"PATH": f"{Path(python).parent}{os.pathsep}/usr/bin:/bin"}
    assert served([python, "-m", "worker", "run"], path) == (python, "-m worker", WORKER_PRELOADED)
    assert served([python, "-m", "arq", "worker.app.WorkerSettings"], path) == (python, "-m arq", WORKER_PRELOADED)
    assert served(["nanobot-summary", "run"], path) == (python, "worker.commands.cli:main", WORKER_PRELOADED)
    nanobot = str(nanobot_python(nanobot_exe))
    assert served([str(nanobot_exe), "agent"], path) == (nanobot, "nanobot.cli.entry:main", NANOBOT_PRELOADED)
    # Interpreter options, code, another module, a script not on PATH, another environment's Python: their own process.
    other = tmp_path / "venv" / "bin"
    other.mkdir(parents=True)
    (other / "nanobot-summary").write_text("#!/bin/sh\n", encoding="utf-8")
    (other / "nanobot-summary").chmod(0o755)
    for argv, env in [
        ([python, "-I", "-m", "worker"], path),
        ([python, "-c", "pass"], path),
        ([python, "-m", "pip"], path),
        (["nanobot-summary", "run"], {"PATH": "/usr/bin:/bin"}),
        (["nanobot-summary", "run"], {"PATH": str(other)}),
        ([str(other.parent / "python"), "-m", "worker"], path),
    ]:
        assert served(argv, env) is None, argv


@pytest.mark.slow  # worker processes, forked and fresh
def test_a_forked_worker_command_says_and_exits_as_a_fresh_one(nanobot_home: NanobotHome, monkeypatch) -> None:
    env = process_env(nanobot_home, "redis://127.0.0.1:9/0", config=True, NANOBOT_SUMMARY_KEEP="turns:nine")
    commands = [["--version"], ["status", "--help"], ["run", "--no-embedded-redis"]]
    assert fork_server([sys.executable, "-m", "worker"], env) is not None
    forked = [run([sys.executable, "-m", "worker", *args], env, timeout=120) for args in commands]
    monkeypatch.setenv(FRESH_PROCESSES, "1")
    fresh = [run([sys.executable, "-m", "worker", *args], env, timeout=120) for args in commands]
    assert [(f.returncode, f.stdout, f.stderr) for f in forked] == [(f.returncode, f.stdout, f.stderr) for f in fresh]
    assert fresh[0].returncode == 0 and fresh[0].stdout.strip(), fresh[0]
    assert fresh[2].returncode == 2 and "NANOBOT_SUMMARY_KEEP" in fresh[2].stderr, fresh[2].stderr


@pytest.mark.slow  # a fresh worker process loads litellm
async def test_a_forked_worker_summarizes_through_litellm_as_a_fresh_one(
    nanobot_home: NanobotHome, redis, redis_url: str, fake_llm: FakeLLM, monkeypatch
) -> None:
    env = process_env(nanobot_home, redis_url, config=True)
    fake_llm.default = Reply(summary_json())
    results = []
    for fresh in (False, True):
        if fresh:
            monkeypatch.setenv(FRESH_PROCESSES, "1")
        key = f"telegram:{80 + fresh}"
        nanobot_home.write_session(key, conversation(15))
        await enqueue_summary(redis, SummarizeRequest(session_key=key))
        done = await asyncio.to_thread(run, [sys.executable, "-m", "worker", "--burst"], env, timeout=120)
        record = await load_record(redis, key)
        results.append((done.returncode, f"summarized {key}" in done.stderr, record is not None and record.summary))
    assert results[0] == results[1] and results[0][0] == 0 and results[0][1], (results, done.stderr[-2000:])


def test_every_test_process_forks_from_the_runs_servers(nanobot_exe: Path) -> None:
    if SHARED not in os.environ:
        pytest.skip("a run without test processes of pytest-xdist: each command's server is this process's")
    env = process_env()
    shared = json.loads(os.environ[SHARED])
    for argv in ([sys.executable, "-m", "worker"], [str(nanobot_exe)]):
        started = fork_server(argv, env)
        assert started is not None and started[0].path in shared.values(), (argv, shared)
    # Another interpreter setting, another server, of this process.
    own = fork_server([str(nanobot_exe)], {**env, "PYTHONHASHSEED": "7"})
    assert own is not None and own[0].path not in shared.values() and own[0].process is not None
