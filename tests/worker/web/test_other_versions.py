"""Outcomes written by another version of the worker (a status or reason this one does not know, a field of
another shape): every page, `status` and the metrics show them as unknown instead of failing."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import quote

from harness.defaults import TEST_KEYS
from harness.environment import process_env
from tests.support.commands import run_in_process
from tests.support.web import KEY, served
from worker.state.outcomes import load_outcome

OTHER = "telegram:7"  # a session whose outcome this version cannot read at all


async def plant(redis) -> None:
    newer = {
        "session_key": KEY,
        "status": "deferred",
        "reason": "webhook",
        "detail": "waiting for the webhook",
        "a_field_of_a_newer_version": [1, 2],
        "finished_at": "2026-11-28T07:35:13+00:00",
    }
    await redis.set(TEST_KEYS.outcome(KEY), json.dumps(newer))
    await redis.set(TEST_KEYS.outcome(OTHER), json.dumps({"session_key": OTHER, "status": "noop", "spend": "much"}))
    await redis.sadd(TEST_KEYS.index("outcomes"), KEY, OTHER)  # as every version's worker indexes what it keeps


async def test_an_outcome_of_an_unknown_status_or_shape_reads_as_unknown_and_keeps_what_is_understood(redis):
    await plant(redis)
    newer = await load_outcome(redis, KEY)
    assert newer is not None and newer.status == "unknown" and newer.reason == "unknown"
    assert newer.unknown == "status 'deferred', reason 'webhook'" and newer.detail == "waiting for the webhook"
    other = await load_outcome(redis, OTHER)
    assert other is not None and other.status == "unknown" and "cannot read" in other.unknown
    # Nothing this version cannot read is deleted: the version that wrote it may still come back to it.
    assert await redis.exists(TEST_KEYS.outcome(KEY), TEST_KEYS.outcome(OTHER)) == 2


async def test_every_page_answers_with_outcomes_of_another_version(settings_for, redis, nanobot_home):
    for key in (KEY, OTHER):
        nanobot_home.write_session(key, [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}])
    await plant(redis)
    async with served(settings_for()) as page:
        for url in ("/", "/sessions", f"/session?key={quote(KEY, safe='')}", f"/session?key={quote(OTHER, safe='')}"):
            status, body = await page.get(url)
            assert status == 200, (url, body[-2000:])
        status, body = await page.get(f"/session?key={quote(KEY, safe='')}")
        assert "does not know" in body, body[-3000:]


async def test_status_and_its_metrics_work_with_outcomes_of_another_version(capsys, redis, redis_url):
    await plant(redis)
    env = process_env(redis_url=redis_url, COLUMNS="250")
    shown = await asyncio.to_thread(run_in_process, capsys, "status", env=env)
    assert shown.returncode == 0, shown.stderr
    assert KEY in shown.stdout and "does not know" in shown.stdout, shown.stdout
    metrics = await asyncio.to_thread(run_in_process, capsys, "status", "--prometheus", env=env)
    assert metrics.returncode == 0, metrics.stderr
    assert 'status="unknown"' in metrics.stdout, metrics.stdout[-2000:]


async def plant_record(redis) -> None:
    """A waiting summary record a newer worker wrote: a reason this version does not know, a field it lacks."""
    newer = {
        "session_key": KEY,
        "reason": "webhook",
        "start": 0,
        "boundary": 4,
        "summary": "the newer summary",
        "a_field_of_a_newer_version": True,
    }
    await redis.set(TEST_KEYS.record(KEY), json.dumps(newer))
    await redis.sadd(TEST_KEYS.pending, KEY)


async def test_a_waiting_record_of_another_version_leaves_status_and_every_page_working_and_stays(
    capsys, settings_for, redis, redis_url, nanobot_home
):
    nanobot_home.write_session(KEY, [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}])
    await plant_record(redis)
    async with served(settings_for()) as page:
        for url in ("/", "/sessions", f"/session?key={quote(KEY, safe='')}"):
            status, body = await page.get(url)
            assert status == 200, (url, body[-2000:])
            assert "another version" in body or url == "/sessions", (url, body[-3000:])
    env = process_env(redis_url=redis_url, COLUMNS="250")
    for extra in ((), ("--json",), ("--prometheus",)):
        shown = await asyncio.to_thread(run_in_process, capsys, "status", *extra, env=env)
        assert shown.returncode == 0, (extra, shown.stderr)
    shown = await asyncio.to_thread(run_in_process, capsys, "status", env=env)
    assert "another version" in shown.stdout and KEY in shown.stdout, shown.stdout
    # Read, never dropped: the version that wrote it applies it.
    assert await redis.exists(TEST_KEYS.record(KEY)) and await redis.sismember(TEST_KEYS.pending, KEY)


async def test_a_damaged_record_is_shown_as_damaged_not_as_another_versions(
    capsys, settings_for, redis, redis_url, nanobot_home
):
    """Bytes that are no record of any version are told apart from another version's record: the hooks drop the
    former at the next turn, and keep the latter for the version that reads it."""
    nanobot_home.write_session(KEY, [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}])
    await redis.set(TEST_KEYS.record(KEY), b"\x80\x04not json at all")
    await redis.sadd(TEST_KEYS.pending, KEY)
    async with served(settings_for()) as page:
        for url in ("/", f"/session?key={quote(KEY, safe='')}"):
            status, body = await page.get(url)
            assert status == 200 and "no summary of any version" in body, (url, body[-3000:])
            assert "another version of the worker wrote" not in body and "Summaries of another" not in body, url
    env = process_env(redis_url=redis_url, COLUMNS="250")
    shown = await asyncio.to_thread(run_in_process, capsys, "status", "--json", env=env)
    state = json.loads(shown.stdout)
    assert state["damaged_records"] == [KEY] and state["other_version_records"] == [], state
    shown = await asyncio.to_thread(run_in_process, capsys, "status", env=env)
    assert "damaged records, dropped by nanobot's hooks at the session's next turn: 1" in shown.stdout, shown.stdout
    assert "kept for the version that reads them: none" in shown.stdout, shown.stdout
    assert await redis.exists(TEST_KEYS.record(KEY)), "status and the page only read"
