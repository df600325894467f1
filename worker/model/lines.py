"""The notes and facts as plain lines, the format any model follows.

Asked for when a model will not answer JSON (worker.summarize.notes_only), and read tolerantly into the same entries as
the JSON answer.

The shape asked for: a `DAY YYYY-MM-DD` line per day, a heading per note field (`TOPICS:` ...) with one `- ` bullet
per item, an issue as `problem => solution`, and a `FACTS:` heading whose bullets read
`who | tag | importance | category | the fact`. Read tolerantly: Markdown around headings (`## Topics`,
`**Decisions:**`), the language's own note headings, numbered or starred bullets, chatter around the lines or a
code fence around them, a fact's parts in any order or in brackets. Read too, whatever shape a model writes
instead: sections under the usual names (notes, key points, about the user, ...) as headings, bold or plain labels,
items as bullets, numbered items or short paragraphs, and a fact's source said in words ("The user said: ...").
A fact whose source is not named is `unknown`, which long-term memory never takes (worker.summarize.remember)."""

from __future__ import annotations

import re
from typing import Any

from worker.errors import BadAnswer
from worker.memory.entries import SOURCES, TEXT_FIELDS, DailyNotes, Fact, TechnicalIssue
from worker.model import guards
from worker.model.answer import Answer, opens_with_json, parse_answer
from worker.text.language import CATEGORIES, LANGUAGES, NOTE_FIELDS

# The headings asked for, in the order asked; the parser reads these and the synonyms below.
HEADINGS = {
    "topics": "TOPICS",
    "preferences": "PREFERENCES",
    "decisions": "DECISIONS",
    "tasks": "TASKS",
    "technical_issues": "ISSUES",
    "insights": "INSIGHTS",
}
FACTS = "FACTS"
TAGS = ("permanent", "durable", "ephemeral", "correction")


def _section_names() -> dict[str, str]:
    """Every heading read as a section: the ones asked for, plain English variants, each language's own."""
    names = {word.casefold(): field for field, word in HEADINGS.items()}
    names.update({field.replace("_", " "): field for field in NOTE_FIELDS})
    names.update(
        {
            "topic": "topics",
            "user preferences": "preferences",
            "preference": "preferences",
            "decision": "decisions",
            "task": "tasks",
            "open tasks": "tasks",
            "todo": "tasks",
            "issue": "technical_issues",
            "problems": "technical_issues",
            "technical issues and solutions": "technical_issues",
            "key insights": "insights",
            "insight": "insights",
        }
    )
    for language in LANGUAGES.values():
        names.update({heading.casefold(): field for field, heading in language.note_headings.items()})
    names.update(
        {
            word: "facts"
            for word in (
                "facts",
                "fact",
                "long-term facts",
                "long term facts",
                "long-term memory",
                "事实",
                "长期事实",
                "事實",
                "事実",
                "사실",
            )
        }
    )
    # What models write when they do not follow the shape asked for: a day's notes under a name of their own
    # (read as topics), the facts under another.
    names.update({word: "topics" for word in _NOTES_WORDS})
    names.update({word: "facts" for word in _FACTS_WORDS})
    names.update(
        {
            word: "summary"
            for word in (
                "summary",
                "overview",
                "tl;dr",
                "tldr",
                "résumé",
                "zusammenfassung",
                "resumen",
                "摘要",
                "总结",
                "概要",
                "要約",
                "요약",
            )
        }
    )
    return names


_NOTES_WORDS = (
    "notes",
    "note",
    "daily notes",
    "daily note",
    "day notes",
    "notes for today",
    "today's notes",
    "todays notes",
    "key points",
    "main points",
    "key takeaways",
    "takeaways",
    "highlights",
    "today",
    "summary of the day",
    "day summary",
    "daily summary",
    "summary of today",
    "what happened",
    "what happened today",
    "topics discussed",
    "discussion",
    "discussed",
    "conversation notes",
    "session notes",
    "key topics",
    "main topics",
    "themes",
    "notizen",
    "tagesnotizen",
    "stichpunkte",
    "notes du jour",
    "points clés",
    "notas",
    "notas del día",
    "puntos clave",
    "笔记",
    "今日笔记",
    "每日笔记",
    "要点",
    "今日要点",
    "メモ",
    "今日のメモ",
    "메모",
)
_FACTS_WORDS = (
    "about the user",
    "what i learned about the user",
    "what we learned about the user",
    "learned about the user",
    "user profile",
    "profile",
    "user facts",
    "facts about the user",
    "things to remember",
    "to remember",
    "remember",
    "worth remembering",
    "memory",
    "memories",
    "key facts",
    "personal facts",
    "personal details",
    "user information",
    "user info",
    "user details",
    "fakten",
    "über den nutzer",
    "über den benutzer",
    "faits",
    "à propos de l'utilisateur",
    "hechos",
    "sobre el usuario",
    "关于用户",
    "用户信息",
    "用户资料",
    "ユーザーについて",
    "사용자 정보",
)


