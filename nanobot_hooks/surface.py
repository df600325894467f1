"""Every touch of nanobot's internals, in one place.

The names the integration needs, looked up and checked once (the probe) into a Surface, the nanobot version check, and
the two readings of a running turn that nanobot offers no API for (its context window, and whether the turn is ordinary:
the frame scan).

When a name is missing (a nanobot outside 0.3.x) the lookup raises Off, whose message is the one log line
saying why the integration is off; nanobot then runs exactly as if this package were not installed."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from types import FrameType
from typing import Any

from nanobot_hooks import logs

try:
    from nanobot.agent.tools.base import Tool as _NanobotTool

    ToolBase: Any = _NanobotTool  # the base of the hooks' tools, exported to them
except Exception:  # noqa: BLE001 - without nanobot's Tool, nanobot's loader skips this class anyway
    ToolBase = object

SUPPORTED_PREFIX = "0.3."
DISTRIBUTION = "nanobot-ai"

_announced: set[str] = set()


class Off(Exception):
    """Why the integration stays off; the message is the one log line."""


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
    # The lock nanobot's idle compaction holds per session (`Consolidator.get_lock`) from reading the session to
    # saving its checkpoint; a pickup takes it too, or a record applied meanwhile shifts the messages under it.
    compaction_lock: Callable[[str], asyncio.Lock] | None = None


def agent_loop(ctx: Any) -> Any:
    control = need(ctx, "runtime_control", "ToolContext.runtime_control")
    # AgentRuntimeControl keeps the loop in a name-mangled private attribute.
    return need(control, "_AgentRuntimeControl__target", "AgentRuntimeControl's loop reference")


def check_version() -> str:
    try:
        found = version(DISTRIBUTION)
    except PackageNotFoundError:
        raise Off(f"cannot tell which {DISTRIBUTION} this is (no package metadata)") from None
    if not found.startswith(SUPPORTED_PREFIX):
        raise Off(f"{DISTRIBUTION} {found} is not supported (this release supports {SUPPORTED_PREFIX}x)")
    return found


def probe(loop: Any) -> Any:
    """Resolve and check every nanobot name the integration uses; raise Off naming the first missing."""
    hook_factories = need(loop, "_hook_factories", "AgentLoop._hook_factories")
    if not isinstance(hook_factories, list):
        raise Off("AgentLoop._hook_factories is not a list")
    session_lock = _callable(loop, "_get_session_lock", "AgentLoop._get_session_lock()")
    subscribe = _callable(need(loop, "bus", "AgentLoop.bus"), "subscribe", "MessageBus.subscribe()")
    sessions = need(loop, "sessions", "AgentLoop.sessions")
    for method in ("get_cached", "get_or_create", "save"):
        _callable(sessions, method, f"SessionManager.{method}()")
    _probe_session_class()
    schedule = getattr(loop, "schedule_background", None)
    run = getattr(loop, "run", None)
    aclose = getattr(loop, "aclose", None)
    compaction_lock = getattr(getattr(loop, "consolidator", None), "get_lock", None)
    return Surface(
        loop=loop,
        hook_base=_import("nanobot.agent.hook", "AgentHook"),
        turn_started=_import("nanobot.bus.runtime_events", "SessionTurnStarted"),
        turn_persisted=_import("nanobot.bus.runtime_events", "SessionTurnPersisted"),
        request_context=_import("nanobot.agent.tools.context", "current_request_context"),
        session_lock=session_lock,
        subscribe=subscribe,
        sessions=sessions,
        schedule_background=schedule if callable(schedule) else None,
        run=run if inspect.iscoroutinefunction(run) else None,
        aclose=aclose if inspect.iscoroutinefunction(aclose) else None,
        compaction_lock=compaction_lock if callable(compaction_lock) else None,
    )


def _probe_session_class() -> None:
    """The parts of nanobot's Session that applying a summary relies on."""
    session_class = _import("nanobot.session.manager", "Session")
    commit = need(session_class, "commit_summary_checkpoint", "Session.commit_summary_checkpoint()")
    if "insert_at" not in inspect.signature(commit).parameters:
        raise Off("Session.commit_summary_checkpoint() takes no insert_at")
    if not isinstance(need(session_class, "last_archived", "Session.last_archived"), property):
        raise Off("Session.last_archived is not a property")
    # Reset when a summary is applied: a nanobot that renamed it would keep sending every covered message.
    _declared(session_class, "provider_state", "Session.provider_state")


_MISSING = object()


def need(owner: Any, name: str, what: str) -> Any:
    value = getattr(owner, name, _MISSING)
    if value is _MISSING or value is None:
        raise Off(f"this nanobot has no {what}")
    return value


