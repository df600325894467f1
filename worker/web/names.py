"""Names a person recognizes for sessions.

A web-chat session is `websocket:3356daf5-...` to the worker, and the title nanobot's web UI lists it under to its user
(line 1's `metadata.title`), or, without one, the first words of its first user message, as that list's preview. Only
the head of a file is read (line 1 and the first messages), and a name is kept while its file is unchanged: a page of 50
sessions reads no file twice."""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from nanobot_hooks.contract.session_format import METADATA_TYPE, NOT_A_TURN_FLAGS, content_text
from worker.errors import SessionKeyError
from worker.nanobot.sessions import list_session_keys, session_path

NAME_CHARS = 60  # a name is a line of a list, not the message
HEAD_LINES = 40  # messages read for a first user message (nanobot's own preview reads a few dozen too)
HEAD_BYTES = 256 * 1024  # line 1 carries the summary nanobot sends: tens of KB at most
CACHED = 2_000
# Channels whose keys say nothing to a person: a web chat's is a random id.
UNNAMED_CHANNELS = ("websocket",)
# A model's thinking that nanobot strips from a title it did not get from the user (`title_user_edited`).
_THINKING = re.compile(r"<(think|thinking|thought)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_CACHE: OrderedDict[tuple[Path, int, int], str | None] = OrderedDict()


def shortened(text: str, limit: int = NAME_CHARS) -> str:
    """`text` on one line, cut at a word within `limit` characters with `…` (pure)."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    cut = line[:limit].rsplit(" ", 1)[0] if " " in line[:limit] else line[:limit]
    return cut.rstrip(" ,.;:") + "…"


def name_from(key: str, metadata: Mapping[str, Any], messages: Iterable[Mapping[str, Any]]) -> str | None:
    """A session's name (pure).

    Its title; for a web chat without one, the first words of its first user message (nanobot's hidden rows and commands
    are no message of the user's); None when neither is known. `messages` is read only for a web chat without a title,
    and only up to its first user message."""
    title = metadata.get("title")
    if isinstance(title, str):
        title = title if metadata.get("title_user_edited") is True else _THINKING.sub("", title)
        if title.strip():
            return shortened(title)
    if not key.startswith(tuple(f"{channel}:" for channel in UNNAMED_CHANNELS)):
        return None
    for message in messages:
        if message.get("role") != "user" or any(message.get(flag) for flag in (*NOT_A_TURN_FLAGS, "_runtime_context")):
            continue
        if text := content_text(message.get("content")).strip():
            return shortened(text)
    return None


def session_name(sessions_dir: Path, key: str) -> str | None:
    """The name of the session `key` (a key listed from the folder), read from its file's head.

    None when it has none or the file cannot be read."""
    try:
        path = session_path(sessions_dir, key)  # a key from Redis too: a link out of the folder is not read
        stat = path.stat()
    except (SessionKeyError, OSError):
        return None
    mark = (path, stat.st_mtime_ns, stat.st_size)
    if mark in _CACHE:
        _CACHE.move_to_end(mark)
        return _CACHE[mark]
    name = _read(path, key)
    _CACHE[mark] = name
    while len(_CACHE) > CACHED:
        _CACHE.popitem(last=False)
    return name


def names(sessions_dir: Path, keys: Iterable[str]) -> dict[str, str]:
    """The named sessions among `keys`: key -> name."""
    found = {key: session_name(sessions_dir, key) for key in dict.fromkeys(keys)}
    return {key: name for key, name in found.items() if name}


def _read(path: Path, key: str) -> str | None:
    """The name from the file's head.

    Line 1, and the messages after it only as far as `name_from` asks for them (at most HEAD_LINES lines and HEAD_BYTES
    bytes: a session file can be 50 MB, a page names 50 sessions)."""
    try:
        with path.open("rb") as lines:
            head = _record(lines.readline(HEAD_BYTES))
            metadata = head.get("metadata") if head.get("_type") == METADATA_TYPE else None
            return name_from(key, metadata if isinstance(metadata, dict) else {}, _messages(lines))
    except OSError:
        return None


def _messages(lines: BinaryIO) -> Iterator[dict[str, Any]]:
    budget = HEAD_BYTES
    for _ in range(HEAD_LINES):
        line = lines.readline(budget)
        budget -= len(line)
        if not line or budget <= 0:
            return
        record = _record(line)
        if record and "_type" not in record:
            yield record


def _record(line: bytes) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


# The last listing of each sessions folder, under the folder's own state (inode, mtime): adding, removing or
# renaming a file changes the folder's mtime, writing one does not change the list. Listing 1,000 sessions checks
# each file's path (a resolve each): /sessions and /recall took 13-17 times /memory's time doing it every request.
_LISTED: dict[Path, tuple[tuple[int, int], list[str]]] = {}


def session_keys(sessions_dir: Path) -> list[str]:
    """list_session_keys, from the last listing while the folder is unchanged."""
    try:
        status = sessions_dir.stat()
    except OSError:
        return list_session_keys(sessions_dir)
    mark = (status.st_ino, status.st_mtime_ns)
    kept = _LISTED.get(sessions_dir)
    if kept is not None and kept[0] == mark:
        return kept[1]
    keys = list_session_keys(sessions_dir)
    _LISTED[sessions_dir] = (mark, keys)
    return keys
