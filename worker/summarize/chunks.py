"""The summary calls of one job.

One call when the input fits the budget; otherwise a chain of chunks, each folding in the summary so far, each finished
chunk handed to the summary stage (which writes its notes and keeps the progress for a retry: worker.summarize.summary).
A context the model cannot take shrinks the budget and goes on."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from worker.errors import ContextTooLong, SummaryFailed
from worker.model.answer import ANSWER_SCHEMA, Answer
from worker.model.prompts import system_prompt, user_prompt
from worker.state.progress import Progress
from worker.summarize.ask import PROMPT_SLACK_TOKENS, ask
from worker.summarize.notes_only import ask_notes
from worker.summarize.remember import known_facts
from worker.summarize.run import Run
from worker.text.prepare import Entry, chunk
from worker.text.redact import redact
from worker.text.tokens import count_recurring

log = logging.getLogger("worker.summarize.chunks")
CONTEXT_SHRINKS = 3


@dataclass
class Frame:
    """What every call of the chain shares.

    The system prompt, the known facts, their tokens, the language, and the entries whose notes are still to be
    taken."""

    system: str
    known: list[str]
    fixed_tokens: int
    language: str
    fresh: set[int]


# What the summary stage does with a finished chunk (not the last): its answer, the entries whose notes it holds,
# and the progress moved past it.
KeepChunk = Callable[[Answer, list[Entry], Progress], Awaitable[None]]


async def summarize_entries(
    run: Run, entries: list[Entry], fresh: set[int], language: str, progress: Progress, keep: KeepChunk
) -> tuple[Answer, int, list[Entry]]:
    """One call when the input fits the budget.

    Otherwise chunks from where `progress` stands, each folding in the summary so far, each finished one but the last
    handed to `keep`.

    Returns the last answer, the number of calls, and the entries whose notes the last answer holds."""
    frame = _frame(run, fresh, language)
    budget_tokens = run.deps.settings.summary_input_tokens
    for _ in range(CONTEXT_SHRINKS + 1):
        try:
            return await _run_chain(run, frame, progress, entries, budget_tokens, keep)
        except ContextTooLong:
            budget_tokens //= 2
            progress.calls -= 1
            log.warning("input over the model's window; shrinking the budget to %d tokens", budget_tokens)
    raise SummaryFailed("the input does not fit the model's window even after shrinking")


def _frame(run: Run, fresh: set[int], language: str) -> Frame:
    deps = run.deps
    system = system_prompt(language, deps.settings.summary_max_chars, deps.instructions)
    known = known_facts(deps)
    fixed = (
        count_recurring(deps.counter, system) + count_recurring(deps.counter, "\n".join(known)) + PROMPT_SLACK_TOKENS
    )
    return Frame(system, known, fixed, language, fresh)


async def _run_chain(
    run: Run, frame: Frame, progress: Progress, entries: list[Entry], budget_tokens: int, keep: KeepChunk
) -> tuple[Answer, int, list[Entry]]:
    counter = run.deps.counter
    while True:
        remaining = [e for e in entries if e.index >= progress.done]
        # Measured per chunk: the running summary is what it is now, not a worst case.
        room = budget_tokens - frame.fixed_tokens - counter(progress.running)
        this_chunk = chunk(remaining, room, counter)[0]
        last = len(this_chunk) == len(remaining)
        progress.calls += 1
        if progress.calls > 1 or not last:  # long work says where it is: a big backlog takes many calls
            log.info(
                "%s chunk %d: messages %d..%d (%d left after it)",
                run.key,
                progress.calls,
                this_chunk[0].index,
                this_chunk[-1].index,
                len(remaining) - len(this_chunk),
            )
        answer, noted = await _ask_chunk(run, frame, progress, this_chunk, last)
        if last:
            return answer, progress.calls, noted
        progress.running, progress.done = redact(answer.summary), this_chunk[-1].index + 1
        await keep(answer, noted, progress)


async def _ask_chunk(
    run: Run, frame: Frame, progress: Progress, this_chunk: list[Entry], last: bool
) -> tuple[Answer, list[Entry]]:
    """The chunk's answer, and the entries whose notes it holds."""
    prompt = user_prompt(progress.running, this_chunk, progress.calls, last=last, known_facts=frame.known)
    answer = await ask(run, frame.system, prompt, ANSWER_SCHEMA, previous=progress.running)
    unnoted_entries = [e for e in this_chunk if e.index in frame.fresh]
    if answer.prose and unnoted_entries:
        # Prose keeps the chain going; the notes of its messages come from a smaller call, in plain lines.
        found = await ask_notes(run, unnoted_entries, frame.language, frame.known, prose_seen=True)
        # None: no notes, which writes no span (worker.summarize.remember.settle_notes: asked again, or the fallback)
        answer.notes, answer.facts = (found.notes, found.facts) if found is not None else ([], [])
    return answer, unnoted_entries
