"""What this project knows of nanobot 0.3.x's session format: file names, rows, flags and metadata keys.

Both sides read sessions (the hooks the live `Session`, the worker the JSONL file), so the rules live
here once. Pure and light: no I/O, nothing beyond the standard library.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "INTERNAL_SESSION_PREFIXES",
    "LAST_SUMMARY",
    "LAST_USAGE",
    "METADATA_TYPE",
    "NOT_A_TURN_FLAGS",
    "NOTED_SUFFIX",
    "PROVIDER_STATE_TYPE",
    "RETIRED_FOLDER",
    "SESSION_FILES_LOCK",
    "SESSION_SUFFIX",
    "channel_of",
    "content_text",
    "is_direct_chat",
    "is_hidden",
    "is_internal_session",
    "is_user_turn",
    "key_from_name",
    "last_context_tokens",
    "retired_key",
    "retired_name",
    "storage_name",
    "summary_text",
    "timestamp_before",
    "tool_calls",
]

# nanobot's own background sessions: summarizing them would only add noise.
INTERNAL_SESSION_PREFIXES = ("dream:", "cron:", "heartbeat")

# Message flags of rows that are not a user's turn: nanobot's hidden rows (checkpoint markers,
# automation and subagent rows) and slash-command rows.
NOT_A_TURN_FLAGS = ("_hidden_history", "_command")

# Line 1 of a session file, and an optional provider-state line after it; every other line is a message.
METADATA_TYPE = "metadata"
PROVIDER_STATE_TYPE = "provider_state"
# The metadata entry nanobot renders as `[Archived Context Summary]`: {"text", "last_active"}.
LAST_SUMMARY = "_last_summary"
# nanobot stores the last turn's token usage here (`LLMUsage.to_dict()`), read back by its web UI.
LAST_USAGE = "_last_usage"

# nanobot guards every session-file write in a sessions folder with this cross-process lock file.
SESSION_FILES_LOCK = ".session-files.lock"
SESSION_SUFFIX = ".jsonl"
# What a session held when `/new` emptied it: the hooks link the session file here (one file per reset, named by
# `retired_name`) before nanobot clears it; the worker notes and indexes it, then marks it noted (NOTED_SUFFIX).
# A folder inside nanobot's sessions folder (a hard link needs the same file system; nanobot reads only the
# `*.jsonl` files of the folder itself). A noted file stays NANOBOT_SUMMARY_RETIRED_DAYS (the recall index is
# rebuilt from them meanwhile); then the worker's daily run removes it.
RETIRED_FOLDER = ".summary-worker-retired"
NOTED_SUFFIX = ".noted"

# nanobot keeps the recovery file of an unfinished turn beside the session file (`<stem>.checkpoint.json`)
# and discards it on load when the session file's mtime is newer, or when line 1's `updated_at` or the
# message count changed: whoever writes a session file keeps all three.


def is_internal_session(session_key: str | None) -> bool:
    """nanobot's own sessions (dream, cron, heartbeat) and turns without a session are left alone."""
    return not session_key or session_key.startswith(INTERNAL_SESSION_PREFIXES)


def channel_of(session_key: str) -> str:
    """The channel of a key (`telegram` of `telegram:42`; a second instance `telegram.work` is `telegram`)."""
    return session_key.partition(":")[0].partition(".")[0]


def is_direct_chat(session_key: str, private_web: bool = False) -> bool:
    """A one-to-one chat with the user, as far as nanobot's key alone tells (unknown = False).

    nanobot keys are `channel:chat_id`; only some channels' ids say whether the chat is private:
    Telegram's private chats are the user's (positive) id, groups are negative; Slack DMs start with D;
    WhatsApp groups end in @g.us; Feishu private chats are the sender's open id (ou_), groups oc_;
    DingTalk and NapCat put `group:` / `private:` in the id. Discord, Matrix and QQ ids do not say,
    email senders and API clients are anyone: none of these count as direct. nanobot's web chat
    (`websocket`) is the user's own when its channel asks for a token (`private_web`: nanobot's default, and
    onboard's quick start sets a password for it); an open one is anyone's.
    """
    channel = channel_of(session_key)
    chat = session_key.partition(":")[2]
    if channel == "cli":
        return True
    if channel == "websocket":
        return private_web and bool(chat)
    if channel == "telegram":
        return chat.isdigit()  # a topic (`-100..:topic:7`) or a group (negative) is not
    if channel == "slack":
        return chat.startswith("D") and ":" not in chat
    if channel == "whatsapp":
        return bool(chat) and not chat.endswith("@g.us") and ":" not in chat
    if channel == "feishu":
        return chat.startswith("ou_")
    if channel == "dingtalk":
        return bool(chat) and not chat.startswith("group:")
    if channel == "napcat":
        return chat.startswith("private:")
    return False


