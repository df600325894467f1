"""scripts/enqueue, the design card's manual enqueue script beside scripts/run-worker: from any folder it queues a
session's job into the Redis the worker reads, through the checkout's environment, which it makes as run-worker does
(and refuses as run-worker refuses)."""

from __future__ import annotations

import asyncio
import os
import subprocess

from harness.environment import process_env
from harness.transcripts import conversation
from tests.support.paths import ROOT
from tests.support.queue_probes import queued_jobs, queued_reason

ENQUEUE = ROOT / "scripts" / "enqueue"


async def test_the_script_queues_a_sessions_job_from_any_folder(nanobot_home, redis, redis_url, tmp_path) -> None:
    nanobot_home.write_session("telegram:42", conversation(6))
    env = process_env(nanobot_home, redis_url, config=True)
    assert await queued_jobs(redis) == 0
    done = await asyncio.to_thread(
        subprocess.run,
        [str(ENQUEUE), "telegram:42"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "telegram:42" in done.stdout, done.stdout
    assert await queued_jobs(redis) == 1 and await queued_reason(redis, "telegram:42") == "manual", (
        "one job, queued by hand, for the worker to run"
    )


def test_the_script_passes_its_arguments_to_the_command() -> None:
    done = subprocess.run(
        [str(ENQUEUE), "--help"], capture_output=True, text=True, timeout=120, env=process_env(test_defaults=False)
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: nanobot-summary enqueue"), done.stdout[:300]


def test_the_script_makes_its_environment_as_run_worker_does_and_refuses_an_old_python(tmp_path) -> None:
    """The environment's checks are run-worker's own: an old Python is refused before any install."""
    old = tmp_path / "python3.10"
    old.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'Python 3.10.12'; exit 0; }\nexit 1\n")
    old.chmod(0o755)
    done = subprocess.run(
        [str(ENQUEUE), "telegram:42"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHON": str(old), "VENV": str(tmp_path / "venv")},
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Python 3.10.12 is too old" in done.stderr and done.stdout == ""
    assert not (tmp_path / "venv").exists()
