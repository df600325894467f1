"""MEMORY.md: merges facts into the project's one marked part of the file, never touching a byte outside it."""

from __future__ import annotations

import bisect
import os
import re
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

from filelock import FileLock

from worker.answer import CATEGORIES, Fact
from worker.errors import MemoryFilesError
from worker.dedup import (
    DEFAULT_THRESHOLD,
    MIN_IMPORTANCE,
    best_match,
    category,
    find_duplicate,
    importance,
    normalize,
)
from worker.language import LANGUAGES, text_language
from worker.language import language as language_table
from worker.redact import one_line

BEGIN = "<!-- nanobot-summary:begin"
END = "<!-- nanobot-summary:end -->"
LOCK_TIMEOUT = 120.0
CAS_RETRIES = 8

# A heading in any of our languages maps back to its group, so a part written in one stays stable.
_HEADING_GROUP = {normalize(title): key for lang in LANGUAGES.values() for key, title in lang.memory_groups.items()}

_BEGIN_LINE = re.compile(r"^<!-- nanobot-summary:begin\b[^\n]*-->[ \t\r]*$", re.MULTILINE)
# The part ends right after "-->": whatever follows on that line (a CRLF's \r) stays the user's.
_END_LINE = re.compile(r"^<!-- nanobot-summary:end\b[^\n]*?-->(?=[ \t\r]*$)", re.MULTILINE)
_LANG = re.compile(r"\blang=([a-z]{2})\b")
_META = re.compile(r"\s*<!--\s*i(?P<importance>[1-5])\s+(?P<date>\d{4}-\d{2}-\d{2})(?:\s+(?P<session>[^\s<>]+))?\s*-->\s*$")
_SAFE = ":@+._~/"  # session keys are written url-quoted but for these, as in the notes' markers
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_HEADING = re.compile(r"^\s*(#{1,6})\s+(.*?)\s*#*\s*$")
_COMMENT = re.compile(r"^\s*<!--.*-->\s*$")


@dataclass
class Line:
    """One fact of the managed part."""

    text: str
    group: str  # one of answer.CATEGORIES, or a heading someone added inside the part
    importance: int
    date: str  # YYYY-MM-DD it was learned or last corrected
    seq: int = 0  # breaks ties between equal importance and date: a higher one is newer
    session: str | None = None  # the session it was learned in (None: written by someone else, or before)

    def rank(self) -> tuple[int, str, int]:
        return (self.importance, self.date, self.seq)


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


def parse(body: str, today: str, default_language: str = "en") -> Part:
    """The facts of a managed part (begin and end lines included); lines without metadata date from today."""
    head = body.split("\n", 1)[0]
    lang = _LANG.search(head)
    part = Part(lang.group(1) if lang and lang.group(1) in LANGUAGES else text_language(body, default_language))
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
        meta = _META.search(raw)
        text = raw[: meta.start()] if meta else raw
        text = one_line(_BULLET.sub("", text, count=1))
        if text:
            level = int(meta["importance"]) if meta else MIN_IMPORTANCE
            session = unquote(meta["session"]) if meta and meta["session"] else None
            part.lines.append(Line(text, group, level, meta["date"] if meta else today, len(part.lines), session))
    return part


def render(part: Part) -> str:
    """The managed part, begin and end lines included, with no newline after the end line."""
    table = language_table(part.language)
    groups = table.memory_groups
    order = list(CATEGORIES) + [g for g in dict.fromkeys(line.group for line in part.lines) if g not in groups]
    out = [f"{BEGIN} lang={part.language}: facts kept by the summary worker, one per line; edits are kept;"
           f" 'i4 2026-11-20 telegram:42' = importance 4 of 5, learned 2026-11-20 in session telegram:42 -->",
           f"## {table.memory_title}"]
    for group in order:
        members = [line for line in part.lines if line.group == group]
        if members:
            out.append("")
            out.append(f"### {groups.get(group, group)}")
            out.extend(f"- {line.text} <!-- {_meta(line)} -->" for line in members)
    out.append(END)
    return "\n".join(out)


def _meta(line: Line) -> str:
    session = f" {quote(line.session, safe=_SAFE)}" if line.session else ""
    return f"i{line.importance} {line.date}{session}"


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


