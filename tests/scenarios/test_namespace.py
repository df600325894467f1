"""One Redis database, many nanobot instances: every key and the queue carry the instance's namespace, the
hooks and the worker of one instance derive the same one from nanobot's workspace id, and nothing crosses."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from harness import forks
from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.fakellm import FakeRequest, Reply
from harness.models import BIG_PROMPT, summary_json
from harness.nanobot_cli import turn
from harness.sandbox import NanobotHome, session_lines
from harness.transcripts import conversation
from nanobot_hooks import logs
from nanobot_hooks.contract.keys import JOB_DAILY, KEY_PREFIX, Keys, default_namespace
from nanobot_hooks.contract.queue import enqueue_idle_check, enqueue_summary, load_record
from nanobot_hooks.contract.records import SummarizeRequest
from nanobot_hooks.link import RedisLink
from nanobot_hooks.settings import HookSettings, SettingsError
from tests.support.bench import load_bench
from tests.support.paths import ROOT
from tests.support.workers import run_burst, running_worker
from worker.connections import queue_client
from worker.service.arq_worker import worker_options
from worker.service.build import build_deps
from worker.settings import Settings
from worker.state.outcomes import load_outcome

# Real worker processes (the Procfile's and arq's own), twenty instances on one Redis: tests/conftest.py's SLOW_TIMEOUT.
pytestmark = pytest.mark.slow

HOMES = 20
KEY = "telegram:42"  # the same session key in every instance: the case a shared database must keep apart


def workspace_id(home: NanobotHome) -> str:
    return (home.workspace / ".nanobot" / "workspace-id").read_text(encoding="utf-8").strip()


def test_every_name_carries_the_namespace_and_a_client_of_none_is_refused() -> None:
    keys = Keys("a1b2c3d4e5f6")
    names = [
        keys.queue,
        keys.notice_channel,
        keys.pending,
        keys.stats,
        keys.job_id(KEY),
        keys.record(KEY),
        keys.daily_flag(KEY),
        keys.rest(KEY),
        keys.spend("total"),
        keys.failures(KEY),
        keys.progress(KEY),
        keys.outcome(KEY),
        keys.cron(JOB_DAILY),
    ]
    assert all(name.startswith("nanobot-summary:a1b2c3d4e5f6:") for name in names)
    assert len(set(names)) == len(names)
    assert keys.session_of_job(keys.job_id(KEY)) == KEY and Keys("other").session_of_job(keys.job_id(KEY)) is None
    with pytest.raises(ValueError, match="not bound to a namespace"):
        Keys.of(object())
    for bad in ("", "a:b", "-x", "x" * 65, "a b", "{tag}"):
        with pytest.raises(ValueError):
            Keys(bad)


def test_the_namespace_comes_from_nanobots_workspace_id_unless_set(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("NANOBOT_SUMMARY_NAMESPACE", raising=False)
    workspace = tmp_path / "workspace"
    with pytest.raises(SettingsError, match="start nanobot once"):
        HookSettings().for_workspace(workspace)
    (workspace / ".nanobot").mkdir(parents=True)
    (workspace / ".nanobot" / "workspace-id").write_text("not an id\n", encoding="utf-8")
    with pytest.raises(SettingsError, match="holds no nanobot workspace id"):
        HookSettings().for_workspace(workspace)
    (workspace / ".nanobot" / "workspace-id").write_text("0123456789abcdef0123456789abcdef\n", encoding="utf-8")
    assert (
        HookSettings().for_workspace(workspace).keys
        == Keys("0123456789ab")
        == Keys(default_namespace("0123456789abcdef0123456789abcdef"))
    )
    monkeypatch.setenv("NANOBOT_SUMMARY_NAMESPACE", "alice")
    assert HookSettings().for_workspace(workspace).keys == Keys("alice")
    monkeypatch.setenv("NANOBOT_SUMMARY_NAMESPACE", "alice:bob")
    with pytest.raises(ValueError, match="summary_namespace"):
        HookSettings()


async def test_twenty_instances_share_one_database_and_nothing_crosses(
    tmp_path: Path, fake_llm, redis, redis_url, monkeypatch
) -> None:
    monkeypatch.delenv("NANOBOT_SUMMARY_NAMESPACE", raising=False)

    def answer(request: FakeRequest) -> Reply:
        # Each home's conversation names its home: the summary says whose messages the worker read.
        found = sorted(set(re.findall(r"home-\d\d", str(request.messages))))
        return Reply(summary_json(f"## What happened\n- read {' '.join(found)}"))

    fake_llm.responder = answer
    homes = [NanobotHome.create(tmp_path / f"home-{i:02d}", fake_llm.url) for i in range(HOMES)]
    deps = [
        build_deps(Settings(redis_url=redis_url, config=home.config_path, summary_retry_delay=0.05)) for home in homes
    ]
    namespaces = [d.settings.summary_namespace for d in deps]
    assert namespaces == [default_namespace(workspace_id(home)) for home in homes]
    assert len(set(namespaces)) == HOMES

    for i, home in enumerate(homes):
        home.write_session(KEY, conversation(12, user=f"home-{i:02d} question {{i}}"))
        # The hooks' side of instance i: its settings settled from its workspace, as nanobot's plugin does.
        hooks = HookSettings(redis_url=redis_url).for_workspace(home.workspace)
        assert hooks.keys == deps[i].settings.keys, "hooks and worker of one instance agree, unconfigured"
        link = RedisLink(redis_url, logs.Throttle(every=60.0), keys=hooks.keys)
        assert await link.call("queueing", lambda c: enqueue_summary(c, SummarizeRequest(session_key=KEY)))
        await link.close()

    workers = await asyncio.gather(*(run_burst(d) for d in deps))  # twenty arq Workers at once, one process
    assert [w.jobs_complete for w in workers] == [1] * HOMES, "each worker ran its own instance's job only"

    for i, (home, d) in enumerate(zip(homes, deps, strict=True)):
        mine = queue_client(redis_url, d.settings.keys.queue)
        try:
            record = await load_record(mine, KEY)
            outcome = await load_outcome(mine, KEY)
        finally:
            await mine.aclose()
        assert record is not None and record.summary == f"## What happened\n- read home-{i:02d}", record
        assert outcome is not None and outcome.status == "summarized"
        head, _ = session_lines(home, KEY)
        assert head["metadata"]["_summary_worker"]["pending"]["summary"].endswith(f"read home-{i:02d}")
    assert await load_record(redis, KEY) is None, "nothing under the tests' own namespace"

    prefixes = tuple(f"{KEY_PREFIX}:{ns}:" for ns in namespaces)
    names = [k.decode() async for k in redis.scan_iter(match="*", count=1000)]
    assert names and all(any(p in name for p in prefixes) for name in names), [
        n for n in names if not any(p in n for p in prefixes)
    ]
    for ns in namespaces:
        keys = Keys(ns)
        assert keys.record(KEY) in names and keys.outcome(KEY) in names and keys.spend("total") in names


async def test_a_worker_takes_no_job_of_another_instance(
    nanobot_home, redis, redis_url, deps_for, default_reply
) -> None:
    nanobot_home.write_session(KEY, conversation(12))
    other = Keys("another-instance")
    stranger = RedisLink(redis_url, logs.Throttle(every=60.0), keys=other)
    assert await stranger.call("queueing", lambda c: enqueue_summary(c, SummarizeRequest(session_key=KEY)))
    await stranger.close()
    worker = await run_burst(deps_for())
    assert worker.jobs_complete == 0 and await redis.zcard(other.queue) == 1
    assert await redis.zcard(TEST_KEYS.queue) == 0


async def test_real_nanobot_and_the_worker_agree_on_the_namespace_without_configuration(
    nanobot_exe, agent_home, fake_llm, script, redis, redis_url, worker_deps
) -> None:
    agent_home.write_session(KEY, conversation(8))
    # An empty NANOBOT_SUMMARY_NAMESPACE counts as unset: both sides derive it from the workspace id.
    env = process_env(agent_home, redis_url, NANOBOT_SUMMARY_INTERVAL="0", NANOBOT_SUMMARY_NAMESPACE="")
    script.prompt_tokens = BIG_PROMPT
    await turn(nanobot_exe, agent_home, env, KEY, "crossing turn")
    derived = Keys(default_namespace(workspace_id(agent_home)))
    assert await redis.zcard(derived.queue) == 1, "nanobot's hooks queued under the derived namespace"
    assert await redis.zcard(TEST_KEYS.queue) == 0
    deps = worker_deps(summary_namespace="")
    assert deps.settings.keys == derived
    await run_burst(deps)
    mine = queue_client(redis_url, derived.queue)
    try:
        assert await load_record(mine, KEY) is not None
    finally:
        await mine.aclose()


def test_the_redis_commands_benchmark_runs_at_a_smoke_size(capsys) -> None:
    assert load_bench("bench_redis_ops").main(["--sessions", "3", "--idle", "1"]) == 0
    stdout = capsys.readouterr().out
    figures = dict(
        re.findall(
            r"^(trigger \(hooks\)|job \(worker\)|pickup \(hooks\)): ([\d.]+) commands per job", stdout, re.MULTILINE
        )
    )
    assert set(figures) == {"trigger (hooks)", "job (worker)", "pickup (hooks)"}, stdout
    assert float(figures["pickup (hooks)"]) > 0, "every job left a record for the pickup to apply"


def wait_for_line(log: Path, text: str, process: subprocess.Popen | forks.ForkedProcess, deadline: float) -> None:
    """Until the worker's log holds `text`; the worker must still run."""
    import time

    while text not in log.read_text(errors="replace") and time.monotonic() < deadline:
        assert process.poll() is None, log.read_text(errors="replace")
        time.sleep(0.2)


