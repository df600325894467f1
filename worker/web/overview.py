"""The overview.

The worker's health and settings, the queue, jobs in flight, records waiting for nanobot, resting sessions, spend
against the caps and each session's last outcome (linked to its session page). The state is read as `nanobot-summary
status` reads it (worker.state.snapshot.gather), namespace and all."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aiohttp import web

from nanobot_hooks.contract.queue import pending_sessions
from nanobot_hooks.contract.redis_url import redacted_url
from worker.state import budget
from worker.state.formats import memory_off
from worker.state.liveness import health_fields
from worker.state.snapshot import gather, records, resting_sessions, rests
from worker.web import charts
from worker.web.charts import WIDTH, context_bars
from worker.web.instance import Instance
from worker.web.names import names
from worker.web.paging import Window, window
from worker.web.render import INSTANCE, render

OUTCOMES_PER_PAGE = 50
LISTED_PER_PAGE = 50  # waiting records (another version's and damaged ones among them), resting sessions
_LISTS = ("waiting", "resting")

# A setting whose name says it holds a credential is never shown, whatever its value.
_SECRET_NAME = re.compile(r"key|token|password|secret|credential|auth", re.IGNORECASE)


def shown_settings(settings: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The running worker's settings as it reports them, without credentials and URL passwords."""
    shown = []
    for name, value in sorted((settings or {}).items()):
        if _SECRET_NAME.search(name):
            continue
        text = str(value)
        shown.append((name, " ".join(redacted_url(word) if "://" in word else word for word in text.split())))
    return shown


async def spend_today(instance: Instance, redis: Any) -> dict[str, Any]:
    """Summarizing tokens today against the daily caps, and this month's tokens and cost.

    Summarizing tokens today (the worker's day, in the notes' time zone) against the daily caps, and this month's tokens
    and cost."""
    keys = instance.settings.keys
    raw = {
        (k.decode() if isinstance(k, bytes) else k): int(v)
        for k, v in (await redis.hgetall(keys.spend(f"day:{instance.today()}"))).items()
    }
    sessions = {k[len("tokens:") :]: v for k, v in raw.items() if k.startswith("tokens:")}
    busiest = max(sessions.items(), key=lambda item: item[1]) if sessions else None
    month_tokens, month_cost = await budget.month_spend(redis, instance.today()[:7])
    return {
        "tokens": raw.get("tokens", 0),
        "cap_total": instance.settings.summary_daily_tokens_total,
        "cap_session": instance.settings.summary_daily_tokens,
        "busiest": busiest,
        "month": instance.today()[:7],
        "month_tokens": month_tokens,
        "month_cost": month_cost,
    }


def outcome_page(
    outcomes: list[dict[str, Any]], params: dict[str, str]
) -> tuple[list[dict[str, Any]], Window, dict[str, int]]:
    """The outcomes one page of the overview lists.

    Failures first, then the newest first; only those with the status `params["outcome"]` when it names one; and the
    count of each status, for the filter's choices."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome["status"]] = counts.get(outcome["status"], 0) + 1
    wanted = params.get("outcome", "")
    chosen = [o for o in outcomes if not wanted or o["status"] == wanted]
    chosen.sort(key=lambda o: o.get("finished_at") or "", reverse=True)
    chosen.sort(key=lambda o: o["status"] != "failed")  # stable: each group stays newest first
    pager = window(OUTCOMES_PER_PAGE, len(chosen), "/", params)
    return chosen[pager.start : pager.stop], pager, dict(sorted(counts.items()))


async def listed(redis: Any, state: dict[str, Any], params: dict[str, str]) -> dict[str, Window]:
    """The page of waiting records and of resting sessions the overview shows, and their pagers.

    The page of the waiting records and of the resting sessions the overview shows, read into `state` (only those: 1,000
    waiting records, each read, made the page 361 KB and 2.6 s); their pagers."""
    waiting, resting = await pending_sessions(redis), await resting_sessions(redis)
    pagers = {
        "waiting": window(LISTED_PER_PAGE, len(waiting), "/", params, name="waiting"),
        "resting": window(LISTED_PER_PAGE, len(resting), "/", params, name="resting"),
    }
    state.update(await records(redis, waiting[pagers["waiting"].start : pagers["waiting"].stop]))
    state["resting"] = await rests(redis, resting[pagers["resting"].start : pagers["resting"].stop])
    return pagers


async def overview_data(instance: Instance, params: dict[str, str]) -> dict[str, Any]:
    async def reading(redis: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Window]]:
        state = await gather(redis, lists=False)
        return state, await spend_today(instance, redis), await listed(redis, state, params)

    found, problem = await instance.read(reading)
    if found is None:
        return {"state": None, "problem": problem}
    state, today, pagers = found
    state["outcomes"].sort(key=lambda o: o.get("finished_at") or "", reverse=True)
    bars, height, ticks = context_bars(state["outcomes"])
    off = memory_off(state["answer_formats"], state["outcomes"])
    state["outcomes"], pager, counts = outcome_page(state["outcomes"], params)
    return {
        "state": state,
        "problem": None,
        "today": today,
        "memory_off": off,
        "pager": pager,
        "counts": counts,
        "wanted": params["outcome"],
        "total": budget.Spend(**state["spend"]["total"]),
        "settings": shown_settings(state["worker_settings"]),
        "health": health_fields(state["worker"]),
        "bars": bars,
        "chart_height": height,
        "chart_width": WIDTH,
        "ticks": ticks,
        "pagers": pagers,
    }


async def page(request: web.Request) -> web.Response:
    instance = request.app[INSTANCE]
    params = {name: request.query.get(name, "") for name in ("outcome", "page", *_LISTS)}
    data = await overview_data(instance, params)
    state = data["state"] or {}
    shown = [outcome["session_key"] for outcome in state.get("outcomes", [])]
    shown += [r["session"] for r in state.get("pending_records", []) + state.get("resting", [])]
    named = await asyncio.to_thread(names, instance.sessions_dir, shown + [bar.key for bar in data.get("bars", [])])
    if data.get("bars"):
        data["bars"] = charts.named(data["bars"], named)
    return render(request, "overview.html", redis=instance.redis_shown, names=named, **data)
