"""`nanobot-summary status`: the worker's health, the queue, jobs in flight, records waiting for nanobot, resting sessions, spend
and last outcomes, as tables, JSON or Prometheus metrics."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime
from typing import Any

from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix, retry_key_prefix
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nanobot_hooks.contract import Keys, utcnow
from nanobot_hooks.queue import load_record, pending_sessions
from nanobot_hooks.settings import redacted_url
from worker.state import budget
from worker.connections import open_pool, redis_problem
from worker.errors import NanobotConfigError
from worker.state.outcomes import JobOutcome
from worker.commands.metrics import prometheus
from worker.settings import SettingsError, load_instance_settings



def ago(moment: datetime) -> str:
    seconds = (utcnow() - moment).total_seconds()
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def _scan(redis: ArqRedis, prefix: str) -> list[str]:
    keys = [_text(k) async for k in redis.scan_iter(match=f"{prefix}*", count=500)]
    return sorted(k[len(prefix):] for k in keys)


async def gather(redis: ArqRedis) -> dict[str, Any]:
    """Everything status shows, as plain data (also what --json prints); the only place that reads Redis."""
    keys = Keys.of(redis)
    health = await redis.get(f"{keys.queue}:health-check")
    # arq keeps a running job in the queue until it ends, and marks it with an in-progress key.
    running = await _scan(redis, in_progress_key_prefix)
    in_flight = []
    for job in running:
        tries = await redis.get(retry_key_prefix + job)
        in_flight.append({"job_id": job, "session": keys.session_of_job(job), "try": int(tries) if tries else None})
    now_ms = utcnow().timestamp() * 1000
    queue = [(_text(job), score) for job, score in await redis.zrange(keys.queue, 0, -1, withscores=True)
             if _text(job) not in running]
    # Idle checks wait by design (one per recently active session, until it has been quiet long enough).
    idle_checks = sum(1 for job, _ in queue if job.startswith(keys.idle_job_id("")))
    waiting = [score for job, score in queue if not job.startswith(keys.idle_job_id(""))]
    spend = {key: budget.Spend.from_hash(await redis.hgetall(keys.spend(f"session:{key}"))).model_dump()
             for key in await _scan(redis, keys.spend("session:"))}
    stats = {_text(k): int(v) for k, v in (await redis.hgetall(keys.stats)).items()}
    return {
        "worker": _text(health) if health else None,
        "queued": len(waiting),
        "deferred": sum(1 for score in waiting if score > now_ms),
        "idle_checks": idle_checks,
        "in_flight": in_flight,
        "pending_records": await _records(redis),
        "resting": await _resting(redis),
        "outcomes": await _outcomes(redis),
        "spend": {"total": budget.Spend.from_hash(await redis.hgetall(keys.spend("total"))).model_dump(),
                  "sessions": spend},
        "pickups": stats,
    }


async def _records(redis: ArqRedis) -> list[dict[str, Any]]:
    records = []
    for key in await pending_sessions(redis):
        record = await load_record(redis, key)
        if record is not None:
            records.append({"session": key, "reason": record.reason, "start": record.start,
                            "boundary": record.boundary, "tokens_before": record.tokens_before,
                            "tokens_after": record.tokens_after, "messages_before": record.messages_before,
                            "messages_after": record.messages_after, "created_at": record.created_at.isoformat()})
    return records


async def _resting(redis: ArqRedis) -> list[dict[str, Any]]:
    resting = []
    for key in await _scan(redis, Keys.of(redis).cooldown("")):
        rest = await budget.cooling(redis, key)
        if rest is not None:
            resting.append({"session": key, **rest.model_dump(mode="json")})
    return resting


async def _outcomes(redis: ArqRedis) -> list[dict[str, Any]]:
    keys = Keys.of(redis)
    outcomes = []
    for key in await _scan(redis, keys.outcome_prefix):
        raw = await redis.get(keys.outcome(key))
        if raw:
            streak = await redis.get(keys.failures(key))
            outcomes.append({**JobOutcome.model_validate_json(raw).model_dump(mode="json"),
                             "failures_in_a_row": int(streak or 0)})
    return outcomes


def _money(spend: dict[str, Any]) -> str:
    if spend["calls"] and spend["unpriced_calls"] == spend["calls"]:
        return "unknown"
    return f"${spend['cost']:.4f}" + ("+" if spend["unpriced_calls"] else "")


def _arrow(before: int | None, after: int | None) -> str:
    return f"{before} -> {after}" if before is not None else ""


def show(console: Console, state: dict[str, Any]) -> None:
    # Session keys, details and reasons come from chats and models: escaped, so rich never reads them as markup.
    health = escape(state["worker"]) if state["worker"] else "[yellow]no health report (a live one comes every 30 s)[/]"
    console.print(f"worker: {health}")
    console.print(f"queued jobs: {state['queued']} ({state['deferred']} waiting for a retry time); "
                  f"idle checks waiting: {state['idle_checks']}; "
                  f"in flight: {len(state['in_flight'])}; pickups: {state['pickups'] or 'none yet'}")
    total = state["spend"]["total"]
    console.print(f"summarizing so far: {total['calls']} calls, {total['prompt_tokens']:,} prompt + "
                  f"{total['completion_tokens']:,} completion tokens, cost {_money(total)}")
    if state["in_flight"]:
        console.print(_table("jobs in flight", ("session", "try", "job id"),
                             [(escape(job["session"] or ""), str(job["try"] or ""), escape(job["job_id"]))
                              for job in state["in_flight"]]))
    console.print(_table("records waiting for nanobot to apply them",
                         ("session", "trigger", "covers", "tokens before -> after", "messages before -> after", "made"),
                         [_record_row(record) for record in state["pending_records"]]))
    if state["resting"]:
        console.print(_table("sessions resting after a failed or fruitless job (the trigger waits)",
                             ("session", "until (UTC)", "failures in a row", "why"),
                             [(escape(rest["session"]), rest["until"][:19].replace("T", " "), str(rest["failures"]),
                               escape(rest["reason"])) for rest in state["resting"]]))
    console.print(_table("last job per session",
                         ("session", "status", "trigger", "tokens before -> after", "messages before -> after",
                          "model", "spent", "took", "finished", "detail"),
                         [_outcome_row(outcome) for outcome in state["outcomes"]]))
    if state["spend"]["sessions"]:
        console.print(_table("summarizing spend per session, since the first job",
                             ("session", "calls", "prompt tokens", "completion tokens", "cached", "cost"),
                             [(escape(key), str(spend["calls"]), f"{spend['prompt_tokens']:,}",
                               f"{spend['completion_tokens']:,}", f"{spend['cached_tokens']:,}", _money(spend))
                              for key, spend in state["spend"]["sessions"].items()]))


def _table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    return table


def _record_row(record: dict[str, Any]) -> tuple[str, ...]:
    return (escape(record["session"]), record["reason"], f"{record['start']}..{record['boundary'] - 1}",
            _arrow(record["tokens_before"], record["tokens_after"]),
            _arrow(record["messages_before"], record["messages_after"]),
            ago(datetime.fromisoformat(record["created_at"])))


def _outcome_row(outcome: dict[str, Any]) -> tuple[str, ...]:
    spend = outcome["spend"]
    style = {"failed": "red", "noop": "dim"}.get(outcome["status"], "green")
    status = f"[{style}]{outcome['status']}[/]"
    status += f" ({outcome['failures_in_a_row']} in a row)" if outcome["failures_in_a_row"] > 1 else ""
    took = f"{outcome['seconds']:.1f}s" if outcome["seconds"] is not None else ""
    took += f" (try {outcome['job_try']})" if outcome["job_try"] > 1 else ""
    spent = (f"{spend['calls']} calls, {spend['prompt_tokens'] + spend['completion_tokens']:,} tokens, "
             f"{_money(spend)}")
    return (escape(outcome["session_key"]), status, outcome["reason"],
            _arrow(outcome["tokens_before"], outcome["tokens_after"]),
            _arrow(outcome["messages_before"], outcome["messages_after"]), escape(outcome["model"]),
            spent, took, ago(datetime.fromisoformat(outcome["finished_at"])), escape(outcome["detail"]))


async def run(args: argparse.Namespace) -> int:
    settings = load_instance_settings()
    if problem := redis_problem(settings.redis_url, **settings.redis_options()):
        print(f"error: {problem}", file=sys.stderr)
        if args.prometheus:
            print(prometheus(None), end="")
        return 2
    redis = await open_pool(settings)
    try:
        state = await gather(redis)
    finally:
        await redis.aclose()
    if args.prometheus:
        print(prometheus(state), end="")
    elif args.json:
        print(json.dumps({"redis": redacted_url(settings.redis_url), "namespace": settings.summary_namespace,
                          "auto_summary": settings.auto_summary, **state}, ensure_ascii=False, indent=2))
    else:
        console = Console()
        console.print(f"Redis {redacted_url(settings.redis_url)}, namespace {settings.summary_namespace}; auto summary "
                      f"{'on' if settings.auto_summary else 'off'}")
        show(console, state)
    return 0


def main(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(run(args))
    except (SettingsError, NanobotConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        if args.prometheus:
            print(prometheus(None), end="")
        return 2
