"""The summarizer's prompt: instructions, the answer's JSON shape, and the input message."""

from __future__ import annotations

from collections.abc import Sequence

from worker.prepare import Entry

LANGUAGE_NAMES = {"zh": "Chinese (简体中文)", "ja": "Japanese (日本語)", "ko": "Korean (한국어)", "en": "English"}

INSTRUCTIONS = """\
You maintain the working memory of a personal AI assistant. The messages below are leaving the
assistant's context window. Write a new rolling summary that REPLACES the previous summary: fold
the previous summary in, then add what the new messages say. Never drop a still-relevant point of
the previous summary, and do not repeat finished details at length.

The summary is background for future turns. Use these sections (skip an empty one):
## Goals, ## What happened, ## Important details, ## Decisions, ## Open tasks.
Keep identifiers verbatim: ids, file paths, URLs, numbers, names, commands, error messages.
Never write secret values (API keys, passwords, tokens); say only that one exists and where it is set.

Also extract, for the daily notes, per calendar day of the messages (use the [YYYY-MM-DD] stamps):
topics, user preferences, decisions, tasks, technical issues with their solutions, key insights.
And long-term facts worth remembering across conversations, each tagged:
permanent (identity, lasting preferences), durable (projects, configuration, solutions),
ephemeral (true today only), correction (replaces an earlier fact: quote the old one in "replaces"),
with an importance from 1 (trivia) to 5 (the user asked to remember it)."""

ANSWER_SHAPE = """\
Answer with one JSON object and nothing else:
{"summary": "markdown, at most MAX_CHARS characters",
 "daily_notes": [{"date": "YYYY-MM-DD", "topics": [], "preferences": [], "decisions": [], "tasks": [],
                  "technical_issues": [{"problem": "", "solution": ""}], "insights": []}],
 "facts": [{"text": "", "tag": "permanent|durable|ephemeral|correction", "importance": 3,
            "category": "preferences|decisions|configuration|solutions|people|projects|other",
            "replaces": null}]}
Write every text in LANGUAGE, the language the user writes in."""


def system_prompt(language: str, max_chars: int, custom_instructions: str | None = None) -> str:
    shape = ANSWER_SHAPE.replace("MAX_CHARS", str(max_chars)).replace(
        "LANGUAGE", LANGUAGE_NAMES.get(language, "the conversation's language")
    )
    return f"{(custom_instructions or INSTRUCTIONS).strip()}\n\n{shape}"


def user_prompt(
    previous_summary: str,
    entries: Sequence[Entry],
    part: int = 1,
    parts: int = 1,
    known_facts: Sequence[str] = (),
    too_long: int | None = None,
) -> str:
    sections = []
    if previous_summary.strip():
        sections.append(f"<previous_summary>\n{previous_summary.strip()}\n</previous_summary>")
    else:
        sections.append("<previous_summary>(none yet)</previous_summary>")
    if known_facts:
        listed = "\n".join(f"- {fact}" for fact in known_facts)
        sections.append(f"<already_remembered>\n{listed}\n</already_remembered>\nDo not repeat these as facts.")
    where = f" part=\"{part} of {parts}\"" if parts > 1 else ""
    body = "\n".join(entry.text for entry in entries)
    sections.append(f"<messages{where}>\n{body}\n</messages>")
    if too_long:
        sections.append(f"Your last summary had {too_long} characters, over the limit: write a shorter one.")
    return "\n\n".join(sections)
