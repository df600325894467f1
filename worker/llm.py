"""One summarizing call through litellm, with litellm's errors converted to the worker's, and model facts from its tables."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import litellm

from worker.errors import ContextTooLong, PermanentLLMError, TransientLLMError
from worker.nanobot_config import ModelChoice

litellm.suppress_debug_info = True
log = logging.getLogger("worker.llm")
DEFAULT_WINDOW = 128_000


@dataclass
class Completion:
    text: str
    model: str
    prompt_tokens: int | None
    completion_tokens: int | None
    seconds: float


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
