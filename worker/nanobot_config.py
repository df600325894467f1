"""Reads nanobot's config.json the way nanobot does: sessions folder, workspace, model, provider, timezone."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from worker.errors import NanobotConfigError

DEFAULT_SUMMARY_MODEL = "deepseek/deepseek-chat"
DEFAULT_WORKSPACE = "~/.nanobot/workspace"
# nanobot provider names whose models litellm knows under another prefix; the
# OpenAI-compatible ones all speak litellm's `openai/` protocol with a base URL.
_OPENAI_COMPATIBLE = {"custom", "vllm", "ollama_openai", "lm_studio", "openai_compatible", "azure_openai"}


@dataclass(frozen=True)
class ModelChoice:
    """A litellm model string with the credentials it needs."""

    model: str
    api_key: str | None = None
    api_base: str | None = None
    source: str = "default"


@dataclass(frozen=True)
class NanobotConfig:
    path: Path
    data: dict[str, Any]

    @classmethod
    def load(cls, path: Path) -> NanobotConfig:
        path = path.expanduser()
        if not path.exists():
            # nanobot runs on defaults without a file; so do we.
            return cls(path=path, data={})
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise NanobotConfigError(f"cannot read nanobot config {path}: {exc}") from None
        if not isinstance(data, dict):
            raise NanobotConfigError(f"nanobot config {path} is not a JSON object")
        return cls(path=path, data=data)

    def _defaults(self) -> dict[str, Any]:
        agents = self.data.get("agents")
        defaults = agents.get("defaults") if isinstance(agents, dict) else None
        return defaults if isinstance(defaults, dict) else {}

    def _get(self, camel: str, snake: str, default: Any = None) -> Any:
        defaults = self._defaults()
        return defaults.get(camel, defaults.get(snake, default))

    @property
    def sessions_root(self) -> Path:
        return self.path.parent / "sessions"

    @property
    def workspace(self) -> Path:
        return Path(str(self._get("workspace", "workspace", DEFAULT_WORKSPACE))).expanduser()

    @property
    def sessions_dir(self) -> Path:
        """`<config dir>/sessions/<workspace-id>`; the id lives in the workspace (nanobot writes it)."""
        marker = self.workspace.resolve(strict=False) / ".nanobot" / "workspace-id"
        try:
            workspace_id = marker.read_text(encoding="utf-8").strip()
        except OSError:
            raise NanobotConfigError(
                f"no sessions yet: {marker} is missing (has nanobot run with this workspace?)"
            ) from None
        if len(workspace_id) != 32 or any(c not in "0123456789abcdef" for c in workspace_id):
            raise NanobotConfigError(f"{marker} does not hold a nanobot workspace id")
        return self.sessions_root / workspace_id

    @property
    def timezone_is_host(self) -> bool:
        """nanobot's `timezoneMode` auto (the default without a timezone): the host's zone, not a named one."""
        value = self._get("timezone", "timezone")
        return (self._get("timezoneMode", "timezone_mode") or ("manual" if value else "auto")) == "auto"

    @property
    def timezone(self) -> str:
        """As nanobot resolves it: the configured zone, or the host's in auto mode."""
        if self.timezone_is_host:
            return host_timezone()
        value = self._get("timezone", "timezone")
        return value if isinstance(value, str) and value else "UTC"

    @property
    def context_window(self) -> int | None:
        value = self._get("contextWindowTokens", "context_window_tokens")
        return value if isinstance(value, int) and value > 0 else None

    @property
    def summary_model(self) -> str | None:
        # nanobot ignores unknown keys under agents.defaults, so ours can live there (seed 001).
        value = self._get("summaryModel", "summary_model")
        return value if isinstance(value, str) and value else None

    def _providers(self) -> dict[str, Any]:
        providers = self.data.get("providers")
        return providers if isinstance(providers, dict) else {}

    def with_credentials(self, model: str, source: str) -> ModelChoice:
        prefix = model.split("/", 1)[0] if "/" in model else ""
        provider = self._providers().get(prefix) or {}
        provider = provider if isinstance(provider, dict) else {}
        return ModelChoice(
            model=model,
            api_key=provider.get("apiKey", provider.get("api_key")) or None,
            api_base=provider.get("apiBase", provider.get("api_base")) or None,
            source=source,
        )

    def main_model(self) -> ModelChoice | None:
        """nanobot's own model, with its provider's key and base URL, as litellm wants them."""
        model = self._get("model", "model")
        if not isinstance(model, str) or not model:
            return None
        provider_name = str(self._get("provider", "provider", "auto") or "auto")
        providers = self._providers()
        prefix = model.split("/", 1)[0] if "/" in model else ""
        if provider_name == "auto":
            provider_name = prefix if prefix in providers else ""
        provider = providers.get(provider_name) or providers.get(_camel(provider_name)) or {}
        provider = provider if isinstance(provider, dict) else {}
        api_key = provider.get("apiKey", provider.get("api_key")) or None
        api_base = provider.get("apiBase", provider.get("api_base")) or None
        if provider_name in _OPENAI_COMPATIBLE or (provider_name and provider_name not in _known_prefixes()):
            # nanobot sends the name as is to an OpenAI-compatible endpoint.
            if api_base or provider_name in _OPENAI_COMPATIBLE:
                model = f"openai/{model}"
        elif provider_name and prefix != provider_name:
            model = f"{provider_name}/{model}"
        return ModelChoice(model=model, api_key=api_key, api_base=api_base, source="nanobot config")


def host_timezone() -> str:
    """The host's IANA zone name (what nanobot's auto mode uses), UTC when it cannot be told."""
    try:
        from tzlocal import get_localzone_name

        name = get_localzone_name()
        ZoneInfo(name)
    except Exception:  # tzlocal raises several kinds for odd /etc/localtime setups
        return "UTC"
    return "UTC" if name in ("Etc/UTC", "Etc/GMT", "GMT", "UCT", "Universal", "Zulu") else name


def utc_by_default(config: NanobotConfig, tz_name: str) -> bool:
    """Notes dated in UTC only because nothing named a zone: nanobot's config names none, TZ is not set,
    and the host's zone is UTC or cannot be told. A container's usual state (docker-compose without the
    host's zone passed in), where a Shanghai user's 23:30 message would land in the next day's notes."""
    return config.timezone_is_host and tz_name == "UTC" and not os.environ.get("TZ")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _known_prefixes() -> set[str]:
    return {
        "anthropic", "openai", "deepseek", "gemini", "openrouter", "groq", "mistral", "dashscope",
        "moonshot", "zhipu", "minimax", "xai", "bedrock", "azure", "ollama", "together_ai", "fireworks_ai",
        "volcengine", "siliconflow", "cohere", "perplexity",
    }


def resolve_model(env_model: str | None, config: NanobotConfig) -> ModelChoice:
    """Seed 001's order: the environment, our own key in nanobot's config, nanobot's main model, the default.

    A model named by us borrows the key and base URL nanobot has for that provider, if any.
    """
    if env_model:
        return config.with_credentials(env_model, "NANOBOT_SUMMARY_MODEL")
    own = config.summary_model
    if own:
        return config.with_credentials(own, "agents.defaults.summaryModel")
    return config.main_model() or config.with_credentials(DEFAULT_SUMMARY_MODEL, "default")
