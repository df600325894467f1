"""The commands users type: the worker's run command (embedded Redis, bad settings) and nanobot-summary enqueue.

Most run in the test's own process (`command`), as the same `main` the console script calls; one test per
command keeps the real process, so the entry point itself stays tested. The other test files use `command`
and `running_worker` from here too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from arq.worker import Worker

from nanobot_hooks.queue import load_record
from worker.service.arq_worker import worker_options
from worker.service.logs import PAYLOAD_LOGGERS
from worker.commands import cli
from worker.state.outcomes import load_outcome
from worker.summarize.deps import Deps
from tests.support.fakellm import Reply

from .conftest import TEST_KEYS, conversation, summary_json

ROOT = Path(__file__).resolve().parent.parent


def command(capsys: pytest.CaptureFixture[str], *argv: str,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`nanobot-summary ARGV` in this process, seen as a subprocess would see it: `env` (when given) is the
    whole environment, stdout and stderr are captured, argparse's exit is the exit code. Call it through
    asyncio.to_thread from a test with a running loop (the commands start their own). The worker's `run`
    would raise this process's niceness for good: that one step is left out here, the real-process tests
    of `run` check it."""
    capsys.readouterr()  # what came before is not this command's output
    # Log lines reach stderr as in the command's own process: the worker's (INFO and up, its basicConfig
    # finds pytest's handlers and leaves them) or Python's last resort (WARNING and up) for the others.
    runs_worker = not argv or argv[0] == "run" or (argv[0].startswith("-") and argv[0] not in ("-h", "--help"))
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.INFO if runs_worker else logging.WARNING)
    root = logging.getLogger()
    # `run` sets levels and adds its redacting filter to every handler there is (pytest's too): undone after,
    # so the next tests see logging as they would have.
    loggers = [root, *(logging.getLogger(name) for name in PAYLOAD_LOGGERS)]
    levels = {logger: logger.level for logger in loggers}
    filters = {h: list(h.filters) for logger in loggers for h in logger.handlers}
    root.addHandler(handler)
    root.setLevel(min(root.level, handler.level))
    try:
        with mock.patch.dict(os.environ, env or {}, clear=env is not None), \
                mock.patch("worker.service.command.lower_priority", return_value=0):
            try:
                code = cli.main(list(argv))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        root.removeHandler(handler)
        for logger, level in levels.items():
            logger.setLevel(level)
        for h, kept in filters.items():
            h.filters[:] = kept
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["nanobot-summary", *argv], code, out.out, out.err)


@contextlib.asynccontextmanager
async def running_worker(deps: Deps, **overrides: Any) -> AsyncIterator[Worker]:
    """A real arq worker in this process, polling until the block ends (`run_burst` stops at an empty queue)."""
    options = {**worker_options(deps.settings), "ctx": {"deps": deps}, "poll_delay": 0.02,
               "handle_signals": False, **overrides}
    worker = Worker(**options)
    task = asyncio.create_task(worker.async_run())
    try:
        yield worker
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await worker.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout)


def test_worker_starts_an_embedded_redis_when_none_answers(nanobot_home) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = run([sys.executable, "-m", "worker", "--burst"],
                 {"REDIS_URL": url, "NANOBOT_CONFIG": str(nanobot_home.config_path)})
    assert result.returncode == 0, result.stderr
    assert "started an embedded redis-server" in result.stderr
    assert "summary model openai/fake-model (from nanobot config)" in result.stderr


def test_worker_refuses_a_bad_setting_in_one_line(nanobot_home, capsys) -> None:
    result = command(capsys, "--burst", env={**os.environ, "NANOBOT_SUMMARY_KEEP": "lots",
                                             "NANOBOT_CONFIG": str(nanobot_home.config_path)})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "NANOBOT_SUMMARY_KEEP='lots'" in lines[0] and "messages:N" in lines[0]


def _env(nanobot_home, redis_url: str, **extra: str) -> dict[str, str]:
    """The whole environment: this process's, with nanobot's config and the test's Redis."""
    return {**os.environ, "REDIS_URL": redis_url, "NANOBOT_CONFIG": str(nanobot_home.config_path), **extra}


def test_dry_run_prints_the_planned_cut_without_calling_the_llm(nanobot_home, fake_llm, redis_url, capsys) -> None:
    nanobot_home.write_session("telegram:42", conversation(15))
    result = command(capsys, "enqueue", "--dry-run", "telegram:42", env=_env(nanobot_home, redis_url))
    assert result.returncode == 0, result.stderr
    assert "would cover messages 0..19 (20 of 20 messages" in result.stdout
    assert "would keep messages 20..29 (10 messages" in result.stdout
    assert fake_llm.requests == []


def test_unknown_malformed_key_and_dead_redis_fail_with_one_line(nanobot_home, redis_url, capsys) -> None:
    nanobot_home.write_session("telegram:42", conversation(3))
    env = _env(nanobot_home, redis_url)
    unknown = command(capsys, "enqueue", "telegram:43", env=env)
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1
    assert "no session 'telegram:43'" in unknown.stderr and "telegram:42" in unknown.stderr
    malformed = command(capsys, "enqueue", "bad\tkey", env=env)
    assert malformed.returncode == 2 and "malformed session key" in malformed.stderr
    dead = command(capsys, "enqueue", "telegram:42", env=_env(nanobot_home, f"redis://127.0.0.1:{free_port()}/0"))
    assert dead.returncode == 2 and "does not answer" in dead.stderr and dead.stderr.count("\n") == 1
    assert command(capsys, "enqueue", env=env).returncode == 2
    internal = command(capsys, "enqueue", "heartbeat", env=env)
    assert internal.returncode == 2 and "nanobot's own sessions" in internal.stderr


