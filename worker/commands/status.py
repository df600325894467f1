"""`nanobot-summary status`.

The worker's health, the queue, jobs in flight, records waiting for nanobot, resting sessions, spend and last outcomes,
as text for people, JSON or Prometheus metrics."""

from __future__ import annotations

import argparse
import json
from typing import Any

from nanobot_hooks.contract.client import close_client
from nanobot_hooks.contract.redis_url import redacted_url
from worker.commands import status_text
from worker.commands.embedded import embedded_owner
from worker.commands.metrics import prometheus
from worker.commands.startup import instance, refuse, run_command
from worker.connections import open_pool, redis_problem
from worker.state import liveness
from worker.state.snapshot import gather
from worker.text.clock import zone_or_utc


def as_json(state: dict[str, Any]) -> dict[str, Any]:
    """The state as `--json` prints it.

    arq's health line as named numbers (liveness.health_fields), and a cost no price is known for as null (`cost` 0.0 of
    calls litellm has no price for would read as free)."""

    def priced(spend: dict[str, Any]) -> dict[str, Any]:
        unknown = spend["calls"] and spend["unpriced_calls"] == spend["calls"]
        return {**spend, "cost": None} if unknown else spend

    spend = state["spend"]
    return {
        **state,
        "worker": liveness.health_fields(state["worker"]),
        "spend": {
            "total": priced(spend["total"]),
            "sessions": {key: priced(value) for key, value in spend["sessions"].items()},
        },
        "outcomes": [{**outcome, "spend": priced(outcome["spend"])} for outcome in state["outcomes"]],
    }


async def run(args: argparse.Namespace) -> int:
    settings, nanobot = instance()
    tz = zone_or_utc(settings.summary_timezone or nanobot.timezone)  # the page's zone: the notes'
    if problem := redis_problem(settings.redis_url, keys=settings.keys, **settings.redis_options()):
        code = refuse(problem)
        if args.prometheus:
            print(prometheus(None), end="")
        return code
    redis = await open_pool(settings)
    try:
        state = await gather(redis)
    finally:
        await close_client(redis)
    owner = embedded_owner(settings.redis_url)
    if args.prometheus:
        print(prometheus(state), end="")
    elif args.json:
        print(
            json.dumps(
                {
                    "redis": redacted_url(settings.redis_url),
                    "embedded_redis": owner,
                    "namespace": settings.summary_namespace,
                    **as_json(state),
                },
                ensure_ascii=False,
                indent=2,
            )
        )
    else:
        # The running worker's settings come from its own report (status_text); the shell's are not shown.
        print(f"Redis {redacted_url(settings.redis_url)}, namespace {settings.summary_namespace}, times in {tz.key}")
        if owner:
            print(f"  that Redis is {owner}")
        print("\n".join(status_text.render(state, status_text.terminal_width(), tz)))
    return 0


def main(args: argparse.Namespace) -> int:
    return run_command(run(args), on_refusal=lambda: print(prometheus(None), end="") if args.prometheus else None)
