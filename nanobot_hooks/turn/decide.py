"""The turn's decisions, when to summarize and when to apply a finished summary.

Pure functions, microseconds, no I/O (called on nanobot's turn path)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nanobot_hooks.contract.marker import SessionMarker
from nanobot_hooks.contract.records import Reason
from nanobot_hooks.contract.session_format import is_hidden, is_user_turn


def user_turns_since(messages: Sequence[Mapping[str, Any]], start: int, enough: int = 0) -> int:
    """Visible user turns in messages[start:]; stops counting at `enough` (> 0) to stay O(enough)."""
    count = 0
    for index in range(len(messages) - 1, max(start, 0) - 1, -1):
        if is_user_turn(messages[index]):
            count += 1
            if 0 < enough <= count:
                break
    return count


def count_from(messages: Sequence[Mapping[str, Any]], last_archived: int, metadata: Any) -> int:
    """Where the every-N-user-messages count starts: after the last summary this integration applied.

    nanobot's watermark (`last_archived`) sits at the summary's boundary, and the kept tail after it
    holds user turns the summary already saw; pickup notes the message count right after applying
    (`applied.through`), and counting starts there. The marker is trusted only while it still
    describes this session: its checkpoint row is still at `boundary`, the watermark has not gone
    back below it (`/new` resets it to 0 but keeps the metadata), and `through` is within the
    messages. Anything else (no marker, odd values) falls back to the watermark. A later native
    compaction past the marker wins, being later.
    """
    applied = SessionMarker.from_metadata(metadata).applied
    if applied is None:
        return last_archived
    through, boundary = applied.through, applied.boundary
    if through is None or boundary is None:
        return last_archived
    if not (0 <= boundary <= last_archived and boundary < through <= len(messages)):
        return last_archived
    if not is_hidden(messages[boundary]):
        return last_archived
    return max(last_archived, through)


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


def pickup_due(
    *,
    mode: str,
    idle_seconds: float | None,
    cache_ttl: float,
    prompt_tokens: int | None,
    context_window: int | None,
    threshold: float,
) -> bool:
    """Whether to apply a finished summary now.

    An applied summary changes the system prompt, and the provider's prompt cache ends there: the next request pays full
    price from the summary on. In 'idle' mode that happens when the cache has gone cold anyway (the session quiet longer
    than its lifetime), or when the context has come halfway from the trigger threshold to the window, where the saving
    matters more than the cache. Unknown size and idle time: apply (the safe side of the window)."""
    if mode != "idle":
        return True
    if idle_seconds is not None and idle_seconds >= cache_ttl:
        return True
    if prompt_tokens is None or not context_window:
        return idle_seconds is None
    return prompt_tokens >= (threshold + (1 - threshold) / 2) * context_window
