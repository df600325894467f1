"""The version handshake from nanobot's side.

The live workers' health records, read by the listener in its background task (at each (re)connect and rescan, never on
a turn's path), compared with the hooks' own versions; each difference said once in nanobot's log, in one line with the
command that fixes it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from nanobot_hooks import logs
from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.records import utcnow
from nanobot_hooks.contract.version import CONTRACT, RELEASE, Mismatch, version_mismatch, versions_of

# A worker's report that missed this many beats belongs to a worker killed or frozen (the worker's own rule,
# worker/state/workers.py, says 2.5; a little more here, so a beat a moment late is not a dead worker's): its
# version is not the running one's, and a report a killed old worker left for a day must not say a mismatch.
MISSED_BEATS = 3.0
DEFAULT_BEAT_SECONDS = 30.0
HEALTH_CHECK_SUFFIX = ":health-check"  # arq's health line of a queue (arq.constants.health_check_key_suffix)

# The mismatches said so far by this process, by the worker's versions: once each, whichever AgentLoop (or
# listener, after a reconnect) sees it.
_said: set[tuple[str, int]] = set()
_lock = threading.Lock()


def live_versions(raws: Iterable[Any], now: datetime) -> list[tuple[str, int]]:
    """The (release, contract) of each live worker among its raw reports, once each, in order.

    A report that is not one (not JSON, not an object) or has not beaten for MISSED_BEATS beats is left out."""
    found: list[tuple[str, int]] = []
    for raw in raws:
        try:
            report = json.loads(raw) if raw else None
            if not isinstance(report, dict):
                continue
            beat = float(report.get("beat_seconds") or DEFAULT_BEAT_SECONDS)
            last = datetime.fromisoformat(str(report["heartbeat_at"]))
            if (now - last).total_seconds() > MISSED_BEATS * beat:
                continue
        except (ValueError, TypeError, KeyError):
            continue
        versions = versions_of(report)
        if versions not in found:
            found.append(versions)
    return found


def to_say(raws: Iterable[Any], now: datetime, said: set[tuple[str, int]]) -> list[Mismatch]:
    """The mismatches of the live workers' versions with the hooks' that are not in `said` yet (added)."""
    new = []
    for versions in live_versions(raws, now):
        mismatch = version_mismatch((RELEASE, CONTRACT), versions)
        if mismatch is not None and versions not in said:
            said.add(versions)
            new.append(mismatch)
    return new


async def check_workers(client: Any) -> None:
    """Read the report of the worker that last wrote arq's health line and say each new mismatch.

    Read the report of the worker that last wrote arq's health line (two GETs: the line names its writer,
    `worker=<host>:<pid>`) and say each new mismatch: a warning when the contracts differ, a routine line for another
    release of the same contract. No SCAN: an instance's Redis ACL user may not list keys (Keys.acl_rules), and every
    live worker rewrites the line every 30 s, so the checks once a minute meet each worker in turn. The caller bounds it
    in time and catches what Redis raises."""
    keys = Keys.of(client)
    line = await client.get(keys.queue + HEALTH_CHECK_SUFFIX)
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else str(line or "")
    writer = text.rpartition(" worker=")[2].strip() if " worker=" in text else ""
    raws = [await client.get(keys.worker(writer))] if writer else []
    with _lock:
        mismatches = to_say(raws, utcnow(), _said)
    for mismatch in mismatches:
        (logs.warning if mismatch.serious else logs.info)(f"version mismatch: {mismatch.line}")
