"""The arq worker: its options (functions, cron, timeouts), start-up (config, model, tokenizer), and `python -m worker`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shlex
import sqlite3
import sys
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from arq import cron, func
from arq.worker import Worker
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from nanobot_hooks.contract import JOB_DAILY, JOB_SUMMARIZE
from nanobot_hooks.queue import open_client
from nanobot_hooks.settings import redacted_url, sentinel_target
from worker.connections import answers, redis_settings, server_version, start_embedded, version_problem
from worker.cron import daily_summaries, requeue_flagged
from worker.jobs import CURRENT_JOB, Deps, summarize_session
from worker.llm import routing_problem
from worker.memory import MemoryFiles
from worker.redact import redact
from worker.errors import NanobotConfigError
from worker.nanobot_config import NanobotConfig, resolve_model
from worker.recall_index import RecallIndex, RecallIndexError
from worker.settings import Settings, SettingsError, load_settings
from worker.tokens import best_counter

log = logging.getLogger("worker")


def build_deps(settings: Settings) -> Deps:
    nanobot = NanobotConfig.load(settings.config_path)
    settings = settings.for_workspace(nanobot.workspace)  # this instance's namespace: its queue and keys
    model = resolve_model(settings.summary_model, nanobot)
    fallback = nanobot.with_credentials(settings.summary_fallback_model, "NANOBOT_SUMMARY_FALLBACK_MODEL") \
        if settings.summary_fallback_model else None
    for choice in (model, fallback):
        if choice is not None and (problem := routing_problem(choice.model)):
            raise SettingsError(f"summary model {choice.model!r} (from {choice.source}) cannot be used: {problem} "
                                "Name it as provider/model, e.g. NANOBOT_SUMMARY_MODEL=deepseek/deepseek-chat")
    instructions = None
    if settings.summary_prompt_file is not None:
        try:
            instructions = settings.summary_prompt_file.expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise SettingsError(f"NANOBOT_SUMMARY_PROMPT_FILE: cannot read it ({exc})") from None
    tz = notes_timezone(settings, nanobot)
    memory = MemoryFiles(settings.summary_workspace or nanobot.workspace, tz.key, settings.memory_max_facts)
    return Deps(settings=settings, nanobot=nanobot, model=model, fallback=fallback, counter=best_counter(), tz=tz,
                instructions=instructions, memory=memory, job_timeout=job_timeout(settings),
                recall=RecallIndex(memory.workspace, tz))


def job_timeout(settings: Settings) -> int:
    """arq's time for one try: room for several calls. A try that would run past it stops before the next
    call, keeps its finished chunks and retries (worker.progress). NANOBOT_SUMMARY_JOB_TIMEOUT sets it: arq
    runs the job of a killed worker again only this long + 10 s after it started."""
    if settings.summary_job_timeout is not None:
        return settings.summary_job_timeout
    return int(max(300, settings.summary_timeout * 6))


def notes_timezone(settings: Settings, nanobot: NanobotConfig) -> ZoneInfo:
    name = settings.summary_timezone or nanobot.timezone
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        log.warning("nanobot's timezone %r is unknown; dating notes in UTC", name)
        return ZoneInfo("UTC")


async def startup(ctx: dict[str, Any]) -> None:
    if "deps" not in ctx:
        ctx["deps"] = build_deps(load_settings())
    deps: Deps = ctx["deps"]
    if problem := version_problem(str((await ctx["redis"].info("server")).get("redis_version", ""))):
        raise SettingsError(problem)  # `arq worker.app.WorkerSettings` stops here; `python -m worker` earlier
    log.info("summary model %s (from %s); keep %s; sessions in %s; queue %s", deps.model.model, deps.model.source,
             deps.settings.summary_keep, deps.nanobot.sessions_root, deps.settings.keys.queue)
    if not deps.nanobot.path.exists():
        log.warning("nanobot config %s not found: using nanobot's defaults (set NANOBOT_CONFIG)", deps.nanobot.path)
    try:
        _ = deps.nanobot.sessions_dir
    except NanobotConfigError as exc:
        # Not fatal: nanobot may simply not have run yet; each job reports it again until it has.
        log.warning("%s", exc)
        return
    await sweep_recall_index(deps)


async def sweep_recall_index(deps: Deps) -> None:
    """Catch the recall index up with sessions and memory files that changed while no worker ran
    (and build it when missing); off the turn's path, and never fatal."""
    if deps.recall is None:
        return
    try:
        log.info("%s", await asyncio.to_thread(deps.recall.refresh, deps.sessions_dir))
    except (RecallIndexError, sqlite3.Error, OSError, NanobotConfigError) as exc:
        log.warning("recall index not refreshed: %s", exc)


def worker_options(settings: Settings, tz: ZoneInfo | None = None) -> dict[str, Any]:
    """Everything arq needs; `keep_result=0` on the worker frees a session's job id as soon as it ends."""
    hour, minute = (int(part) for part in settings.summary_daily_at.split(":"))
    return {
        # One pickup more than our tries: after a crash or a timeout in the last try the job still runs,
        # to leave its outcome ("gave up"), instead of arq failing it unseen.
        "functions": [func(summarize_session, name=JOB_SUMMARIZE, max_tries=settings.summary_max_tries + 1)],
        # unique: two workers never both run a tick. arq re-runs a killed worker's job after the longest
        # timeout of any function, the cron's included: never longer than a job's.
        "cron_jobs": [cron(daily_summaries, name=JOB_DAILY, hour=hour, minute=minute, unique=True,
                           timeout=min(60, job_timeout(settings)))],
        "timezone": tz,
        "after_job_end": requeue_flagged,
        "queue_name": settings.keys.queue,
        "redis_settings": redis_settings(settings.redis_url, **settings.redis_options()),
        **sentinel_pool(settings),
        "on_startup": startup,
        "keep_result": 0,
        "max_tries": settings.summary_max_tries + 1,
        "job_timeout": job_timeout(settings),
        "health_check_interval": 30,
        "max_jobs": 10,
    }


