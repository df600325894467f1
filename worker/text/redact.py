"""Removes secret values (API keys, tokens, passwords, private keys, credentials in URLs) from memory text.

Hand-written patterns, on purpose: detect-secrets scans source files line by line and reports
findings rather than rewriting prose, and knows no Chinese/Japanese/Korean key words; presidio needs
spaCy models fetched at run time. What we need is narrow: keep that a secret exists and where it is
configured ("the DeepSeek API key is set in providers.deepseek.apiKey"), drop only its value.

`redact` is idempotent: redacting twice gives the same text as redacting once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

MARK = "[REDACTED]"
KEY_MARK = "[REDACTED PRIVATE KEY]"

# Whole PEM blocks; an unterminated block loses its base64 body too.
_PRIVATE_KEY = re.compile(
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    r"(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=:,\-\s]*)",
    re.DOTALL,
)

# scheme://user:password@host -> keeps scheme, user and host. RFC 3986 userinfo has no / ? # @.
_URL_CREDENTIALS = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@\s]*:)(?P<pw>[^/?#@\s]+)(?=@)")

# Secrets recognizable by their own shape, wherever they appear.
_PREFIXED = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:"
    r"sk-[A-Za-z0-9_\-]{12,}"  # OpenAI, Anthropic (sk-ant-), DeepSeek, OpenRouter (sk-or-)
    r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{12,}"  # Stripe
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key id
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|glpat-[A-Za-z0-9_\-]{20,}"  # GitLab
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|AIza[0-9A-Za-z_\-]{35}"  # Google
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|npm_[A-Za-z0-9]{36}"  # npm
    r"|\d{8,10}:AA[A-Za-z0-9_\-]{33}"  # Telegram bot token (nanobot's own channel)
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"  # JWT
    r")"
)

# A quoted value: in double quotes, in single quotes, or in double quotes inside a JSON string (\"...\").
_QUOTED = r"\\\"[^\"\\\n]*\\\"|\"[^\"\n]*\"|'[^'\n]*'"

# Passwords given to command-line clients: mysql -pSECRET, redis-cli -a SECRET, docker login -p SECRET,
# sshpass -p SECRET, --password SECRET or --password=SECRET, and curl -u user:SECRET (the user stays).
_CLI_PASSWORD = re.compile(
    r"(?P<head>(?:\b(?:mysql|mysqldump|mariadb)\b[^\n]*?\s-p(?=\S)"
    r"|\bredis-cli\b[^\n]*?\s-a\s+"
    r"|\b(?:docker|podman|nerdctl)\s+login\b[^\n]*?\s-p(?:\s+|(?=\S))"
    r"|\bsshpass\b[^\n]*?\s-p(?:\s+|(?=\S))"
    r"|\bcurl\b[^\n]*?\s(?:-u\s*|--user[\s=]\s*)[\"']?[^\s:\"'@]*:"
    rf"|--pass(?:word)?(?:\s+|=)))(?P<value>{_QUOTED}|[^\s\"']+)"
)

_BEARER = re.compile(r"(?P<head>\b(?i:bearer)\s+)(?P<value>[A-Za-z0-9._~+/=\-]{8,})")
_BASIC = re.compile(r"(?P<head>\b(?i:authorization\s*[:=]\s*[\"']?basic)\s+)(?P<value>[A-Za-z0-9+/=]{8,})")

# Words after which a value is a secret. Passwords are redacted whatever they look like; keys and
# tokens only when the value looks like one (so "API key: see providers.deepseek.apiKey" survives).
_PASSWORD_WORDS = r"pass(?:word|wd|phrase|code)|密码|密碼|口令|パスワード|暗証番号|비밀번호|암호"
_KEY_WORDS = (
    r"api[_\-\s]?key|key|token|secret|credentials?|auth|access[_\-]?key|private[_\-]?key"
    r"|密钥|密鑰|秘钥|私钥|令牌|凭证|トークン|シークレット|秘密鍵|キー|토큰|키|시크릿"
)
# An identifier's prefix: apiKey, DEEPSEEK_API_KEY, db.password. Read from the identifier's start only: tried
# at every character of a long run (a base64 blob), the lazy prefix made redaction quadratic.
_NAME = r"(?<![A-Za-z0-9_.\-])[A-Za-z0-9_.\-]*?"
# A name may close its quotes with a backslash first: JSON quoted inside a JSON string (`\"apiKey\": \"...\"`).
_STRONG_SEP = r"\\?[\"']?\s*(?:=|:|：|=>|->)\s*"
_SOFT_SEP = r"\s*(?:\bis\b|\bwas\b|\bto\b|是|为|為|は|が|는|은|이|가)\s*"
_BARE = r"[^\s\"'，。；、]+"  # sentence punctuation at its end is handed back by _split_trailing

_PASSWORD_STRONG = re.compile(rf"(?P<head>(?i:{_NAME}(?:{_PASSWORD_WORDS})){_STRONG_SEP})(?P<value>{_QUOTED}|{_BARE})")
_PASSWORD_SOFT = re.compile(rf"(?P<head>(?i:{_NAME}(?:{_PASSWORD_WORDS})){_SOFT_SEP})(?P<value>[!-~]+)")
_KEY_ANY = re.compile(
    rf"(?P<head>(?i:{_NAME}(?:{_KEY_WORDS})(?:[\s_\-]*(?:{_KEY_WORDS}))*)(?:{_STRONG_SEP}|{_SOFT_SEP}|\s+))"
    rf"(?P<value>{_QUOTED}|[!-~]+)"
)

# An env-var reference names where a secret lives, which is worth keeping.
_REFERENCE = re.compile(r"^[\"']?(?:\$\{?[A-Z_][A-Z0-9_]*\}?|\[REDACTED[^\]]*\]|\*+)[\"']?$")
_TRAILING = ".,;:!?)]}>'\"。，；：！？）】"


# A nanobot session key (`websocket:<uuid>`) under a name with "session" in it: what arq's log lines show as
# `session_key`, which names the value's field, not a secret. Hiding it hid which session a job was for
# (`websocket:wschat2` was redacted, `telegram:42`, too short, was not).
_SESSION_KEY = re.compile(
    r"(?:cli|telegram|slack|whatsapp|feishu|dingtalk|napcat|discord|matrix|mattermost|msteams|qq|email|signal"
    r"|websocket|api|wecom|weixin|mochat|cron|dream|heartbeat)(?:\.[\w-]+)?:[\w@.:+-]*"
)


def _looks_like_token(value: str) -> bool:
    """Long, no spaces, letters with digits or symbols: what API keys and tokens look like, words do not."""
    core = value.strip("\"'")
    if len(core) < 16 or any(c.isspace() for c in core):
        return False
    if not re.fullmatch(r"[A-Za-z0-9._~+/=\-:]+", core):
        return False
    has_digit = any(c.isdigit() for c in core)
    has_alpha = any(c.isalpha() for c in core)
    # A dotted path (providers.deepseek.apiKey) or a plain word is a location, not a value.
    if not has_digit and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(?:[.\-/][A-Za-z_][A-Za-z0-9_]*)*", core):
        return False
    return has_alpha and (has_digit or len(core) >= 32)


def _split_trailing(value: str) -> tuple[str, str]:
    """A bare value's sentence punctuation stays in the text."""
    if value[:1] in "\"'\\":
        return value, ""
    core = value.rstrip(_TRAILING)
    return core, value[len(core) :]


