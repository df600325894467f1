"""Several worker processes on one Redis: the work is shared, and no session is ever summarized by two at once; a
worker killed and restarted is replaced at once in doctor, status, the page and the metric, while a worker killed
for good is still reported."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from harness import forks
from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.fakellm import Reply
from harness.models import summary_json
from harness.transcripts import conversation
from nanobot_hooks.contract.queue import enqueue_summary, load_record
from nanobot_hooks.contract.records import SummarizeRequest
from tests.support.commands import check, doctor, run_in_process
from tests.support.paths import ROOT
from tests.support.web import served
from tests.support.workers import start_worker
from worker.state.outcomes import load_outcome

# Worker processes started as users start them: tests/conftest.py's SLOW_TIMEOUT.
pytestmark = pytest.mark.slow

ANSWER_SECONDS = 0.4  # each summary call stays in flight this long: two at once for one session would show


async def test_two_worker_processes_share_the_jobs_and_never_summarize_a_session_twice_at_once(
    nanobot_home, fake_llm, redis, redis_url, tmp_path
) -> None:
    fake_llm.default = Reply(summary_json(), delay=ANSWER_SECONDS)
    keys = [f"telegram:{n}" for n in range(8)]
    for n, key in enumerate(keys):
        nanobot_home.write_session(key, conversation(8, user=f"question {{i}} (session-{n}-tag) about the deploy"))
    env = process_env(nanobot_home, redis_url, config=True, NANOBOT_SUMMARY_KEEP="messages:4")
    logs = [tmp_path / f"worker-{n}.log" for n in range(2)]
    workers = []
    for log in logs:
        with log.open("wb") as out:
            workers.append(
                forks.popen([sys.executable, "-m", "worker"], env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
            )
    try:
        deadline = time.monotonic() + 90
        # Past start-up (its log line names the queue): both are polling when the first job is queued.
        while not all("; queue " in log.read_text(errors="replace") for log in logs):
            assert time.monotonic() < deadline, [log.read_text(errors="replace") for log in logs]
            assert all(w.poll() is None for w in workers), [log.read_text(errors="replace") for log in logs]
            await asyncio.sleep(0.2)
        # Each session is asked for again and again while its job waits and runs, as triggers in several
        # nanobot turns (and a manual enqueue) would. The first round spreads the sessions over several polls
        # (arq polls every 0.5 s and takes every job it finds), so that both workers take some.
        for round_ in range(6):
            for key in keys:
                await enqueue_summary(redis, SummarizeRequest(session_key=key, reason="manual"))
                await asyncio.sleep(0.3 if round_ == 0 else 0.02)
        for last in (False, True):  # every session's record stored, and no job queued or running any more
            while True:
                records = [await load_record(redis, key) for key in keys]
                if (
                    all(records)
                    and not await redis.zcard(TEST_KEYS.queue)
                    and not await redis.keys("arq:in-progress:*")
                ):
                    break
                assert time.monotonic() < deadline, [await load_outcome(redis, key) for key in keys]
                await asyncio.sleep(0.2)
            if not last:  # and asked once more after the summaries, as the next turns would: jobs that find it done
                for key in keys:
                    await enqueue_summary(redis, SummarizeRequest(session_key=key, reason="manual"))
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=30)
    calls: dict[str, list[float]] = {}
    for request in fake_llm.requests:
        found = re.search(r"\(session-(\d+)-tag\)", request.raw.decode("utf-8", errors="replace"))
        assert found, request.raw[:200]
        calls.setdefault(keys[int(found.group(1))], []).append(request.received_at)
    for key, times in calls.items():
        times.sort()
        assert all(b - a >= ANSWER_SECONDS for a, b in zip(times, times[1:], strict=False)), (
            f"{key}: two calls at once {times}"
        )
    assert sorted(calls) == sorted(keys) and all(len(times) == 1 for times in calls.values()), (
        "every session summarized once: a later job finds the range covered"
    )
    texts = [log.read_text(errors="replace") for log in logs]
    summarized = [text.count("summarized telegram:") for text in texts]
    assert sum(summarized) == len(keys), f"each session summarized once over both processes: {summarized}"
    # Which process takes which job is arq's polling, not ours: one may well take every first job (a poll
    # takes all it finds). Both polled the one queue, and the later askings found the sessions covered.
    taken = [len(re.findall(r"\] (?:summarized|noop) telegram:", text)) for text in texts]
    assert sum(taken) > len(keys), f"the askings after the first summaries became jobs too: {taken}"


async def _seen(capsys, nanobot_home, redis_url: str, settings_for) -> dict[str, str]:
    """What doctor, status (text and metrics) and the web page's overview say now."""
    env = process_env(redis_url=redis_url, COLUMNS="300")
    seen = {"doctor": (await doctor(capsys, nanobot_home, redis_url)).stdout}
    for name, argv in (("status", ()), ("metrics", ("--prometheus",)), ("json", ("--json",))):
        seen[name] = (await asyncio.to_thread(run_in_process, capsys, "status", *argv, env=env)).stdout
    async with served(settings_for()) as page:
        seen["page"] = (await page.get("/"))[1]
    return seen


def _kill(worker: subprocess.Popen[bytes] | forks.ForkedProcess) -> None:
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(30)


async def test_a_restarted_worker_replaces_the_one_killed_before_it_and_one_killed_for_good_is_still_reported(
    nanobot_home, redis, redis_url, settings_for, capsys
) -> None:
    host = socket.gethostname()
    first = await start_worker(nanobot_home, redis, redis_url, "first.log")
    _kill(first)
    # As 19 minutes later: its report still there (it lives a day), long past its last beat.
    key = TEST_KEYS.worker(f"{host}:{first.pid}")
    old = json.loads(await redis.get(key))
    old["heartbeat_at"] = old["started_at"] = "2020-01-01T00:00:00+00:00"
    await redis.set(key, json.dumps(old), keepttl=True)
    second = await start_worker(nanobot_home, redis, redis_url, "second.log")
    try:
        seen = await _seen(capsys, nanobot_home, redis_url, settings_for)
    finally:
        _kill(second)
    assert check(seen["doctor"], "worker alive")[0] == "ok", seen["doctor"]
    assert "went silent" not in seen["doctor"] and "without stopping cleanly" not in seen["doctor"], seen["doctor"]
    assert "STALE" not in seen["status"] and "\nnanobot_summary_dead_workers 0\n" in seen["metrics"], seen
    assert "silent: killed or frozen?" not in seen["page"] and f"replaced by {host}:{second.pid}" in seen["page"]
    replaced = {r["pid"]: r for r in json.loads(seen["json"])["workers"]}
    assert replaced[first.pid]["superseded_by"] == f"{host}:{second.pid}" and not replaced[first.pid]["dead"]

    # The second one killed too, and nothing restarted: one worker gone for good, reported everywhere.
    gone = await _seen(capsys, nanobot_home, redis_url, settings_for)
    level, line = check(gone["doctor"], "no worker alive: the last one")
    assert level == "FAIL" and f"({host}:{second.pid}) ended without stopping cleanly" in line, gone["doctor"]
    assert f"worker {host}:{second.pid}: STALE" in gone["status"] and f"{host}:{first.pid}: STALE" not in gone["status"]
    assert "\nnanobot_summary_dead_workers 1\n" in gone["metrics"], gone["metrics"]
    assert gone["page"].count("silent: killed or frozen?") == 1, gone["page"]
