"""The arq worker: its options (functions, cron, timeouts), start-up (config, model, tokenizer), and `python -m worker`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import shlex
import signal
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from arq import cron, func
from arq.worker import Worker
from redis.exceptions import AuthenticationError as RedisAuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from nanobot_hooks.contract import JOB_DAILY, JOB_IDLE, JOB_SUMMARIZE
from nanobot_hooks.queue import open_client
from nanobot_hooks.settings import NoWorkspaceId, redacted_url, sentinel_target
from worker.connections import (port_taken, redis_problem, redis_settings, server_version, start_embedded,
                                version_problem)
from worker.summarize.daily import JOB_FLUSH_MEMORY, daily_summaries, flush_memory, requeue_flagged
from worker.summarize.idle import MAX_DEFERRALS, idle_summary
from worker.summarize.deps import Deps
from worker.summarize.jobs import CURRENT_JOB, summarize_session
from worker.model.llm import credentials_problem, routing_problem
from worker.memory.writer import MemoryFiles
from worker.text.clock import zone
from worker.text.redact import redact
from worker.errors import NanobotConfigError
from worker.nanobot.config import NanobotConfig, resolve_model, utc_by_default
from worker.memory.recall_index import RecallIndex, RecallIndexError
from worker.settings import Settings, SettingsError, load_settings
from worker.text.tokens import best_counter

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
    memory = MemoryFiles(settings.summary_workspace or nanobot.workspace, tz.key, settings.memory_max_facts,
                         hold=settings.memory_write == "idle")
    return Deps(settings=settings, nanobot=nanobot, model=model, fallback=fallback, counter=best_counter(), tz=tz,
                instructions=instructions, memory=memory, job_timeout=job_timeout(settings),
                recall=RecallIndex(memory.workspace, tz))


def job_timeout(settings: Settings) -> int:
    """arq's time for one try: room for several calls. A try that would run past it stops before the next
    call, keeps its finished chunks and retries (worker.state.progress). NANOBOT_SUMMARY_JOB_TIMEOUT sets it: arq
    runs the job of a killed worker again only this long + 10 s after it started."""
    if settings.summary_job_timeout is not None:
        return settings.summary_job_timeout
    return int(max(300, settings.summary_timeout * 6))


def notes_timezone(settings: Settings, nanobot: NanobotConfig) -> ZoneInfo:
    name = settings.summary_timezone or nanobot.timezone
    try:
        return zone(name)
    except ValueError:
        log.warning("nanobot's timezone %r is unknown; dating notes in UTC", name)
        return ZoneInfo("UTC")


def config_stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes when nanobot's config file is saved (or appears): a stat, no read."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


class ConfigWatch:
    """nanobot's config file, looked at before each job (one stat): a changed model, provider key, base URL,
    timezone or workspace is used from the next job on, without a restart, and said in one log line. A
    worker started before nanobot was configured picks the config up the same way."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.stamp = config_stamp(deps.settings.config_path)

    def current(self) -> Deps:
        stamp = config_stamp(self.deps.settings.config_path)
        if stamp == self.stamp:
            return self.deps
        self.stamp = stamp
        try:
            fresh = build_deps(self.deps.settings)
        except (SettingsError, NanobotConfigError) as exc:
            log.warning("nanobot config %s changed, but cannot be used (%s): keeping the previous one",
                        self.deps.settings.config_path, exc)
            return self.deps
        log.info("nanobot config %s changed: %s", self.deps.settings.config_path, config_changes(self.deps, fresh))
        if problem := credentials_problem(fresh.model):
            log.warning("%s", problem)
        # What the process learned stays: the tokenizer, and the models known to answer notes in prose.
        self.deps = dataclasses.replace(fresh, counter=self.deps.counter, prose_models=self.deps.prose_models)
        return self.deps


def config_changes(old: Deps, new: Deps) -> str:
    """What a config change means for the worker, in one line (no key value: only whether it changed)."""
    changes = []
    if (old.model.model, old.model.source) != (new.model.model, new.model.source):
        changes.append(f"summary model {old.model.model} -> {new.model.model} (from {new.model.source})")
    if old.model.api_key != new.model.api_key:
        changes.append("its API key changed" if new.model.api_key else "its API key was removed")
    if old.model.api_base != new.model.api_base:
        changes.append(f"base URL {old.model.api_base or 'none'} -> {new.model.api_base or 'none'}")
    if str(old.tz) != str(new.tz):
        changes.append(f"timezone {old.tz} -> {new.tz} (notes; the daily run keeps its start-up time)")
    if old.nanobot.workspace != new.nanobot.workspace:
        changes.append(f"workspace {old.nanobot.workspace} -> {new.nanobot.workspace}")
    return "; ".join(redact(change) for change in changes) or "nothing the worker uses"


async def follow_config(ctx: dict[str, Any]) -> None:
    """arq's on_job_start: the job sees the config as it is now (arq hands each job a copy of ctx)."""
    watch = ctx.get("config_watch")
    if watch is not None:
        ctx["deps"] = watch.current()


