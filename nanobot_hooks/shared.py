"""What the integration's parts share inside one AgentLoop: nanobot's objects, the settings, the Redis link,
counters, background tasks, and the log line an unexpected error leaves."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from nanobot_hooks import logs
from nanobot_hooks.link import RedisLink
from nanobot_hooks.settings import HookSettings

# One rate limit for the whole process: several loops (SDK) must not multiply the warnings.
THROTTLE = logs.Throttle(every=60.0)

# Per-session state kept in memory (token usage waiting for its turn to be saved, records held for idle
# pickup): more sessions than this means turns that never finished; the oldest entries go first.
MAX_SESSIONS = 256


@dataclass(frozen=True)
class Surface:
    """The nanobot objects the integration touches, looked up (and checked) once by the plugin."""

    loop: Any
    hook_base: type
    turn_started: type
    turn_persisted: type
    request_context: Callable[[], Any]
    session_lock: Callable[[str], asyncio.Lock]
    subscribe: Callable[..., Callable[[], None]]
    sessions: Any
    schedule_background: Callable[[Coroutine[Any, Any, Any]], None] | None
    run: Callable[..., Coroutine[Any, Any, Any]] | None
    aclose: Callable[..., Coroutine[Any, Any, Any]] | None = None


class Shared:
    """What both parts hold (the Integration is one: it adds setting them up and closing)."""

    def __init__(self, surface: Surface, settings: HookSettings) -> None:
        self.s = surface
        self.settings = settings
        self.link = RedisLink(settings.redis_url, THROTTLE, options=settings.redis_options(), keys=settings.keys)
        self.counts: Counter[str] = Counter()
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        schedule = self.s.schedule_background
        if schedule is not None:
            # nanobot awaits these on close, so `agent -m` finishes an enqueue before it exits.
            schedule(coro)
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def bug(self, doing: str, exc: BaseException) -> None:
        # Throttled per kind of error, not per session, so one bug cannot flood the log.
        THROTTLE.warning(f"bug:{type(exc).__name__}",
                         f"unexpected error while {doing}: {logs.describe(exc)}; nanobot goes on")

    def window(self) -> int | None:
        """The context window of the running request, when nanobot knows it."""
        # The runtime of this request honours per-session model presets; the loop's is the fallback.
        runtime = getattr(self.s.request_context(), "runtime", None)
        for window in (getattr(runtime, "context_window_tokens", None),
                       getattr(self.s.loop, "context_window_tokens", None)):
            if isinstance(window, int) and not isinstance(window, bool) and window > 0:
                return window
        return None
