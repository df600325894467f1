"""Faults with real processes: the worker killed (SIGKILL) or stopped (SIGTERM) mid-job, Redis killed and
restarted under the worker and a nanobot gateway, a model that rate-limits, hangs or breaks off, and a disk
that fills up under the memory files. The worker runs as the Procfile starts it (`python -m worker`)."""

from __future__ import annotations

import asyncio
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix

from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.fakellm import Error, FakeRequest, Hang, Reply
from harness.models import BIG_PROMPT, SUMMARY_MODEL, Summarizer, previous_summary
from harness.redis_server import RedisServer
from harness.sandbox import NanobotHome, session_lines
from harness.transcripts import conversation
from nanobot_hooks.contract.marker import METADATA_KEY
from nanobot_hooks.contract.queue import enqueue_summary, load_record
from nanobot_hooks.contract.records import SummarizeRequest
from tests.support.crossing import CHAT
from tests.support.paths import ROOT
from tests.support.queue_probes import stats
from tests.support.waiting import wait_until
from tests.support.workers import running_worker
from worker.connections import queue_client
from worker.memory.notes import section_items, spans
from worker.state.outcomes import JobOutcome, load_outcome

# Worker processes killed and started again, Redis restarted under them: tests/conftest.py's SLOW_TIMEOUT.
pytestmark = pytest.mark.slow

FACT = {
    "text": "The deploy host is deploy-3.example.com",
    "tag": "durable",
    "importance": 4,
    "source": "user",
    "category": "configuration",
    "replaces": None,
}
HELD = 60.0  # a held call outlasts every wait of these tests
# Chunks of a few messages each (the instructions alone take ~620 tokens), and a crash recovery within
# seconds: arq runs a killed worker's job again job timeout + 10 s after it started.
# A try's and a call's time: long enough for a restarted worker's first call, which imports litellm (on a slow 2-core
# machine beside the other tests, a 6 s try ran out there and the job failed instead of being summarized).
JOB_SECONDS = 30
CHUNKED = {
    "NANOBOT_SUMMARY_INPUT_TOKENS": "2000",
    "NANOBOT_SUMMARY_KEEP": "messages:2",
    "NANOBOT_SUMMARY_JOB_TIMEOUT": str(JOB_SECONDS),
    "NANOBOT_SUMMARY_TIMEOUT": "15",
}


def backlog(home: NanobotHome, key: str) -> list[dict[str, Any]]:
    """12 long turns: three or four chunks. Each user message names its session, for the fake LLM."""
    messages = conversation(12, user=f"{key} backlog message {{i}} " + "with a long body of text " * 30)
    home.write_session(key, messages)
    return messages


def asked(requests: list[FakeRequest], text: str) -> int:
    """How many summarizing calls carried this user message to summarize (noted or not; the running
    summary quotes it differently)."""
    return sum(f"user: {text}" in r.last_user_text for r in requests)


async def outcome_is(redis: ArqRedis, key: str, status: str, job_try: int = 1) -> JobOutcome | None:
    outcome = await load_outcome(redis, key)
    return outcome if outcome is not None and outcome.status == status and outcome.job_try >= job_try else None


async def notices(pubsub: Any) -> list[str]:
    """Every notice of a finished summary received so far."""
    seen = []
    while (message := await pubsub.get_message(timeout=0.5)) is not None:
        if message["type"] == "message":
            data = message["data"]
            seen.append(data.decode() if isinstance(data, bytes) else str(data))
    return seen


async def wait_for(condition: Any, what: str, *logs: Callable[[], str], timeout: float = 60.0) -> None:
    """wait_until, and on a timeout the end of each log (read then, not when the wait began)."""
    try:
        await wait_until(condition, timeout, what)
    except AssertionError as exc:
        raise AssertionError("\n".join([str(exc), *(log()[-3000:] for log in logs)])) from None


