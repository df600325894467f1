"""A Dockerfile read as docker reads it, for tests that check its steps or run them as written."""

from __future__ import annotations

from pathlib import Path


def steps(path: Path) -> list[tuple[str, str]]:
    """(instruction, arguments) in order, continuation lines joined and comments dropped."""
    found, current = [], ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip()[:-1] + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            keyword, _, rest = current.strip().partition(" ")
            found.append((keyword.upper(), " ".join(rest.split())))
            current = ""
    return found


def run_with(path: Path, words: str) -> str:
    """The one RUN whose script holds `words`."""
    runs = [rest for keyword, rest in steps(path) if keyword == "RUN" and words in rest]
    assert len(runs) == 1, runs
    return runs[0]
