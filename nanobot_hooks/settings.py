"""The hooks' settings, read from the environment inside nanobot; the worker's settings extend them."""

from __future__ import annotations

import os
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal, Self, TypeVar

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from nanobot_hooks.contract.keys import NAMESPACE_PATTERN, WORKSPACE_ID_FILE, Keys, default_namespace
from nanobot_hooks.contract.redis_url import SENTINEL_SCHEME, redacted_url, sentinel_target
from nanobot_hooks.contract.session_format import is_direct_chat

ENV_PREFIX = "NANOBOT_"
# NANOBOT_SUMMARY_DEMO: short turns cross no share of a real window and hold little to summarize, so the demo
# summarizes every third user message, keeps the last exchange and asks no minimum saving.
DEMO_PRESET = {"summary_interval": 3, "summary_keep": "turns:1", "summary_min_saving": 0}
S = TypeVar("S", bound="HookSettings")


class HookSettings(BaseSettings):
    """What nanobot_hooks reads. A bad value of a worker-only variable never switches the hooks off."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True, populate_by_name=True)

    auto_summary: bool = Field(
        True,
        description="summarize on its own (at the threshold, every "
        "NANOBOT_SUMMARY_INTERVAL user messages, at a pause, and the daily run); false = "
        "manual enqueue only (summaries queued by hand are still applied)",
    )
    summary_interval: int = Field(10, ge=0, description="user messages between summaries; 0 = off")
    summary_threshold: float = Field(
        0.6, gt=0, le=1, description="prompt share of the context window that triggers a summary"
    )
    summary_context_window: int | None = Field(
        None,
        gt=0,
        description="context window override, in tokens; unset: nanobot's (per-session model presets included)",
    )
    summary_demo: bool = Field(
        False,
        description="a preset to watch the automatic trigger fire in a few short "
        "turns: a summary every 3 user messages (NANOBOT_SUMMARY_INTERVAL=3) keeping the last "
        "exchange (NANOBOT_SUMMARY_KEEP=turns:1) at any saving (NANOBOT_SUMMARY_MIN_SAVING=0), "
        "whatever those say; set it for nanobot and the worker alike (README, Quick start)",
    )
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        validation_alias=AliasChoices("REDIS_URL"),
        description="the queue: redis://[user:password@]host:port/db, rediss:// for TLS, or "
        "redis+sentinel://[user:password@]host:port[,host:port...]/service_name/db for a primary found "
        "through Sentinel (docs/operations.md, High availability)",
    )
    redis_ca_file: Path | None = Field(None, description="CA certificate (PEM) that signed a TLS Redis's certificate")
    summary_namespace: str | None = Field(
        None,
        pattern=NAMESPACE_PATTERN,
        description="prefix of this nanobot instance's Redis keys and queue (nanobot-summary:<namespace>:...; "
        "letters, digits, _ . -; up to 64); default: the first 12 characters of the id nanobot keeps in "
        "<workspace>/.nanobot/workspace-id, which the hooks and the worker of one instance both read "
        "(docs/operations.md, Many nanobots, one Redis)",
    )
    memory_sessions: Annotated[tuple[str, ...], NoDecode] = Field(
        ("direct",),
        description="sessions trusted to write MEMORY.md and to recall other sessions: comma-separated key "
        "patterns (telegram:42, slack:D*), 'direct' for one-to-one chats (nanobot's web chat among "
        "them when its channel asks for a token), '*' for all, 'none' (docs/memory-and-recall.md, Who "
        "may write long-term memory)",
    )

    summary_pickup: Literal["now", "idle"] = Field(
        "now",
        description="when a finished summary is applied: 'now' = before the next turn; 'idle' = once the session "
        "has been quiet longer than the provider's prompt cache lasts (NANOBOT_SUMMARY_CACHE_TTL), "
        "when that cache is cold anyway, or at once when the context passes halfway from the threshold "
        "to the window; 'now' is recommended (docs/performance.md)",
    )
    summary_cache_ttl: float = Field(
        300.0,
        gt=0,
        description="seconds the main model's provider keeps a prompt "
        "cached: a session quiet this long gets an idle summary, idle pickup waits "
        "this long, and MEMORY.md is written once no session was active this long",
    )
    summary_idle: bool = Field(
        True,
        description="summarize a session in the background once it has been quiet "
        "longer than NANOBOT_SUMMARY_CACHE_TTL (when worth NANOBOT_SUMMARY_IDLE_MIN_TOKENS); "
        "false = only the threshold and interval triggers",
    )
    summary_recall: bool = Field(True, description="offer the recall tool to the model; false = not offered")
    summary_recall_scope: Literal["session", "trusted"] = Field(
        "session",
        description="what recall searches: 'session' = the asking session's own material and MEMORY.md; "
        "'trusted' = a trusted session (NANOBOT_MEMORY_SESSIONS) also searches the other trusted ones",
    )

    summary_embedding_model: str | None = Field(
        None,
        description="an embedding model (a litellm name, e.g. openai/text-embedding-3-small): the worker embeds "
        "what it indexes for recall and the recall tool ranks by meaning as well as by words; unset = words only. The "
        "tool asks the query's embedding of NANOBOT_SUMMARY_EMBEDDING_API_BASE (an OpenAI-compatible /embeddings) "
        "within 1.5 s, else answers by words (docs/memory-and-recall.md)",
    )
    summary_embedding_api_base: str | None = Field(
        None,
        description="the embedding model's OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1); unset: "
        "litellm's default for the model, and https://api.openai.com/v1 for the recall tool's query of an openai/ "
        "model (any other model needs this set for the tool to use it)",
    )
    summary_embedding_api_key: SecretStr | None = Field(
        None,
        description="the embedding endpoint's key, when it needs one not in the provider's usual variable "
        "(OPENAI_API_KEY for openai/ models); never logged",
    )

    @model_validator(mode="before")
    @classmethod
    def _demo_preset(cls, data: Any) -> Any:
        """NANOBOT_SUMMARY_DEMO's values over the ones it names.

        NANOBOT_SUMMARY_DEMO's values over the ones it names (the worker's among them: its settings extend these, and
        these ignore what they do not hold)."""
        if isinstance(data, dict) and str(data.get("summary_demo", "")).strip().lower() in ("1", "true", "yes", "on"):
            return {**data, **DEMO_PRESET}
        return data

    @field_validator("memory_sessions", mode="before")
    @classmethod
    def _split_patterns(cls, value: object) -> object:
        if isinstance(value, str):
            patterns = tuple(part.strip() for part in value.split(",") if part.strip())
            if not patterns:
                raise ValueError("expected patterns such as direct,telegram:42 (or none)")
            return () if patterns == ("none",) else patterns
        return value

    @field_validator(
        "redis_ca_file",
        "summary_namespace",
        "summary_embedding_model",
        "summary_embedding_api_base",
        "summary_embedding_api_key",
        mode="before",
    )
    @classmethod
    def _blank_path_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    def for_workspace(self, workspace: Path) -> Self:
        """These settings with the namespace settled.

        NANOBOT_SUMMARY_NAMESPACE, else from the id nanobot keeps in `workspace` (it names nanobot's sessions folder:
        the worker reading those sessions serves this queue)."""
        if self.summary_namespace is not None:
            return self
        marker = Path(workspace).expanduser().resolve(strict=False) / WORKSPACE_ID_FILE
        try:
            workspace_id = marker.read_text(encoding="utf-8").strip()
        except OSError:
            raise NoWorkspaceId(
                f"NANOBOT_SUMMARY_NAMESPACE is not set and nanobot's workspace id {marker} is missing "
                "(start nanobot once with this workspace, or set NANOBOT_SUMMARY_NAMESPACE)"
            ) from None
        if len(workspace_id) != 32 or any(c not in "0123456789abcdef" for c in workspace_id):
            raise SettingsError(f"NANOBOT_SUMMARY_NAMESPACE is not set and {marker} holds no nanobot workspace id")
        return self.model_copy(update={"summary_namespace": default_namespace(workspace_id)})

    @property
    def keys(self) -> Keys:
        """The Redis names of this instance (after `for_workspace`, or with NANOBOT_SUMMARY_NAMESPACE set)."""
        if self.summary_namespace is None:
            raise SettingsError("NANOBOT_SUMMARY_NAMESPACE: not settled (settings.for_workspace was not called)")
        return Keys(self.summary_namespace)

    def redis_options(self) -> dict[str, Any]:
        """Extra keyword arguments of redis-py's `from_url` for this Redis.

        The CA file, for TLS only (a plain connection takes no TLS options)."""
        if self.redis_ca_file is None or not self.redis_url.startswith("rediss://"):
            return {}
        return {"ssl_ca_certs": str(self.redis_ca_file.expanduser())}

    def is_trusted(self, session_key: str, private_web: bool = False) -> bool:
        """May this session's user write long-term memory, and recall what other sessions said?

        `private_web`: nanobot's web chat asks for a token, so `direct` takes in its sessions
        (contract.session_format.is_direct_chat)."""
        return any(
            is_direct_chat(session_key, private_web) if pattern == "direct" else fnmatchcase(session_key, pattern)
            for pattern in self.memory_sessions
        )

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "unix://", SENTINEL_SCHEME)):
            raise ValueError("expected redis://host:port/db")
        sentinel_target(value)  # a malformed Sentinel URL is named at start-up, not at the first call
        return value

    @classmethod
    def env_name(cls, field: str) -> str:
        """The variable a field is read from: its alias if it has one (REDIS_URL), else NANOBOT_<FIELD>."""
        alias = cls.model_fields[field].validation_alias
        if isinstance(alias, AliasChoices):
            return str(alias.choices[0])
        return ENV_PREFIX + field.upper()

    @classmethod
    def field_for(cls, loc: str) -> str:
        """Errors name an aliased field by its alias; map it back."""
        return next((name for name in cls.model_fields if cls.env_name(name) == loc), loc)


# The settings nanobot's hooks and the worker both act on: the two sides must agree. The hooks publish theirs
# (turn/listener.py), the worker reports its own (worker/state/workers.py), `doctor` compares them.
SHARED_SETTINGS = (
    "auto_summary",
    "summary_idle",
    "summary_cache_ttl",
    "memory_sessions",
    "summary_context_window",
    "summary_recall_scope",
)


def plain_setting(value: Any) -> Any:
    """A setting as a JSON value both sides write alike.

    A plain sequence as its items joined by commas (a named tuple, such as a keep rule, reads as its text), anything
    else not JSON's as its text."""
    if type(value) in (tuple, list):
        return ",".join(map(str, value))
    return value if isinstance(value, (bool, int, float, str, type(None))) else str(value)


