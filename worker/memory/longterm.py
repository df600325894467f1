"""MEMORY.md: merges facts into the project's one marked part of the file, never touching a byte outside it;
each fact's importance, day and session live in a sidecar file beside it, not in the prompt nanobot sends."""

from __future__ import annotations

import bisect
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from filelock import FileLock

from worker.model.answer import Fact
from worker.errors import MemoryFilesError
from worker.files import LOCK_TIMEOUT, temp_beside
from worker.memory.dedup import (
    DEFAULT_THRESHOLD,
    MIN_IMPORTANCE,
    best_match,
    category,
    find_duplicate,
    importance,
    normalize,
)
from worker.text.language import CATEGORIES, LANGUAGES, text_language
from worker.text.language import language as language_table
from worker.text.redact import one_line

BEGIN = "<!-- nanobot-summary:begin"
END = "<!-- nanobot-summary:end -->"
CAS_RETRIES = 8
META_FORMAT = 1

log = logging.getLogger("worker.memory.longterm")

# A heading in any of our languages maps back to its group, so a part written in one stays stable.
_HEADING_GROUP = {normalize(title): key for lang in LANGUAGES.values() for key, title in lang.memory_groups.items()}

_BEGIN_LINE = re.compile(r"^<!-- nanobot-summary:begin\b[^\n]*-->[ \t\r]*$", re.MULTILINE)
# The part ends right after "-->": whatever follows on that line (a CRLF's \r) stays the user's.
_END_LINE = re.compile(r"^<!-- nanobot-summary:end\b[^\n]*?-->(?=[ \t\r]*$)", re.MULTILINE)
_LANG = re.compile(r"\blang=([a-z]{2})\b")
# The per-line comment of files written before the sidecar: read once, moved to the sidecar on the next write.
_META = re.compile(r"\s*<!--\s*i(?P<importance>[1-5])\s+(?P<date>\d{4}-\d{2}-\d{2})(?:\s+(?P<session>[^\s<>]+))?\s*-->\s*$")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_HEADING = re.compile(r"^\s*(#{1,6})\s+(.*?)\s*#*\s*$")
_COMMENT = re.compile(r"^\s*<!--.*-->\s*$")


@dataclass
class Line:
    """One fact of the managed part."""

    text: str
    group: str  # one of language.CATEGORIES, or a heading someone added inside the part
    importance: int
    date: str  # YYYY-MM-DD it was learned or last corrected
    seq: int = 0  # breaks ties between equal importance and date: a higher one is newer
    session: str | None = None  # the session it was learned in (None: written by someone else, or before)

    def rank(self) -> tuple[int, str, int]:
        return (self.importance, self.date, self.seq)


@dataclass(frozen=True)
class Meta:
    """What the worker knows of one fact, kept in the sidecar (keyed by the fact's normalized text)."""

    importance: int
    date: str
    session: str | None = None


@dataclass
class Part:
    language: str
    lines: list[Line] = field(default_factory=list)


@dataclass
class MergeStats:
    added: int = 0
    replaced: int = 0
    skipped: int = 0
    evicted: int = 0


def locate(text: str) -> tuple[int, int] | None:
    """Start of the begin line and end of the end line of the managed part; the last complete pair wins."""
    ends = [m for m in _END_LINE.finditer(text)]
    chosen: tuple[int, int] | None = None
    for begin in _BEGIN_LINE.finditer(text):
        end = next((e for e in ends if e.start() > begin.end()), None)
        if end is not None:
            # A begin line with no end after it (an orphan) is someone's text, not our part.
            chosen = (begin.start(), end.end())
    return chosen


def parse(body: str, today: str, default_language: str = "en", meta: Mapping[str, Meta] | None = None,
          threshold: float = DEFAULT_THRESHOLD) -> Part:
    """The facts of a managed part (begin and end lines included), with their metadata from `meta` (the
    sidecar) or an old-style line comment. A line someone edited inherits the record of the text it was
    edited from; a line with no record at all (added by hand) gets importance 3, today, no session."""
    head = body.split("\n", 1)[0]
    lang = _LANG.search(head)
    part = Part(lang.group(1) if lang and lang.group(1) in LANGUAGES else text_language(body, default_language))
    meta = meta or {}
    unknown: list[Line] = []
    group = "other"
    for raw in body.split("\n")[1:]:
        if _BEGIN_LINE.match(raw) or _END_LINE.match(raw) or _COMMENT.match(raw) or not raw.strip():
            continue
        heading = _HEADING.match(raw)
        if heading:
            if len(heading.group(1)) >= 3:
                title = heading.group(2)
                group = _HEADING_GROUP.get(normalize(title), title)
            continue  # the part's own "## title"
        old = _META.search(raw)
        text = one_line(_BULLET.sub("", raw[: old.start()] if old else raw, count=1))
        if not text:
            continue
        line = Line(text, group, MIN_IMPORTANCE, today, len(part.lines))
        if old:
            line.importance, line.date = int(old["importance"]), old["date"]
            line.session = unquote(old["session"]) if old["session"] else None
        elif (known := meta.get(normalize(text))) is not None:
            _inherit(line, known)
        else:
            unknown.append(line)
        part.lines.append(line)
    if unknown and meta:
        claimed = {normalize(line.text) for line in part.lines}
        free = [key for key in meta if key not in claimed]
        for line in unknown:
            found = best_match(normalize(line.text), free, threshold) if free else None
            if found is not None:
                _inherit(line, meta[free.pop(found)])
    return part


