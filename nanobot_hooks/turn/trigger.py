"""Triggering, inside nanobot.

The prompt tokens of each LLM call, the decision after each saved turn (`trigger.decide`), the summary job queued in the
background, and the session's idle check kept waiting.

What each path costs nanobot's turn:
- after every LLM call (`AgentHook.after_iteration`): remember the reported prompt tokens and the
  context window. A dict write.
- after the turn is saved (`SessionTurnPersisted`): decide; when it fires, a background task checks for a
  pending record and enqueues (a record found there is applied right after the turn, by the pickup
  scheduler). With idle summaries on, another background task makes sure the session's idle check waits
  in the queue, deferred by the cache lifetime (the worker decides there whether the session was quiet
  long enough). The turn never waits for Redis.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from nanobot_hooks import logs
from nanobot_hooks.context import MAX_SESSIONS, Context
from nanobot_hooks.contract.queue import enqueue_idle_check, enqueue_summary, note_context
from nanobot_hooks.contract.records import Reason, SummarizeRequest
from nanobot_hooks.contract.session_format import is_internal_session
from nanobot_hooks.turn.apply import Outcome
from nanobot_hooks.turn.decide import count_from, decide, user_turns_since

CONTEXT_FLUSH_SECONDS = 30.0  # how often the turns' prompt tokens are written (see Triggering._context)
CONTEXT_BUFFER = 1_000  # turns kept for that write at most (Redis down: the oldest go)

# The pickup scheduler's `pickup`: applies (or holds, or drops) a session's waiting record now.
Pickup = Callable[[str], Awaitable[Outcome | Literal["held"] | None]]


class Triggering:
    """One AgentLoop's triggering; `pickup` applies a record the trigger finds already waiting."""

    def __init__(self, ctx: Context, pickup: Pickup) -> None:
        self.ctx = ctx
        self.pickup = pickup
        # session key -> (prompt tokens of the last LLM call, context window), consumed after the turn
        self.usage: dict[str, tuple[int, int | None]] = {}
        # Idle summaries: when each session's idle check was last queued (time.monotonic()). A queued check waits
        # at least the cache lifetime and re-defers itself while the session is active, so a turn within
        # that time needs no Redis call.
        self._idle_armed: dict[str, float] = {}
        # Each saved turn's prompt tokens, for the sessions' context histories (the web page's sawtooth): kept
        # here and written together at most every CONTEXT_FLUSH_SECONDS, so a turn adds no Redis call of its own.
        self._context: list[tuple[str, dict[str, Any]]] = []
        self._context_flushed = float("-inf")

    def hook_factory(self) -> Callable[[Any], Any]:
        triggering = self
        # nanobot's AgentHook, found at run time: unknown to mypy, like all of nanobot
        base: Any = self.ctx.nanobot.hook_base

        class SummaryUsageHook(base):
            """Keeps the provider-reported prompt tokens of each LLM call of one turn."""

            def __init__(self, session_key: str) -> None:
                super().__init__()
                self.session_key = session_key

            async def after_iteration(self, context: Any) -> None:
                triggering.note_usage(self.session_key, context)

        def factory(turn: Any) -> Any:
            key = getattr(turn, "session_key", None)
            if key is None or getattr(turn, "ephemeral", False) or is_internal_session(key):
                return None
            # nanobot builds the hook as the turn starts: usage left by a turn that failed before it was
            # saved goes now, so it never decides this turn's trigger.
            triggering.usage.pop(key, None)
            return SummaryUsageHook(key)

        return factory

    def note_usage(self, key: str, context: Any) -> None:
        try:
            prompt = getattr(getattr(context, "usage", None), "input_tokens", None)
            if isinstance(prompt, int) and not isinstance(prompt, bool):
                usage = self.usage
                usage.pop(key, None)  # re-inserted last: the oldest entries go first below
                usage[key] = (prompt, self.ctx.settings.summary_context_window or self.ctx.window())
                while len(usage) > MAX_SESSIONS:
                    del usage[next(iter(usage))]
        except Exception as exc:  # noqa: BLE001
            self.ctx.bug("reading token usage", exc)

    def on_turn_persisted(self, event: Any) -> None:
        try:
            key = event.context.session_key
            prompt, window = self.usage.pop(key, (None, None))
            if is_internal_session(key):
                return
            session = self.ctx.nanobot.sessions.get_cached(key)
            if session is None:
                return
            interval = self.ctx.settings.summary_interval
            turns = 0
            if interval:
                messages = session.messages
                start = count_from(messages, session.last_archived, session.metadata)
                turns = user_turns_since(messages, start, enough=interval)
            reason = decide(
                prompt_tokens=prompt,
                context_window=window,
                threshold=self.ctx.settings.summary_threshold,
                user_turns=turns,
                interval=interval,
            )
            if reason is not None:
                self.ctx.spawn(self.enqueue(key, reason, prompt, window))
            if self.ctx.settings.summary_idle and self._idle_check_may_be_gone(key):
                self.ctx.spawn(self._arm_idle(key))
            if prompt is not None:
                self._note_context(key, prompt)
        except Exception as exc:  # noqa: BLE001
            self.ctx.bug("deciding whether to summarize", exc)

    def _note_context(self, key: str, prompt: int) -> None:
        self._context.append((key, {"at": round(time.time(), 1), "tokens": prompt}))
        del self._context[:-CONTEXT_BUFFER]
        now = time.monotonic()
        if now - self._context_flushed >= CONTEXT_FLUSH_SECONDS:
            self._context_flushed = now
            self.ctx.spawn(self.flush_context())

    async def flush_context(self) -> None:
        """Writes the turns' prompt tokens kept so far (also when nanobot closes: bounded by the link)."""
        notes, self._context = self._context, []
        if notes:
            await self.ctx.link.call("keeping the sessions' context sizes", lambda client: note_context(client, notes))

    def _idle_check_may_be_gone(self, key: str) -> bool:
        """False while the check queued for this session cannot have run yet (it is deferred by the cache lifetime).

        True, and noted as queued now, otherwise."""
        now = time.monotonic()
        armed = self._idle_armed.get(key)
        if armed is not None and now - armed < self.ctx.settings.summary_cache_ttl:
            return False
        self._idle_armed[key] = now
        return True

    async def _arm_idle(self, key: str) -> None:
        """Make sure the session's idle check waits in the queue.

        The worker looks once the session could have been quiet for the cache lifetime, and looks again later while it
        is not."""
        ttl = self.ctx.settings.summary_cache_ttl

        async def queue(client: Any) -> bool:
            await enqueue_idle_check(client, key, ttl)  # None when one already waits: fine too
            return True

        if await self.ctx.link.call(f"queueing the idle check of {key}", queue) is None:
            self._idle_armed.pop(key, None)  # Redis failed: the next turn tries again

    async def enqueue(
        self, key: str, reason: Reason, prompt: int | None, window: int | None, again: bool = True
    ) -> None:
        async def work(client: Any) -> str:
            async with client.pipeline(transaction=False) as pipe:
                pipe.exists(self.ctx.settings.keys.record(key))
                pipe.exists(self.ctx.settings.keys.rest(key))
                pending, resting = await pipe.execute()
            # A record waiting for pickup already covers this range: a second job would cover it again.
            if pending:
                return "pending"
            # The worker rests a session after a failed or fruitless paid job: asking again would pay again.
            if resting:
                return "resting"
            request = SummarizeRequest(session_key=key, reason=reason, prompt_tokens=prompt, context_window=window)
            return "queued" if await enqueue_summary(client, request) is not None else "running"

        result = await self.ctx.link.call(f"queueing a summary of {key}", work)
        if result == "queued":
            self.ctx.counts["queued"] += 1
            logs.info(f"queued a summary of {key} ({reason}: {prompt} prompt tokens, window {window})")
        elif result == "resting":
            self.ctx.counts["resting"] += 1
            logs.debug(
                f"not queueing a summary of {key}: it rests after a failed job (nanobot-summary status says why)"
            )
        elif result == "pending":
            # Its notice was missed (or this process does not listen): apply it now, after this
            # turn. Awaited here, not spawned, so a `nanobot agent -m` process finishes it before exit.
            outcome = await self.pickup(key)
            if outcome in ("stale", "duplicate", "forged", "replayed") and again:
                # It never applied (a /new or nanobot's own compaction since, or forged): this turn still asked.
                await self.enqueue(key, reason, prompt, window, again=False)
