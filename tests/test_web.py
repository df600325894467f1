"""`nanobot-summary web` over data made by real jobs: each page renders what the worker left (the overview links
each session's last outcome to its page, which says why the job did nothing), forgetting a fact changes only
that fact's line of MEMORY.md and undo puts it back byte for byte, and the safety rules: conversation text is
escaped, a POST without the CSRF token or from another site is refused, read-only mode refuses actions, a
non-local bind needs the token, a local one only answers to a local Host, and no secret reaches a page."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import aiohttp
import markupsafe
import pytest

from nanobot_hooks.contract import Keys
from tests.support.environment import process_env
from tests.support.redis_server import free_port
from tests.support.web import API_KEY, FACTS, KEY, OWN_BOTTOM, OWN_TOP, QUIET, SCRIPT, make_data, remembering, served
from worker.memory.longterm import BEGIN, END, load_meta, sidecar_path
from worker.state import budget
from worker.state.outcomes import JobOutcome, load_outcome
from worker.web.guard import Guard, Refused

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["/", "/memory", "/sessions", f"/session?key={quote(KEY, safe='')}", f"/session?key={quote(QUIET, safe='')}",
         f"/recall?q=nickname&session={quote(KEY, safe='')}", "/recall?q=deploy+script"]


@pytest.fixture
async def data(redis, nanobot_home, fake_llm, worker_deps):
    """Both test sessions summarized (or not) by real jobs; returns MEMORY.md's path."""
    fake_llm.responder = remembering
    await make_data(redis, worker_deps(), nanobot_home)
    return nanobot_home.workspace / "memory" / "MEMORY.md"


async def test_the_overview_links_each_sessions_last_outcome_to_its_page_which_says_why(data, settings_for, redis):
    async with served(settings_for(summary_daily_tokens_total=50_000)) as page:
        status, body = await page.get("/")
        assert status == 200, body
        assert "No worker is running" in body  # the burst worker ended: the page says so
        # Spend today against the cap, and this month, as the job recorded them.
        month_tokens, _ = await budget.month_spend(redis, page.instance.today()[:7])
        assert month_tokens > 0 and f"{month_tokens:,} tokens</p>" in body and "of 50,000 a day" in body
        for key in (KEY, QUIET):
            assert f'href="/session?key={quote(key, safe="")}"' in body
        outcome = await load_outcome(await page.instance.client(), QUIET)
        assert outcome is not None and outcome.status == "noop" and outcome.detail
        # One click: the session's page says why its last job did nothing.
        status, session = await page.get(f"/session?key={quote(QUIET, safe='')}")
        assert status == 200 and "skipped" in session
        assert f'<p class="why">{_escaped(outcome.detail)}</p>' in session


def _escaped(text: str) -> str:
    return str(markupsafe.escape(text))


async def test_every_page_renders_real_data(data, settings_for):
    async with served(settings_for()) as page:
        for url in PAGES:
            status, body = await page.get(url)
            assert status == 200, (url, body)
        _, memory = await page.get("/memory")
        assert "The user prefers dark mode in every editor" in memory and KEY in memory
        _, recall = await page.get(f"/recall?q=nickname&session={quote(KEY, safe='')}")
        assert "nickname" in recall


def _outside(raw: bytes) -> tuple[bytes, bytes]:
    """The bytes before the managed part's begin line and after its end line: the user's own."""
    begin, end = raw.index(BEGIN.encode()), raw.index(END.encode()) + len(END)
    return raw[:begin], raw[end:]


