"""Benchmark of a busy day's memory-file work per job: the first jobs of the day against the last.

One worker process, one day, thousands of summary jobs over a thousand sessions while one session is always
active (so MEMORY.md's new facts are held for a quiet moment, the default NANOBOT_MEMORY_WRITE=idle): each
job does what a summary job does with the memory files, through the worker's own MemoryFiles: reads the
facts MEMORY.md and the held file know (as many as the prompt takes), reads which of its messages that day's
notes cover, appends its notes section and holds its facts. Prints the mean time per job of the first and the last
`--window` jobs, their ratio (goal: the last at >= 90% of the first's speed), the bytes of the followed files
(the day's notes, the held facts) read per job, and the growth of the resident memory (goal: < 20 MB).
`--workers 2` shares the day between two worker processes of one instance, each appending between the other's
reads (the last jobs' speed, goal >= 90% of the first's; the resident memory is the first worker's).
`--smoke` is a small, quick run.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the worker runs from this checkout

from harness.sandbox import NanobotHome
from worker.memory.entries import DailyNotes, Fact
from worker.memory.longterm.held import HELD
from worker.memory.notes import DAYS
from worker.memory.writer import MemoryFiles
from worker.summarize.remember import KNOWN_FACTS_IN_PROMPT

DAY = datetime(2026, 11, 24, 0, 0)
TOPICS = (
    "the blog's theme",
    "a Redis timeout",
    "the nginx port",
    "a trip to Lisbon",
    "the backup script",
    "a database migration",
    "the team's standup",
    "a new keyboard",
)


def resident_mb() -> float:
    """The process's resident memory now (not its peak), from /proc."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def job_input(n: int) -> tuple[str, DailyNotes, list[Fact]]:
    session = f"telegram:{1000 + n % 1000}"
    start = DAY + timedelta(seconds=20 * n)
    topic = TOPICS[n % len(TOPICS)]
    notes = DailyNotes(
        date=DAY.date().isoformat(),
        first_timestamp=start.isoformat(timespec="seconds"),
        last_timestamp=(start + timedelta(seconds=15)).isoformat(timespec="seconds"),
        topics=[f"{topic}, round {n}"],
        decisions=[f"decision {n} about {topic}"],
        tasks=[f"follow up on job {n}"],
    )
    facts = [
        Fact(text=f"The user's setting number {n}.{k} is {n * 7 + k}", importance=3, source="user") for k in range(3)
    ]
    return session, notes, facts


def one_job(memory: MemoryFiles, sessions_dir: Path, n: int) -> tuple[float, int]:
    """One job's memory-file work: its CPU time (not the fsyncs' waits on a shared disk, nor another worker's
    lock), and the bytes of the followed files it read."""
    session, notes, facts = job_input(n)
    read = DAYS.bytes_read + HELD.bytes_read
    began = time.process_time()
    # As many as the job's prompt takes: asked for all of them, the held facts of the whole day were listed
    # (and made unique) by every job, the slowdown of the day's last jobs that one worker showed too.
    memory.known_facts(KNOWN_FACTS_IN_PROMPT)
    memory.noted_spans(session, notes.date)
    memory.write_now(session, [notes], facts, "en", sessions_dir, cache_ttl=300.0)
    return time.process_time() - began, DAYS.bytes_read + HELD.bytes_read - read


def worker_jobs(home: NanobotHome, jobs: int, workers: int, part: int) -> tuple[list[tuple[int, float, int]], float]:
    """One worker process's share of the day (every `workers`-th job from `part`): (job, seconds, bytes read)
    of each, and how much its resident memory grew."""
    memory = MemoryFiles(home.workspace, "UTC", hold=True)
    gc.collect()
    before = resident_mb()
    done = []
    for n in range(part, jobs, workers):
        if n % 200 == 0:  # a session stays active all day: its file is saved again and again
            os.utime(home.session_file("telegram:1"))
        done.append((n, *one_job(memory, home.sessions_dir, n)))
    gc.collect()
    return done, resident_mb() - before


def run_day(jobs: int, workers: int) -> tuple[list[tuple[int, float, int]], float, int, int]:
    """The day's jobs by `workers` processes at once on one workspace: every job's figures in job order, the
    first worker's memory growth, and the sizes of the held facts and the day file at the end."""
    with tempfile.TemporaryDirectory() as tmp:
        home = NanobotHome.create(Path(tmp), "http://127.0.0.1:9/v1")
        home.write_session("telegram:1", [{"role": "user", "content": "hi", "timestamp": DAY.isoformat()}])
        if workers == 1:
            results = [worker_jobs(home, jobs, 1, 0)]
        else:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                results = pool.starmap(worker_jobs, [(home, jobs, workers, part) for part in range(workers)])
        held = (home.workspace / "memory" / ".MEMORY.pending.jsonl").stat().st_size
        notes = (home.workspace / "memory" / f"{DAY.date().isoformat()}.md").stat().st_size
    done = sorted(job for jobs_done, _ in results for job in jobs_done)
    return done, results[0][1], held, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=4_000, help="jobs on the day (4000)")
    parser.add_argument("--window", type=int, default=250, help="jobs compared at each end (250)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes sharing the day (1)")
    parser.add_argument("--smoke", action="store_true", help="a small, quick run (for the test suite)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.jobs, args.window = 300, 50
    done, grown, held, notes = run_day(args.jobs, args.workers)
    times, read = [seconds for _, seconds, _ in done], [size for _, _, size in done]
    first, last = statistics.mean(times[: args.window]), statistics.mean(times[-args.window :])
    read_first, read_last = statistics.mean(read[: args.window]) / 1e6, statistics.mean(read[-args.window :]) / 1e6
    print(
        f"{args.jobs:,} jobs on one day, 1,000 sessions, {args.workers} worker process(es), facts held (one "
        f"session always active); at the end: day file {notes / 1e6:.1f} MB, held facts {held / 1e6:.1f} MB"
    )
    print(
        f"memory-file work per job (CPU time): first {args.window} {first * 1000:.2f} ms, last {args.window} "
        f"{last * 1000:.2f} ms; speed of the last against the first {first / last:.2f} (goal >= 0.90)"
    )
    print(
        f"followed files read per job: first {args.window} {read_first:.3f} MB, last {args.window} {read_last:.3f} MB"
    )
    print(f"resident memory grew {grown:.1f} MB (goal < 20 MB)")
    print(
        json.dumps(
            {
                "first_ms": round(first * 1000, 3),
                "last_ms": round(last * 1000, 3),
                "speed_ratio": round(first / last, 3),
                "read_first_mb": round(read_first, 3),
                "read_last_mb": round(read_last, 3),
                "rss_growth_mb": round(grown, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
