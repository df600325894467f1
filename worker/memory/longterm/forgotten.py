"""The texts the user took out of MEMORY.md on the web page, kept for a while.

The texts the user took out of MEMORY.md on the web page (forgotten, or edited into another text), kept for a while so
that a job that asked its model before the change cannot write the old text back: a batch whose facts were asked for
before a text was taken out loses that text (`memory/.MEMORY.forgotten.json`).

Kept as digests of the normalized text, never the text: a forgotten private fact must not linger in a file."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from worker.files import read_bytes
from worker.memory.dedup import normalize
from worker.memory.longterm.merge import Batch, fact_text

# A job's try lasts minutes (arq's job timeout); its held facts are filtered when they are held. Two days covers a
# try that resumed after a long rest, with room to spare.
KEEP_SECONDS = 2 * 86400.0

log = logging.getLogger("worker.memory.longterm")


def forgotten_path(path: Path) -> Path:
    """`memory/.MEMORY.forgotten.json`: what the user took out of MEMORY.md lately, as digests."""
    return path.with_name(f".{path.stem}.forgotten.json")


def digest(text: str) -> str:
    """The key of a text taken out: its normalized form's SHA-256."""
    return hashlib.sha256(normalize(fact_text(text)).encode("utf-8")).hexdigest()


def load_forgotten(path: Path) -> dict[str, float]:
    """The digests of the texts taken out of MEMORY.md (`path`), with when; none when missing or unreadable."""
    raw = read_bytes(forgotten_path(path))
    if raw is None:
        return {}
    try:
        return {str(key): float(value) for key, value in json.loads(raw.decode("utf-8"))["forgotten"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning(
            "%s is not readable (%s): a job may write back a fact the user just forgot", forgotten_path(path).name, exc
        )
        return {}


def changed(stones: Mapping[str, float], taken: Iterable[str], given: Iterable[str], now: float) -> dict[str, float]:
    """The digests after the texts `taken` out at `now` and the texts `given` (the user wants them again).

    Those older than KEEP_SECONDS go."""
    kept = {key: when for key, when in stones.items() if now - when < KEEP_SECONDS}
    kept.update({digest(text): now for text in taken})
    for text in given:
        kept.pop(digest(text), None)
    return kept


def dump_forgotten(stones: Mapping[str, float]) -> bytes:
    return (json.dumps({"format": 1, "forgotten": dict(stones)}, indent=0) + "\n").encode("utf-8")


def unforgotten(batch: Batch, stones: Mapping[str, float]) -> Batch:
    """The batch without the facts whose text was taken out after the batch's model call was made.

    The batch without the facts whose text was taken out after the batch's model call was made (a batch with no such
    time is one made now: nothing taken out before it is against it)."""
    if not stones or batch.asked is None:
        return batch
    asked = batch.asked
    facts = [fact for fact in batch.facts if stones.get(digest(fact.text), float("-inf")) < asked]
    return batch if len(facts) == len(batch.facts) else replace(batch, facts=facts)
