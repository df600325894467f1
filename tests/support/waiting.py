"""Waiting for something another process does, without asserting anything about how long it takes."""

from __future__ import annotations

import asyncio
from typing import Any


async def wait_until(condition: Any, timeout: float = 30.0, what: str = "condition") -> None:
    """Poll an async or plain predicate; the timeout only ends a wait that would never end."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
