"""Notes-only calls.

For the messages a summary does not cover (the daily run's kept tail and older un-noted days), and for a chunk whose
summary came back as prose; as JSON, or as plain lines for a model that answers prose."""

from __future__ import annotations

import logging

from worker.errors import BadAnswer, LLMError, OutOfTime, OverBudget, SessionError
from worker.memory.entries import DailyNotes, Fact
from worker.memory.recall_index.messages import WINDOW_BYTES
from worker.model.answer import NOTES_SCHEMA, Answer
from worker.model.prompts import lines_system_prompt, notes_system_prompt, user_prompt
from worker.nanobot.sessions import SessionFile, held_end, read_window
from worker.state import formats
from worker.summarize.ask import PROMPT_SLACK_TOKENS, ask
from worker.summarize.remember import known_facts, unnoted, user_said, write_notes
from worker.summarize.run import Run
from worker.text.prepare import Entry, chunk, dated_from, detect_language, transcript
from worker.text.tokens import count_recurring

log = logging.getLogger("worker.summarize.notes_only")


async def note_the_rest(run: Run, session: SessionFile, covered: set[int]) -> str:
    """Notes for the messages the summary did not cover (older un-noted days, read in windows, then the kept tail).

    Notes only."""
    since = run.req.notes_since
    done, complete, whole = await note_before(run, session, covered, since)
    if complete and not whole:
        done.append((await note_unnoted(run, session, covered, since))[0])
    return "; ".join(part for part in done if part)


async def note_before(
    run: Run, session: SessionFile, covered: set[int], since: str | None
) -> tuple[list[str], bool, bool]:
    """Notes of the un-noted messages of `since`'s day on that the job's read does not hold, a window at a time.

    Notes of the un-noted messages from the first one of `since`'s day on (every one without it) that the job's read
    does not hold (it starts at nanobot's watermark), one window of about WINDOW_BYTES at a time: a 200 MB day is never
    held whole. What was done, and whether every window was asked (once the model could not note a chunk, the later ones
    wait for a later run, as they did within one read); and whether the first window held the day to the end of the
    file, the job's tail included: then it was noted in the same calls (`covered` left out), not paid for twice."""
    done: list[str] = []
    if not session.first:
        return done, True, False
    deps = run.deps
    window = read_window(
        deps.sessions_dir,
        run.key,
        0,
        WINDOW_BYTES,
        keep_from=dated_from(since, deps.tz) if since else (lambda message: True),
    )
    begin = window.first
    if begin < session.first and held_end(window.messages) >= len(window.messages):
        done.append((await note_unnoted(run, window, covered, since, begin))[0])
        return done, True, True
    while begin < session.first:
        end = min(held_end(window.messages), session.first)
        skipped = run.notes_skipped
        written, noted = await note_unnoted(run, window, set(), since, begin, end)
        done.append(written)
        if run.notes_skipped != skipped and not noted:
            return done, False, False  # the model could not note a chunk (nor the fallback): the rest waits
        if end >= session.first or end >= len(window.messages):
            break
        try:
            begin, window = end, read_window(deps.sessions_dir, run.key, end, WINDOW_BYTES, after=window)
        except SessionError as exc:  # gone or unreadable since the job read it: a later run notes the rest
            log.warning("%s: notes before the watermark stopped at message %d: %s", run.key, end, exc)
            return done, False, False
    return done, True, False


async def note_unnoted(
    run: Run,
    session: SessionFile,
    covered: set[int],
    since: str | None,
    begin: int | None = None,
    end: int | None = None,
) -> tuple[str, bool]:
    """Notes of the session's messages that are neither covered nor noted yet.

    Notes of the session's messages [begin, end) (all it holds by default) from `since` on that are neither covered nor
    noted yet, and whether every one of them is noted now (a written file included: a refused write leaves its span
    un-noted)."""
    deps, key = run.deps, run.key
    begin = session.first if begin is None else begin
    end = held_end(session.messages) if end is None else end
    dated = transcript(session.messages, begin, end, deps.counter, deps.tz, since)
    entries = unnoted(deps, key, [e for e in dated if e.index not in covered], session.generation)
    if not any(user_said(entry) for entry in entries):
        # Nothing the user said waits: a call for the assistant's or the tools' lines alone is not paid (a day of
        # them would be asked again at every run, as no notes of them mark them noted).
        return "", True
    language = detect_language(session.messages[begin:end])
    notes, facts, asked = await _ask_in_chunks(run, entries, language)
    written, _ = await write_notes(run, notes, facts, asked, language, session.generation)
    of = "" if len(asked) == len(entries) else f" of {len(entries)}"
    complete = len(asked) == len(entries) and not any(
        user_said(entry) for entry in unnoted(deps, key, asked, session.generation)
    )
    return f"noted {len(asked)}{of} more messages: {written}", complete


