"""One question to the model.

The summary model, then the fallback; a firmer second request for an oversized answer; every call checked against the
caps and the time left, and its spend recorded."""

from __future__ import annotations

import logging
from typing import Any

from worker.errors import BadAnswer, ContextTooLong, LLMError, PermanentLLMError
from worker.model import guards
from worker.model.answer import Answer, parse_answer
from worker.model.lines import parse_lines
from worker.model.llm import complete
from worker.nanobot.config import ModelChoice
from worker.state import budget
from worker.summarize.run import Run

log = logging.getLogger("worker.summarize.ask")
# Room for the wrapper text around the transcript; the rest of the budget is measured.
PROMPT_SLACK_TOKENS = 200


async def ask(
    run: Run, system: str, prompt: str, schema: dict[str, Any] | None, need_summary: bool = True, previous: str = ""
) -> Answer:
    """The summary model, then the fallback model once the first keeps failing or cannot work.

    With no `schema`, the answer is notes and facts in plain lines (worker.model.lines), asked for without a response
    format.

    A summary is guarded (worker.model.guards): a refusal, an error text, a placeholder, or one that lost most
    of `previous`, is a BadAnswer and commits nothing."""
    deps = run.deps
    candidates = [deps.model] + ([deps.fallback] if deps.fallback else [])
    error: Exception | None = None
    for position, choice in enumerate(candidates):
        if position > 0 and run.job_try < 2 and not isinstance(error, PermanentLLMError):
            break
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        try:
            answer = await _answer(run, choice, messages, schema, need_summary)
            if need_summary:
                _guard(previous, answer.summary, deps.settings.summary_min_carry)
            return answer
        except ContextTooLong:
            raise  # the caller shrinks the input; another model would not read more
        except LLMError as exc:
            log.warning("model %s failed: %s", choice.model, exc)
            # A bad answer decides the job's tries (2), also when the fallback then fails otherwise.
            error = error if isinstance(error, BadAnswer) else exc
    assert error is not None
    raise error


def _guard(previous: str, summary: str, min_carry: float) -> None:
    try:
        guards.check(previous, summary, min_carry)
    except ValueError as refused:
        raise BadAnswer(str(refused)) from None


async def _answer(
    run: Run, choice: ModelChoice, messages: list[dict[str, str]], schema: dict[str, Any] | None, need_summary: bool
) -> Answer:
    settings = run.deps.settings
    for firm in (False, True):
        await run.before_call()
        completion = await complete(choice, messages, settings.summary_timeout, schema, settings.summary_json)
        await budget.record_call(run.redis, run.key, completion, run.day)
        try:
            if schema is None:
                return parse_lines(completion.text, truncated=completion.finish_reason == "length")
            return parse_answer(completion.text, settings.summary_max_chars, need_summary)
        except BadAnswer as bad:
            bad.model = choice.model
            if bad.oversized is None or firm:
                raise
            # One firmer request: most models comply when told their own length.
            messages[1]["content"] += f"\n\nYour last summary had {bad.oversized} characters: shorten it."
    raise AssertionError("unreachable")
