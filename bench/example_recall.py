#!/usr/bin/env python3
"""Produces the recall example of docs/memory-and-recall.md: the real worker summarizes and indexes, the
tool's search answers."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.example_memory import KEY, run_example, summarized_home
from nanobot_hooks.recall.search import search
from nanobot_hooks.settings import HookSettings

GROUP = "telegram:-1001234"
# (the session asking, the tool's arguments)
CALLS: list[tuple[str, dict[str, str]]] = [
    (KEY, {"query": "shortcode"}),
    (KEY, {"query": "DeepSeek key"}),
    (KEY, {"query": "链接", "date_from": "2026-11-21"}),
    (GROUP, {"query": "Hugo"}),
]


async def produce(redis_url: str) -> str:
    """Each call as `session › recall(...)` followed by the tool's answer, as in docs/memory-and-recall.md."""
    settings = HookSettings(memory_sessions=("direct",), summary_recall_scope="session")
    blocks = []
    async with summarized_home(redis_url) as home:
        for asker, arguments in CALLS:
            answer = search(
                home.workspace,
                arguments["query"],
                asker,
                settings.is_trusted,
                settings.summary_recall_scope,
                arguments.get("date_from"),
                arguments.get("date_to"),
            )
            shown = ", ".join(f"{name}={value!r}" for name, value in arguments.items())
            blocks.append(f"{asker} › recall({shown})\n{answer}")
    return "\n\n".join(blocks)


def main(argv: list[str] | None = None) -> int:
    print(run_example("bench/example_recall.py", __doc__, produce, argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