def _replace_value(match: re.Match[str], check: bool) -> str:
    value, tail = _split_trailing(match.group("value"))
    quote = ""
    if value.startswith('\\"') and value.endswith('\\"') and len(value) >= 4:
        quote, value = '\\"', value[2:-2]  # quoted inside a JSON string
    if not value or _REFERENCE.match(value) or value.startswith("[REDACTED"):
        return match.group(0)
    if check and (
        not _looks_like_token(value)
        or ("session" in match.group("head").lower() and _SESSION_KEY.fullmatch(value.strip("\"'")))
    ):
        return match.group(0)
    if not quote and value[0] in "\"'" and value[-1] == value[0] and len(value) > 1:
        quote = value[0]
    return f"{match.group('head')}{quote}{MARK}{quote}{tail}"


def _password_soft(match: re.Match[str]) -> str:
    value, _ = _split_trailing(match.group("value"))
    # "the password is stored in vault": a prose word is not a password; one with digits or symbols is.
    if value.isalpha():
        return match.group(0)
    return _replace_value(match, check=False)


def _bodies(secret: str) -> set[str]:
    """The key and its part after the vendor prefix, when that part is long enough to be unique."""
    body = re.split(r"[-_]", secret, maxsplit=1)[-1]
    return {part for part in (secret, body) if len(part) >= 16}


