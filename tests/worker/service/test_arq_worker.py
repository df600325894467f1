"""The service's Worker: a job cancelled between its end and its after_job_end does not turn the stop into an error; a
job whose in-progress mark was lost is never started again beside itself; a job waiting on a hung model does not hold
the stop."""

from __future__ import annotations

import asyncio

from harness.defaults import TEST_KEYS
from harness.fakellm import Hang
from harness.transcripts import conversation
from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.queue import enqueue_summary
from nanobot_hooks.contract.records import SummarizeRequest
from tests.support.waiting import wait_until
from tests.support.workers import STOP_GRACE_SECONDS
from worker.service.arq_worker import SteadyWorker, worker_options
from worker.service.config_watch import follow_config
from worker.state.outcomes import load_outcome


async def test_a_stop_while_a_finished_job_runs_its_after_job_end_is_quiet(
    redis, deps_for, nanobot_home, default_reply
) -> None:
    """arq's close cancels the running jobs, then gathers them without return_exceptions: a job cancelled inside
    after_job_end (a Redis call, slow on a busy machine) made the worker's stop raise CancelledError."""
    deps = deps_for()
    in_after_job_end = asyncio.Event()

    async def slow_after_job_end(ctx) -> None:
        in_after_job_end.set()
        await asyncio.sleep(60)

    worker = SteadyWorker(
        **{
            **worker_options(deps.settings),
            "ctx": {"deps": deps},
            "poll_delay": 0.01,
            "handle_signals": False,
            "after_job_end": slow_after_job_end,
        }
    )
    running = asyncio.create_task(worker.main())
    try:
        nanobot_home.write_session("telegram:1", conversation(12))
        assert await enqueue_summary(redis, SummarizeRequest(session_key="telegram:1"))
        await asyncio.wait_for(in_after_job_end.wait(), 60)
        await wait_until(lambda: load_outcome(redis, "telegram:1"), 30, "the job's outcome")
        await worker.close()  # raised CancelledError before
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert worker._pool is None, "the stop went on to close the connections"


LOST_MARK_SESSIONS = [f"telegram:{n}" for n in range(4)]


async def jobs_whose_marks_are_lost(redis, deps, fake_llm, nanobot_home, second_worker: bool) -> dict[str, int]:
    """4 jobs in flight in a real worker (the model answers after a while), their in-progress marks deleted
    while they wait for it (as an eviction or a lost write does), optionally a second worker of the instance
    polling then; until every job's outcome is kept. Returns the job starts by job id (both workers)."""
    from harness.fakellm import Reply
    from harness.models import summary_json

    fake_llm.default = Reply(summary_json(), delay=4.0)
    starts: dict[str, int] = {}

    async def counting_start(ctx) -> None:
        starts[ctx["job_id"]] = starts.get(ctx["job_id"], 0) + 1
        await follow_config(ctx)

    options = {
        **worker_options(deps.settings),
        "ctx": {"deps": deps},
        "poll_delay": 0.01,
        "handle_signals": False,
        "on_job_start": counting_start,
    }
    workers = [SteadyWorker(**options)]
    tasks = [asyncio.create_task(workers[0].main())]
    try:
        for key in LOST_MARK_SESSIONS:
            nanobot_home.write_session(key, conversation(12))
            assert await enqueue_summary(redis, SummarizeRequest(session_key=key))
        await asyncio.to_thread(fake_llm.wait_for_requests, len(LOST_MARK_SESSIONS), 60)
        if second_worker:
            workers.append(SteadyWorker(**{**options, "ctx": {"deps": deps}}))
            tasks.append(asyncio.create_task(workers[1].main()))
        marks = [f"arq:in-progress:{Keys.of(redis).job_id(key)}" for key in LOST_MARK_SESSIONS]
        assert await redis.delete(*marks) == len(marks), "the jobs were running, marked"
        for key in LOST_MARK_SESSIONS:
            await wait_until(lambda key=key: load_outcome(redis, key), 60, f"{key}'s outcome")
    finally:
        for worker in workers:
            await worker.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return starts


async def test_a_worker_stops_within_its_grace_while_its_job_waits_on_a_model_that_never_answers(
    redis, deps_for, nanobot_home, fake_llm
) -> None:
    """The deployments give a stopping worker 60 s before they kill it (deploy/: TimeoutStopSec,
    stop_grace_period). A job waiting on a model that does not answer within that, its call bound longer still,
    is cancelled: the stop ends well within the grace, the job says it was cut short and waits in the queue."""
    fake_llm.default = Hang(300)
    deps = deps_for(summary_timeout=120.0)
    worker = SteadyWorker(
        **{**worker_options(deps.settings), "ctx": {"deps": deps}, "poll_delay": 0.01, "handle_signals": False}
    )
    running = asyncio.create_task(worker.main())
    try:
        nanobot_home.write_session("telegram:1", conversation(15))
        assert await enqueue_summary(redis, SummarizeRequest(session_key="telegram:1"))
        await asyncio.to_thread(fake_llm.wait_for_requests, 1, 60)
        async with asyncio.timeout(STOP_GRACE_SECONDS):
            await worker.close()
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    outcome = await load_outcome(redis, "telegram:1")
    assert outcome is not None and "cancelled" in outcome.detail, outcome
    assert await redis.zscore(TEST_KEYS.queue, TEST_KEYS.job_id("telegram:1")) is not None, "back in the queue"


