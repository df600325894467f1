"""Languages: the CJK character ranges, telling a text's language, and every per-language word the worker writes."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Unicode ranges, written once: token counting, language detection and memory normalization share them.
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs, extension A, compatibility ideographs
KANA = "\u3040-\u30ff\u31f0-\u31ff"  # hiragana, katakana, katakana phonetic extensions
HANGUL = "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"  # syllables, jamo, compatibility jamo
CJK_PUNCTUATION = "\u3000-\u303f\uff00-\uffef"  # ideographic punctuation, full- and half-width forms
CJK_LETTERS = HAN + KANA + HANGUL

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
    """Everything the worker writes in a language other than the model's own text."""

    code: str
    name: str  # as the summarizer's prompt names it
    note_headings: dict[str, str]  # one per note part (worker.answer.NOTE_PARTS)
    memory_title: str  # the heading of MEMORY.md's managed part
    memory_groups: dict[str, str]  # one per fact category (worker.dedup.CATEGORIES)


LANGUAGES: dict[str, Language] = {
    "en": Language(
        "en", "English",
        {"topics": "Topics", "preferences": "User preferences", "decisions": "Decisions", "tasks": "Tasks",
         "technical_issues": "Technical issues and solutions", "insights": "Key insights"},
        "Remembered from conversations",
        {"preferences": "Preferences", "decisions": "Decisions", "configuration": "Configuration",
         "solutions": "Solutions", "people": "People", "projects": "Projects", "other": "Other"},
    ),
    "zh": Language(
        "zh", "Chinese (简体中文)",
        {"topics": "主要话题", "preferences": "用户偏好", "decisions": "重要决定", "tasks": "待办事项",
         "technical_issues": "技术问题与解决方案", "insights": "关键洞察"},
        "对话中记住的信息",
        {"preferences": "偏好", "decisions": "决定", "configuration": "配置", "solutions": "解决方案",
         "people": "人物", "projects": "项目", "other": "其他"},
    ),
    "ja": Language(
        "ja", "Japanese (日本語)",
        {"topics": "話題", "preferences": "ユーザーの好み", "decisions": "決定事項", "tasks": "タスク",
         "technical_issues": "技術的な問題と解決策", "insights": "重要な気づき"},
        "会話から覚えたこと",
        {"preferences": "好み", "decisions": "決定事項", "configuration": "設定", "solutions": "解決策",
         "people": "人物", "projects": "プロジェクト", "other": "その他"},
    ),
    "ko": Language(
        "ko", "Korean (한국어)",
        {"topics": "주제", "preferences": "사용자 선호", "decisions": "결정 사항", "tasks": "할 일",
         "technical_issues": "기술 문제와 해결책", "insights": "핵심 인사이트"},
        "대화에서 기억한 내용",
        {"preferences": "선호", "decisions": "결정", "configuration": "설정", "solutions": "해결책",
         "people": "사람", "projects": "프로젝트", "other": "기타"},
    ),
}


def language(code: str) -> Language:
    """The table for `code`; English for a language without one."""
    return LANGUAGES.get(code, LANGUAGES["en"])
