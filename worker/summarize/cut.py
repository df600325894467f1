"""The cut planner (pure).

The keep rule resolved (turns, an idle summary's, keeping nothing), and which messages a summary covers, ending at a
user turn so tool calls stay whole."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nanobot_hooks.contract.session_format import is_user_turn, tool_calls
from worker.keep_rule import KeepRule


@dataclass(frozen=True)
class Cut:
    """Cover messages [start, boundary); keep [boundary, read) verbatim. boundary == start: nothing to do."""

    start: int
    boundary: int
    read: int  # how many messages this run read; the boundary never passes it

    @property
    def covered(self) -> int:
        return self.boundary - self.start

    @property
    def kept(self) -> int:
        return self.read - self.boundary


def keep_start(token_counts: Sequence[int], keep: KeepRule, window: int) -> int:
    """The earliest index whose suffix the keep rule protects (before moving to a turn start)."""
    n = len(token_counts)
    if keep.kind == "messages":
        return max(0, n - int(keep.value))
    budget = keep.value if keep.kind == "tokens" else keep.value * window
    used = 0
    index = n
    while index > 0 and used + token_counts[index - 1] <= budget:
        used += token_counts[index - 1]
        index -= 1
    return index


def last_turn_start(messages: Sequence[dict[str, Any]], start: int = 0) -> int:
    """Where the last user turn starts; the end of a session that has none.

    Looked for from `start` on only (a read from nanobot's watermark does not hold what lies before): with none there,
    the last one lies before `start`, and `start` is where it may cut at the latest."""
    found = next((i for i in range(len(messages) - 1, start - 1, -1) if is_user_turn(messages[i])), None)
    if found is not None:
        return found
    return start if start > 0 else len(messages)


def orphaned_results(messages: Sequence[dict[str, Any]], boundary: int) -> bool:
    """True if a tool result at or after `boundary` answers a call made before it."""
    kept_calls: set[str] = set()
    for message in messages[boundary:]:
        for call in tool_calls(message):
            if isinstance(call.get("id"), str):
                kept_calls.add(call["id"])
        call_id = message.get("tool_call_id")
        if message.get("role") == "tool" and isinstance(call_id, str) and call_id not in kept_calls:
            return True
    return False


def plan_cut(
    messages: Sequence[dict[str, Any]],
    start: int,
    token_counts: Sequence[int],
    keep: KeepRule,
    window: int,
) -> Cut:
    """Move the keep rule's boundary back to the nearest turn start after `start` whose tail is whole.

    The last user turn always stays, whatever its size: a summary that took the question just asked and the
    answer just given would leave the next turn without memory of what was said. When that turn alone is
    over the keep budget, the summary covers what came before it."""
    read = len(messages)
    start = min(max(start, 0), read)
    boundary = min(keep_start(token_counts, keep, window), last_turn_start(messages, start))
    while boundary > start:
        # Cutting at the very end keeps nothing, which is whole by definition (only a session without a
        # user turn can be cut there).
        at_turn = boundary == read or is_user_turn(messages[boundary])
        if at_turn and not orphaned_results(messages, boundary):
            return Cut(start, boundary, read)
        boundary -= 1
    return Cut(start, start, read)


def saving_floor(reason: str, window: int, min_saving: float, idle_floor: int) -> float:
    """The tokens a summary must take out of the context to be asked for (`reason` is the request's).

    A summary applied while the cache is warm makes the next request re-send the summary and the kept
    tail uncached, and a share of the window is what that miss has to buy back. An idle summary is applied
    after the cache has gone cold, when the whole prompt is a miss anyway: it is worth its (cheaper-model)
    call whenever it takes out clearly more than the summary puts back, `idle_floor` tokens, whatever the
    window (a share of a large window would leave every pause of a chat unsummarized). Asked by hand: any
    saving."""
    if reason == "manual":
        return 0.0
    share = min_saving * window
    return min(share, float(idle_floor)) if reason == "idle" else share


def saves_enough(saving: int, floor: float) -> bool:
    return saving > 0 and saving >= floor


# The keep rule, resolved: every way a rule is chosen or read comes down to these and plan_cut.
KEEP_NOTHING = KeepRule("messages", 0)


def cut_by(
    messages: Sequence[dict[str, Any]],
    start: int,
    counts: list[int],
    keep: KeepRule,
    window: int,
    explicit: bool = False,
) -> Cut:
    """The cut for `keep`, with the rules plan_cut does not read itself.

    turns:N (the last N user turns and what followed them), and keeping nothing when the job's request asks for exactly
    that (an idle summary beside nanobot's own idle compaction: nanobot then finds nothing left to compact)."""
    if explicit and keep == KEEP_NOTHING:
        read = len(messages)  # ending at the end keeps every tool call whole
        return Cut(min(max(start, 0), read), read, read)
    if keep.kind == "turns":
        keep = KeepRule("messages", len(messages) - last_turns_start(messages, int(keep.value), max(start, 0)))
    return plan_cut(messages, start, counts, keep, window)


def last_turns_start(messages: Sequence[dict[str, Any]], turns: int, start: int = 0) -> int:
    """Where the last `turns` user turns from `start` on begin (the end when 0; `start` when there are fewer).

    Not before `start`: what lies before it is summarized already, and a read from nanobot's watermark does not hold
    it."""
    if turns <= 0:
        return len(messages)
    seen = 0
    for index in range(len(messages) - 1, start - 1, -1):
        if is_user_turn(messages[index]):
            seen += 1
            if seen == turns:
                return index
    return start


def idle_keep(keep: KeepRule, cache_ttl: float, nanobot_idle: float, nanobot_scan: float = 60.0) -> KeepRule | None:
    """The keep rule of an idle summary beside nanobot's own idle compaction, or None.

    The keep rule of an idle summary beside nanobot's own idle compaction (`nanobot_idle` seconds, 0 = off), or None to
    stand aside.

    nanobot compacts a quiet session to its end whenever anything is left after its watermark. When it
    comes first (its threshold, plus up to one scan, is not after ours), ours would pay for a summary it
    then replaces: none is made. When ours comes first, it covers everything (keeps nothing), so nanobot
    finds nothing left to compact: one summary per pause, on the cheaper model."""
    if nanobot_idle <= 0:
        return keep
    if nanobot_idle <= cache_ttl + nanobot_scan:
        return None
    return KEEP_NOTHING