async def startup(ctx: dict[str, Any]) -> None:
    if "deps" not in ctx:
        ctx["deps"] = build_deps(load_settings())
    ctx.setdefault("config_watch", ConfigWatch(ctx["deps"]))
    deps: Deps = ctx["deps"]
    if problem := version_problem(str((await ctx["redis"].info("server")).get("redis_version", ""))):
        raise SettingsError(problem)  # `arq worker.app.WorkerSettings` stops here; `python -m worker` earlier
    log.info("summary model %s (from %s); keep %s; sessions in %s; queue %s", deps.model.model, deps.model.source,
             deps.settings.summary_keep, deps.nanobot.sessions_root, deps.settings.keys.queue)
    if not deps.nanobot.path.exists():
        log.warning("nanobot config %s not found: using nanobot's defaults (set NANOBOT_CONFIG)", deps.nanobot.path)
    if deps.settings.summary_timezone is None and deps.tz is not None and utc_by_default(deps.nanobot, str(deps.tz)):
        log.warning("notes are dated in UTC: neither nanobot's config (agents.defaults.timezone) nor TZ names a "
                    "timezone, and this host's is UTC or unknown; to date them in yours, set "
                    "NANOBOT_SUMMARY_TIMEZONE (e.g. Asia/Shanghai), or TZ (deploy/docker-compose.yml passes it in)")
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
        "functions": [func(summarize_session, name=JOB_SUMMARIZE, max_tries=settings.summary_max_tries + 1),
                      # The idle check re-defers itself (a Retry) for as long as its session stays active. Its
                      # timeout, like the crons', is never longer than a job's (see below).
                      func(idle_summary, name=JOB_IDLE, max_tries=MAX_DEFERRALS,
                           timeout=min(60, job_timeout(settings)))],
        # unique: two workers never both run a tick. arq re-runs a killed worker's job after the longest
        # timeout of any function, the crons' and the idle check's included: never longer than a job's.
        "cron_jobs": [cron(daily_summaries, name=JOB_DAILY, hour=hour, minute=minute, unique=True,
                           timeout=min(60, job_timeout(settings)))] + (
            # Every minute, and at start-up (held facts a stopped worker left behind).
            [cron(flush_memory, name=JOB_FLUSH_MEMORY, run_at_startup=True, unique=True,
                  timeout=min(60, job_timeout(settings)))] if settings.memory_write == "idle" else []),
        "timezone": tz,
        "after_job_end": requeue_flagged,
        "queue_name": settings.keys.queue,
        "redis_settings": redis_settings(settings.redis_url, **settings.redis_options()),
        **sentinel_pool(settings),
        "on_startup": startup,
        "on_job_start": follow_config,
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
                if isinstance(exc, RedisAuthenticationError):
                    log.warning("Redis refused the credentials (%s): fix REDIS_URL; no job starts until then", exc)
                else:
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
    """Every log line the worker prints goes through worker.text.redact: lines quote models, providers and
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


def wait_for_nanobot(settings: Settings, every: float = 2.0) -> Deps:
    """`build_deps`, waiting while nanobot has not yet run with its workspace (said once): the instance's
    namespace comes from the id nanobot writes at its first run, and a worker may well be started first."""
    said = False
    while True:
        try:
            return build_deps(settings)
        except NoWorkspaceId as exc:
            if not said:
                log.warning("%s; waiting for it", exc)
                said = True
            time.sleep(every)


def run_worker(args: argparse.Namespace) -> int:
    """`nanobot-summary run`: check the set-up (one line per problem, exit code 2), then run the worker."""
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s [%(job)s] %(message)s")
    quiet_and_redacted()
    lower_priority()
    try:
        settings = load_settings()
        deps = wait_for_nanobot(settings)
    except (SettingsError, NanobotConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if problem := credentials_problem(deps.model):
        # Not fatal: nanobot may get its key after the worker started (the worker follows its config).
        log.warning("%s", problem)
    embedded = None
    problem = redis_problem(settings.redis_url, **settings.redis_options())
    if problem is not None and (args.no_embedded_redis or port_taken(settings.redis_url)
                                or not problem.endswith(REDIS_ABSENT)):
        # A server that is there but refuses us (password, ACL, database) is never replaced by an embedded one.
        print(f"error: {problem}", file=sys.stderr)
        return 2
    with cleanup_on_signals() as cleanups:
        if problem is not None:
            try:
                embedded = start_embedded(settings.redis_url)
            except RuntimeError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            cleanups.append(embedded.stop)
            log.warning("Redis at %s did not answer: started an embedded redis-server there (no persistence; "
                        "data in %s, removed on exit). Set REDIS_URL to use your own.",
                        redacted_url(settings.redis_url), embedded.directory)
        if problem := version_problem(server_version(settings.redis_url, **settings.redis_options())):
            print(f"error: {problem}", file=sys.stderr)
            return 2
        if args.reload:
            # `arq --watch` restarts but keeps running the old code; a fresh process does not.
            from watchfiles import PythonFilter, run_process

            root = Path(__file__).resolve().parent.parent
            child = [sys.executable, "-m", "worker", "run", "--no-embedded-redis"] + (["-v"] if args.verbose else [])
            # A worker's shutdown closes its Redis pool and cancels its jobs: on a busy machine that takes
            # longer than watchfiles' 5 s, whose SIGKILL then takes this process down with a traceback.
            run_process(root / "worker", root / "nanobot_hooks", target=shlex.join(child),
                        target_type="command", watch_filter=PythonFilter(), sigint_timeout=30)
            return 0
        options = worker_options(deps.settings, deps.tz)  # type: ignore[arg-type]
        options["ctx"] = {"deps": deps}
        SteadyWorker(**options, burst=args.burst).run()
    return 0


# The end of redis_problem's line for a server that is not there at all (the only case an embedded one may fill).
REDIS_ABSENT = "start it, or set REDIS_URL"


@contextlib.contextmanager
def cleanup_on_signals() -> Iterator[list[Callable[[], None]]]:
    """Run the cleanups (the embedded Redis's stop: its folder holds a config with the password) on every
    exit: normal, an exception, SIGINT or SIGTERM before arq installs its own handlers (arq's handlers end
    its loop, so the `finally` below runs then too)."""
    cleanups: list[Callable[[], None]] = []

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield cleanups
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for cleanup in reversed(cleanups):
            cleanup()
