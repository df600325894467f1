"""Setting the integration up inside one nanobot AgentLoop, and closing it.

The triggering (turn/trigger.py) and the pickup scheduler (turn/pickup.py) hooked into nanobot, the listener of the
worker's notices started.

The parts go in where nanobot already calls out: its hook factories (after every LLM call), its bus
(a turn started, a turn saved) and its `run`/`aclose`. When `run()` returns and when nanobot closes the
loop (`aclose()`), the listener is cancelled and awaited and the Redis connections are closed.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

from nanobot_hooks import logs
from nanobot_hooks.context import Context
from nanobot_hooks.contract.redis_url import redacted_url
from nanobot_hooks.settings import HookSettings
from nanobot_hooks.surface import Surface, add_hook_factory
from nanobot_hooks.turn.listener import listen
from nanobot_hooks.turn.pickup import PickupScheduler
from nanobot_hooks.turn.reset import Reset
from nanobot_hooks.turn.trigger import Triggering


class Integration:
    """One AgentLoop's integration: the context its parts share, the parts, and what installs and closes them."""

    def __init__(self, surface: Surface, settings: HookSettings) -> None:
        self.ctx = Context(surface, settings)
        self.settings = settings
        self.pickups = PickupScheduler(self.ctx)
        self.triggering = Triggering(self.ctx, self.pickups.pickup)
        self.reset = Reset(self.ctx)
        self._listener: asyncio.Task[None] | None = None
        self._undo: list[Callable[[], None]] = []
        self.factory: Callable[[Any], Any] | None = None

    def install(self) -> None:
        """All or nothing: a failure half-way undoes what was done, then propagates to the plugin."""
        try:
            self._install()
        except BaseException:
            self.uninstall()
            raise
        self.ctx.link.look_up_soon()
        interval = self.settings.summary_interval
        when = (
            f"at {self.settings.summary_threshold:.0%} of the context window"
            + (f" or every {interval} user messages" if interval else "")
            + (f", and after {self.settings.summary_cache_ttl:g} s quiet" if self.settings.summary_idle else "")
            if self.settings.auto_summary
            else "only when asked (NANOBOT_AUTO_SUMMARY=false)"
        )
        logs.info(f"on: summaries {when}; Redis {redacted_url(self.settings.redis_url)}")

    def _install(self) -> None:
        s = self.ctx.nanobot
        if self.settings.auto_summary:
            triggering = self.triggering
            factory = self.factory = triggering.hook_factory()
            self._undo.append(add_hook_factory(s.loop, factory))
            self._undo.append(s.subscribe(triggering.on_turn_persisted, s.turn_persisted))
        self._undo.append(s.subscribe(self.pickups.on_turn_started, s.turn_started))
        self._undo.append(s.subscribe(self.reset.on_turn_started, s.turn_started))
        self._undo.append(self.reset.unwrap)
        self.reset.ensure()
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
                integration.reset.ensure()
                integration.start_listener()
            try:
                return await original(*args, **kwargs)
            finally:
                await integration.close()

        functools.update_wrapper(wrapper, original, assigned=(), updated=())  # sets only __wrapped__
        loop = self.ctx.nanobot.loop
        setattr(loop, name, wrapper)
        self._undo.append(lambda: setattr(loop, name, original) if getattr(loop, name) is wrapper else None)

    async def close(self) -> None:
        """Cancel and await the listener, let our own background tasks finish (bounded), close the Redis connections.

        Never raises (but a cancel of the caller still propagates)."""
        task, self._listener = self._listener, None
        self.pickups.cancel_timers()
        try:
            running = asyncio.get_running_loop()
            if task is not None and not task.done():
                task.cancel()
                if task.get_loop() is running:
                    await asyncio.wait([task], timeout=self.ctx.link.timeout)
            ours = [t for t in self.ctx.pending() if t.get_loop() is running]
            if ours:  # only without nanobot's schedule_background, whose tasks nanobot drains itself
                await asyncio.wait(ours, timeout=self.ctx.link.timeout)
            await self.triggering.flush_context()  # the turns' prompt tokens not written yet (bounded)
            await self.ctx.link.close()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            self.ctx.bug("closing the Redis connections", exc)

    def start_listener(self) -> None:
        try:
            if self._listener is None or self._listener.done():
                self._listener = asyncio.get_running_loop().create_task(
                    listen(self.ctx.link, self.pickups.request_pickup, settings=self.settings),
                    name="summary-worker-listener",
                )
        except Exception as exc:  # noqa: BLE001
            self.ctx.bug("starting the listener", exc)

    def stop_listener(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            self._listener = None
        self.pickups.cancel_timers()