_SECTIONS = _section_names()
_BULLET = re.compile(r"^\s*(?:[-*•·+]|\d{1,2}[.)])\s+(?P<item>\S.*)$")
_DATE = re.compile(r"(?<!\d)(\d{4}-\d{2}-\d{2})(?!\d)")
_MARKUP = re.compile(r"[#*_`>]")
_COLON = re.compile(r"\s*[:：]\s*")
_SOLUTION = re.compile(r"\s*(?:=>|⇒|→|\bsolution\s*[:：])\s*", re.IGNORECASE)
_IMPORTANCE = re.compile(r"^(?:importance\s*)?([1-5])(?:\s*/\s*5)?$")
_LABEL = re.compile(r"^(?:who|source|tag|kind|importance|category|group)\s*[:=]\s*", re.IGNORECASE)
_SOURCE_WORDS = {
    **{word: word for word in SOURCES},
    "the user": "user",
    "the assistant": "assistant",
    "tool result": "tool",
    "web page": "tool",
    "web": "tool",
}


def shape(language_name: str) -> str:
    """The answer's shape, for the system prompt."""
    fields = "\n".join(
        f"{HEADINGS[field]}:\n- {'the problem => its solution' if field == 'technical_issues' else '...'}"
        for field in NOTE_FIELDS
    )
    return (
        f"Answer in plain text lines, no JSON, no table. For each calendar day of the messages:\n"
        f"DAY YYYY-MM-DD\n{fields}\n"
        f"Then, once, the long-term facts, one per line:\n{FACTS}:\n"
        f"- who | tag | importance | category | the fact\n"
        f"who: {', '.join(SOURCES)} (who stated it); tag: {', '.join(TAGS)}; importance: 1 to 5; "
        f'category: {", ".join(CATEGORIES)}. A correction ends with "| replaces: the old fact".\n'
        f"Leave out a heading with nothing under it. Keep the headings in English; write every other text in "
        f"{language_name}, the language the user writes in."
    )


def parse_lines(text: str, truncated: bool = False) -> Answer:
    """The notes and facts of a lines answer, or of whatever shape a model wrote instead.

    The notes and facts of a lines answer (JSON too, when the model sent JSON after all), or of whatever shape a model
    wrote instead: sections under markdown headings, bold or plain labels of the usual names, bullets, numbered items or
    short paragraphs under them; bullets without any heading are the day's topics.

    Raises BadAnswer for an empty answer, a refusal, an error text or a placeholder, and with `prose=True` for
    text with neither a heading nor a bullet (the model follows no format). A `truncated` answer (cut at the
    token limit) loses its last line, which may end half-way."""
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


# A line of chatter around the notes ("Let me know if...", "Hope this helps!"): never an item, and it ends a section.
_CHATTER = re.compile(
    r"(?i)^\W*(?:let me know|hope (?:this|that) helps|feel free|is there anything|anything else"
    r"|if you (?:need|want|have|would)|here (?:is|are)|sure[,!. ]|certainly|of course|happy to help"
    r"|i hope|thanks|thank you)"
)