def is_hidden(message: Mapping[str, Any]) -> bool:
    """nanobot's checkpoint markers and slash commands: never a turn, never summarized."""
    return any(message.get(flag) for flag in NOT_A_TURN_FLAGS)


def is_user_turn(message: Mapping[str, Any]) -> bool:
    """A visible user message opens a turn; every tool call and result of the turn comes after it."""
    return message.get("role") == "user" and not is_hidden(message)


def tool_calls(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool calls of an assistant message (OpenAI's shape); none for anything else a file may hold."""
    calls = message.get("tool_calls")
    return [call for call in calls if isinstance(call, dict)] if isinstance(calls, list) else []


def content_text(content: Any) -> str:
    """The text of a message's `content`.

    A string, or an OpenAI content-block list (other blocks leave a short placeholder such as [image])."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else str(content)
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            kind = block.get("type")
            if isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif kind in ("image_url", "image", "input_image"):
                parts.append("[image]")
            elif kind:
                parts.append(f"[{kind}]")
    return "\n".join(parts)


def timestamp_before(messages: Sequence[Mapping[str, Any]], boundary: int) -> str | None:
    """The timestamp of message boundary-1: what a record uses to recognise its cut later."""
    if boundary <= 0 or boundary > len(messages):
        return None
    value = messages[boundary - 1].get("timestamp")
    return value if isinstance(value, str) else None


def summary_text(metadata: Any) -> str:
    """The rolling summary nanobot currently renders for a session ("" when none)."""
    last = metadata.get(LAST_SUMMARY) if isinstance(metadata, Mapping) else None
    text = last.get("text") if isinstance(last, Mapping) else None
    return text if isinstance(text, str) else ""


def storage_name(key: str) -> str:
    """nanobot's session file name for a key: base64url without padding (`telegram:123` -> `dGVsZWdyYW06MTIz.jsonl`)."""
    return base64.urlsafe_b64encode(key.encode("utf-8")).decode("ascii").rstrip("=") + SESSION_SUFFIX


def key_from_name(name: str) -> str | None:
    """The session key of a session file name, or None for any other file."""
    if not name.endswith(SESSION_SUFFIX):
        return None
    stem = name.removesuffix(SESSION_SUFFIX)
    try:
        key = base64.urlsafe_b64decode(stem + "=" * (-len(stem) % 4)).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
    return key if storage_name(key) == name else None


def retired_name(key: str, generation: int, stamp_ms: int) -> str:
    """The file a reset session's messages are kept in: `<storage name's stem>.<generation>.<ms>.jsonl`."""
    return f"{storage_name(key).removesuffix(SESSION_SUFFIX)}.{generation}.{stamp_ms}{SESSION_SUFFIX}"


def retired_key(name: str) -> tuple[str, int] | None:
    """The session key and generation of a retired file's name (noted or not), or None for any other file."""
    stem = name.removesuffix(NOTED_SUFFIX).removesuffix(SESSION_SUFFIX)
    if stem == name.removesuffix(NOTED_SUFFIX):
        return None
    parts = stem.split(".")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    key = key_from_name(parts[0] + SESSION_SUFFIX)
    return (key, int(parts[1])) if key is not None else None


def last_context_tokens(metadata: Any) -> int | None:
    """The prompt size of the session's last LLM call as nanobot saved it (None when unknown)."""
    usage = metadata.get(LAST_USAGE) if isinstance(metadata, Mapping) else None
    if not isinstance(usage, Mapping):
        return None
    # `context_tokens` is the last call's prompt; `input_tokens` sums a turn's calls (an upper bound).
    for name in ("context_tokens", "input_tokens"):
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
