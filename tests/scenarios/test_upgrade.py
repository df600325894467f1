"""An upgrade from the previous release (0.1.0, built from its git tag) on one Redis: its worker and its hooks' code
leave records waiting and jobs queued (pickled, as 0.1.0 queued them), then this release's worker and hooks take
over, and each pairing of hooks and worker runs for a while. No record lost, none applied twice, no crash."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.transcripts import conversation
from nanobot_hooks.contract.queue import enqueue_summary, load_waiting_record, pending_sessions
from nanobot_hooks.contract.records import SummarizeRequest, SummaryRecord, record_key
from tests.support.paths import ROOT
from tests.support.workers import run_burst
from worker.state.outcomes import load_outcome

PREVIOUS = os.environ.get("NANOBOT_SUMMARY_PREVIOUS_RELEASE", "v0.1.0")
# The commit tagged v0.1.0, for a clone that fetched main's history without its tags.
PREVIOUS_COMMIT = "e752fe6"

# What the previous release's code does, run by its own Python with only its archive on the path (0.1.0 ran from a
# checkout: the hooks at nanobot_hooks/, the worker at worker/), in this suite's venv (the same dependencies).
DRIVER = """
import asyncio, json, sys
import nanobot_hooks, worker
assert nanobot_hooks.__file__.startswith(sys.argv[1]) and worker.__file__.startswith(sys.argv[1]), "not the old code"
from arq.connections import ArqRedis
from nanobot_hooks.contract import SummarizeRequest, enqueue_summary, load_record_or_drop
from worker.settings import Settings

async def main(steps):
    settings = Settings()  # the tests' namespace is named in the environment: the keys need no workspace
    redis = ArqRedis.from_url(settings.redis_url)  # arq's defaults, as 0.1.0's hooks made it: jobs pickled
    redis.default_queue_name = settings.keys.queue
    try:
        for step in steps:
            command, _, keys = step.partition("=")
            await one(settings, redis, command, keys.split(",") if keys else [])
    finally:
        await redis.aclose()

async def one(settings, redis, command, keys):
        if command == "enqueue":  # what 0.1.0's hooks queue at a turn over the threshold
            print(json.dumps([await enqueue_summary(redis, SummarizeRequest(session_key=k, reason="tokens"))
                              is not None for k in keys]))
        elif command == "burst":  # 0.1.0's real arq worker, until its queue is empty (litellm loaded only here)
            from worker.service.build import build_deps
            from tests.support.workers import run_burst
            await run_burst(build_deps(settings))
            print(json.dumps([]))
        elif command == "read":  # what 0.1.0's hooks make of each waiting record
            found = []
            for k in keys:
                record = await load_record_or_drop(redis, k)
                found.append(record if isinstance(record, str) or record is None else record.model_dump(mode="json"))
            print(json.dumps(found))

asyncio.run(main(sys.argv[2:]))
"""


def previous_release(tmp_path: Path) -> Path:
    """The previous release's files, from `git archive` of its tag; skipped where the tag is not there."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the previous release is built from its tag")
    for name in (PREVIOUS, PREVIOUS_COMMIT):
        rev = subprocess.run(
            ["git", "rev-parse", "--verify", "-q", f"{name}^{{commit}}"], cwd=ROOT, capture_output=True, text=True
        )
        if rev.returncode == 0:
            break
    else:
        pytest.skip(f"neither git tag {PREVIOUS} nor its commit {PREVIOUS_COMMIT} is here (a shallow clone?)")
    archive = subprocess.run(["git", "archive", rev.stdout.strip()], cwd=ROOT, capture_output=True, check=True)
    old = tmp_path / "previous"
    old.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(old, filter="data")
    (old / "driver.py").write_text(DRIVER, encoding="utf-8")
    return old


