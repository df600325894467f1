"""`nanobot-summary web` in a real browser: headless Chromium from Debian's packages driven by Selenium through
Debian's chromium-driver (no browser download). Over data made by real jobs: a newcomer finds from the overview,
in one click, why a session's last job did nothing; a fact is forgotten and put back with the page's buttons;
a fact holding `<script>` is shown as text and runs nothing; a form posted from another site is refused by the
browser's own rules and the page's; recall answers as the chosen session; a browser without the token sees nothing
and `//evil.example/?token=` stays on the page; no page scrolls sideways at 390 px, nor with a 130-character
session key at 1280 px. Each page is saved as a PNG
(NANOBOT_WEB_SCREENSHOTS names the folder, e.g. docs; the test's own temporary folder otherwise).

scripts/test installs chromium and chromium-driver when they are missing and it runs as root (as CI does); without
them the test is skipped, saying so."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from harness.defaults import TEST_KEYS
from tests.support.web import FACTS, PAGES, QUIET, SCRIPT, made_by_jobs, served
from worker.state.outcomes import JobOutcome

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
selenium = pytest.importorskip("selenium", reason="selenium is not installed (the test extra: pip install '.[test]')")
pytestmark = [
    pytest.mark.skipif(
        not (CHROMIUM and DRIVER),
        reason="no chromium and chromium-driver on PATH (Debian: apt-get install chromium chromium-driver; "
        "scripts/test installs them when it runs as root)",
    ),
    pytest.mark.slow,  # a real browser and the page's process: seconds each
]

from selenium.common.exceptions import NoAlertPresentException, WebDriverException  # noqa: E402
from selenium.webdriver import Chrome, ChromeOptions  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Chrome]:
    options = ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        f"--user-data-dir={tmp_path / 'chromium'}",
    ):
        options.add_argument(flag)
    driver = Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def shots(tmp_path: Path) -> Callable[[Chrome, str], None]:
    folder = Path(os.environ.get("NANOBOT_WEB_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)

    def take(driver: Chrome, name: str) -> None:
        assert driver.save_screenshot(str(folder / f"web-{name}.png"))

    return take


async def in_browser(step: Callable[..., Any], *args: Any) -> Any:
    """A blocking Selenium step in a thread, so the page's server (on this loop) can answer it."""
    return await asyncio.to_thread(step, *args)


def no_alert(driver: Chrome) -> bool:
    try:
        _ = driver.switch_to.alert  # the property raises when no alert is open
    except NoAlertPresentException:
        return True
    return False


def overview_to_why(driver: Chrome, base: str, take: Callable[[Chrome, str], None]) -> str:
    driver.get(base + "/")
    take(driver, "overview")
    charts = driver.find_elements(By.CSS_SELECTOR, "svg.chart")
    if charts:
        driver.execute_script("arguments[0].scrollIntoView()", charts[0])
        take(driver, "overview-chart")
        driver.execute_script("window.scrollTo(0, 0)")
    why = after_click(driver, driver.find_element(By.LINK_TEXT, QUIET), "p.why")
    take(driver, "session")
    return why


def after_click(driver: Chrome, button: Any, wanted: str) -> str:
    """Click a form's button and wait for the next page; its element `wanted` (CSS), or the page's text.

    The old document is marked before the click and the wait ends when a document without the mark has loaded.
    Selenium's `staleness_of` is not used: while the page navigates chromedriver may answer a check on the old
    element with "Node with given id does not belong to the document" (a WebDriverException, not the stale-element
    error it catches), which failed this test on a busy machine. Errors during the navigation only retry the check."""
    driver.execute_script("window.summaryTestBeforeClick = true")
    button.click()
    WebDriverWait(driver, 20, ignored_exceptions=(WebDriverException,)).until(new_page_loaded)
    found = driver.find_elements(By.CSS_SELECTOR, wanted)
    return found[0].text if found else driver.find_element(By.TAG_NAME, "body").text


def new_page_loaded(driver: Chrome) -> bool:
    return bool(
        driver.execute_script(
            "return window.summaryTestBeforeClick === undefined && document.readyState === 'complete'"
        )
    )


def forget_on_page(driver: Chrome, base: str, fact: str) -> str:
    driver.get(base + "/memory")
    row = driver.find_element(By.XPATH, f"//tr[td[@class='fact' and normalize-space()='{fact}']]")
    return after_click(driver, row.find_element(By.XPATH, ".//button[normalize-space()='Forget']"), ".notice")


