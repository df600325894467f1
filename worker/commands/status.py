"""`nanobot-summary status`: the worker's health, the queue, jobs in flight, records waiting for nanobot, resting sessions, spend
and last outcomes, as tables, JSON or Prometheus metrics."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
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
from worker.settings import SettingsError, load_instance_settings

STATUSES = ("summarized", "noted", "noop", "failed")  # JobOutcome.status
PICKUP_RESULTS = ("applied", "stale", "duplicate")  # counted by nanobot_hooks in Keys.stats
METRIC_PREFIX = "nanobot_summary_"


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
    records = []
    for key in await pending_sessions(redis):
        record = await load_record(redis, key)
        if record is not None:
            records.append({"session": key, "reason": record.reason, "start": record.start,
                            "boundary": record.boundary, "tokens_before": record.tokens_before,
                            "tokens_after": record.tokens_after, "messages_before": record.messages_before,
                            "messages_after": record.messages_after, "created_at": record.created_at.isoformat()})
    resting = []
    for key in await _scan(redis, keys.cooldown("")):
        rest = await budget.cooling(redis, key)
        if rest is not None:
            resting.append({"session": key, **rest.model_dump(mode="json")})
    outcomes = []
    for key in await _scan(redis, keys.outcome_prefix):
        raw = await redis.get(keys.outcome(key))
        if raw:
            streak = await redis.get(keys.failures(key))
            outcomes.append({**JobOutcome.model_validate_json(raw).model_dump(mode="json"),
                             "failures_in_a_row": int(streak or 0)})
    spend = {key: budget.Spend.from_hash(await redis.hgetall(keys.spend(f"session:{key}"))).model_dump()
             for key in await _scan(redis, keys.spend("session:"))}
    stats = {_text(k): int(v) for k, v in (await redis.hgetall(keys.stats)).items()}
    return {
        "worker": _text(health) if health else None,
        "queued": len(waiting),
        "deferred": sum(1 for score in waiting if score > now_ms),
        "idle_checks": idle_checks,
        "in_flight": in_flight,
        "pending_records": records,
        "resting": resting,
        "outcomes": outcomes,
        "spend": {"total": budget.Spend.from_hash(await redis.hgetall(keys.spend("total"))).model_dump(),
                  "sessions": spend},
        "pickups": stats,
    }


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
        running = Table(title="jobs in flight")
        for column in ("session", "try", "job id"):
            running.add_column(column)
        for job in state["in_flight"]:
            running.add_row(escape(job["session"] or ""), str(job["try"] or ""), escape(job["job_id"]))
        console.print(running)

    pending = Table(title="records waiting for nanobot to apply them")
    for column in ("session", "trigger", "covers", "tokens before -> after", "messages before -> after", "made"):
        pending.add_column(column)
    for record in state["pending_records"]:
        pending.add_row(escape(record["session"]), record["reason"], f"{record['start']}..{record['boundary'] - 1}",
                        _arrow(record["tokens_before"], record["tokens_after"]),
                        _arrow(record["messages_before"], record["messages_after"]),
                        ago(datetime.fromisoformat(record["created_at"])))
    console.print(pending)

    if state["resting"]:
        resting = Table(title="sessions resting after a failed or fruitless job (the trigger waits)")
        for column in ("session", "until (UTC)", "failures in a row", "why"):
            resting.add_column(column)
        for rest in state["resting"]:
            resting.add_row(escape(rest["session"]), rest["until"][:19].replace("T", " "), str(rest["failures"]),
                            escape(rest["reason"]))
        console.print(resting)

    outcomes = Table(title="last job per session")
    for column in ("session", "status", "trigger", "tokens before -> after", "messages before -> after", "model",
                   "spent", "took", "finished", "detail"):
        outcomes.add_column(column)
    for outcome in state["outcomes"]:
        spend = outcome["spend"]
        style = {"failed": "red", "noop": "dim"}.get(outcome["status"], "green")
        status = f"[{style}]{outcome['status']}[/]"
        status += f" ({outcome['failures_in_a_row']} in a row)" if outcome["failures_in_a_row"] > 1 else ""
        took = f"{outcome['seconds']:.1f}s" if outcome["seconds"] is not None else ""
        took += f" (try {outcome['job_try']})" if outcome["job_try"] > 1 else ""
        spent = (f"{spend['calls']} calls, {spend['prompt_tokens'] + spend['completion_tokens']:,} tokens, "
                 f"{_money(spend)}")
        outcomes.add_row(escape(outcome["session_key"]), status, outcome["reason"],
                         _arrow(outcome["tokens_before"], outcome["tokens_after"]),
                         _arrow(outcome["messages_before"], outcome["messages_after"]), escape(outcome["model"]),
                         spent, took, ago(datetime.fromisoformat(outcome["finished_at"])), escape(outcome["detail"]))
    console.print(outcomes)

    if state["spend"]["sessions"]:
        spent = Table(title="summarizing spend per session, since the first job")
        for column in ("session", "calls", "prompt tokens", "completion tokens", "cached", "cost"):
            spent.add_column(column)
        for key, spend in state["spend"]["sessions"].items():
            spent.add_row(escape(key), str(spend["calls"]), f"{spend['prompt_tokens']:,}",
                          f"{spend['completion_tokens']:,}", f"{spend['cached_tokens']:,}", _money(spend))
        console.print(spent)


# --- Prometheus text exposition format 0.0.4 -----------------------------------------------------------------

Samples = list[tuple[dict[str, str], float]]


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(value: str) -> str:
    return _escape_help(value).replace('"', '\\"')


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _family(name: str, kind: str, text: str, samples: Samples) -> list[str]:
    """One metric family: HELP and TYPE, then its samples (a family may have none yet)."""
    full = METRIC_PREFIX + name
    lines = [f"# HELP {full} {_escape_help(text)}", f"# TYPE {full} {kind}"]
    for labels, value in samples:
        inside = ",".join(f'{key}="{_escape_label(label)}"' for key, label in labels.items())
        lines.append(f"{full}{{{inside}}} {_number(value)}" if inside else f"{full} {_number(value)}")
    return lines


def _per_session(outcomes: list[dict[str, Any]], field: str) -> Samples:
    return [({"session": o["session_key"]}, o[field]) for o in outcomes if o[field] is not None]


def prometheus(state: dict[str, Any] | None, now: datetime | None = None) -> str:
    """The state as Prometheus metrics; `None` (Redis did not answer) gives only `redis_up 0`."""
    lines = _family("redis_up", "gauge", "1 if Redis answered when these metrics were read.",
                    [({}, 0 if state is None else 1)])
    if state is None:
        return "\n".join(lines) + "\n"
    now = now or utcnow()
    records, outcomes, total = state["pending_records"], state["outcomes"], state["spend"]["total"]
    oldest = min((datetime.fromisoformat(r["created_at"]) for r in records), default=now)
    families = [
        ("worker_up", "gauge", "1 if a worker is alive: arq's health-check key, rewritten every 30 s, is there.",
         [({}, 1 if state["worker"] else 0)]),
        ("queue_depth", "gauge", "Summary jobs in the queue that no worker runs yet (deferred ones included, idle checks apart).",
         [({}, state["queued"])]),
        ("queue_deferred", "gauge", "Queued jobs waiting for a later time (a retry's backoff).",
         [({}, state["deferred"])]),
        ("idle_checks", "gauge", "Idle checks waiting for their sessions to be quiet past the cache lifetime.",
         [({}, state["idle_checks"])]),
        ("jobs_in_flight", "gauge", "Jobs a worker runs now (arq in-progress keys).",
         [({}, len(state["in_flight"]))]),
        ("pending_records", "gauge", "Finished summaries waiting for nanobot to apply them.", [({}, len(records))]),
        ("oldest_pending_record_age_seconds", "gauge",
         "Age of the oldest summary waiting for nanobot (0 when none): grows while no nanobot applies them.",
         [({}, max(0.0, (now - oldest).total_seconds()))]),
        ("resting_sessions", "gauge", "Sessions resting after a failed or fruitless job (the trigger waits).",
         [({}, len(state["resting"]))]),
        ("llm_calls_total", "counter", "Summarizing LLM calls since the first job.", [({}, total["calls"])]),
        ("prompt_tokens_total", "counter", "Prompt tokens of summarizing calls, as providers reported them.",
         [({}, total["prompt_tokens"])]),
        ("completion_tokens_total", "counter", "Completion tokens of summarizing calls.",
         [({}, total["completion_tokens"])]),
        ("cached_tokens_total", "counter", "Cached prompt tokens of summarizing calls.",
         [({}, total["cached_tokens"])]),
        ("cost_usd_total", "counter", "What summarizing cost, in USD, from litellm's price table.",
         [({}, total["cost"])]),
        ("unpriced_calls_total", "counter", "Summarizing calls of a model litellm has no price for.",
         [({}, total["unpriced_calls"])]),
        ("pickups_total", "counter",
         "Records nanobot picked up: applied, stale (dropped, the session had changed), duplicate.",
         [({"result": result}, state["pickups"].get(result, 0))
          for result in dict.fromkeys([*PICKUP_RESULTS, *sorted(state["pickups"])])]),
        ("last_outcome_status", "gauge", "1 for the status of the session's last job, 0 for the others.",
         [({"session": o["session_key"], "status": status}, 1 if o["status"] == status else 0)
          for o in outcomes for status in STATUSES]),
        ("last_outcome_seconds", "gauge", "How long the session's last job ran.", _per_session(outcomes, "seconds")),
        ("last_outcome_finished_timestamp_seconds", "gauge", "When the session's last job ended (Unix time).",
         [({"session": o["session_key"]}, datetime.fromisoformat(o["finished_at"]).timestamp()) for o in outcomes]),
        ("last_outcome_tokens_before", "gauge", "Replayed tokens before the session's last summary (estimate).",
         _per_session(outcomes, "tokens_before")),
        ("last_outcome_tokens_after", "gauge", "Replayed tokens after it, the summary included (estimate).",
         _per_session(outcomes, "tokens_after")),
    ]
    for name, kind, text, samples in families:
        lines += _family(name, kind, text, samples)
    return "\n".join(lines) + "\n"


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
