"""The trigger decision and the user-turn count: pure functions, no nanobot, no Redis."""

from __future__ import annotations

import pytest

from nanobot_hooks.trigger import decide, is_internal, is_user_turn, user_turns_since

from .conftest import conversation

MARKER = {"role": "user", "content": "Continue the active task from the working-memory checkpoint above.",
          "_hidden_history": True}


def test_tokens_fire_at_the_threshold_share_of_the_window():
    args = dict(context_window=100_000, threshold=0.6, user_turns=0, interval=10)
    assert decide(prompt_tokens=59_999, **args) is None
    assert decide(prompt_tokens=60_000, **args) == "tokens"
    assert decide(prompt_tokens=99_000, **args) == "tokens"


def test_interval_fires_on_the_nth_user_turn_and_zero_switches_it_off():
    args = dict(prompt_tokens=10, context_window=100_000, threshold=0.6)
    assert decide(user_turns=9, interval=10, **args) is None
    assert decide(user_turns=10, interval=10, **args) == "interval"
    assert decide(user_turns=500, interval=0, **args) is None


def test_tokens_win_when_both_fire():
    assert decide(prompt_tokens=90_000, context_window=100_000, threshold=0.6, user_turns=10, interval=10) == "tokens"


@pytest.mark.parametrize("prompt, window", [(None, 100_000), (90_000, None), (90_000, 0)])
def test_unknown_tokens_or_window_never_fire_the_token_rule(prompt, window):
    assert decide(prompt_tokens=prompt, context_window=window, threshold=0.6, user_turns=0, interval=10) is None


def test_user_turns_count_only_visible_user_messages_after_the_watermark():
    messages = conversation(6)  # 12 messages, user turns at even indices
    messages.insert(4, dict(MARKER))
    messages.append({"role": "user", "content": "/status", "_command": True})
    messages.append({"role": "tool", "content": "x", "tool_call_id": "c1"})
    assert user_turns_since(messages, 0) == 6
    assert user_turns_since(messages, 5) == 4  # the marker at 4 and the two turns before it are not counted
    assert user_turns_since(messages, len(messages)) == 0
    assert user_turns_since([], 0) == 0


def test_counting_stops_once_enough_turns_are_seen():
    messages = conversation(50)
    assert user_turns_since(messages, 0, enough=10) == 10
    assert user_turns_since(messages, 0) == 50
    assert user_turns_since(messages, 96, enough=10) == 2


def test_hidden_and_command_rows_are_not_user_turns():
    assert is_user_turn({"role": "user", "content": "hi"})
    assert not is_user_turn(MARKER)
    assert not is_user_turn({"role": "user", "content": "/new", "_command": True})
    assert not is_user_turn({"role": "assistant", "content": "hi"})


@pytest.mark.parametrize("key, internal", [
    ("dream:20261120-101010", True), ("cron:job-1", True), ("heartbeat", True),
    ("", True), (None, True), ("telegram:42", False), ("cli:direct", False), ("websocket:abc", False),
])
def test_internal_sessions_are_recognised(key, internal):
    assert is_internal(key) is internal