def assert_whole_and_once(home: NanobotHome, originals: dict[str, list[dict[str, Any]]]) -> None:
    """Session files: every message line as nanobot wrote it. Memory files: complete lines, each noted span and
    each bullet of a session once, each fact once; no temporary file left behind anywhere."""
    for key, messages in originals.items():
        _, lines = session_lines(home, key)  # every line parses
        assert lines == messages
    memory = home.workspace / "memory"
    for day in memory.glob("????-??-??.md"):
        text = day.read_text(encoding="utf-8")
        assert text.endswith("\n"), f"{day.name} ends part-way through a line"
        found = spans(text)
        assert len(found) == len(set(found)), f"a span noted twice in {day.name}"
        items = [(span.session, heading, item) for span, heading, item in section_items(text)]
        assert len(items) == len(set(items)), f"a bullet noted twice in {day.name}"
    facts = [
        line
        for line in (memory / "MEMORY.md").read_text(encoding="utf-8").splitlines()
        if "deploy-3.example.com" in line
    ]
    assert len(facts) == 1, facts
    left = [p.name for folder in (memory, home.sessions_dir) for p in folder.glob(".*.tmp")]
    assert not left, left


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
async def test_a_worker_stopped_mid_job_runs_it_again_and_writes_nothing_twice(
    agent_home, fake_llm, redis, procfile_worker, stop
):
    resumed, redone = "telegram:101", "telegram:102"
    originals = {key: backlog(agent_home, key) for key in (resumed, redone)}
    model = Summarizer(facts=[FACT])
    held = [True]

    def answer(request: FakeRequest) -> Hang | Reply:
        # The second chunk of each session is in flight when the worker is stopped; the first is answered.
        return Hang(HELD) if held[0] and previous_summary(request) else model(request)

    fake_llm.responder = answer
    pubsub = redis.pubsub()
    await pubsub.subscribe(TEST_KEYS.notice_channel)
    worker = procfile_worker(**CHUNKED)
    for key in originals:
        await enqueue_summary(redis, SummarizeRequest(session_key=key, reason="tokens"))
    await wait_for(
        lambda: sum(bool(previous_summary(r)) for r in fake_llm.requests) >= 2,
        "both second chunks in flight",
        worker.log,
    )
    assert worker.process is not None
    worker.process.send_signal(stop)
    code = await asyncio.to_thread(worker.process.wait, 30)

    assert_whole_and_once(agent_home, originals)  # the first chunks' notes are in, whole
    for key in originals:
        if stop == signal.SIGTERM:
            # arq cancels at once: the job says so and is queued again.
            assert code == 0
            outcome = await load_outcome(redis, key)
            assert outcome is not None and outcome.status == "failed" and "cancelled" in outcome.detail
            assert await redis.zscore(TEST_KEYS.queue, TEST_KEYS.job_id(key)) is not None
        else:
            assert code == -signal.SIGKILL and await load_outcome(redis, key) is None
    if stop == signal.SIGKILL:
        # A killed worker leaves arq's in-progress mark until it expires (the job timeout + 10 s); no other
        # worker takes the job before then. Expire it now instead of waiting those 40 s.
        for key in originals:
            mark = in_progress_key_prefix + TEST_KEYS.job_id(key)
            assert 0 < await redis.pttl(mark) <= (JOB_SECONDS + 10) * 1000, "it would expire by itself within that time"
            assert await redis.pexpire(mark, 50)
    # As if `redone`'s worker had died after writing its first chunk's notes, before keeping its progress.
    assert await redis.delete(TEST_KEYS.progress(redone)) == 1
    before = fake_llm.requests
    held[0] = False
    again = procfile_worker(**CHUNKED)  # a supervisor starts it again
    for key in originals:
        await wait_for(
            lambda key=key: outcome_is(redis, key, "summarized", job_try=2),
            f"{key} summarized in a later try",
            again.log,
        )

    assert_whole_and_once(agent_home, originals)
    # Pub/sub is server-wide: other databases' notices pass by too.
    mine = [key for key in await notices(pubsub) if key in originals]
    assert sorted(mine) == sorted(originals), "each record stored and announced once"
    first_message = {key: messages[0]["content"][:60] for key, messages in originals.items()}
    after = fake_llm.requests[len(before) :]
    assert asked(after, first_message[resumed]) == 0, "the finished first chunk is not paid for again"
    assert asked(after, first_message[redone]) == 1, "without its progress the range is summarized again"
    for key in originals:
        record = await load_record(redis, key)
        head, _ = session_lines(agent_home, key)
        assert record is not None and head["metadata"][METADATA_KEY]["pending"] == record.model_dump(mode="json")
    await pubsub.aclose()


