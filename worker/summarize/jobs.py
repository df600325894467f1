"""The summarize job: read a session, plan the cut, summarize (in chunks if needed), guard, store the record, notify."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sqlite3
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, tzinfo
from typing import Any

from arq import Retry
from arq.connections import ArqRedis

from nanobot_hooks.contract import METADATA_KEY, SessionMarker, SummarizeRequest, SummaryRecord
from nanobot_hooks.nanobot_format import is_internal_session, is_user_turn
from nanobot_hooks.queue import load_record, store_record
from worker.state import budget
from worker.model import guards
from worker.model.answer import ANSWER_SCHEMA, NOTE_PARTS, NOTES_SCHEMA, Answer, DailyNotes, Fact, parse_answer
from worker.summarize.cut import Cut, plan_cut, saves_enough, saving_floor
from worker.errors import (
    BadAnswer,
    ContextTooLong,
    LLMError,
    MemoryFilesError,
    OutOfTime,
    OverBudget,
    PermanentLLMError,
    RetryableError,
    SessionError,
    SummaryFailed,
    WorkerError,
)
from worker.model.llm import complete, context_window
from worker.nanobot.config import ModelChoice
from worker.memory.notes import is_noted
from worker.state.outcomes import JobOutcome, keep_outcome
from worker.text.prepare import Entry, Lines, chunk, detect_language, transcript
from worker.state.progress import Progress, clear_progress, digest, load_progress, save_progress
from worker.model.prompts import notes_system_prompt, system_prompt, user_prompt
from worker.memory.recall_index import RecallIndexError, archived_through
from worker.text.redact import redact
from worker.nanobot.sessions import SessionFile, read_session, write_metadata_entry
from worker.settings import KeepRule
from worker.summarize import daily
from worker.summarize.deps import Deps
from worker.text.tokens import count_message, count_recurring

log = logging.getLogger("worker.summarize.jobs")
# The job a log line belongs to ("<session> <job id> try <n>"), for every line logged while it runs.
CURRENT_JOB: contextvars.ContextVar[str] = contextvars.ContextVar("job", default="")

# Room for the wrapper text around the transcript; the rest of the budget is measured.
PROMPT_SLACK_TOKENS = 200
KNOWN_FACTS_IN_PROMPT = 100
CONTEXT_SHRINKS = 3
# A model that answered with nothing usable is asked once more (in a new try); then the job gives up and
# the session rests, rather than paying again and again for the same failure.
BAD_ANSWER_TRIES = 2
# Seconds kept free before arq's job timeout (at most a tenth of it): a call that might not finish by then
# is not started.
TIME_MARGIN = 10.0
ALREADY_NOTED = "(in notes) "


@dataclass
class Run:
    """One try of one job: what its LLM calls need, and what the outcome should say beyond the summary."""

    deps: Deps
    redis: ArqRedis
    req: SummarizeRequest
    job_try: int
    deadline: float  # time.monotonic() by which the try must end
    notes_skipped: str = ""
    calls: int = 0  # made in this try

    @property
    def key(self) -> str:
        return self.req.session_key

    @property
    def day(self) -> str:
        return datetime.now(self.deps.tz).date().isoformat()

    async def before_call(self) -> None:
        settings = self.deps.settings
        reason = await budget.over_cap(self.redis, self.key, self.day, settings.summary_daily_tokens,
                                       settings.summary_daily_tokens_total)
        if reason is not None:
            raise OverBudget(reason)
        # Every try makes at least one call, so a try always moves the work on.
        if self.calls and time.monotonic() + settings.summary_timeout > self.deadline:
            raise OutOfTime("the next call might not finish within the job's time; finished parts are kept")
        self.calls += 1


async def summarize_session(ctx: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """arq entry point. Transient trouble is retried with backoff; every try leaves an outcome for status."""
    deps: Deps = ctx["deps"]
    redis: ArqRedis = ctx["redis"]
    job_try: int = ctx.get("job_try", 1)
    req = SummarizeRequest.model_validate(request)
    key = req.session_key
    CURRENT_JOB.set(f"{key} {ctx.get('job_id', '-')} try {job_try}")  # arq runs each job in a task of its own
    started = time.monotonic()
    run = Run(deps, redis, req, job_try, started + deps.job_timeout - min(TIME_MARGIN, deps.job_timeout / 10))
    # Before any early exit: an outcome must never show (and be rested for) an earlier job's spend.
    rest = await budget.start_job(redis, key) if job_try == 1 else None
    if is_internal_session(key):
        return await finish(run, JobOutcome(session_key=key, status="noop", detail="an internal nanobot session"),
                            started)
    if job_try > deps.settings.summary_max_tries:
        # Only after the worker died or ran out of time during the last try: arq allows one more pickup so
        # that the job can say so.
        detail = f"gave up after {job_try - 1} tries (the worker stopped or the job ran out of time)"
        return await finish(run, JobOutcome(session_key=key, status="failed", detail=detail), started)
    # A retry (job_try > 1) belongs to a job already admitted: only a new job waits for the rest.
    if req.reason != "manual" and rest is not None:
        detail = f"resting until {rest.until:%Y-%m-%d %H:%M:%S} UTC: {rest.reason}"
        return await finish(run, JobOutcome(session_key=key, status="noop", detail=detail), started)
    since = await daily.take_flag(ctx, key)
    if since:
        req = run.req = req.model_copy(update={"notes_through_end": True, "notes_since": since})
    try:
        outcome = await run_job(run)
    except RetryableError as exc:
        tries = deps.settings.summary_max_tries
        if isinstance(exc, BadAnswer):
            tries = min(tries, BAD_ANSWER_TRIES)
        if job_try < tries:
            if since:
                # The retry must still note through the end. Only a retry: a flag left after the last
                # try would make after_job_end queue the session again, forever.
                await daily.set_flag(redis, key, since)
            delay = 0.0 if isinstance(exc, OutOfTime) else deps.settings.summary_retry_delay * 2 ** (job_try - 1)
            log.warning("summary of %s failed (try %d): %s; retrying", key, job_try, exc)
            raise Retry(defer=max(min(delay, 600.0), exc.retry_after or 0.0)) from None
        outcome = JobOutcome(session_key=key, status="failed", detail=f"gave up after {job_try} tries: {exc}")
    except OverBudget as exc:
        outcome = JobOutcome(session_key=key, status="noop", detail=str(exc))
        rest = await budget.cool_down(redis, key, str(exc), 0, 0, seconds=_seconds_to_midnight(deps.tz))
        outcome.cooldown_until = rest.until if rest else None
    except WorkerError as exc:
        outcome = JobOutcome(session_key=key, status="failed", detail=str(exc))
    except asyncio.CancelledError:
        # arq's job timeout or a worker shutdown: say so, then let the cancellation go on. Not a failure of
        # the session (no rest): the retry, or the next job, resumes after the finished chunks
        # (worker.state.progress), and still notes through the end.
        if since:
            await daily.set_flag(redis, key, since)
        outcome = JobOutcome(session_key=key, status="failed", detail="cancelled (job timeout or worker shutdown)")
        await finish(run, outcome, started, rest=False)
        raise
    except Exception as exc:  # a bug must still leave an outcome behind, not only a traceback in the log
        log.exception("summary of %s crashed", key)
        outcome = JobOutcome(session_key=key, status="failed", detail=f"internal error: {exc!r}")
    return await finish(run, outcome, started)


async def finish(run: Run, outcome: JobOutcome, started: float, rest: bool = True) -> dict[str, Any]:
    """Adds the job's spend and timing to its outcome, starts or ends the session's rest, and keeps it."""
    redis, key, settings = run.redis, run.key, run.deps.settings
    spend = await budget.job_spend(redis, key)
    # Details quote models and providers: redacted like every other text the worker keeps.
    detail = redact("; ".join(p for p in (outcome.detail, run.notes_skipped, spend.describe()) if p))
    outcome = outcome.model_copy(update={
        "seconds": round(time.monotonic() - started, 3), "job_try": run.job_try, "reason": run.req.reason,
        "model": run.deps.model.model, "spend": spend, "detail": detail,
    })
    # A failure, or paid calls that changed nothing, rests the session (a rest already set by a cap stays).
    fruitless = outcome.status == "failed" or (outcome.status == "noop" and spend.calls > 0)
    if fruitless and rest and outcome.cooldown_until is None:
        cooldown = await budget.cool_down(redis, key, outcome.detail[:200], settings.summary_cooldown,
                                          settings.summary_cooldown_max)
        if cooldown is not None:
            outcome.cooldown_until = cooldown.until
    # The work is done: no rest, and the next failure starts the doubling afresh.
    ended = budget.rest_keys(redis, key) if outcome.status in ("summarized", "noted") else []
    log.info("%s %s in %.1fs: %s", outcome.status, key, outcome.seconds, outcome.detail)
    await keep_outcome(redis, outcome, delete=ended)
    return outcome.model_dump(mode="json")


def _seconds_to_midnight(tz: tzinfo | None) -> float:
    now = datetime.now(tz)
    tomorrow = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), tzinfo=now.tzinfo)
    return max(60.0, (tomorrow - now).total_seconds())


def chain_start(session: SessionFile, pending: SummaryRecord | None) -> tuple[int, str]:
    """Where to start, and the summary to fold in: an unapplied record that still fits counts as applied."""
    start, previous = session.last_archived, session.previous_summary
    if pending is not None and pending.boundary >= start:
        if pending.fits(start, len(session.messages), session.timestamp_before(pending.boundary)):
            return pending.boundary, pending.summary
    return start, previous


async def run_job(run: Run) -> JobOutcome:
    """The summary of what leaves the context, then (daily run) notes for every message not yet noted."""
    deps, req = run.deps, run.req
    # The record first, then the file: if nanobot applies the record in between, the file read after it
    # shows it applied, and the job folds it in; the other order would cover the old range again.
    pending = await load_record(run.redis, req.session_key)
    # From the watermark: what it covers is all a summary reads (a 50 MB history costs no memory). The
    # daily run notes every un-noted message of the day, wherever it is, so it reads them all.
    session = read_session(deps.sessions_dir, req.session_key, from_watermark=not req.notes_through_end)
    if session.skipped_lines:
        log.warning("%s: skipped %d malformed lines (%s)", req.session_key, session.skipped_lines,
                    "; ".join(session.skipped_reasons[:3]))
    lines = Lines(session.messages)  # rendered once for the summary's transcript and the recall index
    outcome, covered = await summarize_part(run, session, pending, lines)
    if req.notes_through_end and deps.memory is not None:
        written = await notes_part(run, session, covered)
        status = "noted" if outcome.status == "noop" and written else outcome.status
        detail = f"{outcome.detail}; {written or 'notes up to date'}"
        outcome = outcome.model_copy(update={"status": status, "detail": detail})
    await index_for_recall(deps, session, outcome.boundary, lines)
    return outcome


async def index_for_recall(deps: Deps, session: SessionFile, boundary: int | None, lines: Lines | None = None) -> None:
    """The recall index follows what this job archived and noted; its trouble is logged, never fatal."""
    if deps.recall is None:
        return
    through = max(archived_through(session), boundary or 0)
    try:
        done = await asyncio.to_thread(deps.recall.refresh, session.path.parent, session, through, lines)
    except (RecallIndexError, sqlite3.Error, OSError) as exc:
        log.warning("%s: recall index not updated: %s", session.key, exc)
        return
    log.info("%s: %s", session.key, done)


async def summarize_part(run: Run, session: SessionFile, pending: SummaryRecord | None, lines: Lines | None = None
                         ) -> tuple[JobOutcome, set[int]]:
    """Returns the outcome and the indices whose notes this part took care of."""
    deps, key = run.deps, run.key
    plan = plan_job(deps, session, pending, run.req, lines)
    if plan.skip is not None:
        return JobOutcome(session_key=key, status="noop", detail=plan.skip), set()
    previous, cut, counts, entries = plan.previous, plan.cut, plan.counts, plan.entries
    floor = plan.floor
    language = detect_language(session.messages[cut.start:cut.read])
    fresh = {e.index for e in unnoted(deps, key, entries)}
    marked = [e if e.index in fresh else replace(e, text=ALREADY_NOTED + e.text) for e in entries]
    answer, calls, last_noted = await summarize_entries(
        run, marked, fresh, previous, language, (cut.start, cut.boundary, session.timestamp_before(cut.boundary)))

    replay_from = session.last_archived
    tokens_before = deps.counter(session.previous_summary) + sum(counts[replay_from:cut.read])
    tokens_after = deps.counter(answer.summary) + sum(counts[cut.boundary:cut.read])
    await clear_progress(run.redis, key)
    # The last part's notes and facts are true, and paid for, whether or not the summary is committed.
    notes = dated_notes(answer.notes, last_noted)
    memory = await write_memory(deps, key, notes, answer.facts, language)
    # Half the asked-for saving: the call is paid already, and only a summary that hardly shrinks is refused.
    if not saves_enough(tokens_before - tokens_after, floor / 2):
        detail = f"a summary of {tokens_after} tokens would not shrink {tokens_before} enough; {memory}"
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
        reason=run.req.reason,
    )
    # Memory was written first: a crash before the record is stored re-runs the range, and notes are
    # idempotent. Its failures are reported, never fatal: the summary does not wait on a broken workspace.
    detail = (f"messages {cut.start}..{cut.boundary - 1} in {calls} call(s); {tokens_before} -> {tokens_after} "
              f"tokens; {memory}")
    try:
        # Line 1 before the notice: a fresh nanobot process may apply from it, and must not find
        # it rewritten after the live one applied the record.
        write_metadata_entry(session.path.parent, key, METADATA_KEY, SessionMarker.pending_entry(record))
    except SessionError as exc:
        # Redis holds the record nanobot applies; the copy in line 1 is a convenience.
        log.warning("%s: record not written to the session file: %s", key, exc)
    if not await store_record(run.redis, record):
        log.warning("the record of %s is on the primary only: no replica confirmed it in time", key)
    outcome = JobOutcome(
        session_key=key, status="summarized", detail=detail, boundary=cut.boundary, tokens_before=tokens_before,
        tokens_after=tokens_after, messages_before=record.messages_before, messages_after=record.messages_after,
        carry_forward=guards.carry_forward(previous, answer.summary),
        covered_kept=covered_kept(entries, answer.summary, notes, answer.facts),
    )
    return outcome, {e.index for e in entries}


def covered_kept(entries: list[Entry], summary: str, notes: list[DailyNotes], facts: list[Fact]) -> float | None:
    """The share of the covered messages' identifiers that reached the summary, the day's notes or the facts."""
    source = guards.identifiers("\n".join(e.text for e in entries))
    written = "\n".join([summary, *(n.model_dump_json() for n in notes), *(f.text for f in facts)])
    kept, total = guards.kept_share(source, written)
    return round(kept / total, 3) if total else None


async def notes_part(run: Run, session: SessionFile, covered: set[int]) -> str:
    """Notes for the messages the summary did not cover (the kept tail, older un-noted days): notes only."""
    deps, key = run.deps, run.key
    assert deps.memory is not None
    dated = transcript(session.messages, 0, len(session.messages), deps.counter, deps.tz, run.req.notes_since)
    entries = unnoted(deps, key, [e for e in dated if e.index not in covered])
    if not entries:
        return ""
    language = detect_language(session.messages)
    known = known_facts(deps)
    overhead = (count_recurring(deps.counter, notes_system_prompt(language))
                + count_recurring(deps.counter, "\n".join(known)) + PROMPT_SLACK_TOKENS)
    notes: list[DailyNotes] = []
    facts: list[Fact] = []
    parts = chunk(entries, deps.settings.summary_input_tokens - overhead, deps.counter)
    noted: list[Entry] = []
    for number, part in enumerate(parts, start=1):
        found = await ask_notes(run, part, language, known, number, number == len(parts))
        if found is None:
            break  # the parts noted so far are paid for: they are written; the rest waits for a later run
        notes += found.notes
        facts += found.facts
        noted += part
    if not noted:
        return f"notes of {len(entries)} more messages skipped"
    written = await write_memory(deps, key, dated_notes(notes, noted), facts, language)
    of = "" if len(noted) == len(entries) else f" of {len(entries)}"
    return f"noted {len(noted)}{of} more messages: {written}"


async def ask_notes(run: Run, part: list[Entry], language: str, known: list[str], number: int = 1,
                    last: bool = True) -> Answer | None:
    """A notes-only call; None (and the reason kept for the outcome) when the model cannot give notes.

    Skipping is final for a model that answers in prose: asking it again would pay for the same failure."""
    model = run.deps.model.model
    if model in run.deps.prose_models:
        run.notes_skipped = f"notes and facts skipped: {model} answers in prose"
        return None
    prompt = user_prompt(None, part, number, last=last, known_facts=known)
    try:
        return await ask(run, notes_system_prompt(language), prompt, NOTES_SCHEMA, need_summary=False)
    except BadAnswer as exc:
        if exc.prose:  # only a model that answered prose is not asked again; an empty answer may pass
            run.deps.prose_models.add(exc.model or model)
        run.notes_skipped = f"notes and facts skipped: {exc}"
    except (LLMError, OutOfTime, OverBudget) as exc:
        # The summary is what matters; a retry for its notes would pay for the summary again.
        run.notes_skipped = f"notes and facts skipped: {exc}"
    return None


async def write_memory(deps: Deps, key: str, notes: list[DailyNotes], facts: list[Fact], language: str) -> str:
    """Notes of the session's day files, and the facts MEMORY.md may take: only what the user said, only
    in a trusted session (NANOBOT_MEMORY_SESSIONS). Memory-file trouble (a full disk, a read-only
    workspace, a lock held too long) is reported, not fatal."""
    if deps.memory is None:
        return "no memory files"
    trusted = deps.settings.is_trusted(key)
    admitted = [fact for fact in facts if fact.source == "user"] if trusted else []
    left_out = len(facts) - len(admitted)
    why = "" if not left_out else (
        f"; {left_out} facts left out ({'not stated by the user' if trusted else 'an untrusted session'})")
    try:
        return str(await deps.memory.write(key, notes, admitted, language)) + why
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


def unnoted(deps: Deps, session_key: str, entries: list[Entry]) -> list[Entry]:
    """Entries that no span of this session in their day's notes file covers yet."""
    if deps.memory is None:
        return list(entries)
    noted: dict[str, list[tuple[str, str]]] = {}
    fresh = []
    for entry in entries:
        if entry.date is None or entry.timestamp is None:
            fresh.append(entry)
            continue
        if entry.date not in noted:
            try:
                noted[entry.date] = deps.memory.noted_spans(session_key, entry.date)
            except (OSError, ValueError) as exc:
                log.warning("%s: cannot read the notes of %s: %s", session_key, entry.date, exc)
                noted[entry.date] = []
        if not is_noted(entry.timestamp, noted[entry.date]):
            fresh.append(entry)
    return fresh