def _inherit(line: Line, known: Meta) -> None:
    line.importance, line.date, line.session = known.importance, known.date, known.session


def metas(part: Part) -> dict[str, Meta]:
    """The sidecar's records of the part's facts, in the part's order."""
    found: dict[str, Meta] = {}
    for line in part.lines:
        found.setdefault(normalize(line.text), Meta(line.importance, line.date, line.session))
    return found


def render(part: Part) -> str:
    """The managed part, begin and end lines included, with no newline after the end line: headings and
    fact lines only (nanobot sends the file in every prompt; metadata lives in the sidecar).

    A fact is a paragraph of its own, not a list item: with cl100k a blank line costs what a line break
    does, a "- " costs one token a fact (7% of the part at 300 facts of 12 tokens)."""
    table = language_table(part.language)
    groups = table.memory_groups
    order = list(CATEGORIES) + [g for g in dict.fromkeys(line.group for line in part.lines) if g not in groups]
    out = [f"{BEGIN} lang={part.language} -->", f"## {table.memory_title}"]
    for group in order:
        members = [line for line in part.lines if line.group == group]
        if members:
            out.append("")
            out.append(f"### {groups.get(group, group)}")
            out.append("\n\n".join(line.text for line in members))
    out.append(END)
    return "\n".join(out)


def markup_share(part_text: str, count: Callable[[str], int]) -> float:
    """The share of a managed part's tokens that is neither a fact nor a heading (markers, bullets,
    comments): what the part costs every prompt beyond what it says. Facts and headings are counted
    one a line."""
    part = parse(part_text, "0000-00-00")
    said = [line.text for line in part.lines]
    said += [raw for raw in part_text.split("\n") if _HEADING.match(raw) and not _COMMENT.match(raw)]
    total = count(part_text)
    return max(0, total - count("\n".join(said))) / total if total else 0.0


def outside_lines(text: str) -> list[str]:
    """The text lines of the file outside the managed part, bullets and heading marks taken off."""
    found = []
    for raw in text.split("\n"):
        if _COMMENT.match(raw):
            continue
        heading = _HEADING.match(raw)
        line = heading.group(2) if heading else _BULLET.sub("", raw, count=1)
        line = line.strip()
        if line:
            found.append(line)
    return found


def dated_lines(text: str, meta: Mapping[str, Meta] | None = None) -> list[tuple[int, str, str, str | None]]:
    """Every text line of the file (ours and the user's): (line number, its heading, the text without
    bullet or metadata, the day it was learned (from `meta`, the sidecar, or an old line comment) or None).
    For the recall index."""
    meta = meta or {}
    found = []
    heading = ""
    for number, raw in enumerate(text.split("\n")):
        if _COMMENT.match(raw):
            continue
        title = _HEADING.match(raw)
        if title:
            heading = title.group(2).strip()
            continue
        old = _META.search(raw)
        line = one_line(_BULLET.sub("", raw[: old.start()] if old else raw, count=1))
        if line:
            known = meta.get(normalize(line)) if old is None else None
            found.append((number, heading, line, old["date"] if old else known.date if known else None))
    return found


@dataclass
class _Candidate:
    text: str
    norm: str
    level: int
    group: str
    order: int
    correction: bool
    replaces: str  # the old fact as the model quoted it; "" when it did not


def _candidates(facts: Sequence[Fact], stats: MergeStats) -> list[_Candidate]:
    found = []
    for order, fact in enumerate(facts):
        text = one_line(fact.text)
        level = importance(fact.model_copy(update={"text": text})) if text else None
        if level is None:  # ephemeral, unimportant or empty
            stats.skipped += 1
            continue
        found.append(_Candidate(text, normalize(text), level, category(fact), order,
                                fact.tag == "correction", one_line(fact.replaces or "")))
    return found


