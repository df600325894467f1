"""Files parsed once and followed as they grow: the day's notes and the held facts, which every job reads.

On a busy day each job appends a section to the day file and a batch to the held facts, and each job reads
both (what its messages' day already notes, what MEMORY.md will know): read whole by every job, they made a
day of thousands of jobs quadratic. A parse is kept while the file is exactly as this process last saw it
(inode, size, modification time); what this process appends is parsed alone and added. Any other change (another
worker's append, the user's edit, a rewrite) is seen in the file's stamp and the file is parsed again whole.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")
Stamp = tuple[int, int, int]


def stamp(path: Path) -> Stamp | None:
    """The file's identity and state (inode, size, modification time), or None when it is missing."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


class Followed(Generic[T]):
    """The parse of each file read (the last `keep` of them), kept in step with what this process appends."""

    def __init__(self, parse: Callable[[str], T], extend: Callable[[T, str], None], keep: int = 8) -> None:
        self._parse = parse
        self._extend = extend
        self._keep = keep
        self._seen: OrderedDict[Path, tuple[Stamp | None, T]] = OrderedDict()  # None: the file was missing
        self._lock = threading.Lock()  # jobs of one worker run their file work in threads

    def get(self, path: Path) -> T:
        """The file's parse (of no text when it is missing). Raises OSError when it cannot be read."""
        with self._lock:
            now = stamp(path)
            seen = self._seen.get(path)
            if seen is not None and seen[0] == now:
                self._seen.move_to_end(path)
                return seen[1]
            text = _read(path) if now is not None else ""
            parsed = self._parse(text)
            if stamp(path) == now:  # unchanged while it was read
                self._remember(path, now, parsed)
            return parsed

    def appended(self, path: Path, before: Stamp | None, text: str) -> None:
        """This process appended `text` to a file whose stamp was `before` (None: it made the file): the kept
        parse grows by it, if it was the parse of the file as it was then."""
        with self._lock:
            seen = self._seen.pop(path, None)
            now = stamp(path)
            if now is None or seen is None or seen[0] != before:
                return
            if before is None and now[1] != len(text.encode("utf-8")):
                return  # someone else wrote to the new file too: read it whole next time
            self._extend(seen[1], text)
            self._remember(path, now, seen[1])

    def _remember(self, path: Path, now: Stamp | None, parsed: T) -> None:
        self._seen[path] = (now, parsed)
        self._seen.move_to_end(path)
        while len(self._seen) > self._keep:
            self._seen.popitem(last=False)


def _read(path: Path) -> str:
    try:
        # Read only, never rewritten from this: bytes that are not UTF-8 need not survive this decode.
        return path.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
