"""Forget everywhere (worker.memory.elsewhere, the page's and the command line's one home): what the user forgot
everywhere stays forgotten. nanobot's session file still holds the message, and the worker indexes session files
again: when nanobot's `/new` empties the session and the hooks keep its copy, when the index is rebuilt. The
archived message's tombstone (its digest, never its text) keeps it out each time, as the real recall tool shows;
so does a message no summary covered yet, when a later summary archives it."""

from __future__ import annotations

import json
import string
from zoneinfo import ZoneInfo

from hypothesis import example, given, settings
from hypothesis import strategies as st

from nanobot_hooks.contract.recall import retired_source
from nanobot_hooks.turn.reset import keep_copy
from tests.support.forgetting import FACT, KEY, QUERY, SAID, therapist_remembered
from worker.memory.elsewhere import where_else
from worker.memory.longterm.forget import forget_fact
from worker.memory.recall_index import RecallIndex
from worker.memory.recall_index.forget import tombstones_path

UTC = ZoneInfo("UTC")


async def test_a_text_forgotten_everywhere_is_not_indexed_again_after_new_or_a_rebuild(
    redis, nanobot_home, fake_llm, worker_deps, monkeypatch
):
    tool = await therapist_remembered(redis, nanobot_home, fake_llm, worker_deps(), monkeypatch)
    workspace, sessions = nanobot_home.workspace, nanobot_home.sessions_dir
    assert forget_fact(workspace / "memory" / "MEMORY.md", FACT, "2026-11-20") is not None
    done = where_else(workspace, sessions, UTC, FACT, remove=True)
    assert done.note_lines == 1 and done.archives == [KEY] and done.problem is None, done
    assert (await tool.execute(query=QUERY)).startswith("Nothing found")
    stones = tombstones_path(workspace / "memory").read_text(encoding="utf-8")
    assert len(json.loads(stones)["passages"]) == 1 and "Rowe" not in stones, "a digest, never the text"

    # nanobot's `/new`: the hooks keep the session as nanobot last saved it, then nanobot saves it empty.
    session = nanobot_home.session_file(KEY)
    kept = keep_copy(session, KEY, 0, 1_700_000_000_000)
    session.unlink()  # nanobot saves through a rename: a new file, the copy's link untouched
    nanobot_home.write_session(KEY, [])
    index = RecallIndex(workspace, UTC)
    try:
        index.refresh(sessions)  # the worker's sweep: the emptied session, the kept copy whole
        copies = (
            index.connect()
            .execute("SELECT through FROM sources WHERE session = ?", (retired_source(KEY, kept.name),))
            .fetchall()
        )
        assert copies == [(30,)], "the copy was indexed, every message of it"
        assert (await tool.execute(query=QUERY)).startswith("Nothing found"), "back from the copy kept at /new"

        index.discard()  # a rebuild from the files (a damaged index, another schema version)
        assert "rebuilt" in str(index.refresh(sessions))
        assert (await tool.execute(query=QUERY)).startswith("Nothing found"), "back after a rebuild"
    finally:
        index.close()
    assert SAID.encode() in kept.read_bytes(), "nanobot's files keep the conversation"


async def test_a_message_no_summary_covered_yet_stays_out_when_a_later_summary_archives_it(
    redis, nanobot_home, fake_llm, worker_deps, monkeypatch
):
    tool = await therapist_remembered(redis, nanobot_home, fake_llm, worker_deps(), monkeypatch, said_at=26)
    workspace, sessions = nanobot_home.workspace, nanobot_home.sessions_dir
    assert forget_fact(workspace / "memory" / "MEMORY.md", FACT, "2026-11-20") is not None
    assert where_else(workspace, sessions, UTC, FACT, unarchived=True).unarchived == 1, "counted (a dry run)"
    assert not tombstones_path(workspace / "memory").exists(), "a count changes nothing"
    done = where_else(workspace, sessions, UTC, FACT, remove=True)
    assert done.archives == [] and done.unarchived == 1, done
    assert (await tool.execute(query=QUERY)).startswith("Nothing found")

    # nanobot saves the session with its watermark past the message: a later summary covered it.
    session = nanobot_home.session_file(KEY)
    head, *rest = session.read_text(encoding="utf-8").splitlines(keepends=True)
    metadata = json.loads(head)
    assert SAID in rest[26]
    metadata.update(last_archived=30, last_consolidated=30)
    session.unlink()  # nanobot saves through a rename
    session.write_text(json.dumps(metadata) + "\n" + "".join(rest), encoding="utf-8")
    index = RecallIndex(workspace, UTC)
    try:
        assert index.refresh(sessions).messages == 9, "messages 20..29 indexed, but the forgotten one"
    finally:
        index.close()
    assert (await tool.execute(query=QUERY)).startswith("Nothing found"), "back once a summary archived it"


@given(st.text(alphabet=string.printable + "'`\x01", max_size=60), st.integers(0, 60), st.integers(0, 60))
@example("Dr. O'Rowe's day", 4, 16)
@example("ro\x01we and ro`we", 0, 16)
@settings(max_examples=300, deadline=None)
def test_a_record_passed_over_unread_never_holds_the_words(body, start, end) -> None:
    """The search for a forgotten text looks for its words in an ASCII record's bytes before decoding it: a record
    it passes over is one whose passage does not hold them."""
    from nanobot_hooks.contract.recall import Passage, pack, read_block
    from worker.memory.notes import holds, key_words
    from worker.memory.recall_index.forget import _may_hold, _needles

    words = key_words(body[start:end])
    (record,) = read_block(pack({7: Passage(body, "2026-11-20", None, "user")})).bodies
    assert _may_hold(record, _needles(words)) or not holds(body, words)
