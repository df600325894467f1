"""The web page's safety, over data made by real jobs: conversation text (a message, a fact, a session key holding
`<script>`) is shown as text; a POST without the CSRF token, with another browser's, or from another site is
refused; read-only mode shows no action and refuses every POST; every bind, loopback included, needs the token of
the user's token file for every page and action (a client run as another Unix user reads neither), a local one
answers only to a local Host name (DNS rebinding); the first visit's redirect stays on the page and its cookie
holds no token; every answer, 413 and 500 included, has the security headers; an edit past the length cap is
refused with its text kept; bidirectional controls are shown, not obeyed; no API key, token or secret reaches a
page; another instance's keys on the same Redis never do."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from arq.constants import health_check_key_suffix

from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.redis_server import free_port
from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.records import utcnow
from tests.support.paths import ROOT
from tests.support.waiting import wait_until
from tests.support.web import API_KEY, FACTS, KEY, PAGES, SCRIPT, escaped, made_by_jobs, served
from tests.support.workers import running_worker
from worker.state.outcomes import JobOutcome
from worker.state.workers import publish, settings_report
from worker.web.app import make_app
from worker.web.command import listening
from worker.web.guard import GUARD, HEADERS, Guard, Refused
from worker.web.instance import Instance
from worker.web.limits import MAX_FACT_CHARS
from worker.web.render import BIDI


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
        # Another browser (no cookie of this one, the page's token given) cannot use this browser's CSRF token.
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {page.guard.token}"}) as stranger:
            async with stranger.post(
                page.client.make_url("/memory/forget"), data={"text": fact, "csrf": token}, allow_redirects=False
            ) as response:
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
        token = page.guard.csrf_for(
            page.client.session.cookie_jar.filter_cookies(page.client.make_url("/"))["nanobot_summary_browser"].value
        )
        status, text = await page.post("/memory/forget", {"text": FACTS[1], "csrf": token})
        assert status == 403 and "read-only" in text
        assert data.read_bytes() == before


async def test_a_non_local_bind_needs_the_token_for_every_page_and_action(data, settings_for):
    with pytest.raises(Refused):
        Guard.for_bind("0.0.0.0", token="short")
    guard = Guard.for_bind("0.0.0.0")
    assert guard.token and len(guard.token) >= 32 and not guard.local
    async with served(settings_for(), guard, login=False) as page:
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


async def test_the_command_prints_the_token_to_no_pipe_and_refuses_without_it(redis, nanobot_home, redis_url, tmp_path):
    """Started with its output in a pipe (a service's journal), the page prints its address without the token;
    the token is in the token file, made 0600 at the first start, and `--url` prints the address with it."""
    env = process_env(nanobot_home, redis_url, config=True)
    token_file = tmp_path / "state" / "nanobot-summary" / "web-token"
    command = [
        sys.executable,
        "-m",
        "worker",
        "web",
        "--host",
        "0.0.0.0",
        "--port",
        "0",
        "--token-file",
        str(token_file),
    ]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = await asyncio.to_thread(process.stdout.readline)
        found = re.search(r"listening on http://\S+:(\d+)/$", line.strip())
        assert found, line
        port, token = found.group(1), token_file.read_text(encoding="utf-8").strip()
        assert token not in line and token_file.stat().st_mode & 0o777 == 0o600
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
    assert token not in rest[0], "the token is never printed to a pipe"
    url = subprocess.run(command + ["--url"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert url.returncode == 0 and url.stdout.strip().endswith(f":0/?token={token}"), url


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
    async with (
        served(settings_for(), first) as one,
        served(settings_for(), second) as two,
        aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser,
    ):
        for page, guard in ((one, first), (two, second)):
            async with browser.get(page.client.make_url("/"), params={"token": guard.token}) as response:
                assert response.status == 200
        for page in (one, two):
            async with browser.get(page.client.make_url("/memory")) as response:
                assert response.status == 200, "each page still has its own token"


async def test_the_workers_settings_are_shown_without_a_credential(data, settings_for, redis, worker_deps):
    """The running worker's report (worker.state.workers.publish, at each beat) carries its settings: a setting
    named for a credential, or a URL's password, never reaches the page, even if a version ever reports one."""
    reported = {
        **settings_report(worker_deps().settings, "openai/summarizer", 300.0),
        "api_key": API_KEY,
        "sentinel_url": "redis+sentinel://:pw-Hidden-77@10.0.0.5:26379/mymaster/0",
    }
    async with running_worker(worker_deps()), served(settings_for()) as page:
        await wait_until(lambda: redis.exists(TEST_KEYS.queue + health_check_key_suffix), what="arq's health line")
        await publish(redis, reported, utcnow(), version="0.1.0")
        _, body = await page.get("/")
    assert "Settings it runs with" in body and "openai/summarizer" in body and "messages:10" in body
    assert API_KEY not in body and "api_key" not in body and "pw-Hidden-77" not in body
    assert "redis+sentinel://:***@10.0.0.5:26379" in body and "version 0.1.0" in body


async def test_a_local_bind_answers_nothing_without_the_token(data, settings_for):
    """Loopback is no credential: any local account reaches 127.0.0.1. Without the token no page shows a fact,
    a message or a CSRF token, and no action is taken; with it (the first-visit URL's cookie) every page works."""
    before = data.read_bytes()
    async with served(settings_for(), login=False) as page:
        for url in PAGES:
            status, body = await page.get(url)
            assert status == 401 and "needs its token" in body and "nanobot-summary web --url" in body, url
            assert escaped(FACTS[1]) not in body and 'name="csrf"' not in body and "nickname" not in body, url
        assert (await page.post("/memory/forget", {"text": FACTS[1], "csrf": "0" * 64}))[0] == 401
        assert data.read_bytes() == before
        async with page.client.get("/", params={"token": page.guard.token}, allow_redirects=False) as response:
            assert response.status == 303
        for url in PAGES:
            assert (await page.get(url))[0] == 200, url
        assert (await page.post("/memory/forget", {"text": FACTS[1], "csrf": await page.csrf()}))[0] == 303


# What the client running as another Unix user tries: read the token file, then the page without it, then
# (given the token on its standard input, as a control) the page with it.
NOBODY_CLIENT = r"""
import sys, urllib.error, urllib.request
path, base = sys.argv[1], sys.argv[2]
try:
    open(path).read()
    print("file: read")
except PermissionError:
    print("file: refused")
for url in (base + "/memory", base + "/recall?q=nickname&session=telegram%3A42"):
    try:
        with urllib.request.urlopen(url) as answer:
            print("page:", answer.status, "fact" if "Miso" in answer.read().decode() else "-")
    except urllib.error.HTTPError as error:
        print("page:", error.code, "fact" if "Miso" in error.read().decode() else "-")
forget = urllib.request.Request(base + "/memory/forget", data=b"text=The+user+prefers+dark+mode+in+every+editor")
try:
    urllib.request.urlopen(forget)
    print("forget: done")
except urllib.error.HTTPError as error:
    print("forget:", error.code)
request = urllib.request.Request(base + "/memory", headers={"Authorization": "Bearer " + sys.stdin.read().strip()})
with urllib.request.urlopen(request) as answer:
    print("with token:", answer.status)
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv to run a client as the user nobody"
)
async def test_another_unix_user_can_read_neither_the_token_file_nor_the_page(data, nanobot_home, redis_url):
    """`nanobot-summary web` as this user (root here), its defaults but the state folder (XDG_STATE_HOME), whose
    folders everyone may enter: a client run as `nobody` cannot read the token file (its mode alone keeps it), and
    the page answers it nothing (a 401 without the fact); given the token, the same client is served."""
    shared = Path(tempfile.mkdtemp(prefix="web-state-"))
    (shared / "nanobot-summary").mkdir()
    for folder in (shared, shared / "nanobot-summary"):
        folder.chmod(0o755)
    env = {**process_env(nanobot_home, redis_url, config=True), "XDG_STATE_HOME": str(shared)}
    process = subprocess.Popen(
        [sys.executable, "-m", "worker", "web", "--port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = await asyncio.to_thread(process.stdout.readline)
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert found, line
        token_file = shared / "nanobot-summary" / "web-token"
        token = token_file.read_text(encoding="utf-8").strip() if token_file.exists() else ""
        client = [
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            NOBODY_CLIENT,
            str(token_file),
            f"http://127.0.0.1:{found.group(1)}",
        ]
        result = await asyncio.to_thread(
            subprocess.run, client, input=token, capture_output=True, text=True, timeout=120
        )
    finally:
        process.terminate()
        await asyncio.to_thread(process.communicate, timeout=20)
        shutil.rmtree(shared)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "file: refused",
        "page: 401 -",
        "page: 401 -",
        "forget: 401",
        "with token: 200",
    ], result.stdout
    assert FACTS[1].encode() in data.read_bytes()


def raw_get(port: int, target: str) -> tuple[int, dict[str, str]]:
    """GET `target` as written (aiohttp's client would normalize `//host/`), the status and the headers."""
    return raw_request(port, f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())


def raw_request(port: int, request: bytes) -> tuple[int, dict[str, str]]:
    """`request`'s bytes sent as they are, the answer's status and headers."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    return int(head[0].split()[1]), {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}


async def test_the_first_visit_redirect_stays_on_the_page(data, settings_for):
    """`//evil.example/?token=...` once answered `Location: //evil.example/`: another site to a browser."""
    async with served(settings_for(), login=False) as page:
        token = page.guard.token
        for target in (
            "//evil.example/",
            "/\\evil.example/",
            "/%2F%2Fevil.example/",
            "/%5Cevil.example/",
            "/%09/evil.example/",
            "///evil.example/memory",
        ):
            status, headers = await asyncio.to_thread(raw_get, page.client.port, f"{target}?token={token}")
            location = headers["location"]
            assert status == 303 and location.startswith("/") and location[1:2] not in ("/", "\\"), (target, location)
            assert not re.search(r"[\x00-\x20\\]", location), (target, location)
        status, headers = await asyncio.to_thread(raw_get, page.client.port, f"/memory?q=x&token={token}")
        assert status == 303 and headers["location"] == "/memory?q=x"


async def test_the_sign_in_cookie_holds_no_token_and_opens_only_its_own_port(data, settings_for):
    """A browser sends a host's cookies to every port of it: the cookie is named with the port, holds a random
    sign-in of that page (never the token), and the cookie of one port opens no other page of the same token."""
    token = Guard.for_bind("127.0.0.1").token  # one user's two pages share the user's token file
    async with (
        served(settings_for(), Guard.for_bind("127.0.0.1", token=token), login=False) as one,
        served(settings_for(), Guard.for_bind("127.0.0.1", token=token), login=False) as two,
    ):
        async with one.client.get("/", params={"token": token}, allow_redirects=False) as response:
            cookie = response.cookies[f"nanobot_summary_session_{one.client.port}"]
        assert token not in cookie.value and cookie["httponly"] and cookie["samesite"] == "Strict"
        async with aiohttp.ClientSession() as other:

            async def status_of(page, port: int, value: str) -> int:
                async with other.get(
                    page.client.make_url("/memory"), headers={"Cookie": f"nanobot_summary_session_{port}={value}"}
                ) as response:
                    return response.status

            assert await status_of(one, one.client.port, cookie.value) == 200
            assert await status_of(two, one.client.port, cookie.value) == 401, "sent to the other port: no use"
            assert await status_of(two, two.client.port, cookie.value) == 401, "renamed for the other port: no use"
            assert await status_of(one, one.client.port, token) == 401, "the token itself is no cookie"


async def test_on_a_non_local_bind_the_sign_in_cookie_opens_the_page_from_the_browsers_address_only(data, settings_for):
    """A browser sends a host's cookies to every port of it: a server on another port of the page's host that the
    browser visits gets the page's cookie. On a non-local bind the cookie is bound to the browser's address, so
    replayed from another address (here 127.0.0.2, the other server's host) it opens nothing."""
    async with served(settings_for(), Guard.for_bind("0.0.0.0"), login=False) as page:
        async with page.client.get("/", params={"token": page.guard.token}, allow_redirects=False) as response:
            name = f"nanobot_summary_session_{page.client.port}"
            cookie = response.cookies[name].value
        headers = {"Cookie": f"{name}={cookie}"}

        async def status_from(address: str) -> int:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0))) as browser:
                async with browser.get(page.client.make_url("/memory"), headers=headers) as answer:
                    return answer.status

        assert await status_from("127.0.0.1") == 200, "the browser that opened the address"
        assert await status_from("127.0.0.2") == 401, "the cookie replayed from another address"


