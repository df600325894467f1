"""MEMORY.md on disk.

The worker's lock, read, merge, compare and replace (nanobot's Dream writes it without our lock), the sidecar written
first; holding facts, flushing them, forgetting a session's."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, islice
from pathlib import Path

from filelock import FileLock

from worker.errors import MemoryFilesError, MemoryReadOnly
from worker.files import LOCK_TIMEOUT, append_whole, read_bytes, read_only, temp_beside
from worker.memory.dedup import DEFAULT_THRESHOLD
from worker.memory.entries import Fact
from worker.memory.followed import stamp
from worker.memory.longterm.forgotten import changed, dump_forgotten, forgotten_path, load_forgotten, unforgotten
from worker.memory.longterm.held import HELD, held_line, pending_path, read_held
from worker.memory.longterm.merge import Batch, Merged, MergeStats, merge_text
from worker.memory.longterm.part import Line, Part, bullets, locate, metas, parse, render
from worker.memory.longterm.sidecar import Meta, dump_meta, load_meta, sidecar_path
from worker.text.redact import one_line

CAS_RETRIES = 8


class MemoryConflict(MemoryFilesError):
    """MEMORY.md kept changing under us; the job's retry will merge again."""


def _replace(path: Path, data: bytes) -> None:
    temp = temp_beside(path, data)
    try:
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


class _MemoryFile:
    """MEMORY.md and its sidecar under the worker's lock: read, change, write back atomically."""

    def __init__(self, path: Path) -> None:
        self.given = path
        self.meta_path = sidecar_path(path)
        self.pending_path = pending_path(path)
        self.forgotten_path = forgotten_path(path)
        # Replace the file a symlink points to, and keep the user's link.
        self.path = path.resolve() if path.is_symlink() else path
        self.lock = FileLock(str(self.path.parent / f".{self.path.name}.lock"), timeout=LOCK_TIMEOUT)

    def _update(self, change: Callable[[str, dict[str, Meta]], Merged]) -> Merged:
        """Applies `change(text, sidecar)` to the file and its sidecar, the lock held.

        `change(text, sidecar)`, the lock held: writes the sidecar first (a fact in the file always has its record),
        then the file, retried when someone else wrote the file meanwhile."""
        for _ in range(CAS_RETRIES):
            before = read_bytes(self.path)
            # surrogateescape: bytes that are not UTF-8 outside our part go back out exactly as they came.
            text = before.decode("utf-8", errors="surrogateescape") if before is not None else ""
            stored = load_meta(self.meta_path)
            merged = change(text, stored)
            # A rename ignores the mode the user gave the file: a read-only one is left as it is.
            if merged.text != text and (refused := read_only(self.path)) is not None:
                raise MemoryReadOnly(refused)
            if merged.meta != stored:
                _replace(self.meta_path, dump_meta(merged.meta))
            if merged.text == text:
                return merged
            temp = temp_beside(self.path, merged.text.encode("utf-8", errors="surrogateescape"))
            try:
                # nanobot's Dream writes MEMORY.md in place without our lock: if it wrote since our
                # read, merge again into its version rather than replace it.
                if read_bytes(self.path) != before:
                    continue
                os.replace(temp, self.path)
            finally:
                temp.unlink(missing_ok=True)
            _sync_dir(self.path.parent)
            return merged
        raise MemoryConflict(f"{self.path} changed during each of {CAS_RETRIES} merges")

    def take_out(self, taken: Sequence[str], given: Sequence[str] = ()) -> None:
        """Remembers the texts the user took out and those the user wants again, the lock held.

        The lock held: remembers that the user took the texts `taken` out (no batch asked for before now may bring them
        back) and wants the texts `given` (an undo, an edit back)."""
        stones = load_forgotten(self.given)
        after = changed(stones, taken, given, time.time())
        if after != stones:
            _replace(self.forgotten_path, dump_forgotten(after))

    def hold(self, batch: Batch, held_at: float) -> None:
        """Appends a batch to the pending file, one line, all of it or nothing.

        Appends a batch to the pending file, one line, all of it or nothing (a write the disk refused is cut off again).
        Appended, not rewritten: the file grows all day while a session is active."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.lock:
            batch = unforgotten(batch, load_forgotten(self.given))
            if not batch.facts:
                return
            before = stamp(self.pending_path)
            line = held_line(batch, held_at)
            if before is not None and before[1] and _last_byte(self.pending_path) != b"\n":
                line = b"\n" + line  # a line cut short by a crash stays a line of its own (skipped when read)
            append_whole(self.pending_path, line)
            if before is None:
                _sync_dir(self.pending_path.parent)
            HELD.appended(self.pending_path, before, line.decode("utf-8"))

    def commit(self, batches: Sequence[Batch], max_facts: int, threshold: float) -> MergeStats | None:
        """The held batches, then `batches`, merged into the file.

        The pending file goes only after the file is written (a crash in between merges them again, which adds nothing
        twice). None: nothing to do. A text the user took out after a batch's model call was made stays out. A file the
        user made read-only is left alone: `batches` are held (MemoryReadOnly says why)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.lock:
            stones = load_forgotten(self.given)
            held = [unforgotten(h.batch, stones) for h in read_held(self.given)]
            batches = [unforgotten(batch, stones) for batch in batches]
            if not held and not batches:
                return None
            try:
                merged = self._update(
                    lambda text, meta: merge_text(text, held + list(batches), max_facts, threshold, meta)
                )
            except MemoryReadOnly:
                for batch in batches:
                    self.hold(batch, time.time())
                raise
            if held:
                self.pending_path.unlink(missing_ok=True)
                _sync_dir(self.pending_path.parent)
            return merged.stats


