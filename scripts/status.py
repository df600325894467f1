#!/usr/bin/env python3
"""Status: the worker's health, queued jobs, records waiting for nanobot, and each session's last outcome."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from arq.connections import create_pool  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from nanobot_hooks.contract import QUEUE_NAME, utcnow  # noqa: E402
from nanobot_hooks.queue import load_record, pending_sessions  # noqa: E402
from worker.settings import SettingsError, load_settings  # noqa: E402
from worker.connections import answers, redis_settings  # noqa: E402
from worker.outcomes import OUTCOME_PREFIX, JobOutcome  # noqa: E402


def ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


async def show(console: Console) -> int:
    settings = load_settings()
    if not answers(settings.redis_url):
        print(f"error: Redis at {settings.redis_url} does not answer", file=sys.stderr)
        return 2
    redis = await create_pool(redis_settings(settings.redis_url))
    health = await redis.get(f"{QUEUE_NAME}:health-check")
    queued = await redis.zcard(QUEUE_NAME)
    console.print(f"Redis {settings.redis_url}; auto summary {'on' if settings.auto_summary else 'off'}")
    console.print(f"worker: {health.decode() if health else '[yellow]no health report in the last minute[/]'}")
    console.print(f"queued jobs: {queued}")

    pending = Table(title="records waiting for nanobot to apply them")
    for column in ("session", "covers", "tokens before -> after", "made"):
        pending.add_column(column)
    for key in await pending_sessions(redis):
        record = await load_record(redis, key)
        if record is not None:
            pending.add_row(key, f"{record.start}..{record.boundary - 1}",
                            f"{record.tokens_before} -> {record.tokens_after}",
                            ago((utcnow() - record.created_at).total_seconds()))
    console.print(pending)

    outcomes = Table(title="last job per session")
    for column in ("session", "status", "detail", "took", "finished"):
        outcomes.add_column(column)
    async for raw_key in redis.scan_iter(match=f"{OUTCOME_PREFIX}*", count=500):
        raw = await redis.get(raw_key)
        if raw:
            outcome = JobOutcome.model_validate_json(raw)
            style = {"failed": "red", "noop": "dim"}.get(outcome.status, "green")
            took = f"{outcome.seconds:.1f}s" + (f" (try {outcome.job_try})" if outcome.job_try > 1 else "") \
                if outcome.seconds is not None else ""
            outcomes.add_row(outcome.session_key, f"[{style}]{outcome.status}[/]", outcome.detail, took,
                             ago((utcnow() - outcome.finished_at).total_seconds()))
    console.print(outcomes)
    await redis.aclose()
    return 0


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        prog="scripts/status.py",
        description="Show the summary worker's state in Redis (REDIS_URL): health, queue, pending records, outcomes.",
    ).parse_args(argv)
    console = Console()
    try:
        return asyncio.run(show(console))
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
