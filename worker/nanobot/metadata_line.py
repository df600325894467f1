"""Line 1 of a nanobot session file (its metadata record), rewritten beside a running nanobot.

Under nanobot's own lock, every other byte copied as it is."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from nanobot_hooks.contract.session_format import METADATA_TYPE, SESSION_FILES_LOCK
from worker.errors import SessionError
from worker.files import temp_beside
from worker.nanobot.sessions import session_path

LOCK_TIMEOUT_SECONDS = 30
WRITE_ATTEMPTS = 5


def write_metadata_entry(sessions_dir: Path, key: str, name: str, value: Any) -> bool:
    """Set `metadata[name]` in line 1.

    A dict value is merged into a dict already there, so keys others keep in it (the hooks' `applied` marker) survive.
    False (nothing changed) when the file or its metadata line is missing."""

    def set_entry(record: dict[str, Any]) -> bool:
        metadata = found if isinstance(found := record.get("metadata"), dict) else {}
        current = metadata.get(name)
        merged = {**current, **value} if isinstance(current, dict) and isinstance(value, dict) else value
        record["metadata"] = {**metadata, name: merged}
        return True

    return bool(edit_line_one(sessions_dir, session_path(sessions_dir, key), set_entry))


LineEdit = Callable[[dict[str, Any]], Any]


def edit_line_one(sessions_dir: Path, path: Path, edit: LineEdit) -> Any:
    """Rewrite line 1 through `edit`, copying every other byte as it is.

    Rewrite line 1 (nanobot's metadata record) through `edit`, copying every other byte as it is, and return what `edit`
    returned; a falsy result writes nothing. None when the file or its metadata line is missing.

    The new file is made outside nanobot's lock; the lock is held only to check that nanobot did not save
    meanwhile and to rename (nanobot's saves wait on that lock, on its event loop). Only if nanobot saved
    during every such attempt is the whole write done under the lock. The file keeps its permissions and its
    modification time: nanobot discards an unfinished turn's recovery file when the session file is newer.
    Raises SessionError when the file system or the lock refuses.
    """
    lock = FileLock(str(sessions_dir / SESSION_FILES_LOCK), timeout=LOCK_TIMEOUT_SECONDS)
    try:
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            done, result = edit_attempt(path, edit, lock, hold=attempt == WRITE_ATTEMPTS)
            if done:
                return result
    except (OSError, Timeout) as exc:
        raise SessionError(f"cannot write line 1 of {path.name}: {exc}") from None
    raise AssertionError("the last attempt holds the lock and cannot be overtaken")


def _identity(stat: os.stat_result) -> tuple[int, int, int]:
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def edit_attempt(path: Path, edit: LineEdit, lock: FileLock, hold: bool) -> tuple[bool, Any]:
    """One attempt: (False, None) when nanobot saved meanwhile.

    With `hold`, the lock is held throughout, so nothing can save meanwhile.

    The file is copied through a small buffer, never read whole (a session can be tens of MB). The old file
    stays open until the lock is released: replacing the last link to a large file frees its blocks, which
    takes time, and that then happens after nanobot may save again."""
    with lock if hold else nullcontext():
        try:
            source = path.open("rb")
        except FileNotFoundError:
            return True, None
        with source:
            before = os.fstat(source.fileno())
            try:
                record = json.loads(source.readline().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                return True, None
            if not isinstance(record, dict) or record.get("_type") != METADATA_TYPE:
                return True, None
            result = edit(record)
            if not result:
                return True, result
            head = json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n"
            temp = temp_beside(path, head, before.st_mode, rest=source)
            try:
                with nullcontext() if hold else lock:
                    try:
                        now = path.stat()
                    except FileNotFoundError:
                        return True, None
                    if _identity(now) != _identity(before):
                        return False, None  # nanobot saved since the read: read again
                    os.replace(temp, path)
                    os.utime(path, ns=(now.st_atime_ns, now.st_mtime_ns))
            finally:
                temp.unlink(missing_ok=True)
    return True, result
