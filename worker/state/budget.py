"""What summarizing costs and may cost: spend per call, job, session and day; daily caps; rests after failures."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from arq.connections import ArqRedis
from pydantic import BaseModel

from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.queue import reply
from worker.state import index

if TYPE_CHECKING:  # scripts read spend without importing litellm
    from worker.model.llm import Completion

DAY_SECONDS = 24 * 3600
MONTH_KEEP_SECONDS = 62 * DAY_SECONDS


class Spend(BaseModel):
    """LLM calls and what they cost, as the provider reported them."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0  # USD, from litellm's local price table
    unpriced_calls: int = 0  # calls of a model litellm has no price for

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @classmethod
    def of(cls, completion: Completion) -> Spend:
        return cls(
            calls=1,
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            cached_tokens=completion.cached_tokens,
            cost=completion.cost or 0.0,
            unpriced_calls=0 if completion.cost is not None else 1,
        )

    @classmethod
    def from_hash(cls, raw: dict[Any, Any]) -> Spend:
        values = {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}
        # Hash values come back as text ("3", "0.25"); pydantic makes them numbers of the fields' types.
        return cls(**{name: float(values.get(name, 0)) for name in cls.model_fields})

    def describe(self) -> str:
        if not self.calls:
            return "no LLM calls"
        cost = f"${self.cost:.6f}" + (f" (+{self.unpriced_calls} calls unpriced)" if self.unpriced_calls else "")
        if self.unpriced_calls == self.calls:
            cost = "cost unknown (model not in litellm's price table)"
        return (
            f"{self.calls} LLM call(s), {self.prompt_tokens} prompt + {self.completion_tokens} completion "
            f"tokens, {cost}"
        )


async def record_call(redis: ArqRedis, session_key: str, completion: Completion, day: str) -> None:
    """Adds one call to the totals, the session's, the job's and the day's."""
    spend = Spend.of(completion).model_dump()
    spend_key = Keys.of(redis).spend
    async with redis.pipeline(transaction=False) as pipe:
        for key in (spend_key("total"), spend_key(f"session:{session_key}"), spend_key(f"job:{session_key}")):
            for name, value in spend.items():
                if not value:
                    continue  # a field not there reads as 0 (Spend.from_hash): adding nothing needs no command
                if isinstance(value, float):
                    pipe.hincrbyfloat(key, name, value)
                else:
                    pipe.hincrby(key, name, value)
        pipe.expire(spend_key(f"job:{session_key}"), DAY_SECONDS)
        index.remember(pipe, Keys.of(redis), "spend", session_key)
        tokens = completion.prompt_tokens + completion.completion_tokens
        pipe.hincrby(spend_key(f"day:{day}"), "tokens", tokens)
        pipe.hincrby(spend_key(f"day:{day}"), f"tokens:{session_key}", tokens)
        pipe.expire(spend_key(f"day:{day}"), 3 * DAY_SECONDS)
        # The month's tokens and cost, for the web page's "this month" (kept a month past its end).
        pipe.hincrby(spend_key(f"month:{day[:7]}"), "tokens", tokens)
        if completion.cost:
            pipe.hincrbyfloat(spend_key(f"month:{day[:7]}"), "cost", completion.cost)
        pipe.expire(spend_key(f"month:{day[:7]}"), MONTH_KEEP_SECONDS)
        await pipe.execute()


async def month_spend(redis: ArqRedis, month: str) -> tuple[int, float]:
    """Summarizing tokens and cost (USD, priced calls only) in a month, `YYYY-MM` of the worker's days."""
    tokens, cost = await reply(redis.hmget(Keys.of(redis).spend(f"month:{month}"), ["tokens", "cost"]))
    return int(tokens or 0), float(cost or 0.0)


async def job_spend(redis: ArqRedis, session_key: str) -> Spend:
    return Spend.from_hash(await reply(redis.hgetall(Keys.of(redis).spend(f"job:{session_key}"))))


async def start_job(redis: ArqRedis, session_key: str) -> Rest | None:
    """A new job's spend starts at nothing; returns the session's rest, if any (`rest_of`): one round trip."""
    keys = Keys.of(redis)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.delete(keys.spend(f"job:{session_key}"))
        pipe.get(keys.rest(session_key))
        _, raw = await pipe.execute()
    return _read_rest(raw)


