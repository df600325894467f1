"""`nanobot-summary end-rest`: the web page's End rest on the command line (there was none): one session's rest and
failure streak end, `--all` ends every rest of this instance only, and each line says what was done, its moments
written as `status` and the page write them."""

from __future__ import annotations

import asyncio
import re

from harness.defaults import TEST_KEYS
from harness.environment import process_env
from nanobot_hooks.contract.keys import Keys
from tests.support.commands import run_in_process
from worker.connections import queue_client
from worker.state import budget

KEY, OTHER = "telegram:42", "cli:direct"


async def test_end_rest_ends_one_sessions_rest_or_every_one_and_says_what_it_did(
    nanobot_home, redis, redis_url, capsys
) -> None:
    for _ in range(3):
        await budget.start_rest(redis, KEY, "the model answered 500", 900, 3600)
    await budget.start_rest(redis, OTHER, "the model answered nothing useful", 900, 3600)
    theirs = queue_client(redis_url, Keys("other").queue)  # another instance's rest, on the same Redis
    try:
        await budget.start_rest(theirs, KEY, "theirs", 900, 3600)
        env = process_env(nanobot_home, redis_url, config=True, NANOBOT_SUMMARY_TIMEZONE="Asia/Shanghai")

        async def end_rest(*args: str):
            return await asyncio.to_thread(run_in_process, capsys, "end-rest", *args, env=env)

        done = await end_rest(KEY)
        assert done.returncode == 0, done.stderr
        assert re.fullmatch(
            rf"{KEY}: rest ended \(it was to last until \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d "
            r"\(in (59 min[^)]*|1 h)\), after 3 failure\(s\) in a row: the model answered 500\); "
            r"nanobot's trigger queues its jobs again from its next turn\n",
            done.stdout,
        ), done.stdout
        assert await budget.rest_of(redis, KEY) is None and await redis.get(TEST_KEYS.failures(KEY)) is None
        assert await budget.rest_of(redis, OTHER) is not None, "only the session named"
        again = await end_rest(KEY)
        assert again.returncode == 0 and again.stdout == f"{KEY}: not resting (the rest ran out, or a job ended it)\n"

        every = await end_rest("--all")
        assert every.returncode == 0 and every.stdout.startswith(f"{OTHER}: rest ended"), every.stdout
        assert KEY not in every.stdout and await budget.rest_of(redis, OTHER) is None
        assert await budget.rest_of(theirs, KEY) is not None, "another instance's rest is not this one's"
        assert (await end_rest("--all")).stdout == "no session is resting\n"
    finally:
        await theirs.aclose()
    nothing = await end_rest()
    assert nothing.returncode == 2 and "name at least one session KEY, or --all" in nothing.stderr


async def test_rest_pauses_a_session_until_end_rest_and_status_doctor_and_the_jobs_say_so(
    nanobot_home, redis, redis_url, deps_for, capsys
) -> None:
    """`rest KEY` keeps a session unsummarized until resumed: no expiry, the trigger's key set (nanobot's hooks
    queue nothing while it exists), an automatic job refused with why, and status and doctor name it."""
    from harness.transcripts import conversation
    from nanobot_hooks.contract.records import SummarizeRequest
    from tests.support.workers import run_burst
    from worker.state.outcomes import load_outcome

    nanobot_home.write_session(KEY, conversation(15))
    env = process_env(nanobot_home, redis_url, config=True)
    paused = await asyncio.to_thread(run_in_process, capsys, "rest", KEY, env=env)
    assert paused.returncode == 0 and paused.stdout.startswith(f"{KEY}: paused: "), paused.stdout + paused.stderr
    assert await redis.ttl(TEST_KEYS.rest(KEY)) == -1, "a pause has no end of its own"
    rest = await budget.rest_of(redis, KEY)
    assert rest is not None and rest.paused
    status = await asyncio.to_thread(run_in_process, capsys, "status", env=env)
    assert f"{KEY} - paused until resumed; nanobot-summary end-rest {KEY}" in status.stdout, status.stdout
    doctor = await asyncio.to_thread(run_in_process, capsys, "doctor", env=env)
    assert f"1 session(s) paused by hand, summarized by nothing until resumed: {KEY}" in doctor.stdout, doctor.stdout
    from nanobot_hooks.contract.queue import enqueue_summary

    await enqueue_summary(redis, SummarizeRequest(session_key=KEY, reason="interval"))
    await run_burst(deps_for())
    outcome = await load_outcome(redis, KEY)
    assert (
        outcome is not None
        and outcome.status == "noop"
        and outcome.detail.startswith(f"paused until resumed (nanobot-summary end-rest {KEY})")
    ), outcome
    resumed = await asyncio.to_thread(run_in_process, capsys, "end-rest", KEY, env=env)
    assert resumed.stdout.startswith(f"{KEY}: pause ended (paused by `nanobot-summary rest`)"), resumed.stdout
    assert await budget.rest_of(redis, KEY) is None