async def test_redis_restarted_mid_job_beside_load_every_job_in_flight_gets_its_record_and_nothing_exits(
    nanobot_home, fake_llm, script, gateway, procfile_worker, tmp_path
):
    """Four jobs in flight (the gateway's and three queued), two busy loops beside them, and Redis killed and
    started again on its port (no persistence: it comes back empty) while their model calls run: each job's next
    Redis call fails, the job says so in one line and runs its try again once Redis answers, counted, so every
    session gets its record (the gateway applies its own), with no traceback; the worker and the gateway never
    exit."""
    server = RedisServer(tmp_path / "redis").start()
    url = server.url()
    nanobot_home.write_session(f"websocket:{CHAT}", conversation(10))
    queued = [f"telegram:{n}" for n in (5, 6, 7)]
    for key in queued:
        nanobot_home.write_session(key, conversation(15))
    slow = [True]

    def answer(request: FakeRequest) -> Reply:
        reply = script(request)
        # The worker's calls are in flight when Redis dies; they answer while Redis is down.
        return replace(reply, delay=3.0) if slow[0] and (request.body or {}).get("model") == SUMMARY_MODEL else reply

    def summary_calls() -> int:
        return sum(1 for r in fake_llm.requests if (r.body or {}).get("model") == SUMMARY_MODEL)

    fake_llm.responder = answer
    worker = procfile_worker(REDIS_URL=url)
    gw = await gateway(redis=url, NANOBOT_SUMMARY_INTERVAL="0")
    pool = queue_client(url, TEST_KEYS.queue)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        for key in queued:
            assert await enqueue_summary(pool, SummarizeRequest(session_key=key, reason="tokens")) is not None
        script.prompt_tokens = BIG_PROMPT
        await gw.say(CHAT, "crossing the threshold")
        await wait_for(lambda: summary_calls() >= 4, "the four jobs running", worker.log)
        server.kill()
        await wait_for(
            lambda: worker.log().count("Redis went away during try 1") >= 4,
            "each job in flight meeting the lost Redis",
            worker.log,
        )
        assert (await gw.say(CHAT, "while Redis is down")).startswith("reply number")
        slow[0] = False
        server.start()

        async def every_record() -> bool:
            return all([await load_record(pool, key) is not None for key in queued]) and await _applied(pool)

        await wait_for(every_record, "every session in flight getting its record", worker.log, gw.log, timeout=90)
        for key in queued:
            outcome = await load_outcome(pool, key)
            assert outcome is not None and outcome.status == "summarized" and outcome.job_try == 2, outcome
        assert worker.process is not None and worker.process.poll() is None, "the worker never exited"
        assert gw.process is not None and gw.process.poll() is None
    finally:
        for loop in busy:
            loop.kill()
            loop.wait(10)
        await pool.aclose()
        worker.stop()
        server.stop()
    log = worker.log()
    assert log.count("Starting worker") == 1, "no restart"
    assert "Traceback" not in log and "crashed" not in log, log[-3000:]
    assert log.count("does not answer") <= 1 and log.count("answers again") == log.count("does not answer")
    said = [line for line in gw.log().splitlines() if "summary worker: Redis at" in line]
    # One warning (at most one a minute: the turn during the outage crossed the threshold too), one line back.
    assert ["failed while" in line for line in said] == [True, False], said


async def _applied(redis: ArqRedis) -> bool:
    return (await stats(redis)).get("applied") == 1


async def test_a_model_that_rate_limits_hangs_or_breaks_off_costs_only_the_documented_tries(
    agent_home, fake_llm, redis, deps_for
):
    model = Summarizer()
    calls: dict[str, list[FakeRequest]] = {"storm": [], "hang": [], "broken": []}

    def answer(request: FakeRequest) -> Reply | Error | Hang:
        kind = next(k for k in calls if f"{k} question" in request.last_user_text)
        calls[kind].append(request)
        if kind == "storm":
            return Error.rate_limit(retry_after=1.0)
        first = len(calls[kind]) == 1
        if kind == "hang" and first:
            return Hang(HELD)  # past NANOBOT_SUMMARY_TIMEOUT
        reply = model(request)
        # Non-streaming (the worker's kind of call): half the body, then the connection closes.
        return replace(reply, broken=True) if kind == "broken" and first else reply

    fake_llm.responder = answer
    for kind in calls:
        agent_home.write_session(f"telegram:{kind}", conversation(15, user=f"{kind} question {{i}}"))
    # The worker in this process: the tries are the point here, not the process (the tests above kill one).
    async with running_worker(deps_for(summary_max_tries=3, summary_retry_delay=0.05, summary_timeout=2.0)):
        for kind in calls:
            await enqueue_summary(redis, SummarizeRequest(session_key=f"telegram:{kind}", reason="tokens"))

        storm = await _wait(redis, "telegram:storm", "failed")
        assert len(calls["storm"]) == 3 and "gave up after 3 tries" in storm.detail
        gaps = [b.received_at - a.received_at for a, b in zip(calls["storm"], calls["storm"][1:], strict=False)]
        assert min(gaps) >= 1.0, f"Retry-After honoured over the 0.05 s backoff: {gaps}"
        assert storm.spend.calls == 0 and storm.cooldown_until is not None, "no answer was paid for; the session rests"
        await enqueue_summary(redis, SummarizeRequest(session_key="telegram:storm", reason="tokens"))
        assert "resting until" in (await _wait(redis, "telegram:storm", "noop")).detail
        assert len(calls["storm"]) == 3, "the next trigger calls nobody"

        for kind in ("hang", "broken"):
            outcome = await _wait(redis, f"telegram:{kind}", "summarized")
            assert outcome.job_try == 2 and len(calls[kind]) == 2 and outcome.spend.calls == 1, (kind, outcome)
            assert await load_record(redis, f"telegram:{kind}") is not None