def window_for(deps: Deps, req: SummarizeRequest) -> int:
    return (
        deps.settings.summary_context_window
        or req.context_window
        or deps.nanobot.context_window
        or context_window(deps.model.model)
    )


@dataclass
class JobPlan:
    """What a job does with a session now: the cut, and the messages it would summarize; or why it skips.
    The job and `enqueue --dry-run` both make it here, so the dry run says exactly what the job would do."""

    start: int
    previous: str
    cut: Cut
    counts: list[int]
    window: int
    floor: float  # tokens it must take out of the context (saving_floor)
    covered_tokens: int = 0
    entries: list[Entry] = field(default_factory=list)
    skip: str | None = None  # the outcome's detail when nothing is to be summarized


def plan_job(deps: Deps, session: SessionFile, pending: SummaryRecord | None, req: SummarizeRequest,
             lines: Lines | None = None) -> JobPlan:
    start, previous = chain_start(session, pending)
    cut, counts = plan_for(deps, session, start, req)
    window = window_for(deps, req)
    floor = saving_floor(req.reason, window, deps.settings.summary_min_saving, deps.settings.summary_idle_min_tokens)
    plan = JobPlan(start, previous, cut, counts, window, floor, sum(counts[cut.start:cut.boundary]))
    if cut.covered == 0:
        plan.skip = "nothing to cover beyond the keep rule"
    elif not saves_enough(plan.covered_tokens, floor):
        plan.skip = (f"too little to summarize ({plan.covered_tokens:,} of {floor:,.0f} tokens "
                     + ("NANOBOT_SUMMARY_IDLE_MIN_TOKENS" if req.reason == "idle" else "NANOBOT_SUMMARY_MIN_SAVING")
                     + " asks a summary to take out of the context)")
    else:
        # Rendered only when it will be used (a 100,000-message session renders for long); hidden rows
        # (nanobot's checkpoint marker) and command messages drop out here, so a cut of only those is empty.
        plan.entries = transcript(session.messages, cut.start, cut.boundary, deps.counter, deps.tz, lines=lines)
        if not plan.entries:
            plan.skip = (f"nothing to cover beyond the keep rule (messages {cut.start}..{cut.boundary - 1} are "
                         "nanobot's hidden or command rows)")
    return plan


