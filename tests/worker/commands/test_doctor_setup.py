"""`nanobot-summary doctor` checks the set-up: a healthy one with a running worker (the command's real-process
test), each problem of a broken one with its fix, advice that follows NANOBOT_AUTO_SUMMARY, and each channel of the
sessions folder with whether it writes MEMORY.md. The running system's checks: tests/worker/commands/test_doctor.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from harness import forks
from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.fakellm import Reply
from harness.models import summary_json
from harness.redis_server import RedisServer
from harness.transcripts import conversation
from tests.support.commands import check, doctor, run_in_process
from tests.support.paths import ROOT
from tests.support.waiting import wait_until
from tests.support.workers import running_worker, summarize_now

KEY = "telegram:42"


async def test_doctors_advice_follows_automatic_summaries_being_off(
    nanobot_home, fake_llm, redis, redis_url, capsys
) -> None:
    on = (await doctor(capsys, nanobot_home, redis_url)).stdout  # the sandbox's nanobot: idle compaction and Dream off
    assert check(on, "nanobot's idle compaction is off")[0] == "ok" and check(on, "Dream is off")[0] == "ok"
    off = (await doctor(capsys, nanobot_home, redis_url, NANOBOT_AUTO_SUMMARY="false")).stdout
    assert check(off, "automatic summaries are off (NANOBOT_AUTO_SUMMARY=false)")[0] == "ok"
    level, line = check(off, "nothing summarizes idle sessions")
    assert level == "warn" and '"idleCompactAfterMinutes": 15' in line
    level, line = check(off, "only jobs queued by hand write memory/MEMORY.md")
    assert level == "warn" and '"dream": {"enabled": true}' in line
    nanobot_home.write_config(fake_llm.url, idleCompactAfterMinutes=15, dream={"enabled": True})
    own = (await doctor(capsys, nanobot_home, redis_url, NANOBOT_AUTO_SUMMARY="false")).stdout
    assert check(own, "nanobot's idle compaction is on (15 min): it summarizes idle sessions")[0] == "ok"
    assert check(own, "nanobot's Dream is on: it keeps memory/MEMORY.md")[0] == "ok"
    assert '"idleCompactAfterMinutes": 0' not in own and '"enabled": false' not in own, own
    assert "no health report in Redis\n" in own, "nanobot queues nothing: no alarm about it"


async def test_doctor_lists_each_channel_and_whether_it_writes_memory_with_the_setting_that_changes_it(
    nanobot_home, redis, redis_url, capsys
) -> None:
    for key in ("cli:direct", "telegram:42", "telegram:-100123", "websocket:0f3c9a", "dream:nightly"):
        nanobot_home.write_session(key, conversation(2))
    out = (await doctor(capsys, nanobot_home, redis_url)).stdout
    assert check(out, "cli: 1 session(s), each writes MEMORY.md (NANOBOT_MEMORY_SESSIONS=direct)")[0] == "ok"
    assert check(out, "telegram: 2 session(s), 1 of them write MEMORY.md")[0] == "ok"
    assert check(out, "websocket: 1 session(s), each writes MEMORY.md")[0] == "ok", "the web chat asks a token"
    config = json.loads(nanobot_home.config_path.read_text(encoding="utf-8"))
    config["channels"] = {"websocket": {"enabled": True, "websocketRequiresToken": False}}  # open to anyone
    nanobot_home.config_path.write_text(json.dumps(config), encoding="utf-8")
    out = (await doctor(capsys, nanobot_home, redis_url)).stdout
    level, line = check(out, "websocket: 1 session(s), none writes MEMORY.md")
    assert level == "warn" and "NANOBOT_MEMORY_SESSIONS=direct,websocket:* for nanobot and the worker" in line
    assert "dream" not in out, "nanobot's own sessions are no channel of the user's"
    trusted = (await doctor(capsys, nanobot_home, redis_url, NANOBOT_MEMORY_SESSIONS="direct,websocket:*")).stdout
    assert check(trusted, "websocket: 1 session(s), each writes MEMORY.md")[0] == "ok"


@pytest.mark.slow  # a worker process, nanobot's python or a pip run
async def test_doctor_passes_a_healthy_setup_with_a_running_worker(
    nanobot_home, fake_llm, redis, redis_url, deps_for
) -> None:
    nanobot_python = os.environ.get("NANOBOT_PYTHON")
    if not nanobot_python:
        pytest.skip("needs nanobot's environment (scripts/test makes it)")
    fake_llm.default = Reply(summary_json())
    nanobot_home.write_session(KEY, conversation(15))
    await summarize_now(redis, deps_for(), KEY)
    async with running_worker(deps_for()):  # doctor checks the running worker too
        await wait_until(lambda: redis.exists(f"{TEST_KEYS.queue}:health-check"), 60, "the worker's health report")
        healthy = await asyncio.to_thread(
            forks.run,
            [sys.executable, "-m", "worker", "doctor", "--nanobot-python", nanobot_python],
            process_env(nanobot_home, redis_url, config=True),
            cwd=ROOT,
            timeout=120,
        )
    print(healthy.stdout)  # an example for the docs and the report
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "FAIL" not in healthy.stdout and "warn" not in healthy.stdout and healthy.stdout.endswith("all good\n")
    for words in (
        "Python 3.",
        f"nanobot config {nanobot_home.config_path}",
        f"sessions in {nanobot_home.sessions_dir}",
        "summary model openai/fake-model (from nanobot config) at http",
        "a key from nanobot's config",
        "credentials and database accepted",
        "idle compaction is off",
        "Dream is off",
        "hooks 0.2.0 installed in nanobot 0.3.5's environment",
        "worker alive",
        "summarized telegram:42",
    ):
        assert words in healthy.stdout, (words, healthy.stdout)
    assert "sk-fake" not in healthy.stdout


@pytest.fixture
def locked_redis(tmp_path):
    server = RedisServer(tmp_path / "locked", ["requirepass right-password"]).start()
    yield server
    server.stop()


async def test_doctor_shows_each_problem_of_a_broken_setup_with_its_fix(
    locked_redis, tmp_path, monkeypatch, capsys
) -> None:
    # nanobot never ran with this workspace, its own compaction and Dream on, a model without a key, a Redis
    # refusing the password, a misspelled variable, and a Python without nanobot.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    broken_config = tmp_path / "broken" / "config.json"
    broken_config.parent.mkdir()
    broken_config.write_text(
        json.dumps(
            {
                "agents": {
                    "defaults": {
                        "workspace": str(tmp_path / "never-ran"),
                        "model": "openai/gpt-4o-mini",
                        "idleCompactAfterMinutes": 15,
                    }
                }
            }
        )
    )
    broken = await asyncio.to_thread(
        run_in_process,
        capsys,
        "doctor",
        "--nanobot-python",
        sys.executable,
        env=process_env(
            redis_url=locked_redis.url(":wrong-password"),
            NANOBOT_CONFIG=str(broken_config),
            NANOBOT_SUMMARY_INTERVALL="2",
        ),
    )
    assert broken.returncode == 1, broken.stdout + broken.stderr
    out = broken.stdout
    expected = [
        ("NANOBOT_SUMMARY_INTERVALL is not a setting", "did you mean NANOBOT_SUMMARY_INTERVAL?"),
        ("has nanobot run with this workspace?", "nanobot agent -m hello"),
        ("idle compaction is on (15 min)", '"idleCompactAfterMinutes": 0'),
        ("Dream is on", '"dream": {"enabled": false}'),
        (
            "summary model openai/gpt-4o-mini (from nanobot config): no API key",
            "OPENAI_API_KEY in the worker's environment",
        ),
        ("refused the credentials", "put the right user and password in REDIS_URL"),
        (f"{sys.executable} has no nanobot-ai", "--nanobot-python"),
    ]
    for problem, fix in expected:
        level, line = check(out, problem)
        assert level in ("FAIL", "warn") and fix in line and "fix:" in line, (problem, out)
    assert "wrong-password" not in out and out.rstrip().endswith("warning(s)")


async def test_doctor_says_a_read_only_memory_md_is_left_alone_and_how_many_facts_wait(
    nanobot_home, redis_url, capsys
) -> None:
    from worker.memory import longterm
    from worker.memory.entries import Fact

    path = nanobot_home.workspace / "memory" / "MEMORY.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# mine\n", encoding="utf-8")
    longterm.hold_facts(
        path,
        longterm.Batch([Fact(text="Remember: the NAS is in the basement", source="user")], "en", "2026-11-20", KEY),
        0.0,
    )
    assert "MEMORY.md is read-only" not in (await doctor(capsys, nanobot_home, redis_url)).stdout
    path.chmod(0o444)
    level, line = check((await doctor(capsys, nanobot_home, redis_url)).stdout, "MEMORY.md is read-only (mode 0444)")
    assert level == "warn" and "the worker leaves it alone; 1 fact(s) wait, held" in line
    assert f"fix: chmod u+w {path}" in line


@pytest.mark.slow  # a worker process, nanobot's python or a pip run
def test_doctor_in_the_checkout_suggests_the_command_as_it_runs_there(nanobot_home, redis_url, tmp_path) -> None:
    """Run as `.venv/bin/nanobot-summary doctor` with no `nanobot-summary` on PATH, its fixes name that path:
    `nanobot-summary hooks install ...` was not a command there."""
    import venv
    from pathlib import Path

    command = Path(sys.executable).parent / "nanobot-summary"
    if not command.exists():
        pytest.skip("needs the worker's venv with its console script (scripts/test makes it)")
    venv.EnvBuilder(with_pip=False).create(tmp_path / "bare")
    env = process_env(
        nanobot_home,
        redis_url,
        config=True,
        PATH="/usr/bin:/bin",
        NANOBOT_PYTHON=str(tmp_path / "bare" / "bin" / "python"),
    )
    here = command.parent.parent.parent  # the folder holding the venv: the checkout
    result = subprocess.run(
        [str(command.relative_to(here)), "doctor"], cwd=here, env=env, capture_output=True, text=True, timeout=120
    )
    level, line = check(result.stdout, "the hooks are not installed in nanobot's environment")
    shown = f"{command.relative_to(here)} hooks install --python {tmp_path / 'bare' / 'bin' / 'python'}"
    assert level == "FAIL" and f"fix: {shown}" in line, result.stdout
    assert "fix: nanobot-summary " not in result.stdout, result.stdout
