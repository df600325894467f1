"""The Redis side of the contract: dropping a record never drops a newer one of the same session."""

from __future__ import annotations

import json

from harness.defaults import TEST_KEYS
from nanobot_hooks.contract.queue import (
    DAMAGED,
    UNREADABLE,
    drop_record,
    load_record,
    load_waiting_record,
    pending_sessions,
    store_record,
)
from nanobot_hooks.contract.records import SummaryRecord

KEY = "telegram:42"


def record(summary: str) -> SummaryRecord:
    return SummaryRecord(
        session_key=KEY,
        summary=summary,
        start=0,
        boundary=4,
        boundary_timestamp="t",
        messages_before=6,
        messages_after=3,
        tokens_before=100,
        tokens_after=40,
    )


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


async def test_a_record_of_another_version_is_kept_for_the_version_that_reads_it(redis) -> None:
    """Issue 35: a record written by another version of the worker (here a reason this version does not know) is
    kept, pending, never deleted: the hooks of that version apply it after a rolling upgrade or a downgrade."""
    future = b'{"session_key": "telegram:42", "summary": "s", "reason": "from-the-future"}'
    await redis.set(TEST_KEYS.record(KEY), future)
    await redis.sadd(TEST_KEYS.pending, KEY)
    assert await load_waiting_record(redis, KEY) == UNREADABLE
    assert await load_waiting_record(redis, KEY) == UNREADABLE, "read again, still kept"
    assert await redis.get(TEST_KEYS.record(KEY)) == future and await pending_sessions(redis) == [KEY]
    await store_record(redis, record("fine"))  # a worker of this version replaces it
    assert (await load_waiting_record(redis, KEY)).summary == "fine"


async def test_damaged_bytes_are_dropped_they_are_no_record_of_any_version(redis) -> None:
    await redis.set(TEST_KEYS.record(KEY), b"\x80\x04not json at all")
    await redis.sadd(TEST_KEYS.pending, KEY)
    assert await load_waiting_record(redis, KEY) == DAMAGED
    assert not await redis.exists(TEST_KEYS.record(KEY)) and await pending_sessions(redis) == []
    assert await load_waiting_record(redis, KEY) is None
