"""The instance's own index of its keys: what status, doctor and the page list instead of SCAN."""

from __future__ import annotations

from harness.defaults import TEST_KEYS
from worker.state import index


async def test_members_are_the_ones_whose_key_exists_and_the_others_leave_the_index(redis) -> None:
    async with redis.pipeline(transaction=False) as pipe:
        for session in ("telegram:1", "telegram:2", "telegram:3"):
            pipe.set(TEST_KEYS.outcome(session), "{}")
            index.remember(pipe, TEST_KEYS, "outcomes", session)
        await pipe.execute()
    await redis.delete(TEST_KEYS.outcome("telegram:2"))
    assert await index.members(redis, "outcomes", TEST_KEYS.outcome) == ["telegram:1", "telegram:3"]
    assert sorted(await redis.smembers(TEST_KEYS.index("outcomes"))) == [b"telegram:1", b"telegram:3"], (
        "a member whose key is gone is dropped: the index never outgrows the keys it names"
    )
    assert await index.members(redis, "resting", TEST_KEYS.rest) == []


async def test_a_long_family_is_read_in_slices(redis, monkeypatch) -> None:
    monkeypatch.setattr(index, "SLICE", 3)
    sessions = [f"telegram:{n}" for n in range(10)]
    for session in sessions:
        await redis.set(TEST_KEYS.rest(session), "{}")
        await index.remember(redis, TEST_KEYS, "resting", session)
    assert await index.members(redis, "resting", TEST_KEYS.rest) == sorted(sessions)
