"""Benchmark of the MEMORY.md merge (and a daily-notes append) with many existing facts; prints figures."""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the worker runs from this checkout

from worker.memory import dedup, longterm
from worker.memory.entries import DailyNotes, Fact
from worker.memory.notes import append_notes
from worker.model import answer
from worker.text import redact
from worker.text.tokens import best_counter

EN = (
    "the user",
    "prefers",
    "deploys",
    "configured",
    "project",
    "server",
    "uses",
    "likes",
    "fixed",
    "bug in",
    "staging",
    "the gateway",
    "port",
    "dark mode",
    "Hugo",
    "Redis",
    "Python",
    "every Friday",
    "backup",
    "cron",
)
ZH = ("用户", "喜欢", "配置", "项目", "服务器", "部署", "修复", "问题", "周五", "备份", "网关", "端口", "简洁", "回答")
CATEGORIES = list(answer.CATEGORIES)


def sentence(rng: random.Random, number: int) -> str:
    words = rng.choices(ZH, k=rng.randint(4, 8)) if rng.random() < 0.3 else rng.choices(EN, k=rng.randint(5, 9))
    joiner = "" if words[0] in ZH else " "
    return f"{joiner.join(words)} #{number}"


def existing_file(count: int, rng: random.Random) -> str:
    """A MEMORY.md with `count` managed facts, rendered directly (merging them one by one would take long)."""
    part = longterm.Part(
        "en",
        [
            longterm.Line(
                sentence(random.Random(i), i),
                rng.choice(CATEGORIES),
                rng.randint(3, 5),
                f"2026-{rng.randint(1, 10):02d}-15",
            )
            for i in range(count)
        ],
    )
    return "# Long-term Memory\n\n- a line the user wrote\n\n" + longterm.render(part) + "\n"


def candidates(count: int, rng: random.Random, duplicates: float) -> list[Fact]:
    facts = []
    for i in range(count):
        if rng.random() < duplicates:
            # A known fact extracted again, in other case and punctuation (the file's fact number i).
            text = f"  {sentence(random.Random(i), i).upper()}。"
        else:
            text = sentence(rng, 1_000_000 + i)
        facts.append(
            Fact(
                text=text,
                importance=rng.randint(1, 5),
                category=rng.choice(CATEGORIES),
                tag=rng.choice(["durable", "durable", "permanent", "ephemeral"]),
            )
        )
    return facts


def clear_caches() -> None:
    dedup.normalize.cache_clear()
    redact.one_line.cache_clear()


def timed(action: Callable[[], object], repeat: int, cold: bool) -> list[float]:
    seconds = []
    for _ in range(repeat):
        if cold:
            clear_caches()
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return seconds


def prompt_cost(cap: int) -> str:
    """What the managed part at the cap adds to every nanobot prompt, and how much of it is neither a fact
    nor a heading; beside the same facts in the line-comment format of earlier versions."""
    counter = best_counter()
    rng = random.Random(7)
    facts = [
        Fact(
            text=sentence(random.Random(i), i),
            importance=rng.randint(3, 5),
            category=rng.choice(CATEGORIES),
            tag="permanent",
        )
        for i in range(cap)
    ]
    text, _ = longterm.apply("", facts, "en", "2026-11-20", cap, session="telegram:42")
    start, end = longterm.locate(text) or (0, len(text))
    part = text[start:end]
    lines = longterm.parse(part, "2026-11-20").lines
    old = (
        f"{longterm.BEGIN} lang=en: facts kept by the summary worker, one per line; edits are kept; 'i4 2026-11-20 "
        "telegram:42' = importance 4 of 5, learned 2026-11-20 in session telegram:42 -->\n"
        + "\n".join(f"- {line.text} <!-- i{line.importance} {line.date} telegram:42 -->" for line in lines)
        + f"\n{longterm.END}"
    )
    return (
        f"managed part at the cap ({len(lines)} facts): {counter(part):,} tokens in every prompt, "
        f"{longterm.markup_share(part, counter):.1%} neither fact nor heading (line comments: "
        f"{counter(old):,} tokens, {longterm.markup_share(old, counter):.1%})"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Measure the MEMORY.md merge: N existing facts, M new candidates, in memory and on disk "
        "(lock + temp file + compare + replace). 'cold' clears the normalization caches before each run, "
        "as in a freshly started worker; 'warm' is a long-running worker."
    )
    parser.add_argument("--existing", type=int, default=10_000, help="facts already in the managed part (10000)")
    parser.add_argument("--new", type=int, default=100, help="candidate facts per merge (100)")
    parser.add_argument(
        "--duplicates",
        type=float,
        default=0.3,
        help="share of candidates that restate a known fact in another case/punctuation (0.3)",
    )
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure; the median is shown (5)")
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


