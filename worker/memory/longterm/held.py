"""MEMORY.md's held facts, `memory/.MEMORY.pending.jsonl`.

Batches waiting for a moment when no session's prompt cache is warm, one JSON line each."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from worker.files import read_bytes
from worker.memory.entries import Fact
from worker.memory.followed import Followed
from worker.memory.longterm.merge import Batch
from worker.text.redact import one_line

log = logging.getLogger("worker.memory.longterm")


def pending_path(path: Path) -> Path:
    """`memory/.MEMORY.pending.jsonl`: facts held for a moment when no session's prompt cache is warm."""
    return path.with_name(f".{path.stem}.pending.jsonl")


@dataclass(frozen=True)
class Held:
    """A batch waiting in the pending file, and when it was held (epoch seconds)."""

    batch: Batch
    held_at: float


def held_line(batch: Batch, held_at: float) -> bytes:
    # Redacted now: the pending file is on disk as long as no quiet moment comes.
    facts = [
        fact.model_copy(
            update={"text": one_line(fact.text), "replaces": one_line(fact.replaces) if fact.replaces else None}
        )
        for fact in batch.facts
    ]
    # "pinned" only when the user pinned one of its facts: other lines read as they always have.
    pinned = {"pinned": sorted(batch.pinned)} if batch.pinned else {}
    return (
        json.dumps(
            {
                "held_at": held_at,
                "asked_at": held_at if batch.asked is None else batch.asked,
                "session": batch.session,
                "language": batch.language,
                "today": batch.today,
                "facts": [fact.model_dump(mode="json") for fact in facts],
                **pinned,
            },
            ensure_ascii=False,
        )
        + "\n"
    ).encode("utf-8")


def read_held(path: Path) -> list[Held]:
    """The batches held for MEMORY.md (`path`), oldest first; a line that does not parse is skipped."""
    raw = read_bytes(pending_path(path))
    found = []
    for line in (raw or b"").splitlines():
        try:
            data = json.loads(line)
            # A line held before the model call's time was kept: its model was asked before it was held.
            batch = Batch(
                [Fact.model_validate(fact) for fact in data["facts"]],
                str(data["language"]),
                str(data["today"]),
                data.get("session"),
                float(data.get("asked_at", data["held_at"])),
                frozenset(str(text) for text in data.get("pinned", ())),
            )
            found.append(Held(batch, float(data["held_at"])))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s: a held batch is unreadable and skipped (%s)", pending_path(path).name, exc)
    return found


@dataclass
class HeldTexts:
    """What every job needs of the held facts (the extractor's prompt, the check for a flush).

    Their texts and when the oldest was held. Read without building every Fact: the file grows all day."""

    texts: list[str] = field(default_factory=list)
    oldest: float | None = None

    def add(self, text: str) -> None:
        for line in text.splitlines():
            try:
                data = json.loads(line)
                self.texts += [one_line(str(fact["text"])) for fact in data["facts"]]
                held_at = float(data["held_at"])
            except (ValueError, KeyError, TypeError):
                continue  # read_held says which line, when the facts are written
            self.oldest = held_at if self.oldest is None else min(self.oldest, held_at)


def _parse_held(text: str) -> HeldTexts:
    held = HeldTexts()
    held.add(text)
    return held


# The held-facts files as this process last read and appended them (followed.py).
HELD: Followed[HeldTexts] = Followed(_parse_held, HeldTexts.add)
