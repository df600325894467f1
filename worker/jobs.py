"""The summarize job: read a session, plan the cut, summarize (in chunks if needed), store the record, notify."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any, Protocol

from arq import Retry
from arq.connections import ArqRedis

from nanobot_hooks.contract import METADATA_KEY, SummarizeRequest, SummaryRecord, daily_flag_key
from nanobot_hooks.nanobot_format import is_internal_session
from nanobot_hooks.queue import load_record, store_record
from worker.answer import NOTE_PARTS, Answer, DailyNotes, Fact, parse_answer
from worker.cut import Cut, plan_cut
from worker.errors import (
    BadAnswer,
    ContextTooLong,
    LLMError,
    MemoryFilesError,
    PermanentLLMError,
    RetryableError,
    SessionError,
    SummaryFailed,
    WorkerError,
)
from worker.llm import complete, context_window
from worker.nanobot_config import ModelChoice, NanobotConfig
from worker.outcomes import JobOutcome, save_outcome
from worker.prepare import Entry, chunk, detect_language, transcript
from worker.prompts import notes_system_prompt, system_prompt, user_prompt
from worker.recall_index import RecallIndex, RecallIndexError, archived_through
from worker.redact import redact
from worker.settings import Settings
from worker.sessions import SessionFile, read_session, write_metadata_entry
from worker.tokens import Counter, count_message

log = logging.getLogger("worker.jobs")

# Room for the wrapper text around the transcript; the rest of the budget is measured.
PROMPT_SLACK_TOKENS = 200
KNOWN_FACTS_IN_PROMPT = 100
CONTEXT_SHRINKS = 3



class Memory(Protocol):
    """The memory files, as the job uses them (worker.memory.MemoryFiles)."""

    def noted_through(self, session_key: str, date: str) -> str | None: ...

    def known_facts(self) -> list[str]: ...

    async def write(self, session_key: str, notes: list[DailyNotes], facts: list[Fact], language: str) -> object:
        """Returns what it did; its str() goes into the job's outcome."""


@dataclass
class Deps:
    """What every job needs, built once at worker start-up."""

    settings: Settings
    nanobot: NanobotConfig
    model: ModelChoice
    fallback: ModelChoice | None
    counter: Counter
    tz: tzinfo | None = None  # notes are dated in nanobot's configured timezone
    instructions: str | None = None
    memory: Memory | None = None
    recall: RecallIndex | None = None

    @property
    def sessions_dir(self) -> Path:
        return self.nanobot.sessions_dir


