"""Turns covered session messages into summarizer input: filtered, clamped, and chunked to the input budget."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, tzinfo
from typing import Any

from nanobot_hooks.contract.session_format import content_text, is_hidden, tool_calls
from worker.text.clock import local_time
from worker.text.language import text_language
from worker.text.redact import redact, redact_arguments
from worker.text.tokens import Counter, counts_at_most_bytes

# OpenClaw and Letta keep head and tail of a tool result; the middle is where logs repeat.
TOOL_RESULT_CHARS = 3_000
TOOL_ARGS_CHARS = 600
MESSAGE_CHARS = 12_000


def left_out_note(size: int) -> str:
    """What stands in a message for the middle a read left out (a line too long to hold: worker.nanobot.sessions)."""
    return f"[... {size:,} bytes of this message left out ...]"


_LEFT_OUT = re.compile(r"\[\.\.\. [\d,]+ bytes of this message left out \.\.\.\]")


@dataclass(frozen=True)
class Entry:
    """One transcript line: a covered message as the summarizer reads it."""

    index: int
    date: str | None  # YYYY-MM-DD from the message's own timestamp
    timestamp: str | None
    text: str
    # The text's count (+1 for its line), counted when `chunk` first needs it.
    tokens: int | None = field(default=None, compare=False)
    # Its place among the session's visible messages (Lines.position): what a noted span records.
    position: int | None = None

    def counted(self, counter: Counter) -> int:
        if self.tokens is None:
            object.__setattr__(self, "tokens", counter(self.text) + 1)  # a count of its own text: set once
        assert self.tokens is not None
        return self.tokens


def cut_middle(text: str, max_chars: int, clean: Callable[[str], str] | None = None) -> str:
    """Keep the head and the tail, and say how much of the middle went.

    `clean` (worker.text.redact.redact) is applied to each kept end, and a margin past it, before the cut: a cut
    through a secret would leave a half that no rule recognizes. Only the ends are read, so a megabyte of
    tool output costs what its ends cost."""
    if len(text) <= max_chars:
        return text
    head = max_chars // 2
    tail = max_chars - head
    lines = text.count("\n", head, len(text) - tail)
    note = f"\n[... {len(text) - max_chars:,} characters ({lines:,} lines) cut ...]\n"
    if read_out := _LEFT_OUT.search(text, head, len(text) - tail):  # what the read left out goes on being said
        note += read_out.group() + "\n"
    if clean is None:
        return text[:head] + note + text[len(text) - tail :]
    # The margin (max_chars) is far longer than a secret, so the window's own edges fall in what goes.
    return clean(text[: head + max_chars])[:head] + note + clean(text[max(0, len(text) - tail - max_chars) :])[-tail:]


def _tool_call_text(call: Any) -> str:
    if not isinstance(call, dict):
        return ""
    function = found if isinstance(found := call.get("function"), dict) else call
    name = function.get("name", "?")
    # Decoded, so a secret under its key's name or quoted inside a string value is found (worker.text.redact).
    arguments = redact_arguments(function.get("arguments", ""), lambda text: cut_middle(text, TOOL_ARGS_CHARS, redact))
    return f"{name}({cut_middle(arguments, TOOL_ARGS_CHARS)})"


# The prompt's own block names (worker.model.prompts): data must never open or close one.
_BLOCK_TAG = re.compile(r"<(/?)(?=(?:messages|previous_summary|already_remembered)\b)", re.IGNORECASE)


def defused(text: str) -> str:
    """Text made safe to quote in a block of the prompt: secret values redacted, our block tags defused."""
    return _BLOCK_TAG.sub(r"‹\1", redact(text))


# Every character str.splitlines() breaks a line at: a model may read any of them as one.
_LINE_BREAK = re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def as_data(text: str) -> str:
    """A message's text for the transcript.

    Defused, and every line after the first indented, so no message can start a line of its own (a forged "user:" turn)
    in it. A carriage return, a form feed or a Unicode line separator counts as a line break, as it does to a model."""
    return _LINE_BREAK.sub("\n    ", defused(text))


def render(message: dict[str, Any], moment: datetime | None = None) -> str | None:
    """A message as one transcript entry (stamped with its local time), or None when the summary should not see it."""
    if is_hidden(message):
        return None  # nanobot's checkpoint markers and slash commands
    role = message.get("role")
    stamp = moment.strftime("[%Y-%m-%d %H:%M] ") if moment else ""
    text = content_text(message.get("content")).strip()
    if message.get("media") and not text:
        text = "[attachment]"
    if role == "tool":
        name = " ".join(str(message.get("name") or "tool").split())
        return f"{stamp}tool result ({as_data(name)}): {as_data(cut_middle(text, TOOL_RESULT_CHARS, redact))}"
    calls = [_tool_call_text(c) for c in tool_calls(message)]
    if role == "assistant" and calls:
        text = (text + "\n" if text else "") + "called " + "; ".join(c for c in calls if c)
    if not text:
        return None
    label = role if role in ("user", "assistant", "system") else "unknown"
    return f"{stamp}{label}: {as_data(cut_middle(text, MESSAGE_CHARS, redact))}"


class Lines:
    """Each message's line as `render` makes it (without its time), made once.

    A job's transcript and the recall index's rows of the same messages read the same lines."""

    def __init__(self, messages: Sequence[dict[str, Any]]) -> None:
        self.messages = messages
        self._made: dict[int, str | None] = {}
        # [i]: how many visible messages come before index start + i; a session read from its watermark (a
        # worker.nanobot.sessions.Tail) holds its messages from `first` on and counted the visible ones before.
        self._start: int = getattr(messages, "first", 0)
        self._visible_before: list[int] = [getattr(messages, "visible_before", 0)]

    def position(self, index: int) -> int:
        """The message's place among the visible ones.

        Its index would not do: nanobot inserts each summary's hidden checkpoint marker in the middle of the list, and
        the messages after it move up by one. Wall-clock times would not do either: when the clock goes back (autumn's
        repeated hour), later messages carry times an earlier span already covers."""
        counted = self._visible_before
        while self._start + len(counted) <= index:
            before = self._start + len(counted) - 1
            counted.append(counted[-1] + (0 if is_hidden(self.messages[before]) else 1))
        return counted[index - self._start]

    def __call__(self, index: int) -> str | None:
        try:
            return self._made[index]
        except KeyError:
            line = self._made[index] = render(self.messages[index])
            return line


def transcript(
    messages: Sequence[dict[str, Any]],
    start: int,
    end: int,
    counter: Counter,
    tz: tzinfo | None = None,
    since: str | None = None,
    lines: Lines | None = None,
) -> list[Entry]:
    """Entries of messages[start:end]; with `since` (YYYY-MM-DD), only those dated that day or later.

    Their tokens are counted by `chunk`, and only when the entries might not fit its budget."""
    if lines is None or lines.messages is not messages:
        lines = Lines(messages)
    entries = []
    for index in range(start, end):
        stamp = messages[index].get("timestamp")
        moment = local_time(stamp, tz)
        date = moment.strftime("%Y-%m-%d") if moment else None
        if since and (date or "") < since:
            continue  # skipped before rendering and counting: a long history costs little
        line = lines(index)
        if line is not None:
            # render(message, moment) is the same line with its time in front.
            text = moment.strftime("[%Y-%m-%d %H:%M] ") + line if moment else line
            entries.append(
                Entry(index, date, stamp if isinstance(stamp, str) else None, text, position=lines.position(index))
            )
    return entries


def message_date(message: dict[str, Any], tz: tzinfo | None) -> str | None:
    """The message's local day (YYYY-MM-DD), as the notes date it; None when it has no readable time."""
    moment = local_time(message.get("timestamp"), tz)
    return moment.strftime("%Y-%m-%d") if moment else None


