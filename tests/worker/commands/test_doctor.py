"""`nanobot-summary doctor` checks the running system: a worker that never ran, one killed mid-job (a real worker
process, SIGKILLed), one whose report tells a kill from a clean stop, a dead worker's job beside a live worker, and
a healthy one (real arq workers); a queue that does not move, jobs failed in the last hour, an evicting or full
Redis, summaries nanobot never applied. The set-up's checks: tests/worker/commands/test_doctor_setup.py."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time
import tomllib
from datetime import timedelta
from pathlib import Path

import pytest
from arq.constants import in_progress_key_prefix

from harness import forks
from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.fakellm import Hang, Reply
from harness.models import summary_json
from harness.redis_server import free_port
from harness.transcripts import conversation
from nanobot_hooks.contract.queue import enqueue_summary, store_record
from nanobot_hooks.contract.records import SummarizeRequest, SummaryRecord, utcnow
from nanobot_hooks.contract.version import CONTRACT, RELEASE
from tests.support.commands import check, doctor, run_in_process
from tests.support.paths import ROOT
from tests.support.waiting import wait_until
from tests.support.workers import running_worker, start_worker
from worker.service.arq_worker import SteadyWorker, worker_options
from worker.state import workers
from worker.state.outcomes import JobOutcome, keep_outcome

KEY = "telegram:42"
HEALTH = f"{TEST_KEYS.queue}:health-check"  # arq's health-check key of the tests' queue


async def kill_a_worker_mid_job(nanobot_home, fake_llm, redis, redis_url: str) -> None:
    """A real worker process, SIGKILLed while its job waits for the model: its job's mark stays, and arq's health
    key until it expires (at most 31 s: checked, then shortened, as if those seconds had passed)."""
    fake_llm.default = Hang(120)
    log = (nanobot_home.root / "worker.log").open("wb")
    worker = forks.popen(
        [sys.executable, "-m", "worker", "run"],
        process_env(nanobot_home, redis_url, config=True),
        cwd=ROOT,
        stdout=log,
        stderr=log,
    )
    try:
        await wait_until(lambda: redis.exists(HEALTH), 60, "the worker's health report")
        await enqueue_summary(redis, SummarizeRequest(session_key=KEY))
        await asyncio.to_thread(fake_llm.wait_for_requests, 1, 60)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(30)
        log.close()
    assert 0 < await redis.pttl(HEALTH) <= 31_000, "arq's health key expires by itself within 31 s"
    await redis.pexpire(HEALTH, 1)
    await wait_until(lambda: _gone(redis, HEALTH), 10, "the health key's expiry")
    assert await redis.exists(in_progress_key_prefix + TEST_KEYS.job_id(KEY)), "the killed job is still marked running"


@pytest.mark.slow  # worker processes
async def test_doctor_fails_at_once_after_a_kill_and_lists_the_killed_workers_job_as_status_does(
    nanobot_home, fake_llm, redis, redis_url, capsys
) -> None:
    """A second after `kill -9` arq's health key still says alive for up to 31 s: the killed worker's own report,
    published on this machine, says its process is gone, so doctor FAILs at once; and the job it left marked
    running is listed by doctor as status lists it, before and after the health key expires."""
    fake_llm.default = Hang(120)
    nanobot_home.write_session(KEY, conversation(15))
    # A child of this process, not a fork of a server (which would reap it at once): its zombie is what is tested.
    worker = await start_worker(nanobot_home, redis, redis_url, "worker.log", fork=False)
    try:
        await enqueue_summary(redis, SummarizeRequest(session_key=KEY))
        await asyncio.to_thread(fake_llm.wait_for_requests, 1, 60)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
    try:  # killed, not reaped yet (a zombie, its parent not having waited): its process has ended all the same
        [killed] = await workers.reports(redis)
        await wait_until(lambda: _state(worker.pid) == "Z", 30, "the killed worker's zombie")
        assert workers.process_gone(killed), "a zombie is a process that ended"
    finally:
        worker.wait(30)
    assert workers.process_gone(killed)
    [report] = json.loads(
        (
            await asyncio.to_thread(run_in_process, capsys, "status", "--json", env=process_env(redis_url=redis_url))
        ).stdout
    )["workers"]
    assert report["version"] == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"], report
    for moment in ("a second after the kill", "once arq's key expired"):
        if moment == "a second after the kill":  # as if its last beat were just now: arq's key lives 31 s more
            await just_beaten(redis, worker.pid)
        out = await doctor(capsys, nanobot_home, redis_url)
        assert out.returncode == 1, out.stdout
        level, line = check(out.stdout, "no worker alive")
        assert level == "FAIL" and f"({socket.gethostname()}:{worker.pid})" in line, (moment, out.stdout)
        assert "ended without stopping cleanly" in line and "ok    worker alive" not in out.stdout, out.stdout
        level, line = check(out.stdout, "marked running that no live worker runs")
        assert level == "FAIL" and f"({KEY})" in line and "run-worker" in line, (moment, line)
        if moment == "a second after the kill":
            await just_beaten(redis, worker.pid)
        text = (
            await asyncio.to_thread(
                run_in_process, capsys, "status", env=process_env(redis_url=redis_url, COLUMNS="300")
            )
        ).stdout
        assert "1 in flight (1 stale)" in text and "NOT RUNNING" in text, text
        await redis.pexpire(HEALTH, 1)
        await wait_until(lambda: _gone(redis, HEALTH), 10, "the health key's expiry")


def _state(pid: int) -> str:
    """A process's state letter, from /proc/<pid>/stat ("Z": a zombie)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


