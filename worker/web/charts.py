"""Charts as data for the templates' server-rendered SVG.

Bar positions computed here, labels escaped by the template like any other text (no script, no library)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from worker.web.names import shortened

WIDTH = 640
ROW = 22  # px per bar row
LABEL = 190  # px left of the bars for the session's name


@dataclass(frozen=True)
class Bar:
    key: str  # the session's
    label: str
    y: int
    before: int  # width of the context before the summary, px
    after: int  # width of what the summary left, px
    text: str  # the figures, written beside the bar
    name: str = ""  # the session's full name (or key): the bar's tooltip and the table's
    before_tokens: int = 0
    after_tokens: int = 0


AXIS = 30  # px under the bars for the token axis


def context_bars(outcomes: list[dict[str, Any]], limit: int = 12) -> tuple[list[Bar], int, list[tuple[int, str]]]:
    """One bar per session whose last job summarized.

    The replayed history's tokens before it and after it (the job's own figures), on one scale from 0. Returns the bars,
    the chart's height and the token axis's ticks (x, tokens)."""
    done = [o for o in outcomes if o.get("tokens_before") and o.get("tokens_after") is not None][:limit]
    if not done:
        return [], 0, []
    top, step = nice_top(max(int(o["tokens_before"]) for o in done))
    scale = (WIDTH - LABEL - 150) / top
    bars = []
    for row, outcome in enumerate(done):
        before, after = int(outcome["tokens_before"]), int(outcome["tokens_after"])
        key = str(outcome["session_key"])
        bars.append(
            Bar(
                key,
                key,
                row * ROW,
                max(1, round(before * scale)),
                max(1, round(after * scale)),
                f"{before:,} → {after:,} tokens",
                key,
                before,
                after,
            )
        )
    ticks = [(LABEL + round(tokens * scale), f"{tokens:,}") for tokens in range(0, top + 1, step)]
    return labelled(bars), len(bars) * ROW + 4 + AXIS, ticks


LABEL_CHARS = 28  # what fits left of the bars


def labelled(bars: list[Bar]) -> list[Bar]:
    """Each bar's label, its name cut to LABEL_CHARS (pure).

    Names that would read the same cut so (six "question 0 of..." bars) are cut in the middle instead, keeping their
    ends, which differ."""
    cut = [shortened(bar.name, LABEL_CHARS) for bar in bars]
    return [
        replace(bar, label=label if cut.count(label) == 1 else middle(bar.name))
        for bar, label in zip(bars, cut, strict=True)
    ]


def middle(name: str, limit: int = LABEL_CHARS) -> str:
    """`name` on one line, cut in its middle to `limit` characters (pure)."""
    name = " ".join(name.split())
    if len(name) <= limit:
        return name
    head = (limit - 1) // 2
    return name[:head] + "…" + name[len(name) - (limit - 1 - head) :]


def named(bars: list[Bar], names: dict[str, str]) -> list[Bar]:
    """The bars named by their sessions' names where they have one (worker.web.names)."""
    return labelled([replace(bar, name=names[bar.key]) if bar.key in names else bar for bar in bars])


SAW_HEIGHT = 200
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 12, 34  # px around the plot: the token axis's labels, the time axis's
# Steps of the time axis, in seconds: the first giving at most 6 ticks over the chart's span is used.
TIME_STEPS = (
    1,
    5,
    10,
    30,
    60,
    300,
    600,
    1800,
    3600,
    3 * 3600,
    6 * 3600,
    12 * 3600,
    86400,
    2 * 86400,
    7 * 86400,
    30 * 86400,
)


@dataclass(frozen=True)
class Applied:
    """A summary applied, where the chart draws it, and its figures.

    The replayed history's tokens (the session's own figures, as its job counted them) and, when a turn before it is
    known, the whole prompt's."""

    x: int
    before: int | None  # the replayed history (messages and summary nanobot sends), tokens
    after: int | None
    prompt_before: int | None  # the whole prompt at the turn before it, as the provider reported it
    label: str


@dataclass(frozen=True)
class Sawtooth:
    """A session's prompt tokens turn by turn, on a time axis, and where summaries were applied: the sawtooth."""

    points: str  # the polyline's "x,y x,y ..."
    marks: list[Applied]
    width: int
    height: int
    top: int  # the tokens the token axis's top stands for
    turns: int
    y_ticks: list[tuple[int, str]]  # (y, tokens) of each tick of the token axis
    x_ticks: list[tuple[int, str]]  # (x, time in the page's zone) of each tick of the time axis
    plot: tuple[int, int, int, int]  # left, top, right, bottom of the plot area
    last: int  # the last turn's whole prompt, tokens


