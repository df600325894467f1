"""Soak benchmark of many nanobot instances on one Redis: a simulated day of cron ticks in a few real minutes.

Issue 26: 20 instances on one Redis for 24 simulated hours; every instance gets its daily run and every minute's
memory write, and `status` of each shows only its own. Each instance is a throwaway nanobot home with a namespace
(inst-00, inst-01, ...) and a session of its own, and a real arq worker (the product's SteadyWorker, its crons),
all in this process, on a redis-server the script starts; a fake OpenAI-compatible server answers the daily
run's summary jobs. arq's clock runs `--scale` times faster here, from a start every worker has polled at. The
cron functions count their own runs by tick (arq's job id `<cron name>:<tick ms>`), read once every tick of the
window was queued and ended. Exit 1 when a tick was missed, ran twice or for another instance, when a status
names another instance, or when a key carries no instance's namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import re
import resource
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the worker runs from this checkout

from arq.connections import ArqRedis
from arq.cron import CronJob, next_cron
from arq.utils import to_unix_ms

from harness.fakellm import FakeLLM, Reply
from harness.models import summary_json
from harness.redis_server import RedisServer
from harness.sandbox import NanobotHome
from harness.transcripts import conversation
from nanobot_hooks.contract.keys import Keys
from worker.commands import status_text
from worker.connections import queue_client
from worker.service.arq_worker import SteadyWorker, worker_options
from worker.service.build import build_deps
from worker.settings import Settings
from worker.state.snapshot import gather
from worker.summarize.daily import daily_summaries, flush_memory
from worker.summarize.deps import Deps

KINDS = {daily_summaries: "daily", flush_memory: "minute"}  # the cron functions counted, by what they are
# arq's own keys of a job, `arq:<kind>:<job id>`: the job id carries the namespace (tests/scenarios/test_namespace.py).
ARQ_JOB_KEY = re.compile(r"^arq:(job|in-progress|retry|result):")
# What names an instance in status output: its namespace or its session key.
NAMES_AN_INSTANCE = re.compile(r"inst-(\d+)|user-(\d+)@example\.com")


def session_key(i: int) -> str:
    return f"email:user-{i:02d}@example.com"  # an address: what another instance's status must never show


class ScaledClock:
    """Epoch seconds running `scale` times faster than the real ones from `go()` on; held at `start` before."""

    def __init__(self, scale: float, start: float) -> None:
        self.scale, self.start = scale, start
        self.real_start: float | None = None

    def go(self) -> None:
        self.real_start = time.time()

    def time(self) -> float:
        return self.start if self.real_start is None else self.start + (time.time() - self.real_start) * self.scale

    def timestamp_ms(self) -> int:
        return int(round(self.time() * 1000))

    def datetime_class(self) -> type[datetime]:
        clock = self

        class ScaledDatetime(datetime):
            @classmethod
            def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
                return datetime.fromtimestamp(clock.time(), tz)

        return ScaledDatetime


@contextlib.contextmanager
def arq_runs_on(clock: ScaledClock) -> Iterator[None]:
    """arq's clock replaced by `clock` in this process, until the block ends. Why patch: arq's cron has minute
    resolution and the product has no time-scale knob, by design, so a simulated day needs arq's own reads of
    the time to run faster: `datetime.now` in the worker (the cron's ticks and `_defer_until`) and
    `timestamp_ms` wherever arq scores, picks and defers jobs. Timeouts and key expiries stay in real time."""
    names = [("arq.worker.datetime", clock.datetime_class())] + [
        (f"arq.{module}.timestamp_ms", clock.timestamp_ms) for module in ("worker", "connections", "jobs", "utils")
    ]
    with contextlib.ExitStack() as stack:
        for name, value in names:
            stack.enter_context(mock.patch(name, value))
        yield


class Instance:
    """One nanobot instance: its home, the worker's deps, and the ticks its crons ran (tick ms, by kind). A plain
    class: a dataclass needs its module in sys.modules, which a script loaded by the tests is not."""

    def __init__(self, number: int, home: NanobotHome, deps: Deps) -> None:
        self.number, self.home, self.deps = number, home, deps
        self.ran: dict[str, list[int]] = {"daily": [], "minute": []}
        self.foreign = 0  # runs whose arq context belonged to another instance

    @property
    def keys(self) -> Keys:
        return self.deps.settings.keys


def make_instance(i: int, folder: Path, llm_url: str, redis_url: str, daily_at: str) -> Instance:
    home = NanobotHome.create(folder / f"inst-{i:02d}", llm_url)
    home.write_session(session_key(i), conversation(12, user=f"user-{i:02d}: question {{i}} about the deploy"))
    settings = Settings(
        redis_url=redis_url,
        config=home.config_path,
        summary_namespace=f"inst-{i:02d}",
        memory_write="idle",
        summary_daily_at=daily_at,
        summary_timezone="UTC",
    )
    return Instance(i, home, build_deps(settings))


def counting(instance: Instance, kind: str, real: Callable[[dict[str, Any]], Awaitable[Any]]) -> Any:
    """The cron function, recording the tick it runs for (its job id ends in the tick's ms) and whose it is."""

    async def counted(ctx: dict[str, Any]) -> Any:
        if Keys.of(ctx["redis"]) != instance.keys or ctx["deps"].settings.keys != instance.keys:
            instance.foreign += 1
        instance.ran[kind].append(int(str(ctx["job_id"]).rsplit(":", 1)[1]))
        return await real(ctx)

    return counted


def counted_crons(instance: Instance) -> list[CronJob]:
    return [
        dataclasses.replace(job, coroutine=counting(instance, KINDS[job.coroutine], job.coroutine))
        for job in worker_options(instance.deps.settings, instance.deps.tz)["cron_jobs"]
    ]


def start_worker(instance: Instance, poll_delay: float) -> tuple[SteadyWorker, asyncio.Task[Any]]:
    """The product's worker class with the instance's options, polling in this process."""
    options = {
        **worker_options(instance.deps.settings, instance.deps.tz),
        "cron_jobs": counted_crons(instance),
        "ctx": {"deps": instance.deps},
        "poll_delay": poll_delay,
        "handle_signals": False,
    }
    worker = SteadyWorker(**options)
    return worker, asyncio.create_task(worker.async_run())


def expected_ticks(job: CronJob, start: datetime, end: datetime) -> list[int]:
    """The ticks (ms) arq owes `job` from a first poll at `start` through `end`: `calculate_next` steps from
    the previous tick, so a late poll runs a tick late but never skips it."""
    ticks = [to_unix_ms(start)] if job.run_at_startup else []
    moment = start
    while (
        moment := next_cron(
            moment,
            month=job.month,
            day=job.day,
            weekday=job.weekday,
            hour=job.hour,
            minute=job.minute,
            second=job.second,
            microsecond=job.microsecond,
        )
    ) <= end:
        ticks.append(to_unix_ms(moment))
    return ticks


async def until(condition: Callable[[], Awaitable[bool] | bool], timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if await result if isinstance(result, Awaitable) else result:
            return True
        await asyncio.sleep(step)
    return False


async def drained(pool: ArqRedis, workers: list[SteadyWorker], instances: list[Instance], end: datetime) -> bool:
    """Every worker queued its ticks through `end`, and no job due by then is still queued or running (arq
    keeps a job in the queue until it ends)."""
    if not all(job.next_run is not None and job.next_run > end for w in workers for job in w.cron_jobs):
        return False
    counts = [await pool.zcount(i.keys.queue, "-inf", to_unix_ms(end)) for i in instances]
    return not any(counts)


def others_named(text: str, own: int) -> bool:
    return any(int(a or b) != own for a, b in NAMES_AN_INSTANCE.findall(text))


async def status_crossings(redis_url: str, instances: list[Instance]) -> tuple[int, int]:
    """`nanobot-summary status --json` (and its text) of each instance, read as the command reads it: lines
    naming another instance, and how many statuses show their own session."""
    crossing = own = 0
    for instance in instances:
        pool = queue_client(redis_url, instance.keys.queue)
        try:
            state = await gather(pool)
        finally:
            await pool.aclose()
        shown = json.dumps(
            {"redis": redis_url, "namespace": instance.deps.settings.summary_namespace, **state},
            ensure_ascii=False,
            indent=2,
        ).splitlines() + status_text.render(state, 200)
        crossing += sum(others_named(line, instance.number) for line in shown)
        own += any(session_key(instance.number) in line for line in shown)
    return crossing, own


async def stray_keys(pool: ArqRedis, instances: list[Instance]) -> tuple[list[str], int]:
    """Every key in Redis, and those named under no instance's namespace (directly or through arq's job id)."""
    names = [k.decode() async for k in pool.scan_iter(match="*", count=1000)]
    prefixes = tuple(i.keys.prefix for i in instances)
    return [n for n in names if not ARQ_JOB_KEY.sub("", n).startswith(prefixes)], len(names)


def tally(instances: list[Instance], expected: dict[str, list[int]]) -> dict[str, Any]:
    figures: dict[str, Any] = {"foreign_runs": sum(i.foreign for i in instances), "missed": 0, "twice": 0}
    for kind, ticks in expected.items():
        got = [len(set(ticks) & set(i.ran[kind])) for i in instances]
        figures[kind] = {
            "expected": len(ticks) * len(instances),
            "got": sum(got),
            "min": min(got),
            "max": max(got),
            "per_instance": len(ticks),
        }
        figures["missed"] += figures[kind]["expected"] - sum(got)
        figures["twice"] += sum(n - 1 for i in instances for n in Counter(i.ran[kind]).values() if n > 1)
    return figures


async def soak(args: argparse.Namespace, folder: Path, llm_url: str, redis_url: str) -> dict[str, Any]:
    # Whole seconds, never on a tick (:00.123456), and never a minute's first: arq's next_cron steps a second past
    # the moment it is given, so a first poll at :00 owes no tick at :00.123 and the window one tick fewer.
    first = round(time.time())
    clock = ScaledClock(args.scale, float(first + (first % 60 == 0)))
    start = datetime.fromtimestamp(clock.start, timezone.utc)
    end = start + timedelta(hours=args.hours)
    daily_at = (start + (end - start) / 2).strftime("%H:%M")  # one daily tick mid-window (per simulated day)
    instances = [make_instance(i, folder, llm_url, redis_url, daily_at) for i in range(args.instances)]
    pool = queue_client(redis_url)
    with arq_runs_on(clock):
        running = [start_worker(i, args.poll_delay) for i in instances]
        workers = [w for w, _ in running]
        try:
            # Held at `start` until every worker has polled once: all owe the same ticks from there.
            if not await until(lambda: all(j.next_run for w in workers for j in w.cron_jobs), args.timeout):
                raise RuntimeError(f"the workers did not all poll within {args.timeout:g} s of their start")
            clock.go()
            began = time.monotonic()
            await until(lambda: clock.time() >= end.timestamp(), args.hours * 3600 / args.scale + args.timeout, 0.5)
            figures: dict[str, Any] = {
                "drained": await until(lambda: drained(pool, workers, instances, end), args.timeout, 0.2)
            }
            figures["real_seconds"] = round(time.monotonic() - began, 1)
            figures["status_crossings"], figures["own_status"] = await status_crossings(redis_url, instances)
            strays, figures["keys"] = await stray_keys(pool, instances)  # while the workers still poll
        finally:
            for _, task in running:
                task.cancel()
            await asyncio.gather(*(task for _, task in running), return_exceptions=True)
            for worker in workers:
                await worker.close()
            await pool.aclose()
    expected = {
        KINDS[job.coroutine]: expected_ticks(job, start, end)
        for job in worker_options(instances[0].deps.settings, instances[0].deps.tz)["cron_jobs"]
    }
    return {**figures, **tally(instances, expected), "strays": strays[:3], "stray_count": len(strays)}


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, FakeLLM() as llm:
        llm.default = Reply(summary_json())
        redis = RedisServer(Path(tmp) / "redis").start()
        try:
            return await soak(args, Path(tmp), llm.url, redis.url())
        finally:
            redis.stop()


def resident_mb() -> tuple[float, float]:
    """The process's resident memory now and at its peak, in MB."""
    now = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    return now, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def report(args: argparse.Namespace, f: dict[str, Any]) -> bool:
    """The table; whether every instance got every tick and nothing crossed."""
    ticks_ok = f["missed"] == 0 and f["twice"] == 0 and f["foreign_runs"] == 0
    now, peak = resident_mb()
    d, m = f["daily"], f["minute"]
    print(
        f"{args.instances} instances on one Redis, {args.hours:g} simulated hours at {args.scale:g}x: "
        f"{f['real_seconds']:.1f} s real{'' if f['drained'] else ' (queues not drained in time)'}"
    )
    print(
        f"daily runs:      {d['got']:,} of {d['expected']:,} expected; per instance min {d['min']} "
        f"(expected {d['per_instance']})"
    )
    print(
        f"minute writes:   {m['got']:,} of {m['expected']:,} expected; per instance min {m['min']:,} max "
        f"{m['max']:,} (expected {m['per_instance']:,}: every minute + 1 at start-up)"
    )
    print(f"missed ticks: {f['missed']}; ticks run twice: {f['twice']}; runs for another instance: {f['foreign_runs']}")
    print(
        f"status lines naming another instance: {f['status_crossings']} (own session shown in "
        f"{f['own_status']} of {args.instances})"
    )
    print(
        f"keys without a namespace: {f['stray_count']} of {f['keys']:,}"
        + (f" e.g. {f['strays']}" if f["strays"] else "")
    )
    print(f"resident memory: {now:.0f} MB now, {peak:.0f} MB peak")
    print(f"every instance got every tick: {'yes' if ticks_ok else 'no'}")
    print(
        json.dumps(
            {
                "instances": args.instances,
                "hours": args.hours,
                "scale": args.scale,
                "rss_mb": round(now),
                **{k: v for k, v in f.items() if k != "strays"},
            }
        )
    )
    return ticks_ok and f["status_crossings"] == 0 and f["stray_count"] == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=20, help="nanobot instances on the Redis (20)")
    parser.add_argument("--hours", type=float, default=24.0, help="simulated hours (24)")
    parser.add_argument(
        "--scale", type=float, default=240.0, help="simulated seconds per real second (240: 24 hours in 6 minutes)"
    )
    parser.add_argument(
        "--poll-delay",
        type=float,
        default=None,
        help="seconds between a worker's polls (default: 8 polls per simulated minute, <= 0.05)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        help="real seconds allowed for the start-up and for the queues to drain at the end (180)",
    )
    args = parser.parse_args(argv)
    if args.instances < 1 or args.scale <= 0 or args.hours * 60 < 2:
        parser.error("needs one instance or more, a positive scale and two simulated minutes or more")
    if args.poll_delay is None:
        args.poll_delay = max(0.005, min(0.05, 60 / args.scale / 8))
    return 0 if report(args, asyncio.run(bench(args))) else 1


if __name__ == "__main__":
    raise SystemExit(main())
