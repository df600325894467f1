"""The trigger decision: pure functions, microseconds, no I/O (called on nanobot's turn path)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nanobot_hooks.contract import Reason, is_internal_session
# Message flags of rows that are not a user's turn: nanobot's hidden rows (checkpoint markers,
# automation and subagent rows) and slash-command rows.
_NOT_A_TURN = ("_hidden_history", "_command")


def is_internal(session_key: str | None) -> bool:
    """nanobot's own sessions (dream, cron, heartbeat) and turns without a session are left alone."""
    return not session_key or is_internal_session(session_key)


def is_hidden(message: Mapping[str, Any]) -> bool:
    """nanobot's checkpoint markers and slash commands: never a turn, never summarized."""
    return any(message.get(flag) for flag in _NOT_A_TURN)


def is_user_turn(message: Mapping[str, Any]) -> bool:
    """A visible user message opens a turn; every tool call and result of the turn comes after it."""
    return message.get("role") == "user" and not is_hidden(message)


def user_turns_since(messages: Sequence[Mapping[str, Any]], start: int, enough: int = 0) -> int:
    """Visible user turns in messages[start:]; stops counting at `enough` (> 0) to stay O(enough)."""
    count = 0
    for index in range(len(messages) - 1, max(start, 0) - 1, -1):
        if is_user_turn(messages[index]):
            count += 1
            if 0 < enough <= count:
                break
    return count


def decide(
    *,
    prompt_tokens: int | None,
    context_window: int | None,
    threshold: float,
    user_turns: int,
    interval: int,
) -> Reason | None:
    """Why to summarize now, or None. Tokens first: it is the reason that protects the window."""
    if prompt_tokens is not None and context_window and prompt_tokens >= threshold * context_window:
        return "tokens"
    if interval > 0 and user_turns >= interval:
        return "interval"
    return None