async def test_every_answer_carries_the_security_headers_413_and_500_included(data, settings_for):
    async with served(settings_for()) as page:
        csrf = await page.csrf()
        async with page.client.post(
            "/memory/edit", data={"csrf": csrf, "text": FACTS[1], "new": "x" * 70_000}
        ) as response:
            assert response.status == 413 and "nothing was changed" in await response.text()
            assert all(response.headers.get(name) == value for name, value in HEADERS.items()), response.headers
        for url, status in (("/no-such-page", 404), ("/", 200)):
            async with page.client.get(url) as response:
                assert response.status == status and response.headers.get("Content-Security-Policy"), url
    # An unexpected failure of a handler: a route of the real application that raises.
    app = make_app(Instance.load(settings_for()), Guard.for_bind("127.0.0.1"))

    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("a bug")

    app.router.add_get("/broken", broken)
    async with TestClient(
        TestServer(app, host="127.0.0.1"), headers={"Authorization": f"Bearer {app[GUARD].token}"}
    ) as client:
        async with client.get("/broken") as response:
            assert response.status == 500 and "went wrong" in await response.text()
            assert all(response.headers.get(name) == value for name, value in HEADERS.items()), response.headers


# Requests aiohttp's parser refuses with a 400 of its own, before the application (and its middleware) sees them.
MALFORMED = {
    "a request line that is no HTTP": b"GARBAGE\r\n\r\n",
    "a method with a bad character": b"G(T / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "a header line without a colon": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nno colon here\r\n\r\n",
    "a header name with a space": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Name: x\r\n\r\n",
    "a header line past 8190 bytes": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",
    "a reflected <script> in the method": b"<script>alert(1)</script> / HTTP/1.1\r\n\r\n",
}


