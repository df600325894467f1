"""The page at scale (issue 36 point 6): every list is shown a page at a time (worker.web.paging.window), with
filters (outcome, channel, a search that covers held facts, a day), so no page grows with the data: 5,000 facts,
hundreds of outcomes and sessions, a year of notes; every item is reachable by the links the page itself gives,
followed with the token's cookie as a browser would."""

from __future__ import annotations

import html
import os
import re
import time
from datetime import date, timedelta

from harness.transcripts import conversation
from tests.support.web import served
from worker.memory.entries import Fact
from worker.memory.longterm import Batch, pending_path
from worker.memory.longterm.held import held_line
from worker.state.outcomes import JobOutcome, keep_outcome
from worker.web.paging import window

MAX_PAGE = 300_000  # bytes of HTML, the bound for every page


def links(body: str, label: str) -> list[str]:
    """The own-path links of a page whose text is `label` (as a browser follows them: HTML entities undone)."""
    return [
        html.unescape(url) for url, text in re.findall(r'<a href="([^"]+)"[^>]*>([^<]*)</a>', body) if text == label
    ]


def facts(count: int, prefix: str) -> list[Fact]:
    return [
        Fact(text=f"{prefix} {i}", tag="durable", importance=4, source="user", category="preference")
        for i in range(count)
    ]


def test_a_window_is_the_slice_of_its_page_with_links_that_keep_the_filters() -> None:
    shown = window(100, 250, "/memory", {"q": "port & co", "page": "2", "undo": ""})
    assert (shown.page, shown.pages, shown.start, shown.stop) == (2, 3, 100, 200)
    assert shown.previous == "/memory?q=port+%26+co" and shown.next == "/memory?q=port+%26+co&page=3"
    assert [label for label, _ in shown.links] == ["1", "2", "3"] and dict(shown.links)["2"] is None
    assert window(100, 250, "/memory", {"page": "x"}).page == 1, "not a number: the first page"
    last = window(100, 250, "/memory", {"page": "99"})
    assert (last.page, last.start, last.stop, last.next) == (3, 200, 250, None), "past the end: the last page"
    assert window(100, 0, "/memory", {}).links == () and window(100, 0, "/memory", {}).stop == 0
    assert window(10, 1000, "/", {"page": "50"}).links[0] == ("1", "/"), "page 1's link has no page number"


async def test_five_thousand_facts_are_shown_a_hundred_a_page_and_the_search_finds_held_ones(
    nanobot_home, settings_for
):
    nanobot_home.write_facts(5_000)
    memory = nanobot_home.workspace / "memory" / "MEMORY.md"
    held = Batch(facts(3, "The held fact about the garden"), "en", "2026-11-20", "telegram:2")
    pending_path(memory).write_bytes(held_line(held, time.time()))
    async with served(settings_for(memory_max_facts=5_000)) as page:
        status, first = await page.get("/memory")
        assert status == 200 and len(first.encode()) < MAX_PAGE, len(first.encode())
        assert first.count('<td class="fact" dir="auto">The user keeps fact') == 100
        shown = set(re.findall(r'<td class="fact" dir="auto">(The user keeps fact \d+)', first))
        second_url = links(first, "2")[0]
        assert second_url == "/memory?page=2"
        status, second = await page.get(second_url)  # followed with the cookie the first visit left
        on_two = set(re.findall(r'<td class="fact" dir="auto">(The user keeps fact \d+)', second))
        assert status == 200 and len(on_two) == 100 and not on_two & shown
        _, last = await page.get(links(first, "50")[0])
        assert len(set(re.findall(r'<td class="fact" dir="auto">(The user keeps fact \d+)', last))) == 100
        status, found = await page.get("/memory?q=garden")
        assert status == 200 and "0 of 5000 facts and 3 held one(s) match" in found
        assert found.count('<td class="fact" dir="auto">The held fact about the garden') == 3
        _, one = await page.get("/memory?q=port+8042")
        assert one.count('<td class="fact" dir="auto">') == 1 and "fact 42: project 294" in one


async def keep_outcomes(page, count: int) -> list[str]:
    """`count` sessions' last outcomes: every seventh failed, the others summarized or skipped."""
    redis = await page.instance.client()
    keys = [f"telegram:{1000 + n}" for n in range(count)]
    for n, key in enumerate(keys):
        status = "failed" if n % 7 == 0 else ("noop" if n % 2 else "summarized")
        await keep_outcome(redis, JobOutcome(session_key=key, status=status, detail=f"outcome of job {n}"))
    return keys


