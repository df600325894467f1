#!/usr/bin/env python3
"""Status: the worker's health, the queue, records waiting for nanobot, resting sessions, spend, and last outcomes."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the worker runs from this checkout

from arq.connections import ArqRedis, create_pool  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from nanobot_hooks.contract import KEY_PREFIX, QUEUE_NAME, STATS_KEY, utcnow  # noqa: E402
from nanobot_hooks.queue import load_record, pending_sessions  # noqa: E402
from nanobot_hooks.settings import redacted_url  # noqa: E402
from worker import budget  # noqa: E402
from worker.connections import answers, redis_settings  # noqa: E402
from worker.outcomes import OUTCOME_PREFIX, JobOutcome  # noqa: E402
from worker.settings import SettingsError, load_settings  # noqa: E402


def ago(moment: datetime) -> str:
    seconds = (utcnow() - moment).total_seconds()
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


async def _scan(redis: ArqRedis, prefix: str) -> list[str]:
    keys = [k.decode() if isinstance(k, bytes) else k async for k in redis.scan_iter(match=f"{prefix}*", count=500)]
    return sorted(k[len(prefix):] for k in keys)


async def gather(redis: ArqRedis) -> dict[str, Any]:
    """Everything status shows, as plain data (also what --json prints)."""
    health = await redis.get(f"{QUEUE_NAME}:health-check")
    records = []
    for key in await pending_sessions(redis):
        record = await load_record(redis, key)
        if record is not None:
            records.append({"session": key, "start": record.start, "boundary": record.boundary,
                            "tokens_before": record.tokens_before, "tokens_after": record.tokens_after,
                            "created_at": record.created_at.isoformat()})
    resting = []
    for key in await _scan(redis, f"{KEY_PREFIX}:cooldown:"):
        rest = await budget.cooling(redis, key)
        if rest is not None:
            resting.append({"session": key, **rest.model_dump(mode="json")})
    outcomes = []
    for key in await _scan(redis, OUTCOME_PREFIX):
        raw = await redis.get(OUTCOME_PREFIX + key)
        if raw:
            outcomes.append(JobOutcome.model_validate_json(raw).model_dump(mode="json"))
    spend = {key: budget.Spend.from_hash(await redis.hgetall(budget.spend_key(f"session:{key}"))).model_dump()
             for key in await _scan(redis, budget.spend_key("session:"))}
    stats = {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in (await redis.hgetall(STATS_KEY)).items()}
    return {
        "worker": health.decode() if health else None,
        "queued": await redis.zcard(QUEUE_NAME),
        "pending_records": records,
        "resting": resting,
        "outcomes": outcomes,
        "spend": {"total": budget.Spend.from_hash(await redis.hgetall(budget.SPEND_TOTAL)).model_dump(),
                  "sessions": spend},
        "pickups": stats,
    }


def _money(spend: dict[str, Any]) -> str:
    if spend["calls"] and spend["unpriced_calls"] == spend["calls"]:
        return "unknown"
    return f"${spend['cost']:.4f}" + ("+" if spend["unpriced_calls"] else "")


def show(console: Console, state: dict[str, Any]) -> None:
    console.print(f"worker: {state['worker'] or '[yellow]no health report in the last minute[/]'}")
    console.print(f"queued jobs: {state['queued']}; pickups: {state['pickups'] or 'none yet'}")
    total = state["spend"]["total"]
    console.print(f"summarizing so far: {total['calls']} calls, {total['prompt_tokens']:,} prompt + "
                  f"{total['completion_tokens']:,} completion tokens, cost {_money(total)}")

    pending = Table(title="records waiting for nanobot to apply them")
    for column in ("session", "covers", "tokens before -> after", "made"):
        pending.add_column(column)
    for record in state["pending_records"]:
        pending.add_row(record["session"], f"{record['start']}..{record['boundary'] - 1}",
                        f"{record['tokens_before']} -> {record['tokens_after']}",
                        ago(datetime.fromisoformat(record["created_at"])))
    console.print(pending)

    if state["resting"]:
        resting = Table(title="sessions resting after a failed or fruitless job (the trigger waits)")
        for column in ("session", "until (UTC)", "failures in a row", "why"):
            resting.add_column(column)
        for rest in state["resting"]:
            resting.add_row(rest["session"], rest["until"][:19].replace("T", " "), str(rest["failures"]),
                            rest["reason"])
        console.print(resting)

    outcomes = Table(title="last job per session")
    for column in ("session", "status", "trigger", "tokens before -> after", "calls", "tokens spent", "cost",
                   "took", "finished", "detail"):
        outcomes.add_column(column)
    for outcome in state["outcomes"]:
        spend = outcome["spend"]
        style = {"failed": "red", "noop": "dim"}.get(outcome["status"], "green")
        took = f"{outcome['seconds']:.1f}s" if outcome["seconds"] is not None else ""
        took += f" (try {outcome['job_try']})" if outcome["job_try"] > 1 else ""
        shrink = f"{outcome['tokens_before']} -> {outcome['tokens_after']}" if outcome["tokens_before"] else ""
        outcomes.add_row(outcome["session_key"], f"[{style}]{outcome['status']}[/]", outcome["reason"], shrink,
                         str(spend["calls"]), f"{spend['prompt_tokens'] + spend['completion_tokens']:,}",
                         _money(spend), took, ago(datetime.fromisoformat(outcome["finished_at"])),
                         outcome["detail"])
    console.print(outcomes)

    if state["spend"]["sessions"]:
        spent = Table(title="summarizing spend per session, since the first job")
        for column in ("session", "calls", "prompt tokens", "completion tokens", "cached", "cost"):
            spent.add_column(column)
        for key, spend in state["spend"]["sessions"].items():
            spent.add_row(key, str(spend["calls"]), f"{spend['prompt_tokens']:,}", f"{spend['completion_tokens']:,}",
                          f"{spend['cached_tokens']:,}", _money(spend))
        console.print(spent)


async def run(args: argparse.Namespace) -> int:
    settings = load_settings()
    if not answers(settings.redis_url, **settings.redis_options()):
        print(f"error: Redis at {redacted_url(settings.redis_url)} does not answer", file=sys.stderr)
        return 2
    redis = await create_pool(redis_settings(settings.redis_url, **settings.redis_options()), retry=0)
    try:
        state = await gather(redis)
    finally:
        await redis.aclose()
    if args.json:
        print(json.dumps({"redis": redacted_url(settings.redis_url), "auto_summary": settings.auto_summary,
                          **state}, ensure_ascii=False, indent=2))
        return 0
    console = Console()
    console.print(f"Redis {redacted_url(settings.redis_url)}; auto summary {'on' if settings.auto_summary else 'off'}")
    show(console, state)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/status.py",
        description="Show the summary worker's state in Redis (REDIS_URL): health, queue, records waiting for "
        "nanobot, resting sessions, what summarizing cost, and each session's last job.",
    )
    parser.add_argument("--json", action="store_true", help="print the same as one JSON object, for scripts")
    args = parser.parse_args(argv)
    try:
        return asyncio.run(run(args))
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
