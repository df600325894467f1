"""The version handshake from nanobot's side, against stand-ins for nanobot's AgentLoop and a real Redis: a live
worker of another contract is said once, in one line of nanobot's log with the command that fixes it, from the
listener's background task; a dead worker's report, one not ours and a worker of the same version say nothing."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from harness.defaults import TEST_KEYS
from nanobot_hooks import logs
from nanobot_hooks.contract.records import utcnow
from nanobot_hooks.contract.version import CONTRACT, RELEASE
from nanobot_hooks.turn import handshake
from nanobot_hooks.turn.handshake import MISSED_BEATS, check_workers
from tests.support.standins import Loop
from tests.support.waiting import wait_until
from worker.state.workers import WorkerReport, publish, this_worker


class Gateway(Loop):
    """An AgentLoop whose run() lasts, as a gateway's does."""

    async def run(self) -> None:
        await asyncio.sleep(3600)


async def health_line(redis, writer: str) -> None:
    """arq's health line of the queue as the service's worker writes it: its counters, then its own id."""
    await redis.set(TEST_KEYS.queue + ":health-check", f"Nov-29 02:00:00 j_complete=0 j_failed=0 worker={writer}")


async def beat(redis, **versions) -> None:
    """A live worker's beat: its report, and arq's health line naming it."""
    await publish(redis, {}, utcnow(), **versions)
    await health_line(redis, this_worker())


@pytest.fixture(autouse=True)
def nothing_said_yet(monkeypatch):
    """What this process said is kept for its life: each test starts as a nanobot just started."""
    monkeypatch.setattr(handshake, "_said", set())


@pytest.fixture
def routine(monkeypatch) -> list[str]:
    lines: list[str] = []
    monkeypatch.setattr(logs, "info", lines.append)
    return lines


async def test_a_worker_of_another_contract_is_said_once_at_start_up_with_the_command_that_fixes_it(
    make, redis, quiet, routine
) -> None:
    dead = WorkerReport(
        host="gone",
        pid=1,
        heartbeat_at=utcnow() - timedelta(seconds=MISSED_BEATS * 30 + 60),
        version="0.0.1",
        contract=CONTRACT + 5,
    )
    await redis.set(TEST_KEYS.worker("gone:1"), dead.model_dump_json())  # a killed worker's report, left to age
    await redis.set(TEST_KEYS.worker("other:2"), b"not a report")
    for writer in ("gone:1", "other:2", "nobody:3"):  # the line's last writer: dead, unreadable, without a report
        await health_line(redis, writer)
        await check_workers(redis)
        assert quiet == [] and routine == [], writer
    await beat(redis, version="9.0.0", contract=CONTRACT + 1)  # a newer worker, beating now
    loop = Gateway()
    integration = make(loop)
    running = asyncio.create_task(loop.run())  # nanobot's run(): the listener starts in the background
    await wait_until(lambda: quiet, 10, "the mismatch in nanobot's log")
    assert quiet == [
        f"version mismatch: nanobot's hooks {RELEASE} (contract {CONTRACT}) and the worker 9.0.0 "
        f"(contract {CONTRACT + 1}) speak different contracts: summaries, jobs and records between them "
        "may be refused or left waiting; fix: nanobot-summary hooks install, then restart nanobot"
    ]
    # Said once: again at every rescan and reconnect, nothing more.
    await check_workers(integration.ctx.link.client())
    integration.stop_listener()
    integration.start_listener()
    await asyncio.sleep(0.5)
    assert len(quiet) == 1 and not [line for line in routine if "version" in line]
    running.cancel()


async def test_another_release_of_the_same_contract_is_a_routine_line_and_the_same_version_none(
    redis, quiet, routine
) -> None:
    await beat(redis)  # this version's worker
    await check_workers(redis)
    assert quiet == [] and routine == []
    await redis.flushdb()
    older = "0.0.1"
    await beat(redis, version=older, contract=CONTRACT)
    await check_workers(redis)
    await check_workers(redis)
    assert quiet == [] and len(routine) == 1, routine
    assert routine[0].startswith(
        f"version mismatch: nanobot's hooks {RELEASE} (contract {CONTRACT}) and the worker "
        f"{older} (contract {CONTRACT}) are different releases of the same contract"
    )
    assert routine[0].endswith(f"fix: upgrade the worker to {RELEASE} and restart it (docs/operations.md, Upgrading)")


async def test_the_hooks_record_carries_their_versions(make, redis) -> None:
    integration = make()
    integration.start_listener()

    async def published() -> list[bytes]:
        return [key async for key in redis.scan_iter(match=f"{TEST_KEYS.hooks_prefix}*")]

    await wait_until(published, 10, "the hooks' record")
    record = json.loads(await redis.get((await published())[0]))
    assert record["version"] == RELEASE and record["contract"] == CONTRACT
