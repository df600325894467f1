"""MEMORY.md's managed part as text.

Finding it between its marker lines, reading its facts, writing it back; and the file's other lines, as the merge and
the recall index read them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote

from worker.memory.dedup import DEFAULT_THRESHOLD, MIN_IMPORTANCE, best_match, normalize
from worker.memory.longterm.sidecar import Meta
from worker.text.language import CATEGORIES, LANGUAGES, text_language
from worker.text.language import language as language_table
from worker.text.redact import one_line

BEGIN = "<!-- nanobot-summary:begin"
END = "<!-- nanobot-summary:end -->"

# A heading in any of our languages maps back to its group, so a part written in one stays stable.
_HEADING_GROUP = {normalize(title): key for lang in LANGUAGES.values() for key, title in lang.memory_groups.items()}

_BEGIN_LINE = re.compile(r"^<!-- nanobot-summary:begin\b[^\n]*-->[ \t\r]*$", re.MULTILINE)
# The part ends right after "-->": whatever follows on that line (a CRLF's \r) stays the user's.
_END_LINE = re.compile(r"^<!-- nanobot-summary:end\b[^\n]*?-->(?=[ \t\r]*$)", re.MULTILINE)
_LANG = re.compile(r"\blang=([a-z]{2})\b")
# The per-line comment of files written before the sidecar: read once, moved to the sidecar on the next write.
_META = re.compile(
    r"\s*<!--\s*i(?P<importance>[1-5])\s+(?P<date>\d{4}-\d{2}-\d{2})"
    r"(?:\s+(?P<session>[^\s<>]+))?\s*-->\s*$"
)
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
    pinned: bool = False  # the user pinned it: ranked above every unpinned fact, so the cap evicts it last

    def rank(self) -> tuple[bool, int, str, int]:
        return (self.pinned, self.importance, self.date, self.seq)


@dataclass
class Part:
    language: str
    lines: list[Line] = field(default_factory=list)


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


def parse(
    body: str,
    today: str,
    default_language: str = "en",
    meta: Mapping[str, Meta] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> Part:
    """The facts of a managed part, with their metadata.

    The facts of a managed part (begin and end lines included), with their metadata from `meta` (the sidecar) or an
    old-style line comment. A line someone edited inherits the record of the text it was edited from; a line with no
    record at all (added by hand) gets importance 3, today, no session."""
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
        _inherit_edited(part.lines, unknown, meta, threshold)
    return part


def _inherit_edited(lines: list[Line], unknown: list[Line], meta: Mapping[str, Meta], threshold: float) -> None:
    """Each line with no record of its own takes the closest record no other line claims.

    Each line with no record of its own takes the closest record no other line claims: the text it was edited from."""
    claimed = {normalize(line.text) for line in lines}
    free = [key for key in meta if key not in claimed]
    for line in unknown:
        found = best_match(normalize(line.text), free, threshold) if free else None
        if found is not None:
            _inherit(line, meta[free.pop(found)])


def _inherit(line: Line, known: Meta) -> None:
    line.importance, line.date, line.session, line.pinned = known.importance, known.date, known.session, known.pinned


def metas(part: Part) -> dict[str, Meta]:
    """The sidecar's records of the part's facts, in the part's order."""
    found: dict[str, Meta] = {}
    for line in part.lines:
        found.setdefault(normalize(line.text), Meta(line.importance, line.date, line.session, line.pinned))
    return found


def render(part: Part) -> str:
    """The managed part, begin and end lines included, with no newline after the end line.

    Headings and fact lines only (nanobot sends the file in every prompt; metadata lives in the sidecar).

    A fact is a paragraph of its own, not a list item: with cl100k a blank line costs what a line break
    does, a "- " costs one token a fact."""
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
    """The share of a managed part's tokens that is neither a fact nor a heading (markers, bullets, comments).

    What the part costs every prompt beyond what it says. Facts and headings are counted one a line."""
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


# nanobot's MEMORY.md as `nanobot onboard` writes it (nanobot/templates/memory/MEMORY.md, 0.3.5), its text lines as
# outside_lines reads them: its headings and placeholders, which are nobody's facts.
NANOBOT_TEMPLATE_LINES = frozenset(
    (
        "Long-term Memory",
        "This file stores important information that should persist across sessions.",
        "User Information",
        "(Important facts about the user)",
        "Preferences",
        "(User preferences learned over time)",
        "Project Context",
        "(Information about ongoing projects)",
        "Important Notes",
        "(Things to remember)",
        "---",
        "*This file is automatically updated by nanobot when important information should be remembered.*",
    )
)


def own_lines(text: str) -> list[str]:
    """The user's own text lines outside the managed part: outside_lines without nanobot's template's."""
    return [line for line in outside_lines(text) if line not in NANOBOT_TEMPLATE_LINES]


def dated_lines(text: str, meta: Mapping[str, Meta] | None = None) -> list[tuple[int, str, str, str | None]]:
    """Every text line of the file (ours and the user's).

    (line number, its heading, the text without bullet or metadata, the day it was learned (from `meta`, the sidecar, or
    an old line comment) or None). For the recall index."""
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


def bullets(text: str) -> list[str]:
    """The texts of the list items in `text`, bullet taken off."""
    return [
        _BULLET.sub("", raw, count=1).strip()
        for raw in text.split("\n")
        if _BULLET.match(raw) and _BULLET.sub("", raw, count=1).strip()
    ]
