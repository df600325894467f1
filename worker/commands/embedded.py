"""The embedded Redis's record in the state folder.

Which worker's it is (for status and doctor), and the next worker stopping an orphan that outlived its killed worker and
removing the folder a killed worker left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from worker.connections import EmbeddedRedis, not_startable, start_embedded
from worker.files import alive, state_folder


def start_recorded(url: str) -> EmbeddedRedis:
    """An embedded redis-server (connections.start_embedded) recorded in the state folder."""
    embedded = start_embedded(url)
    _note(embedded)
    return embedded


def stop_recorded(embedded: EmbeddedRedis) -> None:
    """Stop it, and remove its record (when the record is still its own)."""
    embedded.stop()
    record = embedded_record(embedded.url)
    if _read_record(record).get("pid") == embedded.process.pid:
        record.unlink(missing_ok=True)


def embedded_record(url: str) -> Path:
    """The record of the embedded redis-server on the URL's port: its process, its worker's, its folder."""
    return state_folder() / f"embedded-redis-{urlsplit(url).port or 6379}.json"


def _read_record(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _note(embedded: EmbeddedRedis) -> None:
    """Record the embedded server (its pid, this worker's, its folder) for doctor, status and the next worker."""
    path = embedded_record(embedded.url)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "pid": embedded.process.pid,
                    "worker": os.getpid(),
                    "folder": str(embedded.directory),
                    "started": datetime.now(UTC).isoformat(timespec="seconds"),
                }
            ),
            encoding="utf-8",
        )
    except OSError:
        pass  # a read-only home: the server still dies with its worker; only the record is missing


def _is_server(pid: int, folder: str) -> bool:
    """Is process `pid` still the redis-server started in `folder` (not a reused pid)?

    redis-server rewrites its command line, but works in its --dir."""
    try:
        return os.readlink(f"/proc/{pid}/cwd") == str(Path(folder).resolve())
    except OSError:
        return alive(pid) and not Path("/proc/self").exists()  # no /proc here: trust the pid


def embedded_owner(url: str) -> str | None:
    """Whose the Redis at this local URL is when an embedded redis-server serves it, in one phrase, or None."""
    if not_startable(url) is not None:
        return None
    found = _read_record(embedded_record(url))
    pid, worker, folder = found.get("pid"), found.get("worker"), str(found.get("folder", ""))
    if not isinstance(pid, int) or not isinstance(worker, int) or not _is_server(pid, folder):
        return None
    if alive(worker):
        return (
            f"the embedded redis-server (pid {pid}) of the worker pid {worker}, started {found.get('started')}: "
            "a throwaway with no persistence, it stops with that worker"
        )
    return (
        f"the embedded redis-server (pid {pid}) left by the worker pid {worker}, which is gone: the next "
        "`nanobot-summary run` stops it"
    )


def adopt_orphan(url: str) -> str | None:
    """Stop an embedded redis-server whose worker was killed, and remove its folder (its config holds the password).

    What was done, in one line, or None when nothing was left."""
    path = embedded_record(url)
    found = _read_record(path)
    pid, worker, folder = found.get("pid"), found.get("worker"), str(found.get("folder", ""))
    if not found or (isinstance(worker, int) and alive(worker) and worker != os.getpid()):
        return None  # no record, or its worker still runs: its Redis is that worker's
    said = []
    if isinstance(pid, int) and _is_server(pid, folder):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while _is_server(pid, folder) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _is_server(pid, folder):
            os.kill(pid, signal.SIGKILL)
        said.append(f"stopped the embedded redis-server (pid {pid}) that the worker pid {worker} left running")
    if folder and Path(folder).name.startswith("nanobot-summary-redis-") and Path(folder).exists():
        shutil.rmtree(folder, ignore_errors=True)
        said.append(f"removed the folder {folder} of the embedded Redis of the worker pid {worker}")
    path.unlink(missing_ok=True)
    return "; ".join(said) or None