def hold_facts(path: Path, batch: Batch, held_at: float) -> None:
    """Keeps a batch for MEMORY.md (`path`) in the pending file beside it, to be merged by `flush`."""
    if batch.facts:
        _MemoryFile(path).hold(batch, held_at)


def flush(path: Path, max_facts: int, threshold: float = DEFAULT_THRESHOLD) -> MergeStats | None:
    """Merges the held batches into the file and empties the pending file; None when nothing was held."""
    return _MemoryFile(path).commit([], max_facts, threshold)


def write_batches(
    path: Path, batches: Sequence[Batch], max_facts: int, threshold: float = DEFAULT_THRESHOLD
) -> MergeStats:
    """Merges batches (after any held ones) into the file atomically: lock, read, merge, temp file, compare, replace."""
    return _MemoryFile(path).commit(batches, max_facts, threshold) or MergeStats()


def write_facts(
    path: Path,
    facts: Sequence[Fact],
    language: str,
    today: str,
    max_facts: int,
    threshold: float = DEFAULT_THRESHOLD,
    session: str | None = None,
) -> MergeStats:
    """One job's facts into the file (write_batches with one batch)."""
    return write_batches(path, [Batch(facts, language, today, session)], max_facts, threshold)


def in_part(today: str, edit: Callable[[Part], bool]) -> Callable[[str, dict[str, Meta]], Merged]:
    """A change of MEMORY.md's managed part, for `_MemoryFile._update`.

    `edit(part)` changes the parsed part in place and says whether it did. Every byte outside the part stays; the
    sidecar keeps the records from before and after (a crash between its write and the file's leaves each fact with its
    record). A file without the part is left as it is."""

    def change(text: str, meta: dict[str, Meta]) -> Merged:
        span = locate(text)
        if span is None:
            return Merged(text, meta, MergeStats())
        part = parse(text[span[0] : span[1]], today, "en", meta)
        before = metas(part)
        if not edit(part):
            return Merged(text, meta, MergeStats())
        return Merged(text[: span[0]] + render(part) + text[span[1] :], {**before, **metas(part)}, MergeStats())

    return change


def forget_session(path: Path, session: str, today: str, dry_run: bool = False) -> list[str]:
    """Removes every fact learned in `session` from the managed part, and its facts still held.

    Removes from the managed part every fact learned in `session` (as the sidecar or an old line comment says), and its
    facts still held; returns their texts. Lines without a session (the user's, or older) stay. Their digests are kept
    (forgotten.py), so a batch asked for before now does not write them back."""
    removed: list[str] = []

    def edit(part: Part) -> bool:
        removed.clear()
        removed.extend(line.text for line in part.lines if line.session == session)
        if dry_run or not removed:
            return False
        part.lines = [line for line in part.lines if line.session != session]
        return True

    change = in_part(today, edit)

    memory = _MemoryFile(path)
    memory.path.parent.mkdir(parents=True, exist_ok=True)
    with memory.lock:
        memory._update(change)
        held = read_held(path)
        theirs = [h for h in held if h.batch.session == session]
        removed.extend(one_line(fact.text) for h in theirs for fact in h.batch.facts)
        if theirs and not dry_run:
            kept = b"".join(held_line(h.batch, h.held_at) for h in held if h.batch.session != session)
            if kept:
                _replace(memory.pending_path, kept)
            else:
                memory.pending_path.unlink(missing_ok=True)
        if removed and not dry_run:
            # As the page's Forget: a job of this session that asked its model before now cannot bring them back.
            memory.take_out(removed)
    return removed


def _last_byte(path: Path) -> bytes:
    with path.open("rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1)


def _sync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def known_facts(path: Path, limit: int | None = None) -> list[str]:
    """What MEMORY.md already remembers, for the extractor.

    Our facts, most important first, the facts held for it, then other bullets."""
    raw = read_bytes(path)
    text = raw.decode("utf-8", errors="replace") if raw is not None else ""
    span = locate(text)
    ours: list[str] = []
    rest = text
    if span is not None:
        part = parse(text[span[0] : span[1]], "0000-00-00", meta=load_meta(sidecar_path(path)))
        ours = [line.text for line in sorted(part.lines, key=Line.rank, reverse=True)]
        rest = text[: span[0]] + "\n" + text[span[1] :]
    theirs = bullets(rest)
    # The first `limit` of them, each once: the held facts grow all day, the prompt takes a hundred.
    return list(islice(_unique(chain(ours, HELD.get(pending_path(path)).texts, theirs)), limit))


def _unique(texts: Iterable[str]) -> Iterator[str]:
    seen: set[str] = set()
    for text in texts:
        if text not in seen:
            seen.add(text)
            yield text
