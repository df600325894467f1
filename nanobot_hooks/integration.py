"""The integration inside one nanobot AgentLoop: trigger after turns, pick finished summaries up between turns.

Paths, and what each costs nanobot's turn:
- after every LLM call (`AgentHook.after_iteration`): remember the reported prompt tokens and the
  context window. A dict write.
- after the turn is saved (`SessionTurnPersisted`): decide (`trigger.decide`); when it fires, a
  background task checks for a pending record and enqueues. With idle summaries on, another background
  task makes sure the session's idle check waits in the queue, deferred by the cache lifetime (the worker
  decides there whether the session was quiet long enough). The turn never waits for Redis.
- at the start of a turn (`SessionTurnStarted`, before nanobot reads any history): a session just
  loaded from disk may carry the worker's record in its metadata; it is applied there, without
  network. This is how a fresh `nanobot agent` process or a restarted gateway picks up. Not in an
  ephemeral turn, nor before a slash command (`/new` would clear what was just applied): the event
  carries neither, so they are read from the turn's context on the call stack; the next ordinary
  turn applies instead.
- between turns: the worker's notice (or the pending set at start-up) schedules a pickup that takes
  the session's turn lock, re-validates and applies. Runs where nanobot runs its message loop
  (gateway, interactive agent); direct calls (`agent -m`, the SDK) use the two paths above, and a
  record found when the trigger fires again is applied right after that turn.
- with NANOBOT_SUMMARY_PICKUP=idle, a record that is not due yet (`trigger.pickup_due`: the provider's
  prompt cache is still warm and the context is not near the window) is held in memory, and the
  metadata copy stays where it is; a timer looks again once the cache would have gone cold, and the
  start of each turn applies it as soon as it is due. Whenever a held record is looked at (the trigger,
  the timer, a turn's start) it is checked against the live session first: one that no longer fits (a
  `/new`, nanobot's own compaction) is dropped at once, so it never blocks the next job. No network on
  the turn's path either way.
- closing: when `run()` returns and when nanobot closes the loop (`aclose()`), the listener is
  cancelled and awaited and the Redis connections are closed.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from nanobot_hooks import logs
from nanobot_hooks.contract import SummarizeRequest, SummaryRecord
from nanobot_hooks.link import RedisLink
from nanobot_hooks.listener import listen
from nanobot_hooks.pickup import Outcome, apply_record, forget_pending, pending_in_metadata, verdict
from nanobot_hooks.queue import UNREADABLE, drop_record, enqueue_idle_check, enqueue_summary, load_record_or_drop
from nanobot_hooks.settings import HookSettings, redacted_url
from nanobot_hooks.nanobot_format import is_internal_session, last_context_tokens
from nanobot_hooks.trigger import count_from, decide, pickup_due, user_turns_since

# One rate limit for the whole process: several loops (SDK) must not multiply the warnings.
THROTTLE = logs.Throttle(every=60.0)

# Token usage waiting for its turn to be saved; more keys than this means turns that never finished.
MAX_USAGE_ENTRIES = 256
# How far up the call stack `SessionTurnStarted`'s handler looks for the turn's context.
TURN_FRAMES = 16


@dataclass(frozen=True)
class Surface:
    """The nanobot objects the integration touches, looked up (and checked) once by the plugin."""

    loop: Any
    hook_base: type
    turn_started: type
    turn_persisted: type
    request_context: Callable[[], Any]
    hook_factories: list[Any]
    session_lock: Callable[[str], asyncio.Lock]
    subscribe: Callable[..., Callable[[], None]]
    sessions: Any
    schedule_background: Callable[[Coroutine[Any, Any, Any]], None] | None
    run: Callable[..., Coroutine[Any, Any, Any]] | None
    aclose: Callable[..., Coroutine[Any, Any, Any]] | None = None


class Integration:
    def __init__(self, surface: Surface, settings: HookSettings) -> None:
        self.s = surface
        self.settings = settings
        self.link = RedisLink(settings.redis_url, THROTTLE, options=settings.redis_options(), keys=settings.keys)
        self.counts: Counter[str] = Counter()
        # session key -> (prompt tokens of the last LLM call, context window), consumed after the turn
        self.usage: dict[str, tuple[int, int | None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._picking: set[str] = set()
        self._again: set[str] = set()
        # Idle pickup: records fetched but not due yet, and the timers that look at them again.
        self.held: dict[str, SummaryRecord] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        # Idle summaries: when each session's idle check was last queued (time.monotonic()). A queued check waits
        # at least the cache lifetime and re-defers itself while the session is active, so a turn within
        # that time needs no Redis call.
        self._idle_armed: dict[str, float] = {}
        self._listener: asyncio.Task[None] | None = None
        self._undo: list[Callable[[], None]] = []
        self.factory: Callable[[Any], Any] | None = None

    # -- installation -----------------------------------------------------------------------

    def install(self) -> None:
        """All or nothing: a failure half-way undoes what was done, then propagates to the plugin."""
        try:
            self._install()
        except BaseException:
            self.uninstall()
            raise
        interval = self.settings.summary_interval
        when = (
            f"at {self.settings.summary_threshold:.0%} of the context window"
            + (f" or every {interval} user messages" if interval else "")
            + (f", and after {self.settings.summary_cache_ttl:g} s quiet" if self.settings.summary_idle else "")
            if self.settings.auto_summary else "only when asked (NANOBOT_AUTO_SUMMARY=false)"
        )
        logs.info(f"on: summaries {when}; Redis {redacted_url(self.settings.redis_url)}")

    def _install(self) -> None:
        s = self.s
        if self.settings.auto_summary:
            factory = self.factory = self._hook_factory()
            loop = s.loop
            # A new list, not an append: a list passed to several loops must not change under the others.
            loop._hook_factories = [*loop._hook_factories, factory]
            self._undo.append(lambda: setattr(
                loop, "_hook_factories", [f for f in loop._hook_factories if f is not factory]))
            self._undo.append(s.subscribe(self._on_turn_persisted, s.turn_persisted))
        self._undo.append(s.subscribe(self._on_turn_started, s.turn_started))
        if s.run is not None:
            self._wrap("run", s.run, listen=True)
        if s.aclose is not None:
            self._wrap("aclose", s.aclose, listen=False)

    def uninstall(self) -> None:
        """Undo `install` (benchmarks compare a loop with and without the integration)."""
        while self._undo:
            try:
                self._undo.pop()()
            except Exception:  # noqa: BLE001
                pass
        self.stop_listener()

    def _wrap(self, name: str, original: Callable[..., Coroutine[Any, Any, Any]], listen: bool) -> None:
        """Wrap `loop.run` (listen=True) or `loop.aclose`: close our Redis side when nanobot is done.

        nanobot calls `run()` where it runs its message loop (gateway, interactive agent): starting the
        listener there is the only moment with a running event loop before the first turn. `aclose`
        closes after nanobot's own close, which drains the background tasks that may still use Redis.
        """
        integration = self

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            if listen:
                integration.start_listener()
            try:
                return await original(*args, **kwargs)
            finally:
                await integration.close()

        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        loop = self.s.loop
        setattr(loop, name, wrapper)
        self._undo.append(lambda: setattr(loop, name, original) if getattr(loop, name) is wrapper else None)

    async def close(self) -> None:
        """Cancel and await the listener, let our own background tasks finish (bounded), close the Redis
        connections. Never raises (but a cancel of the caller still propagates)."""
        task, self._listener = self._listener, None
        self._cancel_timers()
        try:
            running = asyncio.get_running_loop()
            if task is not None and not task.done():
                task.cancel()
                if task.get_loop() is running:
                    await asyncio.wait([task], timeout=self.link.timeout)
            ours = [t for t in self._tasks if not t.done() and t.get_loop() is running]
            if ours:  # only without nanobot's schedule_background, whose tasks nanobot drains itself
                await asyncio.wait(ours, timeout=self.link.timeout)
            await self.link.close()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            self._bug("closing the Redis connections", exc)

    def start_listener(self) -> None:
        try:
            if self._listener is None or self._listener.done():
                self._listener = asyncio.get_running_loop().create_task(
                    listen(self.link, self.request_pickup), name="summary-worker-listener"
                )
        except Exception as exc:  # noqa: BLE001
            self._bug("starting the listener", exc)

    def stop_listener(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            self._listener = None
        self._cancel_timers()

    def _cancel_timers(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    # -- trigger --------------------------------------------------------------------------------

    def _hook_factory(self) -> Callable[[Any], Any]:
        integration = self

        class SummaryUsageHook(self.s.hook_base):  # type: ignore[name-defined, misc]
            """Keeps the provider-reported prompt tokens of each LLM call of one turn."""

            def __init__(self, session_key: str) -> None:
                super().__init__()
                self.session_key = session_key

            async def after_iteration(self, context: Any) -> None:
                integration.note_usage(self.session_key, context)

        def factory(turn: Any) -> Any:
            key = getattr(turn, "session_key", None)
            if getattr(turn, "ephemeral", False) or is_internal_session(key):
                return None
            return SummaryUsageHook(key)

        return factory

    def note_usage(self, key: str, context: Any) -> None:
        try:
            prompt = getattr(getattr(context, "usage", None), "input_tokens", None)
            if isinstance(prompt, int) and not isinstance(prompt, bool):
                usage = self.usage
                usage.pop(key, None)  # re-inserted last: the oldest entries go first below
                usage[key] = (prompt, self.settings.summary_context_window or self._window())
                while len(usage) > MAX_USAGE_ENTRIES:
                    del usage[next(iter(usage))]
        except Exception as exc:  # noqa: BLE001
            self._bug("reading token usage", exc)

    def _window(self) -> int | None:
        # The runtime of this request honours per-session model presets; the loop's is the fallback.
        runtime = getattr(self.s.request_context(), "runtime", None)
        for window in (getattr(runtime, "context_window_tokens", None),
                       getattr(self.s.loop, "context_window_tokens", None)):
            if isinstance(window, int) and not isinstance(window, bool) and window > 0:
                return window
        return None

    def _on_turn_persisted(self, event: Any) -> None:
        try:
            key = event.context.session_key
            prompt, window = self.usage.pop(key, (None, None))
            if is_internal_session(key):
                return
            session = self.s.sessions.get_cached(key)
            if session is None:
                return
            interval = self.settings.summary_interval
            turns = 0
            if interval:
                messages = session.messages
                start = count_from(messages, session.last_archived, session.metadata)
                turns = user_turns_since(messages, start, enough=interval)
            reason = decide(prompt_tokens=prompt, context_window=window, threshold=self.settings.summary_threshold,
                            user_turns=turns, interval=interval)
            if reason is not None:
                self._spawn(self._enqueue(key, reason, prompt, window))
            if self.settings.summary_idle and self._idle_check_may_be_gone(key):
                self._spawn(self._arm_idle(key))
        except Exception as exc:  # noqa: BLE001
            self._bug("deciding whether to summarize", exc)

    def _idle_check_may_be_gone(self, key: str) -> bool:
        """False while the check queued for this session cannot have run yet (it is deferred by the cache
        lifetime); True, and noted as queued now, otherwise."""
        now = time.monotonic()
        armed = self._idle_armed.get(key)
        if armed is not None and now - armed < self.settings.summary_cache_ttl:
            return False
        self._idle_armed[key] = now
        return True

    async def _arm_idle(self, key: str) -> None:
        """Make sure the session's idle check waits in the queue: the worker looks once the session could
        have been quiet for the cache lifetime, and looks again later while it is not."""
        ttl = self.settings.summary_cache_ttl

        async def queue(client: Any) -> bool:
            await enqueue_idle_check(client, key, ttl)  # None when one already waits: fine too
            return True

        if await self.link.call(f"queueing the idle check of {key}", queue) is None:
            self._idle_armed.pop(key, None)  # Redis failed: the next turn tries again

    async def _enqueue(self, key: str, reason: str, prompt: int | None, window: int | None,
                       again: bool = True) -> None:
        async def work(client: Any) -> str:
            async with client.pipeline(transaction=False) as pipe:
                pipe.exists(self.settings.keys.record(key))
                pipe.exists(self.settings.keys.cooldown(key))
                pending, resting = await pipe.execute()
            # A record waiting for pickup already covers this range: a second job would cover it again.
            if pending:
                return "pending"
            # The worker rests a session after a failed or fruitless paid job: asking again would pay again.
            if resting:
                return "resting"
            request = SummarizeRequest(session_key=key, reason=reason, prompt_tokens=prompt, context_window=window)
            return "queued" if await enqueue_summary(client, request) is not None else "running"

        result = await self.link.call(f"queueing a summary of {key}", work)
        if result == "queued":
            self.counts["queued"] += 1
            logs.info(f"queued a summary of {key} ({reason}: {prompt} prompt tokens, window {window})")
        elif result == "resting":
            self.counts["resting"] += 1
            logs.debug(f"not queueing a summary of {key}: it rests after a failed job (nanobot-summary status says why)")
        elif result == "pending":
            # Its notice was missed (or this process does not listen): apply it now, after this
            # turn. Awaited here, not spawned, so a `nanobot agent -m` process finishes it before exit.
            outcome = await self.pickup(key)
            if outcome in ("stale", "duplicate") and again:
                # It never applied (a /new or nanobot's own compaction since): this turn still asked.
                await self._enqueue(key, reason, prompt, window, again=False)

    # -- pickup -----------------------------------------------------------------------------------

    def _on_turn_started(self, event: Any) -> None:
        try:
            key = event.context.session_key
            self.usage.pop(key, None)  # left over from a turn that failed before it was saved
            if is_internal_session(key):
                return
            session = self.s.sessions.get_cached(key)
            if session is None:
                return
            record = self.held.get(key) or pending_in_metadata(session)
            if record is None or not self._ordinary_turn(session):
                return
            if (refused := verdict(session, record)) is not None:  # due or not: it will never apply
                self._discard(session, record, refused, "at the start of a turn")
                self._spawn(self._settle(record, refused))
                return
            if not self._due(session):
                return
            self.held.pop(key, None)
            outcome, changed = apply_record(session, record)
            if changed:
                self.s.sessions.save(session)
            self._report(record, outcome, "at the start of a turn")
            self._spawn(self._settle(record, outcome))
        except Exception as exc:  # noqa: BLE001
            self._bug("applying a summary at the start of a turn", exc)

    @staticmethod
    def _ordinary_turn(session: Any) -> bool:
        """False for an ephemeral turn and for a slash command. SessionTurnStarted carries neither, but
        nanobot publishes it from inside the turn (`_restore_turn`), whose `ctx` (a TurnContext) is on
        the call stack. Only looked at when a record is waiting, so an ordinary turn pays nothing."""
        policy = getattr(session, "policy", None)
        if policy is not None and getattr(policy, "persist", True) is False:
            return False
        frame = sys._getframe(1)
        for _ in range(TURN_FRAMES):
            if frame is None:
                break
            ctx = frame.f_locals.get("ctx")
            if type(ctx).__name__ == "TurnContext":
                if getattr(ctx, "ephemeral", False):
                    return False
                content = getattr(getattr(ctx, "msg", None), "content", None)
                return not (isinstance(content, str) and content.lstrip().startswith("/"))
            frame = frame.f_back
        return True  # not found (another nanobot layout): apply, as before

    def request_pickup(self, key: str) -> None:
        """From a notice or the pending set: one pickup per session at a time, repeated if asked again."""
        if is_internal_session(key):
            return
        if key in self._picking:
            self._again.add(key)
            return
        self._picking.add(key)
        self._spawn(self._pickup_until_quiet(key))

    async def _pickup_until_quiet(self, key: str) -> None:
        try:
            while True:
                self._again.discard(key)
                await self.pickup(key)
                if key not in self._again:
                    return
        finally:
            self._picking.discard(key)

    def _due(self, session: Any) -> bool:
        """Apply now, or hold until the cache is cold or the context nears the window (idle pickup)."""
        settings = self.settings
        if settings.summary_pickup == "now":
            return True
        return pickup_due(mode=settings.summary_pickup, idle_seconds=idle_seconds(session),
                          cache_ttl=settings.summary_cache_ttl, prompt_tokens=last_context_tokens(session.metadata),
                          context_window=settings.summary_context_window or self._window(),
                          threshold=settings.summary_threshold)

    def _hold(self, key: str, record: SummaryRecord, session: Any) -> None:
        """Keep `record` for the turn that finds it due, and look again when the cache would be cold."""
        self.held.pop(key, None)
        self.held[key] = record
        while len(self.held) > MAX_USAGE_ENTRIES:
            del self.held[next(iter(self.held))]
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        delay = max(self.settings.summary_cache_ttl - (idle_seconds(session) or 0.0), 0.0) + 0.05
        self._timers[key] = asyncio.get_running_loop().call_later(delay, self._recheck, key)
        logs.debug(f"holding the summary of {key} until the prompt cache is cold ({delay:.0f} s) "
                   "or the context nears the window")

    def _discard(self, session: Any, record: SummaryRecord, outcome: Outcome, where: str) -> None:
        """A record that will never apply (stale, or applied already): no longer held, its metadata copy
        gone (the session saved), reported. The caller settles it in Redis."""
        key = record.session_key
        if self.held.get(key) == record:
            del self.held[key]
            timer = self._timers.pop(key, None)
            if timer is not None:
                timer.cancel()
        if forget_pending(session, record):
            self.s.sessions.save(session)
        self._report(record, outcome, where)

    def _recheck(self, key: str) -> None:
        self._timers.pop(key, None)
        if key in self.held:
            self.request_pickup(key)

    async def pickup(self, key: str) -> Outcome | Literal["held"] | None:
        try:
            sessions = self.s.sessions
            if sessions.get_cached(key) is None and not self._on_disk(key):
                # Not a session of this nanobot (another workspace on the same Redis): leave its record.
                # Asked again every time (no memo): once the session exists here, its record applies.
                return None
            record = await self.link.call(f"reading the summary of {key}", lambda c: load_record_or_drop(c, key))
            if record is None:
                return None
            if record == UNREADABLE:
                self.counts[UNREADABLE] += 1
                THROTTLE.warning(UNREADABLE, f"dropped a summary record of {key} that cannot be read "
                                 f"(another version of the worker?); {self.counts[UNREADABLE]} so far")
                return None
            if not isinstance(record, SummaryRecord):
                return None
            async with self.s.session_lock(key):  # between turns: a turn holds this lock throughout
                session = sessions.get_or_create(key)
                outcome = verdict(session, record)  # checked first: a stale record is not held
                if outcome is not None:
                    self._discard(session, record, outcome, "between turns")
                elif not self._due(session):
                    self._hold(key, record, session)
                    return "held"
                else:
                    self.held.pop(key, None)
                    outcome, changed = apply_record(session, record)
                    if changed:
                        sessions.save(session)
                    self._report(record, outcome, "between turns")
            await self._settle(record, outcome)
            return outcome
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            self._bug(f"applying the summary of {key}", exc)
            return None

    def _on_disk(self, key: str) -> bool:
        read = getattr(self.s.sessions, "read_session_metadata", None)
        try:
            return read is not None and read(key) is not None
        except Exception:  # noqa: BLE001
            return False

    def _report(self, record: SummaryRecord, outcome: Outcome, where: str) -> None:
        self.counts[outcome] += 1
        key = record.session_key
        if outcome == "applied":
            logs.info(f"applied the summary of {key} {where}: messages {record.start}..{record.boundary - 1} "
                      f"covered, {record.tokens_before} -> {record.tokens_after} tokens")
        elif outcome == "stale":
            logs.info(f"dropped the summary of {key}: the session changed since (/new or a compaction); "
                      f"{self.counts['stale']} dropped so far")

    async def _settle(self, record: SummaryRecord, outcome: Outcome) -> None:
        async def work(client: Any) -> None:
            await drop_record(client, record)  # keeps a newer record of the same session
            await client.hincrby(self.settings.keys.stats, outcome, 1)

        await self.link.call(f"clearing the summary record of {record.session_key}", work)

    # -- plumbing ---------------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        schedule = self.s.schedule_background
        if schedule is not None:
            # nanobot awaits these on close, so `agent -m` finishes an enqueue before it exits.
            schedule(coro)
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _bug(self, doing: str, exc: BaseException) -> None:
        # Throttled per kind of error, not per session, so one bug cannot flood the log.
        THROTTLE.warning(f"bug:{type(exc).__name__}",
                         f"unexpected error while {doing}: {logs.describe(exc)}; nanobot goes on")


def idle_seconds(session: Any) -> float | None:
    """Seconds since nanobot last saved the session (its `updated_at`, local time), None if unknown."""
    updated = getattr(session, "updated_at", None)
    try:
        return max((datetime.now(updated.tzinfo) - updated).total_seconds(), 0.0)
    except (AttributeError, TypeError):  # not a datetime
        return None