def plan_for(deps: Deps, session: SessionFile, start: int, req: SummarizeRequest) -> tuple[Cut, list[int]]:
    """The cut a job makes now (and `--dry-run` prints), with each message's token count from the watermark
    on (0 before it: no figure reads them; counting a 100,000-message history took 3.4 s for 200 new ones)."""
    first = min(start, session.last_archived)
    counts = [0] * first + [count_message(m, deps.counter) for m in session.messages[first:]]
    keep = KeepRule.parse(req.keep) if req.keep else deps.settings.summary_keep
    return cut_by(session.messages, start, counts, keep, window_for(deps, req), explicit=bool(req.keep)), counts


def cut_by(messages: list[dict[str, Any]], start: int, counts: list[int], keep: KeepRule, window: int,
           explicit: bool = False) -> Cut:
    """The planner's cut for `keep`, with the rules it does not know itself: turns:N (the last N user turns
    and what followed them), and keeping nothing when the job's request asks for exactly that (an idle
    summary beside nanobot's own idle compaction: nanobot then finds nothing left to compact)."""
    if explicit and keep == KEEP_NOTHING:
        read = len(messages)  # ending at the end keeps every tool call whole
        return Cut(min(max(start, 0), read), read, read)
    if keep.kind == "turns":
        keep = KeepRule("messages", len(messages) - last_turns_start(messages, int(keep.value)))
    return plan_cut(messages, start, counts, keep, window)


