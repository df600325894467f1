#!/usr/bin/env python3
"""Benchmark: token counters side by side (speed, error against cl100k), and summary jobs per second."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from arq.connections import create_pool  # noqa: E402
from arq.worker import Worker  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from nanobot_hooks.contract import SummarizeRequest  # noqa: E402
from nanobot_hooks.queue import enqueue_summary  # noqa: E402
from worker.settings import Settings  # noqa: E402
from worker.app import build_deps, worker_options  # noqa: E402
from worker.connections import answers, redis_settings, start_embedded  # noqa: E402
from tests.support.fakellm import FakeLLM, Reply  # noqa: E402
from tests.support.sandbox import NanobotHome  # noqa: E402
from tests.support.corpora import CORPORA, REPEATED  # noqa: E402
from worker.tokens import cl100k_counter, estimate_tokens  # noqa: E402

# The tests' corpora (a text of each kind the assistant reads, written apart from the estimate's calibration),
# the benchmark's first texts (one sentence forty times) and this file; tests/test_tokens.py holds the estimate
# within 10% of cl100k on every one.
TEXTS = {**CORPORA, **REPEATED, "Python code (this file)": Path(__file__).read_text(encoding="utf-8")}


def bench_counters(console: Console, rounds: int) -> None:
    exact = cl100k_counter()
    if exact is None:
        console.print("[red]cl100k is not available; install the worker extra[/]")
        return
    table = Table(title=f"token counters, {rounds} rounds per text")
    for column in ("text", "cl100k tokens", "estimate (error)", "chars/4 (error)", "cl100k µs", "estimate µs"):
        table.add_column(column, justify="right")
    for name, text in TEXTS.items():
        truth = exact(text)
        timings = {}
        for label, counter in (("cl100k", exact), ("estimate", estimate_tokens)):
            started = time.perf_counter()
            for _ in range(rounds):
                counter(text)
            timings[label] = (time.perf_counter() - started) / rounds * 1e6
        estimate, quarter = estimate_tokens(text), len(text) // 4
        table.add_row(name, str(truth), f"{estimate} ({(estimate - truth) / truth:+.0%})",
                      f"{quarter} ({(quarter - truth) / truth:+.0%})", f"{timings['cl100k']:.0f}",
                      f"{timings['estimate']:.0f}")
    console.print(table)


async def bench_jobs(console: Console, sessions: int, turns: int, redis_url: str, recall: bool = True) -> None:
    with tempfile.TemporaryDirectory() as tmp, FakeLLM() as llm:
        llm.default = Reply(json.dumps({"summary": "## What happened\n- benchmark", "daily_notes": [], "facts": []}))
        home = NanobotHome.create(Path(tmp), llm.url)
        for n in range(sessions):
            messages = []
            for i in range(turns):
                messages.append({"role": "user", "content": f"问题 {i}: 部署失败了怎么办?",
                                 "timestamp": f"2026-11-20T10:{i % 60:02d}:00"})
                messages.append({"role": "assistant", "content": f"answer {i}: check the logs " * 5,
                                 "timestamp": f"2026-11-20T10:{i % 60:02d}:30"})
            home.write_session(f"bench:{n}", messages)
        # 10 messages kept, not 3% of the window: these sessions are short, and every job must summarize.
        settings = Settings(redis_url=redis_url, config=home.config_path, summary_keep="messages:10")
        deps = build_deps(settings)
        if not recall:
            deps.recall = None
        redis = await create_pool(redis_settings(redis_url), default_queue_name=deps.settings.keys.queue)
        await redis.flushdb()
        for n in range(sessions):
            await enqueue_summary(redis, SummarizeRequest(session_key=f"bench:{n}"))
        worker = Worker(**{**worker_options(deps.settings), "ctx": {"deps": deps}, "burst": True, "poll_delay": 0.05,
                           "handle_signals": False, "max_jobs": 20})
        started = time.perf_counter()
        await worker.main()
        elapsed = time.perf_counter() - started
        await worker.close()
        await redis.flushdb()
        await redis.aclose()
        latencies = [r.received_at for r in llm.requests]
        console.print(f"summary jobs: {sessions} sessions x {turns * 2} messages in {elapsed:.2f}s = "
                      f"{sessions / elapsed:.1f} jobs/s ({worker.jobs_complete} complete, {worker.jobs_failed} failed, "
                      f"{len(latencies)} LLM calls; fake LLM on loopback)")
        if len(latencies) > 1:
            gaps = [b - a for a, b in zip(sorted(latencies), sorted(latencies)[1:])]
            console.print(f"  median gap between LLM calls {statistics.median(gaps) * 1000:.1f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench_worker.py", description=__doc__)
    parser.add_argument("--rounds", type=int, default=200, help="counting rounds per text (default 200)")
    parser.add_argument("--sessions", type=int, default=100, help="sessions to summarize (default 100)")
    parser.add_argument("--turns", type=int, default=40, help="user turns per session (default 40)")
    parser.add_argument("--no-recall", dest="recall", action="store_false",
                        help="jobs without the recall index update, to see what it costs")
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14"),
                        help="a Redis DB the benchmark may flush (default DB 14)")
    args = parser.parse_args(argv)
    console = Console(width=120)
    bench_counters(console, args.rounds)
    embedded = None if answers(args.redis_url) else start_embedded(args.redis_url)
    try:
        asyncio.run(bench_jobs(console, args.sessions, args.turns, args.redis_url, args.recall))
    finally:
        if embedded is not None:
            embedded.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
