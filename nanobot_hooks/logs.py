"""Log lines from inside nanobot: warnings always show, routine lines obey nanobot's own log switch."""

from __future__ import annotations

import logging
import time
import types

try:  # nanobot logs through loguru; outside nanobot (tests, scripts) plain logging is enough
    from loguru import logger as _loguru
except ImportError:  # pragma: no cover - loguru ships with nanobot
    _loguru = None

PREFIX = "summary worker: "
_std = logging.getLogger("nanobot_hooks")


def _emit(level: str, message: str) -> None:
    _loguru.log(level, message)


# `nanobot agent` hides loguru records of modules under "nanobot" unless --logs is given; loguru
# decides by the calling frame's module name. Running the same code with that name in its globals
# puts our routine lines under nanobot's switch, so a one-shot CLI turn stays quiet.
_emit_as_nanobot = types.FunctionType(
    _emit.__code__, {"__name__": "nanobot.summary_worker", "_loguru": _loguru, "__builtins__": __builtins__}
)


def warning(message: str) -> None:
    """Shown in every nanobot mode: something the user must know (integration off, Redis down)."""
    if _loguru is not None:
        _loguru.warning(PREFIX + message)
    else:
        _std.warning(PREFIX + message)


def info(message: str) -> None:
    """Routine: shown where nanobot shows its own INFO lines (gateway; `agent --logs`)."""
    if _loguru is not None:
        _emit_as_nanobot("INFO", PREFIX + message)
    else:
        _std.info(PREFIX + message)


def debug(message: str) -> None:
    if _loguru is not None:
        _emit_as_nanobot("DEBUG", PREFIX + message)
    else:
        _std.debug(PREFIX + message)


class Throttle:
    """At most one line per `every` seconds for each kind of trouble, with a count of the rest."""

    def __init__(self, every: float = 60.0) -> None:
        self.every = every
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._shown: set[str] = set()  # kinds warned about since their last recovery

    def warning(self, kind: str, message: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        last = self._last.get(kind)
        if last is not None and now - last < self.every:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return False
        self._last[kind] = now
        self._shown.add(kind)
        hidden = self._suppressed.pop(kind, 0)
        warning(message + (f" ({hidden} similar lines suppressed)" if hidden else ""))
        return True

    def recovered(self, kind: str) -> bool:
        """True once after a warning of `kind` was shown (so the caller can say it is over).

        Unlike `clear`, the rate limit stays: the next failure within the window is counted, not shown."""
        if kind in self._shown:
            self._shown.discard(kind)
            return True
        return False


def describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
