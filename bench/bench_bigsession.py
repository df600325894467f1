#!/usr/bin/env python3
"""Benchmark: one big session file (50 MB, 100,000 messages; --megabytes 200 for the 200 MB figures). The
summary job's peak memory and its read and plan times, in a fresh process; each job kind's peak RSS in a fresh
process (goal: under 300 MB on a 200 MB session): the tokens job filling an empty recall index, and the daily
job (the day's flag set, the index filled already); the recall index's size beside the text it indexes; and how
long the worker's line-1 write holds nanobot's session-files lock, now (only the rename) and as the whole write
under the lock did before, seen from a process that takes that lock in a loop as nanobot's saves do. `--paste MB`:
a session whose one message is a pasted log of that many MB (one line), each job kind's peak RSS instead."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the worker runs from this checkout

from filelock import FileLock  # noqa: E402

from harness.redis_server import free_port  # noqa: E402
from harness.sandbox import NanobotHome  # noqa: E402
from nanobot_hooks.contract.marker import METADATA_KEY  # noqa: E402
from nanobot_hooks.contract.records import SummarizeRequest  # noqa: E402
from nanobot_hooks.contract.session_format import SESSION_FILES_LOCK  # noqa: E402
from worker.nanobot.metadata_line import edit_attempt  # noqa: E402
from worker.nanobot.sessions import read_session  # noqa: E402

KEY = "telegram:4242"
KEEP = "messages:10"  # the rule these figures were first measured with; the default (3% of the window) keeps them all
WORDS = (
    "deploy",
    "the",
    "server",
    "config",
    "Redis",
    "port",
    "timeout",
    "backup",
    "user",
    "asked",
    "about",
    "logs",
    "nginx",
    "restart",
    "部署",
    "服务器",
    "配置",
    "端口",
    "日志",
    "备份",
    "error",
    "fixed",
    "Friday",
)
KEPT_UNSUMMARIZED = 200  # a long-lived session: all but the last messages are summarized already
DAILY_SINCE = "2026-11-26"  # the daily job's day: the last two days of each month's 27 (months ramp over the file)
WHOLE_DAY = "2026-01-01"  # the worst case: a day the whole session is from (every message un-noted)


def make_home(folder: Path, llm_url: str, messages: int, size: int) -> NanobotHome:
    """A nanobot home whose one session has `messages` messages of about size/messages bytes each."""
    home = NanobotHome.create(folder, llm_url)
    rng = random.Random(7)
    words = max(4, round((size / messages - 78) / 6.6))  # a line: ~78 bytes of JSON around ~6.6 bytes a word
    path = home.session_file(KEY)
    archived = max(0, messages - KEPT_UNSUMMARIZED)
    head = {
        "_type": "metadata",
        "key": KEY,
        "created_at": "2026-01-01T09:00:00",
        "updated_at": "2026-11-20T10:00:00",
        "metadata": {"_last_summary": {"text": "## What happened\n- a year of questions", "last_active": "x"}},
        "last_archived": archived,
        "last_consolidated": archived,
    }
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps(head, ensure_ascii=False) + "\n")
        for i in range(messages):
            minute = i % (24 * 60)
            stamp = f"2026-{1 + i * 11 // messages:02d}-{1 + i % 27:02d}T{minute // 60:02d}:{minute % 60:02d}:00"
            text = f"message {i}: " + " ".join(rng.choices(WORDS, k=words))
            out.write(
                json.dumps(
                    {"role": "user" if i % 2 == 0 else "assistant", "content": text, "timestamp": stamp},
                    ensure_ascii=False,
                )
                + "\n"
            )
    return home


def make_paste_home(folder: Path, llm_url: str, size: int) -> NanobotHome:
    """A nanobot home whose one session is eight short exchanges, the first question a pasted log of `size` bytes
    (one message, one line of the file) that nanobot archived already: the recall index takes it in (all on the
    daily job's day)."""
    home = NanobotHome.create(folder, llm_url)
    head = {
        "_type": "metadata",
        "key": KEY,
        "created_at": "2026-11-27T09:00:00",
        "updated_at": "2026-11-27T10:00:00",
        "metadata": {},
        "last_archived": 1,
        "last_consolidated": 1,
    }
    row = "2026-11-27 10:00:01 INFO nginx[123]: GET /api/v1/deploy 200 0.012s upstream=10.0.0.7:8080 部署\n"
    with home.session_file(KEY).open("w", encoding="utf-8") as out:
        out.write(json.dumps(head, ensure_ascii=False) + "\n")
        for i in range(16):
            stamp = f"2026-11-27T10:{i:02d}:00"
            if i == 0:  # written as nanobot writes it, without holding the log: the content's JSON in pieces
                out.write('{"role": "user", "content": "here is the log: ')
                rows = max(1, size // len(row.encode()))
                piece = json.dumps(row * 1000, ensure_ascii=False)[1:-1]
                for _ in range(rows // 1000):
                    out.write(piece)
                out.write(json.dumps(row * (rows % 1000), ensure_ascii=False)[1:-1])
                out.write(f'", "timestamp": "{stamp}"}}\n')
                continue
            text = f"short message {i} about the deploy" if i % 2 == 0 else f"reply {i}: restart nginx"
            out.write(
                json.dumps(
                    {"role": "user" if i % 2 == 0 else "assistant", "content": text, "timestamp": stamp},
                    ensure_ascii=False,
                )
                + "\n"
            )
    return home


def max_rss_mb() -> float:
    """This process's peak RSS. Linux's VmHWM where there is one: ru_maxrss keeps the peak of the process that
    started this one (exec passes it on), so a child of a parent grown past it (the fake model keeping every
    request of a daily job) showed the parent's peak, at rest and after its job alike."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB (macOS: bytes; not run there)


async def run_one_job(config: Path, redis_url: str, kind: str = "plain") -> float:
    """The real job through a burst arq worker: "plain" without the recall index, "tokens" with it, "daily"
    with it and the session's daily flag set (notes from DAILY_SINCE on)."""
    from arq.worker import Worker

    from nanobot_hooks.contract.queue import enqueue_summary
    from worker.connections import queue_client
    from worker.service.arq_worker import worker_options
    from worker.service.build import build_deps
    from worker.settings import Settings
    from worker.state.outcomes import load_outcome

    settings = Settings(redis_url=redis_url, config=config, summary_keep=KEEP)
    deps = build_deps(settings)
    if kind == "plain":
        deps.recall = None
    redis = queue_client(redis_url, deps.settings.keys.queue)
    if kind in ("daily", "daily-whole"):
        from worker.summarize.daily import set_flag

        await set_flag(redis, KEY, DAILY_SINCE if kind == "daily" else WHOLE_DAY)
    await enqueue_summary(redis, SummarizeRequest(session_key=KEY))
    worker = Worker(
        **{
            **worker_options(deps.settings),
            "ctx": {"deps": deps},
            "burst": True,
            "poll_delay": 0.02,
            "handle_signals": False,
        }
    )
    started = time.perf_counter()
    await worker.main()
    elapsed = time.perf_counter() - started
    await worker.close()
    outcome = await load_outcome(redis, KEY)
    await redis.aclose()
    # After the plain job, its record waits in line 1: the next jobs have nothing new to summarize.
    if outcome is None or outcome.status not in (
        ("summarized",) if kind == "plain" else ("summarized", "noted", "noop")
    ):
        raise SystemExit(f"the job did not summarize: {outcome}")
    return elapsed


def child_job(config: Path, redis_url: str) -> dict[str, float]:
    """In a fresh process: the job's peak memory over the process at rest, then read and plan alone."""
    from worker.service.build import build_deps
    from worker.settings import Settings
    from worker.summarize.plan import plan_for

    deps = build_deps(Settings(redis_url=redis_url, config=config, summary_keep=KEEP))
    figures = {"rss_at_rest_mb": max_rss_mb()}
    figures["job_s"] = asyncio.run(run_one_job(config, redis_url))
    figures["rss_job_mb"] = max_rss_mb()
    started = time.perf_counter()
    session = read_session(deps.sessions_dir, KEY, from_watermark=True)  # as the job reads it
    figures["read_s"] = time.perf_counter() - started
    started = time.perf_counter()
    plan_for(deps, session, session.last_archived, SummarizeRequest(session_key=KEY))
    figures["plan_s"] = time.perf_counter() - started
    del session
    # Python's own allocations (tracemalloc slows the code down: timed above, without it).
    tracemalloc.start()
    session = read_session(deps.sessions_dir, KEY, from_watermark=True)
    figures["traced_read_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
    plan_for(deps, session, session.last_archived, SummarizeRequest(session_key=KEY))
    figures["traced_read_plan_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return figures


def child_kind(config: Path, redis_url: str, kind: str) -> dict[str, float]:
    """In a fresh process: one job of `kind` ("tokens" or "daily"), its peak RSS; the index's size after it."""
    from worker.service.build import build_deps
    from worker.settings import Settings

    deps = build_deps(Settings(redis_url=redis_url, config=config, summary_keep=KEEP))
    figures = {"rss_at_rest_mb": max_rss_mb()}
    figures["job_s"] = asyncio.run(run_one_job(config, redis_url, kind))
    figures["rss_job_mb"] = max_rss_mb()
    assert deps.recall is not None
    if not deps.recall.path.exists():  # the plain job fills none
        return figures
    figures["index_mb"] = (
        sum(path.stat().st_size for path in deps.recall.path.parent.glob(deps.recall.path.name + "*")) / 2**20
    )
    figures["indexed_text_mb"] = indexed_text_mb(deps.recall.path)
    return figures


def indexed_text_mb(index: Path) -> float:
    """The redacted text the index holds (its passages' bodies, unpacked from their blocks), in MB."""
    import sqlite3

    from nanobot_hooks.contract.recall import unpack

    size = 0
    with sqlite3.connect(f"{index.as_uri()}?mode=ro", uri=True) as db:
        for (packed,) in db.execute("SELECT passages FROM blocks"):
            size += sum(len(passage.body.encode("utf-8")) for passage in unpack(packed).values())
    return float(size) / 2**20


def contender(lock_path: Path, stop: Path) -> list[tuple[float, float]]:
    """nanobot's side: take the lock in a loop, as each save does, until `stop` exists; returns (when it
    asked, how long it waited) for each time."""
    waits = []
    lock = FileLock(str(lock_path), poll_interval=0.0005)
    while not stop.exists():
        asked = time.monotonic()
        with lock:
            waits.append((asked, time.monotonic() - asked))
        time.sleep(0.002)
    return waits


class TimedLock:
    """The worker's lock, timing each hold."""

    def __init__(self, lock: FileLock) -> None:
        self.lock, self._since = lock, 0.0
        self.holds: list[float] = []

    def __enter__(self) -> None:
        self.lock.acquire()
        self._since = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.holds.append(time.perf_counter() - self._since)
        self.lock.release()


def lock_holds(home: NanobotHome, writes: int) -> dict[str, dict[str, float]]:
    """Line-1 writes of the big file with a contender running: the new write, and the whole write under the
    lock (what the worker did before, and still does after four writes overtaken by nanobot's saves)."""
    lock_path = home.sessions_dir / SESSION_FILES_LOCK
    path = home.session_file(KEY)
    stop = home.root / "stop-contender"
    other = subprocess.Popen(
        [sys.executable, __file__, "--contender", str(lock_path), str(stop)], stdout=subprocess.PIPE, text=True
    )
    time.sleep(1.0)  # the contender is looping
    phases: dict[str, tuple[float, float, TimedLock]] = {}
    for name, hold in (
        ("now: only the rename under the lock", False),
        ("as an older version did: copy, fsync and rename under it", True),
    ):
        timed = TimedLock(FileLock(str(lock_path)))
        began = time.monotonic()
        for n in range(writes):
            # What a line-1 write does at its first attempt (hold=False) and at its last (hold=True).
            value = {"write": n, "phase": name}

            def mark(record: dict, value: dict = value) -> bool:
                record.setdefault("metadata", {})[METADATA_KEY] = value
                return True

            done, _ = edit_attempt(path, mark, timed, hold=hold)  # type: ignore[arg-type]
            assert done, "nothing else writes the file here, so no write is overtaken"
            time.sleep(0.05)
        phases[name] = (began, time.monotonic(), timed)
    stop.touch()
    out, _ = other.communicate(timeout=60)
    waits = [tuple(pair) for pair in json.loads(out)]
    result = {}
    for name, (began, ended, timed) in phases.items():
        seen = [wait for asked, wait in waits if began <= asked <= ended]
        result[name] = {
            "hold_max_ms": max(timed.holds) * 1000,
            "hold_median_ms": statistics.median(timed.holds) * 1000,
            "wait_max_ms": max(seen) * 1000 if seen else 0.0,
            "saves": len(seen),
        }
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/bench_bigsession.py", description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000, help="messages in the session (100000)")
    parser.add_argument("--megabytes", type=float, default=50.0, help="size of the session file (50)")
    parser.add_argument("--writes", type=int, default=5, help="line-1 writes of each kind (5)")
    parser.add_argument(
        "--paste",
        type=float,
        metavar="MB",
        help="instead: six short exchanges and one pasted message of this many MB (one line)",
    )
    parser.add_argument("--smoke", action="store_true", help="a small run that checks the script works")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--contender", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.messages, args.megabytes, args.writes = 2_000, 1.0, 2
    return args


def write_home(folder: Path, llm_url: str, args: argparse.Namespace) -> NanobotHome:
    """The nanobot home with the big session, said on stdout."""
    started = time.perf_counter()
    if args.paste:
        home = make_paste_home(folder, llm_url, int(args.paste * 2**20))
        print(
            f"session file: {home.session_file(KEY).stat().st_size / 2**20:.1f} MB, 16 messages, one of them a "
            f"pasted {args.paste:g} MB line (written in {time.perf_counter() - started:.1f} s)"
        )
        return home
    home = make_home(folder, llm_url, args.messages, int(args.megabytes * 2**20))
    size = home.session_file(KEY).stat().st_size
    print(
        f"session file: {size / 2**20:.1f} MB, {args.messages:,} messages, all but the last "
        f"{KEPT_UNSUMMARIZED} summarized already (written in {time.perf_counter() - started:.1f} s)"
    )
    return home


def job_in_child(home: NanobotHome, redis_url: str, kind: str | None = None) -> dict[str, Any] | None:
    """The job's figures from a fresh process (`--child`); None, its stderr's end shown, when it failed."""
    child = subprocess.run(
        [sys.executable, __file__, "--child", str(home.config_path), redis_url] + (["--kind", kind] if kind else []),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if child.returncode != 0:
        print(child.stderr[-3000:], file=sys.stderr)
        return None
    job: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return job


def print_job(job: dict[str, Any]) -> None:
    print(
        f"job in a fresh worker process: {job['job_s']:.2f} s in all; reading the file "
        f"{job['read_s']:.2f} s, planning the cut {job['plan_s']:.2f} s"
    )
    print(
        f"peak memory: {job['rss_job_mb'] - job['rss_at_rest_mb']:.0f} MB over the process at rest "
        f"(goal: under 40 MB; at rest {job['rss_at_rest_mb']:.0f} MB, litellm loaded), "
        f"max RSS {job['rss_job_mb']:.0f} MB; "
        f"Python allocations: read {job['traced_read_mb']:.0f} MB, read + plan "
        f"{job['traced_read_plan_mb']:.0f} MB"
    )


def print_kinds(home: NanobotHome, redis_url: str, llm: Any, plain: bool = False) -> bool:
    """Each job kind's peak RSS in a fresh process, then the index beside the text; False when a job failed.
    The worst case's model notes every user line it is sent (harness.models.echo_memory): a chunk answered with
    no notes is asked again by a later run, and the job would stop at its first window."""
    from harness.models import echo_memory

    size = home.session_file(KEY).stat().st_size / 2**20
    job: dict[str, Any] | None = None
    plain_kind = (("plain", "the summary job, no recall index"),) * plain
    for kind, what in plain_kind + (
        ("tokens", "the tokens job, filling an empty recall index"),
        ("daily", f"the daily job (notes from {DAILY_SINCE} on), the index filled"),
        ("daily-whole", f"the daily job whose day is the whole session (from {WHOLE_DAY}), worst case"),
    ):
        llm.responder = echo_memory if kind == "daily-whole" else None
        job = job_in_child(home, redis_url, kind)
        if job is None:
            return False
        print(
            f"max RSS, {what}: {job['rss_job_mb']:.0f} MB (goal: under 300 MB; "
            f"at rest {job['rss_at_rest_mb']:.0f} MB; {job['job_s']:.1f} s)"
        )
    assert job is not None
    print(
        f"recall index: {job['index_mb']:.1f} MB for {job['indexed_text_mb']:.1f} MB of indexed text "
        f"({job['index_mb'] / max(job['indexed_text_mb'], 1e-9):.2f}x; the session file {size:.1f} MB; "
        f"goal: no larger than the text)"
    )
    return True


def print_lock_holds(home: NanobotHome, writes: int) -> None:
    for name, figures in lock_holds(home, writes).items():
        print(
            f"line-1 write, {name}: lock held {figures['hold_median_ms']:.2f} ms median, "
            f"{figures['hold_max_ms']:.2f} ms max; a nanobot save waited {figures['wait_max_ms']:.2f} ms "
            f"at most ({figures['saves']} saves)"
        )


def measure(args: argparse.Namespace) -> int:
    """The big session written, the job run in a fresh process, the line-1 writes timed; 1 if the job failed."""
    from harness.fakellm import FakeLLM, Reply
    from worker.connections import start_embedded

    reply = json.dumps(
        {"summary": "## What happened\n- a year of questions\n- and these", "daily_notes": [], "facts": []}
    )
    redis_url = f"redis://127.0.0.1:{free_port()}/0"
    embedded = start_embedded(redis_url)  # a throwaway Redis: nothing shared is touched
    try:
        with tempfile.TemporaryDirectory() as tmp, FakeLLM(default=Reply(reply)) as llm:
            home = write_home(Path(tmp), llm.url, args)
            if args.paste:  # each job kind in a fresh process; the plain job's read and plan are the others'
                return 0 if print_kinds(home, redis_url, llm, plain=True) else 1
            job = job_in_child(home, redis_url)
            if job is None:
                return 1
            print_job(job)
            if not print_kinds(home, redis_url, llm):
                return 1
            print_lock_holds(home, args.writes)
    finally:
        embedded.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.contender:
        print(json.dumps(contender(Path(args.contender[0]), Path(args.contender[1]))))
        return 0
    if args.child and args.kind:
        print(json.dumps(child_kind(Path(args.child[0]), args.child[1], args.kind)))
        return 0
    if args.child:
        print(json.dumps(child_job(Path(args.child[0]), args.child[1])))
        return 0
    return measure(args)


if __name__ == "__main__":
    raise SystemExit(main())