async def test_aiohttps_own_400_for_a_malformed_request_carries_the_security_headers(settings_for, nanobot_home):
    """The page as `nanobot-summary web` serves it (its runner, not the test server), asked over a raw socket."""
    runner = await listening(make_app(Instance.load(settings_for()), Guard.for_bind("127.0.0.1")), "127.0.0.1", 0)
    try:
        port = runner.addresses[0][1]
        for what, request in MALFORMED.items():
            status, headers = await asyncio.to_thread(raw_request, port, request)
            assert status == 400, what
            missing = {name: value for name, value in HEADERS.items() if headers.get(name.lower()) != value}
            assert not missing, (what, missing)
        # A well-formed request through the same runner: the application's own answer, headers and all.
        status, headers = await asyncio.to_thread(raw_get, port, "/")
        assert status == 401 and headers["content-security-policy"] == HEADERS["Content-Security-Policy"]
    finally:
        await runner.cleanup()


async def test_an_edit_past_the_length_cap_is_refused_and_keeps_the_typed_text(data, settings_for):
    before = data.read_bytes()
    pasted = "The user pasted a whole page " + "and more words " * 3_900  # 58,529 characters
    async with served(settings_for()) as page:
        status, body = await page.post("/memory/edit", {"csrf": await page.csrf(), "text": FACTS[1], "new": pasted})
        assert status == 400 and f"at most {MAX_FACT_CHARS:,}" in body and f"{len(pasted.strip()):,} characters" in body
        assert f'<textarea name="new" rows="8" aria-label="the fact\'s new text">{pasted}</textarea>' in body
        assert data.read_bytes() == before
        longest = "The user keeps " + "x" * (MAX_FACT_CHARS - 15)
        status, location = await page.post(
            "/memory/edit", {"csrf": await page.csrf(), "text": FACTS[1], "new": longest}
        )
        assert status == 303 and longest.encode() in data.read_bytes()


