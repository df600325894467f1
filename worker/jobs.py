"""The summarize job: read a session, plan the cut, summarize (in chunks if needed), store the record, notify."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path
from typing import Any

from arq import Retry
from arq.connections import ArqRedis

from nanobot_hooks.contract import (
    METADATA_KEY,
    DailyNotes,
    JobOutcome,
    SummarizeRequest,
    SummaryRecord,
)
from nanobot_hooks.queue import load_record, save_outcome, store_record
from nanobot_hooks.settings import Settings
from worker.cut import Cut, plan_cut
from worker.llm import (
    Answer,
    BadAnswer,
    ContextTooLong,
    PermanentLLMError,
    TransientLLMError,
    complete,
    context_window,
    parse_answer,
)
from worker.nanobot_config import ModelChoice, NanobotConfig, NanobotConfigError
from worker.prepare import Entry, chunk, detect_language, transcript
from worker.prompts import system_prompt, user_prompt
from worker.sessions import SessionFile, SessionKeyError, SessionNotFound, read_session, write_metadata_entry
from worker.tokens import Counter, count_message

log = logging.getLogger("worker.jobs")

# Room for the wrapper text around the transcript; the rest of the budget is measured.
PROMPT_SLACK_TOKENS = 200
CONTEXT_SHRINKS = 3

MemoryWriter = Callable[[SummaryRecord, SessionFile], Awaitable[None]]
KnownFacts = Callable[[], list[str]]


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
    write_memory: MemoryWriter | None = None
    known_facts: KnownFacts | None = None

    @property
    def sessions_dir(self) -> Path:
        return self.nanobot.sessions_dir


class SummaryFailed(Exception):
    """The job cannot succeed by retrying; the outcome says why."""


async def summarize_session(ctx: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """arq entry point. Transient trouble is retried with backoff; the outcome is kept for status."""
    deps: Deps = ctx["deps"]
    redis: ArqRedis = ctx["redis"]
    job_try: int = ctx.get("job_try", 1)
    req = SummarizeRequest.model_validate(request)
    try:
        outcome = await run_summary(deps, redis, req, job_try)
    except (TransientLLMError, BadAnswer) as exc:
        if job_try < deps.settings.summary_max_tries:
            delay = deps.settings.summary_retry_delay * 2 ** (job_try - 1)
            retry_after = getattr(exc, "retry_after", None) or 0.0
            log.warning("summary of %s failed (try %d): %s; retrying", req.session_key, job_try, exc)
            raise Retry(defer=max(min(delay, 600.0), retry_after)) from None
        outcome = JobOutcome(session_key=req.session_key, status="failed", detail=f"gave up after {job_try} tries: {exc}")
    except (SummaryFailed, PermanentLLMError, SessionNotFound, SessionKeyError, NanobotConfigError) as exc:
        outcome = JobOutcome(session_key=req.session_key, status="failed", detail=str(exc))
    log.info("%s %s: %s", outcome.status, req.session_key, outcome.detail)
    await save_outcome(redis, outcome)
    return outcome.model_dump(mode="json")


def chain_start(session: SessionFile, pending: SummaryRecord | None) -> tuple[int, str]:
    """Where to start, and the summary to fold in: an unapplied record that still fits counts as applied."""
    start, previous = session.last_archived, session.previous_summary
    if pending is not None and pending.boundary >= start:
        if pending.fits(start, len(session.messages), session.timestamp_before(pending.boundary)):
            return pending.boundary, pending.summary
    return start, previous


async def run_summary(deps: Deps, redis: ArqRedis, req: SummarizeRequest, job_try: int = 1) -> JobOutcome:
    session = read_session(deps.sessions_dir, req.session_key)
    if session.skipped_lines:
        log.warning("%s: skipped %d malformed lines (%s)", req.session_key, session.skipped_lines,
                    "; ".join(session.skipped_reasons[:3]))
    start, previous = chain_start(session, await load_record(redis, req.session_key))
    counts = [count_message(m, deps.counter) for m in session.messages]
    window = window_for(deps, req)
    cut = plan_cut(session.messages, start, counts, deps.settings.summary_keep, window)
    if cut.covered == 0:
        return JobOutcome(session_key=req.session_key, status="noop", detail="nothing to cover beyond the keep rule")
    entries = transcript(session.messages, cut.start, cut.boundary, deps.counter, deps.tz)
    if not entries:
        return JobOutcome(session_key=req.session_key, status="noop", detail="only hidden messages to cover")
    language = detect_language(session.messages[cut.start:cut.read])
    answer, parts = await summarize_entries(deps, entries, previous, language, job_try)

    replay_from = session.last_archived
    tokens_before = deps.counter(session.previous_summary) + sum(counts[replay_from:cut.read])
    tokens_after = deps.counter(answer.summary) + sum(counts[cut.boundary:cut.read])
    if tokens_after >= tokens_before:
        return JobOutcome(session_key=req.session_key, status="noop",
                          detail=f"a summary of {tokens_after} tokens would not shrink {tokens_before}")
    record = SummaryRecord(
        session_key=req.session_key,
        summary=answer.summary,
        start=cut.start,
        boundary=cut.boundary,
        boundary_timestamp=session.timestamp_before(cut.boundary),
        messages_before=cut.read - replay_from,
        messages_after=cut.kept + 1,  # nanobot's hidden checkpoint marker is replayed too
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        language=language,
        notes=dated_notes(answer.notes, entries),
        facts=answer.facts,
        model=deps.model.model,
        chunks=parts,
        reason=req.reason,
    )
    if deps.write_memory is not None:
        await deps.write_memory(record, session)
    await store_record(redis, record)
    write_metadata_entry(deps.sessions_dir, req.session_key, METADATA_KEY,
                         {"pending": record.model_dump(mode="json", exclude={"notes", "facts"})})
    return JobOutcome(
        session_key=req.session_key,
        status="summarized",
        detail=f"messages {cut.start}..{cut.boundary - 1} in {parts} call(s); {tokens_before} -> {tokens_after} tokens",
        boundary=cut.boundary,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
    )


def window_for(deps: Deps, req: SummarizeRequest) -> int:
    return (
        deps.settings.summary_context_window
        or req.context_window
        or deps.nanobot.context_window
        or context_window(deps.model.model)
    )


def plan_for(deps: Deps, session: SessionFile, start: int, req: SummarizeRequest) -> tuple[Cut, list[int]]:
    """The cut a job would make now; for `--dry-run`."""
    counts = [count_message(m, deps.counter) for m in session.messages]
    return plan_cut(session.messages, start, counts, deps.settings.summary_keep, window_for(deps, req)), counts


async def summarize_entries(
    deps: Deps, entries: list[Entry], previous: str, language: str, job_try: int
) -> tuple[Answer, int]:
    """One call when the input fits the budget; otherwise chunks, each folding in the summary so far."""
    settings = deps.settings
    system = system_prompt(language, settings.summary_max_chars, deps.instructions)
    known = deps.known_facts() if deps.known_facts else []
    budget = settings.summary_input_tokens
    for _ in range(CONTEXT_SHRINKS + 1):
        # Later chunks carry the running summary, which can grow up to the size cap.
        summary_room = max(deps.counter(previous), deps.counter("x" * (settings.summary_max_chars // 4)))
        overhead = deps.counter(system) + deps.counter("\n".join(known)) + summary_room + PROMPT_SLACK_TOKENS
        parts = chunk(entries, budget - overhead, deps.counter)
        try:
            running, notes, facts = previous, [], []
            for number, part in enumerate(parts, start=1):
                prompt = user_prompt(running, part, number, len(parts), known)
                answer = await ask(deps, system, prompt, job_try)
                running = answer.summary
                notes += answer.notes
                facts += answer.facts
            return Answer(summary=running, notes=notes, facts=facts), len(parts)
        except ContextTooLong:
            budget //= 2
            log.warning("input over the model's window; shrinking the budget to %d tokens", budget)
    raise SummaryFailed("the input does not fit the model's window even after shrinking")


async def ask(deps: Deps, system: str, prompt: str, job_try: int) -> Answer:
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
                return parse_answer(completion.text, deps.settings.summary_max_chars)
            except BadAnswer as bad:
                if bad.oversized is None:
                    raise
                # One firmer request: most models comply when told their own length.
                messages[1]["content"] = f"{prompt}\n\nYour last summary had {bad.oversized} characters: shorten it."
                completion = await complete(choice, messages, deps.settings.summary_timeout)
                return parse_answer(completion.text, deps.settings.summary_max_chars)
        except (TransientLLMError, PermanentLLMError, BadAnswer) as exc:
            log.warning("model %s failed: %s", choice.model, exc)
            error = exc
    assert error is not None
    raise error


def dated_notes(notes: list[DailyNotes], entries: list[Entry]) -> list[DailyNotes]:
    """One entry per day of the covered messages, merged across chunks; spans come from the messages."""
    by_date: dict[str, DailyNotes] = {}
    dates = sorted({e.date for e in entries if e.date})
    for note in notes:
        date = note.date if note.date in dates else (dates[-1] if dates else note.date)
        merged = by_date.setdefault(date, DailyNotes(date=date))
        for name in ("topics", "preferences", "decisions", "tasks", "technical_issues", "insights"):
            target = getattr(merged, name)
            target.extend(item for item in getattr(note, name) if item not in target)
    for date, note in by_date.items():
        stamps = [e for e in entries if e.date == date]
        if stamps:
            note.first_timestamp = stamps[0].timestamp
            note.last_timestamp = stamps[-1].timestamp
    return [by_date[d] for d in sorted(by_date) if not by_date[d].is_empty()]