def click_undo(driver: Chrome) -> str:
    return after_click(driver, driver.find_element(By.XPATH, "//button[normalize-space()='Undo']"), ".notice")


def memory_page(driver: Chrome, base: str, take: Callable[[Chrome, str], None]) -> tuple[list[str], bool]:
    driver.get(base + "/memory")
    take(driver, "memory")
    return [cell.text for cell in driver.find_elements(By.CSS_SELECTOR, "td.fact")], no_alert(driver)


def recall_as(driver: Chrome, base: str, session: str, query: str, take: Callable[[Chrome, str], None]) -> str:
    driver.get(base + "/recall")
    driver.find_element(By.NAME, "q").send_keys(query)
    asker = driver.find_element(By.NAME, "session")  # a text input offering the recent sessions (a datalist)
    asker.clear()
    asker.send_keys(session)
    answer = after_click(driver, driver.find_element(By.XPATH, "//form[@class='search']//button"), "pre.answer")
    take(driver, "recall")
    return answer


async def test_a_newcomer_reads_why_forgets_a_fact_undoes_it_and_recalls(
    redis, nanobot_home, fake_llm, worker_deps, settings_for, browser, shots
):
    memory = await made_by_jobs(redis, nanobot_home, fake_llm, worker_deps())
    before = memory.read_bytes()
    async with served(settings_for()) as page:
        base = str(page.client.make_url("")).rstrip("/")
        await in_browser(browser.get, page.first_visit)  # the address `nanobot-summary web` prints
        why = await in_browser(overview_to_why, browser, base, shots)
        assert why and why in (await page.get(f"/session?key={QUIET}"))[1]
        facts, quiet = await in_browser(memory_page, browser, base, shots)
        assert FACTS[0] in facts and quiet, "the fact holding <script> is text, and nothing ran"
        notice = await in_browser(forget_on_page, browser, base, FACTS[1])
        assert notice.startswith("Forgotten") and FACTS[1].encode() not in memory.read_bytes()
        assert "Forget everywhere" in notice, "the notice says where else the text may live"
        await in_browser(shots, browser, "memory-forgotten")
        assert "back as it was" in await in_browser(click_undo, browser)
        assert memory.read_bytes() == before
        answer = await in_browser(recall_as, browser, base, "telegram:42", "nickname", shots)
        assert SCRIPT in answer, answer
        for name in ("sessions", "notes"):
            await in_browser(browser.get, f"{base}/{name}")
            await in_browser(shots, browser, name)


EVIL = """<!doctype html><form method="post" action="{target}/memory/forget">
<input type="hidden" name="text" value="{fact}"><input type="hidden" name="csrf" value="{csrf}">
<button id="go">win a prize</button></form>"""


async def test_a_form_posted_from_another_site_changes_nothing(
    redis, nanobot_home, fake_llm, worker_deps, settings_for, browser
):
    memory = await made_by_jobs(redis, nanobot_home, fake_llm, worker_deps())
    before = memory.read_bytes()
    async with served(settings_for()) as page:
        base = str(page.client.make_url("")).rstrip("/")
        await in_browser(browser.get, page.first_visit)  # the browser has the page's cookies
        # Even a site that somehow learned a valid token of another browser is refused.
        evil = web.Application()
        html = EVIL.format(target=base, fact=FACTS[1], csrf=await page.csrf())

        async def lure(request: web.Request) -> web.Response:
            return web.Response(text=html, content_type="text/html")

        evil.router.add_get("/", lure)
        server = TestServer(evil, host="localhost")
        await server.start_server()
        try:
            await in_browser(browser.get, str(server.make_url("/")))
            text = await in_browser(lambda: after_click(browser, browser.find_element(By.ID, "go"), "main"))
        finally:
            await server.close()
        # The browser sends no SameSite=Strict cookie with another site's form: no token (401), or, were the
        # token somehow there, no browser cookie for the CSRF token (403).
        assert "needs its token" in text or "Refused" in text, text
        assert memory.read_bytes() == before


