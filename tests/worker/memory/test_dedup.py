"""Normalization, near-duplicate search and the importance rules, in four languages."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.memory.dedup import (
    category,
    find_duplicate,
    importance,
    keyword_hits,
    keyword_score,
    near_duplicate,
    normalize,
)
from worker.memory.entries import Fact


@given(st.text())
def test_normalize_is_idempotent(text: str) -> None:
    once = normalize(text)
    assert normalize(once) == once


def _full_width(text: str) -> str:
    return "".join("\u3000" if ch == " " else chr(ord(ch) + 0xFEE0) if "!" <= ch <= "~" else ch for ch in text)


@given(st.text(string.ascii_letters + string.digits + string.punctuation + " ", max_size=60))
def test_full_width_and_case_variants_normalize_alike(text: str) -> None:
    assert normalize(_full_width(text)) == normalize(text)
    assert normalize(text.upper()) == normalize(text.lower())


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("User prefers Python 3.12, not Java.", "user prefers python 3.12 not java"),
        ("User prefers Python 3.12, not Java.", "Ｕｓｅｒ ｐｒｅｆｅｒｓ Ｐｙｔｈｏｎ ３．１２，ｎｏｔ Ｊａｖａ．"),
        ("用户偏好：Python，不用 Java。", "用户偏好:Python,不用Java."),
        ("「設定」は ~/.config/app にある", "“設定”は~/.config/appにある"),
        ("저는 파이썬을 좋아합니다.", "저는 파이썬을 좋아합니다"),
        ("I don't like tea", "I dont like TEA!"),
    ],
)
def test_punctuation_width_case_and_spacing_differences_vanish(a: str, b: str) -> None:
    assert normalize(a) == normalize(b)


def test_near_duplicates_over_the_threshold() -> None:
    a = normalize("The user prefers short answers in Chinese")
    assert near_duplicate(a, normalize("The user prefers short answers in Chinese."))
    assert near_duplicate(a, normalize("the user prefers shorter answers in chinese"))
    assert not near_duplicate(a, normalize("The user works at a bakery in Lisbon"))
    assert near_duplicate(normalize("用户喜欢简洁的回答"), normalize("用户喜欢简洁回答"))


def test_numbers_and_negations_keep_similar_texts_apart() -> None:
    # Both pairs score about 0.89 character similarity, over the 0.8 threshold.
    assert not near_duplicate(normalize("gateway listens on port 8080"), normalize("gateway listens on port 8081"))
    assert not near_duplicate(normalize("用户喜欢咖啡"), normalize("用户不喜欢咖啡"))
    assert not near_duplicate(normalize("the user likes tea"), normalize("the user doesn't like tea"))
    # The same numbers in another order say something else too.
    assert not near_duplicate(normalize("worker 0 round 1 likes tea"), normalize("worker 1 round 0 likes tea"))


def test_threshold_is_a_parameter() -> None:
    a, b = normalize("deploys go through staging first"), normalize("deploys go via staging first")
    assert near_duplicate(a, b, 0.8)
    assert not near_duplicate(a, b, 0.95)


def test_find_duplicate_returns_the_matching_index() -> None:
    choices = [normalize(t) for t in ("likes green tea", "uses vim", "port 8080 for the gateway")]
    assert find_duplicate(normalize("Uses Vim."), choices) == 1
    assert find_duplicate(normalize("port 9090 for the gateway"), choices) is None
    assert find_duplicate("", choices) is None


@pytest.mark.parametrize(
    ("text", "rules"),
    [
        ("Remember that the standup is at 9", ["remember"]),
        ("记住我的生日是五月一日", ["remember"]),
        ("会議は9時だと覚えておいて", ["remember"]),
        ("회의는 9시라고 기억해 줘", ["remember"]),
        ("The DeepSeek API key is set in providers.deepseek.apiKey", ["configuration"]),
        ("配置文件在 ~/.nanobot/config.json", ["configuration"]),
        ("設定ファイルは ~/.config にある", ["configuration"]),
        ("설정 파일은 홈 폴더에 있다", ["configuration"]),
        ("The user prefers dark mode", ["preferences"]),
        ("用户喜欢简洁的回答", ["preferences"]),
        ("ユーザーは短い答えが好き", ["preferences"]),
        ("사용자는 짧은 답변을 선호한다", ["preferences"]),
        ("Fixed the login bug by clearing the cache", ["solutions"]),
        ("登录问题已通过清除缓存解决", ["solutions"]),
        ("ログインのバグはキャッシュ削除で解決", ["solutions"]),
        ("로그인 문제는 캐시 삭제로 해결", ["solutions"]),
        ("rapid growth of the garden", []),
    ],
)
def test_seed_keyword_rules_in_four_languages(text: str, rules: list[str]) -> None:
    assert keyword_hits(text) == rules


def test_seed_scores() -> None:
    assert keyword_score("记住 API 配置") == 3 + 2
    assert keyword_score("用户喜欢简洁") == 1


def test_importance_combines_the_model_the_tag_and_the_keywords() -> None:
    assert importance(Fact(text="it rains today", tag="ephemeral", importance=5)) is None
    assert importance(Fact(text="remember the API key is in providers.x", tag="ephemeral")) is None
    assert importance(Fact(text="the cat is grey", importance=2)) is None
    assert importance(Fact(text="the cat is grey", importance=5)) == 5
    assert importance(Fact(text="the cat is grey", tag="permanent", importance=1)) == 3
    # The seed's bar: configuration (2) or a solved problem (2) is important even when the model said 2.
    assert importance(Fact(text="proxy configured in ~/.npmrc", importance=2)) == 3
    assert importance(Fact(text="修复了登录问题：清除缓存", importance=1)) == 3
    assert importance(Fact(text="记住：周五不开会", importance=2)) == 4
    assert importance(Fact(text="用户喜欢简洁", importance=2)) is None, "a preference word alone scores 1"


def test_category_from_the_model_or_the_keywords() -> None:
    assert category(Fact(text="x", category="People")) == "people"
    assert category(Fact(text="Ollama runs on port 11434 (config)", category="nonsense")) == "configuration"
    assert category(Fact(text="用户喜欢深色主题")) == "preferences"
    assert category(Fact(text="修复了登录问题")) == "solutions"
    assert category(Fact(text="the cat is grey")) == "other"