async def just_beaten(redis, pid: int) -> None:
    """The killed worker's last beat moved to now: its report's time and arq's health key (rewritten with its
    31 s to live), as they were a second after a kill, however long this machine took to get here."""
    key = TEST_KEYS.worker(f"{socket.gethostname()}:{pid}")
    report = json.loads(await redis.get(key))
    report["heartbeat_at"] = utcnow().isoformat()
    line = await redis.get(HEALTH) or (
        b"Nov-28 09:00:00 j_complete=0 j_failed=0 j_retried=0 j_ongoing=1 queued=0"
        b" worker=%s:%d" % (socket.gethostname().encode(), pid)
    )
    assert line.endswith(b" worker=%s:%d" % (socket.gethostname().encode(), pid)), line
    await redis.set(HEALTH, line, px=31_000)
    await redis.set(key, json.dumps(report), keepttl=True)


@pytest.mark.slow  # worker processes
async def test_the_worker_process_publishes_its_report_and_withdraws_it_when_stopped(
    nanobot_home, redis, redis_url
) -> None:
    """`nanobot-summary run` itself (SteadyWorker) reports the settings it runs with at its first beat, and a
    SIGTERM's clean stop leaves no report behind to age into an alarm."""
    log = (nanobot_home.root / "worker.log").open("wb")
    worker = forks.popen(
        [sys.executable, "-m", "worker", "run", "--no-embedded-redis"],
        process_env(nanobot_home, redis_url, config=True, NANOBOT_SUMMARY_KEEP="turns:2"),
        cwd=ROOT,
        stdout=log,
        stderr=log,
    )
    try:
        await wait_until(lambda: workers.reports(redis), 60, "the worker's report")
        [report] = await workers.reports(redis)
        assert report.pid == worker.pid and report.settings["summary_keep"] == "turns:2"
        raw = json.loads(await redis.get(TEST_KEYS.worker(report.worker_id)))
        assert raw["version"] == RELEASE and raw["contract"] == CONTRACT, "the versions the hooks compare theirs with"
        worker.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(worker.wait, 60) == 0
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        log.close()
    assert await workers.reports(redis) == [], "withdrawn at the clean stop"


