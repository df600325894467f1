"""arq's side of the worker.

Its options (functions, cron, timeouts, hooks), and the Worker that outlives a Redis outage."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import tzinfo
from typing import Any

from arq import cron, func
from arq.worker import Worker
from redis.exceptions import AuthenticationError as RedisAuthenticationError
from redis.exceptions import WatchError

from nanobot_hooks.contract.client import UNREAD_JOB, close_sentinels, open_client
from nanobot_hooks.contract.keys import JOB_DAILY, JOB_IDLE, JOB_SUMMARIZE, Keys
from nanobot_hooks.contract.records import utcnow
from worker.connections import CALL_TIMEOUT, REDIS_GONE, redis_gone
from worker.service.build import job_timeout
from worker.service.config_watch import follow_config
from worker.service.startup import startup
from worker.settings import Settings, clock_time
from worker.state import workers
from worker.summarize.daily import JOB_FLUSH_MEMORY, daily_summaries, flush_memory, requeue_flagged
from worker.summarize.idle import MAX_DEFERRALS, idle_summary
from worker.summarize.jobs import summarize_session

log = logging.getLogger("worker")


def worker_options(settings: Settings, tz: tzinfo | None = None) -> dict[str, Any]:
    """Everything arq needs; `keep_result=0` on the worker frees a session's job id as soon as it ends."""
    hour, minute, second = clock_time(settings.summary_daily_at)
    return {
        # One pickup more than our tries: after a crash or a timeout in the last try the job still runs,
        # to leave its outcome ("gave up"), instead of arq failing it unseen.
        "functions": [
            func(summarize_session, name=JOB_SUMMARIZE, max_tries=settings.summary_max_tries + 1),
            # The idle check re-defers itself (a Retry) for as long as its session stays active. Its
            # timeout, like the crons', is never longer than a job's (see below).
            func(idle_summary, name=JOB_IDLE, max_tries=MAX_DEFERRALS, timeout=min(60, job_timeout(settings))),
            # Its timeout under the jobs': arq's in-progress marks last the longest function timeout + 10 s,
            # and a mark left by a killed worker must not outlive the job timeout's (test_faults).
            func(unread_job, name=UNREAD_JOB, max_tries=1, timeout=min(10, job_timeout(settings))),
        ],
        # unique: two workers of one instance never both run a tick; named under the instance's namespace
        # (arq's job id is the name and the tick), so workers of other instances on the Redis run theirs. arq
        # re-runs a killed worker's job after the longest timeout of any function, the crons' and the idle
        # check's included: never longer than a job's.
        "cron_jobs": [
            cron(
                daily_summaries,
                name=settings.keys.cron(JOB_DAILY),
                hour=hour,
                minute=minute,
                second=second,
                unique=True,
                timeout=min(60, job_timeout(settings)),
            )
        ]
        + (
            # Every minute, and at start-up (held facts a stopped worker left behind).
            [
                cron(
                    flush_memory,
                    name=settings.keys.cron(JOB_FLUSH_MEMORY),
                    run_at_startup=True,
                    unique=True,
                    timeout=min(60, job_timeout(settings)),
                )
            ]
            if settings.memory_write == "idle"
            else []
        ),
        "timezone": tz,
        "after_job_end": requeue_flagged,
        "queue_name": settings.keys.queue,
        **arq_pool(settings),
        "on_startup": startup,
        "on_job_start": follow_config,
        "keep_result": 0,
        "max_tries": settings.summary_max_tries + 1,
        "job_timeout": job_timeout(settings),
        "health_check_interval": 30,
        "max_jobs": 10,
    }


async def unread_job(ctx: dict[str, Any]) -> dict[str, str]:
    """A queued job that is not JSON (contract.client.job_from_json), never looked into.

    Version 0.1.0 queued its jobs pickled, and a forged one could run code if unpickled. One line says whose it was;
    ending it frees the id, so the session's next trigger (a turn over the threshold, the hooks' idle check, the daily
    run) queues it again as JSON, and nothing of the session is lost: the messages are all in its file."""
    job_id = str(ctx.get("job_id", ""))
    keys: Keys = Keys.of(ctx["redis"])
    session = keys.session_of_job(job_id) or job_id.removeprefix(keys.idle_job_id(""))
    log.warning(
        "%s: a queued job written by another version (not JSON: version 0.1.0 pickled its jobs) was ended "
        "unread; the session's next trigger queues it again",
        session,
    )
    return {"status": "unread", "session": session}


def arq_pool(settings: Settings) -> dict[str, Any]:
    """arq's pool, made as every client is (contract.open_client).

    Each call bounded (arq's own pool sets no socket timeout, so a call caught by a failover could wait forever and hold
    a job slot), behind Sentinel the primary asked for at each new connection; and jobs read as that client writes them,
    as JSON, never unpickled."""
    pool = open_client(settings.redis_url, CALL_TIMEOUT, settings.redis_options(), keys=settings.keys)
    return {"redis_pool": pool, "job_serializer": pool.job_serializer, "job_deserializer": pool.job_deserializer}