def shared_settings(settings: HookSettings) -> dict[str, Any]:
    return {name: plain_setting(getattr(settings, name)) for name in SHARED_SETTINGS}


def runner() -> str:
    """How this process is run, which says where its settings are set.

    Under systemd (it sets INVOCATION_ID for a unit's processes), from a terminal, or "" (another manager). A container
    is not told apart: its marker files also sit on machines their users do not think of as containers (a VM's image, a
    sandbox)."""
    if os.environ.get("INVOCATION_ID"):
        return "systemd"
    return "terminal" if any(os.isatty(fd) for fd in (0, 1, 2)) else ""


class SettingsError(ValueError):
    """A bad setting, described in one line that names the variable."""


class NoWorkspaceId(SettingsError):
    """nanobot has not run with this workspace yet: the id it writes then names the instance's namespace."""


def _shown(field: str, value: Any) -> str:
    # A URL's password must not reach the error line (it goes into nanobot's log).
    return repr(redacted_url(value)) if field == "redis_url" and isinstance(value, str) else repr(value)


def load(cls: type[S]) -> S:
    """Read the environment into `cls`; a bad value raises SettingsError with one readable line."""
    try:
        return cls()
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = cls.field_for(str(error["loc"][0])) if error["loc"] else "?"
            name = cls.env_name(field) if field in cls.model_fields else field
            described = cls.model_fields.get(field)
            accepts = described.description if described is not None else ""
            message = str(error["msg"]).removeprefix("Value error, ")
            problems.append(f"{name}={_shown(field, error.get('input'))}: {message} ({accepts})")
        raise SettingsError("; ".join(problems)) from None


def load_settings() -> HookSettings:
    return load(HookSettings)
