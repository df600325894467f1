"""What a recall query asks for (pure).

Its words as the index holds them, stop words and question words left out, and the days it names ("in October 2023",
"last week", "上个月").

The tool is asked in keywords or in the user's own question; either way only the words that can tell passages
apart are searched for. Words are matched as the index stores them (contract.index_text): Latin words whole
(SQLite's porter stemmer makes "shows" find "show"), a run of CJK letters as its bigrams, and a CJK letter
standing alone as the prefix of a token. A query of nothing but stop words is searched as it is.
"""

from __future__ import annotations

import re
from calendar import monthrange
from dataclasses import dataclass
from datetime import date as Date
from datetime import timedelta

from nanobot_hooks.text import CJK_RUN, cjk_grams

MAX_TERMS = 64  # a 200-character Chinese question is about 60 bigrams; nothing a user types is cut

# Function words and question words: in a question they are most of the words, and they match everywhere.
ENGLISH_STOP = frozenset(
    """
a about above after again against all also am an and any are as at be because been before being below between
both but by can could did do does doing done down during each ever few for from further get got had has have
having he her here hers herself him himself his how i if in into is it its itself just let me might more most
much must my myself no nor not now of off on once only or other our ours ourselves out over own please same
she should so some such than that the their theirs them themselves then there these they this those through
to too under until up upon very was we were what whatever when where whether which while who whom whose why
will with would you your yours yourself yourselves tell told know remember recall said say says mention
mentioned talk talked discuss discussed ask asked thing things anything something kind sort go goes going
went gone
""".split()
)
# Words that split a CJK run, longest first (什么时候 before 什么): question words, pronouns, Japanese particles
# and endings, which sit between the words that matter.
CJK_STOP = sorted(
    """
什么时候 为什么 怎么样 怎么 什么 哪里 哪儿 哪个 哪些 哪天 多少 有没有 是不是 我们 你们 他们 她们 咱们 这个 那个 这些
那些 一个 一下 告诉 记得 提到 说过 关于 之前 以前 时候 知道 请问 上次
何 なに いつ どこ だれ 誰 どう なぜ どの どんな ですか でした ました です ます した して ください
の を は が に で と も へ や か ね よ
""".split(),
    key=len,
    reverse=True,
)
# Chinese function letters: they stay inside a run, where they make a word's bigram ("买了" of 买, "去了" of 去,
# as the answer says it too), but a bigram of two of them, or one alone, is no term.
CJK_WEAK = frozenset("的了吗呢吧啊呀我你他她它是也都和很就还又谁几")
_CJK_STOP = re.compile("|".join(map(re.escape, CJK_STOP)))
_ISO_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")  # the tool's date_from and date_to (check_day)
_WORD = re.compile(r"[^\W_]+")  # what SQLite's unicode61 tokenizer takes as one word


@dataclass(frozen=True)
class Asked:
    """A query, read: the FTS5 terms to search for, and the days it names (None: no limit)."""

    terms: tuple[str, ...]
    since: str | None = None
    until: str | None = None
    named: bool = False  # the days are the query's words' (let go when nothing is in them), not the tool's dates
    # The letters of its CJK words, each as a term of its own that weighs less (recall.LETTER_SHARE): a
    # paraphrase often keeps one letter of a word (演出 and 演唱会, 旅游 and 旅行, 报名 and 报了).
    letters: tuple[str, ...] = ()


def read_query(query: str, today: Date) -> Asked:
    """The terms and the named days of one query.

    A query of stop words alone is searched as it is, unless it names days ("what did we say last week": the passages of
    those days)."""
    since, until, rest = named_days(query, today)
    found = terms(rest, keep_stop_words=since is None)
    return Asked(found, since, until, since is not None, tuple(t for t in letters(rest) if t not in found))


def check_day(value: str | None, name: str) -> str | None:
    """A YYYY-MM-DD date or None; raises ValueError naming the parameter."""
    if value is None or value == "":
        return None
    try:
        if not _ISO_DAY.match(value):
            raise ValueError
        return Date.fromisoformat(value).isoformat()
    except ValueError:
        raise ValueError(f"{name} must be a date written YYYY-MM-DD, not {value!r}") from None


def terms(text: str, keep_stop_words: bool = True) -> tuple[str, ...]:
    """The FTS5 terms of a text, each once.

    Its words less the stop words (all of them when that leaves nothing and `keep_stop_words`), CJK runs as bigrams, in
    the order they appear, at most MAX_TERMS."""
    found = _terms(text, drop_stop=True) or (_terms(text, drop_stop=False) if keep_stop_words else [])
    return tuple(dict.fromkeys(found))[:MAX_TERMS]