# Every pattern above needs one of these; most memory lines have none and skip the eight passes.
_TRIGGER = re.compile(
    rf"(?i)PRIVATE KEY|://|sk-|[sr]k_|AKIA|ASIA|gh[pousr]_|github_pat_|glpat-|xox|AIza|hf_|npm_|:AA|eyJ|bearer"
    rf"|mysql|mysqldump|mariadb|redis-cli|--pass|docker|podman|nerdctl|sshpass|curl"
    rf"|Authorization|{_PASSWORD_WORDS}|{_KEY_WORDS}"
)


# The trigger's words as plain lower-case text: looking for each in the lowered text is several times
# faster than the case-insensitive alternation, which tries every branch at every character. Every
# alternative of _TRIGGER contains one of them (tests/worker/text/test_redact.py checks it), so a text holding none
# cannot match it. The re module also equates İ, ı (with i) and ſ (with s): a text holding one of
# those is left to _TRIGGER itself.
_TRIGGER_WORDS = (
    "://",
    "sk-",
    "sk_",
    "rk_",
    "akia",
    "asia",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xox",
    "aiza",
    "hf_",
    "npm_",
    ":aa",
    "eyj",
    "bearer",
    "mysql",
    "mariadb",
    "redis-cli",
    "docker",
    "podman",
    "nerdctl",
    "sshpass",
    "curl",
    "pass",
    "key",
    "token",
    "secret",
    "credential",
    "auth",
    "密码",
    "密碼",
    "口令",
    "パスワード",
    "暗証番号",
    "비밀번호",
    "암호",
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
)
_FOLDED_ELSEWHERE = ("\u0130", "\u0131", "\u017f")


def may_hold_secret(text: str) -> bool:
    """Could any rule of `redact` apply to `text` (the same answer as _TRIGGER, found faster)?"""
    if any(odd in text for odd in _FOLDED_ELSEWHERE):
        return _TRIGGER.search(text) is not None
    lowered = text.lower()
    return any(word in lowered for word in _TRIGGER_WORDS) and _TRIGGER.search(text) is not None


def redact(text: str) -> str:
    """The text with every recognized secret value replaced by [REDACTED]."""
    if not text or not may_hold_secret(text):
        return text
    text = _PRIVATE_KEY.sub(KEY_MARK, text)
    text = _URL_CREDENTIALS.sub(lambda m: f"{m.group('head')}{MARK}", text)
    # The same key quoted again without its prefix ("...AAAA, i.e. AAAA") must go as well.
    repeated = {body for m in _PREFIXED.finditer(text) for body in _bodies(m.group(0))}
    text = _PREFIXED.sub(MARK, text)
    for body in sorted(repeated, key=len, reverse=True):
        text = text.replace(body, MARK)
    text = _CLI_PASSWORD.sub(lambda m: _replace_value(m, check=False), text)
    text = _BEARER.sub(lambda m: _replace_value(m, check=False), text)
    text = _BASIC.sub(lambda m: _replace_value(m, check=False), text)
    text = _PASSWORD_STRONG.sub(lambda m: _replace_value(m, check=False), text)
    text = _PASSWORD_SOFT.sub(_password_soft, text)
    text = _KEY_ANY.sub(lambda m: _replace_value(m, check=True), text)
    return text


