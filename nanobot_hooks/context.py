"""What the integration's parts share inside one AgentLoop.

nanobot's objects, the settings, the Redis link, counters, background tasks, and the log line an unexpected error
leaves."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Coroutine
from typing import Any

from nanobot_hooks import logs
from nanobot_hooks.link import RedisLink
from nanobot_hooks.settings import HookSettings
from nanobot_hooks.surface import Surface, window

# One rate limit for the whole process: several loops (SDK) must not multiply the warnings.
THROTTLE = logs.Throttle(every=60.0)

# Per-session state kept in memory (token usage waiting for its turn to be saved, records held for idle
# pickup): more sessions than this means turns that never finished; the oldest entries go first.
MAX_SESSIONS = 256


class Context:
    """What the integration's parts share inside one AgentLoop, handed to each part.

    nanobot's objects (the Surface the plugin probed), the settings, the Redis link, the counters, and the tasks
    spawned."""

    def __init__(self, nanobot: Surface, settings: HookSettings) -> None:
        self.nanobot = nanobot
        self.settings = settings
        self.link = RedisLink(settings.redis_url, THROTTLE, options=settings.redis_options(), keys=settings.keys)
        self.counts: Counter[str] = Counter()
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        schedule = self.nanobot.schedule_background
        if schedule is not None:
            # nanobot awaits these on close, so `agent -m` finishes an enqueue before it exits.
            schedule(coro)
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def pending(self) -> list[asyncio.Task[Any]]:
        """The tasks `spawn` started itself (not those handed to nanobot's schedule_background) still running.

        What a close waits for, and what a test awaits to see a turn's background work done."""
        return [task for task in self._tasks if not task.done()]

    def bug(self, doing: str, exc: BaseException) -> None:
        # Throttled per kind of error, not per session, so one bug cannot flood the log.
        THROTTLE.warning(
            f"bug:{type(exc).__name__}", f"unexpected error while {doing}: {logs.describe(exc)}; nanobot goes on"
        )

    def window(self) -> int | None:
        """The context window of the running request, when nanobot knows it."""
        return window(self.nanobot)