def _terms(text: str, drop_stop: bool) -> list[str]:
    found: list[str] = []
    at = 0
    for run in CJK_RUN.finditer(text):
        found += _latin(text[at : run.start()], drop_stop)
        pieces = _CJK_STOP.split(run.group()) if drop_stop else [run.group()]
        for piece in filter(None, pieces):
            found += _cjk(piece, drop_stop)
        at = run.end()
    return found + _latin(text[at:], drop_stop)


def letters(text: str) -> tuple[str, ...]:
    """The letters of the text's CJK words of two letters or more (function letters left out), as terms."""
    found = [
        letter
        for run in CJK_RUN.findall(text)
        for piece in _CJK_STOP.split(run)
        if len(piece) > 1
        for letter in piece
        if letter not in CJK_WEAK
    ]
    return tuple(dict.fromkeys(phrase(letter) + "*" for letter in found))[:MAX_TERMS]


def _cjk(piece: str, drop_stop: bool) -> list[str]:
    """A CJK run's bigrams (a letter alone: the prefix of a token), less those of function letters alone."""
    if len(piece) == 1:
        return [] if drop_stop and piece in CJK_WEAK else [phrase(piece) + "*"]
    grams = cjk_grams(piece)[:-1]
    return [phrase(g) for g in grams if not (drop_stop and set(g) <= CJK_WEAK)]


def _latin(text: str, drop_stop: bool) -> list[str]:
    """Words of two letters or more, and digits.

    A chunk of several words without spaces ("zone-11", "v1.2.3") is also asked for whole, as all its words together
    (`together`), which passages holding it score more for."""
    found: list[str] = []
    for chunk in text.split():
        words = [w.casefold() for w in _WORD.findall(chunk) if len(w) > 1 or w.isdigit()]
        if len(words) > 1:
            found.append(together(words))
        found += [phrase(w) for w in words if not (drop_stop and w in ENGLISH_STOP)]
    return found


def phrase(word: str) -> str:
    """An FTS5 string: the word as the tokenizer reads it, never as query syntax."""
    return '"' + word.replace('"', '""') + '"'


def together(words: list[str]) -> str:
    """An FTS5 query for passages holding all these words, anywhere.

    The index keeps no word positions for a phrase (contract/recall.py, detail=none)."""
    return "(" + " AND ".join(map(phrase, words)) + ")"


# -- the days a query names -----------------------------------------------------------------------------

MONTHS = {
    name: n
    for n, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = "(" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d{2})"
Span = tuple[Date, Date]


def named_days(text: str, today: Date) -> tuple[str | None, str | None, str]:
    """The first span of days the text names, and the text without it.

    The first span of days the text names, as YYYY-MM-DD bounds, and the text without it (its words would only match
    passages that happen to say "October"). (None, None, text) when it names none."""
    for pattern, span in _PATTERNS:
        found = pattern.search(text)
        if found:
            days = span(found, today)
            if days is not None:
                rest = text[: found.start()] + " " + text[found.end() :]
                return days[0].isoformat(), days[1].isoformat(), rest
    return None, None, text


def _month(year: int, month: int) -> Span | None:
    if not 1 <= month <= 12:
        return None
    return Date(year, month, 1), Date(year, month, monthrange(year, month)[1])


def _day(year: int, month: int, day: int) -> Span | None:
    try:
        moment = Date(year, month, day)
    except ValueError:
        return None
    return moment, moment


def _recent_month(month: int, today: Date) -> Span | None:
    """The last such month that has begun: "in October" said in March means last October."""
    return _month(today.year if month <= today.month else today.year - 1, month)


def _recent_day(month: int, day: int, today: Date) -> Span | None:
    year = today.year if (month, day) <= (today.month, today.day) else today.year - 1
    return _day(year, month, day)


def _week(today: Date, weeks_back: int) -> Span:
    monday = today - timedelta(days=today.weekday() + 7 * weeks_back)
    return monday, min(monday + timedelta(days=6), today)


def _last_month(today: Date) -> Span | None:
    end = today.replace(day=1) - timedelta(days=1)
    return _month(end.year, end.month)


