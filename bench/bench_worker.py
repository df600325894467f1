#!/usr/bin/env python3
"""Benchmark: token counters side by side (speed, error against cl100k), and summary jobs per second with one
or several worker processes on one Redis (single flight checked from the fake model's requests)."""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from arq.worker import Worker
from rich.console import Console
from rich.table import Table

from harness.corpora import CORPORA, REPEATED
from harness.fakellm import FakeLLM, FakeRequest, Reply
from harness.sandbox import NanobotHome
from nanobot_hooks.contract.queue import enqueue_summary
from nanobot_hooks.contract.records import SummarizeRequest
from worker.connections import answers, queue_client, start_embedded
from worker.service.arq_worker import worker_options
from worker.service.build import build_deps
from worker.settings import Settings
from worker.state.outcomes import load_outcome
from worker.text.tokens import cl100k_counter, estimate_tokens

# Every user message of the job benchmark names its session: the fake model's requests tell whose they are.
TAG = "bench-session-"
# The tests' corpora (a text of each kind the assistant reads, written apart from the estimate's calibration),
# the benchmark's first texts (one sentence forty times) and this file; tests/worker/text/test_tokens.py holds the
# estimate within 10% of cl100k on every one.
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
        table.add_row(
            name,
            str(truth),
            f"{estimate} ({(estimate - truth) / truth:+.0%})",
            f"{quarter} ({(quarter - truth) / truth:+.0%})",
            f"{timings['cl100k']:.0f}",
            f"{timings['estimate']:.0f}",
        )
    console.print(table)


def make_home(folder: Path, llm_url: str, sessions: int, turns: int) -> NanobotHome:
    """Sessions whose every user message names its session, so the fake model's requests say whose they are."""
    home = NanobotHome.create(folder, llm_url)
    for n in range(sessions):
        messages = []
        for i in range(turns):
            messages.append(
                {
                    "role": "user",
                    "content": f"问题 {i} ({TAG}{n}): 部署失败了怎么办?",
                    "timestamp": f"2026-11-20T10:{i % 60:02d}:00",
                }
            )
            messages.append(
                {
                    "role": "assistant",
                    "content": f"answer {i}: check the logs " * 5,
                    "timestamp": f"2026-11-20T10:{i % 60:02d}:30",
                }
            )
        home.write_session(f"bench:{n}", messages)
    return home


def bench_settings(redis_url: str, config: Path) -> Settings:
    # 10 messages kept, not 3% of the window: these sessions are short, and every job must summarize.
    return Settings(redis_url=redis_url, config=config, summary_keep="messages:10")


async def child_worker(redis_url: str, config: Path, recall: bool, profile: Path | None) -> dict[str, Any]:
    """One worker process: ready, then (after "go" on stdin) a burst worker until the queue is empty."""
    settings = bench_settings(redis_url, config)
    deps = build_deps(settings)
    if not recall:
        deps.recall = None
    worker = Worker(
        **{
            **worker_options(deps.settings),
            "ctx": {"deps": deps},
            "burst": True,
            "poll_delay": 0.05,
            "handle_signals": False,
            "max_jobs": 20,
        }
    )
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    profiler = cProfile.Profile() if profile else None
    cpu, began = time.process_time(), time.time()
    if profiler:
        profiler.enable()
    await worker.main()
    if profiler:
        profiler.disable()
        profiler.dump_stats(profile)
    figures = {
        "ended": time.time(),
        "began": began,
        "cpu": time.process_time() - cpu,
        "complete": worker.jobs_complete,
        "failed": worker.jobs_failed,
    }
    await worker.close()
    return figures


async def server_cpu(redis: Any) -> float:
    """Seconds of CPU the Redis server has used (user + system)."""
    info = await redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def single_flight(requests: list[Any], delay: float) -> tuple[dict[str, int], int]:
    """LLM calls per session, and how many times two calls of one session were in flight at once."""
    calls: dict[str, list[float]] = {}
    for request in requests:
        found = re.search(rf"\({re.escape(TAG)}(\d+)\)", json.dumps(request.body, ensure_ascii=False))
        calls.setdefault(found.group(1) if found else "?", []).append(request.received_at)
    overlaps = sum(
        1 for times in calls.values() for a, b in zip(sorted(times), sorted(times)[1:], strict=False) if b - a < delay
    )
    return {key: len(times) for key, times in calls.items()}, overlaps


