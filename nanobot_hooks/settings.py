"""The single source of configuration for the worker and the nanobot hooks, validated at start-up."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, NamedTuple

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ENV_PREFIX = "NANOBOT_"


class KeepRule(NamedTuple):
    """How much recent history stays verbatim after a summary (seed 004's `keep`)."""

    kind: Literal["messages", "tokens", "fraction"]
    value: float

    @classmethod
    def parse(cls, text: str) -> KeepRule:
        kind, sep, raw = text.strip().partition(":")
        if not sep or kind not in ("messages", "tokens", "fraction"):
            raise ValueError("expected messages:N, tokens:N or fraction:F")
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{raw!r} is not a number") from None
        if kind == "fraction" and not 0 < value < 1:
            raise ValueError("fraction:F needs 0 < F < 1")
        if kind != "fraction" and (value < 0 or value != int(value)):
            raise ValueError(f"{kind}:N needs a whole number >= 0")
        return cls(kind, value)

    def __str__(self) -> str:
        value = self.value if self.kind == "fraction" else int(self.value)
        return f"{self.kind}:{value}"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True, populate_by_name=True)

    auto_summary: bool = Field(True, description="summarize on its own (tokens or interval); false = manual only")
    summary_model: str | None = Field(None, description="litellm model string, e.g. deepseek/deepseek-chat")
    summary_fallback_model: str | None = Field(None, description="used when the summary model keeps failing")
    summary_interval: int = Field(10, ge=0, description="user messages between summaries; 0 = off")
    summary_threshold: float = Field(0.6, gt=0, le=1, description="prompt share of the window that triggers")
    summary_context_window: int | None = Field(None, gt=0, description="context window override, in tokens")
    summary_keep: Annotated[KeepRule, NoDecode] = Field(KeepRule("messages", 10), description="messages:N, tokens:N or fraction:F")
    summary_input_tokens: int = Field(24_000, ge=1_000, description="input budget of one summarizing call")
    summary_max_chars: int = Field(8_000, ge=500, description="size cap of the rolling summary")
    summary_prompt_file: Path | None = Field(None, description="a file whose text replaces the instructions")
    summary_timeout: float = Field(120.0, gt=0, description="seconds for one LLM call")
    summary_max_tries: int = Field(5, ge=1, description="attempts of one job before it gives up")
    summary_retry_delay: float = Field(5.0, ge=0, description="seconds before the first retry; doubles each time")
    summary_workspace: Path | None = Field(None, description="workspace override for memory files")
    summary_daily_at: str = Field("23:55", description="HH:MM of the daily run, in the timezone below")
    summary_timezone: str | None = Field(None, description="IANA timezone; default: nanobot's")
    memory_max_facts: int = Field(300, ge=1, description="cap of facts in MEMORY.md's managed part")
    config: Path = Field(Path("~/.nanobot/config.json"), description="nanobot's config.json")
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        validation_alias=AliasChoices("REDIS_URL"),
        description="redis://host:port/db",
    )

    @field_validator("summary_keep", mode="before")
    @classmethod
    def _parse_keep(cls, value: object) -> object:
        return KeepRule.parse(value) if isinstance(value, str) else value

    @field_validator("summary_model", "summary_fallback_model", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("summary_daily_at")
    @classmethod
    def _check_time(cls, value: str) -> str:
        hour, sep, minute = value.partition(":")
        if not (sep and hour.isdigit() and minute.isdigit() and int(hour) < 24 and int(minute) < 60):
            raise ValueError("expected HH:MM")
        return value

    @field_validator("summary_timezone")
    @classmethod
    def _check_timezone(cls, value: str | None) -> str | None:
        if value:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError("expected an IANA timezone such as Asia/Shanghai") from None
        return value

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("expected redis://host:port/db")
        return value

    @property
    def config_path(self) -> Path:
        return self.config.expanduser()

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


class SettingsError(ValueError):
    """A bad setting, described in one line that names the variable."""


def load_settings() -> Settings:
    """Read the environment; a bad value raises SettingsError with one readable line."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = Settings.field_for(str(error["loc"][0])) if error["loc"] else "?"
            name = Settings.env_name(field) if field in Settings.model_fields else field
            described = Settings.model_fields.get(field)
            accepts = described.description if described is not None else ""
            message = str(error["msg"]).removeprefix("Value error, ")
            problems.append(f"{name}={error.get('input')!r}: {message} ({accepts})")
        raise SettingsError("; ".join(problems)) from None
