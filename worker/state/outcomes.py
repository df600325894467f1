"""What each job did: kept in Redis for `nanobot-summary enqueue --wait` and `status`, and announced in one line
for nanobot's log."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from arq.connections import ArqRedis
from pydantic import BaseModel, Field

from nanobot_hooks.contract import Keys, Reason, utcnow
from worker.state.budget import Spend
from worker.text.redact import redact

KEEP_SECONDS = 7 * 24 * 3600


class JobOutcome(BaseModel):
    """What the last job for a session did."""

    session_key: str
    status: Literal["summarized", "noted", "noop", "failed"]
    detail: str = ""
    boundary: int | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    messages_before: int | None = None  # replayed messages before / after the summary is applied
    messages_after: int | None = None
    seconds: float | None = None  # how long the job ran (LLM calls included)
    job_try: int = 1
    reason: Reason = "manual"  # what triggered the job
    model: str = ""
    spend: Spend = Field(default_factory=Spend)  # all tries of the job
    # Fidelity: the share of the previous summary's identifiers the new one keeps (the guard's measure),
    # and the share of the covered messages' identifiers found in the new summary or the day's notes.
    carry_forward: float | None = None
    covered_kept: float | None = None
    cooldown_until: datetime | None = None
    memory_skipped: str = ""  # why the job wrote no daily notes or facts for what it read, when it wrote none
    finished_at: datetime = Field(default_factory=utcnow)


# How each status reads in a log line.
VERBS = {"summarized": "summarized", "noted": "noted", "noop": "skipped", "failed": "failed"}


def headline(outcome: JobOutcome) -> str:
    """The outcome in one line, e.g. `skipped telegram:42: too little to summarize (1,146 of 3,277 tokens)`."""
    return f"{VERBS[outcome.status]} {outcome.session_key}: {redact(outcome.detail)}"


def _notice(outcome: JobOutcome) -> str:
    payload = {"session": outcome.session_key, "status": outcome.status, "line": headline(outcome)}
    return json.dumps(payload, ensure_ascii=False)


async def keep_outcome(redis: ArqRedis, outcome: JobOutcome, delete: Sequence[str] = (),
                       keep_seconds: int = KEEP_SECONDS) -> None:
    """Deletes `delete` (a rest that ended), keeps the outcome (redacted) for status, and tells nanobot's
    listeners (their log) how the job ended, in one round trip; nobody listening is fine."""
    keys = Keys.of(redis)
    kept = outcome.model_copy(update={"detail": redact(outcome.detail)})
    async with redis.pipeline(transaction=False) as pipe:
        if delete:
            pipe.delete(*delete)
        pipe.set(keys.outcome(outcome.session_key), kept.model_dump_json(), ex=keep_seconds)
        pipe.publish(keys.outcome_channel, _notice(outcome))
        await pipe.execute()


async def load_outcome(redis: ArqRedis, session_key: str) -> JobOutcome | None:
    raw = await redis.get(Keys.of(redis).outcome(session_key))
    return JobOutcome.model_validate_json(raw) if raw else None
