"""Configuration: settings validation in one line, nanobot's config read as nanobot reads it, model order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker.errors import NanobotConfigError
from worker.keep_rule import KeepRule
from worker.nanobot.config import DEFAULT_SUMMARY_MODEL, NanobotConfig, resolve_model
from worker.service.build import build_deps
from worker.settings import Settings, SettingsError, load_settings


def config(tmp_path: Path, data: dict) -> NanobotConfig:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return NanobotConfig.load(path)


def test_keep_rule_forms() -> None:
    assert KeepRule.parse("messages:10") == KeepRule("messages", 10)
    assert KeepRule.parse("tokens:3000") == KeepRule("tokens", 3000)
    assert KeepRule.parse("fraction:0.3") == KeepRule("fraction", 0.3)
    for bad in ("10", "messages:", "fraction:1.5", "tokens:-1", "messages:2.5", "lines:3"):
        with pytest.raises(ValueError):
            KeepRule.parse(bad)


@pytest.mark.parametrize(
    "name,value,accepts",
    [
        ("NANOBOT_SUMMARY_THRESHOLD", "1.5", "prompt share"),
        ("NANOBOT_SUMMARY_INTERVAL", "-1", "user messages"),
        ("NANOBOT_AUTO_SUMMARY", "maybe", "summarize on its own"),
        ("NANOBOT_SUMMARY_DAILY_AT", "25:00", "HH:MM"),
        ("NANOBOT_SUMMARY_DAILY_AT", "12:00:60", "HH:MM"),
        ("NANOBOT_SUMMARY_DAILY_AT", "12:00:00:00", "HH:MM"),
        ("NANOBOT_SUMMARY_TIMEZONE", "Mars/Olympus", "IANA"),
        ("REDIS_URL", "localhost:6379", "redis://"),
    ],
)
def test_a_bad_value_names_the_variable_and_what_it_accepts(monkeypatch, name, value, accepts) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{name}={value!r}") and accepts in message


def test_a_bad_worker_only_value_leaves_the_hooks_settings_alone(monkeypatch) -> None:
    from nanobot_hooks.settings import load_settings as load_hook_settings

    monkeypatch.setenv("NANOBOT_SUMMARY_DAILY_AT", "25:00")
    monkeypatch.setenv("NANOBOT_SUMMARY_KEEP", "all of it")
    monkeypatch.setenv("NANOBOT_SUMMARY_INTERVAL", "4")
    assert load_hook_settings().summary_interval == 4
    with pytest.raises(SettingsError, match="NANOBOT_SUMMARY_DAILY_AT"):
        load_settings()


def test_a_bad_redis_url_is_named_without_its_password(monkeypatch) -> None:
    monkeypatch.setenv("REDIS_URL", "http://admin:s3cret-pw@10.0.0.5:6379/0")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "s3cret-pw" not in str(caught.value) and "admin:***@10.0.0.5" in str(caught.value)


def test_defaults_are_the_users(monkeypatch) -> None:
    for name in [n for n in __import__("os").environ if n.startswith("NANOBOT_") or n == "REDIS_URL"]:
        monkeypatch.delenv(name)
    settings = Settings()
    assert settings.auto_summary and settings.summary_interval == 10 and settings.summary_threshold == 0.6
    assert settings.summary_keep == KeepRule("fraction", 0.03)
    assert settings.summary_min_saving == 0.05 and settings.summary_pickup == "now"
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.config_path == Path("~/.nanobot/config.json").expanduser()


def test_model_order_environment_then_ours_then_nanobots_then_default(tmp_path: Path) -> None:
    data = {
        "agents": {
            "defaults": {"model": "claude-opus-4-5", "provider": "anthropic", "summaryModel": "deepseek/deepseek-chat"}
        },
        "providers": {"anthropic": {"apiKey": "sk-ant-x"}, "deepseek": {"apiKey": "sk-ds", "apiBase": "https://ds"}},
    }
    cfg = config(tmp_path, data)
    env = resolve_model("openai/gpt-4o-mini", cfg)
    assert (env.model, env.source, env.api_key) == ("openai/gpt-4o-mini", "NANOBOT_SUMMARY_MODEL", None)
    ours = resolve_model(None, cfg)
    assert (ours.model, ours.api_key, ours.api_base) == ("deepseek/deepseek-chat", "sk-ds", "https://ds")
    del data["agents"]["defaults"]["summaryModel"]
    main = resolve_model(None, config(tmp_path, data))
    assert (main.model, main.api_key, main.source) == ("anthropic/claude-opus-4-5", "sk-ant-x", "nanobot config")
    assert resolve_model(None, config(tmp_path, {})).model == DEFAULT_SUMMARY_MODEL


def test_a_custom_openai_compatible_provider_uses_its_base_url(tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        {
            "agents": {"defaults": {"model": "qwen-max", "provider": "custom"}},
            "providers": {"custom": {"apiBase": "http://127.0.0.1:9/v1", "apiKey": "k"}},
        },
    )
    choice = resolve_model(None, cfg)
    assert (choice.model, choice.api_base, choice.api_key) == ("openai/qwen-max", "http://127.0.0.1:9/v1", "k")


def test_missing_or_broken_nanobot_config_is_explained(tmp_path: Path) -> None:
    assert NanobotConfig.load(tmp_path / "absent.json").data == {}
    broken = tmp_path / "config.json"
    broken.write_text("{not json")
    with pytest.raises(NanobotConfigError, match="cannot read nanobot config"):
        NanobotConfig.load(broken)
    cfg = config(tmp_path, {"agents": {"defaults": {"workspace": str(tmp_path / "ws")}}})
    with pytest.raises(NanobotConfigError, match="has nanobot run with this workspace"):
        _ = cfg.sessions_dir


def test_an_unreadable_prompt_file_stops_start_up(nanobot_home, tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="NANOBOT_SUMMARY_PROMPT_FILE"):
        build_deps(Settings(config=nanobot_home.config_path, summary_prompt_file=tmp_path / "missing.txt"))
    custom = tmp_path / "prompt.txt"
    custom.write_text("Summarize like a pirate.")
    deps = build_deps(Settings(config=nanobot_home.config_path, summary_prompt_file=custom))
    assert deps.instructions == "Summarize like a pirate."


def test_timezone_is_resolved_as_nanobot_does(tmp_path: Path, monkeypatch) -> None:
    import time

    import tzlocal

    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    tzlocal.reload_localzone()  # tzlocal keeps the first zone it read: another test in this process may have asked
    try:
        assert config(tmp_path, {}).timezone == "Asia/Shanghai", "no timezone: nanobot's auto mode, the host's"
        assert config(tmp_path, {"agents": {"defaults": {"timezone": "Europe/Berlin"}}}).timezone == "Europe/Berlin"
        auto = {"agents": {"defaults": {"timezone": "Europe/Berlin", "timezoneMode": "auto"}}}
        assert config(tmp_path, auto).timezone == "Asia/Shanghai", "auto mode ignores a set timezone"
        # a naive nanobot timestamp is the host's local time: 07:30 in Shanghai is the evening before in Berlin
        from zoneinfo import ZoneInfo

        from worker.text.clock import local_time

        moment = local_time("2026-11-21T07:30:00", ZoneInfo("Europe/Berlin"))
        assert moment is not None and moment.strftime("%Y-%m-%d %H:%M") == "2026-11-21 00:30"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
        tzlocal.reload_localzone()


def test_a_model_litellm_cannot_route_stops_start_up_in_one_line(nanobot_home) -> None:
    nanobot_home.write_config("http://127.0.0.1:9/v1", provider="auto", model="qwen-max")
    with pytest.raises(SettingsError, match="summary model 'qwen-max' .* cannot be used") as caught:
        build_deps(Settings(config=nanobot_home.config_path))
    assert "\n" not in str(caught.value)
    with pytest.raises(SettingsError, match="NANOBOT_SUMMARY_FALLBACK_MODEL"):
        build_deps(
            Settings(
                config=nanobot_home.config_path,
                summary_model="deepseek/deepseek-chat",
                summary_fallback_model="nonsense-model",
            )
        )


@pytest.mark.parametrize(
    "key, direct",
    [
        ("cli:direct", True),
        ("telegram:42", True),
        ("telegram:-1001234", False),
        ("telegram:-100:topic:7", False),
        ("telegram.work:42", True),
        ("slack:D0123ABC", True),
        ("slack:C0123ABC", False),
        ("whatsapp:8613800000000@s.whatsapp.net", True),
        ("whatsapp:1203630@g.us", False),
        ("feishu:ou_abc", True),
        ("feishu:oc_abc", False),
        ("dingtalk:staff1", True),
        ("dingtalk:group:c1", False),
        ("napcat:private:1", True),
        ("napcat:group:1", False),
        ("discord:123", False),
        ("matrix:!room:x", False),
        ("email:someone@example.com", False),
        ("websocket:6f1c", False),
        ("api:default", False),
        ("qq:abc", False),
    ],
)
def test_direct_chats_are_told_by_their_key(key, direct) -> None:
    from nanobot_hooks.contract.session_format import is_direct_chat

    assert is_direct_chat(key) is direct
    # nanobot's web chat behind a token is the user's own; nothing else changes with it.
    assert is_direct_chat(key, private_web=True) is (direct or key.startswith("websocket:"))


def test_trusted_sessions_follow_the_setting(monkeypatch) -> None:
    from nanobot_hooks.settings import load_settings as load_hook_settings

    assert load_hook_settings().is_trusted("telegram:42") and not load_hook_settings().is_trusted("email:a@b")
    monkeypatch.setenv("NANOBOT_MEMORY_SESSIONS", "discord:99, email:me@*")
    settings = load_hook_settings()
    assert settings.is_trusted("discord:99") and settings.is_trusted("email:me@example.com")
    assert not settings.is_trusted("telegram:42")
    monkeypatch.setenv("NANOBOT_MEMORY_SESSIONS", "none")
    assert not load_hook_settings().is_trusted("cli:direct")
    monkeypatch.setenv("NANOBOT_MEMORY_SESSIONS", "*")
    assert load_hook_settings().is_trusted("websocket:x")


def test_notes_dated_in_utc_by_default_are_worth_a_word_only_in_a_container(tmp_path: Path, monkeypatch) -> None:
    """onboard writes "timezone": "UTC" with "timezoneMode": "auto": nanobot then dates messages in its host's
    zone, and so does a worker on the same host, which has nothing to warn about. In a container whose zone is
    UTC for want of TZ, nanobot elsewhere may well date them in another."""
    from worker.nanobot.config import NanobotConfig, utc_by_default

    monkeypatch.delenv("TZ", raising=False)
    onboard = NanobotConfig(
        tmp_path / "config.json", {"agents": {"defaults": {"timezone": "UTC", "timezoneMode": "auto"}}}
    )
    named = NanobotConfig(
        tmp_path / "config.json", {"agents": {"defaults": {"timezone": "Asia/Shanghai", "timezoneMode": "manual"}}}
    )
    assert not utc_by_default(onboard, "UTC", contained=False)
    assert utc_by_default(onboard, "UTC", contained=True)
    assert not utc_by_default(named, "UTC", contained=True) and not utc_by_default(onboard, "Asia/Shanghai", True)
    monkeypatch.setenv("TZ", "UTC")
    assert not utc_by_default(onboard, "UTC", contained=True), "a zone passed in on purpose"
