"""Files parsed once and followed as they grow: the day's notes and the held facts, which every job reads.

On a busy day each job appends a section to the day file and a batch to the held facts, and each job reads
both (what its messages' day already notes, what MEMORY.md will know): read whole by every job, they made a
day of thousands of jobs quadratic. A parse is kept while the file is exactly as this process last saw it
(inode, size, modification time); what this process appends is parsed alone and added. A file that only grew
(another worker of the instance appended) is read from where this process's parse ends: only when it is the
same file (inode), its known part still ends with the bytes this process saw last (`EDGE` of them, ending a
line) and the new bytes end a line. Any other change (the user's edit, a rewrite, a cut) is read whole.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")
Stamp = tuple[int, int, int]
# Bytes of the known part compared before only the new bytes are parsed: an edit in the known part that changes
# its length shifts them (an edit of the same length is seen when the file is next rewritten or cut).
EDGE = 4096


def stamp(path: Path) -> Stamp | None:
    """The file's identity and state (inode, size, modification time), or None when it is missing."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def grew(old: Stamp | None, new: Stamp | None) -> bool:
    """Whether `new` may be `old` with bytes appended: the same file, longer."""
    return old is not None and new is not None and old[0] == new[0] and new[1] > old[1]


@dataclass
class Seen(Generic[T]):
    """A file as this process parsed it: its stamp then, the parse, and the last `EDGE` bytes it had."""

    stamp: Stamp | None  # None: the file was missing
    parsed: T
    edge: bytes


class Followed(Generic[T]):
    """The parse of each file read, kept in step with what this process and others append.

    The parse of each file read (the last `keep` of them), kept in step with what this process appends and with what
    others append."""

    def __init__(self, parse: Callable[[str], T], extend: Callable[[T, str], None], keep: int = 8) -> None:
        self._parse = parse
        self._extend = extend
        self._keep = keep
        self._seen: OrderedDict[Path, Seen[T]] = OrderedDict()
        self._lock = threading.Lock()  # jobs of one worker run their file work in threads
        self.bytes_read = 0  # read from the files followed, all told (the benchmark and the tests count it)

    def get(self, path: Path) -> T:
        """The file's parse (of no text when it is missing). Raises OSError when it cannot be read."""
        with self._lock:
            now = stamp(path)
            seen = self._seen.get(path)
            if seen is not None and seen.stamp == now:
                self._seen.move_to_end(path)
                return seen.parsed
            if seen is not None and grew(seen.stamp, now) and self._catch_up(path, seen):
                return seen.parsed
            return self._whole(path, now)

    def appended(self, path: Path, before: Stamp | None, text: str) -> None:
        """This process appended `text` to a file whose stamp was `before` (None: it made the file).

        The kept parse grows by it, if it was the parse of the file as it was then and nobody else wrote since (else the
        next `get` catches up, or reads the file whole)."""
        with self._lock:
            seen = self._seen.get(path)
            now = stamp(path)
            data = text.encode("utf-8")
            if now is None or seen is None or (seen.stamp != before and not grew(seen.stamp, now)):
                self._seen.pop(path, None)
            elif (
                seen.stamp == before
                and (before is None or before[0] == now[0])
                and now[1] == (before[1] if before else 0) + len(data)
            ):
                self._extend(seen.parsed, text)
                self._remember(path, Seen(now, seen.parsed, (seen.edge + data)[-EDGE:]))

    def _catch_up(self, path: Path, seen: Seen[T]) -> bool:
        """Parses only what was appended to the file since `seen`, if that is all that changed."""
        assert seen.stamp is not None
        known = seen.stamp[1]
        if not seen.edge.endswith(b"\n") or len(seen.edge) != min(known, EDGE):
            return False  # the known part ends inside a line: the new bytes are no text of their own
        try:
            with path.open("rb") as handle:
                info = os.fstat(handle.fileno())
                if info.st_ino != seen.stamp[0] or info.st_size <= known:
                    return False
                handle.seek(known - len(seen.edge))
                data = handle.read(info.st_size - known + len(seen.edge))
        except OSError:
            return False
        self.bytes_read += len(data)
        read_as = (info.st_ino, info.st_size, info.st_mtime_ns)
        if not data.startswith(seen.edge) or not data.endswith(b"\n") or stamp(path) != read_as:
            return False  # an edit in the known part, an append under way: read it whole
        self._extend(seen.parsed, data[len(seen.edge) :].decode("utf-8", errors="replace"))
        self._remember(path, Seen(read_as, seen.parsed, data[-EDGE:]))
        return True

    def _whole(self, path: Path, now: Stamp | None) -> T:
        raw = _read(path) if now is not None else b""
        self.bytes_read += len(raw)
        # Read only, never rewritten from this: bytes that are not UTF-8 need not survive this decode.
        parsed = self._parse(raw.decode("utf-8", errors="replace"))
        if stamp(path) == now and (now is None or now[1] == len(raw)):  # unchanged while it was read
            self._remember(path, Seen(now, parsed, raw[-EDGE:]))
        else:
            self._seen.pop(path, None)
        return parsed

    def _remember(self, path: Path, seen: Seen[T]) -> None:
        self._seen[path] = seen
        self._seen.move_to_end(path)
        while len(self._seen) > self._keep:
            self._seen.popitem(last=False)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""