async def test_the_overview_lists_outcomes_a_page_at_a_time_failures_first_with_a_filter(nanobot_home, settings_for):
    async with served(settings_for()) as page:
        keys = await keep_outcomes(page, 300)
        status, first = await page.get("/")
        assert status == 200 and len(first.encode()) < MAX_PAGE
        rows = re.findall(r'<tr class="(\w+)">', first)
        assert len(rows) == 50 and rows[:43] == ["failed"] * 43 and "failed" not in rows[43:], "failures first"
        status, second = await page.get(links(first, "2")[0])
        one = set(re.findall(r'href="/session\?key=telegram%3A(\d+)"', first))
        two = set(re.findall(r'href="/session\?key=telegram%3A(\d+)"', second))
        assert status == 200 and len(two) == 50 and not one & two
        assert "failed" not in re.findall(r'<tr class="(\w+)">', second)
        status, failed = await page.get("/?outcome=failed")
        assert status == 200 and set(re.findall(r'<tr class="(\w+)">', failed)) == {"failed"}
        assert len(re.findall(r'<tr class="(\w+)">', failed)) == len([k for n, k in enumerate(keys) if n % 7 == 0])
        assert ">failed (43)</option>" in first and ">skipped (" in first
        _, skipped = await page.get("/?outcome=noop")
        assert set(re.findall(r'<tr class="(\w+)">', skipped)) == {"noop"}


async def test_sessions_are_listed_a_page_at_a_time_by_channel_and_recall_offers_the_recent_ones(
    nanobot_home, settings_for
):
    keys = [f"telegram:{100 + n}" for n in range(180)] + [f"cli:user{n}" for n in range(40)]
    for n, key in enumerate(keys):
        path = nanobot_home.write_session(key, conversation(1, user="hello {i}"))
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))  # the later in the list, the more recent
    async with served(settings_for()) as page:
        status, first = await page.get("/sessions")
        listed = set(re.findall(r'<td><a href="/session\?key=([^"]+)"', first))
        assert status == 200 and len(listed) == 100 and len(first.encode()) < MAX_PAGE
        _, second = await page.get(links(first, "2")[0])
        more = set(re.findall(r'<td><a href="/session\?key=([^"]+)"', second))
        assert len(more) == 100 and not listed & more
        status, cli = await page.get("/sessions?channel=cli")
        shown = re.findall(r'<td><a href="/session\?key=([^"]+)"', cli)
        assert status == 200 and len(shown) == 40 and all(key.startswith("cli%3A") for key in shown)
        assert "40 of 220 sessions" in cli
        _, found = await page.get("/sessions?q=user3")
        assert sorted(re.findall(r'<td><a href="/session\?key=cli%3A(user\d+)"', found)) == ["user3"] + [
            f"user{n}" for n in range(30, 40)
        ]
        status, recall = await page.get("/recall")
        offered = re.findall(r'<option value="([^"]+)">', recall)
        assert status == 200 and "<select" not in recall and len(offered) == 50
        assert offered[0] == "cli:user39" and "telegram:100" not in offered, "the 50 most recent, newest first"
        _, typed = await page.get("/recall?q=hello&session=telegram%3A100")
        assert 'name="session" value="telegram:100"' in typed, "a session not offered is typed"


async def test_notes_show_one_day_with_the_day_before_and_after_and_the_days_a_month_at_a_time(
    nanobot_home, settings_for
):
    memory = nanobot_home.workspace / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    first = date(2025, 11, 25)
    for d in range(365):
        day = (first + timedelta(days=d)).isoformat()
        (memory / f"{day}.md").write_text(f"# {day}\n\n## telegram:1 · 10:00\n- the note of {day}\n" * 20)
    async with served(settings_for()) as page:
        status, newest = await page.get("/notes")
        last = (first + timedelta(days=364)).isoformat()
        assert status == 200 and f"the note of {last}" in newest and len(newest.encode()) < MAX_PAGE
        assert len(re.findall(r'href="/notes\?day=[\d-]+"', newest)) == 31 + 1, "a month of days, the day before"
        before = links(newest, f"previous day ({(first + timedelta(days=363)).isoformat()})")
        status, day = await page.get(before[0])
        assert status == 200 and f"the note of {(first + timedelta(days=363)).isoformat()}" in day
        assert f"the note of {last}" not in day and links(day, f"next day ({last})")
        status, old = await page.get("/notes?day=2025-12-01")
        assert status == 200 and 'href="/notes?day=2025-12-01" aria-current="page"' in old, "its page of the list"
        assert links(old, "previous day (2025-11-30)") and "the note of 2025-12-01" in old