# Seconds for one Redis call of the worker behind Sentinel: more than a record's WAIT for its replica.
SENTINEL_CALL_TIMEOUT = 10.0


def sentinel_pool(settings: Settings) -> dict[str, Any]:
    """Behind Sentinel, the worker's own client for arq: arq's Sentinel pool sets no socket timeout, so a call
    caught by a failover could wait forever and hold a job slot; this one is bounded (and asks the Sentinels
    for the primary at each new connection, like arq's)."""
    if sentinel_target(settings.redis_url) is None:
        return {}
    return {"redis_pool": open_client(settings.redis_url, SENTINEL_CALL_TIMEOUT, keys=settings.keys)}


# What a Redis that went away (restarted, failed over, cut off) raises through redis-py, and what it leaves unwrapped.
REDIS_GONE = (RedisConnectionError, RedisTimeoutError, OSError)
REDIS_RETRY_SECONDS = 1.0


class SteadyWorker(Worker):
    """arq's Worker, made to outlive a Redis outage. arq's loop raises at the first poll that fails and the
    process exits (honcho then stops nanobot's gateway with it); this one says so once, polls again every
    second, and says so once more when Redis answers. A job running meanwhile ends without its record (the
    next trigger runs it again); a Redis without persistence comes back without the queued jobs."""

    redis_down = False

    async def _poll_iteration(self) -> None:  # one step of arq 0.28's loop (pinned in pyproject.toml)
        try:
            await super()._poll_iteration()
        except REDIS_GONE as exc:
            if not self.redis_down:
                self.redis_down = True
                log.warning("Redis does not answer (%s): no job starts until it does", exc)
            await asyncio.sleep(REDIS_RETRY_SECONDS)
            return
        if self.redis_down:
            self.redis_down = False
            log.info("Redis answers again: jobs start again")


def __getattr__(name: str) -> Any:
    # `arq worker.app.WorkerSettings` works too; built on access so importing this module reads no environment.
    if name == "WorkerSettings":
        settings = load_settings()
        nanobot = NanobotConfig.load(settings.config_path)
        return worker_options(settings.for_workspace(nanobot.workspace), notes_timezone(settings, nanobot))
    raise AttributeError(name)


class RedactingFilter(logging.Filter):
    """Every log line the worker prints goes through worker.redact: lines quote models, providers and
    conversations, and no secret value may reach a log. Each line also names the job it belongs to."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.job = CURRENT_JOB.get() or "-"
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


# Third-party loggers that print whole requests and answers at debug level, with their own handlers.
PAYLOAD_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "httpx", "httpcore", "openai")


def quiet_and_redacted() -> None:
    """Every handler redacts; the loggers that would print payloads (conversations, keys) stay at WARNING,
    also with -v."""
    for name in PAYLOAD_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in ("", *PAYLOAD_LOGGERS):
        for handler in logging.getLogger(name).handlers:
            handler.addFilter(RedactingFilter())


# The worker runs beside the user's assistant, often on the same small machine: its CPU work (parsing
# answers, memory files, the recall index) must not slow down a turn (scripts/bench_compare.py).
NICENESS = 10


def lower_priority() -> int:
    """Yield the CPU to nanobot: raise this process's niceness by NICENESS. Returns the niceness now."""
    try:
        return os.nice(NICENESS)
    except (AttributeError, OSError):  # not on this platform, or not allowed: run as is
        return os.nice(0) if hasattr(os, "nice") else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m worker",
        description="Run the nanobot summary worker. Configuration comes from the environment "
        "(NANOBOT_SUMMARY_*, NANOBOT_CONFIG, REDIS_URL); see the README.",
    )
    parser.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    parser.add_argument("--no-embedded-redis", action="store_true",
                        help="fail instead of starting a local redis-server when REDIS_URL answers nothing")
    parser.add_argument("--reload", action="store_true",
                        help="development: restart the worker when a .py file of the project changes")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s [%(job)s] %(message)s")
    quiet_and_redacted()
    lower_priority()
    try:
        settings = load_settings()
        deps = build_deps(settings)
    except (SettingsError, NanobotConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    embedded = None
    if not answers(settings.redis_url, **settings.redis_options()):
        if args.no_embedded_redis:
            print(f"error: Redis at {redacted_url(settings.redis_url)} does not answer", file=sys.stderr)
            return 2
        try:
            embedded = start_embedded(settings.redis_url)
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        log.warning("Redis at %s did not answer: started an embedded redis-server there (no persistence; "
                    "data in %s). Set REDIS_URL to use your own.", redacted_url(settings.redis_url),
                    embedded.directory)
    try:
        if problem := version_problem(server_version(settings.redis_url, **settings.redis_options())):
            print(f"error: {problem}", file=sys.stderr)
            return 2
        if args.reload:
            # `arq --watch` restarts but keeps running the old code; a fresh process does not.
            from watchfiles import PythonFilter, run_process

            root = Path(__file__).resolve().parent.parent
            child = [sys.executable, "-m", "worker", "--no-embedded-redis"] + (["-v"] if args.verbose else [])
            run_process(root / "worker", root / "nanobot_hooks", target=shlex.join(child),
                        target_type="command", watch_filter=PythonFilter())
            return 0
        options = worker_options(deps.settings, deps.tz)  # type: ignore[arg-type]
        options["ctx"] = {"deps": deps}
        SteadyWorker(**options, burst=args.burst).run()
    finally:
        if embedded is not None:
            embedded.stop()
    return 0
