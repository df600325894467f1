"""Forget means forget (worker.web.memory.forget_everywhere): after a fact is forgotten the page says where else
the worker keeps its text (the day's notes, the session's archive in the recall index) and takes it out there too
on request; then neither the real recall tool nor the page's Recall returns it. nanobot's session file keeps it."""

from __future__ import annotations

import re
from urllib.parse import quote

from tests.support.forgetting import FACT, KEY, QUERY, SAID, therapist_remembered
from tests.support.web import served


async def test_forget_everywhere_leaves_nothing_the_recall_tool_or_the_page_can_return(
    redis, nanobot_home, fake_llm, worker_deps, settings_for, monkeypatch
):
    tool = await therapist_remembered(redis, nanobot_home, fake_llm, worker_deps(), monkeypatch)
    memory_dir = nanobot_home.workspace / "memory"
    recall = f"/recall?q=therapist+Rowe&session={quote(KEY, safe='')}"
    async with served(settings_for()) as page:
        status, location = await page.post("/memory/forget", {"csrf": await page.csrf(), "text": FACT})
        assert status == 303 and FACT.encode() not in (memory_dir / "MEMORY.md").read_bytes()
        status, body = await page.get(location)
        assert status == 200 and "the daily notes of 2026-11-20: 1 line(s)" in body, body
        assert "<q>dr rowe therapist thursdays</q>" in body, "the words it looked for"
        assert re.search(r"archive of 1 session\(s\): <a href=\"/session\?key=telegram%3A42\">", body), body
        assert 'action="/memory/forget-everywhere"' in body and "they are nanobot's" in body
        assert "Thursdays" in await tool.execute(query=QUERY), "a forget alone leaves the notes"
        status, location = await page.post("/memory/forget-everywhere", {"csrf": await page.csrf(), "text": FACT})
        found = re.fullmatch(r"/memory\?everywhere=1&lines=(\d+)&passages=(\d+)&live=0", location)
        assert status == 303 and found and int(found[1]) >= 1 and int(found[2]) >= 1, location
        status, body = await page.get(location)
        assert "Forgotten everywhere the worker keeps it" in body and "session files still hold" in body
        answered = await tool.execute(query=QUERY)
        assert "Thursdays" not in answered and answered.startswith("Nothing found"), answered
        status, body = await page.get(recall)
        assert status == 200 and "Thursdays" not in body and "Nothing found for" in body, body
    assert not any(b"Rowe" in day.read_bytes() for day in memory_dir.glob("????-??-??.md"))
    assert SAID.encode() in nanobot_home.session_file(KEY).read_bytes(), "the session file is nanobot's"


async def test_forget_everywhere_refuses_a_text_too_short_to_aim(nanobot_home, settings_for):
    async with served(settings_for()) as page:
        status, body = await page.post("/memory/forget-everywhere", {"csrf": await page.csrf(), "text": " a "})
        assert status == 400 and "Nothing removed" in body


def test_the_sentence_after_forget_everywhere_counts_the_messages_kept_out_before_a_summary_covers_them() -> None:
    from worker.web.memory import everywhere_said

    said = everywhere_said({"everywhere": "1", "lines": "2", "passages": "0", "live": "1"})
    assert said is not None and "2 line(s) of the daily notes" in said
    assert "1 message(s) holding it that no summary covered yet stay out of the recall index" in said
    assert "no summary covered" not in (everywhere_said({"everywhere": "1", "lines": "2", "passages": "3"}) or "x")
    assert everywhere_said({"everywhere": "1", "lines": "2", "passages": "3", "live": "x"}) is None