def _declared(cls: Any, name: str, what: str) -> None:
    """`cls` declares the instance attribute `name` (a dataclass field, an annotation or a class attribute)."""
    declared = any(name in vars(klass).get("__annotations__", {}) for klass in getattr(cls, "__mro__", ()))
    if not declared and not hasattr(cls, name):
        raise Off(f"this nanobot has no {what}")


def _callable(owner: Any, name: str, what: str) -> Any:
    value = need(owner, name, what)
    if not callable(value):
        raise Off(f"{what} is not callable in this nanobot")
    return value


def _import(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise Off(f"this nanobot has no {module}.{name}") from None


def switch_off(reason: str, what: str = "integration off") -> None:
    if reason not in _announced:  # one line per reason per process, however many loops start
        _announced.add(reason)
        logs.warning(f"{what}: {reason}; nanobot runs without it")


def compacting(surface: Surface, key: str) -> bool:
    """Whether nanobot's idle compaction is at work on the session now (it holds its lock)."""
    return surface.compaction_lock is not None and surface.compaction_lock(key).locked()


def compaction_lock(surface: Surface, key: str) -> contextlib.AbstractAsyncContextManager[Any]:
    """nanobot's idle-compaction lock of the session, to hold while a record is applied.

    nanobot's idle-compaction lock of the session, to hold while a record is applied (none in a nanobot without one:
    nothing to race)."""
    return surface.compaction_lock(key) if surface.compaction_lock is not None else contextlib.nullcontext()


def window(surface: Surface) -> int | None:
    """The context window of the running request, when nanobot knows it."""
    # The runtime of this request honours per-session model presets; the loop's is the fallback.
    runtime = getattr(surface.request_context(), "runtime", None)
    for tokens in (
        getattr(runtime, "context_window_tokens", None),
        getattr(surface.loop, "context_window_tokens", None),
    ):
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
            return tokens
    return None


# How far up the call stack the frame scan looks for nanobot's TurnContext.
TURN_FRAMES = 16


def ordinary_turn(session: Any) -> bool:
    """False for an ephemeral turn and for a slash command.

    SessionTurnStarted carries neither, but nanobot publishes it from inside the turn (`_restore_turn`), whose `ctx` (a
    TurnContext) is on the call stack. Only looked at when a record is waiting, so an ordinary turn pays nothing."""
    policy = getattr(session, "policy", None)
    if policy is not None and getattr(policy, "persist", True) is False:
        return False
    frame: FrameType | None = sys._getframe(1)
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


def add_hook_factory(loop: Any, factory: Callable[[Any], Any]) -> Callable[[], None]:
    """Puts a hook factory on the AgentLoop; returns what takes it off again."""
    # A new list, not an append: a list passed to several loops must not change under the others.
    loop._hook_factories = [*loop._hook_factories, factory]
    return lambda: setattr(loop, "_hook_factories", [f for f in loop._hook_factories if f is not factory])


def wrap_command(loop: Any, command: str, before: Callable[[Any], None]) -> Callable[[], None] | None:
    """Runs `before(ctx)` ahead of nanobot's handler of a slash command; returns what takes it off again.

    Runs `before(ctx)` ahead of nanobot's handler of an exact slash command (`/new`), with nanobot's CommandContext;
    what takes it off again. None while the AgentLoop has no router yet (nanobot makes it after loading the tools, so
    after the plugin), and when its router has no such handler (one log line). `before` must not raise; whatever it does
    raise is swallowed, so nanobot's command always runs."""
    router = getattr(loop, "commands", None)
    if router is None:
        return None
    table = getattr(router, "_exact", None)
    original = table.get(command) if isinstance(table, dict) else None
    if not isinstance(table, dict) or not callable(original):
        switch_off(f"this nanobot's command router has no {command} handler", f"{command} keeping off")
        return None

    async def handler(ctx: Any) -> Any:
        try:
            before(ctx)
        except Exception:  # noqa: BLE001 - the hook's own errors are its to report; nanobot's command goes on
            pass
        return await original(ctx)

    table[command] = handler
    return lambda: table.__setitem__(command, original) if table.get(command) is handler else None


def session_file(loop: Any, key: str) -> Any:
    """The path of a session's JSONL file as nanobot's store names it, or None when this nanobot cannot say."""
    locate = getattr(getattr(loop, "sessions", None), "_get_session_path", None)
    try:
        return locate(key) if callable(locate) else None
    except Exception:  # noqa: BLE001 - a key nanobot cannot store has no file to keep
        return None
