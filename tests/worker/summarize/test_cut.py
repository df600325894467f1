"""The cut planner: keep rule, user-turn boundaries, tool calls kept whole, nothing covered twice."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.keep_rule import KeepRule
from worker.summarize.cut import orphaned_results, plan_cut, saves_enough, saving_floor


def turn(i: int, tools: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"u{i}"}]
    if tools:
        calls = [
            {"id": f"c{i}_{t}", "type": "function", "function": {"name": "exec", "arguments": "{}"}}
            for t in range(tools)
        ]
        messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": "r"} for c in calls]
    messages.append({"role": "assistant", "content": f"a{i}"})
    return messages


def session(shape: list[int]) -> list[dict[str, Any]]:
    return [m for i, tools in enumerate(shape) for m in turn(i, tools)]


keep_rules = st.one_of(
    st.integers(0, 40).map(lambda n: KeepRule("messages", n)),
    st.integers(0, 400).map(lambda n: KeepRule("tokens", n)),
    st.floats(0.01, 0.99).map(lambda f: KeepRule("fraction", f)),
)


@settings(max_examples=300, deadline=None)
@given(
    shape=st.lists(st.integers(0, 3), min_size=0, max_size=25),
    keep=keep_rules,
    start_at=st.integers(0, 100),
    counts_seed=st.integers(1, 30),
)
def test_cut_properties(shape: list[int], keep: KeepRule, start_at: int, counts_seed: int) -> None:
    messages = session(shape)
    counts = [1 + (i * counts_seed) % 17 for i in range(len(messages))]
    start = min(start_at, len(messages))
    cut = plan_cut(messages, start, counts, keep, window=1000)

    assert cut.start == start and start <= cut.boundary <= cut.read == len(messages)
    # the last user turn is never summarized away, whatever the keep rule says
    last_question = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=len(messages))
    assert cut.covered == 0 or cut.boundary <= last_question
    if cut.covered:
        # never separates a tool call from its results, and starts the kept tail at a user turn
        assert not orphaned_results(messages, cut.boundary)
        assert cut.boundary == len(messages) or messages[cut.boundary]["role"] == "user"
        # the keep rule's tail is never summarized
        if keep.kind == "messages":
            assert cut.kept >= keep.value
        else:
            budget = keep.value if keep.kind == "tokens" else keep.value * 1000
            keep_index = len(counts)
            used = 0
            while keep_index > 0 and used + counts[keep_index - 1] <= budget:
                used += counts[keep_index - 1]
                keep_index -= 1
            assert cut.boundary <= keep_index


def test_the_last_user_turn_stays_when_its_answer_alone_is_over_the_keep_budget() -> None:
    # 3% of a 32,000 window is 960 tokens; the answer just given is 1,005.
    messages = session([0] * 6)
    counts = [40] * (len(messages) - 1) + [1_005]
    cut = plan_cut(messages, 0, counts, KeepRule("fraction", 0.03), 32_000)
    assert cut.boundary == len(messages) - 2 and messages[cut.boundary]["content"] == "u5"
    assert cut.kept == 2 and cut.covered == len(messages) - 2, "the question and its answer stay verbatim"


def test_a_last_turn_of_tool_calls_over_the_budget_stays_whole() -> None:
    messages = session([0, 0, 3])
    counts = [10] * (len(messages) - 1) + [2_000]
    cut = plan_cut(messages, 0, counts, KeepRule("tokens", 100), 32_000)
    assert cut.boundary == 4 and messages[4]["content"] == "u2" and not orphaned_results(messages, cut.boundary)


def test_a_session_whose_only_user_turn_is_the_last_covers_nothing() -> None:
    messages = session([2])
    assert plan_cut(messages, 0, [500] * len(messages), KeepRule("messages", 0), 1000).covered == 0


def test_boundary_moves_back_to_the_user_turn_before_a_tool_call() -> None:
    messages = session([0, 0, 3, 0])  # turns: 2 + 2 + 6 + 2 messages
    cut = plan_cut(messages, 0, [1] * len(messages), KeepRule("messages", 5), 1000)
    # keep 5 would start inside the tool turn (index 7); the turn starts at 4
    assert cut.boundary == 4 and messages[4]["content"] == "u2"


def test_a_second_plan_after_the_first_covers_nothing_again() -> None:
    messages = session([0] * 10)
    first = plan_cut(messages, 0, [1] * 20, KeepRule("messages", 4), 1000)
    second = plan_cut(messages, first.boundary, [1] * 20, KeepRule("messages", 4), 1000)
    assert first.covered == 16 and second.covered == 0 and second.start == first.boundary


def test_hidden_checkpoint_and_commands_are_not_turn_starts() -> None:
    messages = session([0, 0, 0])
    messages[2] = {"role": "user", "content": "/status", "_command": True}
    messages[4] = {"role": "user", "content": "Continue...", "_hidden_history": True}
    cut = plan_cut(messages, 0, [1] * 6, KeepRule("messages", 1), 1000)
    assert cut.covered == 0


def test_an_orphan_in_a_damaged_file_pushes_the_boundary_back() -> None:
    messages = session([1, 0, 0])
    # a result whose call sits before the user turn at index 4
    messages.insert(5, {"role": "tool", "tool_call_id": "c0_0", "content": "late"})
    cut = plan_cut(messages, 0, [1] * len(messages), KeepRule("messages", 3), 1000)
    assert not orphaned_results(messages, cut.boundary)
    assert cut.boundary == 0


def test_a_summary_is_worth_it_only_above_the_minimum_share_of_the_window() -> None:
    def worth_summarizing(saving: int, window: int, min_saving: float) -> bool:  # a summary applied on a warm cache
        return saves_enough(saving, saving_floor("tokens", window, min_saving, 2_000))

    assert worth_summarizing(1_600, 32_000, 0.05) and not worth_summarizing(1_599, 32_000, 0.05)
    assert worth_summarizing(1, 32_000, 0.0) and not worth_summarizing(0, 32_000, 0.0)
    assert not worth_summarizing(-50, 32_000, 0.0), "a summary longer than what it replaces never is"