KEEP_NOTHING = KeepRule("messages", 0)


def last_turns_start(messages: list[dict[str, Any]], turns: int) -> int:
    """Where the last `turns` user turns begin (the end when 0; the start when there are fewer)."""
    if turns <= 0:
        return len(messages)
    seen = 0
    for index in range(len(messages) - 1, -1, -1):
        if is_user_turn(messages[index]):
            seen += 1
            if seen == turns:
                return index
    return 0


async def summarize_entries(
    run: Run, entries: list[Entry], fresh: set[int], previous: str, language: str,
    plan: tuple[int, int, str | None],
) -> tuple[Answer, int, list[Entry]]:
    """One call when the input fits the budget; otherwise chunks, each folding in the summary so far.

    Returns the last answer, the number of calls, and the entries whose notes the last answer holds. Every finished
    chunk but the last has its notes written and its running summary kept, so a retry resumes after it.
    """
    deps, key = run.deps, run.key
    settings = deps.settings
    system = system_prompt(language, settings.summary_max_chars, deps.instructions)
    known = known_facts(deps)
    fixed = (count_recurring(deps.counter, system) + count_recurring(deps.counter, "\n".join(known))
             + PROMPT_SLACK_TOKENS)
    running, done, calls = previous, plan[0], 0
    kept = await load_progress(run.redis, key)
    if kept is not None and kept.continues(*plan, previous):
        running, done, calls = kept.running, kept.done, kept.calls
        log.info("%s: resuming after message %d (%d calls already made)", key, done - 1, calls)
    budget_tokens = settings.summary_input_tokens
    for _ in range(CONTEXT_SHRINKS + 1):
        try:
            while True:
                remaining = [e for e in entries if e.index >= done]
                # Measured per chunk: the running summary is what it is now, not a worst case.
                room = budget_tokens - fixed - deps.counter(running)
                part = chunk(remaining, room, deps.counter)[0]
                last = len(part) == len(remaining)
                calls += 1
                if calls > 1 or not last:  # long work says where it is: a big backlog takes many calls
                    log.info("%s part %d: messages %d..%d (%d left after it)", key, calls, part[0].index,
                             part[-1].index, len(remaining) - len(part))
                prompt = user_prompt(running, part, calls, last=last, known_facts=known)
                answer = await ask(run, system, prompt, ANSWER_SCHEMA, previous=running)
                unnoted_part = [e for e in part if e.index in fresh]
                if answer.prose and unnoted_part:
                    # Prose keeps the chain going; the notes of its messages come from a smaller call.
                    found = await ask_notes(run, unnoted_part, language, known)
                    if found is not None:
                        answer.notes, answer.facts = found.notes, found.facts
                    else:
                        unnoted_part = []  # not noted: no span may mark them, the daily run asks again
                if last:
                    return answer, calls, unnoted_part
                await write_memory(deps, key, dated_notes(answer.notes, unnoted_part), answer.facts, language)
                running, done = redact(answer.summary), part[-1].index + 1
                await save_progress(run.redis, key, Progress(
                    start=plan[0], boundary=plan[1], boundary_timestamp=plan[2], previous=digest(previous),
                    done=done, running=running, calls=calls))
        except ContextTooLong:
            budget_tokens //= 2
            calls -= 1
            log.warning("input over the model's window; shrinking the budget to %d tokens", budget_tokens)
    raise SummaryFailed("the input does not fit the model's window even after shrinking")


