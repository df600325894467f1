"""nanobot 0.3.x session files.

Find one by key and read it tolerantly (worker.nanobot.metadata_line rewrites its line 1)."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast, overload

from nanobot_hooks.contract.marker import SessionMarker
from nanobot_hooks.contract.session_format import (
    METADATA_TYPE,
    NOTED_SUFFIX,
    PROVIDER_STATE_TYPE,
    RETIRED_FOLDER,
    is_hidden,
    key_from_name,
    retired_key,
    storage_name,
    summary_text,
    timestamp_before,
)
from worker.errors import SessionError, SessionKeyError, SessionNotFound
from worker.text.prepare import left_out_note

log = logging.getLogger("worker.nanobot.sessions")
# A file name of 255 bytes at most (ext4, APFS, NTFS): base64 of the key plus ".jsonl". nanobot stores every
# key that fits (about 186 bytes), so every such key is accepted.
MAX_FILE_NAME_BYTES = 255


def validate_key(key: str) -> str:
    if not key or not key.strip():
        raise SessionKeyError("empty session key")
    if any(ord(ch) < 32 for ch in key):
        raise SessionKeyError(f"malformed session key {key!r}")
    if len(storage_name(key)) > MAX_FILE_NAME_BYTES:
        raise SessionKeyError(f"session key of {len(key.encode('utf-8'))} bytes: no file name can hold it")
    return key


def session_path(sessions_dir: Path, key: str, root: Path | None = None) -> Path:
    """The file for `key`; the encoding cannot leave the folder, and a symlink out of it is refused.

    `root`: the folder already resolved, when many keys are checked at once (a resolve per key was half of listing
    1,000)."""
    path = sessions_dir / storage_name(validate_key(key))
    return ensure_inside(sessions_dir, path, root)


def ensure_inside(sessions_dir: Path, path: Path, root: Path | None = None) -> Path:
    root = root or sessions_dir.resolve(strict=False)
    resolved = path.resolve(strict=False)
    if resolved.parent != root:
        raise SessionKeyError(f"{path} is outside the sessions folder {root}")
    return path


def list_session_keys(sessions_dir: Path) -> list[str]:
    """Every session of the folder the worker can serve.

    A file it cannot (a key with control characters, a link out of the folder) is logged and skipped, so it never stops
    a run over all the others."""
    if not sessions_dir.is_dir():
        return []
    keys = []
    root = sessions_dir.resolve(strict=False)
    for path in sorted(sessions_dir.glob("*.jsonl")):
        key = key_from_name(path.name) if not path.name.startswith(".") else None
        if key is None:
            continue
        try:
            session_path(sessions_dir, key, root)
        except SessionKeyError as exc:
            log.warning("skipping session file %s: %s", path.name, exc)
            continue
        keys.append(key)
    return sorted(keys)


class Tail(Sequence[dict[str, Any]]):
    """A session's messages from index `first` on, under the whole session's indices and length.

    A job reads from the watermark, and a long history is never held. Reaching before `first` is a bug, and says so."""

    def __init__(
        self, first: int, items: list[dict[str, Any]], total: int, visible_before: int = 0, resume: int | None = None
    ) -> None:
        self.first, self.items, self.total = first, items, total
        self.visible_before = visible_before  # the visible messages before `first`: where positions go on from
        # A window of a file (`read_window`): the byte offset of the first line not held, and the file it is of
        # (inode, size, mtime): the next window goes on from there while the file is the same.
        self.resume = resume
        self.identity: tuple[int, int, int] | None = None

    def __len__(self) -> int:
        return self.total

    @property
    def held_end(self) -> int:
        """Where the messages held end: the session's length, but in a window of a huge file (`read_window`)."""
        return self.first + len(self.items)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            start, stop, step = index.indices(self.total)
            if step != 1:
                raise ValueError("only contiguous slices of a session's tail")
            if stop <= start:
                return []
            self._check(start)
            self._check(stop - 1)
            return self.items[start - self.first : stop - self.first]
        if index < 0:
            index += self.total
        if not 0 <= index < self.total:
            raise IndexError(f"message {index} of {self.total}")
        self._check(index)
        return self.items[index - self.first]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self.first or self.held_end < self.total:
            raise ValueError(f"only messages {self.first}..{self.held_end - 1} were read: iterate over a slice")
        return iter(self.items)

    def _check(self, index: int) -> None:
        if index < self.first:
            raise ValueError(f"message {index} is before {self.first}, where this read of the session started")
        if index >= self.held_end:
            raise ValueError(f"message {index} is after {self.held_end - 1}, where this window of the session ended")


