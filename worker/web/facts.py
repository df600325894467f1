"""The memory page's tools over several facts.

A fact added by hand (the user's own, so trusted, its provenance "added on the page"), several forgotten at once, and
MEMORY.md's facts exported with their provenance as JSON or Markdown."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlencode

from aiohttp import web

from worker.memory.longterm.forget import ADDED_ON_PAGE, add_fact, forget_fact
from worker.text.language import language as language_table
from worker.web.guard import see_other
from worker.web.limits import length_problem
from worker.web.memory import FactRow, NotWritten, answer, read_facts_again, refresh_recall, write_memory
from worker.web.render import INSTANCE
from worker.web.undo import Said

GROUPS = language_table("en").memory_groups  # heading of each group, as the form offers them
ADDED = {"restored": "added", "again": "already", "no part": "no-part", "absent": "no-part"}


async def add(request: web.Request) -> web.Response:
    """A fact typed on the page, added to MEMORY.md's managed part under the heading chosen."""
    instance = request.app[INSTANCE]
    form = {name: value if isinstance(value, str) else "" for name, value in (await request.post()).items()}
    text, group = " ".join(form.get("new", "").split()), form.get("group", "other")
    importance = int(form["importance"]) if form.get("importance", "") in {"1", "2", "3", "4", "5"} else 4
    problem = length_problem(text) if text else "Type the fact to add"
    if problem is not None or group not in GROUPS:
        return await answer(
            request, 400, Said(f"Not added: {problem or 'choose one of the headings'}", text), retry=(None, text)
        )
    try:
        done = await write_memory(add_fact, instance.memory.memory_path, text, group, importance, instance.today())
    except NotWritten as exc:
        return await answer(request, 503, Said(f"Not added: {exc}", text), retry=(None, text))
    if done == "restored":
        await refresh_recall(instance)
    return see_other("/memory?" + urlencode({"added": ADDED[done]}))


async def forget_many(request: web.Request) -> web.Response:
    """The facts ticked on the page (`text`, repeated), each forgotten as Forget does; how many, said."""
    instance = request.app[INSTANCE]
    texts = [value for name, value in (await request.post()).items() if name == "text" and isinstance(value, str)]
    gone = 0
    try:
        for text in dict.fromkeys(texts):
            if await write_memory(forget_fact, instance.memory.memory_path, text, instance.today()) is not None:
                gone += 1
    except NotWritten as exc:
        return await answer(request, 503, Said(f"Stopped after {gone} fact(s): {exc}", ""))
    if gone:
        await refresh_recall(instance)
    return see_other(f"/memory?forgot={gone}&of={len(set(texts))}")


def row_record(row: FactRow) -> dict[str, object]:
    """A fact with its provenance, as the export writes it (pure)."""
    added = row.session == ADDED_ON_PAGE
    return {
        "text": row.text,
        "heading": row.heading,
        "importance": row.importance,
        "learned": row.date,
        "session": None if added else row.session,
        "added_on_the_page": added,
        "pinned": row.pinned,
    }


def markdown(rows: list[FactRow]) -> str:
    """The facts as Markdown (pure): one list per heading, each fact with where and when it was learned."""
    lines = ["# MEMORY.md's facts, with their provenance", ""]
    for heading in dict.fromkeys(row.heading for row in rows):
        lines += [f"## {heading}", ""]
        for row in (r for r in rows if r.heading == heading):
            where = (
                "added on the page"
                if row.session == ADDED_ON_PAGE
                else f"session {row.session}"
                if row.session
                else "session not recorded"
            )
            pin = ", pinned" if row.pinned else ""
            lines.append(f"- {row.text} (importance {row.importance}, learned {row.date}, {where}{pin})")
        lines.append("")
    return "\n".join(lines)


async def export(request: web.Request) -> web.Response:
    """MEMORY.md's managed facts with their provenance: `/memory/export.json` or `/memory/export.md`."""
    instance = request.app[INSTANCE]
    rows, _ = await asyncio.to_thread(read_facts_again, instance.memory.memory_path, instance.today())
    if request.path.endswith(".json"):
        body, kind, name = (
            json.dumps({"facts": [row_record(row) for row in rows]}, ensure_ascii=False, indent=1),
            "application/json",
            "memory-facts.json",
        )
    else:
        body, kind, name = markdown(rows), "text/markdown", "memory-facts.md"
    return web.Response(
        text=body, content_type=kind, charset="utf-8", headers={"Content-Disposition": f'attachment; filename="{name}"'}
    )
