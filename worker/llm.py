"""One summarizing call through litellm, its error classes, and a defensive parse of the answer."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

import json_repair
import litellm
from pydantic import ValidationError

from nanobot_hooks.contract import DailyNotes, Fact
from worker.nanobot_config import ModelChoice

litellm.suppress_debug_info = True
log = logging.getLogger("worker.llm")
DEFAULT_WINDOW = 128_000


class TransientLLMError(Exception):
    """Worth retrying later: rate limits, server errors, timeouts, connection trouble."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class ContextTooLong(Exception):
    """The input did not fit the model; shrink it and try again."""


class PermanentLLMError(Exception):
    """Retrying the same call will not help: bad key, unknown model, rejected request."""


class BadAnswer(Exception):
    """The model answered, but nothing usable: empty, oversized, or JSON without a summary."""

    def __init__(self, message: str, oversized: int | None = None):
        super().__init__(message)
        self.oversized = oversized


@dataclass
class Completion:
    text: str
    model: str
    prompt_tokens: int | None
    completion_tokens: int | None
    seconds: float


@dataclass
class Answer:
    summary: str
    notes: list[DailyNotes] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    try:
        value = headers.get("retry-after")
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


async def complete(choice: ModelChoice, messages: list[dict[str, str]], timeout: float) -> Completion:
    """One attempt, no hidden retries: arq's Retry is the layer that survives a crash."""
    started = time.monotonic()
    try:
        response: Any = await litellm.acompletion(
            model=choice.model,
            messages=messages,
            api_key=choice.api_key,
            api_base=choice.api_base,
            timeout=timeout,
            max_retries=0,
            temperature=0.2,
        )
    except litellm.ContextWindowExceededError as exc:
        raise ContextTooLong(str(exc)) from None
    except (
        litellm.RateLimitError,
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.APIConnectionError,
        litellm.Timeout,
        litellm.BadGatewayError,
    ) as exc:
        raise TransientLLMError(f"{type(exc).__name__}: {_short(exc)}", _retry_after(exc)) from None
    except litellm.BadRequestError as exc:
        if "context" in str(exc).lower() and "length" in str(exc).lower():
            raise ContextTooLong(str(exc)) from None
        raise PermanentLLMError(f"{type(exc).__name__}: {_short(exc)}") from None
    except (litellm.AuthenticationError, litellm.NotFoundError, litellm.PermissionDeniedError) as exc:
        raise PermanentLLMError(f"{type(exc).__name__}: {_short(exc)}") from None
    except litellm.APIError as exc:
        raise TransientLLMError(f"{type(exc).__name__}: {_short(exc)}") from None
    choice_ = response.choices[0] if response.choices else None
    text = (choice_.message.content or "") if choice_ is not None else ""
    usage = getattr(response, "usage", None)
    return Completion(
        text=text,
        model=choice.model,
        prompt_tokens=getattr(usage, "prompt_tokens", None),
        completion_tokens=getattr(usage, "completion_tokens", None),
        seconds=time.monotonic() - started,
    )


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


def routing_problem(model: str) -> str | None:
    """Why litellm could not send a request for `model`, or None when it can (checked at start-up)."""
    try:
        litellm.get_llm_provider(model)
    except Exception as exc:  # litellm raises BadRequestError and others for unknown providers
        return _short(exc)
    return None


def context_window(model: str) -> int:
    """The model's input window from litellm's local table; unknown models get a safe default."""
    try:
        info = litellm.get_model_info(model)
        return int(info.get("max_input_tokens") or info.get("max_tokens") or DEFAULT_WINDOW)
    except Exception:  # litellm raises several types for unmapped models
        return DEFAULT_WINDOW


_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")


def parse_answer(text: str, max_chars: int, need_summary: bool = True, allow_prose: bool = True) -> Answer:
    """JSON (repaired if broken); prose only as a first summary, when there is nothing to lose by it.

    With a previous summary to fold in, prose is refused: a refusal or an apology ("I can't help with
    that") would otherwise replace everything the session had (anchors, lesson 1).
    """
    cleaned = _FENCE.sub("", text.strip()).strip()
    if not cleaned:
        raise BadAnswer("empty answer")
    data: Any = None
    if cleaned.startswith("{") or '"summary"' in cleaned:
        data = json_repair.loads(cleaned[cleaned.find("{"):] if "{" in cleaned else cleaned)
    if isinstance(data, dict):
        summary = data.get("summary")
        if not isinstance(summary, str) or not summary.strip():
            if need_summary:
                raise BadAnswer("the JSON answer has no summary")
            summary = ""
        answer = Answer(summary=summary.strip())
        answer.notes, bad_notes = _models(DailyNotes, data.get("daily_notes"), _lenient_note)
        answer.facts, bad_facts = _models(Fact, data.get("facts"), _lenient_fact)
        if bad_notes or bad_facts:
            log.info("dropped %d unreadable notes and %d unreadable facts of the answer", bad_notes, bad_facts)
    elif cleaned.startswith(("{", "[")) or not need_summary:
        raise BadAnswer("the answer is JSON the repair could not read")
    elif not allow_prose:
        raise BadAnswer("prose instead of the JSON answer, with a previous summary to fold in")
    else:
        answer = Answer(summary=cleaned)
    if len(answer.summary) > max_chars:
        raise BadAnswer(f"summary of {len(answer.summary)} characters is over {max_chars}", len(answer.summary))
    return answer


def _lenient_fact(item: dict[str, Any]) -> dict[str, Any]:
    if "importance" in item:
        # Models answer "4", 4.5 or 9 as often as 4: clamp rather than lose the fact.
        item = {**item, "importance": min(5, max(1, round(float(item["importance"]))))}
    return item


def _lenient_note(item: dict[str, Any]) -> dict[str, Any]:
    """Keep every readable item of a day: one odd entry must not cost the whole day's notes."""
    cleaned: dict[str, Any] = {"date": str(item.get("date", ""))}
    for name in ("topics", "preferences", "decisions", "tasks", "insights"):
        values = item.get(name)
        values = values if isinstance(values, list) else [values] if values else []
        cleaned[name] = [str(v) for v in values if isinstance(v, (str, int, float)) and str(v).strip()]
    issues = []
    for issue in item.get("technical_issues") or []:
        if isinstance(issue, str) and issue.strip():
            issues.append({"problem": issue})
        elif isinstance(issue, dict) and issue.get("problem"):
            issues.append({"problem": str(issue["problem"]), "solution": str(issue.get("solution") or "")})
    cleaned["technical_issues"] = issues
    return cleaned


def _models(model: type[Any], items: Any, lenient: Any) -> tuple[list[Any], int]:
    good, bad = [], 0
    for item in items if isinstance(items, list) else []:
        try:
            if not isinstance(item, dict):
                raise TypeError("not an object")
            good.append(model.model_validate(lenient(item)))
        except (ValidationError, ValueError, TypeError):
            bad += 1
    return good, bad
