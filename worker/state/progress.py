"""A chunked summary's progress, its one home.

The range it covers, the summary folded in, the summary so far and the first message not yet summarized. The chain of
calls moves it on (worker.summarize.chunks); it is kept in Redis after each finished chunk, so a retry or the next job
resumes after the finished chunks instead of paying for them again."""

from __future__ import annotations

import hashlib
import logging

from arq.connections import ArqRedis
from pydantic import BaseModel

from nanobot_hooks.contract.keys import Keys

KEEP_SECONDS = 2 * 24 * 3600
log = logging.getLogger("worker.state.progress")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]


class Progress(BaseModel):
    """A chunked summary's run over messages [start, boundary), and how far it got.

    A run over messages [start, boundary) (`boundary_timestamp`: the timestamp of the message before boundary, by which
    a kept run recognises its cut in a session that changed since), folding in the summary with `previous` digest, done
    up to message `done` (exclusive), with `running` as the summary so far (redacted) and `calls` made. Its JSON is what
    Redis keeps: the fields are a stored format."""

    start: int
    boundary: int
    boundary_timestamp: str | None
    previous: str
    done: int
    running: str
    calls: int = 0

    @classmethod
    def begin(cls, start: int, boundary: int, boundary_timestamp: str | None, previous: str) -> Progress:
        """A new run: nothing done yet, the summary so far the one folded in."""
        return cls(
            start=start,
            boundary=boundary,
            boundary_timestamp=boundary_timestamp,
            previous=digest(previous),
            done=start,
            running=previous,
        )

    def continues(self, new: Progress) -> bool:
        """Is this kept run the same as `new` (same range, same messages, same summary folded in)?"""
        same = (self.start, self.boundary, self.boundary_timestamp, self.previous)
        return (
            same == (new.start, new.boundary, new.boundary_timestamp, new.previous)
            and new.start <= self.done <= new.boundary
        )


async def resume_progress(redis: ArqRedis, session_key: str, new: Progress) -> Progress:
    """`new`, or the run an earlier try of the same job left after its last finished chunk."""
    kept = await load_progress(redis, session_key)
    if kept is None or not kept.continues(new):
        return new
    log.info("%s: resuming after message %d (%d calls already made)", session_key, kept.done - 1, kept.calls)
    return kept


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