@dataclass
class SessionFile:
    """One read of a session file.

    Messages keep nanobot's indices (its loader skips the same lines); a read from the watermark (`read_session(...,
    from_watermark=True)`) holds only the messages from `first` on."""

    key: str
    path: Path
    metadata_record: dict[str, Any]
    messages: Sequence[dict[str, Any]]
    skipped_lines: int = 0
    skipped_reasons: list[str] = field(default_factory=list)

    @property
    def first(self) -> int:
        """The first message held: the others were counted, not kept."""
        return self.messages.first if isinstance(self.messages, Tail) else 0

    @property
    def metadata(self) -> dict[str, Any]:
        value = self.metadata_record.get("metadata")
        return value if isinstance(value, dict) else {}

    @property
    def last_archived(self) -> int:
        value = watermark(self.metadata_record)
        # nanobot resets an out-of-range watermark to 0; so do we.
        return value if 0 <= value <= len(self.messages) else 0

    @property
    def generation(self) -> int:
        """How many times `/new` emptied the session before these messages (the notes' spans name it)."""
        return SessionMarker.generation(self.metadata)

    @property
    def previous_summary(self) -> str:
        return summary_text(self.metadata)

    def timestamp_before(self, boundary: int) -> str | None:
        """The timestamp of message boundary-1: what a record uses to recognise its cut later.

        None for a boundary before the watermark in a read from it: a record there no longer fits anyway."""
        if boundary - 1 < self.first:
            return None
        return timestamp_before(self.messages, boundary)


def watermark(metadata_record: dict[str, Any]) -> int:
    """nanobot's `last_archived` (or the older `last_consolidated`) as written; 0 when missing."""
    for name in ("last_archived", "last_consolidated"):
        value = metadata_record.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def read_metadata(path: Path) -> dict[str, Any]:
    """The session file's metadata record, read line by line without holding a message.

    The session file's metadata record (the last one, as nanobot's loader takes it; {} when none), read line by line
    without holding a message: a 200 MB file costs its longest line."""
    try:
        with path.open("rb") as lines:
            return parse_lines(path.name, path, lines, start=NOT_YET).metadata_record
    except FileNotFoundError:
        raise SessionNotFound(f"no session file {path}") from None
    except OSError as exc:
        raise SessionError(f"cannot read {path.name}: {exc}") from None


def read_session(
    sessions_dir: Path,
    key: str,
    from_watermark: bool = False,
    keep_from: Callable[[dict[str, Any]], bool] | None = None,
) -> SessionFile:
    """nanobot writes by atomic rename, so reading one open file is a consistent snapshot.

    Line by line: the file's bytes are never all in memory beside the messages made of them (a session can be 50 MB).

    `from_watermark`: the messages before nanobot's watermark are counted, not kept (all but the one just
    before it, whose timestamp a record's cut is recognised by), so a long history costs no memory.
    `keep_from` (with it): the messages are kept from the first one it is true of too, when that one comes
    earlier (the daily run: the first message of the day it notes from)."""
    path = session_path(sessions_dir, key)
    try:
        with path.open("rb") as lines:
            session = parse_lines(key, path, lines, from_watermark, keep_from)
        if session.first and session.first > max(0, session.last_archived - 1):
            # An out-of-range watermark (nanobot starts over from 0), or a second metadata line that moved
            # it back: the messages wanted were not all kept; read them all.
            with path.open("rb") as lines:
                session = parse_lines(key, path, lines)
        return session
    except FileNotFoundError:
        raise SessionNotFound(f"no session {key!r} (looked for {path})") from None
    except OSError as exc:
        raise SessionError(f"cannot read session {key!r}: {exc}") from None