async def test_forgetting_a_fact_changes_only_its_line_and_undo_puts_it_back_byte_for_byte(data, settings_for):
    before = data.read_bytes()
    assert before.startswith(OWN_TOP) and before.endswith(OWN_BOTTOM)
    forgotten = "The user prefers dark mode in every editor"
    async with served(settings_for()) as page:
        _, recall = await page.get(f"/recall?q=dark+mode&session={quote(KEY, safe='')}")
        assert forgotten in recall, "the recall index holds the fact before it is forgotten"
        status, location = await page.post("/memory/forget", {"csrf": await page.csrf(), "text": forgotten})
        assert status == 303 and location.startswith("/memory?undo="), location
        after = data.read_bytes()
        assert _outside(after) == _outside(before), "not a byte of the user's own lines changed"
        assert forgotten.encode() not in after and forgotten.lower() not in str(load_meta(sidecar_path(data)))
        # Only the fact's line went, with the heading it alone stood under (the worker's own rendering).
        removed = [line for line in before.split(b"\n") if line not in after.split(b"\n")]
        assert removed == [b"### Preferences", forgotten.encode()], removed
        for fact in FACTS[::2]:
            assert fact.encode() in after
        _, recall = await page.get(f"/recall?q=dark+mode&session={quote(KEY, safe='')}")
        assert forgotten not in recall, "the recall index followed MEMORY.md at once"
        status, body = await page.get(location)
        assert status == 200 and f"Forgotten: <q>{forgotten}</q>" in body
        ticket = location.split("=", 1)[1]
        status, location = await page.post("/memory/undo", {"csrf": await page.csrf(), "ticket": ticket})
        assert (status, location) == (303, "/memory?note=restored")
        assert data.read_bytes() == before, "undo puts the fact back where it was, every byte as before"
        assert forgotten.lower() in str(load_meta(sidecar_path(data))), "with its session, day and importance"
        # An undo is used once.
        status, location = await page.post("/memory/undo", {"csrf": await page.csrf(), "ticket": ticket})
        assert location == "/memory?note=gone" and data.read_bytes() == before


async def test_conversation_text_holding_markup_is_shown_as_text_on_every_page(data, settings_for):
    async with served(settings_for()) as page:
        seen = 0
        for url in PAGES:
            status, body = await page.get(url)
            assert status == 200, url
            assert "<script" not in body.lower(), f"{url} carries the conversation's markup as markup"
            seen += _escaped(SCRIPT) in body
        assert seen >= 3, "the memory, session and recall pages show the text, escaped"
        # A session key is conversation data too: one of markup is escaped in the page and the links.
        _, body = await page.get("/session?key=" + quote(f"web:{SCRIPT}", safe=""))
        assert "<script" not in body.lower()


async def test_a_post_without_the_csrf_token_or_from_another_site_is_refused(data, settings_for):
    before = data.read_bytes()
    fact = FACTS[1]
    async with served(settings_for()) as page:
        token = await page.csrf()
        assert (await page.post("/memory/forget", {"text": fact}))[0] == 403
        assert (await page.post("/memory/forget", {"text": fact, "csrf": "0" * 64}))[0] == 403
        other = {"Origin": "http://evil.example"}
        assert (await page.post("/memory/forget", {"text": fact, "csrf": token}, headers=other))[0] == 403
        cross = {"Sec-Fetch-Site": "cross-site"}
        assert (await page.post("/memory/forget", {"text": fact, "csrf": token}, headers=cross))[0] == 403
        # Another browser (no cookie of this one) cannot use this browser's token.
        async with aiohttp.ClientSession() as stranger:
            async with stranger.post(page.client.make_url("/memory/forget"), data={"text": fact, "csrf": token},
                                     allow_redirects=False) as response:
                assert response.status == 403
        assert data.read_bytes() == before
        # The same form with the token is acted on: the refusals above were the token's doing.
        assert (await page.post("/memory/forget", {"text": fact, "csrf": token}))[0] == 303
        assert data.read_bytes() != before


async def test_read_only_mode_shows_no_action_and_refuses_every_post(data, settings_for):
    before = data.read_bytes()
    async with served(settings_for(), Guard.for_bind("127.0.0.1", read_only=True)) as page:
        status, body = await page.get("/memory")
        assert status == 200 and "read-only" in body and "Forget" not in body
        token = page.guard.csrf_for(page.client.session.cookie_jar.filter_cookies(page.client.make_url("/"))
                                    ["nanobot_summary_browser"].value)
        status, text = await page.post("/memory/forget", {"text": FACTS[1], "csrf": token})
        assert status == 403 and "read-only" in text
        assert data.read_bytes() == before