async def test_a_browser_without_the_token_sees_nothing_and_the_first_visit_stays_on_the_page(
    redis, nanobot_home, fake_llm, worker_deps, settings_for, browser
):
    await made_by_jobs(redis, nanobot_home, fake_llm, worker_deps())
    async with served(settings_for(), login=False) as page:
        base = str(page.client.make_url("")).rstrip("/")
        await in_browser(browser.get, base + "/memory")
        text = await in_browser(lambda: browser.find_element(By.TAG_NAME, "body").text)
        assert "needs its token" in text and FACTS[1] not in text
        # `//evil.example/` is a path of this page, and the redirect that drops the token keeps it one.
        for target in ("//evil.example/", "/\\evil.example/"):
            await in_browser(browser.get, f"{base}{target}?token={page.guard.token}")
            assert (await in_browser(lambda: browser.current_url)).startswith(base + "/"), target
        await in_browser(browser.get, base + "/memory")
        assert FACTS[1] in await in_browser(lambda: browser.find_element(By.TAG_NAME, "body").text)


LONG_KEY = "websocket:" + "3356daf50c1e4f7b9a54" * 6  # 130 characters and no place a line may break


def widths(
    driver: Chrome, base: str, urls: list[str], width: int, take: Callable[[Chrome, str], None] | None = None
) -> dict[str, int]:
    """Each page's document width in a window `width` CSS pixels wide (a phone's, emulated by Chromium itself);
    each page saved by `take` as `<width>-<n>-<page>`."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 844, "deviceScaleFactor": 1, "mobile": width < 700},
    )
    found = {}
    for n, url in enumerate(urls):
        driver.get(base + url)
        found[url] = driver.execute_script("return document.documentElement.scrollWidth")
        if take is not None:
            take(driver, f"{width}-{n:02d}-{url.split('?')[0].strip('/') or 'overview'}")
    return found


def actions_off_screen(driver: Chrome, base: str, width: int) -> list[str]:
    """The memory page's buttons and Edit links that do not lie whole inside the window."""
    driver.get(base + "/memory")
    return driver.execute_script(
        "return [...document.querySelectorAll('button, details.edit summary')].filter(e => {"
        " const r = e.getBoundingClientRect(); return r.left < 0 || r.right > arguments[0]; })"
        ".map(e => e.textContent.trim())",
        width,
    )


def narrow_fields(driver: Chrome, base: str, urls: list[str], width: int) -> dict[str, list[str]]:
    """Each page's text and search fields narrower than half the window (a phone's squeezed box shows a few
    letters of what is typed), by their names."""
    found = {}
    for url in urls:
        driver.get(base + url)
        narrow = driver.execute_script(
            "return [...document.querySelectorAll('input[type=search], input[type=text]')]"
            ".filter(e => e.offsetParent !== null && e.getBoundingClientRect().width < arguments[0] / 2)"
            ".map(e => e.name || e.id)",
            width,
        )
        if narrow:
            found[url] = narrow
    return found


async def test_every_page_fits_a_phone_and_a_long_key_fits_a_desktop(
    redis, nanobot_home, fake_llm, worker_deps, settings_for, browser, shots
):
    """At 390 px no page scrolls sideways, every action on the memory page is on the screen and no field is squeezed
    to a few letters; one 130-character
    session key (listed, outcome and all) pushes nothing off a 1280 px screen."""
    await made_by_jobs(redis, nanobot_home, fake_llm, worker_deps())
    nanobot_home.write_session(LONG_KEY, [{"role": "user", "content": "hello from the web chat"}])
    outcome = JobOutcome(
        session_key=LONG_KEY,
        status="failed",
        detail="the model answered 500 three times: https://example.invalid/" + "very-long-path-segment-" * 6,
    )
    await redis.set(TEST_KEYS.outcome(LONG_KEY), outcome.model_dump_json())
    await redis.sadd(TEST_KEYS.index("outcomes"), LONG_KEY)  # as the worker indexes what it keeps
    urls = PAGES + [f"/session?key={quote(LONG_KEY, safe='')}", f"/recall?q=hello&session={quote(LONG_KEY, safe='')}"]
    async with served(settings_for()) as page:
        base = str(page.client.make_url("")).rstrip("/")
        await in_browser(browser.get, page.first_visit)
        phone = await in_browser(widths, browser, base, urls, 390, shots)
        off = await in_browser(actions_off_screen, browser, base, 390)
        narrow = await in_browser(narrow_fields, browser, base, urls, 390)
        await in_browser(shots, browser, "phone-memory")
        desktop = await in_browser(widths, browser, base, urls, 1280, shots)
    assert {url: px for url, px in phone.items() if px > 390} == {}, phone
    assert off == [], off
    assert narrow == {}, narrow
    assert {url: px for url, px in desktop.items() if px > 1280} == {}, desktop