async def move_workspace_then_queue_a_job(home: NanobotHome, moved: Path, redis_url: str, queue: str) -> None:
    """nanobot's config pointed at another workspace, then a job queued where the running worker still polls."""

    config = json.loads(home.config_path.read_text(encoding="utf-8"))
    config["agents"]["defaults"]["workspace"] = str(moved)
    home.config_path.write_text(json.dumps(config), encoding="utf-8")
    home.write_session("telegram:42", conversation(4))
    client = queue_client(redis_url, queue)
    try:
        await enqueue_summary(client, SummarizeRequest(session_key="telegram:42", reason="manual"))
    finally:
        await client.aclose()


def test_a_worker_started_before_nanobots_first_run_waits_for_its_workspace_id(
    nanobot_home, redis_url, tmp_path
) -> None:
    """The namespace comes from the id nanobot writes at its first run: a worker started before that says so
    once and starts serving the instance's queue as soon as the id is there, instead of exiting."""
    import time

    marker = nanobot_home.workspace / ".nanobot" / "workspace-id"
    saved = marker.read_text(encoding="utf-8")
    marker.unlink()
    env = process_env(nanobot_home, redis_url, config=True)
    del env["NANOBOT_SUMMARY_NAMESPACE"]  # the namespace derived from the workspace id, as by default
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        process = forks.popen(
            [sys.executable, "-m", "worker", "run", "--no-embedded-redis"], env, cwd=ROOT, stdout=out, stderr=out
        )
        try:
            deadline = time.monotonic() + 90
            wait_for_line(log, "waiting for it", process, deadline)
            assert "workspace id" in log.read_text(errors="replace") and process.poll() is None
            marker.write_text(saved, encoding="utf-8")  # nanobot ran once
            queue = Keys(default_namespace(saved.strip())).queue
            wait_for_line(log, f"queue {queue}", process, deadline)
            text = log.read_text(errors="replace")
            assert f"queue {queue}" in text and text.count("waiting for it") == 1, text
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:  # cleanup only: stopping is tested in tests/scenarios/test_faults.py
                process.kill()
                process.wait(timeout=10)


