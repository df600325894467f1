"""What each job did.

Kept in Redis for `nanobot-summary enqueue --wait` and `status`, and announced in one line for nanobot's log."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, get_args

from arq.connections import ArqRedis
from pydantic import BaseModel, Field, ValidationError, model_validator

from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.records import Reason, utcnow
from worker.state import index
from worker.state.budget import Spend
from worker.text.redact import redact

KEEP_SECONDS = 7 * 24 * 3600


# What a job can end as; "unknown": a status written by another version of the worker (read_outcome).
STATUSES = ("summarized", "noted", "noop", "failed")
Status = Literal["summarized", "noted", "noop", "failed", "unknown"]
REASONS = get_args(Reason)


class JobOutcome(BaseModel):
    """What the last job for a session did."""

    session_key: str
    status: Status
    detail: str = ""
    boundary: int | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    messages_before: int | None = None  # replayed messages before / after the summary is applied
    messages_after: int | None = None
    seconds: float | None = None  # how long the job ran (LLM calls included)
    job_try: int = 1
    reason: Reason | Literal["unknown"] = "manual"  # what triggered the job
    model: str = ""
    spend: Spend = Field(default_factory=Spend)  # all tries of the job
    # Fidelity: the share of the previous summary's identifiers the new one keeps (the guard's measure),
    # and the share of the covered messages' identifiers found in the new summary or the day's notes.
    carry_forward: float | None = None
    covered_kept: float | None = None
    cooldown_until: datetime | None = None
    memory_skipped: str = ""  # why the job wrote no daily notes or facts for what it read, when it wrote none
    notes_fallback: str = ""  # why its notes are the user's own lines, written by the fallback (no model's notes)
    finished_at: datetime = Field(default_factory=utcnow)
    # What another version of the worker wrote that this one does not know (a status, a reason): shown, not a crash.
    unknown: str = ""

    @model_validator(mode="before")
    @classmethod
    def _from_another_version(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        odd = []
        if "status" in data and data["status"] not in (*STATUSES, "unknown"):
            odd.append(f"status {data['status']!r}")
            data = {**data, "status": "unknown"}
        if "reason" in data and data["reason"] not in (*REASONS, "unknown"):
            odd.append(f"reason {data['reason']!r}")
            data = {**data, "reason": "unknown"}
        return {**data, "unknown": ", ".join(odd)} if odd else data


# How each status reads in a log line.
VERBS = {
    "summarized": "summarized",
    "noted": "noted",
    "noop": "skipped",
    "failed": "failed",
    "unknown": "ended in a way this version does not know:",
}


def headline(outcome: JobOutcome) -> str:
    """The outcome in one line, e.g. `skipped telegram:42: too little to summarize (1,146 of 3,277 tokens)`."""
    return f"{VERBS[outcome.status]} {outcome.session_key}: {redact(outcome.detail)}"


def _notice(outcome: JobOutcome) -> str:
    payload = {"session": outcome.session_key, "status": outcome.status, "line": headline(outcome)}
    return json.dumps(payload, ensure_ascii=False)


async def keep_outcome(
    redis: ArqRedis, outcome: JobOutcome, delete: Sequence[str] = (), keep_seconds: int = KEEP_SECONDS
) -> None:
    """Keeps the job's outcome for status and tells nanobot's listeners how the job ended.

    Deletes `delete` (a rest that ended), keeps the outcome (redacted) for status, and tells nanobot's listeners (their
    log) how the job ended, in one round trip; nobody listening is fine."""
    keys = Keys.of(redis)
    kept = outcome.model_copy(update={"detail": redact(outcome.detail)})
    async with redis.pipeline(transaction=False) as pipe:
        if delete:
            pipe.delete(*delete)
        pipe.set(keys.outcome(outcome.session_key), kept.model_dump_json(), ex=keep_seconds)
        index.remember(pipe, keys, "outcomes", outcome.session_key)
        pipe.publish(keys.outcome_channel, _notice(outcome))
        await pipe.execute()


def read_outcome(raw: bytes | str, session_key: str) -> JobOutcome:
    """A stored outcome, whatever version of the worker wrote it.

    One this version cannot read at all is shown as unknown (every reader, the page, `status` and the metrics among
    them, goes through here)."""
    try:
        return JobOutcome.model_validate_json(raw)
    except (ValidationError, ValueError):
        return JobOutcome(
            session_key=session_key, status="unknown", unknown="an outcome this version of the worker cannot read"
        )


async def load_outcome(redis: ArqRedis, session_key: str) -> JobOutcome | None:
    raw = await redis.get(Keys.of(redis).outcome(session_key))
    return read_outcome(raw, session_key) if raw else None
