"""Session messages for the tests, as nanobot stores them (user/assistant turns with naive local timestamps)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any


def conversation(
    turns: int,
    start: datetime | None = None,
    step: timedelta = timedelta(minutes=1),
    user: str = "question {i} about the deploy script",
    assistant: str = "answer {i}: run ./deploy.sh --env prod",
) -> list[dict[str, Any]]:
    """user/assistant pairs with nanobot-style naive local ISO timestamps."""
    moment = start or datetime(2026, 11, 20, 10, 0, 0)
    messages = []
    for i in range(turns):
        messages.append({"role": "user", "content": user.format(i=i), "timestamp": moment.isoformat()})
        moment += step
        messages.append({"role": "assistant", "content": assistant.format(i=i), "timestamp": moment.isoformat()})
        moment += step
    return messages