def _ago(count: int, unit: str, today: Date) -> Span:
    """ "3 days ago", "两周前": the day that long ago, give or take a day per week of distance."""
    days = count * {"day": 1, "week": 7, "month": 30, "year": 365}[unit]
    slack = max(1, days // 7)
    return today - timedelta(days=days + slack), today - timedelta(days=max(days - slack, 0))


_RELATIVE = {
    "today": lambda t: (t, t),
    "yesterday": lambda t: (t - timedelta(1), t - timedelta(1)),
    "this week": lambda t: _week(t, 0),
    "last week": lambda t: _week(t, 1),
    "this month": lambda t: _month(t.year, t.month),
    "last month": lambda t: _last_month(t),
    "this year": lambda t: (Date(t.year, 1, 1), t),
    "last year": lambda t: (Date(t.year - 1, 1, 1), Date(t.year - 1, 12, 31)),
    "今天": lambda t: (t, t),
    "昨天": lambda t: (t - timedelta(1), t - timedelta(1)),
    "前天": lambda t: (t - timedelta(2), t - timedelta(2)),
    "这周": lambda t: _week(t, 0),
    "本周": lambda t: _week(t, 0),
    "这个星期": lambda t: _week(t, 0),
    "上周": lambda t: _week(t, 1),
    "上个星期": lambda t: _week(t, 1),
    "上星期": lambda t: _week(t, 1),
    "这个月": lambda t: _month(t.year, t.month),
    "本月": lambda t: _month(t.year, t.month),
    "今年": lambda t: (Date(t.year, 1, 1), t),
    "去年": lambda t: (Date(t.year - 1, 1, 1), Date(t.year - 1, 12, 31)),
}
_RELATIVE["上个月"] = _RELATIVE["last month"]
_RELATIVE["the day before yesterday"] = _RELATIVE["前天"]
_NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "一": 1,
    "两": 2,
    "二": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
}
_UNITS = {
    "day": "day",
    "days": "day",
    "week": "week",
    "weeks": "week",
    "month": "month",
    "months": "month",
    "year": "year",
    "years": "year",
    "天": "day",
    "周": "week",
    "个星期": "week",
    "星期": "week",
    "个月": "month",
    "年": "year",
}


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBER_WORDS[word.lower()]


_I = re.IGNORECASE
_PATTERNS = [
    (re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)"), lambda m, t: _day(int(m[1]), int(m[2]), int(m[3]))),
    (
        re.compile(r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]"),
        lambda m, t: _day(int(m[1]), int(m[2]), int(m[3])),
    ),
    (re.compile(r"(\d{4})\s*年\s*(\d{1,2})\s*月"), lambda m, t: _month(int(m[1]), int(m[2]))),
    (re.compile(r"(?<!\d)(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]"), lambda m, t: _recent_day(int(m[1]), int(m[2]), t)),
    (
        re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", _I),
        lambda m, t: _day(int(m[3]), MONTHS[m[1].lower()], int(m[2])),
    ),
    (
        re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", _I),
        lambda m, t: _day(int(m[3]), MONTHS[m[2].lower()], int(m[1])),
    ),
    (re.compile(rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b", _I), lambda m, t: _month(int(m[2]), MONTHS[m[1].lower()])),
    (re.compile(rf"\b{_MONTH}\s+{_DAY}\b", _I), lambda m, t: _recent_day(MONTHS[m[1].lower()], int(m[2]), t)),
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}\b", _I), lambda m, t: _recent_day(MONTHS[m[2].lower()], int(m[1]), t)),
    (re.compile(r"(?<!\d)(\d{4})\s*年(?!\s*\d)"), lambda m, t: (Date(int(m[1]), 1, 1), Date(int(m[1]), 12, 31))),
    (re.compile(rf"\b(?:in|during|of)\s+{_YEAR}\b", _I), lambda m, t: (Date(int(m[1]), 1, 1), Date(int(m[1]), 12, 31))),
    (re.compile(r"(?<!\d)(\d{1,2})\s*月(?!\s*\d)"), lambda m, t: _recent_month(int(m[1]), t)),
    (re.compile(rf"\b(?:in|during|last)\s+{_MONTH}(?!\w)", _I), lambda m, t: _recent_month(MONTHS[m[1].lower()], t)),
    (
        re.compile(r"\b(\d+|an?|one|two|three|four|five|six)\s+(days?|weeks?|months?|years?)\s+ago\b", _I),
        lambda m, t: _ago(_count(m[1]), _UNITS[m[2].lower()], t),
    ),
    (
        re.compile(r"(\d+|[一两二三四五六])\s*(天|周|个星期|星期|个月|年)[之以]?前"),
        lambda m, t: _ago(_count(m[1]), _UNITS[m[2]], t),
    ),
    (
        re.compile(
            "|".join(
                rf"\b{re.escape(k)}\b" if k.isascii() else re.escape(k)
                for k in sorted(_RELATIVE, key=len, reverse=True)
            ),
            _I,
        ),
        lambda m, t: _RELATIVE[m[0].lower()](t),
    ),
]