async def test_a_job_whose_in_progress_mark_is_lost_is_not_started_again_in_its_worker(
    redis, worker_deps, fake_llm, nanobot_home
) -> None:
    """arq tells a running job by its mark alone: with the marks lost, each of 4 jobs in flight was started
    again at the next poll, beside itself (8 starts), and paid its model call twice."""
    starts = await jobs_whose_marks_are_lost(redis, worker_deps(), fake_llm, nanobot_home, second_worker=False)
    assert sorted(starts.values()) == [1] * len(LOST_MARK_SESSIONS), starts
    assert len(fake_llm.requests) == len(LOST_MARK_SESSIONS), "one model call per session"
    for key in LOST_MARK_SESSIONS:
        assert (await load_outcome(redis, key)).status == "summarized"


async def test_a_job_whose_mark_is_lost_waits_in_another_worker_while_its_run_holds_the_session(
    redis, worker_deps, fake_llm, nanobot_home
) -> None:
    """Another worker of the instance starts the jobs whose marks were lost: the session's run lock defers each
    such start, with no model call and no write, and is given back when the run ends."""
    starts = await jobs_whose_marks_are_lost(redis, worker_deps(), fake_llm, nanobot_home, second_worker=True)
    assert sorted(starts.values()) == [2] * len(LOST_MARK_SESSIONS), starts  # the first run, the deferred start
    assert len(fake_llm.requests) == len(LOST_MARK_SESSIONS), "one model call per session"
    for key in LOST_MARK_SESSIONS:
        assert (await load_outcome(redis, key)).status == "summarized"
        assert not await redis.exists(Keys.of(redis).running(key)), "the run lock is given back"


class _Planted:
    """Unpickled, it would write a file: what a pickled job could make the worker do."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


async def test_a_pickled_job_in_the_queue_is_ended_unread_in_one_line_and_the_worker_goes_on(
    redis, deps_for, nanobot_home, default_reply, tmp_path, caplog
) -> None:
    """Jobs travel as JSON: a job written pickled (by an older version, or anyone who can write to the queue) is
    never unpickled, so it runs no code; it ends in one line saying whose it was (no traceback), its id is free for the
    session's next trigger, and the next job runs."""
    import pickle
    import time

    from tests.support.workers import run_burst

    deps = deps_for()
    planted = tmp_path / "unpickled"
    pickled = pickle.dumps(
        {"t": 1, "f": "summarize_session", "a": [_Planted(str(planted))], "k": {}, "et": int(time.time() * 1000)}
    )
    keys = Keys.of(redis)
    job_id = keys.job_id("telegram:pickled")
    await redis.set(f"arq:job:{job_id}", pickled, ex=600)
    await redis.zadd(keys.queue, {job_id: int(time.time() * 1000)})
    nanobot_home.write_session("telegram:1", conversation(12))
    assert await enqueue_summary(redis, SummarizeRequest(session_key="telegram:1"))
    await run_burst(deps)
    assert not planted.exists(), "the pickled job was unpickled: its payload ran"
    said = [r.getMessage() for r in caplog.records if "ended unread" in r.getMessage()]
    assert said == [
        "telegram:pickled: a queued job written by another version (not JSON: version 0.1.0 pickled its "
        "jobs) was ended unread; the session's next trigger queues it again"
    ], caplog.text
    assert "Traceback" not in caplog.text and "deserializing job" not in caplog.text, "one line, not a traceback"
    assert await load_outcome(redis, "telegram:1") is not None, "the worker went on to the next job"
    assert await load_outcome(redis, "telegram:pickled") is None, "the pickled job ran nothing"
    assert await redis.zscore(keys.queue, job_id) is None, "the pickled job left the queue"
    assert await enqueue_summary(redis, SummarizeRequest(session_key="telegram:pickled")), "its id is free again"


async def test_the_minutes_flush_of_held_facts_loads_no_litellm_and_a_summary_job_does(deps_for, monkeypatch) -> None:
    """The flush runs at start-up and every minute: a worker at rest stays without litellm through it."""
    from worker.service import config_watch
    from worker.summarize.daily import JOB_FLUSH_MEMORY

    loads: list[int] = []
    monkeypatch.setattr(config_watch, "litellm_loaded", lambda: False)
    monkeypatch.setattr(config_watch, "load_litellm", lambda: loads.append(1))
    deps = deps_for()
    await config_watch.follow_config({"deps": deps, "job_id": f"{deps.settings.keys.cron(JOB_FLUSH_MEMORY)}:17650"})
    assert loads == []
    await config_watch.follow_config({"deps": deps, "job_id": "0f3a9c2b7d"})  # a summary job's (arq's uuid)
    assert loads == [1]
