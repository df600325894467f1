"""The keep rule.

How much recent history stays verbatim after a summary (`messages:N`, `tokens:N`, `fraction:F`, `turns:N`), read from
its text. A foundation module: the settings validate with it and the cut planner plans with it, neither importing the
other."""

from __future__ import annotations

from typing import Literal, NamedTuple

KeepKind = Literal["messages", "tokens", "fraction", "turns"]
KEEP_KINDS: tuple[KeepKind, ...] = ("messages", "tokens", "fraction", "turns")


class KeepRule(NamedTuple):
    """How much recent history stays verbatim after a summary."""

    kind: KeepKind  # turns: the last N user turns and what followed
    value: float

    @classmethod
    def parse(cls, text: str) -> KeepRule:
        kind, sep, raw = text.strip().partition(":")
        if not sep or kind not in KEEP_KINDS:
            raise ValueError("expected messages:N, tokens:N, fraction:F or turns:N")
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{raw!r} is not a number") from None
        if kind == "fraction" and not 0 < value < 1:
            raise ValueError("fraction:F needs 0 < F < 1")
        if kind != "fraction" and (value < 0 or value != int(value)):
            raise ValueError(f"{kind}:N needs a whole number >= 0")
        return cls(kind, value)

    def __str__(self) -> str:
        value = self.value if self.kind == "fraction" else int(self.value)
        return f"{self.kind}:{value}"