@pytest.mark.slow  # worker processes
async def test_doctor_tells_a_worker_never_started_from_one_killed_mid_job_and_a_healthy_one(
    nanobot_home, fake_llm, redis, redis_url, deps_for, capsys
) -> None:
    nanobot_home.write_session(KEY, conversation(15))
    never = await doctor(capsys, nanobot_home, redis_url)
    assert never.returncode == 1
    level, line = check(never.stdout, f"no worker is running for namespace {TEST_KEYS.namespace}")
    assert level == "FAIL" and "nanobot queues jobs that nothing runs" in line and "scripts/run-worker" in line

    await kill_a_worker_mid_job(nanobot_home, fake_llm, redis, redis_url)
    killed = await doctor(capsys, nanobot_home, redis_url)
    assert killed.returncode == 1
    level, line = check(killed.stdout, "no worker alive")
    assert level == "FAIL" and "killed" in line and "see" in line and "log" in line, killed.stdout
    status = json.loads(
        (
            await asyncio.to_thread(run_in_process, capsys, "status", "--json", env=process_env(redis_url=redis_url))
        ).stdout
    )
    [job] = status["in_flight"]
    assert job["session"] == KEY and "no worker is alive" in job["stale"]

    # A healthy worker, once the killed job's marks expired: arq's in-progress mark and the session's run lock
    # (each lives a job's timeout), cleared here rather than waited out.
    await redis.delete(in_progress_key_prefix + TEST_KEYS.job_id(KEY), TEST_KEYS.running(KEY))
    fake_llm.default = Reply(summary_json())
    async with running_worker(deps_for()):
        await wait_until(lambda: redis.exists(HEALTH), 60, "the worker's health report")
        await wait_until(lambda: redis.exists(TEST_KEYS.outcome(KEY)), 60, "the job run again")
        healthy = await doctor(capsys, nanobot_home, redis_url)
    level, line = check(healthy.stdout, "worker alive")
    assert level == "ok" and "done" in line, healthy.stdout
    for words in ("queue moves", "no job failed in the last hour", "Redis memory"):
        assert check(healthy.stdout, words)[0] == "ok"
    assert "no worker" not in healthy.stdout


async def _gone(redis, key: str) -> bool:
    return not await redis.exists(key)


async def test_doctor_fails_on_a_stuck_queue_recent_failures_and_a_full_redis_and_warns_on_eviction_and_old_records(
    nanobot_home, redis, redis_url, capsys
) -> None:
    nanobot_home.write_session(KEY, conversation(3))
    await enqueue_summary(redis, SummarizeRequest(session_key=KEY))
    await redis.zadd(TEST_KEYS.queue, {TEST_KEYS.job_id(KEY): (utcnow().timestamp() - 3600) * 1000})  # an hour ago
    await keep_outcome(redis, JobOutcome(session_key="telegram:1", status="failed", detail="the key was refused"))
    await keep_outcome(
        redis,
        JobOutcome(
            session_key="telegram:2", status="failed", detail="timed out", finished_at=utcnow() - timedelta(hours=3)
        ),
    )
    await store_record(
        redis,
        SummaryRecord(
            session_key="telegram:3",
            summary="s",
            start=0,
            boundary=4,
            boundary_timestamp="t",
            messages_before=9,
            messages_after=6,
            tokens_before=900,
            tokens_after=300,
            created_at=utcnow() - timedelta(hours=2),
        ),
    )
    used = int((await redis.info("memory"))["used_memory"])
    try:
        await redis.config_set("maxmemory", str(used * 50))
        await redis.config_set("maxmemory-policy", "allkeys-lru")
        evicting = (await doctor(capsys, nanobot_home, redis_url)).stdout
        await redis.config_set("maxmemory-policy", "noeviction")
        await redis.config_set("maxmemory", str(int(used * 1.05)))
        full = (await doctor(capsys, nanobot_home, redis_url)).stdout
    finally:
        await redis.config_set("maxmemory", "0")
        await redis.config_set("maxmemory-policy", "noeviction")
    level, line = check(evicting, "Redis evicts keys when full")
    assert level == "warn" and "allkeys-lru" in line and "noeviction" in line
    assert check(full, "Redis memory nearly full")[0] == "FAIL"
    level, line = check(evicting, "the oldest job that is due has waited")
    assert level == "FAIL" and "run-worker" in line, line
    level, line = check(evicting, "failed telegram:1: the key was refused")
    assert level == "FAIL" and "enqueue --wait telegram:1" in line
    assert check(evicting, "failed telegram:2: timed out")[0] == "warn", "a failure hours ago is no alarm"
    level, line = check(evicting, "the summary of telegram:3 has waited 2.0h for nanobot")
    assert level == "warn" and "hooks" in line