def old(release: Path, env: dict[str, str], *steps: str) -> list:
    """Steps of the previous release's code (`enqueue=KEY,KEY`, `burst`, `read=KEY,KEY`) in one process of its own,
    each step's answer in a list; its crash fails the test."""
    done = subprocess.run(
        [sys.executable, str(release / "driver.py"), str(release), *steps],
        cwd=release,
        env={**env, "PYTHONPATH": str(release)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"0.1.0's {steps} crashed:\n{done.stderr[-3000:]}"
    with (release / "previous.log").open("a") as log:  # its own lines, for a failing test's reader
        log.write(done.stderr)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]


@pytest.mark.older_release_markers  # 0.2.0 marked spans noted without notes (issue 42)
async def test_an_upgrade_from_the_previous_release_loses_no_record_and_applies_none_twice(
    nanobot_home, default_reply, redis, redis_url, deps_for, tmp_path, caplog
) -> None:
    release = previous_release(tmp_path)
    env = process_env(nanobot_home, redis_url, config=True)
    waiting, queued, later = "telegram:1", "telegram:2", "telegram:3"
    for key in (waiting, queued, later):
        nanobot_home.write_session(key, conversation(15))
    deps = deps_for()

    # 0.1.0 alone: its hooks queue a job, its worker summarizes: a record waits for nanobot's pickup.
    assert old(release, env, f"enqueue={waiting}", "burst")[0] == [True]
    made_by_old = await load_waiting_record(redis, waiting)
    assert isinstance(made_by_old, SummaryRecord), made_by_old
    assert made_by_old.authentic(record_key(nanobot_home.sessions_dir)), "0.1.0 signed it as this release does"
    # Its hooks queue another job (pickled), and the worker is upgraded before it runs.
    assert old(release, env, f"enqueue={queued}") == [[True]]

    # This release's worker: the pickled job ends unread in one line, the waiting record stays as it was.
    await run_burst(deps)
    assert await load_waiting_record(redis, waiting) == made_by_old, "0.1.0's record is still there, unchanged"
    unread = [r.getMessage() for r in caplog.records if "ended unread" in r.getMessage()]
    assert len(unread) == 1 and unread[0].startswith(f"{queued}:"), caplog.text
    assert await load_outcome(redis, queued) is None, "nothing ran for the pickled job"
    # ... and the session's next trigger (this release's hooks, or 0.1.0's once more) queues it again: its id is free.
    assert await enqueue_summary(redis, SummarizeRequest(session_key=queued, reason="tokens"))
    await run_burst(deps)
    assert (await load_outcome(redis, queued)).status == "summarized"

    # 0.1.0's hooks beside this release's worker: they read its records, and their pickled jobs end unread.
    read, queued_by_old = old(release, env, f"read={waiting},{queued}", f"enqueue={later}")
    assert [r["boundary"] for r in read] == [made_by_old.boundary, (await load_waiting_record(redis, queued)).boundary]
    assert await redis.exists(TEST_KEYS.record(waiting)) and await redis.exists(TEST_KEYS.record(queued))
    assert queued_by_old == [True]
    await run_burst(deps)
    assert await load_outcome(redis, later) is None

    # This release's hooks beside 0.1.0's worker (a downgrade, or the worker not yet upgraded): a JSON job is failed
    # by it, not run, and frees its id; no record is touched, the old worker does not crash.
    assert await enqueue_summary(redis, SummarizeRequest(session_key=later, reason="tokens"))
    old(release, env, "burst")
    assert "deserializing job" in (release / "previous.log").read_text(), "0.1.0's worker refused the JSON job"
    assert await load_outcome(redis, later) is None and await pending_sessions(redis) == sorted([waiting, queued])

    # Both upgraded: the session left behind is summarized at its next trigger; each record waits exactly once.
    assert await enqueue_summary(redis, SummarizeRequest(session_key=later, reason="tokens"))
    await run_burst(deps)
    assert (await load_outcome(redis, later)).status == "summarized"
    assert await pending_sessions(redis) == sorted([waiting, queued, later])
    assert await load_waiting_record(redis, waiting) == made_by_old, "0.1.0's record was never summarized over"
