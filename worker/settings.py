"""The worker's settings: the hooks' settings plus everything only the worker reads, validated at start-up."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from nanobot_hooks.settings import HookSettings, SettingsError, load
from worker.keep_rule import KeepRule
from worker.nanobot.config import NanobotConfig
from worker.text.clock import zone

__all__ = ["Settings", "SettingsError", "load_instance_settings", "load_settings", "unknown_variables"]


class Settings(HookSettings):
    summary_model: str | None = Field(
        None,
        description="litellm model string, e.g. deepseek/deepseek-chat; "
        "unset: agents.defaults.summaryModel in nanobot's config, else nanobot's own "
        "model, else deepseek/deepseek-chat (docs/real-models.md)",
    )
    summary_fallback_model: str | None = Field(
        None, description="used once the summary model keeps failing (a bad answer is asked again with it)"
    )
    # 3% of the window: the last exchange or two stay verbatim at 32,000 tokens, a few more at 128,000.
    # Kept tokens are re-sent with every request until the next summary, and re-sent uncached right after
    # one: a share of the window keeps that cost in step with the window (bench/bench_compare.py compares
    # keep rules).
    summary_keep: Annotated[KeepRule, NoDecode] = Field(
        KeepRule("fraction", 0.03),
        description=(
            "what stays verbatim after an automatic summary: messages:N, tokens:N, fraction:F of the window or turns:N "
            "(the last N user turns and their answers); the cut moves back to the start of a user turn, so the kept "
            "tail is whole exchanges (with 3% of a 32,000 window, typically the last one), and the last user turn "
            "always stays, however long; a job queued by hand keeps the last exchange (turns:1) unless "
            "nanobot-summary enqueue --keep RULE names another"
        ),
    )
    # An idle summary happens when the cache is cold anyway; what it keeps verbatim is re-sent with every
    # later request. The last exchange (the question and its answer) is what a user's next message most
    # often refers to (docs/performance.md, Idle summaries).
    summary_idle_keep: Annotated[KeepRule, NoDecode] = Field(
        KeepRule("turns", 1),
        description=(
            "what an idle summary keeps verbatim: turns:N (the last N user turns and their answers), messages:N, "
            "tokens:N or fraction:F, as NANOBOT_SUMMARY_KEEP; turns:1 = the last question and everything that answered "
            "it, messages:0 = nothing (as nanobot's own idle compaction)"
        ),
    )
    summary_min_saving: float = Field(
        0.05,
        ge=0,
        lt=1,
        description="share of the context window a summary must "
        "take out of every later request; a smaller one is not asked for "
        "(a manual enqueue always is), and an answer that saves less "
        "than half of it is not committed; 0 = any saving",
    )
    # An idle summary is applied at a cold cache, so it pays no extra cache miss: any clear saving is worth
    # its call, at any window size (worker.summarize.cut.saving_floor).
    summary_idle_min_tokens: int = Field(
        2_000,
        ge=0,
        description="tokens an idle summary must take out of the "
        "context (at most NANOBOT_SUMMARY_MIN_SAVING of the window): "
        "applied at a cold cache, it pays no extra cache miss, so a share of a "
        "large window would ask too much",
    )
    summary_input_tokens: int = Field(24_000, ge=1_000, description="input budget of one summarizing call")
    summary_max_chars: int = Field(8_000, ge=500, description="size cap of the rolling summary")
    summary_prompt_file: Path | None = Field(None, description="a file whose text replaces the built-in instructions")
    summary_timeout: float = Field(120.0, gt=0, description="seconds for one LLM call")
    summary_job_timeout: int | None = Field(
        None,
        ge=1,
        description="seconds one try of a job may run; "
        "a worker killed mid-job has the job run again this long "
        "+ 10 s after it started; unset: 6 x NANOBOT_SUMMARY_TIMEOUT, "
        "at least 300",
    )
    summary_json: Literal["auto", "json_schema", "json_object", "off"] = Field(
        "auto",
        description="how to ask for the JSON answer: auto (a schema where litellm knows the model follows "
        "one, else JSON mode), json_schema, json_object or off; a server that rejects the kind "
        "asked for is asked again with the next weaker one",
    )
    summary_min_carry: float = Field(
        0.5, ge=0, le=1, description="share of the previous summary's identifiers a new summary must keep; 0 = off"
    )
    summary_cooldown: float = Field(
        900.0,
        ge=0,
        description="seconds a session rests after a failed or "
        "fruitless paid job; doubles on each repeat, up to "
        "NANOBOT_SUMMARY_COOLDOWN_MAX",
    )
    summary_cooldown_max: float = Field(
        4 * 3600.0, ge=0, description="longest rest after repeated failures, in seconds"
    )
    summary_daily_tokens: int | None = Field(
        None,
        gt=0,
        description="optional cap of summarizing tokens per "
        "session and day: a session that reaches it rests until midnight in "
        "nanobot's timezone",
    )
    summary_daily_tokens_total: int | None = Field(
        None,
        gt=0,
        description="optional cap of summarizing tokens per "
        "day, all sessions together: once it is reached, every session "
        "rests until midnight in nanobot's timezone",
    )
    summary_max_tries: int = Field(
        5,
        ge=1,
        description="attempts of one job for transient errors "
        "(429, 5xx, timeouts) before it gives up; a bad answer gets 2",
    )
    summary_retry_delay: float = Field(
        5.0, ge=0, description="seconds before the first retry; doubles each time, or the provider's Retry-After"
    )
    summary_workspace: Path | None = Field(
        None,
        description="where memory/ lives; unset: nanobot's "
        "workspace, where the recall tool looks (leave it unset or "
        "pointing there)",
    )
    summary_daily_at: str = Field(
        "23:55", description="HH:MM (or HH:MM:SS) of the daily run, in nanobot's timezone (NANOBOT_SUMMARY_TIMEZONE)"
    )
    summary_retired_days: float = Field(
        30.0,
        ge=0,
        description="days a copy of a conversation kept at `/new` "
        "(in the sessions folder's .summary-worker-retired/) stays once every "
        "message of it is noted; then the daily run removes it, and the recall "
        "index forgets its messages (0: at the first daily run after it is noted)",
    )
    summary_timezone: str | None = Field(
        None,
        description="IANA timezone the daily run and the notes' "
        "dates follow; unset: nanobot's (the one its config names, else the "
        "host's; a worker that falls back to UTC because none is named, as in a "
        "bare container, says so at start-up)",
    )
    # The worker often shares a small machine with nanobot: its CPU work (parsing answers, memory files, the
    # recall index) must not slow down a turn (bench/bench_compare.py).
    summary_niceness: int = Field(
        10,
        ge=0,
        le=19,
        description="how far the worker lowers its CPU priority "
        "(its niceness is raised by this much) so that nanobot's turns on the same "
        "machine come first; 0 = as started (a worker on a machine or CPU quota of its own)",
    )
    memory_max_facts: int = Field(
        300, ge=1, description="cap of facts in MEMORY.md's managed part (the least important and oldest go first)"
    )
    memory_write: Literal["idle", "now"] = Field(
        "idle",
        description="when new facts enter MEMORY.md: idle = held in memory/.MEMORY.pending.jsonl until no "
        "session file was written for NANOBOT_SUMMARY_CACHE_TTL seconds (a job run while every "
        "session is quiet writes at once; the idle check and a check every minute write what "
        "waits; the daily run what waited a day); now = as each job ends",
    )
    config: Path = Field(
        Path("~/.nanobot/config.json"),
        description="nanobot's config.json: the "
        "sessions folder, workspace, model and timezone are found from it "
        "as nanobot finds them",
    )

    @field_validator("summary_keep", "summary_idle_keep", mode="before")
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
        clock_time(value)
        return value

    @field_validator("summary_timezone")
    @classmethod
    def _check_timezone(cls, value: str | None) -> str | None:
        if value:
            zone(value)
        return value

    @property
    def config_path(self) -> Path:
        return self.config.expanduser()


def load_settings() -> Settings:
    """Read the environment; a bad value raises SettingsError with one readable line."""
    return load(Settings)


# Our own variables' prefixes: nanobot reads other NANOBOT_* variables for its own settings, so only these
# are ours to check for misspellings.
OWN_PREFIXES = ("NANOBOT_SUMMARY_", "NANOBOT_MEMORY_")


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per NANOBOT_SUMMARY_* / NANOBOT_MEMORY_* variable no setting reads.

    One line per NANOBOT_SUMMARY_* / NANOBOT_MEMORY_* variable no setting reads (a misspelling is otherwise ignored
    without a word), with the nearest known name."""
    environ = os.environ if environ is None else environ
    known = {Settings.env_name(field) for field in Settings.model_fields}
    lines = []
    for name in sorted(environ):
        if name.upper().startswith(OWN_PREFIXES) and name.upper() not in known:
            nearest = difflib.get_close_matches(name.upper(), sorted(known), n=1, cutoff=0.6)
            hint = f"did you mean {nearest[0]}?" if nearest else "see docs/configuration.md"
            lines.append(f"{name} is not a setting of the summary worker and is ignored; {hint}")
    return lines


def load_instance_settings() -> Settings:
    """`load_settings`, with the namespace of the nanobot instance NANOBOT_CONFIG names settled (for scripts)."""
    settings = load_settings()
    return settings.for_workspace(NanobotConfig.load(settings.config_path).workspace)


def clock_time(value: str) -> tuple[int, int, int]:
    """HH:MM or HH:MM:SS as (hour, minute, second); ValueError for anything else (pure)."""
    parts = value.split(":")
    if not (2 <= len(parts) <= 3 and all(part.isdigit() and len(part) <= 2 for part in parts)):
        raise ValueError("expected HH:MM")
    hour, minute, second = (int(part) for part in (*parts, "0")[:3])
    if hour >= 24 or minute >= 60 or second >= 60:
        raise ValueError("expected HH:MM")
    return hour, minute, second
