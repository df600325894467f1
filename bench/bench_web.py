"""Benchmark of `nanobot-summary web`: each page's time to answer and its size with a year of data (issue 27's
goal: under 200 ms each with 100,000 messages, 300 facts and 365 day files; issue 36's: under 200 ms and 300 KB
of HTML each with --sessions 1000 --facts 5000; issue 46's: the same with --waiting 1000 --resting 300, summaries
waiting for nanobot and resting sessions), served on loopback as the command serves it.

The year is written directly, as nanobot and the worker leave it (session files, MEMORY.md with its sidecar,
day files, the recall index, a last outcome per session, every seventh a failure, in a throwaway redis-server).
Prints one line per page (median and slowest of --runs requests, bytes of HTML), the time of one "forget
everywhere", and a JSON line."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import quote
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the worker runs from this checkout

from aiohttp.test_utils import TestClient, TestServer

from harness.redis_server import RedisServer
from harness.sandbox import NanobotHome
from harness.transcripts import conversation
from nanobot_hooks.contract.queue import store_record
from nanobot_hooks.contract.records import SummaryRecord
from worker.connections import queue_client
from worker.memory.elsewhere import where_else
from worker.memory.recall_index import RecallIndex
from worker.settings import Settings
from worker.state import budget
from worker.state.outcomes import JobOutcome, keep_outcome
from worker.web.app import make_app
from worker.web.guard import Guard
from worker.web.instance import Instance

START = datetime(2025, 11, 25, 8, 0)
NAMESPACE = "bench-web"


def write_year(home: NanobotHome, messages: int, sessions: int, facts: int, days: int) -> list[str]:
    """The files a year leaves: sessions (the first holds half the messages), MEMORY.md, day files, the index."""
    keys = [f"telegram:{100 + n}" for n in range(sessions)]
    step = timedelta(days=days) / max(1, messages // 2)
    for n, key in enumerate(keys):
        count = messages // 2 if n == 0 else max(2, messages // 2 // max(1, sessions - 1))
        turns = conversation(count // 2, start=START, step=step, user=f"question {{i}} of {key} about the deploy")
        home.write_session(key, turns, last_archived=max(0, len(turns) - 20))
    memory = home.workspace / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    home.write_facts(facts, keys[0])  # as the worker renders them, without minutes of its dedup
    section = "\n## {key} · 10:00–11:00\n\n### Topics\n- the deploy script\n- port {n}\n"
    for d in range(days):
        day = (START + timedelta(days=d)).date().isoformat()
        body = "".join(section.format(key=key, n=d) for key in keys[:5])
        (memory / f"{day}.md").write_text(f"# {day}\n{body}", encoding="utf-8")
    RecallIndex(home.workspace, ZoneInfo("UTC")).refresh(home.sessions_dir)
    return keys


async def keep_outcomes(url: str, keys: list[str], waiting: int = 0, resting: int = 0) -> None:
    """A last outcome per session, every seventh a failure; a summary waiting for nanobot for the first `waiting`
    sessions (made up ones past the folder's) and a rest for the first `resting`."""
    redis = queue_client(url, f"nanobot-summary:{NAMESPACE}:queue")
    every = keys + [f"telegram:{100 + n}" for n in range(len(keys), max(waiting, resting))]
    try:
        for key in every[:waiting]:
            await store_record(
                redis,
                SummaryRecord(
                    session_key=key,
                    summary="## What happened\n- the deploy",
                    start=0,
                    boundary=40,
                    boundary_timestamp=None,
                    messages_before=60,
                    messages_after=21,
                    tokens_before=40_000,
                    tokens_after=9_000,
                    reason="tokens",
                ),
            )
        for key in every[:resting]:
            await budget.start_rest(redis, key, "the model answered 500 three times", 600, 3600)
        for n, key in enumerate(keys):
            status = "failed" if n % 7 == 0 else "noop" if n % 3 else "summarized"
            await keep_outcome(
                redis,
                JobOutcome(
                    session_key=key,
                    status=status,
                    detail="nothing to cover beyond the keep rule" if n % 3 else "messages 0..40 in 1 call",
                    tokens_before=40_000 + n,
                    tokens_after=9_000,
                ),
            )
    finally:
        await redis.aclose()


PAGES = [
    "/",
    "/?outcome=failed&page=2",
    "/?waiting=10&resting=3",
    "/memory",
    "/memory?page=20",
    "/memory?q=port+8042",
    "/memory?q=fact+4",
    "/notes",
    "/notes?day=2026-03-01",
    "/sessions",
    "/sessions?page=5",
    "/sessions?channel=telegram&q=10",
]


def chromium_loads(base: str, token: str, pages: list[str]) -> dict[str, float]:
    """Each page's load in a headless Chromium (ms until `driver.get` returns: the load event), after the first
    visit left the token's cookie; nothing when chromium, chromedriver or selenium is missing."""
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium.webdriver import Chrome, ChromeOptions
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return {}
    if not (chromium and chromedriver):
        return {}
    options = ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = Chrome(service=Service(executable_path=chromedriver), options=options)
    try:
        driver.get(f"{base}/?token={token}")
        loads = {}
        for page in pages:
            began = time.perf_counter()
            driver.get(base + page)
            loads[page] = (time.perf_counter() - began) * 1000
        return loads
    finally:
        driver.quit()


async def time_pages(
    settings: Settings, keys: list[str], runs: int, browser: bool = False
) -> tuple[dict[str, list[float]], dict[str, int], dict[str, float]]:
    """Each page's times (ms, the first request not counted), its size (bytes of HTML) and, with `browser`, its
    load in Chromium (ms)."""
    pages = [
        *PAGES,
        f"/session?key={quote(keys[0], safe='')}",
        f"/recall?q=deploy+port&session={quote(keys[0], safe='')}",
    ]
    guard = Guard.for_bind("127.0.0.1")  # every request carries its token, as a script's would
    client = TestClient(
        TestServer(make_app(Instance.load(settings), guard), host="127.0.0.1"),
        headers={"Authorization": f"Bearer {guard.token}"},
    )
    await client.start_server()
    times: dict[str, list[float]] = {page: [] for page in pages}
    sizes: dict[str, int] = {}
    try:
        for page in pages:
            for _ in range(runs + 1):  # the first request warms the caches and is not counted
                began = time.perf_counter()
                async with client.get(page) as response:
                    body = await response.read()
                    assert response.status == 200, (page, response.status)
                    assert page != "/" or keys[0].encode() in body, "the overview shows the sessions' outcomes"
                times[page].append((time.perf_counter() - began) * 1000)
                sizes[page] = len(body)
            times[page] = times[page][1:]
        base = str(client.make_url("")).rstrip("/")
        loads = await asyncio.to_thread(chromium_loads, base, guard.token, pages) if browser else {}
    finally:
        await client.close()
    return times, sizes, loads


def time_forget_everywhere(home: NanobotHome, key: str) -> dict[str, float | int]:
    """Forget everywhere of one user message of `key` (worker.memory.elsewhere, as the page's button and
    `nanobot-summary forget --everywhere` run it): the report of where else it lives (after each Forget), then the
    removal, which also reads every session file for the messages no summary covered yet (ms, and what went)."""
    text = f"question 3 of {key}"
    began = time.perf_counter()
    where_else(home.workspace, home.sessions_dir, ZoneInfo("UTC"), text)
    report = (time.perf_counter() - began) * 1000
    began = time.perf_counter()
    done = where_else(home.workspace, home.sessions_dir, ZoneInfo("UTC"), text, remove=True)
    removal = (time.perf_counter() - began) * 1000
    assert done.problem is None and done.passages, done
    return {
        "report_ms": round(report, 1),
        "removal_ms": round(removal, 1),
        "passages": len(done.passages),
        "unarchived": done.unarchived,
    }


def show(
    args: argparse.Namespace,
    times: dict[str, list[float]],
    sizes: dict[str, int],
    loads: dict[str, float],
    forget: dict[str, float | int],
) -> None:
    """One line per page, the forget's, and the JSON line."""
    print(
        f"{args.messages:,} messages in {args.sessions} sessions, {args.facts} facts, {args.days} day files, "
        f"{args.waiting} summaries waiting, {args.resting} resting sessions"
    )
    for page, values in times.items():
        shown = f", Chromium {loads[page]:7.1f} ms" if page in loads else ""
        print(
            f"  {page:60} median {statistics.median(values):6.1f} ms, slowest {max(values):6.1f} ms, "
            f"{sizes[page] / 1024:7.1f} KB{shown}"
        )
    if args.browser and not loads:
        print("  (no Chromium load times: chromium, chromedriver or selenium is missing)")
    print(
        f"  forget everywhere of one message: where else it lives {forget['report_ms']:.1f} ms; removing it "
        f"({forget['passages']} passage(s), {forget['unarchived']} not archived yet; every session file read) "
        f"{forget['removal_ms']:.1f} ms"
    )
    print(
        json.dumps(
            {
                "pages": {page: round(statistics.median(v), 2) for page, v in times.items()},
                "slowest_ms": round(max(max(v) for v in times.values()), 2),
                "bytes": sizes,
                "largest_bytes": max(sizes.values()),
                "chromium_ms": {page: round(ms, 1) for page, ms in loads.items()},
                "forget_everywhere": forget,
            }
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages in all sessions (100000)")
    parser.add_argument("--sessions", type=int, default=50, help="sessions (50; issue 36: 1000)")
    parser.add_argument("--facts", type=int, default=300, help="facts in MEMORY.md (300; issue 36: 5000)")
    parser.add_argument("--days", type=int, default=365, help="day files (365)")
    parser.add_argument("--waiting", type=int, default=0, help="summaries waiting for nanobot (0; issue 46: 1000)")
    parser.add_argument("--resting", type=int, default=0, help="resting sessions (0; issue 46: 300)")
    parser.add_argument("--runs", type=int, default=20, help="timed requests per page (20)")
    parser.add_argument("--smoke", action="store_true", help="a small, quick run (for the test suite)")
    parser.add_argument("--browser", action="store_true", help="also time each page's load in headless Chromium")
    args = parser.parse_args(argv)
    if args.smoke:
        args.messages, args.sessions, args.facts, args.days, args.runs = 2_000, 5, 30, 10, 3
        args.waiting, args.resting = 60, 55
    with tempfile.TemporaryDirectory() as tmp:
        home = NanobotHome.create(Path(tmp), "http://127.0.0.1:9/v1")
        keys = write_year(home, args.messages, args.sessions, args.facts, args.days)
        redis = RedisServer(Path(tmp) / "redis").start()
        try:
            asyncio.run(keep_outcomes(redis.url(), keys, args.waiting, args.resting))
            settings = Settings(redis_url=redis.url(), config=home.config_path, summary_namespace=NAMESPACE)
            times, sizes, loads = asyncio.run(time_pages(settings, keys, args.runs, args.browser))
        finally:
            redis.stop()
        forget = time_forget_everywhere(home, keys[-1])
    show(args, times, sizes, loads, forget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
