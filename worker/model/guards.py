"""Guards on a new summary (pure).

Never commit a refusal, an error text or a placeholder, nor one that lost what the previous summary held. Prose and JSON
answers are judged alike."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache

from nanobot_hooks.text import HAN, HANGUL

# A refusal or apology opens the answer; a real summary starts with its content (or a heading).
_REFUSAL = re.compile(
    r"(?i)^\W*(?:"
    r"(?:i'?m|i am)\s+(?:sorry|afraid|unable|not able)|i\s+apologi[sz]e|sorry(?![-\w])|apologies(?![-\w])"
    r"|i\s+(?:can(?:'|no)?t|cannot|won'?t|will not|am not able to)\b|as an ai\b"
    r"|很抱歉|抱歉|对不起|對不起|我无法|我無法|我不能|无法(?:协助|帮助|提供|完成|总结)|作为(?:一个)?(?:AI|人工智能)"
    r"|申し訳|すみません|できません|お手伝いできません|죄송|할 수 없|도와드릴 수 없"
    r")"
)
# An error text instead of an answer (a proxy's or provider's message passed through as content).
_ERROR = re.compile(
    r"(?i)^\W*(?:(?:error|exception)\s*(?:[:：]|\d{3}\b)|traceback \(most recent call last\)"
    r"|internal server error|bad gateway|service unavailable|rate limit (?:reached|exceeded)|request failed"
    r"|\{\s*\"error\"|错误[:：]|エラー[:：]|오류[:：])"
)
_PLACEHOLDERS = {
    "",
    "n/a",
    "na",
    "none",
    "null",
    "nothing",
    "no summary",
    "summary unavailable",
    "summary",
    "todo",
    "tbd",
    "placeholder",
    "empty",
    "unknown",
    "无",
    "暂无",
    "没有",
    "なし",
    "없음",
}
# A list item that says there is nothing: "none", "No new facts", "nothing to note".
_NOTHING = re.compile(
    r"^(?:none|nothing|no(?: new)? (?:facts?|notes?|topics?|decisions?|tasks?|issues?|preferences?"
    r"|insights?|items?|entries))(?: (?:to (?:note|add|report)|noted|worth (?:noting|keeping)"
    r"|today|yet|so far|found|mentioned))?$"
)
_TEMPLATE = re.compile(r"^[\[<{(]\s*[\w\s.-]{0,40}\s*[\]>})]$")  # "[summary]", "<summary here>", "{summary}"
_REFUSAL_WINDOW = 200  # how far into the answer a refusal is looked for
# A refusal or an error text is short; a real summary that happens to open with "Error handling..." or
# "Sorry, ..." (quoting the user) is longer than this, and only its first lines are looked at anyway.
SHORT = 600


def unusable(summary: str) -> str | None:
    """Why `summary` must not replace the session's summary (a refusal, an error, a placeholder), or None."""
    text = summary.strip()
    head = re.sub(r"^(?:#+\s*[^\n]*\n+)?", "", text)[:_REFUSAL_WINDOW]  # a heading line may precede it
    plain = re.sub(r"[\W_]+", " ", text.casefold()).strip()
    if {plain, plain.replace(" ", "")} & _PLACEHOLDERS or len(plain) < 3 or _TEMPLATE.match(text):
        return f"a placeholder instead of a summary ({_quote(text)})"
    if len(text) < SHORT and _ERROR.match(head):
        return f"an error text instead of a summary ({_quote(text)})"
    if len(text) < SHORT and _REFUSAL.match(head):
        return f"a refusal or an apology instead of a summary ({_quote(text)})"
    return None


def placeholder(item: str) -> bool:
    """Whether a note's item or a fact says there is nothing ("None", "N/A", "- ...", "No new facts")."""
    plain = re.sub(r"[\W_]+", " ", item.casefold()).strip()
    return not plain or bool({plain, plain.replace(" ", "")} & _PLACEHOLDERS) or bool(_NOTHING.match(plain))


def _quote(text: str) -> str:
    line = " ".join(text.split())
    return repr(line if len(line) <= 60 else line[:57] + "...")