async def test_bidi_controls_from_a_conversation_are_shown_not_obeyed(data, settings_for, nanobot_home):
    """`telegram:\u202e1337` was listed as `telegram:7331`: each control is shown as a mark; a form keeps the
    exact key."""
    key = "telegram:\u202e1337"
    nanobot_home.write_session(key, [{"role": "user", "content": "hello \u2067there\u2069 \u202eevil"}])
    async with served(settings_for()) as page:
        for url in ("/sessions", "/recall", "/session?key=" + quote(key, safe="")):
            status, body = await page.get(url)
            assert status == 200 and "telegram:[U+202E]1337" in body, url
            text = re.sub(r"<[^>]*>", "", body)
            assert not BIDI.search(text), (url, [c for c in text if BIDI.match(c)])
        _, body = await page.get("/recall")
        assert f'value="{key}"' in body, "the form still names the session exactly"


# The operator's actions on a session (worker.web.actions): each changes the worker's queue, its rests or MEMORY.md.
ACTIONS = ["/session/summarize", "/session/retry", "/session/end-rest", "/session/forget-learned"]


async def test_the_session_actions_need_the_token_and_the_csrf_token_and_are_refused_read_only(
    data, settings_for, redis
):
    """Summarize now, retry, end rest and forget-what-it-taught: nothing happens without the token (401), without
    this browser's CSRF token or from another site (403), or read-only (403, and no button is shown)."""
    from worker.state import budget

    failed = JobOutcome(session_key=KEY, status="failed", detail="the model answered 500")
    await redis.set(TEST_KEYS.outcome(KEY), failed.model_dump_json())
    await budget.start_rest(redis, KEY, failed.detail, 600, 3600)
    memory = data.read_bytes()

    async def nothing_changed() -> None:
        assert await redis.zcard(TEST_KEYS.queue) == 0, "no job queued"
        assert await budget.rest_of(redis, KEY) is not None, "the rest goes on"
        assert data.read_bytes() == memory, "MEMORY.md is as it was"

    async with served(settings_for(), login=False) as page:
        for url in ACTIONS:
            assert (await page.post(url, {"key": KEY}))[0] == 401, url
    async with served(settings_for(), Guard.for_bind("127.0.0.1", read_only=True)) as page:
        for url in ["/", f"/session?key={quote(KEY, safe='')}"]:
            _, body = await page.get(url)
            assert not any(f'action="{action}"' in body for action in ACTIONS), url
        browser = page.client.session.cookie_jar.filter_cookies(page.client.make_url("/"))["nanobot_summary_browser"]
        for url in ACTIONS:
            status, text = await page.post(url, {"key": KEY, "csrf": page.guard.csrf_for(browser.value)})
            assert status == 403 and "read-only" in text, url
        await nothing_changed()
    async with served(settings_for()) as page:
        token = await page.csrf()
        for url in ACTIONS:
            assert (await page.post(url, {"key": KEY}))[0] == 403, url
            assert (await page.post(url, {"key": KEY, "csrf": "0" * 64}))[0] == 403, url
            for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
                assert (await page.post(url, {"key": KEY, "csrf": token}, headers=headers))[0] == 403, url
        await nothing_changed()
        # The same forms with the token are acted on: the refusals above were the guard's doing.
        for url in ACTIONS:
            status, location = await page.post(url, {"key": KEY, "csrf": token})
            assert status == 303 and location.startswith("/session?key="), (url, status, location)
        assert await redis.zcard(TEST_KEYS.queue) == 1 and await budget.rest_of(redis, KEY) is None
        assert data.read_bytes() != memory
