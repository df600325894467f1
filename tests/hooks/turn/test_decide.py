"""The turn's decisions (summarize now, apply now) and the user-turn count: pure functions, no nanobot, no Redis."""

from __future__ import annotations

import pytest

from harness.transcripts import conversation
from nanobot_hooks.contract.marker import METADATA_KEY
from nanobot_hooks.contract.session_format import is_internal_session, is_user_turn, last_context_tokens
from nanobot_hooks.turn.decide import count_from, decide, pickup_due, user_turns_since

MARKER = {
    "role": "user",
    "content": "Continue the active task from the working-memory checkpoint above.",
    "_hidden_history": True,
}


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


@pytest.mark.parametrize(
    "key, internal",
    [
        ("dream:20261120-101010", True),
        ("cron:job-1", True),
        ("heartbeat", True),
        ("", True),
        (None, True),
        ("telegram:42", False),
        ("cli:direct", False),
        ("websocket:abc", False),
    ],
)
def test_internal_sessions_are_recognised(key, internal):
    assert is_internal_session(key) is internal


def applied_session(turns: int = 10, boundary: int = 10) -> tuple[list[dict], dict, int]:
    """A session right after a summary was applied at `boundary`: messages, metadata, through."""
    messages = conversation(turns)
    messages.insert(boundary, dict(MARKER))
    through = len(messages)
    return messages, {METADATA_KEY: {"applied": {"boundary": boundary, "through": through}}}, through


def test_after_an_applied_summary_the_kept_tail_is_not_counted_again():
    messages, metadata, through = applied_session()  # 5 user turns kept after the marker at 10
    assert user_turns_since(messages, 10) == 5
    assert count_from(messages, 10, metadata) == through
    assert user_turns_since(messages, count_from(messages, 10, metadata)) == 0
    messages += conversation(4)
    assert user_turns_since(messages, count_from(messages, 10, metadata)) == 4, "only the new turns count"


def test_without_our_marker_the_count_starts_at_the_watermark():
    messages, _, _ = applied_session()
    assert count_from(messages, 10, {}) == 10
    assert count_from(messages, 10, {METADATA_KEY: {"pending": {"boundary": 10}}}) == 10
    assert count_from(messages, 10, {METADATA_KEY: {"applied": {"boundary": 10}}}) == 10, "a marker without through"
    assert count_from([], 0, None) == 0


def test_a_later_native_compaction_wins():
    messages, metadata, through = applied_session()
    messages += conversation(6)
    messages.insert(through + 4, dict(MARKER))  # nanobot compacted on its own, past our marker
    assert count_from(messages, through + 4, metadata) == through + 4


def test_new_resets_the_count_even_once_the_fresh_session_is_longer_than_the_old_marker():
    _, metadata, through = applied_session()
    fresh = conversation(through)  # /new: messages cleared, watermark 0, our metadata entry kept
    assert count_from(fresh[:4], 0, metadata) == 0
    assert count_from(fresh, 0, metadata) == 0
    assert user_turns_since(fresh, count_from(fresh, 0, metadata), enough=10) == 10


@pytest.mark.parametrize(
    "applied",
    [
        {"boundary": 10, "through": "21"},
        {"boundary": 10, "through": True},
        {"boundary": 10, "through": None},
        {"boundary": 10, "through": 10},
        {"boundary": 10, "through": 22},
        {"boundary": 10, "through": -1},
        {"boundary": "10", "through": 21},
        {"boundary": -1, "through": 21},
        {"boundary": 11, "through": 21},
        {"boundary": 4, "through": 21},
        {"through": 21},
        "applied",
        None,
    ],
)
def test_odd_markers_fall_back_to_the_watermark(applied):
    messages, _, through = applied_session()
    assert through == 21
    assert count_from(messages, 10, {METADATA_KEY: {"applied": applied}}) == 10
    assert count_from(messages, 10, {METADATA_KEY: [applied]}) == 10


IDLE = dict(mode="idle", cache_ttl=300.0, context_window=100_000, threshold=0.6)


def test_now_pickup_is_always_due():
    assert pickup_due(
        mode="now", idle_seconds=0.0, cache_ttl=300.0, prompt_tokens=1, context_window=100_000, threshold=0.6
    )


def test_idle_pickup_waits_for_a_cold_cache_or_a_context_near_the_window():
    assert not pickup_due(idle_seconds=10.0, prompt_tokens=60_000, **IDLE), "warm cache, room left: hold"
    assert pickup_due(idle_seconds=300.0, prompt_tokens=10_000, **IDLE), "the cache has gone cold"
    assert not pickup_due(idle_seconds=0.0, prompt_tokens=79_999, **IDLE)
    assert pickup_due(idle_seconds=0.0, prompt_tokens=80_000, **IDLE), "halfway from 60% to the window"


def test_idle_pickup_with_nothing_known_applies_and_with_a_known_idle_time_waits_for_it():
    assert pickup_due(idle_seconds=None, prompt_tokens=None, **IDLE)
    assert not pickup_due(idle_seconds=5.0, prompt_tokens=None, **IDLE)
    assert pickup_due(idle_seconds=None, prompt_tokens=90_000, **IDLE)
    assert not pickup_due(idle_seconds=None, prompt_tokens=10_000, **IDLE)


def test_the_last_prompt_size_is_read_from_nanobots_saved_usage():
    assert last_context_tokens({"_last_usage": {"context_tokens": 1234, "input_tokens": 5000}}) == 1234
    assert last_context_tokens({"_last_usage": {"context_tokens": None, "input_tokens": 5000}}) == 5000
    assert last_context_tokens({"_last_usage": {"input_tokens": True}}) is None
    assert last_context_tokens({"_last_usage": "odd"}) is None
    assert last_context_tokens({}) is None and last_context_tokens(None) is None
