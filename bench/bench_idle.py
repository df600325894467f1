#!/usr/bin/env python3
"""Benchmark: the idle worker's memory and its first jobs' times. `nanobot-summary run` (`python -m worker run`)
in a process of its own, on a throwaway Redis, summarizing with the fake model: its RSS once it waits for work,
after its first job and after its second, and each job's time from its enqueue to its outcome (a worker polls
arq's queue twice a second: ~0.25 s of each time is that wait). `--checkout DIR` runs the worker of another
checkout (the version before, to compare)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.defaults import TEST_NAMESPACE  # noqa: E402
from harness.environment import process_env  # noqa: E402
from harness.fakellm import FakeLLM, Reply  # noqa: E402
from harness.models import summary_json  # noqa: E402
from harness.redis_server import free_port  # noqa: E402
from harness.sandbox import NanobotHome  # noqa: E402
from harness.transcripts import conversation  # noqa: E402

KEYS = ("telegram:1", "telegram:2")


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of the process, in MB."""
    found = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                found[name] = int(value.split()[0]) / 1024
    return found["VmRSS"], found["VmHWM"]


def wait_for(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


async def job_seconds(redis_url: str, home: NanobotHome, key: str) -> float:
    """One summary job of `key` through the running worker: from its enqueue to its outcome."""
    from nanobot_hooks.contract.queue import enqueue_summary
    from nanobot_hooks.contract.records import SummarizeRequest
    from worker.connections import queue_client
    from worker.settings import Settings
    from worker.state.outcomes import load_outcome

    settings = Settings(redis_url=redis_url, config=home.config_path, summary_namespace=TEST_NAMESPACE)
    redis = queue_client(redis_url, settings.keys.queue)
    try:
        started = time.perf_counter()
        assert await enqueue_summary(redis, SummarizeRequest(session_key=key, reason="manual")) is not None
        while (outcome := await load_outcome(redis, key)) is None:
            if time.perf_counter() - started > 300:
                raise SystemExit(f"no outcome for {key} after 300 s")
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - started
        if outcome.status != "summarized":
            raise SystemExit(f"the job of {key} did not summarize: {outcome}")
        return elapsed
    finally:
        await redis.aclose()


def measure(checkout: Path, settle: float) -> dict[str, float]:
    from worker.connections import start_embedded

    redis_url = f"redis://127.0.0.1:{free_port()}/0"
    embedded = start_embedded(redis_url)
    figures: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp, FakeLLM(default=Reply(summary_json())) as llm:
            home = NanobotHome.create(Path(tmp), llm.url)
            for key in KEYS:
                home.write_session(key, conversation(15))
            log_path = Path(tmp) / "worker.log"
            env = process_env(home, redis_url, config=True, PYTHONPATH=str(checkout))
            started = time.perf_counter()
            with log_path.open("wb") as log:
                worker = subprocess.Popen(
                    [sys.executable, "-m", "worker", "run", "--no-embedded-redis"],
                    cwd=checkout,
                    env=env,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            try:
                print(f"worker pid {worker.pid}, log {log_path}", file=sys.stderr)
                wait_for(
                    lambda: b"Starting worker" in log_path.read_bytes() or worker.poll() is not None,
                    300,
                    "the worker's start",
                )
                if worker.poll() is not None:
                    raise SystemExit(log_path.read_text(errors="replace")[-3000:])
                figures["start_s"] = time.perf_counter() - started
                time.sleep(settle)  # at rest: arq polls, nothing else
                figures["idle_rss_mb"], _ = rss_mb(worker.pid)
                figures["first_job_s"] = asyncio.run(job_seconds(redis_url, home, KEYS[0]))
                figures["after_first_rss_mb"], _ = rss_mb(worker.pid)
                figures["second_job_s"] = asyncio.run(job_seconds(redis_url, home, KEYS[1]))
                time.sleep(settle)
                figures["after_second_rss_mb"], figures["peak_rss_mb"] = rss_mb(worker.pid)
            except BaseException:
                print(log_path.read_text(errors="replace")[-3000:], file=sys.stderr)
                raise
            finally:
                os.killpg(worker.pid, signal.SIGTERM)
                worker.wait(60)
    finally:
        embedded.stop()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/bench_idle.py", description=__doc__)
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the checkout whose worker runs (this one)")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds at rest before each reading (5)")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON line")
    args = parser.parse_args(argv)
    figures = measure(args.checkout.resolve(), args.settle)
    if args.json:
        print(json.dumps(figures))
        return 0
    print(
        f"worker started in {figures['start_s']:.1f} s; RSS at rest {figures['idle_rss_mb']:.0f} MB (goal: under "
        f"150 MB)"
    )
    print(
        f"first job {figures['first_job_s']:.2f} s, RSS after it {figures['after_first_rss_mb']:.0f} MB; second job "
        f"{figures['second_job_s']:.2f} s, RSS after it {figures['after_second_rss_mb']:.0f} MB "
        f"(peak {figures['peak_rss_mb']:.0f} MB)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
