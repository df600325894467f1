"""Secrets never reach a memory file: the redaction rules, and planted secrets through the real writers."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.memory.entries import DailyNotes, Fact, TechnicalIssue
from worker.memory.writer import MemoryFiles
from worker.text.redact import MARK, one_line, redact

API_KEY = "sk-proj-Q9x8W7v6U5t4S3r2P1o0NmLkJiHg"
PASSWORD = "Tr0ub4dor&3x"
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACBQmZ3ZXJ0eXVpb3Bhc2RmZ2hqa2x6eGN2Ym5tMTIzNDU2Nzg5MA==\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
KEY_BODY = "QyNTUxOQAAACBQmZ3ZXJ0eXVpb3Bhc2RmZ2hqa2x6eGN2Ym5tMTIzNDU2Nzg5MA"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f'providers: {{"deepseek": {{"apiKey": "{API_KEY}"}}}}', API_KEY),
        (f"export OPENAI_API_KEY={API_KEY}", API_KEY),
        ("Set OPENAI_API_KEY to abcdefABCDEF1234567890", "abcdefABCDEF1234567890"),
        ("mysql -u root -pS3cretPass shop", "S3cretPass"),
        ("redis-cli -h cache -a MyRedisPass123 ping", "MyRedisPass123"),
        ("pg_dump --password hunter2x", "hunter2x"),
        ("set the password to hunter2", "hunter2"),
        ("AWS access key AKIAIOSFODNN7EXAMPLE in ~/.aws", "AKIAIOSFODNN7EXAMPLE"),
        ("push with ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
        ("slack bot xoxb-123456789012-abcdefghijklmnop", "xoxb-123456789012-abcdefghijklmnop"),
        ("maps key AIzaSyA1234567890abcdefghijklmnopqrstu", "AIzaSyA1234567890abcdefghijklmnopqrstu"),
        ("telegram bot 123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0", "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0"),
        ("curl -H 'Authorization: Bearer abc123.def456.ghi789'", "abc123.def456.ghi789"),
        (
            "session jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
            "dozjgNryP4J3jVmNHl0w5N",
        ),
        (f"password={PASSWORD} then restart", PASSWORD),
        ("db password: letmein", "letmein"),
        ("my password is hunter2.", "hunter2"),
        ("webhook token 0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef"),
        ("client_secret = 'c2VjcmV0LXZhbHVlLTEyMzQ1Njc4OTA='", "c2VjcmV0LXZhbHVlLTEyMzQ1Njc4OTA="),
        ("数据库密码是Abc12345，记得换", "Abc12345"),
        ("密码：hunter2", "hunter2"),
        ("服务的密钥 f3a9c2e4b5d6a7b8c9d0e1f2a3b4c5d6", "f3a9c2e4b5d6a7b8c9d0e1f2a3b4c5d6"),
        ("パスワードは hunter2です", "hunter2"),
        ("トークン: 9f8e7d6c5b4a39281706f5e4d3c2b1a0", "9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
        ("비밀번호는 hunter2 입니다", "hunter2"),
        ("postgres://admin:s3cr3t-pw@db.example.com:5432/app", "s3cr3t-pw"),
        ("redis://:pw-9x7@localhost:6379/0", "pw-9x7"),
        (PRIVATE_KEY + "\nused for the deploy box", KEY_BODY),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAvX9zY2xhc3MgUHJpdmF0ZUtleQ==",  # unterminated
            "MIIEowIBAAKCAQEAvX9zY2xhc3MgUHJpdmF0ZUtleQ",
        ),
    ],
)
def test_secret_values_are_removed(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out
    assert MARK in out or "[REDACTED PRIVATE KEY]" in out


ESCAPED = json.dumps({"path": "config.json", "content": json.dumps({"apiKey": "Zk39fLw02QmXr8TyVb61"}, indent=2)})


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("curl -u admin:Pa55-w0rd_x https://api.example.com", "Pa55-w0rd_x"),
        ("curl -s --user 'deploy:hunter2x' -X POST https://ci.example.com", "hunter2x"),
        ("curl --user=deploy:s3cr3t-pw https://ci.example.com", "s3cr3t-pw"),
        ("docker login -u me -p Tr0ub4dor registry.example.com", "Tr0ub4dor"),
        ("docker login --password hunter22x ghcr.io", "hunter22x"),
        ("docker login --password=hunter22x ghcr.io", "hunter22x"),
        ('docker login -p "two words9" ghcr.io', "two words9"),
        ("sshpass -p 'Hunter2&x' ssh root@10.0.0.7", "Hunter2&x"),
        ("sshpass -pHunter2x ssh root@10.0.0.7", "Hunter2x"),
        ("curl -H 'authorization: basic dXNlcjpwYXNzd29yZA=='", "dXNlcjpwYXNzd29yZA=="),
        ("AUTHORIZATION: BASIC dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
        ("authorization: bearer abcdefgh12345678", "abcdefgh12345678"),
        (ESCAPED, "Zk39fLw02QmXr8TyVb61"),  # the raw arguments of a write_file call, quoted inside a string
        ('"{\\"password\\": \\"p w1\\"}"', "p w1"),
    ],
)
def test_command_line_and_escaped_secrets_are_removed(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out and MARK in out
    assert redact(out) == out


@pytest.mark.parametrize(
    "text",
    [
        "docker login --password-stdin < token.txt",
        "curl -u admin https://host.example.com:8080/health",
        "open the login page and check the Authorization header",
        "the basic idea is to bear with it",
    ],
)
def test_command_lines_without_a_secret_value_survive(text: str) -> None:
    assert redact(text) == text


def test_tool_call_arguments_lose_secret_values_by_name_and_by_shape() -> None:
    from worker.text.redact import redact_arguments

    config = json.dumps(
        {"providers": {"x": {"apiKey": "short1"}}, "db": {"password": "pw 1"}, "theme": "dark"}, indent=2
    )
    arguments = json.dumps(
        {
            "path": "config.json",
            "content": config,
            "token": "abc",
            "headers": {"Authorization": "Basic zzz"},
            "env": {"DEEPSEEK_API_KEY": "${KEY}"},
            "command": "curl -u bob:Pa55word9 https://x",
            "max_tokens": "1000",
        }
    )
    out = redact_arguments(arguments)
    for secret in ("short1", "pw 1", '"abc"', "zzz", "Pa55word9"):
        assert secret not in out, secret
    decoded = json.loads(out)
    assert decoded["max_tokens"] == "1000" and decoded["env"] == {"DEEPSEEK_API_KEY": "${KEY}"}
    assert json.loads(decoded["content"])["theme"] == "dark" and decoded["content"].startswith("{\n  ")
    assert redact_arguments({"password": "hunter2"}) == f'{{"password": "{MARK}"}}'
    assert redact_arguments("not json: password=hunter2") == f"not json: password={MARK}"


@pytest.mark.parametrize(
    "text",
    [
        "the key to success is patience",
        "the DeepSeek API key is set in providers.deepseek.apiKey",
        "DeepSeek API 密钥配置在 providers.deepseek.apiKey",
        "APIキーは providers.openai.apiKey に設定",
        "the password is stored in the vault",
        "DB password is in $DB_PASSWORD",
        "commit 3f2a9c1d0e8b7a6f5e4d3c2b1a0f9e8d7c6b5a49 fixed the login bug",
        "session 550e8400-e29b-41d4-a716-446655440000 on https://example.com/a@b",
        "the key to success is patience; token budget is 4000",
        "run ./deploy.sh --env prod on port 8080",
    ],
)
def test_where_a_secret_lives_and_plain_identifiers_survive(text: str) -> None:
    assert redact(text) == text


def test_connection_string_keeps_scheme_user_and_host() -> None:
    out = redact("DATABASE_URL=postgresql://app_user:s3cr3t@db.internal:5432/prod")
    assert out == f"DATABASE_URL=postgresql://app_user:{MARK}@db.internal:5432/prod"


def test_quotes_and_sentence_punctuation_stay_around_the_marker() -> None:
    assert redact('"password": "p@ss w0rd"') == f'"password": "{MARK}"'
    assert redact("password=abc123, then run it") == f"password={MARK}, then run it"


@given(st.text())
def test_redaction_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


_TOKEN = st.text(string.ascii_letters + string.digits, min_size=24, max_size=48)
_WORDS = st.text(string.ascii_letters + " ,.\n中文", max_size=40)


@given(_WORDS, _TOKEN, _WORDS)
def test_a_planted_api_key_never_survives(before: str, token: str, after: str) -> None:
    assert token not in redact(f"{before} sk-{token} {after}")


@given(_WORDS, st.text(string.ascii_letters + string.digits + "#%&+-/=@^_|~", min_size=1, max_size=30), _WORDS)
def test_a_planted_password_assignment_never_survives(before: str, value: str, after: str) -> None:
    out = redact(f"{before} password={value} {after}")
    assert f"password={value}" not in out
    assert f"password={MARK}" in out


def test_one_line_is_a_single_safe_bullet() -> None:
    out = one_line(f"line one\n  line two <!-- comment --> {API_KEY}\ud800")
    assert out == f"line one line two comment {MARK}"


async def test_planted_secrets_appear_in_no_memory_file(tmp_path: Path) -> None:
    memory = MemoryFiles(tmp_path, "UTC", max_facts=50)
    result = await memory.write(
        "telegram:42",
        [
            DailyNotes(
                date="2026-11-20",
                first_timestamp="2026-11-20T10:00:00",
                last_timestamp="2026-11-20T10:30:00",
                topics=[f"set up the DeepSeek key {API_KEY}"],
                decisions=[f"use password={PASSWORD} for the staging db"],
                technical_issues=[TechnicalIssue(problem="ssh login failed", solution=f"installed key\n{PRIVATE_KEY}")],
            )
        ],
        [
            Fact(
                text=f"The DeepSeek API key is set in providers.deepseek.apiKey (value {API_KEY})",
                importance=4,
                category="configuration",
            ),
            Fact(text=f"Staging database password: {PASSWORD}", importance=4, category="configuration"),
            Fact(text=f"Deploy key for the build box: {PRIVATE_KEY}", importance=4, category="configuration"),
        ],
        "en",
    )
    assert result.notes_sections == 1 and result.facts_added == 3
    files = [p for p in (tmp_path / "memory").rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"2026-11-20.md", "MEMORY.md"}
    for path in files:
        data = path.read_bytes()
        for secret in (API_KEY, PASSWORD, KEY_BODY, "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"):
            assert secret.encode() not in data, f"{secret[:12]}... leaked into {path.name}"
    memory_text = memory.memory_path.read_text(encoding="utf-8")
    assert "providers.deepseek.apiKey" in memory_text, "where the key is configured is kept"


# One text per alternative of the trigger, in its order: a new alternative fails the count until it has one.
TRIGGER_EXAMPLES = [
    "PRIVATE KEY",
    "://",
    "sk-",
    "rk_",
    "AKIA",
    "ASIA",
    "ghs_",
    "github_pat_",
    "glpat-",
    "xox",
    "AIza",
    "hf_",
    "npm_",
    ":AA",
    "eyJ",
    "bearer",
    "mysql",
    "mysqldump",
    "mariadb",
    "redis-cli",
    "--pass",
    "docker",
    "podman",
    "nerdctl",
    "sshpass",
    "curl",
    "Authorization",
    "passphrase",
    "密码",
    "密碼",
    "口令",
    "パスワード",
    "暗証番号",
    "비밀번호",
    "암호",
    "api key",
    "key",
    "token",
    "secret",
    "credentials",
    "auth",
    "access-key",
    "private_key",
    "密钥",
    "密鑰",
    "秘钥",
    "私钥",
    "令牌",
    "凭证",
    "トークン",
    "シークレット",
    "秘密鍵",
    "キー",
    "토큰",
    "키",
    "시크릿",
]


def _top_level_alternatives(pattern: str) -> int:
    depth, count, escaped = 0, 1, False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "|" and depth == 0:
            count += 1
    return count


def test_the_fast_secret_check_answers_as_the_trigger_on_every_alternative() -> None:
    from worker.text.redact import _TRIGGER, may_hold_secret

    assert _top_level_alternatives(_TRIGGER.pattern.removeprefix("(?i)")) == len(TRIGGER_EXAMPLES)
    for example in TRIGGER_EXAMPLES:
        for shown in (example, example.upper(), example.lower(), example.swapcase()):
            text = f"部署失败 {shown} the logs"
            assert may_hold_secret(text) is (_TRIGGER.search(text) is not None), text
            assert may_hold_secret(text), text


@given(
    st.text(
        alphabet=st.sampled_from(
            list("aAsSkKiI_-:/ pwhdtoenyJ") + ["\u0130", "\u0131", "\u017f", "\u212a", "密", "码", "キ", "ー", "키"]
        ),
        max_size=40,
    )
)
def test_the_fast_secret_check_never_misses_what_the_trigger_finds(text: str) -> None:
    from worker.text.redact import _TRIGGER, may_hold_secret

    assert may_hold_secret(text) is (_TRIGGER.search(text) is not None)


def test_a_session_key_in_arqs_log_lines_stays_readable_while_a_secret_beside_it_goes():
    """arq logs a job's arguments (`summarize_session({'session_key': ...})`): the key says which session a
    job is for, and only a long one (websocket:<uuid>) used to look like a token under the word `key`."""
    uuid = "websocket:8f2a1c3e-9b7d-4e11-a2c4-5d6e7f8a9b0c"
    for key in (uuid, "websocket:wschat2", "telegram.work:123456789", "email:jane.doe@example.com"):
        line = f"  0.12s → nanobot-summary:ns:job:{key}:summarize_session({{'session_key': '{key}'}})"
        assert redact(line) == line, key
    secret = "sk-proj-" + "Q7w" * 12
    mixed = f"summarize_session({{'session_key': '{uuid}', 'api_key': '{secret}'}})"
    assert uuid in redact(mixed) and secret not in redact(mixed)
    assert "Zx9Kp2Lm8Qw4Rt6Yv1Bn" not in redact("my session key is Zx9Kp2Lm8Qw4Rt6Yv1Bn"), "a real session secret"
    assert "telegram:Zx9Kp" not in redact("token: telegram:Zx9Kp2Lm8Qw4Rt6Yv1Bn"), "only a session's own name"
