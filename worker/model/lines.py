"""The notes and facts as plain lines, the format any model follows: asked for when a model will not answer JSON
(worker.summarize.notes_only), and read tolerantly into the same entries as the JSON answer.

The shape asked for: a `DAY YYYY-MM-DD` line per day, a heading per note field (`TOPICS:` ...) with one `- ` bullet
per item, an issue as `problem => solution`, and a `FACTS:` heading whose bullets read
`who | tag | importance | category | the fact`. Read tolerantly: Markdown around headings (`## Topics`,
`**Decisions:**`), the language's own note headings, numbered or starred bullets, chatter around the lines or a
code fence around them, a fact's parts in any order or in brackets. A fact whose source is not named is
`unknown`, which long-term memory never takes (worker.summarize.remember)."""

from __future__ import annotations

import re
from typing import Any

from worker.errors import BadAnswer
from worker.memory.entries import SOURCES, TEXT_FIELDS, DailyNotes, Fact, TechnicalIssue
from worker.model import guards
from worker.model.answer import Answer, opens_with_json, parse_answer
from worker.text.language import CATEGORIES, LANGUAGES, NOTE_FIELDS

# The headings asked for, in the order asked; the parser reads these and the synonyms below.
HEADINGS = {"topics": "TOPICS", "preferences": "PREFERENCES", "decisions": "DECISIONS", "tasks": "TASKS",
            "technical_issues": "ISSUES", "insights": "INSIGHTS"}
FACTS = "FACTS"
TAGS = ("permanent", "durable", "ephemeral", "correction")


def _section_names() -> dict[str, str]:
    """Every heading read as a section: the ones asked for, plain English variants, each language's own."""
    names = {word.casefold(): field for field, word in HEADINGS.items()}
    names.update({field.replace("_", " "): field for field in NOTE_FIELDS})
    names.update({"topic": "topics", "user preferences": "preferences", "preference": "preferences",
                  "decision": "decisions", "task": "tasks", "open tasks": "tasks", "todo": "tasks",
                  "issue": "technical_issues", "problems": "technical_issues",
                  "technical issues and solutions": "technical_issues", "key insights": "insights",
                  "insight": "insights"})
    for language in LANGUAGES.values():
        names.update({heading.casefold(): field for field, heading in language.note_headings.items()})
    names.update({word: "facts" for word in ("facts", "fact", "long-term facts", "long term facts",
                                             "long-term memory", "事实", "长期事实", "事實", "事実", "사실")})
    return names


_SECTIONS = _section_names()
_BULLET = re.compile(r"^\s*(?:[-*•·+]|\d{1,2}[.)])\s+(?P<item>\S.*)$")
_DATE = re.compile(r"(?<!\d)(\d{4}-\d{2}-\d{2})(?!\d)")
_MARKUP = re.compile(r"[#*_`>]")
_COLON = re.compile(r"\s*[:：]\s*")
_SOLUTION = re.compile(r"\s*(?:=>|⇒|→|\bsolution\s*[:：])\s*", re.IGNORECASE)
_IMPORTANCE = re.compile(r"^(?:importance\s*)?([1-5])(?:\s*/\s*5)?$")
_LABEL = re.compile(r"^(?:who|source|tag|kind|importance|category|group)\s*[:=]\s*", re.IGNORECASE)
_SOURCE_WORDS = {**{word: word for word in SOURCES}, "the user": "user", "the assistant": "assistant",
                 "tool result": "tool", "web page": "tool", "web": "tool"}


def shape(language_name: str) -> str:
    """The answer's shape, for the system prompt."""
    fields = "\n".join(f"{HEADINGS[field]}:\n"
                       f"- {'the problem => its solution' if field == 'technical_issues' else '...'}"
                       for field in NOTE_FIELDS)
    return (f"Answer in plain text lines, no JSON, no table. For each calendar day of the messages:\n"
            f"DAY YYYY-MM-DD\n{fields}\n"
            f"Then, once, the long-term facts, one per line:\n{FACTS}:\n"
            f"- who | tag | importance | category | the fact\n"
            f"who: {', '.join(SOURCES)} (who stated it); tag: {', '.join(TAGS)}; importance: 1 to 5; "
            f"category: {', '.join(CATEGORIES)}. A correction ends with \"| replaces: the old fact\".\n"
            f"Leave out a heading with nothing under it. Keep the headings in English; write every other text in "
            f"{language_name}, the language the user writes in.")


def parse_lines(text: str, truncated: bool = False) -> Answer:
    """The notes and facts of a lines answer (JSON too, when the model sent JSON after all).

    Raises BadAnswer for an empty answer, a refusal, an error text or a placeholder, and with `prose=True` for
    text without one heading it was asked for (the model does not follow this format either). A `truncated`
    answer (cut at the token limit) loses its last line, which may end half-way."""
    cleaned = text.strip()
    if not cleaned:
        raise BadAnswer("empty answer")
    if opens_with_json(cleaned):  # asked for lines, the model sent JSON after all: read as JSON
        return parse_answer(cleaned, len(cleaned), need_summary=False)
    lines = _body(cleaned).splitlines()
    if truncated and lines:
        lines = lines[:-1]
    notes, facts, headed = _read(lines)
    if not headed:
        reason = guards.unusable(cleaned)
        if reason is not None:
            raise BadAnswer(reason.replace("a summary", "notes"))
        raise BadAnswer("prose instead of the notes lines asked for", prose=True)
    return Answer(summary="", notes=notes, facts=facts)


