"""The entries nanobot loads (group `nanobot.tools`): the integration's installer, and the `recall` tool.

nanobot has no hook entry point; it calls `Tool.enabled(ctx)` of every tool plugin once per
AgentLoop. SummaryWorkerHooks uses that call to install the integration and answers False, so it
never reaches the LLM. RecallTool is a real tool (a second entry), offered unless switched off.
Every nanobot name we need is looked up and checked here, before anything is changed; when one is
missing (a nanobot outside 0.3.x) or a setting is bad, one log line says why the integration is off
and nanobot runs exactly as if this package were not installed. The nanobot version and the settings
are checked first: the Redis client libraries are imported only when the integration goes on.
The Integration is kept on the AgentLoop itself (an attribute), so it lives and dies with the loop.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from nanobot_hooks import logs

try:
    from nanobot.agent.tools.base import Tool as _ToolBase
except Exception:  # noqa: BLE001 - without nanobot's Tool, nanobot's loader skips this class anyway
    _ToolBase = object  # type: ignore[assignment, misc]

SUPPORTED_PREFIX = "0.3."
DISTRIBUTION = "nanobot-ai"

# The attribute of the AgentLoop that holds its Integration. Not a module-level map: the Integration
# refers to its loop, so a map keyed by loops (even a weak one) would keep every loop alive.
ATTRIBUTE = "_summary_worker_integration"
_announced: set[str] = set()


class Off(Exception):
    """Why the integration stays off; the message is the one log line."""


class SummaryWorkerHooks(_ToolBase):  # type: ignore[misc, valid-type]
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
            _switch_off(str(off))
        except Exception as exc:  # noqa: BLE001 - never raise into nanobot's tool loader
            _switch_off(f"unexpected error while installing: {logs.describe(exc)}")
        return False


def install(ctx: Any) -> Any:
    """Install into the AgentLoop behind `ctx` once; returns its Integration."""
    from nanobot_hooks.settings import SettingsError, load_settings

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
    hook_base = _import("nanobot.agent.hook", "AgentHook")
    turn_started = _import("nanobot.bus.runtime_events", "SessionTurnStarted")
    turn_persisted = _import("nanobot.bus.runtime_events", "SessionTurnPersisted")
    request_context = _import("nanobot.agent.tools.context", "current_request_context")
    session_class = _import("nanobot.session.manager", "Session")
    commit = _need(session_class, "commit_summary_checkpoint", "Session.commit_summary_checkpoint()")
    if "insert_at" not in inspect.signature(commit).parameters:
        raise Off("Session.commit_summary_checkpoint() takes no insert_at")
    if not isinstance(_need(session_class, "last_archived", "Session.last_archived"), property):
        raise Off("Session.last_archived is not a property")
    # Reset when a summary is applied: a nanobot that renamed it would keep sending every covered message.
    _declared(session_class, "provider_state", "Session.provider_state")
    schedule = getattr(loop, "schedule_background", None)
    run = getattr(loop, "run", None)
    aclose = getattr(loop, "aclose", None)
    return Surface(
        loop=loop,
        hook_base=hook_base,
        turn_started=turn_started,
        turn_persisted=turn_persisted,
        request_context=request_context,
        hook_factories=hook_factories,
        session_lock=session_lock,
        subscribe=subscribe,
        sessions=sessions,
        schedule_background=schedule if callable(schedule) else None,
        run=run if inspect.iscoroutinefunction(run) else None,
        aclose=aclose if inspect.iscoroutinefunction(aclose) else None,
    )


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


def _switch_off(reason: str, what: str = "integration off") -> None:
    if reason not in _announced:  # one line per reason per process, however many loops start
        _announced.add(reason)
        logs.warning(f"{what}: {reason}; nanobot runs without it")


RECALL_DESCRIPTION = (
    "Search what was said earlier but left out of the [Archived Context Summary]: this conversation's "
    "archived messages, its daily notes, and MEMORY.md. Summaries drop details (numbers, names, commands, "
    "exact wording); when the user refers to one that the summary does not spell out, recall it here "
    "instead of guessing. Returns a few short passages, each with its date and where it came from. "
    "Query with keywords of two or more characters, separated by spaces, in the conversation's language "
    "(e.g. 'nginx port' or '端口 部署'); optionally limit to a date range."
)
RECALL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 2, "maxLength": 200,
                  "description": "keywords separated by spaces, e.g. 'nginx port' or '端口 部署'"},
        "date_from": {"type": "string", "description": "only passages dated on or after this day, YYYY-MM-DD"},
        "date_to": {"type": "string", "description": "only passages dated on or before this day, YYYY-MM-DD"},
    },
    "required": ["query"],
}


class RecallTool(_ToolBase):  # type: ignore[misc, valid-type]
    """The `recall` tool (nanobot_hooks.recall does the search); read-only, bounded in time, never raising."""

    _scopes = {"core"}

    def __init__(self, workspace: Path | None = None, settings: Any = None) -> None:
        self._workspace = workspace
        self._settings = settings

    @property
    def name(self) -> str:
        return "recall"

    @property
    def description(self) -> str:
        return RECALL_DESCRIPTION

    @property
    def parameters(self) -> dict[str, Any]:
        return RECALL_PARAMETERS

    @property
    def read_only(self) -> bool:
        return True

    @classmethod
    def enabled(cls, ctx: Any) -> bool:
        """Offered unless NANOBOT_SUMMARY_RECALL=false, a setting is bad or nanobot unsupported (the
        hooks' entry logs those), or this Python's SQLite cannot read the index."""
        try:
            from nanobot_hooks.contract import fts_problem
            from nanobot_hooks.settings import load_settings

            check_version()
            if not load_settings().summary_recall:
                return False
            if fts_problem() is not None:
                _switch_off("this Python's SQLite has no FTS5 trigram tokenizer", "recall tool off")
                return False
            return isinstance(getattr(ctx, "workspace", None), (str, Path))
        except Exception:  # noqa: BLE001 - Off, SettingsError (announced by the hooks' entry), or a surprise
            return False

    @classmethod
    def create(cls, ctx: Any) -> RecallTool:
        from nanobot_hooks.settings import load_settings

        return cls(Path(ctx.workspace).expanduser(), load_settings())

    async def execute(self, query: str = "", date_from: str | None = None, date_to: str | None = None,
                      **_: Any) -> str:
        try:
            from nanobot_hooks import recall

            if self._workspace is None or self._settings is None:
                return f"Nothing found for {query!r}: recall is not set up in this process."
            search = asyncio.to_thread(recall.search, self._workspace, str(query), _asking_session(),
                                       self._settings.is_trusted, self._settings.summary_recall_scope,
                                       date_from, date_to)
            # The search stops itself at its budget; this bounds a disk that does not answer at all.
            return await asyncio.wait_for(search, recall.BUDGET_SECONDS + 2.0)
        except ValueError as exc:  # a malformed date: the model can fix it
            return f"Error: {exc}"
        except asyncio.TimeoutError:
            return f"Nothing found for {query!r}: the archive did not answer in time."
        except Exception as exc:  # noqa: BLE001 - never raise into nanobot's turn
            logs.warning(f"recall failed: {logs.describe(exc)}")
            return f"Nothing found for {query!r}: the search failed."


def _asking_session() -> str | None:
    """The session of the running turn: its key, not its channel (`nanobot agent -s telegram:42` runs as cli)."""
    try:
        from nanobot.agent.tools.context import current_request_context

        key = getattr(current_request_context(), "session_key", None)
    except Exception:  # noqa: BLE001 - without it only MEMORY.md is searched
        return None
    return key if isinstance(key, str) and key else None
