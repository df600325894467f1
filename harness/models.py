"""Scripted behaviours of real summary models, as responders for the fake LLM (harness.fakellm).

`summary_json` is the worker's answer schema filled in; `LLMScript` answers nanobot's own turns and the worker's
summaries from one fake server, told apart by the model name (`SUMMARY_MODEL`).

`Summarizer` reads the worker's prompt the way a model would: it folds the previous summary in and adds
one line per new user message, so a chain of summaries can be followed. The other behaviours are how
real models go wrong: prose instead of JSON (and the plain lines, worker.model.lines, when those are asked for),
JSON in a fence with chatter, JSON cut half-way, refusals, a summary that forgets the previous one, an empty
answer. `echo_memory` answers the memory job: a daily note of each day's user lines and one durable fact.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from harness.fakellm import FakeLLM, FakeRequest, Reply
from worker.nanobot.config import ModelChoice

# The worker summarizes with this model name, so the fake LLM can tell its calls from nanobot's.
SUMMARY_MODEL = "summarizer"
SUMMARY_TEXT = "SUMMARY-7F3A: the user asked about the deploy script; flags and environments were explained"
BIG_PROMPT = 90_000  # over 60% of the 128000-token window
SMALL_PROMPT = 2_000
REFUSAL = "I'm sorry, I can't help with that."
_BLOCK = re.compile(r"<(previous_summary|messages)(-\w+)?[^>]*>\n?(.*?)\n?</\1\2>", re.DOTALL)
_USER_LINE = re.compile(r"^(?:\[(\d{4}-\d{2}-\d{2})[^\]]*\]\s*)?user:\s*(.+)$", re.MULTILINE)
# A user line of the memory job's prompt, `(in notes) ` in front when a daily note already has it.
_PROMPT_USER_LINE = re.compile(r"^(\(in notes\) )?\[(\d{4}-\d{2}-\d{2}) \d{2}:\d{2}\] user: (.*)$", re.MULTILINE)


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


def is_lines_request(request: FakeRequest) -> bool:
    """A notes-only call asking for plain lines (worker.model.lines), as the worker asks a model that answers prose."""
    return "DAY YYYY-MM-DD" in system_text(request)


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
        return "\n".join(lines[-self.max_lines :]) or "- nothing of note"

    def notes(self, request: FakeRequest) -> list[dict[str, object]]:
        days: dict[str, list[str]] = {}
        for date, text in user_lines(request):
            days.setdefault(date or "2026-11-20", []).append(text[:60])
        return [{"date": date, "topics": topics} for date, topics in days.items()]

    def lines(self, request: FakeRequest) -> str:
        """The notes and facts in the plain lines asked for, as a prose model writes them: a sentence before and
        after, Markdown around the headings."""
        days = "\n\n".join(
            f"**DAY {note['date']}**\n## Topics\n" + "\n".join(f"- {t}" for t in note["topics"])
            for note in self.notes(request)
        )
        facts = (
            "\n".join(
                f"- {f.get('source', 'user')} | {f.get('tag', 'durable')} | {f.get('importance', 3)} | "
                f"{f.get('category', 'other')} | {f['text']}"
                for f in self.facts
            )
            or "- None"
        )
        return f"Here are the notes from the conversation.\n\n{days}\n\n**FACTS:**\n{facts}\n\nAnything else?"

    def __call__(self, request: FakeRequest) -> Reply:
        self.calls += 1
        summary_call = is_summary_request(request)
        body: dict[str, object] = {"daily_notes": self.notes(request), "facts": self.facts}
        if summary_call:
            body = {"summary": self.summary(request), **body}
        text = json.dumps(body, ensure_ascii=False)
        if self.kind == "prose":  # prose where JSON is asked for; the plain lines when those are
            if is_lines_request(request):
                return Reply(self.lines(request))
            return Reply(self.summary(request) if summary_call else "Here are the notes: the user asked things.")
        if self.kind == "fenced":
            return Reply(f"Sure! Here is the JSON you asked for:\n```json\n{text}\n```\nLet me know if you need more.")
        if self.kind == "truncated":
            cut = text.find('"daily_notes"')
            return Reply(text[: cut + 30] if cut > 0 else text[: len(text) // 2], finish_reason="length")
        return Reply(text)


def summary_json(summary: str = "## What happened\n- the user asked about deploys", **extra: Any) -> str:
    """A well-formed answer of the summary model."""
    return json.dumps({"summary": summary, "daily_notes": [], "facts": [], **extra}, ensure_ascii=False)


def echo_memory(request: FakeRequest) -> Reply:
    """A model that notes each day's user lines as topics and remembers one fact per call."""
    system = request.messages[0]["content"]
    prompt = request.messages[-1]["content"]
    days: dict[str, list[str]] = {}
    for noted, day, text in _PROMPT_USER_LINE.findall(prompt):
        if not noted:
            days.setdefault(day, []).append(text[:60])
    notes = [{"date": day, "topics": lines, "decisions": [f"decided on {day}"]} for day, lines in days.items()]
    facts = [
        {
            "text": "The user deploys with ./deploy.sh --env prod",
            "tag": "durable",
            "importance": 4,
            "source": "user",
            "category": "configuration",
        }
    ]
    answer = {"daily_notes": notes, "facts": facts}
    if '"summary"' in system:
        answer["summary"] = "## What happened\n- " + "; ".join(t for lines in days.values() for t in lines)[:300]
    return Reply(json.dumps(answer, ensure_ascii=False))