# Two instances, as two nanobots and their workers on one Redis: a namespace of each.
TWO = ("instance-a", "instance-b")
# arq's own keys of a job: `arq:<kind>:<job id>`; the job id carries the instance's namespace.
ARQ_JOB_KEY = re.compile(r"^arq:(job|in-progress|retry|result):")


@contextlib.asynccontextmanager
async def two_instances_after_one_daily_tick(tmp_path: Path, fake_llm, redis_url: str) -> AsyncIterator[None]:
    """Each instance's hooks queue a job and an idle check; then both instances' workers, real arq Workers
    polling in this process, reach the same daily tick (the time arq computed for both: one cron schedule).
    The block runs, the workers still polling, once each instance's daily run queued its session's job and
    that job ended (its outcome, reason `daily`); fails after 30 s."""
    fake_llm.default = Reply(summary_json())
    deps = []
    for namespace in TWO:
        home = NanobotHome.create(tmp_path / namespace, fake_llm.url)
        home.write_session(KEY, conversation(12))
        deps.append(
            build_deps(
                Settings(
                    redis_url=redis_url, config=home.config_path, summary_retry_delay=0.05, summary_namespace=namespace
                )
            )
        )
        link = RedisLink(redis_url, logs.Throttle(every=60.0), keys=Keys(namespace))
        assert await link.call("queueing", lambda c: enqueue_summary(c, SummarizeRequest(session_key=KEY)))
        assert await link.call("queueing", lambda c: enqueue_idle_check(c, KEY, 300.0))
        await link.close()
    tick = datetime.now().astimezone() + timedelta(seconds=3)  # arq's clock with no timezone set: the system's
    async with contextlib.AsyncExitStack() as stack:
        for d in deps:
            crons = worker_options(d.settings)["cron_jobs"]
            for job in crons:
                if job.name.endswith(JOB_DAILY):
                    job.next_run = tick
            await stack.enter_async_context(running_worker(d, cron_jobs=crons))
        waiting = set(TWO)
        deadline = time.monotonic() + 30
        while waiting and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            for namespace in list(waiting):
                pool = queue_client(redis_url, Keys(namespace).queue)
                try:
                    outcome = await load_outcome(pool, KEY)
                finally:
                    await pool.aclose()
                if outcome is not None and outcome.reason == "daily":
                    waiting.discard(namespace)
        assert not waiting, f"no daily run in {sorted(waiting)} within 30 s of the shared tick"
        yield