def _read(lines: list[str]) -> tuple[list[DailyNotes], list[Fact], bool]:
    """The days' notes, the facts, and whether the text had a structure (a heading, or bullets)."""
    days: dict[str, dict[str, list[Any]]] = {}
    facts: list[Fact] = []
    day, headed = "", False
    section: str | None = None
    bulleted = False  # the section has bullets: a plain line after them is chatter, and ends it
    loose: list[str] = []  # bullets before any heading
    for line in lines:
        bullet = _BULLET.match(line)
        # A bullet may open a section too ("- **Tasks:** renew the certificate"), never a day.
        found = _heading(bullet.group("item") if bullet else line, dated=bullet is None)
        if found is not None:
            headed = True
            date, opened, item = found
            if date is not None:
                day = date
            section, bulleted = opened, False
            if opened is None:
                continue
        elif not line.strip():
            continue
        elif bullet is not None:
            if section is None:
                loose.append(bullet.group("item"))
                continue
            item, bulleted = bullet.group("item"), True
        elif line[0].isspace() and bulleted:
            continue  # a bullet's wrapped continuation
        elif section is None or bulleted or _CHATTER.match(line):
            section = None  # chatter, or a line the format does not have: what follows is no item of the section
            continue
        else:
            item = line.strip()  # a short paragraph under a heading
        if item and section is not None:
            _add(days.setdefault(day, {}), facts, section, item)
    _summary_as_notes(days, [] if headed else loose)
    return [_day(date, fields) for date, fields in days.items() if fields], facts, headed or bool(loose)


def _summary_as_notes(days: dict[str, dict[str, list[Any]]], loose: list[str]) -> None:
    """A summary section beside the notes repeats them and goes.

    Alone (or bullets without any heading, `loose`), it is the day's notes."""
    summary = [fields.pop("summary", []) for fields in days.values()]
    if any(fields for fields in days.values()):
        return
    for fields, items in zip(list(days.values()), summary, strict=True):
        if items:
            fields["topics"] = items
    if loose:
        days.setdefault("", {})["topics"] = [item for item in (_item(i) for i in loose) if item is not None]


def _heading(line: str, dated: bool = True) -> tuple[str | None, str | None, str] | None:
    """The day and section a heading line opens, and the text after its colon; else None.

    (a day's date or None, a section or None, the text after its colon) when `line` opens a day, a section or both ("##
    Notes for 2026-11-20"), else None."""
    plain = _MARKUP.sub("", line).strip()
    if not plain or len(plain) > 200:
        return None
    date = _DATE.search(plain) if dated else None
    name, *rest = _COLON.split(plain, maxsplit=1)
    name = re.sub(r"\([^)]*\)|（[^）]*）", " ", name)  # "FACTS (long-term)"
    if date is not None:
        name = name.replace(date.group(1), " ")
    # "1. Daily notes", "📝 Notes", "Notes for", "Facts:" as the model wrote them
    name = re.sub(r"^[\W\d_]*(?=[^\W\d_])|\s+(?:for|of|on|from|du|del|vom|am)\s*$", "", " ".join(name.split()))
    section = _SECTIONS.get(name.casefold().rstrip(". "))
    if date is not None and (section is not None or len(re.findall(r"[^\W\d_]+", name)) <= 3):
        return date.group(1), section, rest[0].strip() if rest and section is not None else ""
    if section is None:
        return None
    return None, section, rest[0].strip() if rest else ""


def _item(item: str) -> str | None:
    """An item's text, or None for a placeholder, a refusal or an error text in its place."""
    item = item.replace("**", "").replace("__", "").strip()
    if guards.placeholder(item) or guards.unusable(item) is not None:
        return None
    return item


def _add(fields: dict[str, list[Any]], facts: list[Fact], section: str, item: str) -> None:
    found = _item(item)
    if found is None:
        return
    item = found
    if section == "facts":
        fact = read_fact(item)
        if fact is not None:
            facts.append(fact)
    elif section == "technical_issues":
        problem, *solution = _SOLUTION.split(item, maxsplit=1)
        if problem.strip():
            fields.setdefault(section, []).append(
                TechnicalIssue(problem=problem.strip(), solution=(solution or [""])[0].strip())
            )
    elif section in TEXT_FIELDS or section == "summary":
        fields.setdefault(section, []).append(item)


def _day(date: str, fields: dict[str, list[Any]]) -> DailyNotes:
    return DailyNotes(date=date, **fields)


def read_fact(item: str) -> Fact | None:
    """A fact line.

    Its parts split by `|` (or listed in a bracket before or after it), the known words of each part read as who said
    it, its tag, importance, category or the fact it replaces; the rest is the fact."""
    parts = item.split("|") if "|" in item else _bracketed(item)
    meta: dict[str, Any] = {}
    text: list[str] = []
    for part in (p.strip() for p in parts):
        if part and not _meta(part, meta):
            text.append(part)
    fact = " | ".join(text).strip()
    if "source" not in meta:
        said = said_by(fact)
        if said is not None:
            meta["source"], fact = said
    if guards.placeholder(fact) or guards.unusable(fact) is not None:
        return None
    return Fact(text=fact, **meta)


