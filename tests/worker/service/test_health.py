"""The containers' health check (`python -m worker.service.health`): healthy only while a worker of this instance
beats, answered from Redis without loading litellm or the worker's app (arq's own `--check` imports both)."""

from __future__ import annotations

import json
import subprocess
import sys

from arq.constants import health_check_key_suffix

from harness.defaults import TEST_KEYS
from harness.environment import process_env

# What the health check must never load: litellm alone takes seconds of CPU to import, longer than the check's
# timeout on a busy machine; the app and the model code pull it in.
HEAVY = ("litellm", "openai", "tiktoken", "worker.app", "worker.model", "worker.summarize", "worker.service.build")


def run_check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker.service.health"], env=env, capture_output=True, text=True, timeout=60
    )


def test_the_health_check_imports_nothing_heavy(nanobot_home, redis_url) -> None:
    """Its module and everything it imports, listed by the interpreter that ran it: no litellm, no worker app."""
    probe = (
        "import json, sys, runpy; sys.argv = ['health']\n"
        "try:\n    runpy.run_module('worker.service.health', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env=process_env(nanobot_home, redis_url, config=True),
    )
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"worker.settings", "nanobot_hooks.contract.client", "redis"} <= set(loaded), "the check ran"
    assert "unhealthy: no worker of queue" in done.stderr, done.stderr
    heavy = [name for name in loaded if name.startswith(HEAVY)]
    assert heavy == []


async def test_healthy_only_while_a_worker_beats(redis, nanobot_home, redis_url) -> None:
    env = process_env(nanobot_home, redis_url, config=True)
    silent = run_check(env)
    assert silent.returncode == 1
    assert f"no worker of queue {TEST_KEYS.queue} reported" in silent.stderr

    line = "Dec-07 04:30:00 j_complete=2 j_failed=0 j_retried=0 j_ongoing=0 queued=0 worker=host:42"
    await redis.psetex(TEST_KEYS.queue + health_check_key_suffix, 31_000, line)
    beating = run_check(env)
    assert beating.returncode == 0, beating.stderr
    assert beating.stdout.strip() == f"healthy: {line}"

    other = process_env(nanobot_home, redis_url, config=True, NANOBOT_SUMMARY_NAMESPACE="another")
    assert run_check(other).returncode == 1  # another instance's beat is not this one's


def test_a_silent_redis_or_a_missing_config_is_unhealthy_in_one_line(nanobot_home, tmp_path) -> None:
    down = run_check(process_env(nanobot_home, "redis://127.0.0.1:1/0", config=True))
    assert down.returncode == 1
    assert down.stderr.startswith("unhealthy: Redis at redis://127.0.0.1:1/0 does not answer")
    assert "Traceback" not in down.stderr

    missing = run_check(
        process_env(nanobot_home, "redis://127.0.0.1:1/0", NANOBOT_CONFIG=str(tmp_path / "nowhere" / "config.json"))
    )
    assert missing.returncode == 1
    assert missing.stderr.startswith("unhealthy: ") and "Traceback" not in missing.stderr
