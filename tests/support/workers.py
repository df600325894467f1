"""Running the real worker from tests: an arq burst in the test's own process, a worker polling there for the
length of a block, "summarize this session now" (queue a job, run it, read what it left), and the worker as
the Procfile starts it, in a process of its own."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arq.connections import ArqRedis
from arq.worker import Worker

from harness import forks
from harness.environment import process_env
from harness.sandbox import NanobotHome
from nanobot_hooks.contract.queue import enqueue_summary, load_record
from nanobot_hooks.contract.records import Reason, SummarizeRequest, SummaryRecord
from tests.support.waiting import wait_until
from worker.service.arq_worker import worker_options
from worker.state import workers
from worker.state.outcomes import JobOutcome, load_outcome
from worker.summarize.deps import Deps

ROOT = Path(__file__).resolve().parents[2]


def niceness(pid: int) -> int:
    """A process's niceness, from /proc/<pid>/stat: the 19th field, after the command in parentheses (which may
    hold spaces)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[16])


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rpartition(")")[2].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):  # a process that ended meanwhile
            continue
    return found


# arq's burst ends when the queue is empty, counting jobs deferred to later: one left behind an hour ahead by a test
# that failed kept a burst of the next test polling for that hour (seen once on a busy machine). Bounded, the next
# test fails saying so and the run goes on.
BURST_SECONDS = 300.0


async def run_burst(deps: Deps, **worker_overrides: Any) -> Worker:
    """A real arq worker in this process, until the queue is empty (at most BURST_SECONDS)."""
    options = {
        **worker_options(deps.settings),
        "ctx": {"deps": deps},
        "burst": True,
        "poll_delay": 0.02,
        "handle_signals": False,
        **worker_overrides,
    }
    worker = Worker(**options)
    try:
        async with asyncio.timeout(BURST_SECONDS):
            await worker.main()
    except TimeoutError:
        queued = await worker.pool.zrange(worker.queue_name, 0, -1, withscores=True)
        raise AssertionError(f"the burst worker's queue was not empty after {BURST_SECONDS:g} s: {queued}") from None
    finally:
        await stop_within_grace(worker)
    return worker


@contextlib.asynccontextmanager
async def running_worker(deps: Deps, **worker_overrides: Any) -> AsyncIterator[Worker]:
    """A real arq worker in this process, polling until the block ends (`run_burst` stops at an empty queue)."""
    options = {
        **worker_options(deps.settings),
        "ctx": {"deps": deps},
        "poll_delay": 0.02,
        "handle_signals": False,
        **worker_overrides,
    }
    worker = Worker(**options)
    task = asyncio.create_task(worker.async_run())
    try:
        yield worker
    finally:
        await stop_worker(worker, task)


async def cancel_polling(task: asyncio.Task[Any]) -> None:
    """Cancel a worker's polling loop and wait for its end, cancelling again while it runs: a cancel can be swallowed
    by the Redis call it lands in (redis-py's asyncio.wait_for on Python 3.11, CPython gh-86296), and arq's own
    Worker, unlike SteadyWorker, then polls on for good. One test's worker did, past the per-test timeout."""
    async with asyncio.timeout(STOP_GRACE_SECONDS):
        while not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=1.0)
    await asyncio.gather(task, return_exceptions=True)


# The deployments' grace between SIGTERM and SIGKILL (deploy/: TimeoutStopSec, stop_grace_period): a worker whose
# jobs still run past it is killed there, so a test's worker must have stopped by then too.
STOP_GRACE_SECONDS = 60.0


async def stop_within_grace(worker: Worker) -> None:
    """arq's stop (its running jobs cancelled, their ends awaited, its connections closed), failing the test with
    what runs if it takes longer than the deployments' grace. Two tests whose model hangs or always fails ran past
    the per-test timeout in full runs, saying nothing of where they waited (issue 37): if it is the stop, it now
    fails there, and says what it waits on."""
    try:
        async with asyncio.timeout(STOP_GRACE_SECONDS):
            await worker.close()
    except TimeoutError:
        where = io.StringIO()
        for task in asyncio.all_tasks():  # the job's own task and what it awaits, not only arq's wrapper
            task.print_stack(file=where)
        raise AssertionError(
            f"the worker did not stop within {STOP_GRACE_SECONDS:g} s; what runs:\n{where.getvalue()}"
        ) from None


async def stop_worker(worker: Worker, task: asyncio.Task[Any]) -> None:
    """A polling worker stopped for good: its loop, then each of its jobs, cancelled until they end (a job's cancel
    can be swallowed as the loop's can), the ended jobs taken off as arq's own loop does, then arq's close. A job
    that went on after its test ended ran into the next test's model and counts (seen under two busy loops)."""
    await cancel_polling(task)
    for job in list(worker.tasks.values()):
        await cancel_polling(job)
    for job_id, job in list(worker.tasks.items()):
        if job.done():
            del worker.tasks[job_id]
    await stop_within_grace(worker)


@dataclass
class Summarized:
    """What one summarize-now left: the session's outcome and record as Redis holds them, and the worker."""

    outcome: JobOutcome | None
    record: SummaryRecord | None
    worker: Worker


async def summarize_now(
    redis: ArqRedis, deps: Deps, key: str, reason: Reason = "manual", **worker_overrides: Any
) -> Summarized:
    """Queue a summarize job for `key` (it must be accepted: none queued or running), run a burst worker until
    the queue is empty, and load the session's outcome and record."""
    queued = await enqueue_summary(redis, SummarizeRequest(session_key=key, reason=reason))
    assert queued is not None, f"a summary job for {key} was already queued or running"
    worker = await run_burst(deps, **worker_overrides)
    return Summarized(await load_outcome(redis, key), await load_record(redis, key), worker)


@dataclass
class ProcfileWorker:
    """The worker exactly as the Procfile starts it (`worker:` line), in its own process."""

    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | forks.ForkedProcess | None = None

    def start(self) -> None:
        line = next(
            line for line in (ROOT / "Procfile").read_text(encoding="utf-8").splitlines() if line.startswith("worker:")
        )
        # Run as from an activated environment (the Procfile names the installed `nanobot-summary`): this Python's
        # bin folder first on PATH.
        env = {**self.env, "PATH": os.pathsep.join([str(Path(sys.executable).parent), self.env.get("PATH", "")])}
        with open(self.log_path, "ab") as log:
            command = line.partition(":")[2].split()
            self.process = forks.popen(command, env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""


async def start_worker(
    home: NanobotHome, redis: ArqRedis, redis_url: str, log_name: str, fork: bool = True, **env: str
) -> subprocess.Popen[bytes] | forks.ForkedProcess:
    """`nanobot-summary run` in a process (and session) of its own, returned once its first report is in Redis;
    the caller ends it (os.killpg). `fork=False`: a child of this process (harness/forks.py's `popen`)."""
    with (home.root / log_name).open("wb") as log:
        worker = forks.popen(
            [sys.executable, "-m", "worker", "run", "--no-embedded-redis"],
            process_env(home, redis_url, config=True, **env),
            cwd=ROOT,
            stdout=log,
            stderr=log,
            fork=fork,
        )

    async def reported() -> bool:
        return any(report.pid == worker.pid for report in await workers.reports(redis))

    try:
        await wait_until(reported, 90, f"the first report of the worker logging to {log_name}")
    except BaseException:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(30)
        raise
    return worker
