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


async def test_end_rest_ends_one_sessions_rest_or_every_one_and_says_what_it_did(nanobot_home, redis, redis_url,
                                                                                  capsys) -> None:
    for _ in range(3):
        await budget.cool_down(redis, KEY, "the model answered 500", 900, 3600)
    await budget.cool_down(redis, OTHER, "the model answered nothing useful", 900, 3600)
    theirs = queue_client(redis_url, Keys("other").queue)  # another instance's rest, on the same Redis
    try:
        await budget.cool_down(theirs, KEY, "theirs", 900, 3600)
        env = process_env(nanobot_home, redis_url, config=True, NANOBOT_SUMMARY_TIMEZONE="Asia/Shanghai")

        async def end_rest(*args: str):
            return await asyncio.to_thread(run_in_process, capsys, "end-rest", *args, env=env)

        done = await end_rest(KEY)
        assert done.returncode == 0, done.stderr
        assert re.fullmatch(rf"{KEY}: rest ended \(it was to last until \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d "
                            r"\(in (59 min[^)]*|1 h)\), after 3 failure\(s\) in a row: the model answered 500\); "
                            r"nanobot's trigger queues its jobs again from its next turn\n", done.stdout), done.stdout
        assert await budget.cooling(redis, KEY) is None and await redis.get(TEST_KEYS.failures(KEY)) is None
        assert await budget.cooling(redis, OTHER) is not None, "only the session named"
        again = await end_rest(KEY)
        assert again.returncode == 0 and again.stdout == f"{KEY}: not resting (the rest ran out, or a job ended it)\n"

        every = await end_rest("--all")
        assert every.returncode == 0 and every.stdout.startswith(f"{OTHER}: rest ended"), every.stdout
        assert KEY not in every.stdout and await budget.cooling(redis, OTHER) is None
        assert await budget.cooling(theirs, KEY) is not None, "another instance's rest is not this one's"
        assert (await end_rest("--all")).stdout == "no session is resting\n"
    finally:
        await theirs.aclose()
    nothing = await end_rest()
    assert nothing.returncode == 2 and "name at least one session KEY, or --all" in nothing.stderr
