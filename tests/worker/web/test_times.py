"""Times on the web page: one pure function writes every moment (worker.text.clock) in the instance's named zone,
named on every page, with how long ago beside it, and every length of time as `4 min 55 s`; no page shows ISO
times with microseconds, `+00:00`, arq's zoneless `Nov-28 07:35:13` or `295.3 s`. And the refresh toggle: off by
default, a meta refresh (the CSP allows no script) on the overview and a session's page when turned on."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote
from zoneinfo import ZoneInfo

import pytest
from arq.constants import health_check_key_suffix

from harness.defaults import TEST_KEYS
from tests.support.waiting import wait_until
from tests.support.web import KEY, PAGES, made_by_jobs, served
from tests.support.workers import running_worker
from worker.state import budget
from worker.text.clock import duration, in_zone, when
from worker.web.guard import HEADERS
from worker.web.render import moment_html, refresh

NOW = datetime(2026, 11, 28, 7, 35, 13, 123456, tzinfo=timezone.utc)
SHANGHAI = ZoneInfo("Asia/Shanghai")
# What no page may show: ISO with microseconds, a UTC offset, arq's zoneless stamp, seconds past 10 with a tenth.
NOT_SHOWN = {
    "microseconds": re.compile(r"\d{2}:\d{2}:\d{2}\.\d"),
    "an offset": re.compile(r"\d{2}:\d{2}[+-]\d{2}:\d{2}"),
    "arq's stamp": re.compile(r"\b[A-Z][a-z]{2}-\d{2} \d{2}:\d{2}:\d{2}"),
    "seconds with a tenth": re.compile(r"\b\d{2,}\.\d+ s\b"),
}


def test_a_length_of_time_reads_in_its_two_largest_units() -> None:
    assert duration(295.3) == "4 min 55 s"
    assert duration(0.4) == "0.4 s" and duration(3.0) == "3 s" and duration(59.6) == "1 min"
    assert duration(7500) == "2 h 5 min" and duration(3600) == "1 h" and duration(2 * 86400 + 4 * 3600) == "2 d 4 h"
    assert duration(None) == "—" and duration(0.04) == "under 0.1 s"


def test_a_moment_reads_in_the_named_zone_beside_how_long_ago_it_was() -> None:
    for value in (
        NOW - timedelta(minutes=3, seconds=12),
        (NOW - timedelta(minutes=3, seconds=12)).isoformat(),
        (NOW - timedelta(minutes=3, seconds=12)).timestamp(),
        (NOW - timedelta(minutes=3, seconds=12)).replace(tzinfo=None).isoformat(),
    ):
        found = when(value, SHANGHAI, NOW)
        assert found is not None, value
        assert (found.absolute, found.relative) == ("2026-11-28 15:32:01", "3 min 12 s ago"), value
        assert found.iso == "2026-11-28T07:32:01Z"
    soon = when(NOW - timedelta(seconds=1.6), ZoneInfo("UTC"), NOW)
    assert soon is not None and soon.relative == "2 s ago", "a moment from now in whole seconds"
    later = when(NOW + timedelta(hours=2, minutes=5), ZoneInfo("UTC"), NOW)
    assert later is not None and later.relative == "in 2 h 5 min" and later.absolute == "2026-11-28 09:40:13"
    assert when("Nov-28 07:35:13", SHANGHAI, NOW) is None and when(None, SHANGHAI, NOW) is None
    # A job's own text (a rest's end in its outcome) names the zone it is written in.
    assert in_zone(NOW, SHANGHAI) == "2026-11-28 15:35:13 Asia/Shanghai"
    assert in_zone(NOW, None) == "2026-11-28 07:35:13 UTC"
    assert (
        str(moment_html(NOW, SHANGHAI, NOW))
        == '<time datetime="2026-11-28T07:35:13Z">2026-11-28 15:35:13</time> <small class="ago">(just now)</small>'
    )
    assert str(moment_html("<b>", SHANGHAI, NOW)) == "&lt;b&gt;", "a value that is no moment is text, escaped"


@pytest.fixture
async def data(redis, nanobot_home, fake_llm, worker_deps) -> Path:
    return await made_by_jobs(redis, nanobot_home, fake_llm, worker_deps(memory_write="idle"))


async def test_every_page_names_the_zone_and_writes_each_moment_and_length_one_way(
    data, settings_for, redis, worker_deps
):
    rest = await budget.start_rest(redis, KEY, "the model answered 500", 600, 3600)
    assert rest is not None
    urls = PAGES + ["/memory?held=1"]
    async with running_worker(worker_deps()), served(settings_for(summary_timezone="Asia/Shanghai")) as page:
        await wait_until(lambda: redis.exists(TEST_KEYS.queue + health_check_key_suffix), what="arq's health line")
        for url in urls:
            status, body = await page.get(url)
            assert status == 200, url
            assert 'times in <span class="zone">Asia/Shanghai</span>' in body, url
            shown = {name: pattern.findall(body) for name, pattern in NOT_SHOWN.items() if pattern.search(body)}
            assert shown == {}, (url, shown)
        _, session = await page.get(f"/session?key={quote(KEY, safe='')}")
        until = rest.until.astimezone(SHANGHAI).strftime("%Y-%m-%d %H:%M:%S")
        assert re.search(
            rf'Resting until <time datetime="[^"]+Z">{until}</time> <small class="ago">\(in \d+ min', session
        )
        assert re.search(r"it ran (under 0\.1|\d+(\.\d)?) s", session), "the job's time, as a length"
        _, overview = await page.get("/")
        assert f"{until}</time>" in overview, "the resting sessions' list"
        assert re.search(r'</time> <small class="ago">\((just now|[^)]+ ago)\)</small></td>', overview), "outcomes"


def test_the_refresh_toggle_is_off_by_default_and_keeps_the_pages_own_address() -> None:
    off = refresh("/", {"outcome": "failed", "page": "2"})
    assert off is not None and off.seconds is None and off.toggle == "/?outcome=failed&page=2&refresh=10"
    on = refresh("/", {"outcome": "failed", "page": "2", "refresh": "10"})
    assert on is not None and on.seconds == 10 and on.toggle == "/?outcome=failed&page=2"
    assert on.target == "/?outcome=failed&page=2&refresh=10"
    # An action's answer is not said again by a reload; another page has no toggle.
    session = refresh("/session", {"key": "telegram:42", "done": "queued", "n": "3"})
    assert session is not None and session.toggle == "/session?key=telegram%3A42&refresh=10"
    after = refresh("/session", {"key": "telegram:42", "done": "queued", "refresh": "10"})
    assert after is not None and after.target == "/session?key=telegram%3A42&refresh=10", "said once, not reloaded"
    assert refresh("/memory", {"refresh": "10"}) is None
    assert refresh("/", {"refresh": "0"}).seconds is None, "only the page's own interval"


async def test_the_overview_refreshes_itself_only_when_asked_and_no_script_is_allowed(data, settings_for):
    async with served(settings_for()) as page:
        _, body = await page.get("/")
        assert 'http-equiv="refresh"' not in body and 'href="/?refresh=10"' in body
        async with page.client.get("/?refresh=10") as response:
            body = await response.text()
            assert response.headers["Content-Security-Policy"] == HEADERS["Content-Security-Policy"]
        assert '<meta http-equiv="refresh" content="10; url=/?refresh=10">' in body and "<script" not in body
        assert 'href="/">refreshing every 10 s: stop</a>' in body
        _, memory = await page.get("/memory?refresh=10")
        assert 'http-equiv="refresh"' not in memory, "a page one types or edits on never reloads under one's hands"