def test_all_skips_nanobots_internal_sessions(nanobot_home, fake_llm, redis_url, capsys) -> None:
    for key in ("telegram:42", "cron:nightly", "dream:x"):
        nanobot_home.write_session(key, conversation(15))
    result = command(capsys, "enqueue", "--all", "--dry-run", env=_env(nanobot_home, redis_url))
    assert result.returncode == 0, result.stderr
    assert "telegram:42:" in result.stdout and "cron:" not in result.stdout and "dream:" not in result.stdout


async def test_enqueue_wait_reports_the_outcome_from_a_real_worker(nanobot_home, fake_llm, redis, redis_url,
                                                                  deps_for) -> None:
    fake_llm.default = Reply(summary_json("done by the worker"))
    nanobot_home.write_session("telegram:42", conversation(15))
    # The command in its own process (its one real-process test), the worker in this one.
    async with running_worker(deps_for()):
        result = await asyncio.to_thread(
            run, [sys.executable, "-m", "worker", "enqueue", "--wait", "--timeout", "60", "telegram:42"],
            _env(nanobot_home, redis_url))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "telegram:42: queued" in result.stdout
    assert "summarized telegram:42: messages 0..19" in result.stdout
    record = await load_record(redis, "telegram:42")
    assert record is not None and record.summary == "done by the worker"
    outcome = await load_outcome(redis, "telegram:42")
    assert outcome is not None and outcome.boundary == 20


async def test_status_shows_pending_records_and_outcomes(nanobot_home, fake_llm, redis, redis_url, deps_for,
                                                         capsys) -> None:
    from nanobot_hooks.contract import SummarizeRequest
    from nanobot_hooks.queue import enqueue_summary

    from .conftest import run_burst

    fake_llm.default = Reply(summary_json())
    nanobot_home.write_session("telegram:42", conversation(15))
    nanobot_home.write_session("cli:direct", conversation(2))
    for key in ("telegram:42", "cli:direct"):
        await enqueue_summary(redis, SummarizeRequest(session_key=key))
    await run_burst(deps_for())
    result = await asyncio.to_thread(command, capsys, "status",
                                     env={**os.environ, "REDIS_URL": redis_url, "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    pending = result.stdout.split("records waiting")[1].split("last job per session")[0]
    assert "telegram:42" in pending and "0..19" in pending and "cli:direct" not in pending
    outcomes = result.stdout.split("last job per session")[1]
    assert "summarized" in outcomes and "noop" in outcomes
    dead = await asyncio.to_thread(command, capsys, "status",
                                   env={**os.environ, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})
    assert dead.returncode == 2 and "does not answer" in dead.stderr


def test_reload_restarts_the_worker_when_a_module_changes(nanobot_home, redis_url, tmp_path) -> None:
    import time

    log = tmp_path / "reload.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "worker", "--reload"], cwd=ROOT, stdout=out, stderr=out,
                                   env={**os.environ, "REDIS_URL": redis_url,
                                        "NANOBOT_CONFIG": str(nanobot_home.config_path)})
        try:
            def starts() -> int:
                return log.read_text(errors="replace").count("Starting worker")

            deadline = time.monotonic() + 60
            while starts() < 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert starts() == 1, log.read_text(errors="replace")
            # a new, untracked module appears and goes: no tracked file is touched
            probe = ROOT / "worker" / f"_reload_probe_{os.getpid()}.py"
            probe.write_text('"""Written by a test of --reload; removed at once."""\n')
            deadline = time.monotonic() + 60  # the restart imports everything again: a wait of its own
            try:
                while starts() < 2 and time.monotonic() < deadline:
                    time.sleep(0.2)
            finally:
                probe.unlink(missing_ok=True)
            assert starts() >= 2, log.read_text(errors="replace")
        finally:
            process.terminate()
            process.wait(timeout=30)


async def test_since_flags_the_sessions_for_a_catch_up_of_their_notes(nanobot_home, redis, redis_url, capsys) -> None:
    nanobot_home.write_session("telegram:42", conversation(3))
    result = await asyncio.to_thread(command, capsys, "enqueue", "--since", "2026-11-01", "telegram:42",
                                     env=_env(nanobot_home, redis_url))
    assert result.returncode == 0, result.stderr
    assert "telegram:42: queued, notes since 2026-11-01" in result.stdout
    assert await redis.get(TEST_KEYS.daily_flag("telegram:42")) in (b"2026-11-01", "2026-11-01")
    assert await redis.zcard(TEST_KEYS.queue) == 1
    bad = await asyncio.to_thread(command, capsys, "enqueue", "--since", "yesterday", "telegram:42",
                                  env=_env(nanobot_home, redis_url))
    assert bad.returncode == 2 and "is not a date like 2026-11-01" in bad.stderr
