"""nanobot's idle compaction and a pickup never interleave: a record that arrives while nanobot's own compaction
waits for its model is applied after it (here: found stale and dropped), so nanobot's checkpoint still lands
after every message its summary holds. Real gateway, real nanobot compaction, real Redis."""

from __future__ import annotations

import json
import threading

from harness.fakellm import FakeRequest, Reply
from harness.sandbox import session_lines
from harness.transcripts import conversation
from nanobot_hooks.contract.queue import store_record
from nanobot_hooks.contract.records import SummaryRecord, record_key
from tests.support.crossing import CHAT
from tests.support.queue_probes import has_record, stats
from tests.support.waiting import wait_until

# What nanobot's archive call asks of the model (its template agent/consolidator_archive.md).
ARCHIVE_ASK = "Create a compact replacement checkpoint"
IDLE_SUMMARY = "idle checkpoint: the deploy questions"


async def test_a_record_arriving_during_nanobots_idle_compaction_waits_for_it_and_no_message_is_replayed(
    gateway, nanobot_home, fake_llm, redis
):
    key = f"websocket:{CHAT}"
    seeded = conversation(5)
    nanobot_home.write_session(key, seeded)  # saved days ago: idle, nanobot compacts it at its first scan
    config = json.loads(nanobot_home.config_path.read_text(encoding="utf-8"))
    config["agents"]["defaults"].update(idleCompactAfterMinutes=1, idleCompactCheckIntervalSeconds=1)
    nanobot_home.config_path.write_text(json.dumps(config), encoding="utf-8")
    archiving = threading.Event()

    def respond(request: FakeRequest) -> Reply:
        if ARCHIVE_ASK in json.dumps(request.messages):
            archiving.set()
            return Reply(IDLE_SUMMARY, delay=3.0)  # the record arrives while nanobot waits for this
        return Reply("reply")

    fake_llm.responder = respond
    gw = await gateway(NANOBOT_SUMMARY_INTERVAL="0")
    try:
        await wait_until(archiving.is_set, what="nanobot's idle compaction to call its model")
    except AssertionError:
        raise AssertionError(gw.log()[-3000:]) from None
    await store_record(
        redis,
        SummaryRecord(
            session_key=key,
            summary="our summary",
            start=0,
            boundary=6,
            boundary_timestamp=seeded[5]["timestamp"],
            messages_before=10,
            messages_after=4,
            tokens_before=100,
            tokens_after=40,
        ).signed(record_key(nanobot_home.sessions_dir)),
    )
    await wait_until(lambda: _settled(redis, key), what="the record to be settled", timeout=60)
    await wait_until(
        lambda: IDLE_SUMMARY in nanobot_home.session_file(key).read_text(encoding="utf-8"),
        what="nanobot's compaction to be saved",
        timeout=60,
    )

    head, messages = session_lines(nanobot_home, key)
    assert head["metadata"]["_last_summary"]["text"] == IDLE_SUMMARY
    checkpoints = [i for i, m in enumerate(messages) if m.get("_hidden_history")]
    assert checkpoints == [len(seeded)], "nanobot's checkpoint follows every message its summary holds"
    assert head["last_archived"] == len(seeded) and messages[: len(seeded)] == seeded
    assert (await stats(redis)).get("stale") == 1, "the record came after the compaction: it no longer fits"


async def _settled(redis, key: str) -> bool:
    """The record is gone and its outcome counted: the hooks remove it, then count it, in two commands."""
    return not await has_record(redis, key) and sum((await stats(redis)).values()) > 0
