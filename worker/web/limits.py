"""How long a fact typed on the page may be.

Every fact goes into every prompt, so a pasted page must not become one (58,539 characters were ~14,600 more tokens in
each). Too long is refused with the typed text kept in a form to shorten and save again."""

from __future__ import annotations

from aiohttp import web

from worker.memory.longterm.merge import fact_text
from worker.web.render import render

MAX_FACT_CHARS = 1000  # ~250 tokens; the model's facts are one short sentence


def length_problem(text: str) -> str | None:
    """Why `text`, typed as a fact, is refused, or None (pure)."""
    length = len(fact_text(text))
    if length <= MAX_FACT_CHARS:
        return None
    return (
        f"The new text has {length:,} characters; a fact holds at most {MAX_FACT_CHARS:,}, because every "
        "fact goes into every prompt. Nothing was changed: shorten it below and save again."
    )


def fact_too_long(request: web.Request, form: dict[str, str]) -> web.Response | None:
    """The page refusing an edit whose new text (`new`) is too long, the text kept in its form.

    None when it is not too long."""
    problem = length_problem(form.get("new", ""))
    if problem is None:
        return None
    return render(
        request,
        "error.html",
        status=400,
        title="The fact is too long",
        message=problem,
        again={"text": form.get("text", ""), "new": form.get("new", "")},
    )
