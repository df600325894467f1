"""Pages of a long list (facts, outcomes, sessions, days).

Which slice of the list a page shows and the links to the other pages, one pure function every page uses, so no page
grows with the data (5,000 facts were 7.8 MB of HTML on one page)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode


@dataclass(frozen=True)
class Window:
    """One page of a list.

    The items `start:stop` of `total`, and links (label, own-path URL; None for the page shown) to the first, previous,
    nearby, next and last pages."""

    page: int
    pages: int
    start: int
    stop: int
    total: int
    links: tuple[tuple[str, str | None], ...]
    previous: str | None
    next: str | None


def window(size: int, total: int, path: str, params: Mapping[str, str], name: str = "page") -> Window:
    """One page of `total` items shown `size` at a time, and the links to the other pages.

    The page `params[name]` (anything not a number is page 1, past the end is the last page) of `total` items shown
    `size` at a time; every link is `path` with the same `params` (a search, a filter) and its own page number. `path`
    is always one of this page's own paths, never taken from a request."""
    pages = max(1, -(-total // size))
    page = _number(params.get(name), pages)
    kept = {key: value for key, value in params.items() if key != name and value}

    def url(number: int) -> str:
        query = urlencode({**kept, **({name: str(number)} if number > 1 else {})})
        return f"{path}?{query}" if query else path

    nearby = sorted({1, pages, *range(max(1, page - 2), min(pages, page + 2) + 1)})
    links = tuple((str(n), None if n == page else url(n)) for n in nearby) if pages > 1 else ()
    start = (page - 1) * size
    return Window(
        page=page,
        pages=pages,
        start=start,
        stop=min(total, start + size),
        total=total,
        links=links,
        previous=url(page - 1) if page > 1 else None,
        next=url(page + 1) if page < pages else None,
    )


def _number(requested: str | None, pages: int) -> int:
    try:
        number = int(requested or "1")
    except ValueError:
        return 1
    return min(max(1, number), pages)
