"""The summary stage of a job.

Plan the cut, summarize what leaves the context, write the notes and facts (each finished chunk's, then the last's),
keep and clear the progress a retry resumes from, and store the record nanobot applies (or say why not), signed with the
instance's key; a waiting record is used only when it is signed."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from arq.connections import ArqRedis

from nanobot_hooks.contract.marker import METADATA_KEY, SessionMarker
from nanobot_hooks.contract.queue import DAMAGED, UNREADABLE, drop_record, load_waiting_record, store_record
from nanobot_hooks.contract.records import SummaryRecord, record_key
from worker.errors import RecordOfAnotherVersion, SessionError
from worker.memory.entries import DailyNotes, Fact
from worker.model import guards
from worker.model.answer import Answer
from worker.nanobot.metadata_line import write_metadata_entry
from worker.nanobot.sessions import SessionFile
from worker.state.outcomes import JobOutcome
from worker.state.progress import Progress, clear_progress, resume_progress, save_progress
from worker.summarize.chunks import summarize_entries
from worker.summarize.cut import saves_enough
from worker.summarize.plan import JobPlan, plan_job
from worker.summarize.remember import unnoted, write_notes
from worker.summarize.run import Run
from worker.text.prepare import Entry, Lines, detect_language
from worker.text.redact import redact

log = logging.getLogger("worker.summarize.summary")
ALREADY_NOTED = "(in notes) "


async def summarize_range(
    run: Run, session: SessionFile, pending: SummaryRecord | None, lines: Lines | None = None
) -> tuple[JobOutcome, set[int]]:
    """Returns the outcome and the indices whose notes this stage took care of."""
    deps, key = run.deps, run.key
    plan = plan_job(deps, session, pending, run.req, lines)
    if plan.skip is not None:
        return JobOutcome(session_key=key, status="noop", detail=plan.skip), set()
    cut = plan.cut
    language = detect_language(session.messages[cut.start : cut.read])
    answer, calls, last_noted = await _summarize(run, session, plan, language)
    tokens_before, tokens_after = _tokens(run, session, plan, answer.summary)
    await clear_progress(run.redis, key)
    # The last chunk's notes and facts are true, and paid for, whether or not the summary is committed.
    memory, notes = await write_notes(run, answer.notes, answer.facts, last_noted, language, session.generation)
    # Half the asked-for saving: the call is paid already, and only a summary that hardly shrinks is refused.
    if not saves_enough(tokens_before - tokens_after, plan.floor / 2):
        detail = f"a summary of {tokens_after} tokens would not shrink {tokens_before} enough; {memory}"
        return JobOutcome(session_key=key, status="noop", detail=detail), set()
    record = _record(run, session, plan, answer.summary, tokens_before, tokens_after)
    # Memory was written first: a crash before the record is stored re-runs the range, and notes are
    # idempotent. Its failures are reported, never fatal: the summary does not wait on a broken workspace.
    await _store(run, session, record)
    detail = (
        f"messages {cut.start}..{cut.boundary - 1} in {calls} call(s); {tokens_before} -> {tokens_after} "
        f"tokens; {memory}"
    )
    return _summarized(record, detail, plan, answer, notes), {e.index for e in plan.entries}


async def _summarize(run: Run, session: SessionFile, plan: JobPlan, language: str) -> tuple[Answer, int, list[Entry]]:
    """The plan's entries summarized; those already in the notes are marked, so no call notes them again."""
    cut = plan.cut
    fresh = {e.index for e in unnoted(run.deps, run.key, plan.entries, session.generation)}
    marked = [e if e.index in fresh else replace(e, text=ALREADY_NOTED + e.text) for e in plan.entries]
    begun = Progress.begin(cut.start, cut.boundary, session.timestamp_before(cut.boundary), plan.previous)

    async def keep(answer: Answer, noted: list[Entry], progress: Progress) -> None:
        """A finished chunk (not the last): its notes written, the progress kept so a retry resumes after it."""
        await write_notes(run, answer.notes, answer.facts, noted, language, session.generation)
        await save_progress(run.redis, run.key, progress)

    progress = await resume_progress(run.redis, run.key, begun)
    return await summarize_entries(run, marked, fresh, language, progress, keep)


