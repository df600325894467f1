"""A chunked run's progress: kept in Redis in the format earlier versions wrote, resumed only by the same run."""

from __future__ import annotations

import json

import pytest

from harness.defaults import TEST_KEYS
from worker.state.progress import Progress, digest, load_progress, resume_progress, save_progress

KEY = "telegram:1"
PREVIOUS = "the summary folded in"
STAMP = "2026-11-20T10:00:00"


def begun(previous: str = PREVIOUS, boundary: int = 40, stamp: str | None = STAMP) -> Progress:
    return Progress.begin(10, boundary, stamp, previous)


def test_a_new_run_starts_at_its_range_with_the_summary_folded_in() -> None:
    progress = begun()
    assert (progress.start, progress.done, progress.running, progress.calls) == (10, 10, PREVIOUS, 0)
    assert progress.previous == digest(PREVIOUS), "only a digest of the folded-in summary is kept"


async def test_the_kept_json_is_the_format_earlier_versions_wrote_and_resumes(redis) -> None:
    """As the version before progress had one home wrote it: a retry across an upgrade still resumes."""
    kept = {
        "start": 10,
        "boundary": 40,
        "boundary_timestamp": STAMP,
        "previous": digest(PREVIOUS),
        "done": 25,
        "running": "the summary so far",
        "calls": 3,
    }
    await redis.set(TEST_KEYS.progress(KEY), json.dumps(kept))
    resumed = await resume_progress(redis, KEY, begun())
    assert resumed.model_dump() == kept
    resumed.done, resumed.calls = 31, 4
    await save_progress(redis, KEY, resumed)
    assert json.loads(await redis.get(TEST_KEYS.progress(KEY))) == {**kept, "done": 31, "calls": 4}


@pytest.mark.parametrize(
    "other",
    [
        begun(previous="another summary"),
        begun(boundary=45),
        begun(stamp="2026-11-21T09:00:00"),
        begun(stamp=None),
    ],
)
async def test_only_the_same_run_resumes_a_kept_one(redis, other: Progress) -> None:
    """Another summary folded in, another cut, or a session that changed under the same positions: a new run."""
    kept = begun()
    kept.done, kept.running, kept.calls = 25, "the summary so far", 3
    await save_progress(redis, KEY, kept)
    assert await resume_progress(redis, KEY, other) == other
    assert await resume_progress(redis, KEY, begun()) == kept


async def test_a_kept_run_done_outside_its_range_or_unreadable_is_not_resumed(redis) -> None:
    kept = begun()
    kept.done = 41
    await save_progress(redis, KEY, kept)
    assert await resume_progress(redis, KEY, begun()) == begun()
    await redis.set(TEST_KEYS.progress(KEY), "{not json")
    assert await load_progress(redis, KEY) is None
    assert await resume_progress(redis, KEY, begun()) == begun()
