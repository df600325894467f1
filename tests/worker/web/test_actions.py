"""The operator's actions on the web page, over data made by real jobs and run by a real arq worker: "summarize now"
and retry queue the command line's own manual job (a failed session's retry runs through the rest its failure
started), "end rest" ends a rest and its failure streak, and "forget everything learned from this session" removes
exactly that session's facts, as `nanobot-summary undo --forget-facts` does; each answers, on the session's page,
what happened, including that nothing was to be done. Their safety (token, CSRF, read-only) is tested in
tests/scenarios/test_web_security.py, the buttons in a real browser in tests/scenarios/test_web_browser.py."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest
from arq.constants import health_check_key_suffix
from arq.jobs import Job

from harness.defaults import TEST_KEYS
from tests.support.web import FACTS, KEY, OWN_BOTTOM, OWN_TOP, QUIET, escaped, made_by_jobs, served
from tests.support.workers import run_burst
from worker.state import budget
from worker.state.outcomes import JobOutcome, load_outcome
from worker.summarize.manual import MANUAL_KEEP
from worker.web.actions import SAID

SESSION = f"/session?key={quote(KEY, safe='')}"


@pytest.fixture
async def data(redis, nanobot_home, fake_llm, worker_deps) -> Path:
    return await made_by_jobs(redis, nanobot_home, fake_llm, worker_deps())


async def queued_request(redis, key: str) -> dict | None:
    """The arguments of the session's summary job waiting in the instance's queue, or None."""
    info = await Job(
        TEST_KEYS.job_id(key), redis, _queue_name=TEST_KEYS.queue, _deserializer=redis.job_deserializer
    ).info()
    return info.args[0] if info is not None else None


async def test_summarize_now_queues_the_command_lines_manual_job_which_a_worker_runs_and_the_page_says_so(
    data, settings_for, redis, worker_deps
):
    async with served(settings_for()) as page:
        _, body = await page.get(SESSION)
        assert "Summarize now" in body
        await a_live_worker(redis)
        status, location = await page.post("/session/summarize", {"csrf": await page.csrf(), "key": KEY})
        assert status == 303 and location == f"{SESSION}&done=queued", location
        request = await queued_request(redis, KEY)
        assert request is not None and request["reason"] == "manual" and request["keep"] == MANUAL_KEEP, request
        _, body = await page.get(location)
        assert escaped(SAID["queued"]) in body and "A summary job is queued." in body
        assert "No worker is running" not in body
        # One job per session: the second click says so.
        status, location = await page.post("/session/summarize", {"csrf": await page.csrf(), "key": KEY})
        assert location.endswith("done=already") and escaped(SAID["already"]) in (await page.get(location))[1]
        before = await load_outcome(redis, KEY)
        await run_burst(worker_deps())
        after = await load_outcome(redis, KEY)
        assert after is not None and before is not None and after.finished_at > before.finished_at
        assert after.reason == "manual" and await queued_request(redis, KEY) is None
        # A key that is no session, or one of nanobot's own, queues nothing.
        for key in ("telegram:404", "heartbeat", "../etc"):
            status, body = await page.post("/session/summarize", {"csrf": await page.csrf(), "key": key})
            assert status == 404 and "Nothing was done" in body, (key, body)
            assert await queued_request(redis, key) is None


async def test_retry_runs_a_failed_sessions_job_again_through_its_rest(data, settings_for, redis, worker_deps):
    failed = JobOutcome(session_key=QUIET, status="failed", detail="the model answered 500 three times")
    await redis.set(TEST_KEYS.outcome(QUIET), failed.model_dump_json())
    await budget.start_rest(redis, QUIET, failed.detail, 600, 3600)
    async with served(settings_for()) as page:
        _, overview = await page.get("/?outcome=failed")
        assert 'action="/session/retry"' in overview and f'name="key" value="{QUIET}"' in overview
        await a_live_worker(redis)
        status, location = await page.post("/session/retry", {"csrf": await page.csrf(), "key": QUIET})
        assert status == 303 and location.endswith("done=retried"), location
        assert escaped(SAID["retried"]) in (await page.get(location))[1]
        await run_burst(worker_deps())
        outcome = await load_outcome(redis, QUIET)
        assert outcome is not None and outcome.status != "failed" and "resting" not in outcome.detail, outcome
        # Its last job did not fail now: a retry says so and queues nothing.
        status, location = await page.post("/session/retry", {"csrf": await page.csrf(), "key": QUIET})
        assert location.endswith("done=not-failed") and await queued_request(redis, QUIET) is None
        _, body = await page.get(location)
        assert escaped(SAID["not-failed"]) in body and 'action="/session/retry"' not in body


async def a_live_worker(redis) -> None:
    """arq's health line, as a running worker keeps it (every 30 s, expiring after 31 s)."""
    await redis.set(
        TEST_KEYS.queue + health_check_key_suffix,
        "Dec-07 04:00:00 j_complete=0 j_failed=0 j_retried=0 j_ongoing=0 queued=0",
        ex=31,
    )


