"""`/new` inside nanobot (turn/reset.py, through surface.wrap_command): the session file is kept for the worker and
the session's generation counted up before nanobot's own handler clears it; nothing stops that handler."""

from __future__ import annotations

from types import SimpleNamespace

from harness.transcripts import conversation
from nanobot_hooks.contract.marker import SessionMarker
from nanobot_hooks.contract.session_format import RETIRED_FOLDER, retired_key, storage_name
from tests.support.queue_probes import queued_reason
from tests.support.standins import KEY, Loop, StandInSession
from tests.support.waiting import wait_until


def loop_with_a_saved_session(tmp_path, turns: int = 2) -> tuple[Loop, StandInSession]:
    loop = Loop()
    loop.sessions.folder = tmp_path
    session = StandInSession(KEY, conversation(turns))
    loop.sessions.cached[KEY] = session
    (tmp_path / storage_name(KEY)).write_bytes(b'{"_type": "metadata"}\n{"role": "user", "content": "said"}\n')
    return loop, session


async def test_new_keeps_the_saved_session_and_counts_a_generation_before_nanobot_clears_it(make, tmp_path, redis):
    loop, session = loop_with_a_saved_session(tmp_path)
    path = tmp_path / storage_name(KEY)
    before = path.stat()
    make(loop)
    reply = await loop.commands._exact["/new"](SimpleNamespace(key=KEY, session=None))
    assert reply == "New session started." and loop.commands.cleared == [(KEY, 4)]
    (kept,) = (tmp_path / RETIRED_FOLDER).iterdir()
    assert retired_key(kept.name) == (KEY, 0) and kept.read_bytes() == path.read_bytes()
    assert SessionMarker.generation(session.metadata) == 1, "nanobot's save after the clear writes it"
    after = path.stat()
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size), (
        "the session file is left as it was (nanobot's recovery file stays valid)"
    )
    await wait_until(lambda: queued_reason(redis, KEY), what="the job queued at /new")
    assert await queued_reason(redis, KEY) == "new"


async def test_a_copy_that_cannot_be_kept_never_stops_nanobots_new(make, tmp_path, quiet):
    loop, session = loop_with_a_saved_session(tmp_path)
    (tmp_path / RETIRED_FOLDER).write_text("a file where the folder goes", encoding="utf-8")
    make(loop)
    assert await loop.commands._exact["/new"](SimpleNamespace(key=KEY, session=session)) == "New session started."
    assert loop.commands.cleared == [(KEY, 4)]
    assert any("could not be kept" in line for line in quiet), quiet


async def test_an_empty_session_keeps_nothing_and_the_handler_comes_back_at_uninstall(make, tmp_path):
    loop, session = loop_with_a_saved_session(tmp_path, turns=0)
    original = loop.commands._exact["/new"]
    integration = make(loop)
    await loop.commands._exact["/new"](SimpleNamespace(key=KEY, session=None))
    assert not (tmp_path / RETIRED_FOLDER).exists() and SessionMarker.generation(session.metadata) == 0
    integration.uninstall()
    assert loop.commands._exact["/new"] == original