# Identifiers a summary must keep verbatim, in any script. Numbers of one digit and common words are not.
_PATTERNS = [
    r"https?://[^\s<>\"'`)\]，。、]+",  # URLs
    r"[\w.+-]+@[\w-]+\.[\w.-]+",  # e-mail addresses
    r"(?:~|\.{1,2})?(?:/[\w.\-]+){2,}|[A-Za-z]:\\[\w\\.\-]+|[\w\-]+(?:/[\w.\-]+)+\.\w+",  # paths
    r"`[^`\n]{2,60}`",  # code spans
    r"\b[A-Za-z][\w\-]*\d[\w\-.]*|\b\d+[A-Za-z][\w\-]*",  # ids mixing letters and digits: v1.2, gpt4o, 3f9a
    r"\d+(?:[.,:]\d+)*",  # numbers (kept when of two characters or more)
    r"\b[A-Z][a-z]+[A-Z]\w*|\b[A-Z]{2,}\b",  # CamelCase, ACRONYMS
    r"[「『《【“\"]([^」』》】”\"\n]{1,40})[」』》】”\"]",  # quoted terms (names in CJK are quoted or bracketed)
    r"[\u30a1-\u30faー]{3,}",  # katakana words: names and loanwords
    rf"[{HANGUL}]{{2,}}(?=[{HANGUL}]?\s*(?:씨|님|사장|팀|프로젝트))",  # Korean names before a title
    rf"[{HAN}]{{2,4}}(?=(?:先生|女士|老师|总|经理|公司|项目|さん|様))",  # Han names before a title
]
# The characters without which a pattern cannot match. The e-mail and path patterns try a run of word
# characters at every character of every word (the most costly part of the scan), so a text without any
# of their characters is scanned without them: the same matches, found sooner.
_NEEDS = {_PATTERNS[1]: "@", _PATTERNS[2]: "/\\"}


@lru_cache(maxsize=8)
def _identifier_pattern(absent: frozenset[str]) -> re.Pattern[str]:
    kept = [p for p in _PATTERNS if not (p in _NEEDS and set(_NEEDS[p]) <= absent)]
    return re.compile("|".join(f"(?:{p})" for p in kept))


def _scanner(text: str) -> re.Pattern[str]:
    return _identifier_pattern(frozenset(c for c in "@/\\" if c not in text))


# A capitalized word is a name unless it opens a line, a bullet or a sentence.
_NAME = re.compile(r"(?<![.!?:\-*#>])(?<![.!?:] )(?<!- )(?<!\* )(?<!# )(?<!\n)\b[A-Z][a-z]{2,}\b")
# Capitalized words that are sentence openers or our own section headings, not names.
_COMMON = {
    "the",
    "this",
    "that",
    "these",
    "those",
    "then",
    "there",
    "they",
    "what",
    "when",
    "where",
    "which",
    "who",
    "user",
    "users",
    "assistant",
    "goals",
    "goal",
    "happened",
    "important",
    "details",
    "decisions",
    "decision",
    "open",
    "tasks",
    "task",
    "summary",
    "previous",
    "new",
    "and",
    "but",
    "also",
    "for",
    "from",
    "with",
    "not",
    "yes",
    "note",
    "notes",
    "topics",
    "key",
    "insights",
    "today",
    "tomorrow",
    "yesterday",
    "json",
    "ok",
    "api",
}


def _norm(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def identifiers(text: str) -> set[str]:
    """The identifiers of `text`, normalized (width and case folded)."""
    # Each distinct match is normalized once: a long transcript repeats the same numbers and names
    # hundreds of times (the job measures the coverage of every summary with this).
    raw = {match.group(1) or match.group(0) for match in _scanner(text).finditer(text)}  # group 1: a quoted term
    first_word = len(text) - len(text.lstrip())
    raw.update(match.group(0) for match in _NAME.finditer(text) if match.start() > first_word)  # not the first word
    found: set[str] = set()
    for value in raw:
        value = _norm(value.strip("`\"'.,;:!?)]}>。，、"))
        if len(value) >= 2 and value not in _COMMON:
            found.add(value)
    return found


def kept_share(source: Iterable[str], target: str) -> tuple[int, int]:
    """How many of the identifiers `source` are still in `target`, out of how many."""
    wanted = set(source)
    haystack = _norm(target)
    return sum(1 for value in wanted if value in haystack), len(wanted)


# Fewer identifiers than this in the previous summary: too few to judge by.
MIN_IDENTIFIERS = 3


def carry_forward(previous: str, new: str) -> float | None:
    """The share of the previous summary's identifiers the new one still holds.

    None when there are too few to judge (a first summary, a summary of small talk)."""
    kept, total = kept_share(identifiers(previous), new)
    return kept / total if total >= MIN_IDENTIFIERS else None


def check(previous: str, new: str, min_carry: float) -> float | None:
    """The carry-forward share of `new`; raises ValueError with the reason when it must not be committed."""
    reason = unusable(new)
    if reason is not None:
        raise ValueError(reason)
    share = carry_forward(previous, new)
    if share is not None and share < min_carry:
        kept, total = kept_share(identifiers(previous), new)
        raise ValueError(
            f"the new summary keeps {kept} of the previous one's {total} identifiers ({share:.0%}); "
            f"at least {min_carry:.0%} are required (NANOBOT_SUMMARY_MIN_CARRY)"
        )
    return share
