"""One summarizing call through litellm.

Structured output where the model has it, litellm's errors converted to the worker's, and what the call cost."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from worker.errors import ContextTooLong, CredentialsError, PermanentLLMError, TransientLLMError
from worker.files import cache_folder, temp_beside
from worker.nanobot.config import ModelChoice
from worker.text.redact import redact

log = logging.getLogger("worker.model.llm")
_litellm_module: Any = None


def load_litellm() -> Any:
    """litellm, imported at its first use.

    Its import is most of a worker's memory (~150 MB of ~240 MB), so a worker at rest that has run no job yet does
    without it (docs/performance.md)."""
    global _litellm_module
    if _litellm_module is None:
        import litellm

        litellm.suppress_debug_info = True
        # Modules litellm imports at its first call (the OpenAI client's resources, its file-id helpers): imported
        # with litellm, or the first call pays a second or more for them.
        for module in ("openai.resources.chat", "litellm.proxy.openai_files_endpoints.common_utils"):
            try:
                importlib.import_module(module)
            except Exception:  # noqa: BLE001 - another litellm or openai version: it is imported when first needed
                pass
        _litellm_module = litellm
    return _litellm_module


def litellm_loaded() -> bool:
    """Has this process imported litellm yet?"""
    return _litellm_module is not None or "litellm" in sys.modules


# The worker's start (`light_start`): until litellm is loaded, the model checks run in a child process that
# imports it and exits, and their answers are kept here by the choice they are of.
_LIGHT = False
_CHECKED: dict[ModelChoice, tuple[str | None, str | None]] = {}


def light_start() -> None:
    """From now on, a model check made before litellm is loaded runs in a child process (`model_problems`).

    The worker starts and waits for its first job without litellm's memory."""
    global _LIGHT
    _LIGHT = True


def model_problems(choice: ModelChoice) -> tuple[str | None, str | None]:
    """(`routing_problem`, `credentials_problem`) of the choice.

    In a child process after `light_start` while litellm is not loaded here (the answers kept, and cached for the next
    start: CHECKS_CACHE), else in this one."""
    if litellm_loaded() or not _LIGHT:
        return routing_problem(choice.model), _credentials_problem(choice)
    if choice not in _CHECKED:
        asked = check_asked(choice, os.environ)
        cached = _cached_checks().get(asked)
        if isinstance(cached, list) and len(cached) == 2:
            _CHECKED[choice] = (cached[0], cached[1])
        else:
            _CHECKED[choice] = _checked_in_child(choice)
            _cache_checks(asked, _CHECKED[choice])
    return _CHECKED[choice]


# The child's answers, kept in the cache folder for the next start (a restart then loads no litellm at all): by
# `check_asked`, the last CHECKS_KEPT of them. A file that cannot be read or written is no cache.
CHECKS_CACHE = "model-checks.json"
CHECKS_KEPT = 32
# What the child's answers never depend on: this project's and the machine's own variables.
_NOT_THE_PROVIDERS = (
    "NANOBOT_",
    "PYTEST_",
    "XDG_",
    "LC_",
    "REDIS_URL",
    "HOME",
    "PATH",
    "PWD",
    "OLDPWD",
    "TZ",
    "PYTHON",
    "TERM",
    "SHLVL",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "_",
)


def check_asked(choice: ModelChoice, environ: Any) -> str:
    """What the model checks' answers depend on, as one digest (pure).

    litellm's version, the model, its provider and where it was chosen (the answers name them), whether a key and a base
    URL are given (never their values), and the names of the set environment variables litellm may read a key from
    (never their values)."""
    try:
        from importlib.metadata import version

        litellm_version = version("litellm")
    except Exception:  # noqa: BLE001 - not installed as a distribution: no answer is reused
        litellm_version = f"unknown {time.time()}"
    names = sorted(name for name, value in environ.items() if value and not name.startswith(_NOT_THE_PROVIDERS))
    asked = [
        litellm_version,
        choice.model,
        choice.provider,
        choice.source,
        bool(choice.api_key),
        bool(choice.api_base),
        names,
    ]
    return hashlib.sha256(json.dumps(asked).encode("utf-8")).hexdigest()