_VERBS = (
    r"(?:has\s+)?(?:said|says|mentioned|mentions|stated|states|told\s+(?:me|us|the\s+assistant)|shared"
    r"|noted|explained|wrote|writes|reported|confirmed|indicated|revealed|clarified|added|asked\s+(?:me\s+|us\s+)?"
    r"to\s+remember)"
)
# Who said a fact, in words: "The user said: ...", "User mentioned that ...", "User: ...", the user's own first
# person in quotes; in the other languages models write too.
_SAID = [
    ("user", re.compile(rf"(?i)^(?:the\s+)?user\s+{_VERBS}(?:\s+that)?\s*[:,\-–—]?\s*(?P<text>.+)$")),
    ("user", re.compile(rf"(?i)^(?:they|he|she)\s+{_VERBS}(?:\s+that)?\s*[:,\-–—]?\s*(?P<text>.+)$")),
    ("user", re.compile(r"(?i)^(?:the\s+)?user\s*(?:\(\w+\)\s*)?[:：\-–—]\s*(?P<text>.+)$")),
    ("user", re.compile(r"(?i)^(?:according\s+to|from|per)\s+the\s+user\s*[:,\-–—]?\s*(?P<text>.+)$")),
    (
        "user",
        re.compile(
            r"^[\"“„«「『]\s*(?P<text>(?i:i|i'm|i’m|i've|i’ve|i'll|my|me|we|our|we're)\b[^\"”»」』]+)"
            r"[\"”»」』]\s*(?:[-–—,]\s*(?i:the\s+)?(?i:user))?\.?$"
        ),
    ),
    ("user", re.compile(r"^用户(?:说|提到|表示|称|告诉|说过|提到过)(?:了)?[:：，,]?\s*(?P<text>.+)$")),
    ("user", re.compile(r"^ユーザー(?:は|が)?(?:言った|述べた|話した)[:：、]?\s*(?P<text>.+)$")),
    (
        "user",
        re.compile(
            r"(?i)^(?:der|die)\s+(?:nutzer|benutzer)(?:in)?\s+(?:sagte|erwähnte|hat\s+gesagt|"
            r"hat\s+erwähnt)[:,]?\s*(?:dass\s+)?(?P<text>.+)$"
        ),
    ),
    (
        "user",
        re.compile(
            r"(?i)^l['’]utilisat(?:eur|rice)\s+a\s+(?:dit|mentionné|indiqué|précisé)\s*(?:que\s+|qu['’])?"
            r"[:,]?\s*(?P<text>.+)$"
        ),
    ),
    (
        "user",
        re.compile(
            r"(?i)^(?:el|la)\s+usuari[oa]\s+(?:dijo|mencionó|comentó|indicó)\s*(?:que\s+)?[:,]?\s*"
            r"(?P<text>.+)$"
        ),
    ),
    ("assistant", re.compile(rf"(?i)^(?:the\s+)?assistant\s+{_VERBS}(?:\s+that)?\s*[:,\-–—]?\s*(?P<text>.+)$")),
    (
        "tool",
        re.compile(
            r"(?i)^(?:according\s+to\s+)?(?:a|the)\s+(?:tool|web\s+page|search\s+result)\b[^:]{0,40}"
            r"[:,]\s*(?P<text>.+)$"
        ),
    ),
]
_FIRST_PERSON = re.compile(r"(?i)^(?:i|i'm|i’m|i've|i’ve|i'll|my|me|mine)\b")


def said_by(text: str) -> tuple[str, str] | None:
    """(who, the fact) when the fact says in words who stated it.

    The user's own first person stays theirs ("The user said: my ticket is ABC-1234" -> "The user said: my ticket is
    ABC-1234", as a reader understands it)."""
    for source, pattern in _SAID:
        found = pattern.match(text.strip())
        if found is None:
            continue
        fact = found.group("text").strip().strip('"“”„«»「」『』').strip()
        if not fact:
            return None
        if source == "user" and _FIRST_PERSON.match(fact):
            fact = f"The user said: {fact}"
        return source, fact[0].upper() + fact[1:]
    return None


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
