"""How each summary model answers notes, as the worker learned it.

A model that answered prose where JSON was asked for gets its notes asked for as plain lines from then on
(worker.model.lines), so the JSON call it fails is not paid again; one that follows neither format has its notes off for
a day. Kept in Redis, so every worker of the instance and every restart knows it; `memory_off` says where memory is off,
and why, for doctor, status and the page."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from arq.connections import ArqRedis
from pydantic import BaseModel, Field, ValidationError

from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.records import utcnow
from worker.state import index

Format = Literal["lines", "off"]
# Lines work for any model (a JSON answer is read too), so they are kept long; "off" is tried again after a day,
# for a model that was down-graded or confused once.
KEEP_SECONDS: dict[str, int] = {"lines": 30 * 24 * 3600, "off": 24 * 3600}


class Learned(BaseModel):
    format: Format
    reason: str  # what the model answered, in a few words
    since: datetime = Field(default_factory=utcnow)

    @property
    def until(self) -> datetime:
        return self.since + timedelta(seconds=KEEP_SECONDS[self.format])


async def learned(redis: ArqRedis, model: str) -> Learned | None:
    """What is known of `model`'s notes answers; None when it answered JSON, or nothing is known yet."""
    raw = await redis.get(Keys.of(redis).notes_format(model))
    try:
        return Learned.model_validate_json(raw) if raw else None
    except ValidationError:
        return None


async def learn(redis: ArqRedis, model: str, format: Format, reason: str) -> None:
    found = Learned(format=format, reason=reason[:200])
    keys = Keys.of(redis)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.set(keys.notes_format(model), found.model_dump_json(), ex=KEEP_SECONDS[format])
        index.remember(pipe, keys, "formats", model)
        await pipe.execute()


async def all_learned(redis: ArqRedis) -> dict[str, dict[str, Any]]:
    """Every model's learned format, for status (plain data, as status's JSON prints it)."""
    found = {}
    for name in await index.members(redis, "formats", Keys.of(redis).notes_format):
        one = await learned(redis, name)
        if one is not None:
            found[name] = {**one.model_dump(mode="json"), "until": one.until.isoformat()}
    return dict(sorted(found.items()))


def memory_off(formats: dict[str, dict[str, Any]], outcomes: list[dict[str, Any]]) -> list[str]:
    """Where the daily notes and long-term facts are off or run on the fallback, and why, one line each.

    A model that follows no notes format, and each session whose last job wrote none (its `memory_skipped`) or whose
    notes the fallback wrote (its `notes_fallback`)."""
    lines = [
        f"memory runs on the fallback for model {model}: it answered neither JSON nor the plain lines asked for "
        f"({known['reason']}), so the day's notes are the user's own lines and no facts are taken; "
        f"asked again after {known['until'][:16].replace('T', ' ')} UTC"
        for model, known in formats.items()
        if known.get("format") == "off"
    ]
    for outcome in outcomes:
        key, skipped = outcome["session_key"], outcome.get("memory_skipped")
        if outcome.get("notes_fallback"):
            lines.append(
                f"{key}: notes: fallback, the user's own lines ({outcome['notes_fallback']})"
                + (f"; facts skipped ({skipped})" if skipped else "")
            )
        elif skipped:
            lines.append(f"{key}: its last job wrote no notes or facts ({skipped})")
    return lines
