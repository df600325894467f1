#!/usr/bin/env python3
"""Benchmark: Redis commands per summary job (the trigger's, the worker's and the pickup's), and what an idle
worker and an idle nanobot cost, counted by the server itself (INFO commandstats) on a throwaway redis-server."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from arq.connections import ArqRedis
from arq.worker import Worker

from harness.fakellm import FakeLLM, Reply
from harness.redis_server import free_port
from harness.sandbox import NanobotHome
from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.queue import drop_record, enqueue_summary, load_waiting_record, pending_sessions
from nanobot_hooks.contract.records import SummarizeRequest, SummaryRecord
from worker.connections import queue_client, start_embedded
from worker.service.arq_worker import worker_options
from worker.service.build import build_deps
from worker.settings import Settings
from worker.summarize.deps import Deps


async def commands(redis: ArqRedis) -> Counter[str]:
    """Calls per command since the last CONFIG RESETSTAT, without the INFO and RESETSTAT of the count itself."""
    stats = await redis.info("commandstats")
    counted = Counter({name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()})
    await redis.config_resetstat()
    counted.pop("info", None)
    counted.pop("config|resetstat", None)
    return counted


def show(title: str, counted: Counter[str], per: int) -> float:
    total = sum(counted.values()) / per
    parts = ", ".join(f"{name} {calls / per:g}" for name, calls in counted.most_common())
    print(f"{title}: {total:.1f} commands per job ({parts})")
    return total


def write_sessions(home: NanobotHome, keys: list[str], turns: int) -> None:
    for key in keys:
        messages = []
        for i in range(turns):
            messages.append({"role": "user", "content": f"question {i}", "timestamp": f"2026-11-20T10:{i % 60:02d}:00"})
            messages.append(
                {"role": "assistant", "content": f"answer {i}", "timestamp": f"2026-11-20T10:{i % 60:02d}:30"}
            )
        home.write_session(key, messages)


async def count_trigger(redis: ArqRedis, names: Keys, keys: list[str]) -> float:
    """1. The trigger inside nanobot (nanobot_hooks.integration): is a record waiting or the session
    resting? then enqueue (arq's single-flight transaction)."""
    for key in keys:
        async with redis.pipeline(transaction=False) as pipe:
            pipe.exists(names.record(key))
            pipe.exists(names.rest(key))
            await pipe.execute()
        await enqueue_summary(redis, SummarizeRequest(session_key=key, reason="tokens"))
    return show("trigger (hooks)", await commands(redis), len(keys))


async def count_job(redis: ArqRedis, deps: Deps, sessions: int) -> float:
    """2. The worker: one burst runs every job (its polls included)."""
    worker = Worker(
        **{
            **worker_options(deps.settings),
            "ctx": {"deps": deps},
            "burst": True,
            "poll_delay": 0.5,
            "handle_signals": False,
        }
    )
    await worker.main()
    await worker.close()
    return show("job (worker)", await commands(redis), sessions)


async def count_pickup(redis: ArqRedis, names: Keys, sessions: int) -> float:
    """3. The pickup inside nanobot: read the record, drop it, count it."""
    for key in await pending_sessions(redis):
        record = await load_waiting_record(redis, key)
        assert isinstance(record, SummaryRecord)
        await drop_record(redis, record)
        await redis.hincrby(names.stats, "applied", 1)
    return show("pickup (hooks)", await commands(redis), sessions)


async def count_idle(redis: ArqRedis, deps: Deps, idle_seconds: float) -> None:
    """4. Idle: a worker polling an empty queue, for idle_seconds."""
    idle = Worker(
        **{**worker_options(deps.settings), "ctx": {"deps": deps}, "poll_delay": 0.5, "handle_signals": False}
    )
    task = asyncio.create_task(idle.main())
    await asyncio.sleep(idle_seconds)
    await idle.close()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    counted = await commands(redis)
    rate = sum(counted.values()) / idle_seconds
    print(
        f"idle worker (arq's poll_delay 0.5 s): {rate:.1f} commands/s "
        f"({', '.join(f'{n} {c}' for n, c in counted.most_common())} in {idle_seconds:.0f} s, start-up included)"
    )
    print("idle nanobot (nanobot_hooks.listener): 1 SMEMBERS a minute and one subscribed connection")


async def run(sessions: int, turns: int, idle_seconds: float, redis_url: str) -> None:
    with tempfile.TemporaryDirectory() as tmp, FakeLLM() as llm:
        llm.default = Reply(json.dumps({"summary": "## What happened\n- benchmark", "daily_notes": [], "facts": []}))
        home = NanobotHome.create(Path(tmp), llm.url)
        keys = [f"telegram:{n}" for n in range(sessions)]
        write_sessions(home, keys, turns)
        # Every job summarizes: 10 messages kept, no minimum saving (these sessions are short).
        deps = build_deps(
            Settings(redis_url=redis_url, config=home.config_path, summary_keep="messages:10", summary_min_saving=0)
        )
        names = deps.settings.keys
        redis = queue_client(redis_url, names.queue)
        await redis.config_resetstat()
        trigger = await count_trigger(redis, names, keys)
        job = await count_job(redis, deps, sessions)
        pickup = await count_pickup(redis, names, sessions)
        print(f"one summary, end to end: {trigger + job + pickup:.1f} commands")
        await count_idle(redis, deps, idle_seconds)
        await redis.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/bench_redis_ops.py", description=__doc__)
    parser.add_argument("--sessions", type=int, default=50, help="sessions, one job each (default 50)")
    parser.add_argument("--turns", type=int, default=20, help="user turns per session (default 20)")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle worker to count (default 10)")
    args = parser.parse_args(argv)
    url = f"redis://127.0.0.1:{free_port()}/0"
    embedded = start_embedded(url)
    try:
        asyncio.run(run(args.sessions, args.turns, args.idle, url))
    finally:
        embedded.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
