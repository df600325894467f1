"""Writing a user's file safely: the new content in a temporary file beside it, synced to disk, with its mode;
how long a writer waits for a memory file's lock."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO

# Copies go through a buffer of this size: a session file can be tens of MB, never read whole.
COPY_BUFFER = 1 << 20
# Seconds a writer of the notes or MEMORY.md waits for the file's lock: other workers hold it for one merge.
LOCK_TIMEOUT = 120.0


def temp_beside(path: Path, content: bytes, mode: int | None = None, rest: BinaryIO | None = None) -> Path:
    """A synced temporary file in `path`'s folder holding `content` (then what is left of `rest`), ready for
    `os.replace(temp, path)`.

    Named like nanobot's own (a dot name ending in .tmp), so nothing lists it as a session or a note. It gets
    `mode`, else `path`'s permissions, else 0644 (mkstemp's 0600 would hide a new file from a nanobot that
    runs as another user). The caller removes it if it does not replace `path`."""
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    temp = Path(name)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(content)
            if rest is not None:
                shutil.copyfileobj(rest, out, COPY_BUFFER)
            out.flush()
            os.fsync(out.fileno())
        if mode is None:
            try:
                mode = path.stat().st_mode
            except FileNotFoundError:
                mode = 0o644
        os.chmod(temp, mode & 0o7777)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


def read_bytes(path: Path) -> bytes | None:
    """The file's bytes; None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def append_whole(path: Path, data: bytes) -> None:
    """Appends all of `data` or nothing: a write the disk refused part-way (full, over quota) is cut off
    again, so the day file never ends in half a section. Unbuffered, so nothing is written again on close."""
    with path.open("ab", buffering=0) as handle:
        size = handle.seek(0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[handle.write(view):]
            os.fsync(handle.fileno())
        except OSError:
            handle.truncate(size)
            raise
