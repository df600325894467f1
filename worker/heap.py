"""Memory the worker freed, handed back to the system between the windows of a huge read.

glibc's malloc keeps what Python frees in its heaps for the next allocations; a daily job noting a 200 MB day one
4 MB window at a time frees each window's messages and prompts, and the heap's free space, cut up among what lives
on, grew the job's RSS by ~6 MB over its windows (bench/bench_bigsession.py: 285 MB at 50 MB, 279 MB trimmed
after each window). `malloc_trim(0)` returns the free pages at once. Linux with glibc only: elsewhere (musl has no
malloc_trim, macOS) this does nothing, and it never raises."""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

_trim: Callable[[int], int] | None = None
_looked = False


def give_back_free_memory() -> None:
    """glibc's malloc_trim(0): the heaps' free pages returned to the system (a few ms for a heap of 100 MB)."""
    global _trim, _looked
    if not _looked:
        _looked = True
        if sys.platform.startswith("linux"):
            try:
                function = ctypes.CDLL(None).malloc_trim  # the C library the process runs on
                function.argtypes, function.restype = [ctypes.c_size_t], ctypes.c_int
                _trim = function
            except (OSError, AttributeError):  # no such symbol: not glibc
                _trim = None
    if _trim is not None:
        try:
            _trim(0)
        except Exception:  # noqa: BLE001 - memory handed back is a bonus, never a failure of the job
            pass