async def test_a_workers_report_tells_one_killed_from_one_stopped_cleanly(
    nanobot_home, redis, redis_url, deps_for, capsys
) -> None:
    """The service's own Worker (SteadyWorker) publishes its report at each beat and withdraws it at a clean
    stop; status shows the settings it runs with."""
    deps = deps_for(auto_summary=False, summary_keep="tokens:123", memory_sessions="direct,web:*")
    # A beat every second: arq's health key then expires 2 s after the last one (31 s with the worker's 30).
    options = {
        **worker_options(deps.settings),
        "ctx": {"deps": deps},
        "poll_delay": 0.02,
        "handle_signals": False,
        "health_check_interval": 1,
    }
    for stop in ("kill", "clean"):
        worker = SteadyWorker(**options)
        task = asyncio.create_task(worker.async_run())
        try:
            await wait_until(lambda: workers.reports(redis), 60, "the worker's report")
            shown = json.loads(
                (
                    await asyncio.to_thread(
                        run_in_process, capsys, "status", "--json", env=process_env(redis_url=redis_url)
                    )
                ).stdout
            )
            assert shown["worker_settings"] == {
                **shown["worker_settings"],
                "auto_summary": False,
                "summary_keep": "tokens:123",
                "memory_sessions": "direct,web:*",
            }
            text = (
                await asyncio.to_thread(
                    run_in_process, capsys, "status", env=process_env(redis_url=redis_url, COLUMNS="300")
                )
            ).stdout
            assert (
                "running with: automatic summaries off; model " in text
                and "a summary keeps the last 123 tokens" in text
            ), text
            if stop == "kill":  # doctor's advice follows its own shell: it says when the worker's differs
                level, line = check((await doctor(capsys, nanobot_home, redis_url)).stdout, "the running worker has")
                assert level == "warn" and "automatic summaries off, this shell on" in line, line
        finally:
            task.cancel()  # the worker's loop ends where it is: a kill, unless close() follows
            await asyncio.gather(task, return_exceptions=True)
            if stop == "clean":
                await worker.close()
        await wait_until(lambda: _gone(redis, HEALTH), 10, "arq's health key's expiry")
        out = (await doctor(capsys, nanobot_home, redis_url)).stdout
        if stop == "kill":
            level, line = check(out, "no worker alive: the last one")
            assert level == "FAIL" and f"({socket.gethostname()}:{os.getpid()}) went silent" in line, out
            assert "without stopping cleanly (killed, or frozen)" in line
            metrics = (
                await asyncio.to_thread(
                    run_in_process, capsys, "status", "--prometheus", env=process_env(redis_url=redis_url)
                )
            ).stdout
            assert "\nnanobot_summary_dead_workers 1\n" in metrics and "\nnanobot_summary_worker_up 0\n" in metrics
            await worker.close()  # what is left of it, closed for the next round
        else:
            assert check(out, "no worker is running")[0] == "FAIL" and "went silent" not in out, out


async def test_a_job_its_dead_worker_left_marked_running_is_stale_while_another_worker_lives(
    nanobot_home, fake_llm, redis, redis_url, deps_for, capsys
) -> None:
    """A worker killed mid-job, another one alive: the job's mark stays until the job timeout + 10 s, and only the
    live workers' reports (the jobs each ran at its last beat) tell that none of them runs it."""
    fake_llm.default = Hang(120)
    nanobot_home.write_session(KEY, conversation(15))
    deps = deps_for()
    options = {
        **worker_options(deps.settings),
        "ctx": {"deps": deps},
        "poll_delay": 0.02,
        "handle_signals": False,
        "health_check_interval": 1,
    }
    dead, live = SteadyWorker(**options), SteadyWorker(**options)
    dead_task = asyncio.create_task(dead.async_run())
    live_task = None
    try:
        await enqueue_summary(redis, SummarizeRequest(session_key=KEY))
        await asyncio.to_thread(fake_llm.wait_for_requests, 1, 60)
        dead_task.cancel()  # its loop stops beating; its job still holds arq's mark, as a killed process's would
        await asyncio.gather(dead_task, return_exceptions=True)
        live_task = asyncio.create_task(live.async_run())

        async def stale() -> bool:
            shown = json.loads(
                (
                    await asyncio.to_thread(
                        run_in_process, capsys, "status", "--json", env=process_env(redis_url=redis_url)
                    )
                ).stdout
            )
            return shown["worker"] is not None and [job["stale"] for job in shown["in_flight"]] == [
                "no live worker runs it: its worker was killed or froze"
            ]

        await wait_until(stale, 30, "the dead worker's job marked stale")
        level, line = check((await doctor(capsys, nanobot_home, redis_url)).stdout, "marked running that no live")
        assert level == "warn" and f"({KEY})" in line and "runs them again within" in line
    finally:
        for worker, task in ((live, live_task), (dead, None)):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            await worker.close()


