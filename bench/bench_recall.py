"""Benchmark of the recall index: query latency, the update after one summary, the rebuild, size on disk.

A workspace with a year of conversation (100,000 archived messages, mixed Chinese, Japanese and English)
and a year of daily notes is indexed with the worker's own code; queries run through the tool's search,
each opening the index read-only as the tool does. Prints figures; `--smoke` is a small, quick run.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the worker runs from this checkout

from harness.sandbox import NanobotHome
from nanobot_hooks.contract.recall import RECALL_INDEX
from nanobot_hooks.contract.session_format import is_direct_chat
from nanobot_hooks.recall.search import search
from worker.memory.recall_index import RecallIndex, Refreshed
from worker.nanobot.sessions import read_session

UTC = ZoneInfo("UTC")
MAIN = "telegram:42"
EN = (
    "the",
    "deploy",
    "script",
    "server",
    "config",
    "nginx",
    "port",
    "database",
    "backup",
    "blog",
    "Hugo",
    "theme",
    "build",
    "error",
    "cache",
    "Redis",
    "queue",
    "worker",
    "timeout",
    "retry",
    "token",
    "model",
    "summary",
    "note",
    "user",
    "prefers",
    "short",
    "answers",
    "we",
    "should",
    "try",
    "again",
    "tomorrow",
)
ZH = (
    "我们",
    "部署",
    "脚本",
    "服务器",
    "配置",
    "端口",
    "数据库",
    "备份",
    "博客",
    "主题",
    "构建",
    "报错",
    "缓存",
    "队列",
    "超时",
    "重试",
    "模型",
    "总结",
    "笔记",
    "用户",
    "喜欢",
    "简洁",
    "回答",
    "明天",
    "再试",
    "一下",
    "的",
    "了",
)
JA = (
    "サーバー",
    "の",
    "ポート",
    "を",
    "設定",
    "して",
    "ください",
    "デプロイ",
    "スクリプト",
    "バックアップ",
    "は",
    "明日",
    "もう一度",
    "試して",
    "キャッシュ",
    "エラー",
    "が",
    "出ました",
)
# Common words (thousands of matches: the costly kind), and rare codes planted in the messages.
WORDS = [
    "nginx port",
    "端口",
    "数据库 端口",
    "ポート",
    "デプロイ スクリプト",
    "backup tomorrow",
    "Redis queue",
    "部署 脚本 报错",
    "theme build error",
    "超时 重试",
    "the",
    "我们",
    "用户 喜欢 简洁 回答",
]
CODES = [f"zx{n:05d}" for n in range(0, 400, 7)] + [f"编号{n:05d}" for n in range(0, 400, 11)]


def sentence(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.5:
        return "".join(rng.choices(ZH, k=rng.randint(8, 40)))
    if roll < 0.7:
        return "".join(rng.choices(JA, k=rng.randint(6, 30)))
    return " ".join(rng.choices(EN, k=rng.randint(8, 45)))


def conversation(count: int, start: datetime, span: timedelta, rng: random.Random, planted: int) -> list[dict]:
    """`count` messages over `span`; every `count // planted`-th carries a rare code to look for."""
    step = span / count
    every = max(1, count // max(planted, 1))
    messages = []
    for i in range(count):
        text = sentence(rng)
        if i % every == 0:
            text += f" zx{i // every:05d} 编号{i // every:05d}"
        messages.append(
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": text,
                "timestamp": (start + step * i).isoformat(timespec="seconds"),
            }
        )
    return messages


def day_notes(day: str, sessions: list[str], rng: random.Random) -> str:
    text = f"# {day}\n"
    for n, key in enumerate(sessions):
        first = f"{day}T{8 + n:02d}:00:00"
        text += (
            f"\n<!-- nanobot-summary:notes session={key} first={first} last={day}T{8 + n:02d}:30:00"
            f" digest={n:012x} -->\n## {key} · {8 + n:02d}:00–{8 + n:02d}:30\n\n### 主要话题\n"
        )
        text += "".join(f"- {sentence(rng)[:80]}\n" for _ in range(rng.randint(4, 8)))
    return text


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="archived messages in the workspace (100000)")
    parser.add_argument("--sessions", type=int, default=5, help="sessions they are spread over (5)")
    parser.add_argument(
        "--main-share",
        type=float,
        default=0.7,
        help="share of the messages in the session that asks (0.7: the worst case is the asker's)",
    )
    parser.add_argument("--days", type=int, default=365, help="days of notes and of conversation (365)")
    parser.add_argument("--queries", type=int, default=1_000, help="queries timed (1000)")
    parser.add_argument("--updates", type=int, default=30, help="summaries whose index update is timed (30)")
    parser.add_argument(
        "--day-sessions",
        type=int,
        default=1_000,
        help="sessions with notes on the day the timed summaries write to (1000: a busy day)",
    )
    parser.add_argument("--profile", type=Path, help="write cProfile stats of the timed updates here")
    parser.add_argument("--smoke", action="store_true", help="a small, quick run (for the test suite)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.messages, args.days, args.queries, args.updates, args.day_sessions = 2_000, 20, 60, 3, 20
    return args


@dataclass
class Workspace:
    """The nanobot home benchmarked: its sessions over `span` from `start`, and how much text they hold."""

    home: NanobotHome
    start: datetime
    span: timedelta
    main_count: int = 0  # messages of the session that asks
    text_bytes: int = 0

    @property
    def memory(self) -> Path:
        return self.home.workspace / "memory"

    @property
    def last_day(self) -> Path:
        """The busy day file the timed summaries append to."""
        return self.memory / f"{(self.start + self.span - timedelta(days=1)).date().isoformat()}.md"


@dataclass
class Figures:
    """What the run measured, printed at the end."""

    build_seconds: float = 0.0
    built: Refreshed | None = None
    size: int = 0  # bytes of the index after the rebuild
    updates: list[float] = field(default_factory=list)  # seconds of each timed update
    update_cpu: list[float] = field(default_factory=list)
    day_size: int = 0  # bytes of the busy day file after the updates
    sweep_seconds: float = 0.0
    latencies: dict[str, list[float]] = field(default_factory=lambda: {"all": []})  # per kind of query
    query_cpu: list[float] = field(default_factory=list)  # each query's CPU time: what a busy machine does not add
    found: int = 0  # queries with passages found
    size_after: int = 0  # bytes of the index after the updates and the queries


def write_sessions(ws: Workspace, args: argparse.Namespace, others: list[str], rng: random.Random) -> None:
    """The archived messages: `--main-share` of them in the session that asks, the rest spread over the others."""
    ws.main_count = int(args.messages * args.main_share)
    counts = {MAIN: ws.main_count, **{k: (args.messages - ws.main_count) // max(len(others), 1) for k in others}}
    for key, count in counts.items():
        messages = conversation(count, ws.start, ws.span, rng, planted=400)
        ws.text_bytes += sum(len(m["content"].encode()) for m in messages)
        ws.home.write_session(key, messages, last_archived=count)


def write_memory(ws: Workspace, args: argparse.Namespace, others: list[str], rng: random.Random) -> None:
    """A day file of notes per day (the last one busy) and a MEMORY.md of 300 facts."""
    ws.memory.mkdir()
    for n in range(args.days):
        day = (ws.start + timedelta(days=n)).date().isoformat()
        # The last day is the busy one the timed summaries append to: every session's notes precede them.
        keys = (
            [MAIN, *(f"telegram:{1000 + k}" for k in range(args.day_sessions - 1))]
            if n == args.days - 1
            else [MAIN, *others[:2]]
        )
        (ws.memory / f"{day}.md").write_text(day_notes(day, keys, rng), encoding="utf-8")
    facts = "".join(f"- {sentence(rng)[:60]} <!-- i4 2026-01-{n % 28 + 1:02d} -->\n" for n in range(300))
    (ws.memory / "MEMORY.md").write_text(f"# Long-term Memory\n\n{facts}", encoding="utf-8")


def index_size(ws: Workspace) -> int:
    """Bytes of the recall index on disk, its write-ahead log included."""
    path = ws.home.workspace / RECALL_INDEX
    return sum(Path(f"{path}{s}").stat().st_size for s in ("", "-wal") if Path(f"{path}{s}").exists())


def add_summary(ws: Workspace, messages: list[dict], n: int, rng: random.Random) -> None:
    """What summary `n` leaves on disk: 40 more messages out of the context, a notes section on the busy day."""
    moment = ws.start + ws.span + timedelta(minutes=40 * n)
    for i in range(40):
        messages.append(
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": sentence(rng),
                "timestamp": (moment + timedelta(seconds=30 * i)).isoformat(timespec="seconds"),
            }
        )
    ws.home.write_session(MAIN, messages, last_archived=len(messages))
    with ws.last_day.open("a", encoding="utf-8") as notes:
        notes.write(
            day_notes(ws.last_day.stem, [MAIN], rng)
            .split("\n", 1)[1]
            .replace("digest=000000000000", f"digest={n + 1:012x}")
            .replace("T08:", f"T{10 + n % 12:02d}:")
        )


def time_updates(
    ws: Workspace, index: RecallIndex, args: argparse.Namespace, rng: random.Random, figures: Figures
) -> None:
    """The index update after each of `--updates` summaries, timed (and profiled with `--profile`)."""
    profiler = cProfile.Profile() if args.profile else None
    messages = read_session(ws.home.sessions_dir, MAIN).messages
    for n in range(args.updates):
        add_summary(ws, messages, n, rng)
        session = read_session(ws.home.sessions_dir, MAIN)
        began, cpu = time.perf_counter(), time.thread_time()
        if profiler:
            profiler.enable()
        index.refresh(ws.home.sessions_dir, session, len(session.messages))
        if profiler:
            profiler.disable()
        figures.updates.append(time.perf_counter() - began)
        figures.update_cpu.append(time.thread_time() - cpu)
    if profiler:
        profiler.dump_stats(args.profile)


def time_queries(ws: Workspace, queries: int, figures: Figures) -> None:
    """`queries` searches through the tool's code: common words, rare codes, and words within three months."""
    last = (ws.start + ws.span).date()
    for n in range(queries):
        kind = ("words", "rare code", "words, 3 months")[n % 3]
        query = (CODES if kind == "rare code" else WORDS)[n // 3 % len(CODES if kind == "rare code" else WORDS)]
        dated = (
            {"date_from": (last - timedelta(days=120)).isoformat(), "date_to": (last - timedelta(days=30)).isoformat()}
            if kind == "words, 3 months"
            else {}
        )
        began, cpu = time.perf_counter(), time.thread_time()
        answer = search(ws.home.workspace, query, MAIN, is_direct_chat, **dated)
        seconds = time.perf_counter() - began
        figures.query_cpu.append(time.thread_time() - cpu)
        figures.latencies["all"].append(seconds)
        figures.latencies.setdefault(kind, []).append(seconds)
        figures.found += answer.startswith("Found")
        assert "time limit" not in answer, f"{query!r} reached the time budget"


def measure(ws: Workspace, args: argparse.Namespace, rng: random.Random) -> Figures:
    """The rebuild, the updates after summaries, a worker start's sweep, then the queries."""
    figures = Figures()
    index = RecallIndex(ws.home.workspace, UTC)
    began = time.perf_counter()
    figures.built = index.refresh(ws.home.sessions_dir)
    figures.build_seconds = time.perf_counter() - began
    figures.size = index_size(ws)
    # One summary: 40 more messages leave the context, and a notes section is appended to the day file.
    time_updates(ws, index, args, rng, figures)
    figures.day_size = ws.last_day.stat().st_size
    # A worker start: the asking session's file changed since the last sweep (it is re-read), the rest did not.
    began = time.perf_counter()
    index.refresh(ws.home.sessions_dir)
    figures.sweep_seconds = time.perf_counter() - began
    time_queries(ws, args.queries, figures)
    figures.size_after = index_size(ws)
    return figures


def report(ws: Workspace, args: argparse.Namespace, figures: Figures) -> None:
    updates, update_cpu, latencies = figures.updates, figures.update_cpu, figures.latencies
    print(
        f"workspace: {args.messages:,} archived messages ({ws.text_bytes / 1e6:.1f} MB of text) in "
        f"{args.sessions} sessions ({ws.main_count:,} in the asking one), {args.days} days of notes, 300 facts"
    )
    print(f"rebuild from the files: {figures.build_seconds:.1f} s ({figures.built})")
    print(
        f"index on disk: {figures.size / 1e6:.1f} MB after the rebuild, "
        f"{figures.size_after / 1e6:.1f} MB after the updates"
    )
    print(
        f"update after one summary (40 messages + one notes section appended to a day file of "
        f"{args.day_sessions:,} sessions' notes, {figures.day_size / 1e6:.1f} MB), {args.updates} runs: "
        f"p50 {ms(statistics.median(updates))}, max {ms(max(updates))}; CPU p50 {ms(statistics.median(update_cpu))}"
    )
    print(f"start-up sweep, the asking session's file changed: {figures.sweep_seconds:.2f} s")
    for kind, values in latencies.items():
        print(
            f"query latency, {kind} ({len(values)}): p50 {ms(percentile(values, 0.5))}, "
            f"p99 {ms(percentile(values, 0.99))}, max {ms(max(values))}"
        )
    cpu = figures.query_cpu
    print(f"query CPU time, all: p50 {ms(percentile(cpu, 0.5))}, p99 {ms(percentile(cpu, 0.99))}, max {ms(max(cpu))}")
    print(f"queries with passages found: {figures.found} of {args.queries}")
    print(
        json.dumps(
            {
                "p50_ms": round(percentile(latencies["all"], 0.5) * 1000, 3),
                "p99_ms": round(percentile(latencies["all"], 0.99) * 1000, 3),
                "cpu_p99_ms": round(percentile(cpu, 0.99) * 1000, 3),
            }
        )
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = random.Random(7)
    others = [f"telegram:{100 + n}" for n in range(args.sessions - 1)]
    with tempfile.TemporaryDirectory() as tmp:
        home = NanobotHome.create(Path(tmp), "http://127.0.0.1:9/v1")
        ws = Workspace(home, start=datetime(2025, 11, 20, 8, 0), span=timedelta(days=args.days))
        write_sessions(ws, args, others, rng)
        write_memory(ws, args, others, rng)
        figures = measure(ws, args, rng)
    report(ws, args, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