def merge(part: Part, outside: Sequence[str], facts: Sequence[Fact], today: str, max_facts: int,
          threshold: float = DEFAULT_THRESHOLD, session: str | None = None) -> MergeStats:
    """Merges facts into `part` in place: dedup against the whole file, corrections in place, then the cap."""
    stats = MergeStats()
    lines = part.lines
    for seq, line in enumerate(lines):
        line.seq = seq
    # Every text the file holds; the managed lines sit at [offset, offset + len(lines)).
    norms = [normalize(text) for text in outside] + [normalize(line.text) for line in lines]
    offset = len(norms) - len(lines)
    exact = Counter(norms)
    candidates = _candidates(facts, stats)

    regular: list[_Candidate] = []
    for cand in candidates:
        if not cand.correction:
            regular.append(cand)
            continue
        if exact[cand.norm]:
            stats.skipped += 1
            continue
        managed = norms[offset:offset + len(lines)]
        target = best_match(normalize(cand.replaces), managed, threshold) if cand.replaces else None
        if target is None:
            target = best_match(cand.norm, managed, threshold)
        if target is None:
            regular.append(cand)  # nothing of ours to correct: the corrected fact is still a fact
            continue
        line = lines[target]
        exact[norms[offset + target]] -= 1
        line.text, line.importance, line.date = cand.text, max(line.importance, cand.level), today
        line.session = session
        norms[offset + target] = cand.norm
        exact[cand.norm] += 1
        stats.replaced += 1

    # Most important first, so a candidate the cap would evict anyway needs no fuzzy search.
    regular.sort(key=lambda c: -c.level)
    top = len(lines) + len(regular) + 1
    existing = sorted(line.rank() for line in lines)
    accepted: list[tuple[_Candidate, Line]] = []
    for k, cand in enumerate(regular):
        new = Line(cand.text, cand.group, cand.level, today, top + len(regular) - k, session)
        above = len(accepted) + len(existing) - bisect.bisect_right(existing, new.rank())
        if above >= max_facts or exact[cand.norm] or find_duplicate(cand.norm, norms, threshold) is not None:
            stats.skipped += 1
            continue
        accepted.append((cand, new))
        norms.append(cand.norm)
        exact[cand.norm] += 1

    accepted.sort(key=lambda pair: pair[0].order)
    merged = lines + [line for _, line in accepted]
    if len(merged) > max_facts:
        # The least important go first; among equals the oldest.
        cut = sorted(merged, key=Line.rank, reverse=True)[max_facts:]
        gone = {id(line) for line in cut}
        stats.evicted = sum(1 for line in lines if id(line) in gone)
        stats.skipped += sum(1 for _, line in accepted if id(line) in gone)
        merged = [line for line in merged if id(line) not in gone]
    kept = {id(line) for line in merged}
    stats.added = sum(1 for _, line in accepted if id(line) in kept)
    part.lines = merged
    return stats


@dataclass(frozen=True)
class Batch:
    """The facts of one job, merged with that job's day, session and language."""

    facts: Sequence[Fact]
    language: str
    today: str
    session: str | None = None


@dataclass
class Merged:
    """A merge's outcome: the whole file's new text and what the sidecar must hold for it."""

    text: str
    meta: dict[str, Meta]  # the part's records before and after: a crash between the two writes loses none
    stats: MergeStats


def merge_text(text: str, batches: Sequence[Batch], max_facts: int, threshold: float = DEFAULT_THRESHOLD,
               meta: Mapping[str, Meta] | None = None) -> Merged:
    """Merges batches, in order, into the file's text: only the managed part differs (or is appended when
    the file had none). Pure: `meta` is the sidecar as read."""
    stats = MergeStats()
    if not batches:
        return Merged(text, dict(meta or {}), stats)
    first = batches[0]
    span = locate(text)
    if span is None:
        part = Part(first.language if first.language in LANGUAGES else "en")
        outside, before = outside_lines(text), {}
    else:
        part = parse(text[span[0]:span[1]], first.today, first.language, meta, threshold)
        outside = outside_lines(text[:span[0]]) + outside_lines(text[span[1]:])
        before = metas(part)
    for batch in batches:
        done = merge(part, outside, batch.facts, batch.today, max_facts, threshold, batch.session)
        stats.added += done.added
        stats.replaced += done.replaced
        stats.skipped += done.skipped
        stats.evicted += done.evicted
    if span is None:
        if not part.lines:
            return Merged(text, {}, stats)
        separator = "" if not text or text.endswith("\n\n") else "\n" if text.endswith("\n") else "\n\n"
        return Merged(f"{text}{separator}{render(part)}\n", metas(part), stats)
    return Merged(text[:span[0]] + render(part) + text[span[1]:], {**before, **metas(part)}, stats)