async def test_doctor_names_the_side_whose_shared_setting_differs_from_the_running_nanobots(
    nanobot_home, gateway, redis, redis_url, capsys
) -> None:
    """NANOBOT_AUTO_SUMMARY=false given to the worker but not to nanobot (the gateway kept queuing, the worker kept
    running them): the gateway's hooks publish the settings both sides act on, doctor compares them with the
    running worker's and names the side changed from the default, with where its setting goes for how it is run
    (a worker started from a terminal or a script has no /etc/nanobot-summary-worker.env)."""
    running = await gateway()
    worker = await start_worker(
        nanobot_home, redis, redis_url, "worker.log", NANOBOT_AUTO_SUMMARY="false", INVOCATION_ID=""
    )
    try:
        await wait_until(lambda: redis.keys(f"{TEST_KEYS.prefix}hooks:*"), 60, "the gateway's hooks' settings")
        [key] = await redis.keys(f"{TEST_KEYS.prefix}hooks:*")
        published = json.loads(await redis.get(key))
        out = (await doctor(capsys, nanobot_home, redis_url)).stdout
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(30)
    assert published["pid"] == running.process.pid and published["settings"]["auto_summary"] is True, published
    level, line = check(out, "NANOBOT_AUTO_SUMMARY differs")
    assert level == "FAIL" and "the worker runs with false" in line and f"{socket.gethostname()}:" in line, line
    assert "with true; the worker: changed from the default" in line, line
    assert "scripts/run-worker" in line and "/etc/" not in line, line
    for name in ("NANOBOT_SUMMARY_IDLE", "NANOBOT_MEMORY_SESSIONS", "NANOBOT_SUMMARY_CACHE_TTL"):
        assert f"{name} differs" not in out, out


def test_doctor_tells_a_worker_waiting_for_nanobots_first_turn_from_no_redis(nanobot_home, tmp_path, capsys) -> None:
    """Started before nanobot ever ran: the worker starts its Redis, then waits for the workspace's id; doctor says
    so (the worker's pid, what to do), and finds Redis answering, the embedded one of that worker."""
    (nanobot_home.workspace / ".nanobot" / "workspace-id").unlink()
    url = f"redis://127.0.0.1:{free_port()}/0"
    # No namespace set, as a user's: the worker waits for the id nanobot writes at its first run.
    env = process_env(
        nanobot_home,
        url,
        test_defaults=False,
        config=True,
        NANOBOT_SUMMARY_NICENESS="0",
        XDG_STATE_HOME=str(tmp_path / "state"),
    )
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = forks.popen([sys.executable, "-m", "worker", "run"], env, cwd=ROOT, stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + 90
            while "waiting for it" not in (text := log.read_text(errors="replace")):
                assert worker.poll() is None and time.monotonic() < deadline, text
                time.sleep(0.2)
            said = run_in_process(capsys, "doctor", env=env)
            level, line = check(said.stdout, f"the worker (pid {worker.pid}) runs and waits for nanobot's first turn")
            assert level == "warn" and "nanobot agent -m hello" in line, said.stdout
            level, line = check(said.stdout, "Redis ")
            assert level == "ok" and "the embedded redis-server" in line and f"worker pid {worker.pid}" in line, line
            assert "does not answer" not in said.stdout, said.stdout
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=60)
