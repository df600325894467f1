"""The documentation's memory and recall examples (docs/memory-and-recall.md) are what the code produces, and the
README's two set-up commands exist as written."""

from __future__ import annotations

import re

from tests.support.bench import load_bench
from tests.support.paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
MEMORY_DOCS = (ROOT / "docs" / "memory-and-recall.md").read_text(encoding="utf-8")  # the examples live here
_LEARNED = re.compile(r"<!-- i(\d) \d{4}-\d{2}-\d{2}( \S+)? -->")  # the day a fact was learned is the day of the run


def _example_module(name: str = "example_memory"):
    return load_bench(name)


def _readme_block(name: str) -> str:
    match = re.search(rf"`memory/{re.escape(name)}`[^\n]*\n```markdown\n(.*?)\n```", MEMORY_DOCS, re.DOTALL)
    assert match, f"docs/memory-and-recall.md has no example for memory/{name}"
    return match.group(1)


async def test_readme_memory_examples_match_the_code(redis_url) -> None:
    files = await _example_module().produce(redis_url)
    assert set(files) == {"2026-11-20.md", "2026-11-21.md", "MEMORY.md"}
    for name, text in files.items():
        assert _LEARNED.sub(r"i\1", _readme_block(name)) == _LEARNED.sub(r"i\1", text.rstrip("\n")), name


def test_readme_names_the_two_commands_and_ci_runs_the_test_one() -> None:
    assert "scripts/run-worker" in README and "scripts/test" in README
    for script in ("scripts/run-worker", "scripts/test"):
        assert (ROOT / script).stat().st_mode & 0o111, f"{script} is executable"
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


async def test_readme_recall_example_matches_the_code(redis_url) -> None:
    match = re.search(r"`bench/example_recall.py`[^`]*```text\n(.*?)\n```", MEMORY_DOCS, re.DOTALL)
    assert match, "docs/memory-and-recall.md has no recall example"
    produced = await _example_module("example_recall").produce(redis_url)
    assert "[REDACTED]" in produced and "sk-live" not in produced
    learned = re.compile(r"learned \d{4}-\d{2}-\d{2}")  # MEMORY.md's facts are learned on the day of the run
    assert learned.sub("learned", match.group(1)) == learned.sub("learned", produced)
