"""A newcomer's first hour: the one command line, mistakes caught at start in one line each, the worker following
nanobot's config, a job's outcome in nanobot's log, and the embedded Redis leaving nothing behind. Real worker
processes, real redis-servers, the fake LLM over HTTP."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import forks
from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.fakellm import Error, Reply
from harness.models import chat_requests, history_text, summary_json, system_text
from harness.nanobot_cli import ARCHIVED, turn
from harness.redis_server import RedisServer, free_port
from harness.transcripts import conversation
from nanobot_hooks import logs
from nanobot_hooks.contract.queue import enqueue_summary
from nanobot_hooks.contract.records import SummarizeRequest
from nanobot_hooks.link import RedisLink
from nanobot_hooks.turn.listener import listen
from tests.support.commands import run_in_process
from tests.support.paths import ROOT
from tests.support.waiting import wait_until
from tests.support.workers import run_burst, summarize_now
from worker.errors import NanobotConfigError
from worker.service.build import build_deps
from worker.settings import unknown_variables
from worker.state.outcomes import load_outcome

# The first hour as a user lives it, the real commands and worker processes: tests/conftest.py's SLOW_TIMEOUT.
pytestmark = pytest.mark.slow


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """`nanobot-summary ARGS` in its own process; `env` is its whole environment (process_env() if none)."""
    return forks.run([sys.executable, "-m", "worker", *args], env or process_env(), cwd=cwd, timeout=timeout)


# --- the command line --------------------------------------------------------------------------------------


def test_commands_that_need_no_llm_never_import_litellm(redis_url) -> None:
    # A process of its own: a fork (harness/forks.py) has its server's imports made already.
    timed = subprocess.run(
        [sys.executable, "-m", "worker", "status", "--json"],
        cwd=ROOT,
        env=process_env(redis_url=redis_url, PYTHONPROFILEIMPORTTIME="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert timed.returncode == 0, timed.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in timed.stderr.splitlines() if line.startswith("import time")}
    assert "worker.commands.status" in imported and not any(name.startswith("litellm") for name in imported)
    probe = (
        "import sys, worker.commands.cli, worker.commands.status, worker.commands.undo, worker.commands.enqueue, "
        "worker.commands.doctor, worker.commands.forget\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('litellm', 'tiktoken')))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr


def test_the_console_script_runs_from_any_folder_and_nanobots_environment_gets_none(tmp_path) -> None:
    script = Path(sys.executable).parent / "nanobot-summary"
    assert script.exists(), "scripts/test (like scripts/run-worker) installs the command into .venv"
    helped = subprocess.run([str(script), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0, helped.stderr
    for command in ("run", "enqueue", "status", "undo", "forget", "doctor", "hooks"):
        assert re.search(rf"^\s+{command}\s", helped.stdout, re.MULTILINE), helped.stdout
    nanobot_python = os.environ.get("NANOBOT_PYTHON")
    if not nanobot_python:
        pytest.skip("needs nanobot's environment (scripts/test makes it)")
    # nanobot's environment holds only the hooks' distribution, which has no command: a `nanobot-summary` there
    # could only be a stale one, run against the wrong Python.
    hooks = subprocess.run(
        [nanobot_python, "-I", "-c", "import nanobot_hooks.plugin; print('ok')"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert hooks.stdout.strip() == "ok", hooks.stderr
    assert not (Path(nanobot_python).parent / "nanobot-summary").exists()


def test_a_misspelled_variable_is_named_with_the_nearest_known_one(redis_url, capsys) -> None:
    lines = unknown_variables(
        {
            "NANOBOT_SUMMARY_INTERVALL": "2",
            "NANOBOT_MEMORY_MAX_FACT": "9",
            "NANOBOT_SUMMARY_INTERVAL": "3",
            "NANOBOT_AGENTS__DEFAULTS__MODEL": "x",
        }
    )
    assert len(lines) == 2
    assert "NANOBOT_MEMORY_MAX_FACT" in lines[0] and "did you mean NANOBOT_MEMORY_MAX_FACTS?" in lines[0]
    assert "NANOBOT_SUMMARY_INTERVALL" in lines[1] and "did you mean NANOBOT_SUMMARY_INTERVAL?" in lines[1]
    shown = run_in_process(
        capsys, "status", "--json", env=process_env(redis_url=redis_url, NANOBOT_SUMMARY_INTERVALL="2")
    )
    assert shown.returncode == 0
    assert shown.stderr.strip() == (
        "warning: NANOBOT_SUMMARY_INTERVALL is not a setting of the summary worker and "
        "is ignored; did you mean NANOBOT_SUMMARY_INTERVAL?"
    )


# --- Redis: refused is not absent ---------------------------------------------------------------------------


@pytest.fixture
def locked_redis(tmp_path):
    server = RedisServer(
        tmp_path / "locked", ["requirepass right-password", "user limited on >limited-pw ~other:* +ping +exists"]
    ).start()
    yield server
    server.stop()


def test_redis_auth_acl_and_database_errors_are_one_line_never_a_dead_redis(
    nanobot_home, locked_redis, redis_url, capsys
) -> None:
    wrong = locked_redis.url(":wrong-password")
    cases = {
        wrong: "refused the credentials",
        locked_redis.url(): "wants a password",
        locked_redis.url("limited:limited-pw"): "may not reach this instance's keys",
        redis_url.rsplit("/", 1)[0] + "/99": "has no database 99",
    }
    for url, words in cases.items():
        env = process_env(nanobot_home, url, config=True)
        for args in (["status"], ["enqueue", "telegram:42"], ["run", "--burst"]):
            if args[0] == "enqueue":
                nanobot_home.write_session("telegram:42", conversation(3))
            result = run_in_process(capsys, *args, env=env)
            assert result.returncode == 2, (args, url, result.stderr)
            assert words in result.stderr, (args, url, result.stderr)
            assert "does not answer" not in result.stderr and "Traceback" not in result.stderr, result.stderr
            assert "embedded" not in result.stderr, "a busy port never gets an embedded Redis"
            assert "wrong-password" not in result.stderr and "limited-pw" not in result.stderr
            errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
            assert len(errors) == 1, result.stderr
    metrics = run_in_process(capsys, "status", "--prometheus", env=process_env(redis_url=wrong))
    assert metrics.returncode == 2 and "nanobot_summary_redis_up 0" in metrics.stdout


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_embedded_redis_folder_goes_on_every_exit(nanobot_home, signum, tmp_path) -> None:
    url = f"redis://:pw@127.0.0.1:{free_port()}/0"
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        process = forks.popen(
            [sys.executable, "-m", "worker", "run"],
            process_env(nanobot_home, url, config=True),
            cwd=ROOT,
            stdout=out,
            stderr=out,
        )
        try:
            deadline = time.monotonic() + 90
            while "Starting worker" not in log.read_text(errors="replace") and time.monotonic() < deadline:
                assert process.poll() is None, log.read_text(errors="replace")
                time.sleep(0.2)
            text = log.read_text(errors="replace")
            found = re.search(r"data in (\S+), removed on exit", text)
            assert found, text
            folder = Path(found.group(1))
            assert folder.is_dir() and (folder / "redis.conf").exists()
            process.send_signal(signum)
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
    assert not folder.exists(), log.read_text(errors="replace")


def wait_for_line(
    log: Path, process: subprocess.Popen[bytes] | forks.ForkedProcess, line: str, seconds: float = 90
) -> str:
    deadline = time.monotonic() + seconds
    while line not in (text := log.read_text(errors="replace")):
        assert process.poll() is None and time.monotonic() < deadline, text
        time.sleep(0.2)
    return text


def gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while Path(f"/proc/{pid}").exists() and b"zombie" not in Path(f"/proc/{pid}/status").read_bytes().lower():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_killed_worker_takes_its_embedded_redis_along_and_the_next_one_says_what_it_cleaned(
    nanobot_home, tmp_path, capsys
) -> None:
    """SIGKILL leaves the worker no time to stop its Redis: the server dies with it all the same (not reparented to
    init, serving stale data to the next worker); status and doctor name whose Redis it is while it runs; the next
    worker removes the folder the killed one left (its config holds the password) and says so."""
    url = f"redis://:pw@127.0.0.1:{free_port()}/0"
    env = process_env(nanobot_home, url, config=True, XDG_STATE_HOME=str(tmp_path / "state"))
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        process = forks.popen([sys.executable, "-m", "worker", "run"], env, cwd=ROOT, stdout=out, stderr=out)
        try:
            text = wait_for_line(log, process, "Starting worker")
            found = re.search(r"started an embedded redis-server there \(pid (\d+),.* data in (\S+), removed", text)
            assert found, text
            server, folder = int(found.group(1)), Path(found.group(2))
            status = run_in_process(capsys, "status", env=env)
            owner = f"that Redis is the embedded redis-server (pid {server}) of the worker pid {process.pid}"
            assert status.returncode == 0 and owner in status.stdout, status.stdout + status.stderr
            doctor = run_in_process(capsys, "doctor", env=env)
            assert (
                f"answers: it is the embedded redis-server (pid {server}) of the worker pid {process.pid}"
                in doctor.stdout
            ), doctor.stdout
            process.kill()
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
    assert gone(server), f"the embedded redis-server {server} outlived its killed worker"
    assert folder.is_dir(), "SIGKILL leaves the folder: the next worker removes it"
    after = forks.run([sys.executable, "-m", "worker", "--burst"], env, cwd=ROOT, timeout=120)
    assert after.returncode == 0, after.stderr
    assert f"removed the folder {folder} of the embedded Redis of the worker pid {process.pid}" in after.stderr, (
        after.stderr
    )
    assert not folder.exists()
    assert not list((tmp_path / "state" / "nanobot-summary").glob("embedded-redis-*.json")), "the burst's record went"


def test_an_orphaned_embedded_redis_is_named_then_stopped_by_the_next_worker(tmp_path, monkeypatch) -> None:
    """Where the kernel cannot stop it with its worker (no prctl), the record names it as an orphan, and the
    next worker stops it."""
    from worker.commands.embedded import adopt_orphan, embedded_owner, embedded_record, start_recorded

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    url = f"redis://127.0.0.1:{free_port()}/0"
    embedded = start_recorded(url)
    try:
        assert embedded_owner(url) is not None and f"of the worker pid {os.getpid()}" in (embedded_owner(url) or "")
        finished = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
        )
        record = embedded_record(url)
        gone_worker = finished.stdout.strip()
        record.write_text(record.read_text().replace(f'"worker": {os.getpid()}', f'"worker": {gone_worker}'))
        said = embedded_owner(url) or ""
        assert said.startswith(
            f"the embedded redis-server (pid {embedded.process.pid}) left by the worker pid "
            f"{finished.stdout.strip()}, which is gone"
        ), said
        done = adopt_orphan(url) or ""
        assert done.startswith(f"stopped the embedded redis-server (pid {embedded.process.pid})"), done
        assert embedded.process.wait(timeout=10) is not None and not embedded.directory.exists()
        assert embedded_owner(url) is None and not record.exists()
    finally:
        embedded.stop()


# --- the summary model ----------------------------------------------------------------------------------------


def test_nanobots_provider_names_route_where_nanobot_sends_them(nanobot_home, fake_llm, settings_for) -> None:
    deps = build_deps(settings_for(summary_model="custom/fake-model"))
    assert (deps.model.model, deps.model.api_base, deps.model.api_key) == ("openai/fake-model", fake_llm.url, "sk-fake")
    nanobot_home.write_config(fake_llm.url, provider="ollama", model="qwen3:8b")
    ollama = build_deps(settings_for()).model
    assert (ollama.model, ollama.api_base) == ("openai/qwen3:8b", "http://localhost:11434/v1")
    with pytest.raises(NanobotConfigError, match="signs in with OAuth.*NANOBOT_SUMMARY_MODEL=deepseek/deepseek-chat"):
        build_deps(settings_for(summary_model="openai_codex/gpt-5.1-codex"))
    with pytest.raises(NanobotConfigError, match="needs its base URL: set providers.vllm.apiBase"):
        build_deps(settings_for(summary_model="vllm/llama-3"))


async def test_a_custom_provider_model_summarizes_through_nanobots_endpoint(
    nanobot_home, fake_llm, redis, settings_for
) -> None:
    fake_llm.default = Reply(summary_json("made through the custom endpoint"))
    nanobot_home.write_session("telegram:42", conversation(15))
    deps = build_deps(settings_for(summary_model="custom/fake-model"))
    outcome = (await summarize_now(redis, deps, "telegram:42")).outcome
    assert outcome is not None and outcome.status == "summarized", outcome
    assert fake_llm.requests[-1].body["model"] == "fake-model"


async def test_a_refused_key_fails_at_once_with_the_fix(nanobot_home, fake_llm, redis, settings_for) -> None:
    fake_llm.default = Error(
        401, "Incorrect API key provided: sk-fake", code="invalid_api_key", type="invalid_request_error"
    )
    nanobot_home.write_session("telegram:42", conversation(15))
    outcome = (await summarize_now(redis, build_deps(settings_for()), "telegram:42")).outcome
    assert outcome is not None and outcome.status == "failed" and outcome.job_try == 1, outcome
    assert len(fake_llm.requests) == 1, "a refused key is not asked again"
    assert "refused the summary model's credentials" in outcome.detail and "not retried" in outcome.detail
    assert "providers.custom.apiKey" in outcome.detail and "nanobot-summary enqueue" in outcome.detail
    assert outcome.cooldown_until is not None


async def test_a_missing_key_is_said_at_start_and_never_retried(
    nanobot_home, fake_llm, redis, redis_url, settings_for, monkeypatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    nanobot_home.write_config(fake_llm.url, provider="auto", model="openai/gpt-4o-mini")
    started = cli("run", "--burst", env=process_env(nanobot_home, redis_url, config=True))
    assert started.returncode == 0, started.stderr
    warned = [line for line in started.stderr.splitlines() if "has no API key" in line]
    assert len(warned) == 1 and "OPENAI_API_KEY in the worker's environment" in warned[0], started.stderr
    nanobot_home.write_session("telegram:42", conversation(15))
    outcome = (await summarize_now(redis, build_deps(settings_for()), "telegram:42")).outcome
    assert outcome is not None and outcome.status == "failed" and outcome.job_try == 1, outcome
    assert "no API key" in outcome.detail and "not retried" in outcome.detail, outcome.detail
    assert fake_llm.requests == []


# --- the worker follows nanobot's config ------------------------------------------------------------------------


async def test_a_worker_started_before_nanobot_is_configured_follows_the_config(
    nanobot_home, fake_llm, redis, redis_url, tmp_path
) -> None:
    fake_llm.default = Reply(summary_json())
    nanobot_home.write_session("telegram:42", conversation(15))
    configured = nanobot_home.config_path.read_text()
    nanobot_home.config_path.unlink()  # the README starts the worker first
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        process = forks.popen(
            [sys.executable, "-m", "worker", "run", "--no-embedded-redis"],
            process_env(nanobot_home, redis_url, config=True),
            cwd=ROOT,
            stdout=out,
            stderr=out,
        )
        try:
            deadline = time.monotonic() + 90
            while "Starting worker" not in log.read_text(errors="replace") and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            assert "summary model deepseek/deepseek-chat (from default)" in log.read_text(errors="replace")
            nanobot_home.config_path.write_text(configured)  # nanobot is configured now
            for model in ("fake-model", "renamed-model"):
                if model == "renamed-model":
                    await asyncio.sleep(0.05)  # a new mtime
                    nanobot_home.write_config(fake_llm.url, model=model)
                    nanobot_home.write_session("telegram:42", conversation(25))  # more to cover
                fake_llm.clear()
                await redis.delete(TEST_KEYS.outcome("telegram:42"))
                assert await enqueue_summary(redis, SummarizeRequest(session_key="telegram:42"))
                assert fake_llm.wait_for_requests(1, timeout=60, raise_on_timeout=False), log.read_text(
                    errors="replace"
                )
                assert fake_llm.requests[0].body["model"] == model
                while await load_outcome(redis, "telegram:42") is None and time.monotonic() < deadline + 60:
                    await asyncio.sleep(0.1)
        finally:
            process.terminate()
            process.wait(timeout=30)
    text = log.read_text(errors="replace")
    assert re.search(
        r"nanobot config \S+ changed: summary model deepseek/deepseek-chat -> openai/fake-model "
        r"\(from nanobot config\); its API key changed; base URL none -> http",
        text,
    ), text
    assert "changed: summary model openai/fake-model -> openai/renamed-model (from nanobot config)" in text, text
    assert "sk-fake" not in text


# --- why nothing happened -------------------------------------------------------------------------------------


async def subscribed(redis, channel: str) -> bool:
    """Whether a client listens on `channel` (PUBSUB NUMSUB): a message published before that is lost."""
    counts = {
        name.decode() if isinstance(name, bytes) else name: count for name, count in await redis.pubsub_numsub(channel)
    }
    return counts.get(channel, 0) > 0


async def test_each_jobs_outcome_reaches_nanobots_log_once(
    nanobot_home, fake_llm, redis, redis_url, settings_for, caplog
) -> None:
    nanobot_home.write_session("telegram:42", conversation(3))
    keys: list[str] = []
    link = RedisLink(redis_url, logs.Throttle(), keys=TEST_KEYS)
    listener = asyncio.create_task(listen(link, keys.append))
    try:
        await wait_until(lambda: subscribed(redis, TEST_KEYS.outcome_channel), what="the listener's subscription")
        with caplog.at_level(logging.INFO, logger="nanobot_hooks"):
            await enqueue_summary(redis, SummarizeRequest(session_key="telegram:42", reason="interval"))
            await run_burst(build_deps(settings_for(summary_min_saving=0.05, summary_keep="messages:2")))
            deadline = time.monotonic() + 10
            while not any("telegram:42" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
        await link.close()
    lines = [r.getMessage() for r in caplog.records if "telegram:42" in r.getMessage()]
    assert len(lines) == 1, lines
    assert re.fullmatch(
        r"summary worker: skipped telegram:42: too little to summarize \(\d+ of 6,400 tokens "
        r"NANOBOT_SUMMARY_MIN_SAVING asks a summary to take out of the context\); no LLM calls",
        lines[0],
    ), lines
    assert keys == [], "an outcome is not a record to pick up"
    assert fake_llm.requests == []


def test_run_worker_refuses_an_old_python_before_any_install(tmp_path) -> None:
    old = tmp_path / "python3.10"
    old.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'Python 3.10.12'; exit 0; }\nexit 1\n")
    old.chmod(0o755)
    result = subprocess.run(
        [str(ROOT / "scripts" / "run-worker"), "--burst"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHON": str(old), "VENV": str(tmp_path / "venv")},
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: Python 3.10.12 is too old: Python 3.11 or later is needed (PYTHON=python3.12 scripts/run-worker)"
    )
    assert not (tmp_path / "venv").exists()


async def test_the_readmes_demo_setting_shows_the_automatic_trigger_fire_within_four_short_turns(
    nanobot_exe, agent_home, fake_llm, script, redis, redis_url, procfile_worker
) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "NANOBOT_SUMMARY_DEMO=true" in readme and "a terminal of its own" in readme
    # The tests' defaults keep messages:10 (a demo on them would cover nothing): the preset wins over them.
    worker = procfile_worker(NANOBOT_SUMMARY_DEMO="true")
    env = process_env(agent_home, redis_url, NANOBOT_SUMMARY_DEMO="true")
    key = "cli:direct"
    said = [
        f"turn {n}: plan day {n} in Kyoto in spring, temples in the morning and food in the evening"
        for n in range(1, 5)
    ]
    for text in said[:3]:
        await turn(nanobot_exe, agent_home, env, key, text)

    async def summarized() -> bool:
        outcome = await load_outcome(redis, key)
        return outcome is not None and outcome.status == "summarized"

    await wait_until(summarized, 90, "the third turn's summary\n" + worker.log()[-2000:])
    await turn(nanobot_exe, agent_home, env, key, said[3])
    request = chat_requests(fake_llm)[-1]
    assert ARCHIVED in system_text(request), "the fourth turn applied the summary"
    assert said[0] not in history_text(request) and said[2] in history_text(request), "the last exchange kept"
