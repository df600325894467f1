"""The web page's charts (worker.web.charts): the context sawtooth has a token axis from 0 with round ticks, a time
axis in the page's zone, its units named; its summary marks and the session's own figures agree on the same page
(issue 36: `prompt tokens 704 -> 324` stood under a chart of ~3,000 with nothing saying these are the replayed
history's tokens, a part of the whole prompt the chart shows). The overview's bars have a token axis too."""

from __future__ import annotations

import re
from datetime import datetime
from urllib.parse import quote
from zoneinfo import ZoneInfo

from harness.defaults import TEST_KEYS
from harness.transcripts import conversation
from tests.support.web import served
from worker.state.outcomes import JobOutcome
from worker.web.charts import context_bars, nice_top, sawtooth, time_ticks

SHANGHAI = ZoneInfo("Asia/Shanghai")
# 2026-11-28 10:00 in Shanghai, as epoch seconds: the turns of a morning, ten minutes apart.
MORNING = datetime(2026, 11, 28, 10, 0, tzinfo=SHANGHAI).timestamp()


def test_axes_have_round_ticks_from_zero_and_the_time_axis_reads_in_the_zone() -> None:
    assert nice_top(3_012) == (4_000, 1_000) and nice_top(18_000) == (20_000, 5_000) and nice_top(7) == (8, 2)
    ticks = time_ticks(MORNING, MORNING + 3600, SHANGHAI)
    assert [label for _, label in ticks] == ["10:00", "10:10", "10:20", "10:30", "10:40", "10:50", "11:00"]
    assert [label for _, label in time_ticks(MORNING, MORNING + 5 * 86400, SHANGHAI)][:2] == [
        "2026-11-29",
        "2026-11-30",
    ]


def history() -> list[dict]:
    """The issue's session: whole prompts near 3,000 tokens, and a summary that took the replayed history from 704
    to 324 tokens."""
    turns = [(0, 2_600), (600, 2_800), (1200, 3_012), (1900, 2_640), (2500, 2_900)]
    entries = [{"at": MORNING + at, "tokens": tokens} for at, tokens in turns]
    return entries + [{"at": MORNING + 1500, "applied": True, "before": 704, "after": 324}]


def test_the_sawtooth_says_what_a_summary_took_out_in_the_sessions_figures_and_the_charts() -> None:
    saw = sawtooth(history(), SHANGHAI)
    assert saw is not None and saw.top == 4_000 and saw.last == 2_900
    assert [label for _, label in saw.y_ticks] == ["0", "1,000", "2,000", "3,000", "4,000"]
    assert [label for _, label in saw.x_ticks][:3] == ["10:00", "10:10", "10:20"]
    ys = [y for y, _ in saw.y_ticks]
    assert ys == sorted(ys, reverse=True) and ys[0] == saw.plot[3], "0 at the bottom of the plot"
    [mark] = saw.marks
    assert mark.label == (
        "summary applied: the replayed history 704 → 324 tokens (−380); the whole prompt about 3,012 → 2,632"
    )
    xs = [int(point.split(",")[0]) for point in saw.points.split()]
    assert xs[2] < mark.x < xs[3] and xs == sorted(xs), "on the time axis, between the turns it parted"


async def test_the_session_page_charts_with_axes_and_its_token_figures_agree(nanobot_home, settings_for, redis):
    from nanobot_hooks.contract.queue import note_context

    key = "cli:direct"
    nanobot_home.write_session(key, conversation(6))
    await note_context(redis, [(key, entry) for entry in history()])
    outcome = JobOutcome(
        session_key=key, status="summarized", detail="messages 0..3 in 1 call(s)", tokens_before=704, tokens_after=324
    )
    await redis.set(TEST_KEYS.outcome(key), outcome.model_dump_json())
    await redis.sadd(TEST_KEYS.index("outcomes"), key)  # as the worker indexes what it keeps
    async with served(settings_for(summary_timezone="Asia/Shanghai")) as page:
        _, body = await page.get(f"/session?key={quote(key, safe='')}")
        _, overview = await page.get("/")
    for tick in ("0", "1,000", "2,000", "3,000", "4,000"):
        assert re.search(rf'<text class="tick"[^>]*>{tick}</text>', body), tick
    assert re.search(r'<text class="tick"[^>]*>10:00</text>', body), "the time axis, in the page's zone"
    assert ">tokens</text>" in body and ">time (Asia/Shanghai)</text>" in body
    assert (
        "<li>summary applied: the replayed history 704 → 324 tokens (−380); the whole prompt about 3,012 → 2,632</li>"
    ) in body
    # The session's own figures say what they count, and agree with the chart beside them.
    assert "<th>prompt tokens</th>" not in body
    assert re.search(r"<th>replayed history, tokens</th><td>704 → 324", body)
    assert "the whole prompt: about 3,012 → 2,632" in body
    # The overview's bars: a token axis, its unit named.
    assert (
        re.search(r'<text class="tick"[^>]*>0</text>', overview) and "tokens of the replayed history</text>" in overview
    )


def test_the_overviews_bars_stand_on_a_token_axis_from_zero() -> None:
    bars, height, ticks = context_bars([{"session_key": "cli:direct", "tokens_before": 704, "tokens_after": 324}])
    assert [label for _, label in ticks] == ["0", "200", "400", "600", "800"]
    assert ticks[0][0] == 190 and bars[0].before < ticks[-1][0] - 190 and height > len(bars) * 22


async def test_the_overviews_bars_are_told_apart_by_label_tooltip_link_and_a_table(nanobot_home, settings_for, redis):
    """Six web chats named "question 0 of..." read the same cut to 28 characters, with no link, key or text for a
    screen reader."""
    keys = [f"websocket:{n:04d}" for n in range(6)]
    for n, key in enumerate(keys):
        first = f"question 0 of the deploy script for the {['alpha', 'beta', 'gamma', 'delta', 'eps', 'zeta'][n]} box"
        nanobot_home.write_session(key, [{"role": "user", "content": first}])
        outcome = JobOutcome(
            session_key=key,
            status="summarized",
            detail="messages 0..3 in 1 call(s)",
            tokens_before=10_000 + n,
            tokens_after=3_000 + n,
        )
        await redis.set(TEST_KEYS.outcome(key), outcome.model_dump_json())
        await redis.sadd(TEST_KEYS.index("outcomes"), key)  # as the worker indexes what it keeps
    async with served(settings_for()) as page:
        _, overview = await page.get("/")
    chart = overview.split('<svg class="chart"', 1)[1].split("</svg>", 1)[0]
    labels = re.findall(r'<text x="0" y="\d+">([^<]+)</text>', chart)
    assert len(labels) == 6 and len(set(labels)) == 6, labels
    assert all(len(label) <= 28 for label in labels) and any(label.endswith("beta box") for label in labels)
    assert (
        "<title>question 0 of the deploy script for the gamma box (websocket:0002): 10,002 → 3,002 tokens</title>"
        in chart
    )
    assert chart.count('<a href="/session?key=websocket%3A') == 6
    table = overview.split('<table class="visually-hidden">', 1)[1].split("</table>", 1)[0]
    assert (
        '<th scope="row"><a href="/session?key=websocket%3A0005">question 0 of the deploy script for the zeta '
        "box</a></th><td>10,005</td><td>3,005</td>"
    ) in table
