"""Pure text decisions for memory: normalization, near-duplicate search, and importance scoring of facts."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

from rapidfuzz import fuzz, process

from nanobot_hooks.text import CJK_LETTERS
from worker.memory.entries import Fact
from worker.text.language import CATEGORIES

# A fact more than this similar to a text the file holds (or equal to it) is a duplicate and skipped.
DEFAULT_THRESHOLD = 0.8
# Below this a fact does not enter long-term memory (the "important" bar on the 1-5 scale).
MIN_IMPORTANCE = 3

_APOSTROPHES = "'’‘′`´"
_SPACE_NEAR_CJK = re.compile(f"(?<=[{CJK_LETTERS}]) | (?=[{CJK_LETTERS}])")
_SPACES = re.compile(r"\s+")


def _punctuation_table() -> dict[int, str]:
    # Apostrophes join ("don't" == "dont"); other punctuation (。、「」 too) separates words.
    # A translate table over the Basic Multilingual Plane: a per-character category() call made
    # normalizing 10,000 facts take most of a merge.
    table = {code: " " for code in range(0x10000) if unicodedata.category(chr(code))[0] == "P"}
    table.update({ord(ch): "" for ch in _APOSTROPHES})
    return table


_PUNCTUATION = _punctuation_table()


def _drop_punctuation(text: str) -> str:
    text = text.translate(_PUNCTUATION)
    if text and max(text) > "\uffff":  # rare: punctuation of historic scripts
        text = "".join(" " if unicodedata.category(ch)[0] == "P" else ch for ch in text)
    return text


def _step(text: str) -> str:
    # NFKC folds full-width Latin, digits and punctuation (，：（）) to their ASCII forms.
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _drop_punctuation(unicodedata.normalize("NFKC", text))
    text = _SPACES.sub(" ", text).strip()
    # Chinese and Japanese use no spaces: "用 Python" and "用Python" are the same text.
    return _SPACE_NEAR_CJK.sub("", text)


def normalize_uncached(text: str) -> str:
    """normalize's key, made afresh.

    For texts met once, which would only crowd the cache (a daily note's items: a daily job noting a 200 MB day kept
    65,536 of them, some 20 MB, with one_line's as many)."""
    result = _step(text)
    # NFKC after punctuation removal can compose again (a combining mark meets a new base); repeat to a fixpoint.
    for _ in range(4):
        again = _step(result)
        if again == result:
            break
        result = again
    return result


# A worker re-reads the same MEMORY.md lines on every merge: their keys are remembered, not made again.
@lru_cache(maxsize=65536)
def normalize(text: str) -> str:
    """The comparison key of a text: width, case, punctuation and spacing differences removed."""
    return normalize_uncached(text)


_DIGITS = re.compile(r"\d+")
_NEGATIONS = re.compile(
    r"\b(?:not|no|never|none|nothing|nor|neither|without|cannot|dont|doesnt|didnt|isnt|arent|wasnt|werent"
    r"|wont|cant|couldnt|shouldnt|wouldnt|hasnt|havent)\b"
    r"|不|没|沒|无|無|非|别|別|未|勿|ない|ません|なかった|않|못|없|아니|안"
)


def _signature(norm: str) -> tuple[tuple[str, ...], frozenset[str]]:
    # Numbers and negations carry the meaning of a fact but few characters: "port 8080" vs "port 8081",
    # "喜欢咖啡" vs "不喜欢咖啡" score above 0.8 and still say different things. Numbers in order:
    # "moved from 3 to 4" is not "moved from 4 to 3".
    return tuple(_DIGITS.findall(norm)), frozenset(_NEGATIONS.findall(norm))


def similarity(a: str, b: str) -> float:
    """Character-level similarity 0..1 of two normalized texts (works for CJK text without spaces)."""
    return fuzz.ratio(a, b) / 100.0


def near_duplicate(a: str, b: str, threshold: float = DEFAULT_THRESHOLD) -> bool:
    """Do two normalized texts say the same thing?"""
    if a == b:
        return True
    if not a or not b:
        return False
    return similarity(a, b) >= threshold and _signature(a) == _signature(b)


def find_duplicate(norm: str, choices: Sequence[str], threshold: float = DEFAULT_THRESHOLD) -> int | None:
    """Index of a choice (normalized) that `norm` duplicates, or None."""
    if not norm:
        return None
    matches = process.extract(
        norm, choices, scorer=fuzz.ratio, processor=None, score_cutoff=threshold * 100, limit=None
    )
    signature = _signature(norm)
    for _, _, index in sorted(matches, key=lambda m: -m[1]):
        if choices[index] == norm or _signature(choices[index]) == signature:
            return int(index)
    return None


def best_match(norm: str, choices: Sequence[str], threshold: float = DEFAULT_THRESHOLD) -> int | None:
    """Index of the most similar choice over the threshold, numbers and negations ignored (for corrections)."""
    if not norm or not choices:
        return None
    found = process.extractOne(norm, choices, scorer=fuzz.ratio, processor=None, score_cutoff=threshold * 100)
    return None if found is None else int(found[2])


NEAR = 0.6  # a text this similar to another (its words in any order, or a part of it) is named as a near one


def near_matches(norm: str, choices: Sequence[str], limit: int = 3, threshold: float = NEAR) -> list[int]:
    """Indexes of the choices nearest to `norm` over the threshold, nearest first.

    The words compared in any order, and a part counts (a fact's few words find it)."""
    if not norm or not choices:
        return []
    found = process.extract(
        norm, choices, scorer=fuzz.token_set_ratio, processor=None, limit=limit, score_cutoff=threshold * 100
    )
    return [int(index) for _, _, index in found]


# The keyword rules (a score >= 2 is important), in English, Chinese, Japanese and Korean.
# English words match whole (so "api" is not found in "rapid"); CJK words anywhere (they have no spaces).
_RULES: dict[str, tuple[int, str, str]] = {
    "remember": (
        3,
        r"remember(?:ed|s)?|memori[sz]e|note that|keep in mind|do(?:n'?t| not) forget",
        "记住|记录|记得|别忘|別忘|記住|記得|覚えて|覚えておい|忘れない|メモして|기억|잊지",
    ),
    "configuration": (
        2,
        r"api|config\w*|settings?|set up|setup|env(?:ironment)? var\w*|keys?|tokens?"
        r"|endpoints?|ports?|credentials?",
        "配置|密钥|设置|設置|设定|環境変数|設定|構成|キー|トークン|설정|구성|환경 ?변수|키|토큰",
    ),
    "preferences": (
        1,
        r"prefer\w*|likes?|liked|loves?|hates?|dislikes?|styles?|models?|favou?rites?|always|never",
        "喜欢|喜歡|偏好|风格|風格|模型|习惯|習慣|讨厌|好き|好み|嫌い|スタイル|モデル|좋아|선호|싫어|스타일|모델",
    ),
    "solutions": (
        2,
        r"problems?|solved|solutions?|solves?|fix\w*|bugs?|resolved|workarounds?|errors?",
        "问题|問題|解决|解決|修复|修復|报错|錯誤|错误|バグ|修正|エラー|문제|해결|수정|버그|오류|에러",
    ),
}
# Latin-letter lookarounds, not \b: "API密钥" has no word boundary between "I" and "密".
_RULE_PATTERNS = {
    name: re.compile(rf"(?i)(?<![a-z])(?:{english})(?![a-z])|{cjk}") for name, (_, english, cjk) in _RULES.items()
}


def keyword_hits(text: str) -> list[str]:
    """Which of the keyword rules a text triggers."""
    return [name for name, pattern in _RULE_PATTERNS.items() if pattern.search(text)]


def keyword_score(text: str) -> int:
    """The keyword score: remember +3, configuration +2, preference +1, problem solved +2."""
    return sum(_RULES[name][0] for name in keyword_hits(text))


def importance(fact: Fact) -> int | None:
    """The fact's importance 1..5 for long-term memory, or None when it does not belong there.

    The model's own importance and tag come first; the keyword rules can only raise it
    (the model under-rates "remember this" and configuration facts more often than it over-rates them).
    """
    if fact.tag == "ephemeral":
        return None
    level = fact.importance
    hits = keyword_hits(fact.text)
    if "remember" in hits:
        level = max(level, 4)
    if keyword_score(fact.text) >= 2:
        level = max(level, MIN_IMPORTANCE)
    if fact.tag in ("permanent", "correction"):
        level = max(level, MIN_IMPORTANCE)
    return level if level >= MIN_IMPORTANCE else None


def category(fact: Fact) -> str:
    """The model's category when it is one of ours; otherwise guessed from the keywords."""
    given = (fact.category or "").strip().casefold()
    if given in CATEGORIES:
        return given
    for name in ("configuration", "solutions", "preferences"):
        if name in keyword_hits(fact.text):
            return name
    return "other"