def _body(text: str) -> str:
    """The lines inside code fences when there are any (chatter around them left out), else the whole text."""
    inside, kept, fenced = False, [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside, fenced = not inside, True
            continue
        if inside:
            kept.append(line)
    return "\n".join(kept) if fenced else text


def _read(lines: list[str]) -> tuple[list[DailyNotes], list[Fact], bool]:
    """The days' notes, the facts, and whether any heading was found."""
    days: dict[str, dict[str, list[Any]]] = {}
    facts: list[Fact] = []
    day, headed = "", False
    section: str | None = None
    for line in lines:
        bullet = _BULLET.match(line)
        # A bullet may open a section too ("- **Tasks:** renew the certificate"), never a day.
        found = _heading(bullet.group("item") if bullet else line, dated=bullet is None)
        if found is not None:
            headed = True
            if found[0] == "day":
                day, section = found[1], None
                continue
            section, item = found
        elif bullet is None or section is None:
            continue  # chatter, a line the format does not have, or a bullet before any heading
        else:
            item = bullet.group("item")
        if item:
            _add(days.setdefault(day, {}), facts, section, item)
    return [_day(date, fields) for date, fields in days.items() if fields], facts, headed


def _heading(line: str, dated: bool = True) -> tuple[str, str] | None:
    """("day", its date) or (a section, the text after its colon) when `line` opens one, else None."""
    plain = _MARKUP.sub("", line).strip()
    if not plain or len(plain) > 200:
        return None
    date = _DATE.search(plain) if dated else None
    if date is not None and len(re.findall(r"[^\W\d_]+", plain.replace(date.group(1), ""))) <= 3:
        return "day", date.group(1)
    name, *rest = _COLON.split(plain, maxsplit=1)
    name = re.sub(r"\([^)]*\)|（[^）]*）", " ", name)  # "FACTS (long-term)"
    section = _SECTIONS.get(" ".join(name.split()).casefold().rstrip("."))
    if section is None:
        return None
    return section, rest[0].strip() if rest else ""


def _add(fields: dict[str, list[Any]], facts: list[Fact], section: str, item: str) -> None:
    item = item.replace("**", "").strip()
    if guards.placeholder(item):
        return
    if section == "facts":
        fact = read_fact(item)
        if fact is not None:
            facts.append(fact)
    elif section == "technical_issues":
        problem, *solution = _SOLUTION.split(item, maxsplit=1)
        if problem.strip():
            fields.setdefault(section, []).append(TechnicalIssue(problem=problem.strip(),
                                                                 solution=(solution or [""])[0].strip()))
    elif section in TEXT_FIELDS:
        fields.setdefault(section, []).append(item)


def _day(date: str, fields: dict[str, list[Any]]) -> DailyNotes:
    return DailyNotes(date=date, **fields)


def read_fact(item: str) -> Fact | None:
    """A fact line: its parts split by `|` (or listed in a bracket before or after it), the known words of each
    part read as who said it, its tag, importance, category or the fact it replaces; the rest is the fact."""
    parts = item.split("|") if "|" in item else _bracketed(item)
    meta: dict[str, Any] = {}
    text: list[str] = []
    for part in (p.strip() for p in parts):
        if part and not _meta(part, meta):
            text.append(part)
    fact = " | ".join(text).strip()
    if guards.placeholder(fact):
        return None
    return Fact(text=fact, **meta)


_LEADING = re.compile(r"^[\[(](?P<meta>[^\])]{1,80})[\])]\s*[:\-–]?\s*(?P<text>.+)$")
_TRAILING = re.compile(r"^(?P<text>.+?)\s*[\[(](?P<meta>[^\])]{1,80})[\])]\s*\.?$")


def _bracketed(item: str) -> list[str]:
    """A fact's details in a bracket before or after it, when every word there is one: "[user, durable, 4] ..."."""
    for pattern in (_LEADING, _TRAILING):
        found = pattern.match(item)
        if found is not None:
            details = [d.strip() for d in re.split(r"[,;/]", found.group("meta")) if d.strip()]
            if details and all(_meta(detail, {}) for detail in details):
                return [*details, found.group("text")]
    return [item]


def _meta(part: str, meta: dict[str, Any]) -> bool:
    """Whether `part` is a fact's detail (and which one, into `meta`) rather than its text."""
    if re.match(r"^replaces\s*[:：]", part, re.IGNORECASE):
        meta["replaces"] = _COLON.split(part, maxsplit=1)[1].strip() or None
        return True
    word = _LABEL.sub("", part).strip().casefold()
    if word in _SOURCE_WORDS and "source" not in meta:
        meta["source"] = _SOURCE_WORDS[word]
    elif word in TAGS and "tag" not in meta:
        meta["tag"] = word
    elif (importance := _IMPORTANCE.match(word)) and "importance" not in meta:
        meta["importance"] = int(importance.group(1))
    elif word in CATEGORIES and "category" not in meta:
        meta["category"] = word
    else:
        return False
    return True