async def test_summarize_now_and_retry_say_on_the_page_when_no_worker_is_alive(data, settings_for, redis):
    """With no worker they answered "Queued... its outcome shows here when it ends", and the session page said
    nothing: the job would wait for ever."""
    failed = JobOutcome(session_key=QUIET, status="failed", detail="the model answered 500 three times")
    await redis.set(TEST_KEYS.outcome(QUIET), failed.model_dump_json())
    async with served(settings_for()) as page:
        _, body = await page.get(SESSION)
        assert "No worker is running: Summarize now and Retry queue a job" in body
        _, overview = await page.get("/?outcome=failed")
        assert "No worker is running: Retry queues a job" in overview
        status, location = await page.post("/session/summarize", {"csrf": await page.csrf(), "key": KEY})
        assert status == 303 and location.endswith("done=queued-no-worker"), location
        assert escaped(SAID["queued-no-worker"]) in (await page.get(location))[1]
        assert await queued_request(redis, KEY) is not None, "queued all the same: a worker takes it when it starts"
        status, location = await page.post("/session/retry", {"csrf": await page.csrf(), "key": QUIET})
        assert location.endswith("done=retried-no-worker"), location
        await a_live_worker(redis)
        _, body = await page.get(SESSION)
        assert "No worker is running" not in body


async def test_end_rest_ends_a_sessions_rest_and_failure_streak_and_says_when_there_was_none(data, settings_for, redis):
    for _ in range(3):
        await budget.start_rest(redis, KEY, "the model answered 500", 600, 3600)
    assert await budget.rest_of(redis, KEY) is not None
    async with served(settings_for()) as page:
        _, overview = await page.get("/")
        assert 'action="/session/end-rest"' in overview, "the resting sessions' list offers it"
        _, body = await page.get(SESSION)
        assert "End rest" in body
        status, location = await page.post("/session/end-rest", {"csrf": await page.csrf(), "key": KEY})
        assert status == 303 and location.endswith("done=rest-ended"), location
        assert await budget.rest_of(redis, KEY) is None and await redis.get(TEST_KEYS.failures(KEY)) is None
        _, body = await page.get(location)
        assert escaped(SAID["rest-ended"]) in body and "Resting until" not in body and "End rest" not in body
        status, location = await page.post("/session/end-rest", {"csrf": await page.csrf(), "key": KEY})
        assert location.endswith("done=no-rest")