def read_window(
    sessions_dir: Path,
    key: str,
    start: int,
    hold_bytes: int,
    after: SessionFile | None = None,
    path: Path | None = None,
    keep_from: Callable[[dict[str, Any]], bool] | None = None,
) -> SessionFile:
    """The session with its messages held from `start - 1` on, up to about `hold_bytes` of their lines.

    A huge file read in bounded windows (the recall index's first fill). The others are counted, not kept. `after`: the
    window before, ending at `start`; while the file is the same, this one is read on from where it ended. `path`: the
    file, when it is not the session's own (a copy kept at `/new`, read under a key of its own). `keep_from` (a first
    window): held from the first message it is true of instead (none when none is)."""
    path = path or session_path(sessions_dir, key)
    try:
        with path.open("rb") as lines:
            seen = os.fstat(lines.fileno())
            identity = (seen.st_ino, seen.st_size, seen.st_mtime_ns)
            session = _read_on(lines, after, start, hold_bytes, identity)
            if session is None:
                session = parse_lines(
                    key,
                    path,
                    lines,
                    start=NOT_YET if keep_from else max(0, start - 1),
                    hold_bytes=hold_bytes,
                    keep_from=keep_from,
                )
            if isinstance(session.messages, Tail):
                session.messages.identity = identity
            return session
    except FileNotFoundError:
        raise SessionNotFound(f"no session {key!r} (looked for {path})") from None
    except OSError as exc:
        raise SessionError(f"cannot read session {key!r}: {exc}") from None


def _read_on(
    lines: BinaryIO, after: SessionFile | None, start: int, hold_bytes: int, identity: tuple[int, int, int]
) -> SessionFile | None:
    """The next window, read from where `after` ended (its last message carried over).

    None when the file changed since, or `after` is not the window just before `start`."""
    before = after.messages if after is not None else None
    if (
        after is None
        or not isinstance(before, Tail)
        or before.resume is None
        or before.identity != identity
        or before.held_end != start
        or not before.items
    ):
        return None
    lines.seek(before.resume)
    rest = parse_lines(after.key, after.path, lines, start=0, hold_bytes=hold_bytes)
    read = rest.messages
    items = read.items if isinstance(read, Tail) else list(read)
    visible = before.visible_before + sum(0 if is_hidden(message) else 1 for message in before.items[:-1])
    resume = read.resume if isinstance(read, Tail) else None
    window = Tail(
        start - 1,
        [before.items[-1], *items],
        start + len(read),
        visible,
        None if resume is None else before.resume + resume,
    )
    return SessionFile(after.key, after.path, after.metadata_record, window, rest.skipped_lines, rest.skipped_reasons)


def held_end(messages: Sequence[dict[str, Any]]) -> int:
    """Where a read's messages held end (a window of a huge file ends before the session does)."""
    return messages.held_end if isinstance(messages, Tail) else len(messages)


def parse_session(key: str, path: Path, raw: bytes) -> SessionFile:
    return parse_lines(key, path, raw.split(b"\n"))


NOT_YET = sys.maxsize  # parse_lines' `start` for "hold no message" (until `keep_from` is true of one)
# The most of one line (one message) a read holds: a longer one keeps its first and last halves of this, and a
# note in the middle saying how much was left out. The summary's transcript keeps 12,000 characters of a message
# (worker.text.prepare.MESSAGE_CHARS) and the model's input budget is 24,000 tokens by default, so nothing needs
# more; a pasted 50 MB log costs a job this, not 50 MB and its copies (~780 MB before).
MESSAGE_BYTES = 128 * 1024
_READ_BYTES = 256 * 1024  # the rest of a long line is read in pieces of this size, only its last half-limit kept


@dataclass(frozen=True)
class LongLine:
    """A line over the limit of `bounded_lines`: its first and last bytes, and its whole size."""

    head: bytes
    tail: bytes
    size: int

    def __len__(self) -> int:
        return self.size