def nice_top(value: int) -> tuple[int, int]:
    """An axis top at or above `value` and its step, both round (1, 2 or 5 times a power of ten): 4 to 5 ticks."""
    value = max(value, 1)
    step = 1
    while True:
        for factor in (1, 2, 5):
            if value / (step * factor) <= 5:
                size = step * factor
                return -(-value // size) * size, size
        step *= 10


def time_ticks(start: float, end: float, tz: tzinfo) -> list[tuple[float, str]]:
    """Moments (epoch seconds) between `start` and `end` on a round step, each with its label in `tz`.

    The time of day (with seconds on a span of minutes), or the day for a span of days."""
    span = max(end - start, 1e-9)
    step = next((step for step in TIME_STEPS if span / step <= 6), TIME_STEPS[-1])
    shape = "%H:%M:%S" if span <= 600 else "%H:%M" if span <= 2 * 86400 else "%Y-%m-%d"
    # Round steps in the zone's own time: 10:00, not 10:00 UTC shown as 18:00 plus the offset's minutes.
    offset = datetime.fromtimestamp(start, tz).utcoffset() or timedelta(0)
    first = (start + offset.total_seconds()) // step * step - offset.total_seconds()
    ticks, moment = [], first
    while moment <= end:
        if moment >= start:
            ticks.append((moment, datetime.fromtimestamp(moment, tz).strftime(shape)))
        moment += step
    return ticks


def sawtooth(history: list[dict[str, Any]], tz: tzinfo = timezone.utc) -> Sawtooth | None:
    """The context history as an SVG chart, or None when fewer than two turns are known.

    The context history (turns' `tokens`, summaries `applied`, each at epoch seconds `at`) as an SVG chart with a token
    axis from 0 and a time axis in `tz`; None when fewer than two turns are known."""
    # In time order: nanobot writes the turns' tokens in batches, an applied summary's mark at once.
    history = sorted(history, key=lambda entry: entry["at"])
    turns = [entry for entry in history if isinstance(entry.get("tokens"), int)]
    if len(turns) < 2:
        return None
    top, step = nice_top(max(entry["tokens"] for entry in turns))
    left, right, upper, lower = LEFT, WIDTH - RIGHT, TOP, SAW_HEIGHT - BOTTOM
    start, end = float(history[0]["at"]), float(history[-1]["at"])
    span = max(end - start, 1e-9)

    def x(at: float) -> int:
        return round(left + (right - left) * (at - start) / span)

    def y(tokens: int) -> int:
        return round(lower - (lower - upper) * tokens / top)

    points: list[str] = []
    marks: list[Applied] = []
    last: dict[str, Any] | None = None
    for entry in history:
        if entry.get("applied"):
            before, after = _int(entry.get("before")), _int(entry.get("after"))
            whole: int | None = last["tokens"] if last is not None else None
            marks.append(Applied(x(entry["at"]), before, after, whole, applied_label(before, after, whole)))
        elif isinstance(entry.get("tokens"), int):
            points.append(f"{x(entry['at'])},{y(entry['tokens'])}")
            last = entry
    y_ticks = [(y(tokens), f"{tokens:,}") for tokens in range(0, top + 1, step)]
    x_ticks = [(x(at), label) for at, label in time_ticks(start, end, tz)]
    return Sawtooth(
        " ".join(points),
        marks,
        WIDTH,
        SAW_HEIGHT,
        top,
        len(turns),
        y_ticks,
        x_ticks,
        (left, upper, right, lower),
        turns[-1]["tokens"],
    )


def applied_label(before: int | None, after: int | None, whole: int | None) -> str:
    """What a summary took out, in the session's own figures and in the chart's.

    What a summary took out, in the session's own figures (the replayed history, as the job counted it) and, when the
    turn before it is known, in the chart's (the whole prompt the provider reported)."""
    if before is None or after is None:
        return "summary applied"
    text = f"summary applied: the replayed history {before:,} → {after:,} tokens (−{before - after:,})"
    if whole is not None:
        text += f"; the whole prompt about {whole:,} → {max(whole - (before - after), 0):,}"
    return text


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