async def over_cap(
    redis: ArqRedis, session_key: str, day: str, per_session: int | None, overall: int | None
) -> str | None:
    """Why no more summarizing tokens may be spent today, or None."""
    if per_session is None and overall is None:
        return None
    total, mine = await reply(redis.hmget(Keys.of(redis).spend(f"day:{day}"), ["tokens", f"tokens:{session_key}"]))
    total, mine = int(total or 0), int(mine or 0)
    if per_session is not None and mine >= per_session:
        return f"the session's daily cap of {per_session} summarizing tokens is reached ({mine} today)"
    if overall is not None and total >= overall:
        return f"the daily cap of {overall} summarizing tokens is reached ({total} today, all sessions)"
    return None


class Rest(BaseModel):
    """A session's rest: the trigger inside nanobot enqueues nothing until it ends (a manual enqueue may)."""

    until: datetime
    reason: str
    failures: int = 0
    paused: bool = False  # asked for by hand (`nanobot-summary rest`, `undo --pause`): no end but end-rest


# A pause's `until`: far enough to never come (a pause ends only by end-rest).
PAUSED_UNTIL = datetime(9999, 12, 31, tzinfo=timezone.utc)


# Doublings past this many are capped anyway (2**60 times any base exceeds every sane `longest`); without a
# cap, a long failure streak would make `base * 2 ** failures` too large for a float.
MAX_DOUBLINGS = 60


def rest_seconds(failures: int, base: float, longest: float) -> float:
    """The first failure rests `base`; each one in a row doubles it, up to `longest`."""
    return min(longest, base * 2 ** min(MAX_DOUBLINGS, max(0, failures - 1))) if base > 0 else 0.0


async def rest_of(redis: ArqRedis, session_key: str) -> Rest | None:
    return _read_rest(await redis.get(Keys.of(redis).rest(session_key)))


async def rests_of(redis: ArqRedis, session_keys: list[str]) -> list[Rest | None]:
    """Each session's rest, as `rest_of` reads it, in one MGET."""
    if not session_keys:
        return []
    return [_read_rest(raw) for raw in await redis.mget([Keys.of(redis).rest(key) for key in session_keys])]


def _read_rest(raw: bytes | str | None) -> Rest | None:
    if not raw:
        return None
    try:
        return Rest.model_validate_json(raw)
    except ValueError:
        return Rest(until=datetime.now(timezone.utc), reason="unreadable rest record")


async def start_rest(
    redis: ArqRedis, session_key: str, reason: str, base: float, longest: float, seconds: float | None = None
) -> Rest | None:
    """Start a rest: `seconds` if given (a cap until tomorrow), else the failure streak's doubling time."""
    keys = Keys.of(redis)
    failures = 0
    if seconds is None:
        failures = int(await redis.incr(keys.failures(session_key)))
        await redis.expire(keys.failures(session_key), DAY_SECONDS)
        seconds = rest_seconds(failures, base, longest)
    if seconds <= 0:
        return None
    rest = Rest(until=datetime.now(timezone.utc) + timedelta(seconds=seconds), reason=reason, failures=failures)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.set(keys.rest(session_key), rest.model_dump_json(), ex=max(1, round(seconds)))
        index.remember(pipe, keys, "resting", session_key)
        await pipe.execute()
    return rest


async def pause(redis: ArqRedis, session_key: str, reason: str) -> Rest:
    """Rest a session until end-rest.

    The trigger inside nanobot, the idle check and the daily run queue nothing for it (a job queued by hand still runs,
    and ends the pause when it summarizes)."""
    rest = Rest(until=PAUSED_UNTIL, reason=reason, paused=True)
    keys = Keys.of(redis)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.set(keys.rest(session_key), rest.model_dump_json())
        index.remember(pipe, keys, "resting", session_key)  # listed by status and end-rest --all
        await pipe.execute()
    return rest


def rest_keys(redis: ArqRedis, session_key: str) -> list[str]:
    """The session's rest and its failure streak.

    Deleted when a job did its work, so that the next failure starts the doubling afresh."""
    keys = Keys.of(redis)
    return [keys.rest(session_key), keys.failures(session_key)]


async def end_rest(redis: ArqRedis, session_key: str) -> Rest | None:
    """Ends the session's rest now and clears its failure streak (the operator's "end rest").

    The trigger may queue its jobs again, and the next failure rests it for the base time. Returns the rest that was
    ended, or None when it was not resting."""
    keys = Keys.of(redis)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.get(keys.rest(session_key))
        pipe.delete(*rest_keys(redis, session_key))
        raw, _ = await pipe.execute()
    return _read_rest(raw)
