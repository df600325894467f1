"""Writing a user's file safely.

The new content in a temporary file beside it, synced to disk, with its mode, and the temporary files of writes that
were killed removed; whether the user made a file read-only; how long a writer waits for a memory file's lock."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

# Copies go through a buffer of this size: a session file can be tens of MB, never read whole.
COPY_BUFFER = 1 << 20
# Seconds a writer of the notes or MEMORY.md waits for the file's lock: other workers hold it for one merge.
LOCK_TIMEOUT = 120.0

# This project's temporary files: `.<target>.summary-worker-<host>-<pid>-<random>.tmp`. A dot name ending in
# .tmp, like nanobot's own (`.<target>.<16 hex>.tmp`), so nothing lists it as a session or a note; the mark
# tells it from nanobot's, the host and the writer's process id a write in progress from one that was killed.
TEMP_MARK = "summary-worker"
_TEMP_NAME = re.compile(rf"^\..+\.{TEMP_MARK}-([0-9a-f]{{8}})-(\d+)-[^.]+\.tmp$")
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
# This process's start, near enough: a temporary file of our own process id made before it was left by an
# earlier process that had the same id (a restarted container's worker often has).
_STARTED = time.time()
# No write lasts this long (one copy, at most five waits for nanobot's lock): an older temporary file of ours
# is stale whatever made it (another host's, or one whose process id another program took since).
STALE_SECONDS = 3600.0
# A folder is looked through at most this often by one process's writes (a sessions folder of thousands of files
# takes milliseconds to list, and every job writes there); the worker's start looks through it at once.
SWEEP_SECONDS = 60.0
_swept: dict[Path, float] = {}


def temp_beside(path: Path, content: bytes, mode: int | None = None, rest: BinaryIO | None = None) -> Path:
    """A synced temporary file in `path`'s folder holding `content`, ready for `os.replace(temp, path)`.

    A synced temporary file in `path`'s folder holding `content` (then what is left of `rest`), ready for
    `os.replace(temp, path)`; the stale ones of earlier writes in that folder are removed first (at most every
    SWEEP_SECONDS).

    Named as TEMP_MARK says. It gets `mode`, else `path`'s permissions, else 0644 (mkstemp's 0600 would hide a
    new file from a nanobot that runs as another user). The caller removes it if it does not replace `path`."""
    now = time.monotonic()
    if now - _swept.get(path.parent, float("-inf")) >= SWEEP_SECONDS:
        _swept[path.parent] = now
        remove_stale_temps(path.parent)
    # The target's name only helps a reader: cut, so that a long session name cannot make the name too long.
    handle, name = tempfile.mkstemp(
        prefix=f".{path.name[:120]}.{TEMP_MARK}-{_HOST}-{os.getpid()}-", suffix=".tmp", dir=path.parent
    )
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


def remove_stale_temps(folder: Path) -> int:
    """Removes this project's temporary files whose write will never finish from `folder`.

    Removes from `folder` this project's temporary files whose write will never finish (its process was killed
    mid-write: such a file is as large as the session it copied). Files of nanobot or anyone else, and writes in
    progress, are left alone; a file that cannot be removed is left for the next time. Returns how many were removed."""
    try:
        with os.scandir(folder) as scan:
            stale = [entry.path for entry in scan if TEMP_MARK in entry.name and _stale(entry)]
    except OSError:
        return 0
    removed = 0
    for name in stale:
        try:
            os.unlink(name)
            removed += 1
        except OSError:
            pass
    return removed


def _stale(entry: os.DirEntry[str]) -> bool:
    match = _TEMP_NAME.match(entry.name)
    if match is None or not entry.is_file(follow_symlinks=False):
        return False
    try:
        made = entry.stat(follow_symlinks=False).st_mtime
    except OSError:
        return False
    if time.time() - made > STALE_SECONDS:
        return True
    host, pid = match[1], int(match[2])
    if host != _HOST:
        return False  # its process cannot be asked from here
    if pid == os.getpid():
        return made < _STARTED
    return not _alive(pid)


def state_folder() -> Path:
    """This user's folder of the project's own state (the page's token and address, the embedded Redis's record).

    `$XDG_STATE_HOME/nanobot-summary`, else `~/.local/state/nanobot-summary`."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "nanobot-summary"


def cache_folder() -> Path:
    """This user's folder of what the worker may forget at any time and work out again (the model checks' answers).

    `$XDG_CACHE_HOME/nanobot-summary`, else `~/.cache/nanobot-summary`."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "nanobot-summary"


def alive(pid: int) -> bool:
    """Does a process of this id exist (ours or another user's)?"""
    return _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, as another user
    return True


def read_bytes(path: Path) -> bytes | None:
    """The file's bytes; None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def read_only(path: Path) -> str | None:
    """Why the user's file at `path` must not be replaced, or None.

    Its mode gives no one the right to write it (`chmod 0444`: a rename beside it would ignore that, even for root), or
    this user may not write it. A file that does not exist yet may be made."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    if not mode & 0o222:
        return f"{path.name} is read-only (mode {mode & 0o7777:04o})"
    if not os.access(path, os.W_OK):
        return f"{path.name} is not writable by this user (mode {mode & 0o7777:04o})"
    return None


def append_whole(path: Path, data: bytes) -> None:
    """Appends all of `data` or nothing.

    A write the disk refused part-way (full, over quota) is cut off again, so the day file never ends in half a section.
    Unbuffered, so nothing is written again on close."""
    with path.open("ab", buffering=0) as handle:
        size = handle.seek(0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[handle.write(view) :]
            os.fsync(handle.fileno())
        except OSError:
            handle.truncate(size)
            raise