def start_workers(
    redis_url: str, config: Path, workers: int, recall: bool, profile: Path | None
) -> list[subprocess.Popen[str]]:
    """`workers` worker processes (`--child`), each started and ready, waiting for "go"."""
    children = []
    for number in range(workers):
        command = [sys.executable, __file__, "--child", "--redis-url", redis_url, "--config", str(config)]
        if not recall:
            command.append("--no-recall")
        if profile is not None:
            command += ["--profile", f"{profile}.{number}" if workers > 1 else str(profile)]
        children.append(
            subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
            )
        )
    for child in children:  # start-up (litellm's import, the recall sweep) is not timed
        if child.stdout is None or child.stdout.readline().strip() != "ready":
            raise SystemExit("a worker process did not start")
    return children


@dataclass
class JobRun:
    """One run of the summary jobs: each worker process's figures, and what else the run's cores did."""

    sessions: int
    turns: int
    workers: int
    delay: float  # seconds the fake model took per answer
    results: list[dict[str, Any]] = field(default_factory=list)  # each worker process's figures
    redis_cpu: float = 0.0  # seconds of the Redis server's CPU over the run
    own_cpu: float = 0.0  # seconds of this process's CPU over the run (the fake model's server, mostly)
    summarized: int = 0
    requests: list[FakeRequest] = field(default_factory=list)  # the fake model's

    @property
    def elapsed(self) -> float:
        return max(r["ended"] for r in self.results) - min(r["began"] for r in self.results)

    @property
    def cpu(self) -> float:
        """Seconds of the worker processes' CPU."""
        return sum(r["cpu"] for r in self.results)


async def run_workers(run: JobRun, children: list[subprocess.Popen[str]], redis: Any) -> None:
    """ "go" to every worker process, then their figures once the queue is empty."""
    redis_cpu, own_cpu = await server_cpu(redis), time.process_time()
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    for child in children:
        out, _ = child.communicate(timeout=3600)
        run.results.append(json.loads(out.strip().splitlines()[-1]))
    # What else the run's cores did: Redis, and this process (the fake model's server, mostly).
    run.redis_cpu, run.own_cpu = await server_cpu(redis) - redis_cpu, time.process_time() - own_cpu


def job_figures(run: JobRun) -> dict[str, Any]:
    sessions, elapsed = run.sessions, run.elapsed
    calls, overlaps = single_flight(run.requests, max(run.delay, 0.001))
    return {
        "workers": run.workers,
        "jobs_per_s": round(sessions / elapsed, 1),
        "seconds": round(elapsed, 2),
        "cpu_ms_per_job": round(run.cpu / sessions * 1000, 1),
        "summarized": run.summarized,
        "redis_cpu_ms_per_job": round(run.redis_cpu / sessions * 1000, 1),
        "fake_model_cpu_ms_per_job": round(run.own_cpu / sessions * 1000, 1),
        "llm_calls": len(run.requests),
        "sessions_called_twice": sum(1 for c in calls.values() if c > 1),
        "calls_in_flight_together": overlaps,
    }


def print_jobs(console: Console, run: JobRun, figures: dict[str, Any]) -> None:
    sessions, elapsed, cpu, redis_cpu, own_cpu = run.sessions, run.elapsed, run.cpu, run.redis_cpu, run.own_cpu
    console.print(
        f"summary jobs, {run.workers} worker process(es): {sessions} sessions x {run.turns * 2} messages in "
        f"{elapsed:.2f}s = [bold]{sessions / elapsed:.1f} jobs/s[/] "
        f"({run.summarized} summarized, {sum(r['failed'] for r in run.results)} failed; "
        f"{cpu / sessions * 1000:.1f} ms of worker CPU per job; {len(run.requests)} LLM calls, "
        f"fake model on loopback, {run.delay * 1000:.0f} ms per answer)"
    )
    cores = os.cpu_count() or 1
    console.print(
        f"  CPU per job: workers {cpu / sessions * 1000:.1f} ms, "
        f"Redis {redis_cpu / sessions * 1000:.1f} ms, "
        f"fake model and this script {own_cpu / sessions * 1000:.1f} ms; all of it "
        f"{(cpu + redis_cpu + own_cpu) / (elapsed * cores):.0%} of {cores} cores over the run "
        f"(load average {os.getloadavg()[0]:.1f})"
    )
    console.print(
        f"  single flight: {figures['sessions_called_twice']} sessions summarized twice, "
        f"{figures['calls_in_flight_together']} times two calls of one session at once"
    )


