"""Stand-ins for the nanobot 0.3.5 objects the hooks touch (Session, SessionManager, the bus, AgentLoop, a turn's
start and context), so the hooks' tests run the integration without a nanobot.

The real objects are exercised end to end in tests/scenarios/test_nanobot_e2e.py; these cover what is slow or awkward to
produce through nanobot.
"""

from __future__ import annotations

import asyncio
import atexit
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.transcripts import conversation
from nanobot_hooks.context import Surface
from nanobot_hooks.contract.records import SummaryRecord, record_key
from nanobot_hooks.contract.session_format import storage_name
from nanobot_hooks.integration import Integration

KEY = "telegram:99"  # the session the stand-in turns belong to unless told otherwise
MARKER_TEXT = "Continue the active task from the working-memory checkpoint above."
# The stand-in SessionManager's folder, where the instance's record key lives (one per test process): `record_for`
# signs with it, as the worker signs with the key in nanobot's sessions folder.
SESSIONS_DIR = Path(tempfile.mkdtemp(prefix="standin-sessions-"))
atexit.register(shutil.rmtree, SESSIONS_DIR, ignore_errors=True)


@dataclass
class StandInSession:
    """What nanobot's Session does on commit: insert a hidden marker at N, set the summary, move the watermark."""

    key: str
    messages: list[dict[str, Any]]
    metadata: dict[str, Any] = field(default_factory=dict)
    last_archived: int = 0
    provider_state: Any = None

    def commit_summary_checkpoint(
        self, summary: str, *, insert_at: int | None = None, last_active: datetime | None = None
    ) -> None:
        boundary = len(self.messages) if insert_at is None else insert_at
        self.messages.insert(boundary, {"role": "user", "content": MARKER_TEXT, "_hidden_history": True})
        self.metadata["_last_summary"] = {"text": summary, "last_active": "x"}
        self.last_archived = boundary


def record_for(session: StandInSession, boundary: int, summary: str = "rolling summary") -> SummaryRecord:
    """A record of `session` up to `boundary`, signed as the instance's worker signs it."""
    return SummaryRecord(
        session_key=session.key,
        summary=summary,
        start=session.last_archived,
        boundary=boundary,
        boundary_timestamp=session.messages[boundary - 1]["timestamp"],
        messages_before=len(session.messages),
        messages_after=len(session.messages) - boundary + 1,
        tokens_before=1000,
        tokens_after=300,
    ).signed(record_key(SESSIONS_DIR))


def idle_session(prompt_tokens: int, quiet_for: float) -> StandInSession:
    """A session of 10 exchanges last saved `quiet_for` seconds ago, whose last prompt was `prompt_tokens`."""
    session = StandInSession(KEY, conversation(10))
    session.updated_at = datetime.now() - timedelta(seconds=quiet_for)  # type: ignore[attr-defined]
    session.metadata["_last_usage"] = {"input_tokens": prompt_tokens, "context_tokens": prompt_tokens}
    return session


class Hook:
    def __init__(self) -> None:
        pass


class TurnStarted:
    """Stands in for nanobot's SessionTurnStarted (only its type is used: to subscribe)."""


class TurnPersisted:
    """Stands in for nanobot's SessionTurnPersisted."""


class Bus:
    def __init__(self) -> None:
        self.handlers: list[tuple[Any, type]] = []

    def subscribe(self, handler: Any, event_type: type) -> Any:
        entry = (handler, event_type)
        self.handlers.append(entry)
        return lambda: self.handlers.remove(entry) if entry in self.handlers else None

    def publish(self, event: Any, event_type: type) -> None:
        """As nanobot's bus: every handler of the type, in the order they subscribed."""
        for handler, subscribed in list(self.handlers):
            if subscribed is event_type:
                handler(event)


class Sessions:
    """nanobot's SessionManager as the integration uses it; `on_disk` says which keys exist."""

    def __init__(self) -> None:
        self.sessions_dir = SESSIONS_DIR
        self.cached: dict[str, StandInSession] = {}
        self.on_disk: dict[str, StandInSession] = {}
        self.saved: list[str] = []
        self.loaded: list[str] = []  # sessions read from disk into memory
        self.saved_on: list[int] = []  # the thread of each save
        self.folder: Path | None = None  # where the session files are, for the tests that write them

    def _get_session_path(self, key: str) -> Path:
        if self.folder is None:
            raise RuntimeError("no sessions folder")
        return self.folder / storage_name(key)

    def get_cached(self, key: str) -> StandInSession | None:
        return self.cached.get(key)

    def get_or_create(self, key: str) -> StandInSession:
        if key not in self.cached and key in self.on_disk:
            self.loaded.append(key)
        session = self.cached.get(key) or self.on_disk.get(key) or StandInSession(key, [])
        self.cached[key] = session
        return session

    def save(self, session: StandInSession) -> None:
        self.saved.append(session.key)
        self.saved_on.append(threading.get_ident())

    def read_session_metadata(self, key: str) -> dict[str, Any] | None:
        return {} if key in self.on_disk else None


class Commands:
    """nanobot's CommandRouter as the integration touches it: the exact commands' table, whose `/new` clears the
    session as nanobot's does (and records what it found)."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions
        self._exact: dict[str, Any] = {"/new": self.new}
        self.cleared: list[tuple[str, int]] = []  # (key, how many messages the session held)

    async def new(self, ctx: Any) -> str:
        session = ctx.session or self.sessions.get_or_create(ctx.key)
        self.cleared.append((ctx.key, len(session.messages)))
        session.messages = []
        self.sessions.save(session)
        return "New session started."


class Loop:
    """What the plugin reads from nanobot's AgentLoop."""

    def __init__(self, hook_factories: list[Any] | None = None) -> None:
        self._hook_factories = [] if hook_factories is None else hook_factories
        self.bus = Bus()
        self.sessions = Sessions()
        self.commands = Commands(self.sessions)
        self.closed = 0

    async def run(self) -> None:
        await asyncio.sleep(0)

    async def aclose(self) -> None:
        self.closed += 1


def surface_for(loop: Loop) -> Surface:
    return Surface(
        loop=loop,
        hook_base=Hook,
        turn_started=TurnStarted,
        turn_persisted=TurnPersisted,
        request_context=lambda: None,
        session_lock=lambda key: asyncio.Lock(),
        subscribe=loop.bus.subscribe,
        sessions=loop.sessions,
        schedule_background=None,
        run=loop.run,
        aclose=loop.aclose,
    )


def started(key: str = KEY) -> Any:
    """A SessionTurnStarted (or SessionTurnPersisted) event of the session `key`."""
    return SimpleNamespace(context=SimpleNamespace(session_key=key))


class TurnContext:
    """Named like nanobot's: the integration finds the turn's `ctx` on the call stack."""

    def __init__(self, content: str, ephemeral: bool = False) -> None:
        self.msg = SimpleNamespace(content=content)
        self.ephemeral = ephemeral


def publish_turn_started(integration: Integration, ctx: TurnContext) -> None:
    # nanobot: _restore_turn(ctx) -> delivery.started() -> bus.publish(SessionTurnStarted) -> handler
    def publish(event: Any) -> None:
        integration.pickups.on_turn_started(event)

    publish(started())