async def test_an_action_taken_on_a_refreshing_page_answers_on_a_page_that_refreshes_too(data, settings_for, redis):
    """The refresh toggle was dropped by an action's redirect; kept, its reloads leave the action's answer out."""
    await budget.start_rest(redis, KEY, "the model answered 500", 600, 3600)
    refresh_field = '<input type="hidden" name="refresh" value="10">'
    async with served(settings_for()) as page:
        _, overview = await page.get("/?refresh=10")
        assert overview.count(refresh_field) == overview.count('action="/session/') > 0, "every action's form"
        _, body = await page.get(f"{SESSION}&refresh=10")
        assert body.count(refresh_field) == body.count('action="/session/') > 0
        status, location = await page.post(
            "/session/end-rest", {"csrf": await page.csrf(), "key": KEY, "refresh": "10"}
        )
        assert status == 303 and location == f"{SESSION}&done=rest-ended&refresh=10", location
        _, body = await page.get(location)
        assert escaped(SAID["rest-ended"]) in body
        assert f'<meta http-equiv="refresh" content="10; url={escaped(SESSION)}&amp;refresh=10">' in body, (
            "it reloads the session's page, the answer said once"
        )
        # From a page that does not refresh, the answer's page does not either.
        status, location = await page.post("/session/summarize", {"csrf": await page.csrf(), "key": KEY})
        assert location == f"{SESSION}&done=queued-no-worker"
        assert 'http-equiv="refresh"' not in (await page.get(location))[1]
        _, body = await page.get(SESSION)
        assert refresh_field not in body


async def test_forgetting_what_a_session_taught_removes_its_facts_only_and_says_how_many(data, settings_for):
    before = data.read_bytes()
    assert all(fact.encode() in before for fact in FACTS)
    async with served(settings_for()) as page:
        csrf = await page.csrf()  # the memory page has no form left once every fact is gone
        status, location = await page.post("/session/forget-learned", {"csrf": csrf, "key": KEY})
        assert status == 303 and location.endswith(f"done=forgot&n={len(FACTS)}"), location
        after = data.read_bytes()
        assert not any(fact.encode() in after for fact in FACTS)
        assert after.startswith(OWN_TOP) and after.endswith(OWN_BOTTOM), "the user's own lines are as they were"
        _, body = await page.get(location)
        assert f"Forgotten: {len(FACTS)} fact(s)" in body
        status, location = await page.post("/session/forget-learned", {"csrf": csrf, "key": KEY})
        assert location.endswith("done=forgot-none") and data.read_bytes() == after
        # A link cannot put its own words on the page: an unknown code says nothing.
        _, body = await page.get(f"{SESSION}&done=<b>hacked</b>&n=9")
        assert "hacked" not in body and 'class="notice said"' not in body


async def test_with_redis_down_a_job_is_not_queued_and_the_page_says_why_while_forgetting_still_works(
    nanobot_home, settings_for
):
    from harness.redis_server import free_port
    from tests.support.web import write_sessions

    write_sessions(nanobot_home.workspace, nanobot_home.write_session)
    async with served(settings_for(redis_url=f"redis://127.0.0.1:{free_port()}/0")) as page:
        await page.get("/memory")  # MEMORY.md holds no fact yet: no form to take the CSRF token from
        browser = page.client.session.cookie_jar.filter_cookies(page.client.make_url("/"))["nanobot_summary_browser"]
        csrf = page.guard.csrf_for(browser.value)
        for url in ("/session/summarize", "/session/retry", "/session/end-rest"):
            status, body = await page.post(url, {"csrf": csrf, "key": KEY})
            assert status == 503 and "Nothing was done: Redis cannot be read" in body, (url, body)
        status, location = await page.post("/session/forget-learned", {"csrf": csrf, "key": KEY})
        assert status == 303 and location.endswith("done=forgot-none"), "MEMORY.md needs no Redis"


async def test_a_session_paused_by_hand_shows_as_paused_on_the_page(data, settings_for, redis):
    await budget.pause(redis, KEY, "paused by `nanobot-summary rest`")
    async with served(settings_for()) as page:
        _, overview = await page.get("/")
        assert "paused until resumed: paused by" in overview and "until 9999" not in overview, overview
        _, body = await page.get(SESSION)
        assert "Paused until you resume it (End rest)" in body and "End rest" in body
