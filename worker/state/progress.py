"""Where a chunked summary stopped, so a retry or the next job resumes after the finished chunks instead of
paying for them again."""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from arq.connections import ArqRedis
from pydantic import BaseModel

from nanobot_hooks.contract.keys import Keys

KEEP_SECONDS = 2 * 24 * 3600


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]


class Covered(NamedTuple):
    """The messages one summary covers, [start, boundary), and the timestamp of the message before boundary, by
    which a record (and a kept run) recognises its cut in a session that changed since."""

    start: int
    boundary: int
    boundary_timestamp: str | None


class Progress(BaseModel):
    """A run over messages [start, boundary) folding in the summary with `previous` digest, done up to
    message `done` (exclusive), with `running` as the summary so far (redacted)."""

    start: int
    boundary: int
    boundary_timestamp: str | None
    previous: str
    done: int
    running: str
    calls: int = 0

    def continues(self, covered: Covered, previous: str) -> bool:
        """Is this the same run (same range, same messages, same summary folded in)?"""
        return (self.start, self.boundary, self.boundary_timestamp, self.previous) == (
            *covered, digest(previous)) and covered.start <= self.done <= covered.boundary


async def load_progress(redis: ArqRedis, session_key: str) -> Progress | None:
    raw = await redis.get(Keys.of(redis).progress(session_key))
    try:
        return Progress.model_validate_json(raw) if raw else None
    except ValueError:
        return None


async def save_progress(redis: ArqRedis, session_key: str, progress: Progress) -> None:
    await redis.set(Keys.of(redis).progress(session_key), progress.model_dump_json(), ex=KEEP_SECONDS)


async def clear_progress(redis: ArqRedis, session_key: str) -> None:
    await redis.delete(Keys.of(redis).progress(session_key))
