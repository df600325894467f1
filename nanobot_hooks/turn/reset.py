"""`/new`, inside nanobot: what the session held is kept for the worker before nanobot empties it.

nanobot's `/new` clears the session and saves the empty file; its own archive of the old messages is a summary
in its history, not the messages. Just before nanobot's handler runs (`surface.wrap_command`), the session file
as nanobot last saved it is linked into the sessions folder's RETIRED_FOLDER (a hard link: no byte copied, the
same on any session size, nothing on the network; a copy only where the file system has no links), and the
session's generation is counted up in its live metadata, which nanobot's own save after the clear writes: the
new conversation's notes never pass for the old one's. A job is queued in a thread of its own (nanobot's own
archive of the old messages may hold the event loop for seconds right after); any later job of the
session (the daily run's too) notes the copy as well, so a Redis that is down loses nothing. Nothing here raises
into nanobot, and the session file itself (its bytes, its time: nanobot's recovery file) is left as it is."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nanobot_hooks import logs
from nanobot_hooks.context import Context
from nanobot_hooks.contract.marker import SessionMarker
from nanobot_hooks.contract.queue import enqueue_summary
from nanobot_hooks.contract.records import SummarizeRequest
from nanobot_hooks.contract.session_format import RETIRED_FOLDER, is_internal_session, retired_name
from nanobot_hooks.surface import session_file, wrap_command


def keep_copy(path: Path, key: str, generation: int, stamp_ms: int) -> Path:
    """Link (or copy) the session file into the retired folder; the copy's path. Raises OSError."""
    # A hard link stays the old conversation: nanobot saves a session by writing a temporary file and renaming it
    # over the old one (SessionManager.save), and the worker rewrites line 1 the same way, so nothing writes into
    # the linked inode again.
    folder = path.parent / RETIRED_FOLDER
    folder.mkdir(mode=0o700, exist_ok=True)
    target = folder / retired_name(key, generation, stamp_ms)
    try:
        os.link(path, target)
    except OSError:
        if target.exists():
            raise
        shutil.copy2(path, target)  # a file system without hard links: the same bytes, copied
    return target


class Reset:
    """What the hooks do at `/new` (installed by the integration in front of nanobot's handler)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._unwrap: Callable[[], None] | None = None

    def ensure(self) -> None:
        """Put `before_new` in front of nanobot's `/new` handler, once nanobot made its command router.

        Put `before_new` in front of nanobot's `/new` handler, once nanobot made its command router (after the tools, so
        after the plugin installed): tried at install, when the loop runs and at each turn's start (nanobot awaits that
        event before it dispatches a command). Never raises."""
        if self._unwrap is None:
            try:
                self._unwrap = wrap_command(self.ctx.nanobot.loop, "/new", self.before_new)
            except Exception as exc:  # noqa: BLE001
                self.ctx.bug("hooking /new", exc)

    def on_turn_started(self, event: Any) -> None:
        self.ensure()

    def unwrap(self) -> None:
        undo, self._unwrap = self._unwrap, None
        if undo is not None:
            undo()

    def before_new(self, command: Any) -> None:
        """nanobot's CommandContext of a `/new`, before nanobot clears the session; never raises."""
        try:
            self._keep(command)
        except Exception as exc:  # noqa: BLE001
            self.ctx.bug("keeping a session's messages at /new", exc)

    def _keep(self, command: Any) -> None:
        key = getattr(command, "key", None)
        if not isinstance(key, str) or is_internal_session(key):
            return
        s = self.ctx.nanobot
        session = getattr(command, "session", None) or s.sessions.get_or_create(key)
        path = session_file(s.loop, key)
        if not getattr(session, "messages", None) or not isinstance(getattr(session, "metadata", None), dict):
            return
        ended = SessionMarker.next_generation(session.metadata)
        if path is None or not Path(path).is_file():
            return  # never saved: nothing the worker could have read either
        try:
            kept = keep_copy(Path(path), key, ended, time.time_ns() // 1_000_000)
        except OSError as exc:
            logs.warning(f"/new in {key}: its messages could not be kept for the notes ({exc})")
            return
        logs.info(f"/new in {key}: its messages are kept for the notes in {kept.name}")
        if self.ctx.settings.auto_summary:
            self._enqueue(key)

    def _enqueue(self, key: str) -> None:
        async def work(client: Any) -> bool:
            return await enqueue_summary(client, SummarizeRequest(session_key=key, reason="new")) is not None

        # Apart from nanobot's event loop: right after this, nanobot's own archive of the old messages may hold
        # it for seconds (offline, its tokenizer's download waits out a timeout), past any bound of ours.
        self.ctx.link.call_apart(f"queueing the notes of {key} before /new", work)