async def test_the_memory_page_reads_a_changed_file_again_even_edited_in_place_at_the_same_size(
    nanobot_home, settings_for
):
    """The page keeps its last reading of MEMORY.md while the file and its sidecar are unchanged; a change by
    hand (in place, the same size, as an editor may save it) is read at the next load."""
    nanobot_home.write_facts(300)
    memory = nanobot_home.workspace / "memory" / "MEMORY.md"
    async with served(settings_for()) as page:
        _, before = await page.get("/memory")
        assert "The user keeps fact 7: project 49" in before
        time.sleep(0.02)  # a later modification time than the page's reading: the clock ticks, no synchronization
        with memory.open("r+b") as file:  # in place: the same inode and size
            content = file.read()
            file.seek(0)
            file.write(content.replace(b"fact 7: project 49", b"fact 7: project 94"))
        _, after = await page.get("/memory")
        assert "The user keeps fact 7: project 94" in after and "fact 7: project 49" not in after


async def commands(redis, name: str) -> int:
    """How many times the server ran the command `name` since its statistics were reset."""
    return int(((await redis.info("commandstats")).get(f"cmdstat_{name}") or {}).get("calls", 0))


async def test_waiting_summaries_and_resting_sessions_are_listed_a_page_at_a_time_read_in_one_round_trip(
    nanobot_home, settings_for, redis
):
    """1,000 waiting records and 300 rests made `/` 361 KB and 2.6 s: one GET each, every one listed."""
    from nanobot_hooks.contract.queue import store_record
    from nanobot_hooks.contract.records import SummaryRecord
    from worker.state import budget

    nanobot_home.write_session("websocket:abc", [{"role": "user", "content": "plan the garden beds"}])
    keys = ["websocket:abc"] + [f"telegram:{100 + n}" for n in range(129)]
    for key in keys:
        await store_record(
            redis,
            SummaryRecord(
                session_key=key,
                summary="- the deploy",
                start=0,
                boundary=40,
                boundary_timestamp=None,
                messages_before=60,
                messages_after=21,
                tokens_before=40_000,
                tokens_after=9_000,
                reason="tokens",
            ),
        )
    for key in keys[:70]:
        await budget.start_rest(redis, key, "the model answered 500", 600, 3600)
    async with served(settings_for()) as page:
        await redis.config_resetstat()
        status, first = await page.get("/")
        assert await commands(redis, "get") < 20, "no GET per record or rest: one MGET each"
        assert status == 200 and "Summaries waiting for nanobot (130, " in first and "Resting sessions (70)" in first
        waiting = first.split("Summaries waiting for nanobot", 1)[1].split("</section>", 1)[0]
        resting = first.split("Resting sessions", 1)[1].split("</section>", 1)[0]
        assert waiting.count("<li>") == 50 and resting.count("<li>") == 50
        _, third = await page.get(links(waiting, "3")[0])
        rest = third.split("Summaries waiting for nanobot", 1)[1].split("</section>", 1)[0]
        assert rest.count("<li>") == 30 and "telegram%3A228" in rest
        assert "plan the garden beds</a>" in rest, "named (the web chat's first words) as the table above names them"
        _, second = await page.get(links(resting, "2")[0])
        assert second.split("Resting sessions", 1)[1].split("</section>", 1)[0].count("<li>") == 20


async def test_the_session_listing_is_kept_while_the_folder_is_unchanged_and_read_again_when_it_changes(
    nanobot_home, settings_for, monkeypatch
):
    from worker.web import names

    for n in range(30):
        nanobot_home.write_session(f"telegram:{n}", conversation(1, user="hello {i}"))
    listed = []
    real = names.list_session_keys
    monkeypatch.setattr(names, "list_session_keys", lambda folder: listed.append(folder) or real(folder))
    async with served(settings_for()) as page:
        for url in ("/sessions", "/recall", "/sessions?page=1", "/recall?q=hello"):
            assert (await page.get(url))[0] == 200
        assert len(listed) == 1, "listed once while the folder is unchanged"
        nanobot_home.write_session("cli:new", conversation(1, user="hello {i}"))
        _, body = await page.get("/sessions")
        assert len(listed) == 2 and "cli%3Anew" in body, "a new file changes the folder: listed again"


async def test_the_overview_parses_an_outcome_again_only_when_its_bytes_change(
    nanobot_home, settings_for, redis, monkeypatch
):
    """Parsing 1,000 outcomes on every load was most of the overview's time once the lists were paged."""
    from worker.state import snapshot

    parsed = []
    real = snapshot.read_outcome
    monkeypatch.setattr(snapshot, "read_outcome", lambda raw, key: parsed.append(key) or real(raw, key))
    async with served(settings_for()) as page:
        await keep_outcomes(page, 60)
        assert (await page.get("/"))[0] == 200 and len(parsed) == 60
        assert (await page.get("/?page=2"))[0] == 200 and len(parsed) == 60, "nothing parsed again"
        changed = JobOutcome(session_key="telegram:1001", status="failed", detail="the model answered 500")
        await keep_outcome(await page.instance.client(), changed)
        _, body = await page.get("/?outcome=failed")
        assert len(parsed) == 61 and "the model answered 500" in body
