"""Languages: telling a text's language, and the per-language words (languages.toml)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

# The CJK ranges are written once, in the contract (the recall index cuts words by them).
from nanobot_hooks.text import HAN, HANGUL, KANA

# The parts of one day's notes, in the order the notes file shows them; the answer's schema asks for them.
NOTE_FIELDS = ("topics", "preferences", "decisions", "tasks", "technical_issues", "insights")
# The groups of MEMORY.md's part, in their order there; a fact's `category` names one.
CATEGORIES = ("preferences", "decisions", "configuration", "solutions", "people", "projects", "other")

_HAN = re.compile(f"[{HAN}]")
_KANA = re.compile(f"[{KANA}]")
_HANGUL = re.compile(f"[{HANGUL}]")
_LETTER = re.compile(r"[^\W\d_]")


def text_language(text: str, default: str = "en") -> str:
    """zh / ja / ko by the share of their scripts among the letters (kana first: Japanese uses kanji too)."""
    letters = len(_LETTER.findall(text)) or 1
    if len(_KANA.findall(text)) / letters > 0.05:
        return "ja"
    if len(_HANGUL.findall(text)) / letters > 0.2:
        return "ko"
    if len(_HAN.findall(text)) / letters > 0.2:
        return "zh"
    return default


@dataclass(frozen=True)
class Language:
    """Everything the worker writes in a language, besides the model's own text."""

    code: str
    name: str  # as the summarizer's prompt names it
    memory_title: str  # the heading of MEMORY.md's managed part
    notes: tuple[str, ...]  # a heading per note field, in the order of NOTE_FIELDS
    groups: tuple[str, ...]  # a heading per fact category, in the order of CATEGORIES

    @property
    def note_headings(self) -> dict[str, str]:
        return dict(zip(NOTE_FIELDS, self.notes, strict=True))

    @property
    def memory_groups(self) -> dict[str, str]:
        return dict(zip(CATEGORIES, self.groups, strict=True))


def _load(path: Path) -> dict[str, Language]:
    table = tomllib.loads(path.read_text(encoding="utf-8"))
    return {
        code: Language(code, row["name"], row["memory_title"], tuple(row["notes"]), tuple(row["groups"]))
        for code, row in table.items()
    }


LANGUAGES: dict[str, Language] = _load(Path(__file__).with_name("languages.toml"))


def language(code: str) -> Language:
    """The table for `code`; English for a language without one."""
    return LANGUAGES.get(code, LANGUAGES["en"])