async def _ask_in_chunks(
    run: Run, entries: list[Entry], language: str
) -> tuple[list[DailyNotes], list[Fact], list[Entry]]:
    """The notes and facts of `entries`, one call per chunk, and the entries asked for.

    Up to the first chunk the model could not note, that one included (it counts as asked:
    worker.summarize.remember.settle_notes; the chunks noted so far are paid for; the rest waits for a later run)."""
    deps = run.deps
    known = known_facts(deps)
    overhead = (
        count_recurring(deps.counter, notes_system_prompt(language))
        + count_recurring(deps.counter, "\n".join(known))
        + PROMPT_SLACK_TOKENS
    )
    chunks = chunk(entries, deps.settings.summary_input_tokens - overhead, deps.counter)
    notes: list[DailyNotes] = []
    facts: list[Fact] = []
    noted: list[Entry] = []
    for number, this_chunk in enumerate(chunks, start=1):
        found = await ask_notes(run, this_chunk, language, known, number, number == len(chunks))
        if found is None:
            noted += this_chunk
            break
        notes += found.notes
        facts += found.facts
        noted += this_chunk
    return notes, facts, noted


async def ask_notes(
    run: Run,
    entries: list[Entry],
    language: str,
    known: list[str],
    number: int = 1,
    last: bool = True,
    prose_seen: bool = False,
) -> Answer | None:
    """A notes-only call; None (and the reason kept for the outcome) when the model cannot give notes.

    Asked as JSON first; as plain lines (worker.model.lines) once the model answered prose where JSON was asked
    for: in this call, in the summary just made (`prose_seen`), or earlier (worker.state.formats), so that JSON
    call is not paid again. A model that follows neither has its notes off for a while."""
    model = run.deps.model.model
    learned = await formats.learned(run.redis, model)
    if learned is not None and learned.format == "off":
        run.notes_skipped = f"{model} follows neither JSON nor the plain lines asked for"
        return None
    prompt = user_prompt(None, entries, number, last=last, known_facts=known)
    try:
        if learned is None and not prose_seen:
            answer = await _json_notes(run, prompt, language, model)
            if answer is not None:
                return answer
        elif learned is None:
            await formats.learn(run.redis, model, "lines", "a summary in prose where JSON was asked for")
        return await _lines_notes(run, prompt, language, model)
    except (LLMError, OutOfTime, OverBudget) as exc:
        # The summary is what matters; a retry for its notes would pay for the summary again.
        run.notes_skipped = str(exc)
    return None


async def _json_notes(run: Run, prompt: str, language: str, model: str) -> Answer | None:
    """The notes as JSON; None when the model answered prose (learned: it is asked for lines from then on)."""
    try:
        return await ask(run, notes_system_prompt(language), prompt, NOTES_SCHEMA, need_summary=False)
    except BadAnswer as exc:
        if not exc.prose:  # an empty or unreadable answer says nothing of the format: asked as JSON again
            raise
        await formats.learn(run.redis, exc.model or model, "lines", "prose where JSON was asked for")
        return None


async def _lines_notes(run: Run, prompt: str, language: str, model: str) -> Answer:
    """The notes as plain lines; a model that answers those in prose too has its notes off for a while."""
    try:
        return await ask(run, lines_system_prompt(language), prompt, None, need_summary=False)
    except BadAnswer as exc:
        if exc.prose:
            await formats.learn(run.redis, exc.model or model, "off", "prose without the lines asked for")
        raise
