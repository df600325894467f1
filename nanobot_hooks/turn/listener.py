"""Waits for the worker's notices and finds the records still pending.

Waits for the worker's notices (a record is ready; a job ended, which goes into nanobot's log), finds records still
pending at start-up and after reconnects, and then compares the running workers' versions with the hooks'
(turn/handshake.py)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from nanobot_hooks import logs
from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.queue import pending_sessions
from nanobot_hooks.contract.version import CONTRACT, CONTRACT_FIELD, RELEASE, RELEASE_FIELD
from nanobot_hooks.link import RedisLink
from nanobot_hooks.settings import HookSettings, runner, shared_settings
from nanobot_hooks.turn.handshake import check_workers

# A notice is lost while nobody listens (Redis pub/sub keeps nothing), so the pending set is read
# again after every (re)subscribe and now and then, which also notices a silently dead connection.
RESCAN_SECONDS = 60.0
FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 30.0
# The hooks' settings are written at each (re)subscribe and rescan; they expire once this nanobot is gone.
SETTINGS_SECONDS = 3 * RESCAN_SECONDS


async def listen(
    link: RedisLink,
    on_key: Callable[[str], None],
    rescan_seconds: float = RESCAN_SECONDS,
    settings: HookSettings | None = None,
) -> None:
    """Run until cancelled; `on_key(session_key)` is called for every record that may be ready.

    With `settings`, they are published for `doctor` (publish_settings) at each (re)subscribe and rescan."""
    delay = FIRST_RETRY_SECONDS
    while True:
        pubsub = None
        try:
            client = link.client()
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            async with asyncio.timeout(link.timeout):
                await link.resolved()  # the host's name, looked up off asyncio's shared pool (link.Resolver)
                keys_of = Keys.of(client)
                await pubsub.subscribe(keys_of.notice_channel, keys_of.outcome_channel)
                keys = await pending_sessions(client)
                await publish_settings(client, settings)
            link.ok()
            delay = FIRST_RETRY_SECONDS
            for key in keys:
                on_key(key)
            await handshake(link, client)
            await _follow(link, client, pubsub, keys_of, on_key, rescan_seconds, settings)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure: report (rate-limited) and reconnect
            link.trouble("listening for finished summaries", exc)
        finally:
            if pubsub is not None:
                try:
                    await asyncio.wait_for(pubsub.aclose(), 1.0)
                except Exception:  # noqa: BLE001 - closing a broken pub/sub must not matter (a cancel still propagates)
                    pass
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_RETRY_SECONDS)


async def _follow(
    link: RedisLink,
    client: Any,
    pubsub: Any,
    keys_of: Keys,
    on_key: Callable[[str], None],
    rescan_seconds: float,
    settings: HookSettings | None,
) -> None:
    """Follow the notices until the connection fails.

    Until the connection fails: each notice to `on_key`, each outcome to nanobot's log, and every `rescan_seconds` the
    pending sessions again (a notice sent while nobody listened is not lost)."""
    loop = asyncio.get_running_loop()
    next_scan = loop.time() + rescan_seconds
    while True:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
        if message is not None and message.get("type") == "message":
            data = message.get("data")
            text = data.decode() if isinstance(data, bytes) else str(data)
            channel = message.get("channel")
            if (channel.decode() if isinstance(channel, bytes) else channel) == keys_of.outcome_channel:
                log_outcome(text)
            else:
                on_key(text)
        if loop.time() >= next_scan:
            async with asyncio.timeout(link.timeout):
                keys = await pending_sessions(client)
                await publish_settings(client, settings)
            for key in keys:
                on_key(key)
            await handshake(link, client)  # a worker started or upgraded since is seen within a rescan
            next_scan = loop.time() + rescan_seconds


async def handshake(link: RedisLink, client: Any) -> None:
    """The running workers' versions compared with the hooks' (turn/handshake.py), bounded on its own.

    Advice, whose failure never stops the listener (the next rescan tries again)."""
    try:
        async with asyncio.timeout(link.timeout):
            await check_workers(client)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - Redis trouble is the listener's to say; a bad report is skipped
        logs.debug(f"the workers' versions were not compared ({logs.describe(exc)})")


# When this process's hooks started: a restarted nanobot tells itself apart from the one before.
STARTED = time.time()


async def publish_settings(client: Any, settings: HookSettings | None) -> None:
    """The settings this nanobot's hooks share with the worker, written for `doctor`, `status` and the page.

    The settings this nanobot's hooks act on that the worker must share (settings.SHARED_SETTINGS), how this nanobot is
    run (where they are set) and the hooks' versions, for `doctor`, `status` and the page: one small key of this
    process, written here, in the listener's background task, never on a turn's path."""
    if settings is None:
        return
    process = f"{socket.gethostname()}:{os.getpid()}"
    report = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": STARTED,
        "written": time.time(),
        "runner": runner(),
        "settings": shared_settings(settings),
        RELEASE_FIELD: RELEASE,
        CONTRACT_FIELD: CONTRACT,
    }
    keys = Keys.of(client)
    # Indexed (`Keys.index`): the worker's commands list running nanobots without SCAN, and `undo` knows from it
    # that a listener is there (a presence key: the ACL user may not count a channel's subscribers).
    async with client.pipeline(transaction=False) as pipe:
        pipe.set(keys.hooks(process), json.dumps(report), ex=int(SETTINGS_SECONDS))
        pipe.sadd(keys.index("hooks"), process)
        await pipe.execute()


def log_outcome(payload: str) -> None:
    """The worker's one line about a job, in nanobot's log (failures as warnings: the user must see them).

    The worker redacted it; a payload that is not ours is ignored."""
    try:
        outcome = json.loads(payload)
        line, status = str(outcome["line"]), str(outcome.get("status", ""))
    except (ValueError, TypeError, KeyError):
        return
    line = " ".join(line.split())[:500]  # one line, bounded: it comes from Redis
    if status == "failed":
        logs.warning(line)
    else:
        logs.info(line)