def click_action(driver: Chrome, base: str, url: str, button: str) -> str:
    """Open `url`, click the button named `button` (opening its confirmation first when it has one) and return
    the notice of the page that answers."""
    driver.get(base + url)
    found = driver.find_element(By.XPATH, f'//button[normalize-space()="{button}"]')
    if not found.is_displayed():  # inside a closed <details>: its summary opens it
        found.find_element(By.XPATH, "ancestor::details/summary").click()
    return after_click(driver, found, ".notice")


async def test_an_operator_retries_a_failed_job_ends_a_rest_summarizes_now_and_forgets_what_a_session_taught(
    redis, nanobot_home, fake_llm, worker_deps, settings_for, browser, shots
):
    from tests.support.web import KEY
    from worker.state import budget

    memory = await made_by_jobs(redis, nanobot_home, fake_llm, worker_deps())
    failed = JobOutcome(session_key=QUIET, status="failed", detail="the model answered 500 three times")
    await redis.set(TEST_KEYS.outcome(QUIET), failed.model_dump_json())
    await budget.start_rest(redis, KEY, "the model answered 500", 600, 3600)
    session = f"/session?key={quote(KEY, safe='')}"
    async with served(settings_for()) as page:
        base = str(page.client.make_url("")).rstrip("/")
        await in_browser(browser.get, page.first_visit)
        retried = await in_browser(click_action, browser, base, "/?outcome=failed", "Retry")
        assert retried.startswith("Queued again"), retried
        assert (await redis.zcard(TEST_KEYS.queue)) == 1
        ended = await in_browser(click_action, browser, base, session, "End rest")
        assert ended.startswith("Rest ended") and await budget.rest_of(redis, KEY) is None, ended
        now = await in_browser(click_action, browser, base, session, "Summarize now")
        assert now.startswith("Queued, but no worker is running") and (await redis.zcard(TEST_KEYS.queue)) == 2, now
        await in_browser(shots, browser, "session-actions")
        forgot = await in_browser(click_action, browser, base, session, "Forget this session's facts")
        assert forgot.startswith(f"Forgotten: {len(FACTS)} fact(s)"), forgot
        assert not any(fact.encode() in memory.read_bytes() for fact in FACTS)


def reloads_by_itself(driver: Chrome, url: str) -> bool:
    """Whether the page at `url` loads again with no click (its document marked, the mark gone within 40 s)."""
    driver.get(url)
    driver.execute_script("window.summaryTestBeforeClick = true")
    WebDriverWait(driver, 40, ignored_exceptions=(WebDriverException,)).until(new_page_loaded)
    return driver.current_url == url


async def test_the_overview_refreshes_itself_in_chromium_once_asked_under_a_csp_that_allows_no_script(
    nanobot_home, settings_for, browser
):
    async with served(settings_for()) as page:
        base = str(page.client.make_url("")).rstrip("/")
        await in_browser(browser.get, page.first_visit)
        link = await in_browser(lambda: browser.find_element(By.CSS_SELECTOR, "a.refresh").get_attribute("href"))
        assert link == f"{base}/?refresh=10", link
        assert await in_browser(reloads_by_itself, browser, link)


# "The user lives in Haifa and works there", in Hebrew, with a right-to-left mark after the Latin name.
HEBREW = (
    "\u05d4\u05de\u05e9\u05ea\u05de\u05e9 \u05d2\u05e8 \u05d1-Haifa\u200f \u05d5\u05e2\u05d5\u05d1\u05d3 \u05e9\u05dd"
)


def edit_in_place(driver: Chrome, base: str, fact: str, old: str, new: str) -> tuple[str, str]:
    """Open the fact's Edit box on the memory page, select `old` in it and type `new` over it, as a user does;
    returns what the box held first and the notice of the page that answers Save."""
    driver.get(base + "/memory")
    row = driver.find_element(
        By.XPATH, "//tr[td[@class='fact']][.//input[@name='text' and @value=$f]]".replace("$f", "'" + fact + "'")
    )
    row.find_element(By.CSS_SELECTOR, "details.edit summary").click()
    box = row.find_element(By.CSS_SELECTOR, "details.edit textarea")
    held = box.get_attribute("value") or ""
    start = held.find(old)
    driver.execute_script(
        "arguments[0].focus(); arguments[0].setSelectionRange(arguments[1], arguments[2])", box, start, start + len(old)
    )
    box.send_keys(new)
    return held, after_click(
        driver, row.find_element(By.XPATH, ".//details//button[normalize-space()='Save']"), ".notice"
    )


