"""The worker's stop: a job cancelled between its end and its after_job_end does not turn the stop into an error."""

from __future__ import annotations

import asyncio

from nanobot_hooks.contract import SummarizeRequest, enqueue_summary
from harness.transcripts import conversation
from tests.support.waiting import wait_until
from worker.service.arq_worker import SteadyWorker, worker_options
from worker.state.outcomes import load_outcome


async def test_a_stop_while_a_finished_job_runs_its_after_job_end_is_quiet(redis, deps_for, nanobot_home,
                                                                             default_reply) -> None:
    """arq's close cancels the running jobs, then gathers them without return_exceptions: a job cancelled inside
    after_job_end (a Redis call, slow on a busy machine) made the worker's stop raise CancelledError."""
    deps = deps_for()
    in_after_job_end = asyncio.Event()

    async def slow_after_job_end(ctx) -> None:
        in_after_job_end.set()
        await asyncio.sleep(60)

    worker = SteadyWorker(**{**worker_options(deps.settings), "ctx": {"deps": deps}, "poll_delay": 0.01,
                             "handle_signals": False, "after_job_end": slow_after_job_end})
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
