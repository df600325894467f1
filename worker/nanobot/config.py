"""Reads nanobot's config.json the way nanobot does: sessions folder, workspace, model, provider, timezone."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.errors import NanobotConfigError
from worker.text.clock import zone

DEFAULT_SUMMARY_MODEL = "deepseek/deepseek-chat"
DEFAULT_WORKSPACE = "~/.nanobot/workspace"

# nanobot's provider names (its config schema and provider registry, 0.3.x) and how litellm reaches the
# same endpoint: "" = litellm knows the provider under this very name and speaks its API; "openai" = an
# OpenAI-compatible endpoint (litellm's openai/ with nanobot's base URL); "anthropic" = an
# Anthropic-compatible one; "azure" = litellm's azure/ (the model is the deployment). The URL is nanobot's
# default base, used when the config names none. Any other name under `providers` is, for nanobot, an
# OpenAI-compatible endpoint of the user's.
NANOBOT_PROVIDERS: dict[str, tuple[str, str | None]] = {
    "openai": ("", None),
    "anthropic": ("", None),
    "deepseek": ("", None),
    "gemini": ("", None),
    "openrouter": ("", None),
    "groq": ("", None),
    "mistral": ("", None),
    "dashscope": ("", None),
    "moonshot": ("", None),
    "bedrock": ("", None),
    "azure_openai": ("azure", None),
    "custom": ("openai", None),
    "vllm": ("openai", None),
    "ollama": ("openai", "http://localhost:11434/v1"),
    "lm_studio": ("openai", "http://localhost:1234/v1"),
    "atomic_chat": ("openai", "http://localhost:1337/v1"),
    "ovms": ("openai", "http://localhost:8000/v3"),
    "orcarouter": ("openai", "https://api.orcarouter.ai/v1"),
    "edenai": ("openai", "https://api.edenai.run/v3"),
    "opencode": ("openai", "https://opencode.ai/zen/v1"),
    "opencode_zen": ("openai", "https://opencode.ai/zen/v1"),
    "opencode_go": ("openai", "https://opencode.ai/zen/go/v1"),
    "huggingface": ("openai", "https://router.huggingface.co/v1"),
    "skywork": ("openai", "https://api.apifree.ai/agent/v1"),
    "aihubmix": ("openai", "https://aihubmix.com/v1"),
    "siliconflow": ("openai", "https://api.siliconflow.cn/v1"),
    "novita": ("openai", "https://api.novita.ai/openai"),
    "volcengine": ("openai", "https://ark.cn-beijing.volces.com/api/v3"),
    "volcengine_coding_plan": ("openai", "https://ark.cn-beijing.volces.com/api/coding/v3"),
    "byteplus": ("openai", "https://ark.ap-southeast.bytepluses.com/api/v3"),
    "byteplus_coding_plan": ("openai", "https://ark.ap-southeast.bytepluses.com/api/coding/v3"),
    "zhipu": ("openai", "https://open.bigmodel.cn/api/paas/v4"),
    "modelscope": ("openai", "https://api-inference.modelscope.cn/v1"),
    "minimax": ("openai", "https://api.minimax.io/v1"),
    "stepfun": ("openai", "https://api.stepfun.com/v1"),
    "xiaomi_mimo": ("openai", "https://api.xiaomimimo.com/v1"),
    "longcat": ("openai", "https://api.longcat.chat/openai/v1"),
    "ant_ling": ("openai", "https://api.ant-ling.com/v1"),
    "nvidia": ("openai", "https://integrate.api.nvidia.com/v1"),
    "qianfan": ("openai", "https://qianfan.baidubce.com/v2"),
    "kimi_coding": ("anthropic", "https://api.kimi.com/coding/v1"),
    "minimax_anthropic": ("anthropic", "https://api.minimax.io/anthropic"),
}
# Providers nanobot reaches by a sign-in (OAuth) or that serve no chat: the worker has no key for them.
NO_KEY_PROVIDERS = {
    "openai_codex": "signs in with OAuth",
    "xai_grok": "signs in with OAuth",
    "github_copilot": "signs in with OAuth",
    "assemblyai": "only transcribes speech",
}


@dataclass(frozen=True)
class ModelChoice:
    """A litellm model string with the credentials it needs."""

    model: str
    api_key: str | None = None
    api_base: str | None = None
    source: str = "default"
    provider: str = ""  # nanobot's provider entry the key and base URL came from ("" = none)


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
    def web_chat_private(self) -> bool:
        """Whether nanobot's web chat asks for a token, which makes its chats the user's own.

        nanobot's web chat (its websocket channel) asks for a token, as nanobot does unless told otherwise
        (`websocketRequiresToken`, true by default; onboard's quick start sets a password): its chats are the user's
        own. An open channel is anyone's."""
        channels = self.data.get("channels")
        web = channels.get("websocket") if isinstance(channels, dict) else None
        if not isinstance(web, dict):
            return True
        return web.get("websocketRequiresToken", web.get("websocket_requires_token", True)) is not False

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
    def idle_compact_seconds(self) -> float:
        """nanobot's own idle compaction.

        After this many seconds quiet (plus up to its scan interval) it summarizes a session to the end; 0 = off.
        nanobot's default is on, at 15 minutes."""
        minutes = self._get(
            "idleCompactAfterMinutes",
            "idle_compact_after_minutes",
            self._get("sessionTtlMinutes", "session_ttl_minutes", 15),
        )
        return float(minutes) * 60 if isinstance(minutes, (int, float)) and minutes > 0 else 0.0

    @property
    def idle_compact_scan_seconds(self) -> float:
        """How often nanobot looks for idle sessions (at most this long after its threshold)."""
        value = self._get("idleCompactCheckIntervalSeconds", "idle_compact_check_interval_seconds", 60)
        return float(value) if isinstance(value, (int, float)) and value >= 0 else 60.0

    @property
    def summary_model(self) -> str | None:
        # nanobot ignores unknown keys under agents.defaults, so ours can live there.
        value = self._get("summaryModel", "summary_model")
        return value if isinstance(value, str) and value else None

    def _providers(self) -> dict[str, Any]:
        providers = self.data.get("providers")
        return providers if isinstance(providers, dict) else {}

    def provider_entry(self, name: str) -> dict[str, Any]:
        providers = self._providers()
        entry = providers.get(name) or providers.get(_camel(name)) or {}
        return entry if isinstance(entry, dict) else {}

    def with_credentials(self, model: str, source: str) -> ModelChoice:
        """`model` as litellm routes it, with the key and base URL nanobot has for its provider.

        A nanobot provider name litellm does not know (custom/..., the gateways) becomes the endpoint nanobot calls; one
        the worker cannot use raises NanobotConfigError with the fix."""
        prefix, _, rest = model.partition("/") if "/" in model else ("", "", model)
        entry = self.provider_entry(prefix) if prefix else {}
        api_key = entry.get("apiKey", entry.get("api_key")) or None
        api_base = entry.get("apiBase", entry.get("api_base")) or None
        if prefix in NO_KEY_PROVIDERS:
            raise NanobotConfigError(
                f"summary model {model!r} (from {source}): nanobot's provider {prefix!r} {NO_KEY_PROVIDERS[prefix]}, "
                "which the worker cannot: name a model with an API key, "
                "e.g. NANOBOT_SUMMARY_MODEL=deepseek/deepseek-chat"
            )
        route, default_base = NANOBOT_PROVIDERS.get(
            prefix, ("openai" if entry and prefix not in _litellm_names() else "", None)
        )
        if not route:
            return ModelChoice(
                model=model, api_key=api_key, api_base=api_base, source=source, provider=prefix if entry else ""
            )
        base = api_base or default_base
        if base is None:
            raise NanobotConfigError(
                f"summary model {model!r} (from {source}): nanobot's provider {prefix!r} needs its base URL: set "
                f"providers.{_camel(prefix)}.apiBase in nanobot's config (e.g. http://127.0.0.1:8000/v1)"
            )
        return ModelChoice(model=f"{route}/{rest}", api_key=api_key, api_base=base, source=source, provider=prefix)

    def main_model(self) -> ModelChoice | None:
        """nanobot's own model, with its provider's key and base URL, as litellm wants them."""
        model = self._get("model", "model")
        if not isinstance(model, str) or not model:
            return None
        provider_name = str(self._get("provider", "provider", "auto") or "auto")
        prefix = model.split("/", 1)[0] if "/" in model else ""
        if provider_name == "auto":
            # nanobot's auto mode: the model's own prefix, when nanobot has that provider configured
            provider_name = prefix if self.provider_entry(prefix) else ""
        if provider_name and prefix != provider_name:
            model = f"{provider_name}/{model}"  # nanobot sends the name as is to that provider's endpoint
        return self.with_credentials(model, "nanobot config")


def _litellm_names() -> set[str]:
    """Provider prefixes litellm routes natively (for a user's own provider entry that shares one)."""
    return {name for name, (route, _) in NANOBOT_PROVIDERS.items() if not route} | {
        "azure",
        "ollama",
        "together_ai",
        "fireworks_ai",
        "xai",
        "cohere",
        "perplexity",
        "cerebras",
        "sambanova",
    }


def host_timezone() -> str:
    """The host's IANA zone name (what nanobot's auto mode uses), UTC when it cannot be told."""
    try:
        from tzlocal import get_localzone_name

        name = get_localzone_name()
        zone(name)
    except (ImportError, LookupError, ValueError, OSError):  # tzlocal's kinds for odd /etc/localtime setups
        return "UTC"
    return "UTC" if name in ("Etc/UTC", "Etc/GMT", "GMT", "UCT", "Universal", "Zulu") else name


def in_container() -> bool:
    """Docker and Podman leave a marker at the root; a container's zone is UTC unless TZ is passed in."""
    return Path("/.dockerenv").exists() or Path("/run/.containerenv").exists()


def utc_by_default(config: NanobotConfig, tz_name: str, contained: bool | None = None) -> bool:
    """Notes dated in UTC only because nothing named a zone, in a container.

    nanobot's config leaves the zone to the host (timezoneMode auto, as onboard writes it), TZ is not set, and this
    container's zone is UTC, where a Shanghai user's 23:30 message would land in the next day's notes. On an ordinary
    host nanobot and the worker share the host's zone, so there is nothing to say."""
    contained = in_container() if contained is None else contained
    return contained and config.timezone_is_host and tz_name == "UTC" and not os.environ.get("TZ")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def resolve_model(env_model: str | None, config: NanobotConfig) -> ModelChoice:
    """The model, first found: the environment, our own key in nanobot's config, nanobot's main model, the default.

    A model named by us borrows the key and base URL nanobot has for that provider, if any.
    """
    if env_model:
        return config.with_credentials(env_model, "NANOBOT_SUMMARY_MODEL")
    own = config.summary_model
    if own:
        return config.with_credentials(own, "agents.defaults.summaryModel")
    return config.main_model() or config.with_credentials(DEFAULT_SUMMARY_MODEL, "default")
