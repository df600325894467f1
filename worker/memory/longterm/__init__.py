"""MEMORY.md: merges facts into the project's one marked part of the file, never touching a byte outside it.

Each fact's importance, day and session live in a sidecar file beside it, not in the prompt nanobot sends.

`part` reads and writes the marked part's text, `merge` merges facts into it (pure), `sidecar` and `held`
are the worker's two files beside MEMORY.md, `store` does the locked, compare-and-replace writes."""

from __future__ import annotations

from worker.memory.longterm.held import HELD, Held, pending_path, read_held
from worker.memory.longterm.merge import Batch, Merged, MergeStats, apply, merge, merge_text
from worker.memory.longterm.part import BEGIN, END, Line, Part, dated_lines, locate, markup_share, parse, render
from worker.memory.longterm.sidecar import Meta, load_meta, sidecar_path
from worker.memory.longterm.store import (
    MemoryConflict,
    flush,
    forget_session,
    hold_facts,
    known_facts,
    write_batches,
    write_facts,
)

__all__ = [
    "BEGIN",
    "END",
    "Batch",
    "HELD",
    "Held",
    "Line",
    "MemoryConflict",
    "MergeStats",
    "Merged",
    "Meta",
    "Part",
    "apply",
    "dated_lines",
    "flush",
    "forget_session",
    "hold_facts",
    "known_facts",
    "load_meta",
    "locate",
    "markup_share",
    "merge",
    "merge_text",
    "parse",
    "pending_path",
    "read_held",
    "render",
    "sidecar_path",
    "write_batches",
    "write_facts",
]