def bounded_lines(lines: Iterable[bytes], limit: int = MESSAGE_BYTES) -> Iterator[bytes | LongLine]:
    """A file's lines; one longer than `limit` as a LongLine, read in pieces and never held whole.

    Lines given as bytes already (not a file) go through as they are."""
    if not hasattr(lines, "readline"):
        yield from lines
        return
    stream, half = cast(BinaryIO, lines), max(1, limit // 2)
    while line := stream.readline(limit + 1):
        if len(line) <= limit or line.endswith(b"\n"):
            yield line
            continue
        size, tail = len(line), line[-half:]
        while more := stream.readline(_READ_BYTES):
            size += len(more)
            tail = more[-half:] if len(more) >= half else tail[len(more) - half :] + more
            if more.endswith(b"\n"):
                break
        yield LongLine(line[:half], tail, size)


def parse_lines(
    key: str,
    path: Path,
    lines: Iterable[bytes],
    from_watermark: bool = False,
    keep_from: Callable[[dict[str, Any]], bool] | None = None,
    start: int | None = None,
    hold_bytes: int | None = None,
) -> SessionFile:
    """The session in these lines; a line that is not a JSON object is skipped and counted, never fatal.

    `from_watermark`: with the metadata record first (as nanobot writes it), messages before its watermark
    (but one) are counted and dropped as they are read; with `keep_from`, kept from the first message it is
    true of when that comes earlier. `start`: held from that message on instead (or the first `keep_from` is true
    of, if earlier); `hold_bytes`: no more held once their lines add up to that many bytes: a window of a huge file."""
    metadata: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    skipped: list[str] = []
    first, resume = start or 0, None  # the index of messages[0]
    count = held = offset = visible = 0  # visible: messages before `first` that are not nanobot's hidden rows
    for number, line in enumerate(bounded_lines(lines), start=1):
        offset += len(line)
        data = _decoded(number, line, skipped)
        if data is None:
            continue
        record_type = data.get("_type")
        if record_type == METADATA_TYPE:
            metadata = data
            if from_watermark and count == 0 and start is None:
                first = max(0, watermark(metadata) - 1)
        elif record_type != PROVIDER_STATE_TYPE:
            if count < first and keep_from is not None and keep_from(data):
                first = count  # from here on every message is held
            # Two at least: the one a window starts before (its timestamp) and one to go on with.
            if count >= first and (hold_bytes is None or held < hold_bytes or len(messages) < 2):
                messages.append(data)
                held += len(line)
            elif count < first:
                visible += 0 if is_hidden(data) else 1
            elif resume is None:
                resume = offset - len(line)
            count += 1
    whole = not first and len(messages) == count
    held_messages: Sequence[dict[str, Any]] = (
        messages if whole else Tail(min(first, count), messages, count, visible, resume)
    )
    return SessionFile(key, path, metadata, held_messages, len(skipped), skipped)


def _decoded(number: int, line: bytes | LongLine, skipped: list[str]) -> dict[str, Any] | None:
    """One line's JSON object; None (the reason added to `skipped`) for a blank or unreadable line."""
    if isinstance(line, LongLine):
        return excerpt(line)
    if not line.strip():
        return None
    try:
        data = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        skipped.append(f"line {number}: not UTF-8")
        return None
    except json.JSONDecodeError as exc:
        skipped.append(f"line {number}: bad JSON ({exc.msg})")
        return None
    if not isinstance(data, dict):
        skipped.append(f"line {number}: not a JSON object")
        return None
    return data


def excerpt(line: LongLine) -> dict[str, Any]:
    """The message of a line too long to hold.

    Its head and tail joined inside the string the cut falls in (the pasted text), with a note of how many bytes went.
    When no such join parses (the cut between values), its role and time as found at the ends, and the note alone: the
    message keeps its place either way."""
    head = line.head.decode("utf-8", "ignore")
    cut = _string_end(head)
    if cut is not None:
        kept_head = head[:cut]
        tail = line.tail.rstrip(b"\r\n").decode("utf-8", "ignore")
        for skip in range(min(16, len(tail))):  # the tail may start inside an escape: try a few places after it
            kept_tail = tail[skip:]
            left_out = line.size - len(kept_head.encode()) - len(kept_tail.encode())
            joined = kept_head + json.dumps(f"\n{left_out_note(left_out)}\n")[1:-1] + kept_tail
            try:
                data = json.loads(joined)
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
    found: dict[str, Any] = {"content": left_out_note(line.size)}
    for name, text in (
        ("_type", head),
        ("role", head),
        ("timestamp", line.tail.decode("utf-8", "ignore")),
        ("timestamp", head),
    ):
        match = re.search(rf'"{name}"\s*:\s*"([^"\\]{{1,64}})"', text)
        if match and name not in found:
            found[name] = match.group(1)
    return found


def _string_end(text: str) -> int | None:
    """Where `text` (the start of a JSON line) can be cut inside the string it ends in, past any escape begun.

    None when it does not end inside a string."""
    in_string, index, safe = False, 0, 0
    while index < len(text):
        char = text[index]
        if in_string and char == "\\":
            index += 6 if text[index + 1 : index + 2] == "u" else 2
            safe = index if index <= len(text) else safe
            continue
        if char == '"':
            in_string = not in_string
        index += 1
        safe = index
    return safe if in_string else None


@dataclass(frozen=True)
class Retired:
    """A copy of what a session held when `/new` emptied it (the hooks keep it in RETIRED_FOLDER)."""

    key: str
    generation: int
    path: Path

    @property
    def noted(self) -> bool:
        return self.path.name.endswith(NOTED_SUFFIX)

    @property
    def name(self) -> str:
        """Its name without the noted mark: what it stays known by."""
        return self.path.name.removesuffix(NOTED_SUFFIX)

    def read(
        self,
        as_key: str | None = None,
        keep_from: Callable[[dict[str, Any]], bool] | None = None,
        hold_bytes: int | None = None,
    ) -> SessionFile:
        """Its messages (under `as_key`: the recall index keeps it apart from the live session), line by line.

        Held from the first one `keep_from` is true of (the notes' day; none when none is), or the first `hold_bytes` of
        their lines (a window, read on with `read_window(..., path=)`); the others counted, not kept."""
        try:
            with self.path.open("rb") as lines:
                if keep_from is not None:
                    return parse_lines(as_key or self.key, self.path, lines, keep_from=keep_from, start=NOT_YET)
                if hold_bytes is not None:
                    seen = os.fstat(lines.fileno())
                    session = parse_lines(as_key or self.key, self.path, lines, start=0, hold_bytes=hold_bytes)
                    if isinstance(session.messages, Tail):
                        session.messages.identity = (seen.st_ino, seen.st_size, seen.st_mtime_ns)
                    return session
                return parse_lines(as_key or self.key, self.path, lines)
        except OSError as exc:
            raise SessionError(f"cannot read {self.path.name} (session {self.key!r} before /new): {exc}") from None

    def mark_noted(self) -> Retired:
        """Every message of it is noted: later jobs no longer read it (it stays, for the recall index)."""
        if self.noted:
            return self
        target = self.path.with_name(self.path.name + NOTED_SUFFIX)
        self.path.rename(target)
        return Retired(self.key, self.generation, target)


def retired_files(sessions_dir: Path, key: str | None = None, noted: bool = False) -> list[Retired]:
    """The copies kept at `/new` (of one session, or of all), oldest generation first; noted ones only with `noted`.

    A folder that is missing or unreadable holds none."""
    folder = sessions_dir / RETIRED_FOLDER
    try:
        names = sorted(path.name for path in folder.iterdir())
    except OSError:
        return []
    found = []
    for name in names:
        parsed = retired_key(name)
        if parsed is None or (key is not None and parsed[0] != key):
            continue
        kept = Retired(parsed[0], parsed[1], folder / name)
        if noted or not kept.noted:
            found.append(kept)
    return sorted(found, key=lambda kept: (kept.generation, kept.name))
