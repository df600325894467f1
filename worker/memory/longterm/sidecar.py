"""MEMORY.md's sidecar, `memory/.MEMORY.meta.json`.

Each fact's importance, day and session (and whether the user pinned it), kept out of the prompt nanobot sends."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from worker.files import read_bytes

META_FORMAT = 1

log = logging.getLogger("worker.memory.longterm")


@dataclass(frozen=True)
class Meta:
    """What the worker knows of one fact, kept in the sidecar (keyed by the fact's normalized text)."""

    importance: int
    date: str
    session: str | None = None
    pinned: bool = False  # kept against the cap's eviction (the web page's pin)


def sidecar_path(path: Path) -> Path:
    """`memory/.MEMORY.meta.json`: each fact's importance, day and session; the worker's own file."""
    return path.with_name(f".{path.stem}.meta.json")


def load_meta(path: Path) -> dict[str, Meta]:
    """The sidecar's records; none when it is missing or unreadable (the facts then get the defaults)."""
    raw = read_bytes(path)
    if raw is None:
        return {}
    try:
        facts = json.loads(raw.decode("utf-8"))["facts"]
        return {
            str(key): Meta(
                int(value["importance"]),
                str(value["learned"]),
                str(value["session"]) if value.get("session") else None,
                bool(value.get("pinned")),
            )
            for key, value in facts.items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("%s is not readable (%s): its facts get default importance and day", path.name, exc)
        return {}


def dump_meta(meta: Mapping[str, Meta]) -> bytes:
    """The sidecar's bytes: one fact per line, so `grep telegram:42` finds a session's facts."""
    # "pinned" only when set: the records of unpinned facts read as they always have.
    rows = [
        f"{json.dumps(key, ensure_ascii=False)}: "
        + json.dumps(
            {
                "importance": m.importance,
                "learned": m.date,
                "session": m.session,
                **({"pinned": True} if m.pinned else {}),
            },
            ensure_ascii=False,
        )
        for key, m in meta.items()
    ]
    return (f'{{"format": {META_FORMAT}, "facts": {{\n' + ",\n".join(rows) + "\n}}\n").encode("utf-8")