async def bench_jobs(
    console: Console,
    sessions: int,
    turns: int,
    redis_url: str,
    recall: bool = True,
    workers: int = 1,
    delay: float = 0.0,
    profile: Path | None = None,
) -> dict[str, Any]:
    """`workers` worker processes (this one only serves the fake model and counts) on one Redis."""
    with tempfile.TemporaryDirectory() as tmp, FakeLLM() as llm:
        llm.default = Reply(
            json.dumps({"summary": "## What happened\n- benchmark", "daily_notes": [], "facts": []}), delay=delay
        )
        home = make_home(Path(tmp), llm.url, sessions, turns)
        queue = build_deps(bench_settings(redis_url, home.config_path)).settings.keys.queue  # the instance's namespace
        redis = queue_client(redis_url, queue)
        await redis.flushdb()
        for n in range(sessions):
            await enqueue_summary(redis, SummarizeRequest(session_key=f"bench:{n}"))
        run = JobRun(sessions, turns, workers, delay)
        await run_workers(run, start_workers(redis_url, home.config_path, workers, recall, profile), redis)
        outcomes = [await load_outcome(redis, f"bench:{n}") for n in range(sessions)]
        await redis.flushdb()
        await redis.aclose()
        run.summarized = sum(1 for o in outcomes if o is not None and o.status == "summarized")
        run.requests = llm.requests
        figures = job_figures(run)
        print_jobs(console, run, figures)
        return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/bench_worker.py", description=__doc__)
    parser.add_argument("--rounds", type=int, default=200, help="counting rounds per text (default 200; 0 = skip)")
    parser.add_argument("--sessions", type=int, default=200, help="sessions to summarize (default 200)")
    parser.add_argument("--turns", type=int, default=40, help="user turns per session (default 40)")
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[1],
        help="worker processes on the one Redis; several values run one after the other, "
        "e.g. --workers 1 4 (default 1)",
    )
    parser.add_argument("--delay", type=float, default=0.0, help="seconds the fake model takes per answer (0)")
    parser.add_argument(
        "--no-recall",
        dest="recall",
        action="store_false",
        help="jobs without the recall index update, to see what it costs",
    )
    parser.add_argument("--profile", type=Path, help="write each worker's cProfile stats here (.N per worker)")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14"),
        help="a Redis DB the benchmark may flush (default DB 14); started if nothing answers",
    )
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(asyncio.run(child_worker(args.redis_url, args.config, args.recall, args.profile))))
        return 0
    console = Console(width=120)
    if args.rounds:
        bench_counters(console, args.rounds)
    embedded = None if answers(args.redis_url) else start_embedded(args.redis_url)
    try:
        runs = [
            asyncio.run(
                bench_jobs(
                    console, args.sessions, args.turns, args.redis_url, args.recall, workers, args.delay, args.profile
                )
            )
            for workers in args.workers
        ]
    finally:
        if embedded is not None:
            embedded.stop()
    if len(runs) > 1:
        console.print(
            f"speed-up of {runs[-1]['workers']} worker processes over {runs[0]['workers']}: "
            f"{runs[-1]['jobs_per_s'] / runs[0]['jobs_per_s']:.2f}x"
        )
    if args.json:
        print(json.dumps(runs))
    return 0 if all(r["sessions_called_twice"] == 0 and r["calls_in_flight_together"] == 0 for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
