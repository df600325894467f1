"""Passages' embeddings in the recall index (NANOBOT_SUMMARY_EMBEDDING_MODEL).

The passages not embedded yet, asked of the model in batches after a refresh, bounded in count and time; a failure never
fails the job.

Trouble of the moment (a timeout, a rate limit, a server error) leaves the passages unembedded and pauses embedding
(doubling up to an hour): they are asked again later, once. A batch the model refuses for its content (a 400) is
asked again passage by passage, and a passage refused alone is marked (an empty vector) and never asked again: no
failure is paid for twice. The key is litellm's business; no log line holds it."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nanobot_hooks.contract.recall import quantize, unpack
from worker.memory.recall_index.tables import transaction

log = logging.getLogger("worker.memory.recall_index")

BATCH = 64  # passages a call
PER_REFRESH = 2_000  # passages one refresh embeds at most: a backlog is worked off over the following jobs
SECONDS_PER_REFRESH = 30.0  # and the time it spends on them
TEXT_CHARS = 2_000  # of a passage's text embedded: the start of a long one says what it is about
PAUSE_SECONDS = 60.0  # after trouble of the moment, doubled each time it recurs, up to MAX_PAUSE_SECONDS
MAX_PAUSE_SECONDS = 3_600.0
Embed = Callable[[list[str]], list[list[float]]]


class Refused(Exception):
    """The model refused these texts for what they are (a 400): asking again the same would fail the same."""


def litellm_embed(model: str, api_base: str | None = None, api_key: str | None = None, timeout: float = 30.0) -> Embed:
    """The texts' embeddings from litellm (one call).

    Refused for a request the model rejects, any other exception for trouble of the moment."""

    def embed(texts: list[str]) -> list[list[float]]:
        import litellm  # the worker's, imported when first needed

        try:
            answer: Any = litellm.embedding(
                model=model, input=texts, api_base=api_base, api_key=api_key, timeout=timeout, num_retries=0
            )
        except (litellm.BadRequestError, litellm.ContextWindowExceededError) as exc:
            raise Refused(type(exc).__name__) from None
        data = sorted(answer.data, key=lambda item: _get(item, "index"))
        vectors = [_get(item, "embedding") for item in data]
        if len(vectors) != len(texts) or not all(isinstance(v, list) and v for v in vectors):
            raise ValueError(f"{len(vectors)} embeddings for {len(texts)} texts")
        return vectors

    return embed


def _get(item: Any, name: str) -> Any:
    return item[name] if isinstance(item, dict) else getattr(item, name)


@dataclass
class Embedder:
    """The model's settings and the pause after trouble (kept by the index between refreshes)."""

    model: str
    embed: Embed
    pause_until: float = 0.0
    pause: float = field(default=0.0)

    def run(self, db: sqlite3.Connection, clock: Callable[[], float] = time.monotonic) -> int:
        """Embeds passages that have no vector yet; how many were stored.

        Never raises for the model's trouble (sqlite3.Error is the index's, for the caller)."""
        if clock() < self.pause_until:
            return 0
        _forget_other_model(db, self.model)
        stop = clock() + SECONDS_PER_REFRESH
        stored = 0
        pending = _pending(db, PER_REFRESH)
        blank = [(rowid, block, "") for rowid, block, text in pending if not text.strip()]
        if blank:  # nothing to embed: marked, never asked
            _write(db, blank, [b""] * len(blank))
            pending = [row for row in pending if row[2].strip()]
        for start in range(0, len(pending), BATCH):
            if clock() > stop:
                break
            batch = pending[start : start + BATCH]
            try:
                stored += self._store(db, batch)
            except Exception as exc:  # noqa: BLE001 - the model's trouble never fails a job
                self.pause = min(MAX_PAUSE_SECONDS, self.pause * 2 or PAUSE_SECONDS)
                self.pause_until = clock() + self.pause
                log.warning(
                    "recall index: embedding with %s failed (%s); %d passages left for later (pause %.0f s)",
                    self.model,
                    type(exc).__name__,
                    len(pending) - start,
                    self.pause,
                )
                return stored
        self.pause = 0.0
        return stored

    def _store(self, db: sqlite3.Connection, batch: Sequence[tuple[int, int, str]]) -> int:
        texts = [text[:TEXT_CHARS] for _, _, text in batch]
        try:
            vectors = [quantize(v) for v in self.embed(texts)]
        except Refused:
            if len(batch) > 1:
                return sum(self._store(db, [one]) for one in batch)
            vectors = [b""]  # refused alone: marked, never asked again
            log.warning("recall index: %s refused a passage; it is searched by its words only", self.model)
        _write(db, batch, vectors)
        return sum(1 for vector in vectors if vector)


def _write(db: sqlite3.Connection, batch: Sequence[tuple[int, int, str]], vectors: Sequence[bytes]) -> None:
    with transaction(db):
        # A passage dropped (or replaced: its block is another then) while the model answered gets no vector.
        db.executemany(
            "INSERT OR REPLACE INTO vectors(rowid, v) SELECT ?, ? WHERE EXISTS "
            "(SELECT 1 FROM blocks WHERE id = ? AND last >= ?)",
            [(rowid, vector, block, rowid) for (rowid, block, _), vector in zip(batch, vectors, strict=True)],
        )


def _forget_other_model(db: sqlite3.Connection, model: str) -> None:
    """Vectors of another model mean nothing to this one's: dropped, to be made again."""
    row = db.execute("SELECT value FROM state WHERE name = 'embedding_model'").fetchone()
    if row is None or row[0] != model:
        with transaction(db):
            db.execute("DELETE FROM vectors")
            db.execute("INSERT OR REPLACE INTO state(name, value) VALUES('embedding_model', ?)", (model,))


def _pending(db: sqlite3.Connection, limit: int) -> list[tuple[int, int, str]]:
    """(rowid, block, text) of up to `limit` passages without a vector, in order (appended: pages filled, not split).

    From the blocks that hold more passages than vectors."""
    found: list[tuple[int, int, str]] = []
    # Read as needed, not fetched at once: a backlog's blocks are many.
    blocks = db.execute(
        "SELECT id, last, passages FROM blocks WHERE n > (SELECT count(*) FROM vectors "
        "WHERE vectors.rowid BETWEEN blocks.id AND blocks.last) ORDER BY id"
    )
    for block, last, packed in blocks:
        try:
            held = unpack(packed)
        except Exception:  # noqa: BLE001 - a damaged block: its passages are not searched either
            continue
        have = {
            rowid for (rowid,) in db.execute("SELECT rowid FROM vectors WHERE rowid BETWEEN ? AND ?", (block, last))
        }
        found += [(rowid, block, held[rowid].body) for rowid in sorted(held) if rowid not in have][: limit - len(found)]
        if len(found) >= limit:
            break
    return found
