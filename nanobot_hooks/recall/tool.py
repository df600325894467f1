"""The `recall` tool, the second entry nanobot loads (group `nanobot.tools`).

Offered to the model unless switched off, read-only, bounded in time, never raising; the search itself is
nanobot_hooks.recall.search."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from nanobot_hooks import logs
from nanobot_hooks.surface import ToolBase, check_version, switch_off

RECALL_DESCRIPTION = (
    "Search what was said earlier but left out of the [Archived Context Summary]: this conversation's "
    "archived messages, its daily notes, and MEMORY.md. Summaries drop details (numbers, names, commands, "
    "exact wording); when the user refers to one that the summary does not spell out, recall it here "
    "instead of guessing. Returns a few short passages, each with its date and where it came from. "
    "Query with keywords in the conversation's language (e.g. 'nginx port', '端口 部署', 'Anna audition last "
    "month'); optionally limit to a date range."
)
RECALL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 2,
            "maxLength": 200,
            "description": "keywords, e.g. 'nginx port' or '端口 部署'",
        },
        "date_from": {"type": "string", "description": "only passages dated on or after this day, YYYY-MM-DD"},
        "date_to": {"type": "string", "description": "only passages dated on or before this day, YYYY-MM-DD"},
    },
    "required": ["query"],
}


class RecallTool(ToolBase):
    """The `recall` tool: nanobot_hooks.recall searches, in a thread."""

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
        """Whether the `recall` tool is offered.

        Offered unless NANOBOT_SUMMARY_RECALL=false, a setting is bad or nanobot unsupported (the hooks' entry logs
        those), or this Python's SQLite cannot read the index."""
        try:
            from nanobot_hooks.contract.recall import fts_problem
            from nanobot_hooks.settings import load_settings

            check_version()
            if not load_settings().summary_recall:
                return False
            if fts_problem() is not None:
                switch_off("this Python's SQLite cannot rank full-text searches (FTS5)", "recall tool off")
                return False
            return isinstance(getattr(ctx, "workspace", None), (str, Path))
        except Exception:  # noqa: BLE001 - Off, SettingsError (announced by the hooks' entry), or a surprise
            return False

    @classmethod
    def create(cls, ctx: Any) -> RecallTool:
        from nanobot_hooks.settings import load_settings

        return cls(Path(ctx.workspace).expanduser(), load_settings())

    async def execute(self, query: str = "", date_from: str | None = None, date_to: str | None = None, **_: Any) -> str:
        try:
            from nanobot_hooks.recall import meaning
            from nanobot_hooks.recall import search as recall

            if self._workspace is None or self._settings is None:
                return f"Nothing found for {query!r}: recall is not set up in this process."
            embed = meaning.embedder(self._settings)
            search = asyncio.to_thread(
                recall.search,
                self._workspace,
                str(query),
                _asking_session(),
                self._settings.is_trusted,
                self._settings.summary_recall_scope,
                date_from,
                date_to,
                meaning=embed,
            )
            # The search stops itself at its budget (the query's embedding at its own); this bounds a disk that does
            # not answer at all.
            return await asyncio.wait_for(search, recall.BUDGET_SECONDS + 2.0 + (meaning.QUERY_SECONDS if embed else 0))
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
