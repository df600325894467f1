"""One try of one summarize job: what its model calls need, and the checks (spend caps, time left) before each."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime

from arq.connections import ArqRedis

from nanobot_hooks.contract.records import SummarizeRequest
from worker.errors import OutOfTime, OverBudget
from worker.state import budget
from worker.summarize.deps import Deps


@dataclass
class Run:
    """One try of one job: what its LLM calls need, and what the outcome should say beyond the summary."""

    deps: Deps
    redis: ArqRedis
    req: SummarizeRequest
    job_try: int
    deadline: float  # time.monotonic() by which the try must end
    notes_skipped: str = ""  # why a notes call gave none (the outcome says so)
    memory_unwritten: str = ""  # why the memory files refused what the calls gave
    notes_fallback: str = ""  # why notes were written by the fallback, the user's own lines (remember.settle_notes)
    calls: int = 0  # made in this try
    retired_seen: set[str] | None = None  # the copies kept at `/new` this try looked at (retired.py)
    # Before any of its model calls (epoch seconds): a fact the user takes out of MEMORY.md after this is one
    # its answers may still hold, and must not write back.
    started: float = field(default_factory=time.time)

    @property
    def key(self) -> str:
        return self.req.session_key

    @property
    def day(self) -> str:
        return datetime.now(self.deps.tz).date().isoformat()

    async def before_call(self) -> None:
        settings = self.deps.settings
        reason = await budget.over_cap(
            self.redis, self.key, self.day, settings.summary_daily_tokens, settings.summary_daily_tokens_total
        )
        if reason is not None:
            raise OverBudget(reason)
        # Every try makes at least one call, so a try always moves the work on.
        if self.calls and time.monotonic() + settings.summary_timeout > self.deadline:
            raise OutOfTime("the next call might not finish within the job's time; finished chunks are kept")
        self.calls += 1
