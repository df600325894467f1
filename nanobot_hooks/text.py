"""Text helpers both sides share.

The letters of Chinese, Japanese and Korean, which the recall index and its search cut into the same tokens
(contract/recall.py's index_text, recall/query.py) and the worker's token estimates and name guards recognize."""

from __future__ import annotations

import re

__all__ = ["CJK_LETTERS", "CJK_RUN", "HAN", "HANGUL", "KANA", "cjk_grams"]

# Chinese, Japanese and Korean letters: their words are not separated by spaces, so the index cuts their runs
# into overlapping two-letter tokens (most Chinese words are two letters) and the search asks for the same.
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs, extension A, compatibility ideographs
KANA = "\u3040-\u30ff\u31f0-\u31ff"  # hiragana, katakana, katakana phonetic extensions
HANGUL = "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"  # syllables, jamo, compatibility jamo
CJK_LETTERS = HAN + KANA + HANGUL
CJK_RUN = re.compile(f"[{CJK_LETTERS}]+")


def cjk_grams(run: str) -> list[str]:
    """The tokens a run of CJK letters is indexed as.

    Its overlapping bigrams and its last letter alone, so that every letter starts a token (a one-letter word is found
    as a prefix: `"猫"*`)."""
    return [run[i : i + 2] for i in range(len(run) - 1)] + [run[-1]]
