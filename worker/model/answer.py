"""The summarizer's answer: its schema (summary, daily notes, facts) and a defensive parse of what a model sends."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

import json_repair
from pydantic import ValidationError

from worker.errors import BadAnswer
from worker.memory.entries import SOURCES, TEXT_FIELDS, DailyNotes, Fact
from worker.text.language import CATEGORIES

log = logging.getLogger("worker.model.answer")


@dataclass
class Answer:
    summary: str
    notes: list[DailyNotes] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    prose: bool = False  # the model answered in plain text: a summary, but no notes or facts


def _schema(with_summary: bool) -> dict[str, Any]:
    """The answer's JSON schema, strict-mode ready (every property required, nothing else allowed)."""

    def strict(properties: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}

    strings = {"type": "array", "items": {"type": "string"}}
    note = strict(
        {
            "date": {"type": "string"},
            **{name: strings for name in TEXT_FIELDS},
            "technical_issues": {
                "type": "array",
                "items": strict({"problem": {"type": "string"}, "solution": {"type": "string"}}),
            },
        }
    )
    fact = strict(
        {
            "text": {"type": "string"},
            "tag": {"type": "string", "enum": ["permanent", "durable", "ephemeral", "correction"]},
            "importance": {"type": "integer"},
            "category": {"type": "string", "enum": list(CATEGORIES)},
            "replaces": {"type": ["string", "null"]},
            "source": {"type": "string", "enum": list(SOURCES)},
        }
    )
    summary = {"summary": {"type": "string"}} if with_summary else {}
    return strict(
        {**summary, "daily_notes": {"type": "array", "items": note}, "facts": {"type": "array", "items": fact}}
    )


# What a summarizing call answers, and what a notes-only call answers.
ANSWER_SCHEMA = _schema(with_summary=True)
NOTES_SCHEMA = _schema(with_summary=False)

# An answer is JSON only if it opens with JSON: bare, in a code fence, or after one short first line of chatter
# ("Here is the JSON:"). An answer that opens so is JSON, never prose: an error payload or an object of other keys
# must not become the rolling summary. Anything else is prose, even one that quotes `{"summary": ...}` or
# `{"facts": []}` further down: the quote is part of what it says. An array opens JSON only with an object in
# it, so a summary that starts with a bracketed date is prose.
_OPENING = re.compile(
    r"(?:[^\n{\[`]{1,160}\n)?"  # one short line of chatter
    r"\s*(?P<fence>```[A-Za-z]*[ \t]*\n?\s*)?"
    r"(?=\{|\[\s*[{\]])"
)
_KEYS = ("summary", "daily_notes", "facts")


def _json_text(text: str) -> str | None:
    """The JSON object an answer opens with, or None when it does not open with JSON."""
    opening = _OPENING.match(text)
    if opening is None:
        return None
    body = text[opening.end() :]
    if opening.group("fence"):
        body = body.split("```", 1)[0]
    start = body.find("{")
    if start < 0:
        return body
    body = body[start:]
    end = body.rfind("}")
    # Chatter after the object goes; a truncated object (no closing brace) is left for the repair.
    return body[: end + 1] if end > 0 else body


def opens_with_json(text: str) -> bool:
    """Whether an answer opens with JSON (bare, fenced, after a line of chatter), as parse_answer reads it."""
    return _OPENING.match(text.strip()) is not None


def parse_answer(text: str, max_chars: int, need_summary: bool = True) -> Answer:
    """The model's answer read as JSON, else as a prose summary.

    JSON (at the start, in a fence, or after a line of chatter; repaired if truncated or broken), else the text as a
    prose summary.

    Prose is read as a summary with no notes or facts (`prose=True`); whether a summary may be committed,
    prose or JSON alike, is for the guards (worker.model.guards) to decide. A notes-only call needs JSON.
    """
    cleaned = text.strip()
    if not cleaned:
        raise BadAnswer("empty answer")
    candidate = _json_text(cleaned)
    data: Any = json_repair.loads(candidate) if candidate is not None else None
    if isinstance(data, dict) and any(key in data for key in _KEYS):
        summary = data.get("summary")
        if not isinstance(summary, str) or not summary.strip():
            if need_summary:
                raise BadAnswer("the JSON answer has no summary")
            summary = ""
        answer = Answer(summary=summary.strip())
        answer.notes, bad_notes = _models(DailyNotes, data.get("daily_notes"), _lenient_note)
        answer.facts, bad_facts = _models(Fact, data.get("facts"), _lenient_fact)
        if bad_notes or bad_facts:
            log.info("dropped %d unreadable notes and %d unreadable facts of the answer", bad_notes, bad_facts)
    elif candidate is not None:
        raise BadAnswer("the answer is JSON without the fields asked for (or JSON the repair could not read)")
    elif not need_summary:
        raise BadAnswer("prose instead of the JSON notes asked for", prose=True)
    else:
        answer = Answer(summary=cleaned, prose=True)
    if len(answer.summary) > max_chars:
        raise BadAnswer(f"summary of {len(answer.summary)} characters is over {max_chars}", len(answer.summary))
    return answer


def _lenient_fact(item: dict[str, Any]) -> dict[str, Any]:
    if "importance" in item:
        # Models answer "4", 4.5 or 9 as often as 4: clamp rather than lose the fact.
        item = {**item, "importance": min(5, max(1, round(float(item["importance"]))))}
    source = str(item.get("source") or "").strip().casefold()
    # "tool result", "web page", "User" and the like: read the first word; anything else is unknown.
    source = next((known for known in SOURCES if source.startswith(known)), "tool" if "web" in source else "unknown")
    return {**item, "source": source}


def _lenient_note(item: dict[str, Any]) -> dict[str, Any]:
    """Keep every readable item of a day: one odd entry must not cost the whole day's notes."""
    cleaned: dict[str, Any] = {"date": str(item.get("date", ""))}
    for name in TEXT_FIELDS:
        values = item.get(name)
        values = values if isinstance(values, list) else [values] if values else []
        cleaned[name] = [str(v) for v in values if isinstance(v, (str, int, float)) and str(v).strip()]
    issues = []
    for issue in item.get("technical_issues") or []:
        if isinstance(issue, str) and issue.strip():
            issues.append({"problem": issue})
        elif isinstance(issue, dict) and issue.get("problem"):
            issues.append({"problem": str(issue["problem"]), "solution": str(issue.get("solution") or "")})
    cleaned["technical_issues"] = issues
    return cleaned


def _models(model: type[Any], items: Any, lenient: Any) -> tuple[list[Any], int]:
    good, bad = [], 0
    for item in items if isinstance(items, list) else []:
        try:
            if not isinstance(item, dict):
                raise TypeError("not an object")
            good.append(model.model_validate(lenient(item)))
        except (ValidationError, ValueError, TypeError):
            bad += 1
    return good, bad
