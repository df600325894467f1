"""The web page's safety, over data made by real jobs: conversation text (a message, a fact, a session key holding
`<script>`) is shown as text; a POST without the CSRF token, with another browser's, or from another site is
refused; read-only mode shows no action and refuses every POST; a non-local bind needs the token (generated and
printed once) for every page and action, a local one answers only to a local Host name (DNS rebinding); no API
key, token or secret reaches a page; another instance's keys on the same Redis never do."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest
from arq.constants import health_check_key_suffix

from nanobot_hooks.contract import Keys, utcnow
from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.redis_server import free_port
from tests.support.waiting import wait_until
from tests.support.web import API_KEY, FACTS, KEY, PAGES, SCRIPT, escaped, made_by_jobs, served
from tests.support.workers import running_worker
from worker.state.outcomes import JobOutcome
from worker.state.workers import publish, settings_report
from worker.web.guard import Guard, Refused
from tests.support.paths import ROOT



@pytest.fixture
async def data(redis, nanobot_home, fake_llm, worker_deps) -> Path:
    return await made_by_jobs(redis, nanobot_home, fake_llm, worker_deps())


async def test_conversation_text_holding_markup_is_shown_as_text_on_every_page(data, settings_for):
    async with served(settings_for()) as page:
        seen = 0
        for url in PAGES:
            status, body = await page.get(url)
            assert status == 200, url
            assert "<script" not in body.lower(), f"{url} carries the conversation's markup as markup"
            seen += escaped(SCRIPT) in body
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


async def test_a_redis_password_never_reaches_a_page_even_when_redis_refuses(nanobot_home, settings_for):
    password = "pw-Very-Secret-4242"
    settings = settings_for(redis_url=f"redis://user:{password}@127.0.0.1:{free_port()}/0")
    async with served(settings) as page:
        for url in PAGES:
            status, body = await page.get(url)
            assert status == 200 and password not in body, url
        _, overview = await page.get("/")
        assert "Redis cannot be read" in overview and "redis://user:***@127.0.0.1" in overview


async def test_two_pages_on_one_host_keep_a_token_each_in_one_browser(data, settings_for):
    """Two nanobot instances' pages on one machine: a browser sends a host's cookies to every port."""
    first, second = Guard.for_bind("0.0.0.0"), Guard.for_bind("0.0.0.0")
    async with served(settings_for(), first) as one, served(settings_for(), second) as two, \
            aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
        for page, guard in ((one, first), (two, second)):
            async with browser.get(page.client.make_url("/"), params={"token": guard.token}) as response:
                assert response.status == 200
        for page in (one, two):
            async with browser.get(page.client.make_url("/memory")) as response:
                assert response.status == 200, "each page still has its own token"


async def test_the_workers_settings_are_shown_without_a_credential(data, settings_for, redis, worker_deps):
    """The running worker's report (worker.state.workers.publish, at each beat) carries its settings: a setting
    named for a credential, or a URL's password, never reaches the page, even if a version ever reports one."""
    reported = {**settings_report(worker_deps().settings, "openai/summarizer", 300.0), "api_key": API_KEY,
                "sentinel_url": "redis+sentinel://:pw-Hidden-77@10.0.0.5:26379/mymaster/0"}
    async with running_worker(worker_deps()), served(settings_for()) as page:
        await wait_until(lambda: redis.exists(TEST_KEYS.queue + health_check_key_suffix), what="arq's health line")
        await publish(redis, reported, utcnow(), version="0.1.0")
        _, body = await page.get("/")
    assert "Settings it runs with" in body and "openai/summarizer" in body and "messages:10" in body
    assert API_KEY not in body and "api_key" not in body and "pw-Hidden-77" not in body
    assert "redis+sentinel://:***@10.0.0.5:26379" in body and "version 0.1.0" in body