def dated_from(since: str, tz: tzinfo | None) -> Callable[[dict[str, Any]], bool]:
    """Is a message dated `since` or later?

    Where a read for notes since that day starts holding messages: `transcript(..., since)` leaves every earlier one
    out."""
    return lambda message: (message_date(message, tz) or "") >= since


def chunk(entries: Sequence[Entry], budget: int, counter: Counter) -> list[list[Entry]]:
    """Split into consecutive chunks under `budget` tokens; a single oversized line is cut to fit."""
    budget = max(budget, 200)
    if entries and counts_at_most_bytes(counter) and sum(len(e.text.encode()) + 1 for e in entries) <= budget:
        return [list(entries)]  # no count can exceed the bytes: they fit, uncounted
    chunks: list[list[Entry]] = []
    current: list[Entry] = []
    used = 0
    for entry in entries:
        if entry.counted(counter) > budget:
            # Roughly scale characters to the token budget, then verify; never loop forever.
            text = entry.text
            for _ in range(8):
                text = cut_middle(text, max(200, int(len(text) * budget / max(counter(text), 1) * 0.9)))
                if counter(text) < budget:
                    break
            entry = replace(entry, text=text, tokens=counter(text) + 1)
        if current and used + entry.counted(counter) > budget:
            chunks.append(current)
            current, used = [], 0
        current.append(entry)
        used += entry.counted(counter)
    if current:
        chunks.append(current)
    return chunks


# The language is told from the first this many characters the user wrote: a share of scripts needs no more.
# All of a 4 MB window of a huge session was joined and cut into a string per letter (each CJK one an object of
# its own): some 30 MB a window, and the worst-case daily job's memory grew ~120 MB over the worker at rest.
LANGUAGE_SAMPLE_CHARS = 16_000


def detect_language(messages: Sequence[dict[str, Any]]) -> str:
    """zh / ja / ko / en from what the user wrote (its first LANGUAGE_SAMPLE_CHARS characters).

    The prompt also says 'the user's language'."""
    parts: list[str] = []
    size = 0
    for message in messages:
        if message.get("role") == "user" and not is_hidden(message):
            parts.append(content_text(message.get("content"))[: LANGUAGE_SAMPLE_CHARS - size])
            size += len(parts[-1])
            if size >= LANGUAGE_SAMPLE_CHARS:
                break
    return text_language("".join(parts))