async def test_two_instances_on_one_redis_both_run_their_daily_tick(tmp_path: Path, fake_llm, redis, redis_url) -> None:
    """arq names a unique cron job's id `<name>:<tick>`: a name without the namespace let only the first
    instance's worker to reach the tick run it, and the other instance lost its daily run."""
    async with two_instances_after_one_daily_tick(tmp_path, fake_llm, redis_url):
        pass


async def test_every_key_two_instances_leave_in_redis_names_its_instance(
    tmp_path: Path, fake_llm, redis, redis_url
) -> None:
    """After two instances' hooks queued jobs and idle checks, their workers ran jobs and crons (arq keeps a
    cron job's in-progress key a minute after it ends), every key in the database carries one namespace: in
    its name, or through the job id in arq's own keys (the scan runs while the workers still poll: a worker
    that stops deletes its health-check key)."""
    async with two_instances_after_one_daily_tick(tmp_path, fake_llm, redis_url):
        names = [k.decode() async for k in redis.scan_iter(match="*", count=1000)]
    prefixes = tuple(Keys(namespace).prefix for namespace in TWO)
    strays = [name for name in names if not ARQ_JOB_KEY.sub("", name).startswith(prefixes)]
    assert not strays, strays
    for prefix in prefixes:  # what the scan saw: each instance's queue, health check, cron and job keys
        assert f"{prefix}queue" in names and f"{prefix}queue:health-check" in names
        assert any(name.startswith(f"arq:in-progress:{prefix}cron:") for name in names), names
        assert any(name.startswith(f"arq:job:{prefix}idle:") for name in names), names


@pytest.mark.parametrize(
    "command",
    [["-m", "worker", "run", "--no-embedded-redis"], ["-m", "arq", "worker.app.WorkerSettings"]],
    ids=["nanobot-summary", "arq"],
)
async def test_a_worker_whose_nanobot_moved_to_another_workspace_starts_again_serving_it(
    nanobot_home, redis, redis_url, tmp_path, command
) -> None:
    """nanobot pointed at another workspace queues into that workspace's namespace: a worker that followed the
    new files but kept polling the old queue summarized nothing, silently. It stops in one line and starts
    again serving the new namespace, in the same process (exec), whether `nanobot-summary run` or arq's own
    command line started it: no exit for a terminal, systemd, a container or honcho to handle."""
    env = process_env(nanobot_home, redis_url, config=True)
    del env["NANOBOT_SUMMARY_NAMESPACE"]  # the namespace derived from the workspace id, as by default
    old = Keys(default_namespace((nanobot_home.workspace / ".nanobot" / "workspace-id").read_text().strip()))
    moved = tmp_path / "other-workspace"
    (moved / ".nanobot").mkdir(parents=True)
    (moved / ".nanobot" / "workspace-id").write_text("ab" * 16, encoding="utf-8")
    new = Keys(("ab" * 16)[:12])
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        process = forks.popen([sys.executable, *command], env, cwd=ROOT, stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + 90  # arq's first heartbeat: the worker polls its queue
            while not await redis.exists(f"{old.queue}:health-check") and time.monotonic() < deadline:
                assert process.poll() is None, log.read_text(errors="replace")[-3000:]
                await asyncio.sleep(0.2)
            await move_workspace_then_queue_a_job(nanobot_home, moved, redis_url, old.queue)
            deadline = time.monotonic() + 90  # arq's first heartbeat marks the queue it now polls
            while not await redis.exists(f"{new.queue}:health-check") and time.monotonic() < deadline:
                assert process.poll() is None, log.read_text(errors="replace")[-3000:]
                await asyncio.sleep(0.2)
            text = log.read_text(errors="replace")
            assert await redis.exists(f"{new.queue}:health-check"), text[-3000:]
            assert f"whose jobs are queued under {new.queue}" in text, text[-3000:]
            assert "stopping to start again, serving it" in text and text.count("nanobot's workspace changed") == 1
            assert "starting again, serving the new workspace" in text and "Traceback" not in text, text[-3000:]
            process.terminate()  # the process started again still stops cleanly
            assert process.wait(timeout=60) == 0, log.read_text(errors="replace")[-3000:]
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