Row = tuple[str, float, str]  # what, milliseconds (the median of the runs), throughput or size


def in_memory_rows(text: str, new: list[Fact], cap: int, args: argparse.Namespace) -> list[Row]:
    """The merge in memory, with the normalization caches cleared before each run (cold) and kept (warm)."""
    rows = []
    for label, cold in (("merge in memory, cold", True), ("merge in memory, warm", False)):
        runs = timed(lambda: longterm.apply(text, new, "en", "2026-11-20", cap), args.repeat, cold)
        rows.append((label, statistics.median(runs) * 1000, f"{args.new / statistics.median(runs):,.0f} candidates/s"))
    return rows


def on_disk_rows(
    folder: Path, text: str, new: list[Fact], cap: int, args: argparse.Namespace, rng: random.Random
) -> list[Row]:
    """The merge with its atomic write, 10,000 candidates into an empty part, and a daily-notes append."""
    rows = []
    path = folder / "MEMORY.md"

    def on_disk() -> None:
        path.write_text(text, encoding="utf-8")
        longterm.write_facts(path, new, "en", "2026-11-20", cap)

    runs = timed(on_disk, args.repeat, cold=False)
    rows.append(
        ("merge + atomic write, warm", statistics.median(runs) * 1000, f"{path.stat().st_size / 1e6:.2f} MB file")
    )

    many = candidates(10_000, random.Random(args.seed + 1), 0.0)
    runs = timed(lambda: longterm.apply("", many, "en", "2026-11-20", 300), max(1, args.repeat // 2), cold=True)
    rows.append(
        (
            "10,000 candidates into an empty part, cap 300",
            statistics.median(runs) * 1000,
            f"{10_000 / statistics.median(runs):,.0f} candidates/s",
        )
    )

    day = folder / "memory"
    notes = [
        DailyNotes(
            date="2026-11-20",
            first_timestamp=f"2026-11-20T{i // 60:02d}:{i % 60:02d}:00",
            last_timestamp=f"2026-11-20T{i // 60:02d}:{i % 60:02d}:30",
            topics=[sentence(rng, i)],
            decisions=[sentence(rng, i + 1)],
        )
        for i in range(200)
    ]
    append_notes(day, "cli:direct", notes[:199], "en", ZoneInfo("UTC"))
    runs = timed(lambda: append_notes(day, "cli:direct", notes[199:], "en", ZoneInfo("UTC")), 1, cold=False)
    rows.append(("daily notes: append to a day with 199 sections", statistics.median(runs) * 1000, ""))
    return rows


def print_rows(rows: list[Row]) -> None:
    """A table when rich is installed, plain lines otherwise."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        for label, ms, extra in rows:
            print(f"{label:<48} {ms:>10.1f} ms  {extra}")
        return
    table = Table(title="MEMORY.md merge (median of runs)")
    table.add_column("what")
    table.add_column("ms", justify="right")
    table.add_column("throughput / size", justify="right")
    for label, ms, extra in rows:
        table.add_row(label, f"{ms:,.1f}", extra)
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = random.Random(args.seed)
    cap = args.existing + args.new + 1  # no eviction: measure the merge itself
    text = existing_file(args.existing, rng)
    new = candidates(args.new, rng, args.duplicates)

    _, stats = longterm.apply(text, new, "en", "2026-11-20", cap)
    rows = in_memory_rows(text, new, cap, args)
    with tempfile.TemporaryDirectory() as folder:
        rows += on_disk_rows(Path(folder), text, new, cap, args, rng)

    print(
        f"existing facts {args.existing:,}; candidates {args.new} ({args.duplicates:.0%} restated); "
        f"first merge: +{stats.added} added, {stats.skipped} skipped"
    )
    print(prompt_cost(300))
    print_rows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
