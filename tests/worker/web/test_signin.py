"""The page's per-browser sign-ins (worker.web.signin): issued, kept by the page, ended by idleness, by their
lifetime, by a sign-out and by `--sign-out-all` from another process."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.support.web import served
from worker.commands.cli import main as cli_main
from worker.web.guard import Guard
from worker.web.signin import MAX_SIGNINS, SignIns, sign_out_all, signed_out_path


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_sign_in_ends_when_idle_and_after_its_lifetime_however_busy() -> None:
    clock = Clock()
    signins = SignIns(idle=60, lifetime=300, clock=clock)
    idle, busy = signins.issue(), signins.issue()
    assert signins.valid(idle) and signins.valid(busy) and not signins.valid("made-up")
    for _ in range(7):
        clock.now += 40
        assert signins.valid(busy), "used within the idle time: alive"
    assert not signins.valid(idle), "idle 280 s"
    clock.now += 40
    assert not signins.valid(busy), "320 s old: past its lifetime, however busy"


def test_a_sign_in_bound_to_an_address_opens_from_that_address_only() -> None:
    signins = SignIns()
    value = signins.issue("192.0.2.7")
    assert signins.valid(value, "192.0.2.7") and not signins.valid(value, "192.0.2.8") and not signins.valid(value)


def test_sign_out_ends_one_browser_and_sign_out_all_every_one() -> None:
    signins = SignIns()
    one, two, three = signins.issue(), signins.issue(), signins.issue()
    signins.end(one)
    assert not signins.valid(one) and signins.valid(two)
    signins.end_all()
    assert not signins.valid(two) and not signins.valid(three) and len(signins) == 0


def test_the_sign_ins_kept_are_bounded() -> None:
    signins = SignIns()
    first = signins.issue()
    for _ in range(MAX_SIGNINS + 5):
        signins.issue()
    assert len(signins) <= MAX_SIGNINS and not signins.valid(first), "the oldest went first"


def test_sign_out_all_from_the_command_line_ends_the_sign_ins_a_running_page_issued(tmp_path: Path) -> None:
    token_file = tmp_path / "web-token"
    token_file.write_text("t" * 40 + "\n")
    token_file.chmod(0o600)
    signins = SignIns(signed_out_file=signed_out_path(token_file), clock=lambda: 1.0)  # issued long ago
    value = signins.issue()
    assert signins.valid(value)
    assert cli_main(["web", "--token-file", str(token_file), "--sign-out-all"]) == 0
    assert signed_out_path(token_file).stat().st_mode & 0o077 == 0
    assert not signins.valid(value)
    later = SignIns(signed_out_file=signed_out_path(token_file))
    fresh = later.issue()
    assert later.valid(fresh), "a page started after the sign-out signs browsers in as before"
    sign_out_all(token_file)
    assert not later.valid(fresh)


async def test_a_replayed_cookie_opens_nothing_after_sign_out_or_sign_out_all(nanobot_home, settings_for):
    guard = Guard.for_bind("127.0.0.1")
    async with served(settings_for(), guard) as page:
        name = f"nanobot_summary_session_{page.client.port}"
        copied = page.client.session.cookie_jar.filter_cookies(page.client.make_url("/"))[name].value

        async def replayed(value: str) -> int:
            async with aiohttp.ClientSession() as other:
                async with other.get(page.client.make_url("/memory"), headers={"Cookie": f"{name}={value}"}) as got:
                    return got.status

        assert await replayed(copied) == 200
        status, body = await page.post("/sign-out", {"csrf": await page.csrf()})
        assert status == 200 and "signed out" in body
        assert await replayed(copied) == 401
        async with page.client.get("/", params={"token": guard.token}, allow_redirects=False):
            pass
        again = page.client.session.cookie_jar.filter_cookies(page.client.make_url("/"))[name].value
        assert again != copied and await replayed(again) == 200
        status, body = await page.post("/sign-out-all", {"csrf": await page.csrf()})
        assert status == 200 and "Every browser is signed out" in body
        assert await replayed(again) == 401