def apply(text: str, facts: Sequence[Fact], language: str, today: str, max_facts: int,
          threshold: float = DEFAULT_THRESHOLD, session: str | None = None) -> tuple[str, MergeStats]:
    """The whole file's new text after one batch (no sidecar: lines without a comment get the defaults)."""
    merged = merge_text(text, [Batch(facts, language, today, session)], max_facts, threshold)
    return merged.text, merged.stats


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


class MemoryConflict(MemoryFilesError):
    """MEMORY.md kept changing under us; the job's retry will merge again."""


def sidecar_path(path: Path) -> Path:
    """`memory/.MEMORY.meta.json`: each fact's importance, day and session; the worker's own file."""
    return path.with_name(f".{path.stem}.meta.json")


def load_meta(path: Path) -> dict[str, Meta]:
    """The sidecar's records; none when it is missing or unreadable (the facts then get the defaults)."""
    raw = _read_bytes(path)
    if raw is None:
        return {}
    try:
        facts = json.loads(raw.decode("utf-8"))["facts"]
        return {str(key): Meta(int(value["importance"]), str(value["learned"]),
                               str(value["session"]) if value.get("session") else None)
                for key, value in facts.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("%s is not readable (%s): its facts get default importance and day", path.name, exc)
        return {}


def dump_meta(meta: Mapping[str, Meta]) -> bytes:
    """The sidecar's bytes: one fact per line, so `grep telegram:42` finds a session's facts."""
    rows = [f"{json.dumps(key, ensure_ascii=False)}: " + json.dumps(
        {"importance": m.importance, "learned": m.date, "session": m.session}, ensure_ascii=False)
        for key, m in meta.items()]
    return (f'{{"format": {META_FORMAT}, "facts": {{\n' + ",\n".join(rows) + "\n}}\n").encode("utf-8")


def pending_path(path: Path) -> Path:
    """`memory/.MEMORY.pending.jsonl`: facts held for a moment when no session's prompt cache is warm."""
    return path.with_name(f".{path.stem}.pending.jsonl")


@dataclass(frozen=True)
class Held:
    """A batch waiting in the pending file, and when it was held (epoch seconds)."""

    batch: Batch
    held_at: float


def _held_line(batch: Batch, held_at: float) -> bytes:
    # Redacted now: the pending file is on disk as long as no quiet moment comes.
    facts = [fact.model_copy(update={"text": one_line(fact.text),
                                     "replaces": one_line(fact.replaces) if fact.replaces else None})
             for fact in batch.facts]
    return (json.dumps({"held_at": held_at, "session": batch.session, "language": batch.language,
                        "today": batch.today, "facts": [fact.model_dump(mode="json") for fact in facts]},
                       ensure_ascii=False) + "\n").encode("utf-8")


def read_held(path: Path) -> list[Held]:
    """The batches held for MEMORY.md (`path`), oldest first; a line that does not parse is skipped."""
    raw = _read_bytes(pending_path(path))
    found = []
    for line in (raw or b"").splitlines():
        try:
            data = json.loads(line)
            batch = Batch([Fact.model_validate(fact) for fact in data["facts"]], str(data["language"]),
                          str(data["today"]), data.get("session"))
            found.append(Held(batch, float(data["held_at"])))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s: a held batch is unreadable and skipped (%s)", pending_path(path).name, exc)
    return found


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
        # Replace the file a symlink points to, and keep the user's link.
        self.path = path.resolve() if path.is_symlink() else path
        self.lock = FileLock(str(self.path.parent / f".{self.path.name}.lock"), timeout=LOCK_TIMEOUT)

    def _update(self, change: Callable[[str, dict[str, Meta]], Merged]) -> Merged:
        """`change(text, sidecar)`, the lock held: writes the sidecar first (a fact in the file always has
        its record), then the file, retried when someone else wrote the file meanwhile."""
        for _ in range(CAS_RETRIES):
            before = _read_bytes(self.path)
            # surrogateescape: bytes that are not UTF-8 outside our part go back out exactly as they came.
            text = before.decode("utf-8", errors="surrogateescape") if before is not None else ""
            stored = load_meta(self.meta_path)
            merged = change(text, stored)
            if merged.meta != stored:
                _replace(self.meta_path, dump_meta(merged.meta))
            if merged.text == text:
                return merged
            temp = temp_beside(self.path, merged.text.encode("utf-8", errors="surrogateescape"))
            try:
                # nanobot's Dream writes MEMORY.md in place without our lock: if it wrote since our
                # read, merge again into its version rather than replace it.
                if _read_bytes(self.path) != before:
                    continue
                os.replace(temp, self.path)
            finally:
                temp.unlink(missing_ok=True)
            _sync_dir(self.path.parent)
            return merged
        raise MemoryConflict(f"{self.path} changed during each of {CAS_RETRIES} merges")

    def hold(self, batch: Batch, held_at: float) -> None:
        """Adds a batch to the pending file (atomically: a crash keeps the old file or the new one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.lock:
            _replace(self.pending_path, (_read_bytes(self.pending_path) or b"") + _held_line(batch, held_at))
            _sync_dir(self.pending_path.parent)

    def commit(self, batches: Sequence[Batch], max_facts: int, threshold: float) -> MergeStats | None:
        """The held batches, then `batches`, merged into the file; the pending file goes only after the file
        is written (a crash in between merges them again, which adds nothing twice). None: nothing to do."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.lock:
            held = [h.batch for h in read_held(self.given)]
            if not held and not batches:
                return None
            merged = self._update(lambda text, meta: merge_text(text, held + list(batches), max_facts, threshold, meta))
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


def write_batches(path: Path, batches: Sequence[Batch], max_facts: int,
                  threshold: float = DEFAULT_THRESHOLD) -> MergeStats:
    """Merges batches (after any held ones) into the file atomically: lock, read, merge, temp file, compare,
    replace."""
    return _MemoryFile(path).commit(batches, max_facts, threshold) or MergeStats()


def write_facts(path: Path, facts: Sequence[Fact], language: str, today: str, max_facts: int,
                threshold: float = DEFAULT_THRESHOLD, session: str | None = None) -> MergeStats:
    """One job's facts into the file (write_batches with one batch)."""
    return write_batches(path, [Batch(facts, language, today, session)], max_facts, threshold)


def forget_session(path: Path, session: str, today: str, dry_run: bool = False) -> list[str]:
    """Removes from the managed part every fact learned in `session` (as the sidecar or an old line comment
    says), and its facts still held; returns their texts. Lines without a session (the user's, or older) stay."""
    removed: list[str] = []

    def change(text: str, meta: dict[str, Meta]) -> Merged:
        removed.clear()
        span = locate(text)
        if span is None:
            return Merged(text, meta, MergeStats())
        part = parse(text[span[0]:span[1]], today, "en", meta)
        before = metas(part)
        removed.extend(line.text for line in part.lines if line.session == session)
        if dry_run or not removed:
            return Merged(text, meta, MergeStats())
        part.lines = [line for line in part.lines if line.session != session]
        return Merged(text[:span[0]] + render(part) + text[span[1]:], {**before, **metas(part)}, MergeStats())

    memory = _MemoryFile(path)
    memory.path.parent.mkdir(parents=True, exist_ok=True)
    with memory.lock:
        memory._update(change)
        held = read_held(path)
        theirs = [h for h in held if h.batch.session == session]
        removed.extend(one_line(fact.text) for h in theirs for fact in h.batch.facts)
        if theirs and not dry_run:
            kept = b"".join(_held_line(h.batch, h.held_at) for h in held if h.batch.session != session)
            if kept:
                _replace(memory.pending_path, kept)
            else:
                memory.pending_path.unlink(missing_ok=True)
    return removed


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
    """What MEMORY.md already remembers, for the extractor: our facts, most important first, the facts held
    for it, then other bullets."""
    raw = _read_bytes(path)
    text = raw.decode("utf-8", errors="replace") if raw is not None else ""
    span = locate(text)
    ours: list[str] = []
    rest = text
    if span is not None:
        part = parse(text[span[0]:span[1]], "0000-00-00", meta=load_meta(sidecar_path(path)))
        ours = [line.text for line in sorted(part.lines, key=Line.rank, reverse=True)]
        rest = text[:span[0]] + "\n" + text[span[1]:]
    theirs = [_BULLET.sub("", raw_line, count=1).strip() for raw_line in rest.split("\n")
              if _BULLET.match(raw_line) and _BULLET.sub("", raw_line, count=1).strip()]
    held = [one_line(fact.text) for h in read_held(path) for fact in h.batch.facts]
    found = list(dict.fromkeys(ours + held + theirs))
    return found if limit is None else found[:limit]