def _cached_checks() -> dict[str, Any]:
    try:
        found = json.loads((cache_folder() / CHECKS_CACHE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _cache_checks(asked: str, answers: tuple[str | None, str | None]) -> None:
    """The answers kept under `asked`, the oldest forgotten past CHECKS_KEPT.

    Written whole (another worker starting meanwhile reads the old file or the new one)."""
    path = cache_folder() / CHECKS_CACHE
    kept = {key: value for key, value in _cached_checks().items() if key != asked}
    kept[asked] = list(answers)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = temp_beside(path, json.dumps(dict(list(kept.items())[-CHECKS_KEPT:])).encode("utf-8"), 0o600)
        os.replace(temp, path)
    except OSError as exc:
        log.debug("the model checks' answers were not cached (%s)", type(exc).__name__)


_CHILD = (
    "import json, sys\nfrom worker.model.llm import ModelChoice, credentials_problem, routing_problem\n"
    "choice = ModelChoice(**json.load(sys.stdin))\n"
    "print(json.dumps([routing_problem(choice.model), credentials_problem(choice)]))\n"
)


def _checked_in_child(choice: ModelChoice) -> tuple[str | None, str | None]:
    """The checks in a fresh interpreter (the key goes through its stdin, never its command line).

    In this process when the child fails, as before."""
    root = str(Path(__file__).resolve().parents[2])  # where `worker` is, installed or a checkout
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=json.dumps(dataclasses.asdict(choice)),
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            check=True,
        )
        routing, credentials = json.loads(done.stdout.strip().splitlines()[-1])
        return routing, credentials
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        log.debug("model checks in a child process failed (%s): made here", type(exc).__name__)
        return routing_problem(choice.model), _credentials_problem(choice)


DEFAULT_WINDOW = 128_000

JsonMode = Literal["auto", "json_schema", "json_object", "off"]
# Strongest first: a server that rejects one is asked with the next.
_MODES: tuple[str, ...] = ("json_schema", "json_object", "off")
# Models whose server refused a response_format this process asked for: they are asked with a weaker one.
_REFUSED: dict[str, str] = {}
# Providers whose API takes only {"type": "json_object"}, whatever litellm's table says of the model.
_OBJECT_ONLY = {"deepseek"}


@dataclass
class Completion:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost: float | None  # in USD, from litellm's local price table; None for a model it does not price
    finish_reason: str | None
    seconds: float


def json_mode(model: str, wanted: JsonMode = "auto") -> str:
    """The response_format to ask `model` for.

    A JSON schema where litellm knows the model follows one, else JSON mode, weakened for a model whose server refused
    the stronger kind earlier."""
    if wanted == "auto":
        provider = model.split("/", 1)[0] if "/" in model else ""
        try:
            schema = load_litellm().supports_response_schema(model) and provider not in _OBJECT_ONLY
        except Exception:  # noqa: BLE001 - litellm's tables raise several kinds for unknown models
            schema = False
        wanted = "json_schema" if schema else "json_object"
    refused = _REFUSED.get(model)
    if refused is not None and _MODES.index(wanted) <= _MODES.index(refused):
        return _MODES[min(_MODES.index(refused) + 1, len(_MODES) - 1)]
    return wanted


def _response_format(mode: str, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    if mode == "json_schema" and schema is not None:
        return {"type": "json_schema", "json_schema": {"name": "summary_answer", "schema": schema, "strict": True}}
    if mode in ("json_schema", "json_object"):
        return {"type": "json_object"}
    return None


def _rejects_format(exc: Exception) -> bool:
    text = str(exc).lower()
    return any(
        word in text for word in ("response_format", "json_schema", "json_object", "json mode", "structured output")
    )


async def complete(
    choice: ModelChoice,
    messages: list[dict[str, str]],
    timeout: float,
    schema: dict[str, Any] | None = None,
    wanted: JsonMode = "auto",
) -> Completion:
    """One attempt, no hidden retries: arq's Retry is the layer that survives a crash.

    With `schema`, the answer is asked for as JSON (see json_mode). A server that rejects the
    response_format (HTTP 400 naming it) is asked again at once with a weaker one; such a 400 is not
    billed by providers, and the weaker kind is remembered for the model.
    """
    mode = json_mode(choice.model, wanted) if schema is not None else "off"
    while True:
        try:
            return await _call(choice, messages, timeout, _response_format(mode, schema))
        except PermanentLLMError as exc:
            if mode == "off" or not _rejects_format(exc):
                raise
            log.warning("model %s refused response_format %s; asking without it", choice.model, mode)
            _REFUSED[choice.model] = mode
            mode = _MODES[_MODES.index(mode) + 1]


async def _call(
    choice: ModelChoice, messages: list[dict[str, str]], timeout: float, response_format: dict[str, Any] | None
) -> Completion:
    litellm = load_litellm()
    started = time.monotonic()
    extra = {"response_format": response_format} if response_format is not None else {}
    try:
        response: Any = await litellm.acompletion(
            model=choice.model,
            messages=messages,
            api_key=choice.api_key,
            api_base=choice.api_base,
            timeout=timeout,
            max_retries=0,
            temperature=0.2,
            **extra,
        )
    except litellm.ContextWindowExceededError as exc:
        raise ContextTooLong(_short(exc)) from None
    except (litellm.AuthenticationError, litellm.PermissionDeniedError) as exc:
        raise CredentialsError(key_fix(choice, f"{type(exc).__name__}: {_short(exc)}")) from None
    except Exception as exc:
        # The OpenAI client refuses to start without a key ("Missing credentials. Please pass an api_key"),
        # and litellm passes that on as a connection error, which would be retried as an outage.
        if _missing_key(exc):
            raise CredentialsError(key_fix(choice, f"no API key ({_short(exc)})")) from None
        converted = _converted(exc)
        if converted is exc:
            raise  # not litellm's: a bug, with its traceback
        raise converted from None
    return _completion(choice, response, time.monotonic() - started)


def _completion(choice: ModelChoice, response: Any, seconds: float) -> Completion:
    """litellm's response as a Completion: the text, the token counts (when the provider says them), the cost."""
    first = response.choices[0] if response.choices else None
    usage = getattr(response, "usage", None)
    details = getattr(usage, "prompt_tokens_details", None)
    return Completion(
        text=_encodable((first.message.content or "") if first is not None else ""),
        model=choice.model,
        prompt_tokens=_count(getattr(usage, "prompt_tokens", None)),
        completion_tokens=_count(getattr(usage, "completion_tokens", None)),
        cached_tokens=_count(getattr(details, "cached_tokens", None)),
        cost=_cost(response),
        finish_reason=getattr(first, "finish_reason", None),
        seconds=seconds,
    )


def _converted(exc: Exception) -> Exception:
    """litellm's exception as the worker's: what a retry may fix, and what it will not."""
    litellm = load_litellm()
    if isinstance(
        exc,
        (
            litellm.RateLimitError,
            litellm.InternalServerError,
            litellm.ServiceUnavailableError,
            litellm.APIConnectionError,
            litellm.Timeout,
            litellm.BadGatewayError,
        ),
    ):
        return TransientLLMError(f"{type(exc).__name__}: {_short(exc)}", _retry_after(exc))
    if isinstance(exc, litellm.BadRequestError):
        if "context" in str(exc).lower() and "length" in str(exc).lower():
            return ContextTooLong(_short(exc))
        return PermanentLLMError(f"{type(exc).__name__}: {_short(exc)}")
    if isinstance(exc, litellm.NotFoundError):
        return PermanentLLMError(f"{type(exc).__name__}: {_short(exc)}")
    if isinstance(exc, litellm.APIError):
        return TransientLLMError(f"{type(exc).__name__}: {_short(exc)}", _retry_after(exc))
    return exc


def _missing_key(exc: Exception) -> bool:
    text = str(exc).lower()
    return "api_key" in text and ("missing credentials" in text or "must be set" in text)


def key_fix(choice: ModelChoice, what: str) -> str:
    """One line: the key problem, where the key goes, and that nothing is retried until it is fixed."""
    return (
        f"the provider refused the summary model's credentials ({what}); not retried: {where_key_goes(choice)}; "
        "the session rests meanwhile, and `nanobot-summary enqueue KEY` makes a summary at once after the fix"
    )


def where_key_goes(choice: ModelChoice, missing: list[str] | None = None) -> str:
    """Where the worker takes a key for the model from: nanobot's provider entry, or litellm's variable."""
    if missing is None:
        try:
            found = load_litellm().validate_environment(model=choice.model)
            missing = [str(n) for n in found.get("missing_keys") or []]
        except Exception:  # noqa: BLE001 - litellm's tables raise several kinds for unknown models
            missing = []
    provider = choice.provider or (choice.model.split("/", 1)[0] if "/" in choice.model else "")
    fixes = [f"set providers.{provider}.apiKey in nanobot's config"] if provider else []
    fixes += [f"{' / '.join(missing)} in the worker's environment"] if missing else []
    return " or ".join(fixes) or "give the model a key"


def credentials_problem(choice: ModelChoice) -> str | None:
    """Why `choice` has no key, in one line with the fix (litellm's validate_environment: no call), or None.

    A model with a key from nanobot's config, or one litellm says needs none, has no problem."""
    if choice.api_key:
        return None
    if _LIGHT and not litellm_loaded():
        return model_problems(choice)[1]
    return _credentials_problem(choice)


def _credentials_problem(choice: ModelChoice) -> str | None:
    """credentials_problem, made in this process."""
    if choice.api_key:
        return None
    try:
        found = load_litellm().validate_environment(
            model=choice.model, api_key=choice.api_key, api_base=choice.api_base
        )
    except Exception:  # noqa: BLE001 - an unknown provider: routing_problem reports it
        return None
    missing = [str(name) for name in found.get("missing_keys") or []]
    if found.get("keys_in_environment") or not missing:
        return None
    return f"summary model {choice.model} (from {choice.source}) has no API key: {where_key_goes(choice, missing)}"


def _encodable(text: str) -> str:
    """A model's text with any lone surrogate (a broken "\\ud83d" escape in its JSON) replaced.

    Such a character cannot be written to Redis or a file, and would fail the job after its paid calls."""
    return text.encode("utf-8", errors="replace").decode("utf-8")


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _cost(response: Any) -> float | None:
    """What litellm's local price table says the call cost (cached prompt tokens at their price)."""
    hidden = getattr(response, "_hidden_params", None)
    value = hidden.get("response_cost") if isinstance(hidden, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _retry_after(exc: Exception) -> float | None:
    """The provider's Retry-After, in seconds.

    litellm keeps the real headers on the exception itself; `exc.response` is a stand-in without them."""
    for headers in (
        getattr(exc, "litellm_response_headers", None),
        getattr(getattr(exc, "response", None), "headers", None),
    ):
        try:
            value = headers.get("retry-after") if headers is not None else None
            if value is not None:
                return max(0.0, float(value))
        except (TypeError, ValueError, AttributeError):
            continue
    return None


def _short(exc: Exception) -> str:
    # Provider errors can quote the request (and a key in it): redacted before it reaches a log or outcome.
    return redact(" ".join(str(exc).split())[:300])


def routing_problem(model: str) -> str | None:
    """Why litellm could not send a request for `model`, or None when it can (checked at start-up)."""
    try:
        load_litellm().get_llm_provider(model)
    except Exception as exc:  # noqa: BLE001  # litellm raises BadRequestError, and plain Exception too
        return _short(exc)
    return None


def context_window(model: str) -> int:
    """The model's input window from litellm's local table; unknown models get a safe default."""
    try:
        info = load_litellm().get_model_info(model)
        return int(info.get("max_input_tokens") or info.get("max_tokens") or DEFAULT_WINDOW)
    except Exception:  # noqa: BLE001  # litellm raises plain Exception (and others) for unmapped models
        return DEFAULT_WINDOW
