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


SAW_HEIGHT = 160


@dataclass(frozen=True)
class Sawtooth:
    """A session's prompt tokens turn by turn, and where summaries were applied: the sawtooth users want."""

    points: str  # the polyline's "x,y x,y ..."
    marks: list[tuple[int, str]]  # x of each applied summary, and its figures
    width: int
    height: int
    top: int  # the tokens the chart's top stands for
    turns: int


def sawtooth(history: list[dict[str, Any]]) -> Sawtooth | None:
    """The context history (oldest first: turns' `tokens`, summaries `applied`) as SVG coordinates; None when
    fewer than two turns are known."""
    # In time order: nanobot writes the turns' tokens in batches, an applied summary's mark at once.
    history = sorted(history, key=lambda entry: entry["at"])
    turns = [entry for entry in history if isinstance(entry.get("tokens"), int)]
    if len(turns) < 2:
        return None
    top = max(entry["tokens"] for entry in turns) or 1
    step = (WIDTH - 20) / (len(turns) - 1)
    points, marks, seen = [], [], 0
    for entry in history:
        if entry.get("applied"):  # between the turn before it and the one after
            x = round(10 + step * max(seen - 0.5, 0))
            marks.append((x, f"summary applied: {entry.get('before', '?')} → {entry.get('after', '?')} tokens"))
        elif isinstance(entry.get("tokens"), int):
            y = round(SAW_HEIGHT - 10 - (SAW_HEIGHT - 20) * entry["tokens"] / top)
            points.append(f"{round(10 + step * seen)},{y}")
            seen += 1
    return Sawtooth(" ".join(points), marks, WIDTH, SAW_HEIGHT, top, len(turns))