def _tokens(run: Run, session: SessionFile, plan: JobPlan, summary: str) -> tuple[int, int]:
    """What the context replays from the watermark on, before and after the summary."""
    counter, counts, cut = run.deps.counter, plan.counts, plan.cut
    before = counter(session.previous_summary) + sum(counts[session.last_archived : cut.read])
    after = counter(summary) + sum(counts[cut.boundary : cut.read])
    return before, after


def _record(
    run: Run, session: SessionFile, plan: JobPlan, summary: str, tokens_before: int, tokens_after: int
) -> SummaryRecord:
    cut = plan.cut
    record = SummaryRecord(
        session_key=run.key,
        summary=redact(summary),  # it lands in every system prompt: no secret values there either
        start=cut.start,
        boundary=cut.boundary,
        boundary_timestamp=session.timestamp_before(cut.boundary),
        messages_before=cut.read - session.last_archived,
        messages_after=cut.kept + 1,  # nanobot's hidden checkpoint marker is replayed too
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        reason=run.req.reason,
    )
    return record.signed(record_key(run.deps.sessions_dir))  # the instance's hooks apply nothing unsigned


async def waiting_record(redis: ArqRedis, sessions_dir: Path, key: str) -> SummaryRecord | None:
    """The session's record waiting for pickup, if this instance signed it.

    Any client of a shared Redis can write into the namespace: a record that is not signed with the instance's key
    (forged, altered, or stored by a version before records were signed) is dropped in one line, never folded into the
    next summary, which this worker would sign. A record of another version is kept for it (RecordOfAnotherVersion: this
    job leaves the session alone); damaged bytes, no record of any version, are dropped."""
    record = await load_waiting_record(redis, key)
    if record == UNREADABLE:
        raise RecordOfAnotherVersion(
            f"{key}: a summary record written by another version of the worker waits for "
            "nanobot's pickup; kept for that version, no summary made over it"
        )
    if record == DAMAGED:
        log.warning("%s: dropped a damaged summary record (not a record of any version)", key)
        return None
    if not isinstance(record, SummaryRecord):
        return None
    if record.authentic(record_key(sessions_dir)):
        return record
    await drop_record(redis, record)
    log.warning(
        "%s: dropped a waiting summary record not signed with this instance's key (forged, or from an older version)",
        key,
    )
    return None


async def _store(run: Run, session: SessionFile, record: SummaryRecord) -> None:
    key = run.key
    try:
        # Line 1 before the notice: a fresh nanobot process may apply from it, and must not find
        # it rewritten after the live one applied the record.
        write_metadata_entry(session.path.parent, key, METADATA_KEY, SessionMarker.pending_entry(record))
    except SessionError as exc:
        # Redis holds the record nanobot applies; the copy in line 1 is a convenience.
        log.warning("%s: record not written to the session file: %s", key, exc)
    if not await store_record(run.redis, record):
        log.warning("the record of %s is on the primary only: no replica confirmed it in time", key)


def _summarized(
    record: SummaryRecord, detail: str, plan: JobPlan, answer: Answer, notes: list[DailyNotes]
) -> JobOutcome:
    return JobOutcome(
        session_key=record.session_key,
        status="summarized",
        detail=detail,
        boundary=record.boundary,
        tokens_before=record.tokens_before,
        tokens_after=record.tokens_after,
        messages_before=record.messages_before,
        messages_after=record.messages_after,
        carry_forward=guards.carry_forward(plan.previous, answer.summary),
        covered_kept=covered_kept(plan.entries, answer.summary, notes, answer.facts),
    )


def covered_kept(entries: list[Entry], summary: str, notes: list[DailyNotes], facts: list[Fact]) -> float | None:
    """The share of the covered messages' identifiers that reached the summary, the day's notes or the facts."""
    source = guards.identifiers("\n".join(e.text for e in entries))
    written = "\n".join([summary, *(n.model_dump_json() for n in notes), *(f.text for f in facts)])
    kept, total = guards.kept_share(source, written)
    return round(kept / total, 3) if total else None
