#!/usr/bin/env python3
"""Writes ARCHITECTURE.md's map: one line per module of the hooks and the worker, layer by layer, each the headline
of the module's own first sentence, so the map never names a module that is gone or misses one that came.

    .venv/bin/python scripts/architecture_map.py            # print the map
    .venv/bin/python scripts/architecture_map.py --write    # put it into ARCHITECTURE.md between its markers
    .venv/bin/python scripts/architecture_map.py --check    # exit 1 if ARCHITECTURE.md's map differs from it

The layers are the design test's (tests/test_design.py: HOOKS_LAYERS, WORKER_LAYERS); a module's line is its
docstring's first sentence up to its first colon, parenthesis or semicolon. To change a line, change the module's
docstring and run --write; tests/test_docs.py fails while the committed map is behind."""

from __future__ import annotations

import argparse
import ast
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from tests.test_design import HOOKS_LAYERS, WORKER_LAYERS  # noqa: E402

PAGE = ROOT / "ARCHITECTURE.md"
BEGIN = "<!-- map: written by scripts/architecture_map.py --write from each module's first sentence -->"
END = "<!-- end of the map -->"
SIDES = (
    (
        "nanobot_hooks",
        "`nanobot_hooks/`, inside nanobot (never raises into it, never blocks a turn on the "
        "network), lowest layer first",
        HOOKS_LAYERS,
    ),
    (
        "worker",
        "`worker/`, its own process (the LLM, the session files read, the memory files written), lowest layer first",
        WORKER_LAYERS,
    ),
)


def headline(path: Path) -> str:
    """A module's first sentence, cut at its first colon, parenthesis or semicolon: what the module is for."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = doc.split("\n\n")[0].replace("\n", " ")
    sentence = re.match(r"(.+?[.!?])(?:\s|$)", first)
    text = sentence.group(1) if sentence else first
    return re.split(r":\s| \(|;", text)[0].strip().rstrip(".") or "(no docstring)"


def unit(relative: Path) -> str:
    """worker/summarize/jobs.py -> summarize; worker/app.py -> app (the design test's units)."""
    return relative.parts[0].removesuffix(".py")


def lines() -> list[str]:
    out = [BEGIN, ""]
    for folder, title, layers in SIDES:
        base = ROOT / folder
        out += [f"{title}:", ""]
        modules = sorted(p for p in base.rglob("*.py") if "__pycache__" not in p.parts)
        for n, (name, units) in enumerate(layers, start=1):
            mine = [p for p in modules if unit(p.relative_to(base)) in units]
            if not mine:
                continue
            out.append(f"- **{n} {name}**")
            for path in mine:
                relative = path.relative_to(base)
                if relative.name == "__init__.py" and len(relative.parts) == 1:
                    continue  # the package's own __init__: its docstring is the side's, said above
                shown = relative.parent if relative.name == "__init__.py" else relative.with_suffix("")
                out.append(f"  - `{shown.as_posix()}{'/' if relative.name == '__init__.py' else ''}`: {headline(path)}")
        out.append("")
    return [*out, END]


def page(current: str) -> str:
    """ARCHITECTURE.md with its map replaced."""
    start, end = current.index(BEGIN), current.index(END) + len(END)
    return current[:start] + "\n".join(lines()) + current[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="rewrite the map in ARCHITECTURE.md")
    group.add_argument("--check", action="store_true", help="exit 1 if ARCHITECTURE.md's map is out of date")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        print("\n".join(lines()))
        return 0
    current = PAGE.read_text(encoding="utf-8")
    wanted = page(current)
    if args.write:
        PAGE.write_text(wanted, encoding="utf-8")
        return 0
    if args.check:
        if wanted == current:
            return 0
        sys.stderr.writelines(
            difflib.unified_diff(
                current.splitlines(True), wanted.splitlines(True), "ARCHITECTURE.md", "the map as the modules say it"
            )
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