async def test_a_non_local_bind_needs_the_token_for_every_page_and_action(data, settings_for):
    with pytest.raises(Refused):
        Guard.for_bind("0.0.0.0", token="short")
    guard = Guard.for_bind("0.0.0.0")
    assert guard.token and len(guard.token) >= 32 and not guard.local
    async with served(settings_for(), guard) as page:
        for url in PAGES:
            assert (await page.get(url))[0] == 401, url
        assert (await page.get("/", params={"token": "x" * 43}))[0] == 401
        assert (await page.post("/memory/forget", {"text": FACTS[1]}))[0] == 401
        # The printed URL's token becomes a cookie and leaves the address.
        async with page.client.get("/", params={"token": guard.token}, allow_redirects=False) as response:
            assert response.status == 303 and "token" not in response.headers["Location"]
        for url in PAGES:
            status, body = await page.get(url)
            assert status == 200 and guard.token not in body, url


async def test_a_local_bind_answers_only_to_a_local_host_name(data, settings_for):
    async with served(settings_for()) as page:
        assert (await page.get("/", headers={"Host": "evil.example"}))[0] == 403
        assert (await page.get("/", headers={"Host": f"localhost:{page.client.port}"}))[0] == 200


async def test_no_secret_reaches_any_page(data, settings_for, nanobot_home, fake_llm):
    config = nanobot_home.config_path.read_text(encoding="utf-8")
    nanobot_home.config_path.write_text(config.replace('"sk-fake"', f'"{API_KEY}"'), encoding="utf-8")
    guard = Guard.for_bind("192.0.2.1")  # a token, as on any non-local bind
    async with served(settings_for(), guard) as page:
        await page.get("/", params={"token": guard.token})
        secrets = [API_KEY, guard.token, guard.secret.hex()]
        for url in PAGES + ["/recall?q=key+secret", f"/recall?q=key&session={quote(KEY, safe='')}"]:
            status, body = await page.get(url)
            assert status == 200
            for secret in secrets:
                assert secret not in body, f"{url} shows a secret"
        assert API_KEY not in (await page.get("/recall?q=key+secret"))[1]


async def test_the_command_prints_a_token_url_once_for_a_non_local_bind_and_refuses_without_it(
        redis, nanobot_home, redis_url, tmp_path):
    env = process_env(nanobot_home, redis_url, config=True)
    process = subprocess.Popen([sys.executable, "-m", "worker", "web", "--host", "0.0.0.0", "--port", "0"], cwd=ROOT,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = await asyncio.to_thread(process.stdout.readline)
        found = re.search(r"http://\S+:(\d+)/\?token=(\S+)", line)
        assert found, line
        port, token = found.groups()
        # A browser keeps cookies of an address like 127.0.0.1 (aiohttp's client does when told `unsafe`).
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
            async with browser.get(f"http://127.0.0.1:{port}/memory") as response:
                assert response.status == 401
            async with browser.get(f"http://127.0.0.1:{port}/memory?token={token}") as response:
                assert response.status == 200 and token not in await response.text()
    finally:
        process.terminate()
        rest = await asyncio.to_thread(process.communicate, timeout=20)
    assert process.returncode == 0, rest
    assert token not in rest[0], "the token is printed once"


async def test_the_page_works_without_redis_and_says_so(nanobot_home, settings_for):
    settings = settings_for(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    async with served(settings) as page:
        status, body = await page.get("/")
        assert status == 200 and "Redis cannot be read" in body
        assert (await page.get("/memory"))[0] == 200
        assert (await page.get("/sessions"))[0] == 200


async def test_another_instances_sessions_and_outcomes_never_reach_a_page(data, settings_for, redis):
    """Two nanobot instances may share one Redis: the page reads its own namespace only."""
    other = Keys("someone-else")
    stranger = "telegram:999-other-instance"
    outcome = JobOutcome(session_key=stranger, status="failed", detail="OTHER-INSTANCE-DETAIL")
    await redis.set(other.outcome(stranger), outcome.model_dump_json())
    await redis.hset(other.spend(f"session:{stranger}"), mapping={"calls": 1, "prompt_tokens": 5})
    await redis.zadd(other.queue, {other.job_id(stranger): 1})
    async with served(settings_for()) as page:
        for url in PAGES:
            status, body = await page.get(url)
            assert status == 200 and "OTHER-INSTANCE-DETAIL" not in body and stranger not in body, url
        # Asked for by name, the other instance's session is one this instance has never seen.
        status, body = await page.get(f"/session?key={quote(stranger, safe='')}")
        assert "OTHER-INSTANCE-DETAIL" not in body and "No job for this session" in body and "queued" not in body