# JSON keys whose string value is a secret whatever it looks like ("apiKey", "DB_PASSWORD", "Authorization").
_SECRET_NAME = re.compile(
    rf"(?i)(?:{_PASSWORD_WORDS}|pwd|secret|token|api[_\-]?key|access[_\-]?key|private[_\-]?key|credentials?"
    rf"|auth|authorization)$"
)


def _named_secret(name: str, value: Any) -> bool:
    return (
        isinstance(value, str)
        and bool(value)
        and bool(_SECRET_NAME.search(name))
        and not _REFERENCE.match(value)
        and not value.startswith("[REDACTED")
    )


def redact_json(value: Any, name: str = "", shorten: Callable[[str], str] | None = None) -> Any:
    """A decoded JSON value with its secrets redacted.

    A string under a secret's name whole, every other string by the text rules (it may hold JSON or a command line of
    its own). `shorten` cuts a string to the size it will be shown at, redacting what it keeps, before the rest is
    redacted."""
    if isinstance(value, dict):
        return {key: redact_json(item, str(key), shorten) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_json(item, name, shorten) for item in value]
    if not isinstance(value, str):
        return value
    if _named_secret(name, value):
        return MARK
    value = _without_named_secrets(value)
    return redact(shorten(value) if shorten else value)


def _named_secrets(value: Any, name: str = "") -> set[str]:
    if isinstance(value, dict):
        return {secret for key, item in value.items() for secret in _named_secrets(item, str(key))}
    if isinstance(value, list):
        return {secret for item in value for secret in _named_secrets(item, name)}
    return {value} if _named_secret(name, value) else set()


def _without_named_secrets(text: str) -> str:
    """A string that is JSON itself loses the values under secret names, its own layout kept.

    A string that is JSON itself (a config file being written) loses the values under secret names, its own layout
    kept."""
    if text.lstrip()[:1] not in ("{", "["):
        return text
    try:
        secrets = _named_secrets(json.loads(text))
    except ValueError:
        return text
    for secret in secrets:
        for quoted in {json.dumps(secret), json.dumps(secret, ensure_ascii=False)}:
            text = text.replace(quoted, f'"{MARK}"')
    return text


def redact_arguments(arguments: Any, shorten: Callable[[str], str] | None = None) -> str:
    """A tool call's arguments as text, secrets redacted.

    OpenAI's shape carries them as a JSON string: it is decoded first, so a secret quoted in it (escaped, or under its
    key's name) is found like any other. `shorten`: as for redact_json."""
    decoded = arguments
    if isinstance(arguments, str):
        try:
            decoded = json.loads(arguments)
        except ValueError:
            decoded = None
        if not isinstance(decoded, (dict, list)):
            return redact(shorten(arguments) if shorten else arguments)
    return json.dumps(redact_json(decoded, shorten=shorten), ensure_ascii=False)


@lru_cache(maxsize=65536)  # the same MEMORY.md lines come back on every merge
def one_line(text: str) -> str:
    """Redacted, on one line, valid UTF-8, without HTML-comment delimiters: safe as one bullet of a memory file."""
    return one_line_uncached(text)


def one_line_uncached(text: str) -> str:
    """one_line made afresh.

    For texts met once (a daily note's items), which would only crowd its cache and hold their memory
    (worker.memory.dedup.normalize_uncached)."""
    text = text.encode("utf-8", errors="ignore").decode("utf-8")  # lone surrogates cannot be written
    return " ".join(no_comments(redact(text)).split())


_COMMENT_DELIMITERS = ("<!--", "-->", "--!>")


def no_comments(text: str) -> str:
    """`text` with no HTML-comment delimiter left, however nested.

    Taking one out can join the characters around it into another (`<-->!--` becomes `<!--`), so it repeats until none
    is left. A delimiter would hide the rest of a memory file in a Markdown viewer, or forge this project's markers."""
    while any(delimiter in text for delimiter in _COMMENT_DELIMITERS):
        for delimiter in _COMMENT_DELIMITERS:
            text = text.replace(delimiter, "")
    return text
