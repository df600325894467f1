"""The pickup scheduler, inside nanobot: when a finished summary is applied to its live session (apply.py applies it).

- at the start of a turn (`SessionTurnStarted`, before nanobot reads any history): a session just
  loaded from disk may carry the worker's record in its metadata; it is applied there, without
  network. This is how a fresh `nanobot agent` process or a restarted gateway picks up. Not in an
  ephemeral turn, nor before a slash command (`/new` would clear what was just applied): the event
  carries neither, so they are read from the turn's context on the call stack; the next ordinary
  turn applies instead.
- between turns: the worker's notice (or the pending set at start-up) schedules a pickup that takes
  the session's turn lock, re-validates and applies, and writes the session in a thread. Only for a
  session nanobot holds in memory: one it does not is left for its next turn (the path above), so a
  gateway that starts with many records waiting parses no session on its event loop. Runs where nanobot
  runs its message loop (gateway, interactive agent); direct calls (`agent -m`, the SDK) use the path
  above, and a record the trigger finds waiting is applied right after that turn (trigger.py awaits
  `pickup`).
- with NANOBOT_SUMMARY_PICKUP=idle, a record that is not due yet (`decide.pickup_due`: the provider's
  prompt cache is still warm and the context is not near the window) is held in memory, and the
  metadata copy stays where it is; a timer looks again once the cache would have gone cold, and the
  start of each turn applies it as soon as it is due. Whenever a held record is looked at (the trigger,
  the timer, a turn's start) it is checked against the live session first: one that no longer fits (a
  `/new`, nanobot's own compaction) is dropped at once, so it never blocks the next job. No network on
  the turn's path either way.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any, Literal

from nanobot_hooks import logs
from nanobot_hooks.context import MAX_SESSIONS, THROTTLE, Context
from nanobot_hooks.contract.queue import DAMAGED, UNREADABLE, drop_record, load_waiting_record, note_context
from nanobot_hooks.contract.records import SummaryRecord, record_key
from nanobot_hooks.contract.session_format import is_internal_session, last_context_tokens
from nanobot_hooks.surface import compacting, compaction_lock, ordinary_turn
from nanobot_hooks.turn.apply import Outcome, apply_record, forget_pending, pending_in_metadata, refusal, verdict
from nanobot_hooks.turn.decide import pickup_due


class PickupScheduler:
    """One AgentLoop's pickups: one at a time per session, records held for idle pickup and their timers."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._picking: set[str] = set()
        self._again: set[str] = set()
        # Idle pickup: records fetched but not due yet, and the timers that look at them again.
        self.held: dict[str, SummaryRecord] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        # Sessions whose waiting record this version cannot read (another version's), said once: the record is
        # kept and looked up again (one GET) whenever the session's trigger finds it, not logged each time.
        self._unreadable: dict[str, None] = {}

    def picking(self, key: str) -> bool:
        """Whether a pickup of `key` runs now."""
        return key in self._picking

    def timed(self) -> set[str]:
        """The sessions whose held record a timer will look at again."""
        return set(self._timers)

    def cancel_timers(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def on_turn_started(self, event: Any) -> None:
        try:
            key = event.context.session_key
            if is_internal_session(key):
                return
            session = self.ctx.nanobot.sessions.get_cached(key)
            if session is None:
                return
            record = self.held.get(key) or pending_in_metadata(session)
            if record is None or not ordinary_turn(session) or compacting(self.ctx.nanobot, key):
                return  # left for later (after this turn, the trigger's pickup waits for the compaction)
            if (refused := verdict(session, record)) is not None:  # due or not: it will never apply
                self._discard(session, record, refused, "at the start of a turn")
                self.ctx.spawn(self._settle(record, refused))
                return
            if not self._due(session):
                return
            self.held.pop(key, None)
            outcome, changed = apply_record(session, record)
            if changed:
                self.ctx.nanobot.sessions.save(session)
            self._report(record, outcome, "at the start of a turn")
            self.ctx.spawn(self._settle(record, outcome))
        except Exception as exc:  # noqa: BLE001
            self.ctx.bug("applying a summary at the start of a turn", exc)

    def request_pickup(self, key: str) -> None:
        """From a notice or the pending set: one pickup per session at a time, repeated if asked again."""
        if is_internal_session(key):
            return
        if key in self._picking:
            self._again.add(key)
            return
        self._picking.add(key)
        self.ctx.spawn(self._pickup_until_quiet(key))

    async def _pickup_until_quiet(self, key: str) -> None:
        try:
            while True:
                self._again.discard(key)
                await self.pickup(key, load=False)
                if key not in self._again:
                    return
        finally:
            self._picking.discard(key)

    def _due(self, session: Any) -> bool:
        """Apply now, or hold until the cache is cold or the context nears the window (idle pickup)."""
        settings = self.ctx.settings
        if settings.summary_pickup == "now":
            return True
        return pickup_due(
            mode=settings.summary_pickup,
            idle_seconds=idle_seconds(session),
            cache_ttl=settings.summary_cache_ttl,
            prompt_tokens=last_context_tokens(session.metadata),
            context_window=settings.summary_context_window or self.ctx.window(),
            threshold=settings.summary_threshold,
        )

    def _hold(self, key: str, record: SummaryRecord, session: Any) -> None:
        """Keep `record` for the turn that finds it due, and look again when the cache would be cold."""
        self.held.pop(key, None)
        self.held[key] = record
        while len(self.held) > MAX_SESSIONS:
            del self.held[next(iter(self.held))]
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        delay = max(self.ctx.settings.summary_cache_ttl - (idle_seconds(session) or 0.0), 0.0) + 0.05
        self._timers[key] = asyncio.get_running_loop().call_later(delay, self._recheck, key)
        logs.debug(
            f"holding the summary of {key} until the prompt cache is cold ({delay:.0f} s) "
            "or the context nears the window"
        )

    def _discard(self, session: Any, record: SummaryRecord, outcome: Outcome, where: str) -> None:
        """A record that will never apply (stale, or applied already).

        No longer held, its metadata copy gone (the session saved), reported. The caller settles it in Redis."""
        key = record.session_key
        if self.held.get(key) == record:
            self._release(key)
        if forget_pending(session, record):
            self.ctx.nanobot.sessions.save(session)
        self._report(record, outcome, where)

    def _release(self, key: str) -> None:
        """No record of `key` held any more, nor its timer."""
        self.held.pop(key, None)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _recheck(self, key: str) -> None:
        self._timers.pop(key, None)
        if key in self.held:
            self.request_pickup(key)

    async def pickup(self, key: str, load: bool = True) -> Outcome | Literal["held"] | None:
        """Apply, hold or drop the session's waiting record, between turns.

        Between turns, under the session's turn lock: apply the session's waiting record, hold it (idle pickup), or drop
        it when it will never apply. Never raises (but a cancel still propagates).

        `load=False` (a notice, the pending set at start-up) leaves a session nanobot does not hold in memory
        alone: loading it would parse the whole file on nanobot's event loop (a gateway starting with sixty
        records waiting stalled every chat), and its next turn applies the record from line 1 at no cost (or
        the trigger after that turn, which loads: the session is in memory then)."""
        try:
            sessions = self.ctx.nanobot.sessions
            if sessions.get_cached(key) is None and (not load or not self._on_disk(key)):
                # Not in memory, or not a session of this nanobot (another workspace on the same Redis):
                # leave its record. Asked again every time (no memo): once the session is here, it applies.
                return None
            record = await self.ctx.link.call(f"reading the summary of {key}", lambda c: load_waiting_record(c, key))
            if record == UNREADABLE or record == DAMAGED:
                self._unread(key, record)
                return None
            self._unreadable.pop(key, None)
            if not isinstance(record, SummaryRecord):
                return None
            if not self._signed(record):
                await self._settle(record, "forged")
                return "forged"
            if record.undoes:  # a summary held for idle pickup is undone too: it never reaches the session
                self._release(key)
            outcome = await self._apply_between_turns(key, record)
            if outcome != "held":
                await self._settle(record, outcome)
            return outcome
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            self.ctx.bug(f"applying the summary of {key}", exc)
            return None

    async def _apply_between_turns(self, key: str, record: SummaryRecord) -> Outcome | Literal["held"]:
        """Under the session's turn lock (a turn holds it throughout): drop, hold or apply the record."""
        sessions = self.ctx.nanobot.sessions
        # And under nanobot's idle-compaction lock: its compaction reads the session, waits seconds for its
        # model and inserts its checkpoint where the session ended then; a record applied in between would
        # shift the messages, and its checkpoint would land before a message its summary holds.
        async with self.ctx.nanobot.session_lock(key), compaction_lock(self.ctx.nanobot, key):
            session = sessions.get_or_create(key)
            outcome = verdict(session, record)  # checked first: a stale record is not held
            if outcome is not None:
                self._discard(session, record, outcome, "between turns")
                return outcome
            if not record.undoes and not self._due(session):  # an undo waits for no cold cache
                self._hold(key, record, session)
                return "held"
            self.held.pop(key, None)
            outcome, changed = apply_record(session, record)
            if changed:
                # Off the event loop: rewriting a session of megabytes would hold up every other chat. The
                # turn lock keeps this session's own turns out until it is written.
                await asyncio.to_thread(sessions.save, session)
            self._report(record, outcome, "between turns")
            return outcome

    def _unread(self, key: str, what: str) -> None:
        """A waiting record this version cannot read.

        Another version's is kept for the version that reads it (and stands for its summary meanwhile: no job is queued
        over it), said once per session; damage was dropped."""
        self.ctx.counts[what] += 1
        if what == DAMAGED:
            THROTTLE.warning(
                DAMAGED,
                f"dropped a damaged summary record of {key} (not a record of any version); "
                f"{self.ctx.counts[DAMAGED]} so far",
            )
        elif key not in self._unreadable:
            self._unreadable[key] = None
            while len(self._unreadable) > MAX_SESSIONS:
                del self._unreadable[next(iter(self._unreadable))]
            logs.warning(
                f"kept the summary record of {key}: written by another version of the worker, which this "
                f"version of the hooks cannot read; it waits for hooks of that version (upgrade both to "
                f"one version), or expires"
            )

    def _signed(self, record: SummaryRecord) -> bool:
        """Is `record` signed with this instance's key?

        Every record from Redis reaches the hooks through here, and any client of a shared Redis can write one: one that
        is not (forged, altered, or stored by a version before records were signed) is refused in one line and never
        applied. The copy in line 1 needs no check: only this instance's worker writes the session file."""
        try:
            if record.authentic(record_key(self.ctx.nanobot.sessions.sessions_dir)):
                return True
            why = "not signed with this instance's key (forged, or from an older version of the worker)"
        except (AttributeError, TypeError, OSError, ValueError) as exc:  # no sessions folder, unreadable, damaged
            why = f"this instance's key cannot be read ({logs.describe(exc)})"
        self.ctx.counts["forged"] += 1
        key = record.session_key
        THROTTLE.warning(
            f"forged:{key}", f"refused the summary record of {key}: {why}; {self.ctx.counts['forged']} refused so far"
        )
        return False

    def _cached(self, key: str) -> bool:
        try:
            return self.ctx.nanobot.sessions.get_cached(key) is not None
        except Exception:  # noqa: BLE001
            return False

    def _on_disk(self, key: str) -> bool:
        read = getattr(self.ctx.nanobot.sessions, "read_session_metadata", None)
        try:
            return read is not None and read(key) is not None
        except Exception:  # noqa: BLE001
            return False

    def _report(self, record: SummaryRecord, outcome: Outcome, where: str) -> None:
        self.ctx.counts[outcome] += 1
        key = record.session_key
        if outcome == "replayed":
            why = (
                refusal(self.ctx.nanobot.sessions.get_cached(key), record, not record.undoes)
                if self._cached(key)
                else None
            )
            THROTTLE.warning(
                f"replayed:{key}",
                f"refused the summary record of {key}: {why or 'replayed'} (a record "
                f"applies once); {self.ctx.counts['replayed']} refused so far",
            )
        elif record.undoes:
            if outcome != "duplicate":  # a duplicate: the session was undone already (loaded from the undone file)
                logs.info(
                    f"undid the summary of {key} (nanobot-summary undo): every message is sent again"
                    if outcome == "applied"
                    else f"did not undo the summary of {key}: it changed since the undo"
                )
        elif outcome == "applied":
            logs.info(
                f"applied the summary of {key} {where}: messages {record.start}..{record.boundary - 1} "
                f"covered, {record.tokens_before} -> {record.tokens_after} tokens"
            )
        elif outcome == "stale":
            logs.info(
                f"dropped the summary of {key}: the session changed since (/new or a compaction); "
                f"{self.ctx.counts['stale']} dropped so far"
            )

    async def _settle(self, record: SummaryRecord, outcome: Outcome) -> None:
        async def work(client: Any) -> None:
            await drop_record(client, record)  # keeps a newer record of the same session
            if not record.undoes or outcome == "replayed":
                await client.hincrby(self.ctx.settings.keys.stats, outcome, 1)
            elif outcome == "applied":  # an undo is no pickup of a summary
                await client.hincrby(self.ctx.settings.keys.stats, "undone", 1)
            if outcome == "applied" and not record.undoes:  # the sawtooth's drop, in the session's context history
                await note_context(
                    client,
                    [
                        (
                            record.session_key,
                            {
                                "at": round(time.time(), 1),
                                "applied": True,
                                "before": record.tokens_before,
                                "after": record.tokens_after,
                            },
                        )
                    ],
                )

        await self.ctx.link.call(f"clearing the summary record of {record.session_key}", work)


def idle_seconds(session: Any) -> float | None:
    """Seconds since nanobot last saved the session (its `updated_at`, local time), None if unknown."""
    updated = getattr(session, "updated_at", None)
    if not isinstance(updated, datetime):
        return None
    return max((datetime.now(updated.tzinfo) - updated).total_seconds(), 0.0)
