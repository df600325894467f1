"""The notes page renders a day (worker.web.markdown): headings, bullets, **bold** and `code` as HTML, every note's
own text escaped first (a message quoting `<script>` or `<img onerror>` is text), the hidden markers hidden, each
session's section linked to its page, the sessions of the day listed by name, and the days before and after."""

from __future__ import annotations

import re
from urllib.parse import quote

from markupsafe import Markup

from tests.support.web import served
from worker.web.markdown import inline, notes_html

MARKER = (
    "<!-- nanobot-summary:notes session=telegram:42 first=2026-11-20T10:00:00 last=2026-11-20T10:19:00 "
    "at=0-19 digest=b3c1028bb683 -->"
)
DAY = f"""# 2026-11-20

{MARKER}
## telegram:42 · 10:00–10:19

### Topics
- the **deploy** script takes `--env prod`
- my nickname is <script>alert('x')</script> please remember
- an <img src=x onerror=alert(1)> and [a link](javascript:alert(1))

### Decisions
- decided on 2026-11-20
<!-- a comment of the user's own -->
A paragraph of the user's own,
on two lines.
"""


def url(key: str) -> str:
    return "/session?key=" + quote(key, safe="")


def test_a_day_renders_as_html_with_its_own_text_escaped_and_its_sections_linked() -> None:
    html = str(notes_html(DAY, url))
    assert "<h2>2026-11-20</h2>" in html
    assert '<h3><a href="/session?key=telegram%3A42">telegram:42 · 10:00–10:19</a></h3>' in html
    assert "<h4>Topics</h4>" in html and "<h4>Decisions</h4>" in html
    assert "<li>the <strong>deploy</strong> script takes <code>--env prod</code></li>" in html
    assert "<li>my nickname is &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; please remember</li>" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "<img" not in html and "<script" not in html
    assert 'href="javascript' not in html, "no link is made of a note's text"
    assert "<!--" not in html and "nanobot-summary:notes" not in html
    assert "<p>A paragraph of the user&#39;s own,<br>on two lines.</p>" in html
    assert str(inline("`<b>` and **<i>**")) == "<code>&lt;b&gt;</code> and <strong>&lt;i&gt;</strong>"
    assert isinstance(notes_html("", url), Markup) and str(inline("a ` b")) == "a ` b"


async def test_the_notes_page_renders_the_day_with_its_sessions_and_neighbours(nanobot_home, settings_for):
    memory = nanobot_home.workspace / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    for day in ("2026-11-19", "2026-11-21"):
        (memory / f"{day}.md").write_text(f"# {day}\n", encoding="utf-8")
    (memory / "2026-11-20.md").write_text(DAY, encoding="utf-8")
    nanobot_home.write_session("telegram:42", [{"role": "user", "content": "hi"}], metadata={"title": "Deploys"})
    async with served(settings_for()) as page:
        status, body = await page.get("/notes?day=2026-11-20")
    assert status == 200
    assert '<h3><a href="/session?key=telegram%3A42">telegram:42 · 10:00–10:19</a></h3>' in body
    assert re.search(
        r'Sessions noted this day: <a href="/session\?key=telegram%3A42">Deploys</a> '
        r'<small class="session-key">telegram:42</small>',
        body,
    )
    assert 'href="/notes?day=2026-11-19" rel="prev"' in body and 'href="/notes?day=2026-11-21" rel="next"' in body
    assert "<script" not in body.lower() and "<img" not in body.lower() and "nanobot-summary:notes" not in body