def dated_lines(text: str) -> list[tuple[int, str, str, str | None]]:
    """Every text line of the file (ours and the user's): (line number, its heading, the text without
    bullet or metadata, the day it was learned or None). For the recall index."""
    found = []
    heading = ""
    for number, raw in enumerate(text.split("\n")):
        if _COMMENT.match(raw):
            continue
        title = _HEADING.match(raw)
        if title:
            heading = title.group(2).strip()
            continue
        meta = _META.search(raw)
        line = one_line(_BULLET.sub("", raw[: meta.start()] if meta else raw, count=1))
        if line:
            found.append((number, heading, line, meta["date"] if meta else None))
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


def apply(text: str, facts: Sequence[Fact], language: str, today: str, max_facts: int,
          threshold: float = DEFAULT_THRESHOLD, session: str | None = None) -> tuple[str, MergeStats]:
    """The whole file's new text: only the managed part differs (or is appended when the file had none)."""
    span = locate(text)
    if span is None:
        part = Part(language if language in LANGUAGES else "en")
        stats = merge(part, outside_lines(text), facts, today, max_facts, threshold, session)
        if not part.lines:
            return text, stats
        separator = "" if not text or text.endswith("\n\n") else "\n" if text.endswith("\n") else "\n\n"
        return f"{text}{separator}{render(part)}\n", stats
    start, end = span
    part = parse(text[start:end], today, language)
    stats = merge(part, outside_lines(text[:start]) + outside_lines(text[end:]), facts, today, max_facts,
                  threshold, session)
    return text[:start] + render(part) + text[end:], stats


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _write_temp(path: Path, data: bytes) -> Path:
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        os.unlink(name)  # a full disk must not leave a half-written copy behind at every try
        raise
    try:
        os.chmod(name, path.stat().st_mode & 0o7777)
    except FileNotFoundError:
        os.chmod(name, 0o644)  # mkstemp's 0600 would hide the file from a nanobot running as another user
    return Path(name)


class MemoryConflict(MemoryFilesError):
    """MEMORY.md kept changing under us; the job's retry will merge again."""


def write_facts(path: Path, facts: Sequence[Fact], language: str, today: str, max_facts: int,
                threshold: float = DEFAULT_THRESHOLD, session: str | None = None) -> MergeStats:
    """Merges facts into the file atomically: lock, read, merge, temp file, compare, replace."""
    if path.is_symlink():
        path = path.resolve()  # replace the file the link points to, and keep the user's link
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.parent / f".{path.name}.lock"), timeout=LOCK_TIMEOUT):
        for _ in range(CAS_RETRIES):
            before = _read_bytes(path)
            # surrogateescape: bytes that are not UTF-8 outside our part go back out exactly as they came.
            text = before.decode("utf-8", errors="surrogateescape") if before is not None else ""
            new_text, stats = apply(text, facts, language, today, max_facts, threshold, session)
            if new_text == text:
                return stats
            temp = _write_temp(path, new_text.encode("utf-8", errors="surrogateescape"))
            try:
                # nanobot's Dream writes MEMORY.md in place without our lock: if it wrote since our
                # read, merge again into its version rather than replace it.
                if _read_bytes(path) != before:
                    continue
                os.replace(temp, path)
            finally:
                temp.unlink(missing_ok=True)
            _sync_dir(path.parent)
            return stats
    raise MemoryConflict(f"{path} changed during each of {CAS_RETRIES} merges")


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
    """What MEMORY.md already remembers, for the extractor: our facts, most important first, then other bullets."""
    raw = _read_bytes(path)
    if raw is None:
        return []
    text = raw.decode("utf-8", errors="replace")
    span = locate(text)
    ours: list[str] = []
    rest = text
    if span is not None:
        part = parse(text[span[0]:span[1]], "0000-00-00")
        ours = [line.text for line in sorted(part.lines, key=Line.rank, reverse=True)]
        rest = text[:span[0]] + "\n" + text[span[1]:]
    theirs = [_BULLET.sub("", raw_line, count=1).strip() for raw_line in rest.split("\n")
              if _BULLET.match(raw_line) and _BULLET.sub("", raw_line, count=1).strip()]
    found = list(dict.fromkeys(ours + theirs))
    return found if limit is None else found[:limit]
