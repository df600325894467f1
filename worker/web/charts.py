"""Charts as data for the templates' server-rendered SVG: bar positions computed here, labels escaped by the
template like any other text (no script, no library)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WIDTH = 640
ROW = 22  # px per bar row
LABEL = 190  # px left of the bars for the session's name


@dataclass(frozen=True)
class Bar:
    label: str
    y: int
    before: int  # width of the context before the summary, px
    after: int  # width of what the summary left, px
    text: str  # the figures, written beside the bar


def context_bars(outcomes: list[dict[str, Any]], limit: int = 12) -> tuple[list[Bar], int]:
    """One bar per session whose last job summarized: the prompt tokens before it and after it, on one scale.
    Returns the bars and the chart's height."""
    done = [o for o in outcomes if o.get("tokens_before") and o.get("tokens_after") is not None][:limit]
    if not done:
        return [], 0
    top = max(int(o["tokens_before"]) for o in done)
    scale = (WIDTH - LABEL - 150) / top
    bars = []
    for row, outcome in enumerate(done):
        before, after = int(outcome["tokens_before"]), int(outcome["tokens_after"])
        bars.append(Bar(str(outcome["session_key"])[:28], row * ROW, max(1, round(before * scale)),
                        max(1, round(after * scale)), f"{before:,} → {after:,} tokens"))
    return bars, len(bars) * ROW + 4
