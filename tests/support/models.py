"""Scripted behaviours of real summary models, as responders for the fake LLM (tests.support.fakellm).

`Summarizer` reads the worker's prompt the way a model would: it folds the previous summary in and adds
one line per new user message, so a chain of summaries can be followed. The other behaviours are how
real models go wrong: prose instead of JSON, JSON in a fence with chatter, JSON cut half-way, refusals,
a summary that forgets the previous one, an empty answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from tests.support.fakellm import FakeRequest, Reply

REFUSAL = "I'm sorry, I can't help with that."
_BLOCK = re.compile(r"<(previous_summary|messages)(-\w+)?[^>]*>\n?(.*?)\n?</\1\2>", re.DOTALL)
_USER_LINE = re.compile(r"^(?:\[(\d{4}-\d{2}-\d{2})[^\]]*\]\s*)?user:\s*(.+)$", re.MULTILINE)


def previous_summary(request: FakeRequest) -> str:
    """The previous summary the worker sent ('' for none)."""
    blocks = {name: body for name, _, body in _BLOCK.findall(request.last_user_text)}
    text = blocks.get("previous_summary", "").strip()
    return "" if text == "(none yet)" else text


def user_lines(request: FakeRequest) -> list[tuple[str | None, str]]:
    """(date, text) of each user message in the transcript the worker sent."""
    blocks = {name: body for name, _, body in _BLOCK.findall(request.last_user_text)}
    return [(date or None, text.strip()) for date, text in _USER_LINE.findall(blocks.get("messages", ""))]


def is_summary_request(request: FakeRequest) -> bool:
    """A summarizing call (it carries a previous-summary block); a notes-only call does not."""
    return "<previous_summary" in request.last_user_text


@dataclass
class Summarizer:
    """An obedient model. `kind` picks how it answers: "json", "prose", "fenced" (JSON in a fence between two
    sentences), "truncated" (JSON cut half-way through its notes), "forgetful" (drops the previous summary)."""

    kind: str = "json"
    max_lines: int = 40
    facts: list[dict[str, object]] = field(default_factory=list)
    calls: int = 0

    def summary(self, request: FakeRequest) -> str:
        kept = [] if self.kind == "forgetful" else previous_summary(request).splitlines()
        new = [f"- asked: {text[:80]}" for _, text in user_lines(request)]
        lines = [line for line in kept if line.strip()] + new
        return "\n".join(lines[-self.max_lines:]) or "- nothing of note"

    def notes(self, request: FakeRequest) -> list[dict[str, object]]:
        days: dict[str, list[str]] = {}
        for date, text in user_lines(request):
            days.setdefault(date or "2026-11-20", []).append(text[:60])
        return [{"date": date, "topics": topics} for date, topics in days.items()]

    def __call__(self, request: FakeRequest) -> Reply:
        self.calls += 1
        summary_call = is_summary_request(request)
        body: dict[str, object] = {"daily_notes": self.notes(request), "facts": self.facts}
        if summary_call:
            body = {"summary": self.summary(request), **body}
        text = json.dumps(body, ensure_ascii=False)
        if self.kind == "prose":
            return Reply(self.summary(request) if summary_call else "Here are the notes: the user asked things.")
        if self.kind == "fenced":
            return Reply(f"Sure! Here is the JSON you asked for:\n```json\n{text}\n```\nLet me know if you need more.")
        if self.kind == "truncated":
            cut = text.find('"daily_notes"')
            return Reply(text[:cut + 30] if cut > 0 else text[: len(text) // 2], finish_reason="length")
        return Reply(text)
