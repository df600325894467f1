"""The memory page's tools a memory page's user expects (issue 46 point 7): a fact added by hand (trusted, its
provenance "added on the page"), several facts ticked and forgotten at once, MEMORY.md's facts exported with their
provenance as JSON and Markdown; and the smaller points: a skip link, labelled fields, a phone's labelled
importance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.web import FACTS, KEY, OWN_BOTTOM, OWN_TOP, made_by_jobs, served
from worker.web.limits import MAX_FACT_CHARS

ADDED = "The user's dentist is Dr. Kim in Lisbon"


@pytest.fixture
async def data(redis, nanobot_home, fake_llm, worker_deps) -> Path:
    return await made_by_jobs(redis, nanobot_home, fake_llm, worker_deps())


async def test_a_fact_added_by_hand_is_written_trusted_with_its_provenance_and_exported(data, settings_for):
    async with served(settings_for()) as page:
        status, location = await page.post(
            "/memory/add", {"csrf": await page.csrf(), "new": f"  {ADDED}\n", "group": "people", "importance": "3"}
        )
        assert status == 303 and location == "/memory?added=added", location
        written = data.read_bytes()
        assert ADDED.encode() in written and written.startswith(OWN_TOP) and written.endswith(OWN_BOTTOM)
        _, body = await page.get(location)
        assert "Added: the fact is in MEMORY.md" in body
        row = body.split(f'dir="auto">{ADDED.replace(chr(39), "&#39;")}', 1)[1].split("</tr>", 1)[0]
        assert "<td>People</td>" in row and ">3</td>" in row and "added on the page" in row, row
        status, location = await page.post(
            "/memory/add", {"csrf": await page.csrf(), "new": ADDED, "group": "people", "importance": "3"}
        )
        assert location == "/memory?added=already"
        for form in (
            {"new": "x" * (MAX_FACT_CHARS + 1), "group": "people"},
            {"new": "fine", "group": "nonsense"},
            {"new": "   ", "group": "people"},
        ):
            status, body = await page.post("/memory/add", {"csrf": await page.csrf(), **form})
            assert status == 400 and "Not added" in body, form
        async with page.client.get("/memory/export.json") as response:
            assert response.headers["Content-Disposition"] == 'attachment; filename="memory-facts.json"'
            exported = json.loads(await response.text())["facts"]
        mine = [fact for fact in exported if fact["text"] == ADDED]
        assert mine == [
            {
                "text": ADDED,
                "heading": "People",
                "importance": 3,
                "learned": mine[0]["learned"],
                "session": None,
                "added_on_the_page": True,
                "pinned": False,
            }
        ]
        assert {fact["text"] for fact in exported} == {ADDED, *FACTS}
        assert all(fact["session"] == KEY for fact in exported if fact["text"] in FACTS)
        status, markdown = await page.get("/memory/export.md")
        assert status == 200 and "## People" in markdown and f"- {ADDED} (importance 3, learned " in markdown
        assert f"{FACTS[1]} (importance 4, learned " in markdown and f"session {KEY})" in markdown


async def test_several_ticked_facts_are_forgotten_at_once(data, settings_for):
    async with served(settings_for()) as page:
        _, body = await page.get("/memory")
        assert body.count('form="bulk"') == len(FACTS) and 'action="/memory/forget-many"' in body
        async with page.client.post(
            "/memory/forget-many",
            allow_redirects=False,
            data=[("csrf", await page.csrf()), ("text", FACTS[1]), ("text", FACTS[2]), ("text", "a fact nobody has")],
        ) as response:
            location = response.headers["Location"]
        assert location == "/memory?forgot=2&of=3", location
        written = data.read_bytes()
        assert FACTS[1].encode() not in written and FACTS[2].encode() not in written and FACTS[0].encode() in written
        assert written.startswith(OWN_TOP) and written.endswith(OWN_BOTTOM)
        assert "Forgotten: 2 of the 3 fact(s) ticked" in (await page.get(location))[1]


async def test_every_page_opens_with_a_skip_link_and_its_fields_are_labelled(data, settings_for):
    async with served(settings_for()) as page:
        for url in ("/", "/memory", "/sessions", "/recall", "/notes"):
            _, body = await page.get(url)
            first = body.split("<body>", 1)[1].lstrip()
            assert first.startswith('<a class="skip" href="#content">') and '<main id="content"' in body, url
        _, sessions = await page.get("/sessions")
        assert '<label>find <input type="search" name="q"' in sessions
        _, memory = await page.get("/memory")
        assert '<span class="phone-label">importance </span>4</td>' in memory
        _, recall = await page.get("/recall")
        assert 'class="asker"' in recall