async def summarize_session(ctx: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """arq entry point. Transient trouble is retried with backoff; the outcome is kept for status."""
    deps: Deps = ctx["deps"]
    redis: ArqRedis = ctx["redis"]
    job_try: int = ctx.get("job_try", 1)
    req = SummarizeRequest.model_validate(request)
    started = time.monotonic()
    if is_internal_session(req.session_key):
        outcome = JobOutcome(session_key=req.session_key, status="noop", detail="an internal nanobot session")
        await save_outcome(redis, outcome)
        return outcome.model_dump(mode="json")
    since = await redis.getdel(daily_flag_key(req.session_key))
    if since:
        req = req.model_copy(update={"notes_through_end": True, "notes_since": _text(since)})
    try:
        outcome = await run_job(deps, redis, req, job_try)
    except RetryableError as exc:
        if job_try < deps.settings.summary_max_tries:
            if since:
                # The retry must still note through the end. Only a retry: a flag left after the last
                # try would make after_job_end queue the session again, forever.
                await redis.set(daily_flag_key(req.session_key), since, nx=True)
            delay = deps.settings.summary_retry_delay * 2 ** (job_try - 1)
            retry_after = exc.retry_after or 0.0
            log.warning("summary of %s failed (try %d): %s; retrying", req.session_key, job_try, exc)
            raise Retry(defer=max(min(delay, 600.0), retry_after)) from None
        detail = f"gave up after {job_try} tries: {exc}"
        outcome = JobOutcome(session_key=req.session_key, status="failed", detail=detail)
    except WorkerError as exc:
        outcome = JobOutcome(session_key=req.session_key, status="failed", detail=str(exc))
    except Exception as exc:  # a bug must still leave an outcome behind, not only a traceback in the log
        log.exception("summary of %s crashed", req.session_key)
        outcome = JobOutcome(session_key=req.session_key, status="failed", detail=f"internal error: {exc!r}")
    outcome = outcome.model_copy(update={"seconds": round(time.monotonic() - started, 3), "job_try": job_try})
    log.info("%s %s in %.1fs: %s", outcome.status, req.session_key, outcome.seconds, outcome.detail)
    await save_outcome(redis, outcome)
    return outcome.model_dump(mode="json")


def chain_start(session: SessionFile, pending: SummaryRecord | None) -> tuple[int, str]:
    """Where to start, and the summary to fold in: an unapplied record that still fits counts as applied."""
    start, previous = session.last_archived, session.previous_summary
    if pending is not None and pending.boundary >= start:
        if pending.fits(start, len(session.messages), session.timestamp_before(pending.boundary)):
            return pending.boundary, pending.summary
    return start, previous


async def run_job(deps: Deps, redis: ArqRedis, req: SummarizeRequest, job_try: int = 1) -> JobOutcome:
    """The summary of what leaves the context, then (daily run) notes for every message not yet noted."""
    session = read_session(deps.sessions_dir, req.session_key)
    if session.skipped_lines:
        log.warning("%s: skipped %d malformed lines (%s)", req.session_key, session.skipped_lines,
                    "; ".join(session.skipped_reasons[:3]))
    outcome, covered = await summarize_part(deps, redis, req, session, job_try)
    if req.notes_through_end and deps.memory is not None:
        written = await notes_part(deps, req, session, covered, job_try)
        status = "noted" if outcome.status == "noop" and written else outcome.status
        detail = f"{outcome.detail}; {written or 'notes up to date'}"
        outcome = outcome.model_copy(update={"status": status, "detail": detail})
    await index_for_recall(deps, session, outcome.boundary)
    return outcome


async def index_for_recall(deps: Deps, session: SessionFile, boundary: int | None) -> None:
    """The recall index follows what this job archived and noted; its trouble is logged, never fatal."""
    if deps.recall is None:
        return
    through = max(archived_through(session), boundary or 0)
    try:
        done = await asyncio.to_thread(deps.recall.refresh, deps.sessions_dir, session, through)
    except (RecallIndexError, sqlite3.Error, OSError) as exc:
        log.warning("%s: recall index not updated: %s", session.key, exc)
        return
    log.info("%s: %s", session.key, done)


async def summarize_part(
    deps: Deps, redis: ArqRedis, req: SummarizeRequest, session: SessionFile, job_try: int
) -> tuple[JobOutcome, set[int]]:
    """Returns the outcome and the indices whose notes this part took care of."""
    key = req.session_key
    start, previous = chain_start(session, await load_record(redis, key))
    cut, counts = plan_for(deps, session, start, req)
    entries = transcript(session.messages, cut.start, cut.boundary, deps.counter, deps.tz)
    if cut.covered == 0 or not entries:
        return JobOutcome(session_key=key, status="noop", detail="nothing to cover beyond the keep rule"), set()
    language = detect_language(session.messages[cut.start:cut.read])
    fresh = unnoted(deps, key, entries)
    fresh_indices = {e.index for e in fresh}
    marked = [e if e.index in fresh_indices else replace(e, text=ALREADY_NOTED + e.text) for e in entries]
    answer, parts = await summarize_entries(deps, marked, previous, language, job_try)

    replay_from = session.last_archived
    tokens_before = deps.counter(session.previous_summary) + sum(counts[replay_from:cut.read])
    tokens_after = deps.counter(answer.summary) + sum(counts[cut.boundary:cut.read])
    if tokens_after >= tokens_before:
        detail = f"a summary of {tokens_after} tokens would not shrink {tokens_before}"
        return JobOutcome(session_key=key, status="noop", detail=detail), set()
    record = SummaryRecord(
        session_key=key,
        summary=redact(answer.summary),  # it lands in every system prompt: no secret values there either
        start=cut.start,
        boundary=cut.boundary,
        boundary_timestamp=session.timestamp_before(cut.boundary),
        messages_before=cut.read - replay_from,
        messages_after=cut.kept + 1,  # nanobot's hidden checkpoint marker is replayed too
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        reason=req.reason,
    )
    # Nothing fresh: whatever notes the model wrote repeat what the day files already hold.
    notes = dated_notes(answer.notes, fresh) if fresh else []
    detail = f"messages {cut.start}..{cut.boundary - 1} in {parts} call(s); {tokens_before} -> {tokens_after} tokens"
    # Memory first: a crash before the record is stored re-runs the range, and notes are idempotent.
    # Its failures are reported, never fatal: the summary does not wait on a broken workspace.
    detail += f"; {await write_memory(deps, key, notes, answer.facts, language)}"
    try:
        # Line 1 before the notice: a fresh nanobot process may apply from it, and must not find
        # it rewritten after the live one applied the record.
        write_metadata_entry(deps.sessions_dir, key, METADATA_KEY,
                             {"pending": record.model_dump(mode="json")})
    except SessionError as exc:
        # Redis holds the record nanobot applies; the copy in line 1 is a convenience.
        log.warning("%s: record not written to the session file: %s", key, exc)
    await store_record(redis, record)
    outcome = JobOutcome(session_key=key, status="summarized", detail=detail, boundary=cut.boundary,
                         tokens_before=tokens_before, tokens_after=tokens_after)
    return outcome, {e.index for e in entries}


async def notes_part(deps: Deps, req: SummarizeRequest, session: SessionFile, covered: set[int], job_try: int) -> str:
    """Notes for the messages the summary did not cover (the kept tail, older un-noted days): notes only."""
    assert deps.memory is not None
    dated = transcript(session.messages, 0, len(session.messages), deps.counter, deps.tz, req.notes_since)
    entries = unnoted(deps, req.session_key, [e for e in dated if e.index not in covered])
    if not entries:
        return ""
    language = detect_language(session.messages)
    system = notes_system_prompt(language)
    known = known_facts(deps)
    notes: list[DailyNotes] = []
    facts: list[Fact] = []
    overhead = deps.counter(system) + deps.counter("\n".join(known)) + PROMPT_SLACK_TOKENS
    parts = chunk(entries, deps.settings.summary_input_tokens - overhead, deps.counter)
    for number, part in enumerate(parts, start=1):
        prompt = user_prompt(None, part, number, last=number == len(parts), known_facts=known)
        answer = await ask(deps, system, prompt, job_try, need_summary=False)
        notes += answer.notes
        facts += answer.facts
    written = await write_memory(deps, req.session_key, dated_notes(notes, entries), facts, language)
    return f"noted {len(entries)} more messages: {written}"


async def write_memory(deps: Deps, key: str, notes: list[DailyNotes], facts: list[Fact], language: str) -> str:
    """Memory-file trouble (a full disk, a read-only workspace, a lock held too long) is reported, not fatal."""
    if deps.memory is None:
        return "no memory files"
    try:
        return str(await deps.memory.write(key, notes, facts, language))
    except MemoryFilesError as exc:
        log.warning("%s: memory files not written: %s", key, exc)
        return f"memory files not written: {exc}"


def known_facts(deps: Deps) -> list[str]:
    """What MEMORY.md holds, so the model does not add it again; bounded, it rides in every call."""
    if deps.memory is None:
        return []
    try:
        return deps.memory.known_facts()[:KNOWN_FACTS_IN_PROMPT]
    except OSError as exc:
        log.warning("MEMORY.md not readable: %s", exc)
        return []


ALREADY_NOTED = "(in notes) "


def unnoted(deps: Deps, session_key: str, entries: list[Entry]) -> list[Entry]:
    """Entries later than what that day's notes file already covers for this session."""
    if deps.memory is None:
        return list(entries)
    cursors: dict[str, str | None] = {}
    fresh = []
    for entry in entries:
        if entry.date is None or entry.timestamp is None:
            fresh.append(entry)
            continue
        if entry.date not in cursors:
            try:
                cursors[entry.date] = deps.memory.noted_through(session_key, entry.date)
            except (OSError, ValueError) as exc:
                log.warning("%s: cannot read the notes of %s: %s", session_key, entry.date, exc)
                cursors[entry.date] = None
        cursor = cursors[entry.date]
        if cursor is None or not _not_after(entry.timestamp, cursor):
            fresh.append(entry)
    return fresh


def _not_after(stamp: str, cursor: str) -> bool:
    try:
        return datetime.fromisoformat(stamp) <= datetime.fromisoformat(cursor)
    except (ValueError, TypeError):
        return stamp <= cursor


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def window_for(deps: Deps, req: SummarizeRequest) -> int:
    return (
        deps.settings.summary_context_window
        or req.context_window
        or deps.nanobot.context_window
        or context_window(deps.model.model)
    )


def plan_for(deps: Deps, session: SessionFile, start: int, req: SummarizeRequest) -> tuple[Cut, list[int]]:
    """The cut a job makes now (and `--dry-run` prints), with each message's token count."""
    counts = [count_message(m, deps.counter) for m in session.messages]
    return plan_cut(session.messages, start, counts, deps.settings.summary_keep, window_for(deps, req)), counts


async def summarize_entries(
    deps: Deps, entries: list[Entry], previous: str, language: str, job_try: int
) -> tuple[Answer, int]:
    """One call when the input fits the budget; otherwise chunks, each folding in the summary so far."""
    settings = deps.settings
    system = system_prompt(language, settings.summary_max_chars, deps.instructions)
    known = known_facts(deps)
    fixed = deps.counter(system) + deps.counter("\n".join(known)) + PROMPT_SLACK_TOKENS
    budget = settings.summary_input_tokens
    for _ in range(CONTEXT_SHRINKS + 1):
        try:
            running, notes, facts = previous, [], []
            position = calls = 0
            while position < len(entries):
                # Measured per chunk: the running summary is what it is now, not a worst case.
                room = budget - fixed - deps.counter(running)
                part = chunk(entries[position:], room, deps.counter)[0]
                position += len(part)
                calls += 1
                if calls > 1 or position < len(entries):
                    # long work says where it is: a big backlog takes many calls
                    log.info("part %d: messages %d..%d (%d of %d done)", calls, part[0].index, part[-1].index,
                             position, len(entries))
                prompt = user_prompt(running, part, calls, last=position >= len(entries), known_facts=known)
                answer = await ask(deps, system, prompt, job_try, allow_prose=not running.strip())
                running = answer.summary
                notes += answer.notes
                facts += answer.facts
            return Answer(summary=running, notes=notes, facts=facts), calls
        except ContextTooLong:
            budget //= 2
            log.warning("input over the model's window; shrinking the budget to %d tokens", budget)
    raise SummaryFailed("the input does not fit the model's window even after shrinking")


async def ask(deps: Deps, system: str, prompt: str, job_try: int, need_summary: bool = True,
              allow_prose: bool = True) -> Answer:
    """The summary model, then the fallback model once the first keeps failing or cannot work."""
    candidates = [deps.model] + ([deps.fallback] if deps.fallback else [])
    error: Exception | None = None
    for position, choice in enumerate(candidates):
        if position > 0 and job_try < 2 and not isinstance(error, PermanentLLMError):
            break
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        try:
            completion = await complete(choice, messages, deps.settings.summary_timeout)
            try:
                return parse_answer(completion.text, deps.settings.summary_max_chars, need_summary, allow_prose)
            except BadAnswer as bad:
                if bad.oversized is None:
                    raise
                # One firmer request: most models comply when told their own length.
                messages[1]["content"] = f"{prompt}\n\nYour last summary had {bad.oversized} characters: shorten it."
                completion = await complete(choice, messages, deps.settings.summary_timeout)
                return parse_answer(completion.text, deps.settings.summary_max_chars, need_summary, allow_prose)
        except ContextTooLong:
            raise  # the caller shrinks the input; another model would not read more
        except LLMError as exc:
            log.warning("model %s failed: %s", choice.model, exc)
            error = exc
    assert error is not None
    raise error


def dated_notes(notes: list[DailyNotes], entries: list[Entry]) -> list[DailyNotes]:
    """One entry per day of the messages, merged across chunks; spans come from the messages.

    A day with nothing worth noting still gets its (empty) entry: its span marks those messages as noted.
    """
    dates = sorted({e.date for e in entries if e.date})
    by_date: dict[str, DailyNotes] = {d: DailyNotes(date=d) for d in dates}
    for note in notes:
        date = note.date if note.date in dates else (dates[-1] if dates else note.date)
        merged = by_date.setdefault(date, DailyNotes(date=date))
        for name in NOTE_PARTS:
            target = getattr(merged, name)
            target.extend(item for item in getattr(note, name) if item not in target)
    for date, note in by_date.items():
        stamps = [e for e in entries if e.date == date]
        if stamps:
            note.first_timestamp = stamps[0].timestamp
            note.last_timestamp = stamps[-1].timestamp
    return [by_date[d] for d in sorted(by_date)]