async def _wait(redis: ArqRedis, key: str, status: str) -> JobOutcome:
    try:
        await wait_until(lambda: outcome_is(redis, key, status), timeout=60, what=f"{key} {status}")
    finally:
        outcome = await load_outcome(redis, key)
    assert outcome is not None, f"no outcome of {key}"
    return outcome


DISK_LIMIT = 256 * 1024


def _limit_file_size() -> None:
    # A full disk, for root too (permissions would not stop it): writes past this size fail with EFBIG.
    # Python ignores SIGXFSZ, so the write raises instead of killing the process.
    resource.setrlimit(resource.RLIMIT_FSIZE, (DISK_LIMIT, DISK_LIMIT))


async def test_a_full_disk_leaves_no_partial_memory_file_and_the_summary_is_still_stored(
    nanobot_home, fake_llm, redis, redis_url
):
    fake_llm.responder = Summarizer(facts=[FACT])
    memory = nanobot_home.workspace / "memory"
    memory.mkdir()
    # The notes of one session go to a day file with no room left; the other's to a new day file, and its
    # facts to a MEMORY.md with no room left.
    day = memory / "2026-11-20.md"
    day.write_text("# 2026-11-20\n" + "- the user's own line\n" * ((DISK_LIMIT - 100) // 22), encoding="utf-8")
    facts = memory / "MEMORY.md"
    facts.write_text("# Long-term Memory\n" + "- the user's own fact\n" * ((DISK_LIMIT - 100) // 22), encoding="utf-8")
    before = {path: path.read_bytes() for path in (day, facts)}
    notes_full, facts_full = "telegram:301", "telegram:302"
    nanobot_home.write_session(notes_full, conversation(15))
    nanobot_home.write_session(facts_full, conversation(15, start=datetime(2026, 11, 21, 10, 0)))
    for key in (notes_full, facts_full):
        await enqueue_summary(redis, SummarizeRequest(session_key=key, reason="tokens"))
    env = process_env(nanobot_home, redis_url, NANOBOT_CONFIG=str(nanobot_home.config_path))
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "worker", "--burst", "--no-embedded-redis"],
        cwd=ROOT,
        env=env,
        preexec_fn=_limit_file_size,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    assert {path: path.read_bytes() for path in before} == before, "no half-written section or fact"
    assert not list(memory.glob(".*.tmp")), "no temporary file left behind"
    for key in (notes_full, facts_full):
        outcome = await load_outcome(redis, key)
        assert outcome is not None and outcome.status == "summarized", (outcome, done.stderr[-3000:])
        assert "memory files not written" in outcome.detail and "File too large" in outcome.detail
        record = await load_record(redis, key)
        head, _ = session_lines(nanobot_home, key)
        assert record is not None and head["metadata"][METADATA_KEY]["pending"] == record.model_dump(mode="json")


async def test_a_worker_stopped_during_its_start_up_index_sweep_does_not_wait_for_it(nanobot_home, deps_for) -> None:
    """The start-up sweep of the recall index takes seconds on a year of messages. It runs in a daemon thread,
    which the interpreter does not wait for at exit (asyncio's pool threads it does): a worker stopped meanwhile
    (Ctrl-C, a restart, the reloader) exits at once, and the index, safe half-built, goes on at the next start."""
    import threading

    from worker.service.startup import sweep_recall_index

    deps = deps_for()
    nanobot_home.write_session("telegram:42", conversation(4), last_archived=8)
    running, release = threading.Event(), threading.Event()
    sweeping: list[threading.Thread] = []

    def slow_refresh(sessions_dir: Path) -> str:
        sweeping.append(threading.current_thread())
        running.set()
        release.wait(30)
        return "done"

    deps.recall.refresh = slow_refresh  # type: ignore[method-assign]
    task = asyncio.create_task(sweep_recall_index(deps))
    try:
        await asyncio.to_thread(running.wait, 30)
        task.cancel()  # the worker stopping: arq cancels its start-up
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled() and sweeping[0].is_alive()
        assert sweeping[0].daemon, "the interpreter would wait for the whole sweep before the process exits"
    finally:
        release.set()