REDIS_RETRY_SECONDS = 1.0


class SteadyWorker(Worker):
    """arq's Worker, made to outlive a Redis outage.

    arq's loop raises at the first poll that fails and the process exits (honcho then stops nanobot's gateway with it);
    this one says so once, polls again every second, and says so once more when Redis answers. A job running meanwhile
    ends without its record (the next trigger runs it again); a Redis without persistence comes back without the queued
    jobs."""

    redis_down = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started_at = utcnow()

    async def record_health(self) -> None:
        """arq's heartbeat, and with it the worker's own report (worker/state/workers.py).

        The settings it runs with and the jobs it runs, which `status` and `doctor` read to tell a live worker from one
        killed or frozen, and a job a dead worker left marked running."""
        due = time.time() - self._last_health_check >= self.health_check_interval
        await super().record_health()
        if due:  # the line names its writer: a reader tells the line a killed worker left from a live one's
            await self.pool.append(self.health_check_key, f" worker={workers.this_worker()}")
        if due and "deps" in self.ctx:
            deps = self.ctx["deps"]
            running = [job_id for job_id, task in self.tasks.items() if not task.done()]
            await workers.publish(
                self.pool,
                workers.settings_report(deps.settings, deps.model.model, job_timeout(deps.settings)),
                self.started_at,
                running=running,
                beat_seconds=self.health_check_interval,
            )

    async def close(self) -> None:
        """A clean stop withdraws the report: none is left to age into an alarm about a dead worker.

        A stop while Redis does not answer (a failover under way) ends quietly: arq's close writes each cancelled job
        back to the queue, and the one that cannot be written runs again once its in-progress mark expires."""
        if self._pool is not None:
            try:
                await workers.withdraw(self.pool)
            except (*REDIS_GONE, WatchError):
                pass  # Redis gone: the report expires by itself
        pool = self._pool.connection_pool if self._pool is not None else None
        try:
            await super().close()
        except (*REDIS_GONE, WatchError) as exc:
            log.warning("stopped while Redis did not answer (%s): a job cut short runs again later", exc)
            await self._close_pool()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this stop is itself cancelled
            # A job cancelled between its end and its after_job_end (arq's close gathers the cancelled jobs
            # without return_exceptions): its outcome is kept already, so the stop goes on quietly.
            await self._close_pool()
        finally:
            await close_sentinels(pool)  # arq's close leaves them open

    async def _close_pool(self) -> None:
        if self._pool is not None:
            await self._pool.close(close_connection_pool=True)
            self._pool = None

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """A job this worker runs is never started again.

        arq tells a running job by its in-progress mark alone: with the mark lost (evicted under allkeys-lru or
        volatile-ttl, a write lost in a failover or an AOF restart) the job, still in the queue while it runs, was
        started at the next poll, beside itself. (Another worker may still start it: the session's run lock,
        worker/state/running.py, defers that start. The mark is not put back: a job ending between the poll and that
        write would leave a mark that held up the session's next job until it expired.)"""
        await self.start_slotted([job_id for job_id in job_ids if not self.runs(job_id.decode())])

    def runs(self, job_id: str) -> bool:
        """Whether a job of this id runs in this worker now."""
        task = self.tasks.get(job_id)
        return task is not None and not task.done()

    async def start_slotted(self, job_ids: list[bytes]) -> None:
        """Starts jobs as arq does, and gives back the slot of a job whose start Redis cut off.

        arq takes a slot (its semaphore and job counter) for a job before the Redis calls that start it, and gives it
        back only when they answer: each connection lost there kept one slot for good, and after `max_jobs` of them the
        worker took no job again, silently. The slot of the job being started when Redis went away is given back (arq
        gives up the rest of the list at that point)."""
        try:
            await super().start_jobs(job_ids)
        except Exception:
            self.job_counter -= 1
            self.sem.release()
            raise

    async def _poll_iteration(self) -> None:  # one step of arq 0.28's loop (pinned in pyproject.toml)
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # A stop (arq's handle_sig cancels this loop) that a Redis call swallowed: redis-py sends each command
            # under asyncio.wait_for, which on Python 3.11 returns the result of a send that ended just as the
            # cancel came and drops the cancel (CPython gh-86296). The loop then polled on, running jobs, until
            # killed at the end of the grace. The cancel still counts (`cancelling`): honoured here.
            raise asyncio.CancelledError
        try:
            await super()._poll_iteration()
        except (*REDIS_GONE, WatchError) as exc:
            if not redis_gone(exc):
                raise
            if not self.redis_down:
                self.redis_down = True
                if isinstance(exc, RedisAuthenticationError):
                    log.warning("Redis refused the credentials (%s): fix REDIS_URL; no job starts until then", exc)
                else:
                    log.warning("Redis does not answer (%s): no job starts until it does", exc)
            await asyncio.sleep(REDIS_RETRY_SECONDS)
            return
        if self.redis_down:
            self.redis_down = False
            log.info("Redis answers again: jobs start again")
