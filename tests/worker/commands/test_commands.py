"""The commands users type: the worker's run command (embedded Redis, bad settings) and nanobot-summary enqueue.

Most run in the test's own process (tests/support/commands.run_in_process), as the same `main` the console
script calls; one test per command keeps the real process, so the entry point itself stays tested.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys

import pytest

from harness import forks
from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.fakellm import Reply
from harness.models import echo_memory, summary_json
from harness.redis_server import free_port
from harness.transcripts import conversation
from nanobot_hooks.contract.queue import load_record
from tests.support.commands import run_in_process
from tests.support.paths import ROOT
from tests.support.workers import children, niceness, run_burst, running_worker, summarize_now
from worker.service.build import build_deps
from worker.state.outcomes import load_outcome


def run(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return forks.run(args, env, cwd=ROOT, timeout=timeout)


@pytest.mark.slow  # worker processes
def test_worker_starts_an_embedded_redis_when_none_answers(nanobot_home) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = run([sys.executable, "-m", "worker", "--burst"], process_env(nanobot_home, url, config=True))
    assert result.returncode == 0, result.stderr
    assert "started an embedded redis-server" in result.stderr
    assert "summary model openai/fake-model (from nanobot config)" in result.stderr


def test_worker_refuses_a_bad_setting_in_one_line(nanobot_home, capsys) -> None:
    result = run_in_process(capsys, "--burst", env=process_env(nanobot_home, config=True, NANOBOT_SUMMARY_KEEP="lots"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "NANOBOT_SUMMARY_KEEP='lots'" in lines[0] and "messages:N" in lines[0]


def test_dry_run_prints_the_planned_cut_without_calling_the_llm(nanobot_home, fake_llm, redis_url, capsys) -> None:
    nanobot_home.write_session("telegram:42", conversation(15))
    result = run_in_process(
        capsys,
        "enqueue",
        "--dry-run",
        "--keep",
        "messages:10",
        "telegram:42",
        env=process_env(nanobot_home, redis_url, config=True),
    )
    assert result.returncode == 0, result.stderr
    assert "telegram:42: 30 messages, none summarized yet\n" in result.stdout, result.stdout
    assert "would cover messages 0..19 (20 of 20 messages" in result.stdout
    assert "would keep messages 20..29 (10 messages" in result.stdout
    assert fake_llm.requests == []


def test_unknown_malformed_key_and_dead_redis_fail_with_one_line(nanobot_home, redis_url, capsys) -> None:
    nanobot_home.write_session("telegram:42", conversation(3))
    env = process_env(nanobot_home, redis_url, config=True)
    unknown = run_in_process(capsys, "enqueue", "telegram:43", env=env)
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1
    assert "no session 'telegram:43'" in unknown.stderr and "telegram:42" in unknown.stderr
    malformed = run_in_process(capsys, "enqueue", "bad\tkey", env=env)
    assert malformed.returncode == 2 and "malformed session key" in malformed.stderr
    dead = run_in_process(
        capsys,
        "enqueue",
        "telegram:42",
        env=process_env(nanobot_home, f"redis://127.0.0.1:{free_port()}/0", config=True),
    )
    assert dead.returncode == 2 and "does not answer" in dead.stderr and dead.stderr.count("\n") == 1
    assert run_in_process(capsys, "enqueue", env=env).returncode == 2
    internal = run_in_process(capsys, "enqueue", "heartbeat", env=env)
    assert internal.returncode == 2 and "nanobot's own sessions" in internal.stderr


def test_all_skips_nanobots_internal_sessions(nanobot_home, fake_llm, redis_url, capsys) -> None:
    for key in ("telegram:42", "cron:nightly", "dream:x"):
        nanobot_home.write_session(key, conversation(15))
    result = run_in_process(
        capsys, "enqueue", "--all", "--dry-run", env=process_env(nanobot_home, redis_url, config=True)
    )
    assert result.returncode == 0, result.stderr
    assert "telegram:42:" in result.stdout and "cron:" not in result.stdout and "dream:" not in result.stdout


@pytest.mark.slow  # worker processes
async def test_enqueue_wait_reports_the_outcome_from_a_real_worker(
    nanobot_home, fake_llm, redis, redis_url, deps_for
) -> None:
    fake_llm.default = Reply(summary_json("done by the worker"))
    nanobot_home.write_session("telegram:42", conversation(15))
    # The command in its own process (its one real-process test), the worker in this one.
    async with running_worker(deps_for()):
        result = await asyncio.to_thread(
            run,
            [
                sys.executable,
                "-m",
                "worker",
                "enqueue",
                "--wait",
                "--keep",
                "messages:10",
                "--timeout",
                "60",
                "telegram:42",
            ],
            process_env(nanobot_home, redis_url, config=True),
        )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "telegram:42: queued" in result.stdout
    assert "summarized telegram:42: messages 0..19" in result.stdout
    record = await load_record(redis, "telegram:42")
    assert record is not None and record.summary == "done by the worker"
    outcome = await load_outcome(redis, "telegram:42")
    assert outcome is not None and outcome.boundary == 20


async def test_status_shows_pending_records_and_outcomes(
    nanobot_home, fake_llm, redis, redis_url, deps_for, capsys
) -> None:
    from nanobot_hooks.contract.queue import enqueue_summary
    from nanobot_hooks.contract.records import SummarizeRequest

    fake_llm.default = Reply(summary_json())
    nanobot_home.write_session("telegram:42", conversation(15))
    nanobot_home.write_session("cli:direct", conversation(2))
    for key in ("telegram:42", "cli:direct"):
        await enqueue_summary(redis, SummarizeRequest(session_key=key))
    await run_burst(deps_for())
    result = await asyncio.to_thread(
        run_in_process, capsys, "status", env=process_env(redis_url=redis_url, COLUMNS="200")
    )
    assert result.returncode == 0, result.stderr
    pending = result.stdout.split("records waiting")[1].split("last job per session")[0]
    assert "telegram:42" in pending and "0..19" in pending and "cli:direct" not in pending
    outcomes = result.stdout.split("last job per session")[1]
    assert "summarized" in outcomes and "noop" in outcomes
    dead = await asyncio.to_thread(
        run_in_process, capsys, "status", env=process_env(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    )
    assert dead.returncode == 2 and "does not answer" in dead.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)  # two starts of the worker, each allowed 300 s beside busy loops
def test_reload_restarts_the_worker_when_a_module_changes(nanobot_home, redis_url, tmp_path) -> None:
    import time

    log = tmp_path / "reload.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "worker", "--reload"],
            cwd=ROOT,
            stdout=out,
            stderr=out,
            env=process_env(nanobot_home, redis_url, config=True, NANOBOT_SUMMARY_NICENESS="3"),
        )
        try:

            def starts() -> int:
                return log.read_text(errors="replace").count("Starting worker")

            # The bounds only end a wait that would never end: beside two CPU-bound loops the first start took 107 s
            # while the worker in the reloader's child lowered a priority it had inherited lowered (to 19).
            deadline = time.monotonic() + 300
            while starts() < 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert starts() == 1, log.read_text(errors="replace")
            own = os.getpriority(os.PRIO_PROCESS, 0)
            (worker,) = children(process.pid)
            assert niceness(process.pid) == niceness(worker) == own + 3, "lowered once, not again in the child"
            # A module's time of change moves (as an editor's save moves it), its bytes untouched: nothing is written
            # into the source tree, where another test process reads the modules (tests/test_design.py).
            os.utime(ROOT / "worker" / "__main__.py")
            # The restart stops the worker (up to watchfiles' 30 s for a SIGINT, then a SIGKILL) and imports
            # everything again, at the same low priority.
            deadline = time.monotonic() + 300
            while starts() < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert starts() >= 2, log.read_text(errors="replace")
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:  # cleanup only: a loaded machine's stop is tested in test_faults
                process.kill()
                process.wait(timeout=30)


async def test_since_flags_the_sessions_for_a_catch_up_of_their_notes(nanobot_home, redis, redis_url, capsys) -> None:
    nanobot_home.write_session("telegram:42", conversation(3))
    result = await asyncio.to_thread(
        run_in_process,
        capsys,
        "enqueue",
        "--since",
        "2026-11-01",
        "telegram:42",
        env=process_env(nanobot_home, redis_url, config=True),
    )
    assert result.returncode == 0, result.stderr
    assert "telegram:42: queued, notes since 2026-11-01" in result.stdout
    assert await redis.get(TEST_KEYS.daily_flag("telegram:42")) in (b"2026-11-01", "2026-11-01")
    assert await redis.zcard(TEST_KEYS.queue) == 1
    bad = await asyncio.to_thread(
        run_in_process,
        capsys,
        "enqueue",
        "--since",
        "yesterday",
        "telegram:42",
        env=process_env(nanobot_home, redis_url, config=True),
    )
    assert bad.returncode == 2 and "is not a date like 2026-11-01" in bad.stderr


async def test_a_job_queued_by_hand_keeps_the_last_exchange_unless_told_otherwise(
    nanobot_home, fake_llm, redis, redis_url, deps_for, capsys
) -> None:
    """The quick start: a few turns, nanobot's default keep rule (3% of the window keeps them all), and
    `enqueue --wait` still makes a summary, keeping the last exchange; --keep names another rule."""
    fake_llm.default = Reply(summary_json())
    nanobot_home.write_session("cli:direct", conversation(4))  # 8 messages, a few hundred tokens
    env = process_env(nanobot_home, redis_url, config=True, NANOBOT_SUMMARY_KEEP="fraction:0.03")
    dry = await asyncio.to_thread(run_in_process, capsys, "enqueue", "--dry-run", "cli:direct", env=env)
    assert "keep turns:1 (a job queued by hand" in dry.stdout and "would keep messages 6..7 (2 messages" in dry.stdout
    async with running_worker(deps_for(summary_keep="fraction:0.03")):
        made = await asyncio.to_thread(
            run_in_process, capsys, "enqueue", "--wait", "--timeout", "60", "cli:direct", env=env
        )
        assert made.returncode == 0, made.stdout + made.stderr
        assert "summarized cli:direct: messages 0..5" in made.stdout, made.stdout
        assert (await load_record(redis, "cli:direct")).boundary == 6
        await redis.flushdb()
        nanobot_home.write_session("telegram:42", conversation(8))
        told = await asyncio.to_thread(
            run_in_process,
            capsys,
            "enqueue",
            "--wait",
            "--keep",
            "messages:6",
            "--timeout",
            "60",
            "telegram:42",
            env=env,
        )
        assert "summarized telegram:42: messages 0..9" in told.stdout, told.stdout
    bad = await asyncio.to_thread(run_in_process, capsys, "enqueue", "--keep", "lots", "cli:direct", env=env)
    assert bad.returncode == 2 and "'lots': expected messages:N, tokens:N, fraction:F or turns:N" in bad.stderr


async def test_a_catch_up_dry_run_plans_the_notes_the_real_run_writes(
    nanobot_home, fake_llm, redis, redis_url, deps_for, capsys
) -> None:
    """`enqueue --since --dry-run` plans what the catch-up job does: the summary, then notes for the messages it
    leaves out that no day file has yet. It once said "nothing to do" where the job then noted 14 messages."""
    fake_llm.responder = echo_memory  # notes of the user's lines: only written notes mark messages noted
    # Everything summarized already (nanobot's own compaction, before the worker was installed), nothing noted.
    nanobot_home.write_session("telegram:42", conversation(7), last_archived=14)
    nanobot_home.write_session("cli:direct", conversation(7))  # summarized up to the kept exchange, noted by then
    env = process_env(nanobot_home, redis_url, config=True)
    dry = await asyncio.to_thread(
        run_in_process, capsys, "enqueue", "--all", "--since", "2026-11-20", "--dry-run", env=env
    )
    assert dry.returncode == 0, dry.stderr
    assert (
        "would note 14 more messages since 2026-11-20 (not yet in the daily notes) in about 1 notes-only" in dry.stdout
    ), dry.stdout
    assert "would cover messages 0..11" in dry.stdout and "would note 2 more messages since 2026-11-20" in dry.stdout
    assert fake_llm.requests == []
    queued = await asyncio.to_thread(run_in_process, capsys, "enqueue", "--all", "--since", "2026-11-20", env=env)
    assert queued.returncode == 0, queued.stderr
    await run_burst(deps_for())
    noted = await load_outcome(redis, "telegram:42")
    assert noted.status == "noted" and "noted 14 more messages" in noted.detail and noted.spend.calls == 1, noted
    both = await load_outcome(redis, "cli:direct")
    assert both.status == "summarized" and both.boundary == 12 and "noted 2 more messages" in both.detail, both
    again = await asyncio.to_thread(
        run_in_process, capsys, "enqueue", "--all", "--since", "2026-11-20", "--dry-run", env=env
    )
    assert again.stdout.count("every message is noted already") == 2, again.stdout


async def test_the_dry_run_plans_what_the_job_does_hidden_rows_included(
    nanobot_home, fake_llm, redis, redis_url, settings_for, capsys
) -> None:
    messages = conversation(4)
    # nanobot's hidden checkpoint marker, where the last summary was applied (message 6), then one exchange
    messages[6:6] = [
        {
            "role": "user",
            "content": "Continue the active task from the working-memory checkpoint above.",
            "_hidden_history": True,
            "timestamp": messages[5]["timestamp"],
        }
    ]
    messages = messages[:9]
    nanobot_home.write_session("telegram:42", messages, last_archived=6, metadata={"_last_summary": "old summary"})
    env = process_env(nanobot_home, redis_url, config=True, NANOBOT_SUMMARY_KEEP="messages:2")
    dry = await asyncio.to_thread(run_in_process, capsys, "enqueue", "--dry-run", "telegram:42", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "would cover" not in dry.stdout, dry.stdout
    assert "telegram:42: 9 messages, messages 0..5 summarized already\n" in dry.stdout, dry.stdout
    assert (
        "nothing to summarize: nothing to cover beyond the keep rule (messages 6..6 are nanobot's hidden" in dry.stdout
    )
    deps = build_deps(settings_for(summary_keep="messages:2"))
    outcome = (await summarize_now(redis, deps, "telegram:42")).outcome
    assert outcome is not None and outcome.status == "noop", outcome
    assert outcome.detail.startswith("nothing to cover beyond the keep rule (messages 6..6 are nanobot's hidden")
    assert fake_llm.requests == []


async def test_a_catch_up_dry_run_counts_the_notes_calls_the_job_makes(
    nanobot_home, fake_llm, redis, redis_url, deps_for, capsys
) -> None:
    """Over several notes-only calls too: the dry run chunks as the job does (the budget less the prompt)."""
    fake_llm.default = Reply(summary_json())
    nanobot_home.write_session("telegram:42", conversation(60), last_archived=120)
    budget = "3400"  # 120 messages of 2,880 tokens: one chunk of the whole budget, two of it less the prompt
    dry = await asyncio.to_thread(
        run_in_process,
        capsys,
        "enqueue",
        "--since",
        "2026-11-20",
        "--dry-run",
        "telegram:42",
        env=process_env(nanobot_home, redis_url, config=True, NANOBOT_SUMMARY_INPUT_TOKENS=budget),
    )
    planned = re.search(r"would note 120 more messages .* in about (\d+) notes-only", dry.stdout)
    assert planned and int(planned.group(1)) > 1, dry.stdout
    queued = await asyncio.to_thread(
        run_in_process,
        capsys,
        "enqueue",
        "--since",
        "2026-11-20",
        "telegram:42",
        env=process_env(nanobot_home, redis_url, config=True),
    )
    assert queued.returncode == 0, queued.stderr
    await run_burst(deps_for(summary_input_tokens=int(budget)))
    noted = await load_outcome(redis, "telegram:42")
    assert "noted 120 more messages" in noted.detail and noted.spend.calls == int(planned.group(1)), noted


async def test_a_summary_that_cannot_shrink_is_told_before_any_paid_call(
    nanobot_home, fake_llm, redis, redis_url, deps_for, capsys
) -> None:
    """The quick start's trap: two short turns, `enqueue --wait` kept the last exchange and paid for a summary
    longer than the exchange it covered. The dry run says so first, the job ends without calling the model, and
    --force still asks."""
    fake_llm.default = Reply(summary_json())
    short = [
        {"role": "user", "content": "hi", "timestamp": "2026-11-20T10:00:00"},
        {"role": "assistant", "content": "Hello! How can I help?", "timestamp": "2026-11-20T10:00:01"},
        {"role": "user", "content": "thanks", "timestamp": "2026-11-20T10:00:02"},
        {"role": "assistant", "content": "You're welcome.", "timestamp": "2026-11-20T10:00:03"},
    ]
    nanobot_home.write_session("cli:direct", short)
    env = process_env(nanobot_home, redis_url, config=True)
    dry = await asyncio.to_thread(run_in_process, capsys, "enqueue", "--dry-run", "cli:direct", env=env)
    assert (
        "nothing to summarize: a summary would not shrink the context: the messages to cover hold " in dry.stdout
        and "no model was called" in dry.stdout
        and "--force" in dry.stdout
    ), dry.stdout
    async with running_worker(deps_for()):
        made = await asyncio.to_thread(
            run_in_process, capsys, "enqueue", "--wait", "--timeout", "60", "cli:direct", env=env
        )
        assert "a summary would not shrink the context" in made.stdout, made.stdout
        assert fake_llm.requests == [], "no paid call the plan knew was useless"
        assert await load_record(redis, "cli:direct") is None
        forced = await asyncio.to_thread(
            run_in_process, capsys, "enqueue", "--wait", "--force", "--timeout", "60", "cli:direct", env=env
        )
        assert len(fake_llm.requests) == 1, forced.stdout