def summarizer(llm_url: str) -> ModelChoice:
    """The worker's model choice for `SUMMARY_MODEL` at the fake LLM."""
    return ModelChoice(model=f"openai/{SUMMARY_MODEL}", api_base=llm_url, api_key="sk-fake", source="test")


class LLMScript:
    """FakeLLM responder: nanobot's calls get `prompt_tokens` as set; the worker's get a JSON summary."""

    def __init__(self) -> None:
        self.prompt_tokens = SMALL_PROMPT
        self.summary = SUMMARY_TEXT
        self.replies = 0

    def __call__(self, request: FakeRequest) -> Reply:
        if (request.body or {}).get("model") == SUMMARY_MODEL:
            return Reply(summary_json(self.summary))
        self.replies += 1
        return Reply(f"reply number {self.replies}", prompt_tokens=self.prompt_tokens)


def chat_requests(llm: FakeLLM) -> list[FakeRequest]:
    """nanobot's own turn requests (they carry its tool schemas), oldest first."""
    return [r for r in llm.requests if (r.body or {}).get("model") != SUMMARY_MODEL and (r.body or {}).get("tools")]


def system_text(request: FakeRequest) -> str:
    first = request.messages[0] if request.messages else {}
    return first.get("content") if first.get("role") == "system" and isinstance(first.get("content"), str) else ""


def history_text(request: FakeRequest) -> str:
    """Everything but the system prompt, as one string."""
    return json.dumps([m for m in request.messages if m.get("role") != "system"], ensure_ascii=False)


# The pool of answer shapes: models that ignore the JSON and the plain lines the worker asks for and answer in a
# shape of their own, to a summary call and a notes call alike, as cheap and local models do. Each notes the user's
# lines as the day's topics and states a fact from each line in the first person ("I am ...", "my ..."): what the
# worker must find in the day's notes and MEMORY.md whatever the shape.
_STATED = re.compile(r"^(?:i am|i'm|my|i have|i live)\b", re.IGNORECASE)


def _said(request: FakeRequest) -> tuple[list[str], list[str]]:
    """(the user's lines, those stating something of the user's) of the transcript the worker sent."""
    lines = [text[:80] for _, text in user_lines(request)]
    return lines, [line for line in lines if _STATED.match(line)]


def _third_person(line: str) -> str:
    """A first-person line as a model retells it: "my daughter is called Mia" -> "their daughter is called Mia"."""
    swaps = {"i am": "they are", "i'm": "they are", "my": "their", "i have": "they have", "i live": "they live"}
    for mine, theirs in swaps.items():
        if line.lower().startswith(mine + " "):
            return theirs + line[len(mine) :]
    return line


def markdown_answer(request: FakeRequest) -> Reply:
    """Markdown sections: `## Summary`, `## Daily notes`, `## Facts` with bullets; facts as "The user said: ..."."""
    lines, stated = _said(request)
    notes = "\n".join(f"- {line}" for line in lines) or "- small talk"
    facts = "\n".join(f"- The user said: {line}" for line in stated) or "- None"
    return Reply(
        f"## Summary\nThe user went through {len(lines)} things today.\n\n## Daily notes\n{notes}\n\n"
        f"## Facts\n{facts}\n"
    )


def bold_labels_answer(request: FakeRequest) -> Reply:
    """A chatty preamble, bold labels, numbered items, facts as "User mentioned: ..." and a sign-off."""
    lines, stated = _said(request)
    points = "\n".join(f"{n}. {line}" for n, line in enumerate(lines, start=1))
    facts = "\n".join(f"{n}. User mentioned: {line}" for n, line in enumerate(stated, start=1))
    return Reply(
        "Sure! Here's a quick rundown of today's conversation, with what I picked up along the way.\n\n"
        f"**Key points:**\n{points}\n\n**About the user:**\n{facts}\n\n"
        "Let me know if you'd like me to expand on anything!"
    )


def prose_answer(request: FakeRequest) -> Reply:
    """Plain labels over short paragraphs, no bullet anywhere; the fact retold in the third person."""
    lines, stated = _said(request)
    topics = "\n".join(f"The user brought up: {line}." for line in lines)
    facts = "\n".join(f"The user mentioned that {_third_person(line)}." for line in stated)
    return Reply(f"Summary of the day:\n{topics}\n\nWhat I learned about the user:\n{facts}\n")


def mixed_languages_answer(request: FakeRequest) -> Reply:
    """Headings in Chinese and German over English items; the facts' source said in Chinese."""
    lines, stated = _said(request)
    notes = "\n".join(f"* {line}" for line in lines)
    facts = "\n".join(f"- 用户说：{line}" for line in stated) or "- 无"
    return Reply(f"### 今日笔记\n{notes}\n\n**Fakten:**\n{facts}\n")


def structureless_answer(request: FakeRequest) -> Reply:
    """No structure at all: one short paragraph that names nothing the user said."""
    return Reply("The user and the assistant had a friendly chat today and covered a few everyday things.")


# The pool, by name: each shape's answerer.
ANSWER_SHAPES = {
    "markdown": markdown_answer,
    "bold-labels": bold_labels_answer,
    "prose": prose_answer,
    "mixed-languages": mixed_languages_answer,
    "structureless": structureless_answer,
}
