"""The entry nanobot loads (group `nanobot.tools`) that installs the integration (the `recall` tool, the other
entry, is in recall_tool.py), and the nanobot version check both entries make.

nanobot has no hook entry point; it calls `Tool.enabled(ctx)` of every tool plugin once per
AgentLoop. SummaryWorkerHooks uses that call to install the integration and answers False, so it
never reaches the LLM. Every nanobot name we need is looked up and checked here, before anything is
changed; when one is missing (a nanobot outside 0.3.x) or a setting is bad, one log line says why the
integration is off and nanobot runs exactly as if this package were not installed. The nanobot version and the settings
are checked first: the Redis client libraries are imported only when the integration goes on.
The Integration is kept on the AgentLoop itself (an attribute), so it lives and dies with the loop.
"""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from nanobot_hooks import logs

try:
    from nanobot.agent.tools.base import Tool as ToolBase
except Exception:  # noqa: BLE001 - without nanobot's Tool, nanobot's loader skips this class anyway
    ToolBase = object

SUPPORTED_PREFIX = "0.3."
DISTRIBUTION = "nanobot-ai"

# The attribute of the AgentLoop that holds its Integration. Not a module-level map: the Integration
# refers to its loop, so a map keyed by loops (even a weak one) would keep every loop alive.
ATTRIBUTE = "_summary_worker_integration"
_announced: set[str] = set()


class Off(Exception):
    """Why the integration stays off; the message is the one log line."""


class SummaryWorkerHooks(ToolBase):
    """Not a tool: `enabled()` installs the summary worker integration and always answers False."""

    _scopes = {"core"}  # the main agent loop only; subagents get their own loader scope

    @property
    def name(self) -> str:
        return "summary_worker_hooks"

    @property
    def description(self) -> str:
        return "internal: never offered to the model"

    @property
    def parameters(self) -> dict[str, Any]:
        return {"type": "object", "properties": {}}

    async def execute(self, **kwargs: Any) -> Any:
        return "Error: summary_worker_hooks is not a tool"

    @classmethod
    def enabled(cls, ctx: Any) -> bool:
        try:
            install(ctx)
        except Off as off:
            switch_off(str(off))
        except Exception as exc:  # noqa: BLE001 - never raise into nanobot's tool loader
            switch_off(f"unexpected error while installing: {logs.describe(exc)}")
        return False


def install(ctx: Any) -> Any:
    """Install into the AgentLoop behind `ctx` once; returns its Integration."""
    from nanobot_hooks.settings import load_settings, SettingsError

    check_version()
    try:
        settings = load_settings()
        if settings.summary_namespace is None:  # the instance's namespace, from the id nanobot keeps in its workspace
            settings = settings.for_workspace(Path(_need(ctx, "workspace", "ToolContext.workspace")))
    except SettingsError as exc:
        raise Off(f"bad setting: {exc}") from None
    loop = agent_loop(ctx)
    existing = installed(loop)
    if existing is not None:
        return existing
    surface = probe(loop)  # the first import of the integration (arq, redis)
    from nanobot_hooks.integration import Integration

    integration = Integration(surface, settings)
    try:
        setattr(loop, ATTRIBUTE, integration)
    except Exception:  # noqa: BLE001 - e.g. a loop with __slots__
        raise Off("cannot keep the integration on this nanobot's AgentLoop") from None
    try:
        integration.install()
    except BaseException:
        _forget(loop)
        raise
    return integration


def installed(loop: Any) -> Any:
    """The Integration installed into `loop`, if any (for benchmarks and diagnostics)."""
    return getattr(loop, "__dict__", {}).get(ATTRIBUTE)


def _forget(loop: Any) -> None:
    try:
        delattr(loop, ATTRIBUTE)
    except Exception:  # noqa: BLE001
        pass


def agent_loop(ctx: Any) -> Any:
    control = _need(ctx, "runtime_control", "ToolContext.runtime_control")
    # AgentRuntimeControl keeps the loop in a name-mangled private attribute.
    return _need(control, "_AgentRuntimeControl__target", "AgentRuntimeControl's loop reference")


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
    from nanobot_hooks.shared import Surface

    hook_factories = _need(loop, "_hook_factories", "AgentLoop._hook_factories")
    if not isinstance(hook_factories, list):
        raise Off("AgentLoop._hook_factories is not a list")
    session_lock = _callable(loop, "_get_session_lock", "AgentLoop._get_session_lock()")
    subscribe = _callable(_need(loop, "bus", "AgentLoop.bus"), "subscribe", "MessageBus.subscribe()")
    sessions = _need(loop, "sessions", "AgentLoop.sessions")
    for method in ("get_cached", "get_or_create", "save"):
        _callable(sessions, method, f"SessionManager.{method}()")
    _probe_session_class()
    schedule = getattr(loop, "schedule_background", None)
    run = getattr(loop, "run", None)
    aclose = getattr(loop, "aclose", None)
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
    )


def _probe_session_class() -> None:
    """The parts of nanobot's Session that applying a summary relies on."""
    session_class = _import("nanobot.session.manager", "Session")
    commit = _need(session_class, "commit_summary_checkpoint", "Session.commit_summary_checkpoint()")
    if "insert_at" not in inspect.signature(commit).parameters:
        raise Off("Session.commit_summary_checkpoint() takes no insert_at")
    if not isinstance(_need(session_class, "last_archived", "Session.last_archived"), property):
        raise Off("Session.last_archived is not a property")
    # Reset when a summary is applied: a nanobot that renamed it would keep sending every covered message.
    _declared(session_class, "provider_state", "Session.provider_state")


_MISSING = object()


def _need(owner: Any, name: str, what: str) -> Any:
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
    value = _need(owner, name, what)
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
