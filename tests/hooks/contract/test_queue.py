"""The Redis side of the contract: dropping a record never drops a newer one of the same session."""

from __future__ import annotations

import json

from nanobot_hooks.contract.queue import drop_record, load_record, load_record_or_drop, pending_sessions, store_record, UNREADABLE
from nanobot_hooks.contract.records import SummaryRecord

from harness.defaults import TEST_KEYS

KEY = "telegram:42"


def record(summary: str) -> SummaryRecord:
    return SummaryRecord(session_key=KEY, summary=summary, start=0, boundary=4, boundary_timestamp="t",
                         messages_before=6, messages_after=3, tokens_before=100, tokens_after=40)


async def test_dropping_an_old_record_keeps_the_newer_one(redis) -> None:
    old, new = record("old"), record("new")
    assert old.stamp != new.stamp
    await store_record(redis, old)
    await store_record(redis, new)
    assert not await drop_record(redis, old), "the stored record is the newer one"
    assert (await load_record(redis, KEY)).summary == "new" and await pending_sessions(redis) == [KEY]
    assert await drop_record(redis, new)
    assert await load_record(redis, KEY) is None and await pending_sessions(redis) == []


async def test_a_record_is_known_by_its_identity_however_its_json_is_spaced(redis) -> None:
    """The record applied is dropped by its identity read from the stored JSON: a substring match of our own
    serializer's spacing missed a record written with other spacing (Python's json.dumps, another version of the
    worker), which then stayed in Redis and was offered again at every turn until it expired."""
    applied = record("applied")
    await redis.set(TEST_KEYS.record(KEY), json.dumps(applied.model_dump(mode="json")))  # '"created_at": "..."'
    await redis.sadd(TEST_KEYS.pending, KEY)
    assert await drop_record(redis, applied)
    assert not await redis.exists(TEST_KEYS.record(KEY)) and await pending_sessions(redis) == []


async def test_an_unreadable_record_is_dropped_so_it_cannot_block_its_session(redis) -> None:
    await redis.set(TEST_KEYS.record(KEY), b'{"session_key": "telegram:42", "reason": "from-the-future"}')
    await redis.sadd(TEST_KEYS.pending, KEY)
    assert await load_record_or_drop(redis, KEY) == UNREADABLE
    assert not await redis.exists(TEST_KEYS.record(KEY)) and await pending_sessions(redis) == []
    await store_record(redis, record("fine"))
    assert (await load_record_or_drop(redis, KEY)).summary == "fine"
