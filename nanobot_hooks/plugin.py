"""The entry nanobot loads that installs the integration.

The entry nanobot loads (group `nanobot.tools`) that installs the integration (the `recall` tool, the other entry, is in
recall/tool.py), and the nanobot version check both entries make.

nanobot has no hook entry point; it calls `Tool.enabled(ctx)` of every tool plugin once per
AgentLoop. SummaryWorkerHooks uses that call to install the integration and answers False, so it
never reaches the LLM. Every nanobot name we need is looked up and checked here, before anything is
changed; when one is missing (a nanobot outside 0.3.x) or a setting is bad, one log line says why the
integration is off and nanobot runs exactly as if this package were not installed. The nanobot version and the settings
are checked first: the Redis client libraries are imported only when the integration goes on.
The Integration is kept on the AgentLoop itself (an attribute), so it lives and dies with the loop. What
nanobot's internals are looked up and how is nanobot_hooks.surface's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nanobot_hooks import logs
from nanobot_hooks.surface import Off, ToolBase, agent_loop, check_version, need, probe, switch_off

# The attribute of the AgentLoop that holds its Integration. Not a module-level map: the Integration
# refers to its loop, so a map keyed by loops (even a weak one) would keep every loop alive.
ATTRIBUTE = "_summary_worker_integration"


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
    from nanobot_hooks.settings import SettingsError, load_settings

    check_version()
    try:
        settings = load_settings()
        if settings.summary_namespace is None:  # the instance's namespace, from the id nanobot keeps in its workspace
            settings = settings.for_workspace(Path(need(ctx, "workspace", "ToolContext.workspace")))
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
