"""Memory that never depends on the model's format (issue 42): a pool of differently shaped answerers
(harness.models.ANSWER_SHAPES), each through a real worker and `nanobot-summary enqueue --wait` on a direct chat.
Whatever the shape, the day's notes hold the chat's topics and MEMORY.md the fact the user stated; a model with
no structure at all leaves the user's own lines (the fallback), and status and doctor say so, and why."""

from __future__ import annotations

import asyncio
from datetime import date, datetime, time, timedelta

import pytest

from harness.environment import process_env
from harness.fakellm import Reply
from harness.models import ANSWER_SHAPES, summary_json
from harness.transcripts import conversation
from tests.support.commands import check, doctor, run_in_process
from tests.support.workers import run_burst, running_worker, summarize_now
from worker.memory.notes import VERBATIM_HEADING, is_noted, noted_spans
from worker.state.outcomes import load_outcome
from worker.summarize.daily import daily_summaries

KEY = "cli:direct"
SAID = [
    "I am allergic to peanuts",
    "help me plan the trip to Lisbon in March",
    "my daughter is called Mia",
    "what documents does a passport renewal need",
    "thanks, that is all",
]
ANSWER = (
    "Here is what I found. " + "Lisbon in March is mild, around 17 degrees by day; book the tram tours early, "
    "and the passport office asks for the old passport, a photo and the form. " * 3
)


def chat() -> list[dict[str, str]]:
    moment = datetime(2026, 11, 20, 9, 0)
    messages = []
    for i, text in enumerate(SAID):
        messages.append({"role": "user", "content": text, "timestamp": (moment + timedelta(minutes=2 * i)).isoformat()})
        messages.append(
            {"role": "assistant", "content": ANSWER, "timestamp": (moment + timedelta(minutes=2 * i + 1)).isoformat()}
        )
    return messages


@pytest.mark.parametrize("shape", list(ANSWER_SHAPES))
async def test_each_answer_shape_leaves_the_days_topics_and_the_users_fact(
    shape, nanobot_home, fake_llm, redis, redis_url, deps_for, capsys
):
    fake_llm.responder = ANSWER_SHAPES[shape]
    nanobot_home.write_session(KEY, chat())
    env = process_env(nanobot_home, redis_url, config=True)
    async with running_worker(deps_for()):
        done = await asyncio.to_thread(run_in_process, capsys, "enqueue", "--wait", "--timeout", "60", KEY, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"summarized {KEY}" in done.stdout, done.stdout
    memory = nanobot_home.workspace / "memory"
    notes = (memory / "2026-11-20.md").read_text(encoding="utf-8")
    assert "trip to Lisbon in March" in notes and "passport renewal" in notes, notes
    assert noted_spans(memory, KEY, "2026-11-20")
    facts = (memory / "MEMORY.md").read_text(encoding="utf-8") if (memory / "MEMORY.md").exists() else ""
    if shape == "structureless":
        # The fallback: the user's own lines, with their times, marked verbatim; no fact taken from nobody's words.
        assert f"### {VERBATIM_HEADING}\n- 09:00 I am allergic to peanuts\n" in notes
        assert "by=fallback" in notes and "Here is what I found" not in notes and "peanuts" not in facts
        assert "notes: fallback (the model's answer had no notes)" in done.stdout
        status = " ".join((await asyncio.to_thread(run_in_process, capsys, "status", env=env)).stdout.split())
        assert "MEMORY: memory runs on the fallback for model openai/fake-model: it answered neither JSON" in status
        level, _ = check(
            (await doctor(capsys, nanobot_home, redis_url)).stdout,
            "daily notes: 1 of 1 span(s) in the day files written in the last 7 days were noted",
        )
        assert level == "warn"
    else:
        assert "by=fallback" not in notes and "+1 sections" in done.stdout, done.stdout
        assert "peanuts" in facts and "Mia" in facts, facts
        assert "Here's a quick rundown" not in notes and "Let me know" not in notes


async def test_a_span_whose_answers_hold_no_notes_is_asked_again_once_then_noted_by_the_fallback(
    nanobot_home, fake_llm, redis, deps_for
):
    """A model that answers the JSON asked for, with no notes in it: the span stays un-noted (nothing marks it),
    the daily run asks again, and once that answer holds none either the fallback writes the user's lines. Then it
    is noted for good: a later run pays for nothing."""
    fake_llm.default = Reply(summary_json())  # a summary, no daily notes, no facts
    start = datetime.combine(date.today(), time(0, 1))
    messages = conversation(15, start=start, user="question {i} about the invoice INV-{i}")
    nanobot_home.write_session("telegram:42", messages)
    deps = deps_for()
    first = (await summarize_now(redis, deps, "telegram:42", "tokens")).outcome
    assert first is not None and first.status == "summarized"
    assert "notes: none yet (the model's answer had no notes; asked again at the next run)" in first.detail
    memory, day = nanobot_home.workspace / "memory", start.date().isoformat()
    assert noted_spans(memory, "telegram:42", day) == [] and not (memory / f"{day}.md").exists()
    await daily_summaries({"deps": deps, "redis": redis})
    await run_burst(deps)
    second = await load_outcome(redis, "telegram:42")
    assert second is not None and "notes: fallback (the model's answer had no notes)" in second.detail, second.detail
    notes = (memory / f"{day}.md").read_text(encoding="utf-8")
    assert "- 00:01 question 0 about the invoice INV-0" in notes and "question 14 about the invoice INV-14" in notes
    spans = noted_spans(memory, "telegram:42", day)
    assert all(is_noted(m["timestamp"], spans) for m in messages)
    calls = len(fake_llm.requests)
    assert calls == 2, "the summary, then one notes call of the daily run"
    await daily_summaries({"deps": deps, "redis": redis})
    await run_burst(deps)
    assert len(fake_llm.requests) == calls, "every message is noted: nothing is asked again"