async def test_an_edit_in_chromium_keeps_a_hebrew_facts_right_to_left_mark_and_writes_no_stand_in(
    redis, nanobot_home, fake_llm, worker_deps, settings_for, browser, shots
):
    """Changing "Haifa" to "Tel Aviv" in a Hebrew fact holding U+200F wrote a literal `[U+200F]` into MEMORY.md:
    the Edit box showed the page's stand-in. The box holds the exact text; MEMORY.md gets the mark, not the
    stand-in."""
    memory = await made_by_jobs(redis, nanobot_home, fake_llm, worker_deps())
    async with served(settings_for()) as page:
        status, _ = await page.post("/memory/edit", {"csrf": await page.csrf(), "text": FACTS[1], "new": HEBREW})
        assert status == 303 and HEBREW.encode() in memory.read_bytes()
        base = str(page.client.make_url("")).rstrip("/")
        await in_browser(browser.get, page.first_visit)
        held, notice = await in_browser(edit_in_place, browser, base, HEBREW, "Haifa", "Tel Aviv")
        await in_browser(shots, browser, "memory-edited")
    assert held == HEBREW, "the Edit box holds the fact's exact text"
    assert notice.startswith("Edited"), notice
    written = memory.read_bytes().decode("utf-8", errors="replace")
    assert HEBREW.replace("Haifa", "Tel Aviv") in written and "[U+200F]" not in written


# A page of another local account: it keeps the page's cookie a browser sends it (a browser sends a host's cookies
# to every port of it) and replays it to the page, answering with what the page said.
THIEF = r"""
import http.server, sys, urllib.error, urllib.request
page, kept = sys.argv[1], {}
class Thief(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/":  # the browser's /favicon.ico: no replay (it would keep the sign-in in use)
            self.send_error(404)
            return
        cookie = self.headers.get("Cookie") or ""
        if "nanobot_summary_session" in cookie:
            kept["cookie"] = cookie
        try:
            with urllib.request.urlopen(urllib.request.Request(page, headers={"Cookie": kept.get("cookie", "")})) as r:
                status, body = r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, ""
        answer = f"replayed: {status} {'fact read' if sys.argv[2] in body else 'nothing read'}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(answer)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Thief)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.fixture
def other_account() -> Iterator[str]:
    """A throwaway Unix account (made as root, removed after)."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("making another Unix account needs root and useradd")
    name = f"nbsother{os.getpid() % 100000}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False)


def body_text(driver: Chrome, url: str) -> str:
    driver.get(url)
    return driver.find_element(By.TAG_NAME, "body").text


async def test_a_cookie_another_account_took_opens_nothing_after_expiry_or_sign_out(
    redis, nanobot_home, fake_llm, worker_deps, settings_for, browser, other_account
):
    """A page served by another Unix user on another port of 127.0.0.1 gets the page's cookie from the browser and
    replays it: while the browser's sign-in lives it is a key (the limit, documented); once the sign-in has been
    idle too long, or the browser signed out, it opens nothing."""
    from worker.web.guard import Guard
    from worker.web.signin import SignIns

    await made_by_jobs(redis, nanobot_home, fake_llm, worker_deps())
    guard = Guard.for_bind("127.0.0.1", signins=SignIns(idle=4))
    async with served(settings_for(), guard, login=False) as page:
        base = str(page.client.make_url("")).rstrip("/")
        thief = subprocess.Popen(
            ["/usr/bin/python3", "-c", THIEF, base + "/memory", "prefers dark mode"],
            user=other_account,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            port = int(await asyncio.to_thread(thief.stdout.readline))
            there = f"http://127.0.0.1:{port}/"
            await in_browser(browser.get, page.first_visit)
            assert await in_browser(body_text, browser, there) == "replayed: 200 fact read", "a live sign-in"
            await asyncio.sleep(6)
            assert await in_browser(body_text, browser, there) == "replayed: 401 nothing read", "idle too long"
            await in_browser(browser.get, page.first_visit)
            assert await in_browser(body_text, browser, there) == "replayed: 200 fact read"
            await in_browser(browser.get, base + "/memory")
            signed_out = await in_browser(
                lambda: after_click(
                    browser, browser.find_element(By.XPATH, "//button[normalize-space()='Sign out']"), "main"
                )
            )
            assert "signed out" in signed_out, signed_out
            assert await in_browser(body_text, browser, there) == "replayed: 401 nothing read", "signed out"
            assert "needs its token" in await in_browser(body_text, browser, base + "/memory")
        finally:
            thief.terminate()
            thief.communicate()  # waits, and closes its pipe