async def ask(run: Run, system: str, prompt: str, schema: dict[str, Any], need_summary: bool = True,
              previous: str = "") -> Answer:
    """The summary model, then the fallback model once the first keeps failing or cannot work.

    A summary is guarded (worker.model.guards): a refusal, an error text, a placeholder, or one that lost most
    of `previous`, is a BadAnswer and commits nothing."""
    deps = run.deps
    settings = deps.settings
    candidates = [deps.model] + ([deps.fallback] if deps.fallback else [])
    error: Exception | None = None
    for position, choice in enumerate(candidates):
        if position > 0 and run.job_try < 2 and not isinstance(error, PermanentLLMError):
            break
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        try:
            answer = await _answer(run, choice, messages, schema, need_summary)
            if need_summary:
                try:
                    guards.check(previous, answer.summary, settings.summary_min_carry)
                except ValueError as refused:
                    raise BadAnswer(str(refused)) from None
            return answer
        except ContextTooLong:
            raise  # the caller shrinks the input; another model would not read more
        except LLMError as exc:
            log.warning("model %s failed: %s", choice.model, exc)
            # A bad answer decides the job's tries (2), also when the fallback then fails otherwise.
            error = error if isinstance(error, BadAnswer) else exc
    assert error is not None
    raise error


async def _answer(run: Run, choice: ModelChoice, messages: list[dict[str, str]], schema: dict[str, Any],
                  need_summary: bool) -> Answer:
    settings = run.deps.settings
    for firm in (False, True):
        await run.before_call()
        completion = await complete(choice, messages, settings.summary_timeout, schema, settings.summary_json)
        await budget.record_call(run.redis, run.key, completion, run.day)
        try:
            return parse_answer(completion.text, settings.summary_max_chars, need_summary)
        except BadAnswer as bad:
            bad.model = choice.model
            if bad.oversized is None or firm:
                raise
            # One firmer request: most models comply when told their own length.
            messages[1]["content"] += f"\n\nYour last summary had {bad.oversized} characters: shorten it."
    raise AssertionError("unreachable")


def dated_notes(notes: list[DailyNotes], entries: list[Entry]) -> list[DailyNotes]:
    """One entry per day of the messages, merged across chunks; spans come from the messages.

    A day with nothing worth noting still gets its (empty) entry: its span marks those messages as noted.
    No messages, no notes: whatever the model wrote then repeats what the day files already hold.
    """
    if not entries:
        return []
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
