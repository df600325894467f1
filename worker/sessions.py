"""nanobot 0.3.x session files: find one by key, read it tolerantly, and rewrite only its metadata line."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from nanobot_hooks.nanobot_format import (
    METADATA_TYPE,
    PROVIDER_STATE_TYPE,
    SESSION_FILES_LOCK,
    key_from_name,
    storage_name,
    summary_text,
    timestamp_before,
)
from worker.errors import SessionError, SessionKeyError, SessionNotFound

LOCK_TIMEOUT_SECONDS = 30
_MAX_KEY_BYTES = 180  # base64 grows by 4/3; keeps the file name under 255 bytes


def validate_key(key: str) -> str:
    if not key or not key.strip():
        raise SessionKeyError("empty session key")
    if any(ord(ch) < 32 for ch in key) or len(key.encode("utf-8")) > _MAX_KEY_BYTES:
        raise SessionKeyError(f"malformed session key {key!r}")
    return key


def session_path(sessions_dir: Path, key: str) -> Path:
    """The file for `key`; the encoding cannot leave the folder, and a symlink out of it is refused."""
    path = sessions_dir / storage_name(validate_key(key))
    return ensure_inside(sessions_dir, path)


def ensure_inside(sessions_dir: Path, path: Path) -> Path:
    root = sessions_dir.resolve(strict=False)
    resolved = path.resolve(strict=False)
    if resolved.parent != root:
        raise SessionKeyError(f"{path} is outside the sessions folder {root}")
    return path


def list_session_keys(sessions_dir: Path) -> list[str]:
    if not sessions_dir.is_dir():
        return []
    keys = (key_from_name(p.name) for p in sessions_dir.glob("*.jsonl") if not p.name.startswith("."))
    return sorted(k for k in keys if k is not None)


@dataclass
class SessionFile:
    """One read of a session file. Messages keep nanobot's indices (its loader skips the same lines)."""

    key: str
    path: Path
    metadata_record: dict[str, Any]
    messages: list[dict[str, Any]]
    skipped_lines: int = 0
    skipped_reasons: list[str] = field(default_factory=list)

    @property
    def metadata(self) -> dict[str, Any]:
        value = self.metadata_record.get("metadata")
        return value if isinstance(value, dict) else {}

    @property
    def last_archived(self) -> int:
        for name in ("last_archived", "last_consolidated"):
            value = self.metadata_record.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                # nanobot resets an out-of-range watermark to 0; so do we.
                return value if 0 <= value <= len(self.messages) else 0
        return 0

    @property
    def previous_summary(self) -> str:
        return summary_text(self.metadata)

    def timestamp_before(self, boundary: int) -> str | None:
        """The timestamp of message boundary-1: what a record uses to recognise its cut later."""
        return timestamp_before(self.messages, boundary)


def read_session(sessions_dir: Path, key: str) -> SessionFile:
    path = session_path(sessions_dir, key)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SessionNotFound(f"no session {key!r} (looked for {path})") from None
    except OSError as exc:
        raise SessionError(f"cannot read session {key!r}: {exc}") from None
    return parse_session(key, path, raw)


def parse_session(key: str, path: Path, raw: bytes) -> SessionFile:
    """nanobot writes by atomic rename, so one plain read is a consistent snapshot."""
    metadata: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    skipped: list[str] = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            skipped.append(f"line {number}: not UTF-8")
            continue
        except json.JSONDecodeError as exc:
            skipped.append(f"line {number}: bad JSON ({exc.msg})")
            continue
        if not isinstance(data, dict):
            skipped.append(f"line {number}: not a JSON object")
            continue
        record_type = data.get("_type")
        if record_type == METADATA_TYPE:
            metadata = data
        elif record_type == PROVIDER_STATE_TYPE:
            continue
        else:
            messages.append(data)
    return SessionFile(key, path, metadata, messages, len(skipped), skipped)


def write_metadata_entry(sessions_dir: Path, key: str, name: str, value: Any) -> bool:
    """Set `metadata[name]` in line 1, under nanobot's lock, copying every other byte as it is.

    A dict value is merged into a dict already there, so keys others keep in it (the hooks' `applied`
    marker) survive.

    Returns False (and changes nothing) when the file or its metadata line is missing; raises
    SessionError when the file system or the lock refuses.
    """
    path = session_path(sessions_dir, key)
    try:
        return _write_metadata_entry(sessions_dir, path, name, value)
    except (OSError, Timeout) as exc:
        raise SessionError(f"cannot write line 1 of {path.name}: {exc}") from None


def _write_metadata_entry(sessions_dir: Path, path: Path, name: str, value: Any) -> bool:
    with FileLock(str(sessions_dir / SESSION_FILES_LOCK), timeout=LOCK_TIMEOUT_SECONDS):
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return False
        first, newline, rest = raw.partition(b"\n")
        try:
            record = json.loads(first.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return False
        if not isinstance(record, dict) or record.get("_type") != METADATA_TYPE:
            return False
        metadata = record.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        current = metadata.get(name)
        if isinstance(current, dict) and isinstance(value, dict):
            value = {**current, **value}
        record["metadata"] = {**metadata, name: value}
        head = json.dumps(record, ensure_ascii=False).encode("utf-8")
        _replace_atomically(path, head + b"\n" + rest if newline else head + b"\n")
    return True


def _replace_atomically(path: Path, content: bytes) -> None:
    # A dot-name ending in .tmp, like nanobot's own, so nothing lists it as a session.
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        with open(tmp, "xb") as handle:
            os.chmod(tmp, 0o600)
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
