"""Token counting: cl100k from litellm's bundled files offline, and an estimate within 10% of it without them."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.corpora import CORPORA, REPEATED
from tests.support.paths import ROOT
from worker.text import tokens
from worker.text.language import HAN, HANGUL, KANA
from worker.text.tokens import cl100k_counter, count_message, estimate_tokens

# The estimate's constants were fitted on other texts (written for that and thrown away): the corpora check it
# on texts it never saw, one per kind of text the assistant reads.

BENCH_SOURCE = ROOT / "bench" / "bench_worker.py"  # in the benchmark too

CHINESE = (
    "在这个项目中，我们需要为个人助理实现一个后台摘要服务。当会话的上下文达到模型窗口的百分之六十时，"
    "系统会自动生成摘要，并在下一轮对话中使用。用户偏好使用中文回答，并且希望保留所有的文件路径和编号，"
    "例如 /home/user/project/config.yaml 和订单号 12345。数据库连接失败时，请先检查配置文件中的密码是否正确。"
)
SAMPLES = {
    "zh": CHINESE,
    "ja": "このプロジェクトでは、会話の古い部分を要約するバックグラウンドワーカーを作ります。"
    "設定ファイルは /etc/app.yaml です。",
    "ko": "이 프로젝트는 대화의 오래된 부분을 요약하는 백그라운드 작업자를 만듭니다. 설정 파일은 /etc/app.yaml 입니다.",
    "en": "The worker summarizes the older part of a conversation into a rolling summary, so long sessions "
    "stay inside the context window. Paths like /srv/app/config.yaml and ids such as 12345 stay verbatim.",
    "mixed": "好的，我来帮你检查 config.json 文件。The error says: KeyError: 'api_key' at line 42. 请确认已经设置。",
}
EVERY_TEXT = {
    **CORPORA,
    **REPEATED,
    **{f"sample {name}": text for name, text in SAMPLES.items()},
    "bench_worker.py": BENCH_SOURCE.read_text(encoding="utf-8"),
}


def exact(text: str) -> int:
    count = cl100k_counter()
    assert count is not None
    return count(text)


def test_cl100k_is_available_offline_through_litellm() -> None:
    assert exact("hello world") == 2


def test_the_corpora_are_what_they_claim_to_be() -> None:
    for name, text in CORPORA.items():
        lines = text.splitlines()
        assert 400 <= len(text) <= 3000, name  # a few hundred to a few thousand characters
        assert len(set(lines)) >= 0.75 * len(lines), name  # not a sentence repeated
    mixed = CORPORA["mixed chat, 2/3 Chinese"]
    han, latin = len(re.findall(f"[{HAN}]", mixed)), len(re.findall(r"[A-Za-z0-9]", mixed))
    assert 0.6 < han / (han + latin) < 0.75


@pytest.mark.parametrize("name", sorted(EVERY_TEXT))
def test_the_estimate_is_within_ten_percent_of_cl100k(name: str) -> None:
    text = EVERY_TEXT[name]
    truth = exact(text)
    error = (estimate_tokens(text) - truth) / truth
    assert abs(error) <= 0.10, f"{name}: estimate {estimate_tokens(text)}, cl100k {truth} ({error:+.1%})"


@pytest.mark.parametrize("name", ["Chinese chat", "Japanese chat", "Korean chat"])
def test_chars_over_four_is_far_off_for_cjk_text(name: str) -> None:
    # the usual shortcut undercounts CJK two to four times: the reason this module exists
    text = CORPORA[name]
    assert len(text) / 4 < 0.5 * exact(text)


def test_the_vocabulary_tables_are_cl100ks() -> None:
    from litellm.litellm_core_utils.default_encoding import encoding

    values, ranked = set(encoding.token_byte_values()), []
    for value in values:
        try:
            ranked.append((encoding.encode_single_token(value), value.decode("utf-8")))
        except UnicodeDecodeError:  # a token that is part of a character
            continue
    vocabulary = [token for _, token in sorted(ranked)]

    def no_token_for_the_first_two_bytes(ranges: str) -> str:
        found = []
        for low, high in re.findall(r"(.)-(.)", ranges):
            start = None
            for code in range(ord(low), ord(high) + 2):
                three = code <= ord(high) and chr(code).encode()[:2] not in values
                if three and start is None:
                    start = code
                elif not three and start is not None:
                    found.append(f"{chr(start)}-{chr(code - 1)}")
                    start = None
        return "".join(found)

    for ranges, prefix in ((HAN, "_HAN"), (KANA, "_KANA"), (HANGUL, "_HANGUL")):
        script = re.compile(f"[{ranges}]+")
        assert getattr(tokens, prefix + "_1") == "".join(
            sorted(t for t in vocabulary if len(t) == 1 and script.fullmatch(t))
        )
        assert getattr(tokens, prefix + "_3") == no_token_for_the_first_two_bytes(ranges)
        assert getattr(tokens, prefix + "_MERGES") == [t for t in vocabulary if len(t) > 1 and script.fullmatch(t)]
        assert getattr(tokens, prefix + "_SPACED") == [
            t[1:] for t in vocabulary if t[:1] == " " and script.fullmatch(t[1:])
        ]


@given(st.text(max_size=60))
def test_any_text_gets_a_count(text: str) -> None:
    count = estimate_tokens(text)
    assert isinstance(count, int) and (count == 0) == (text == "")


def test_long_runs_of_one_kind_are_counted() -> None:
    # Long runs of one kind are where a regex backtracks, if it does: quadratic work here would not finish.
    texts = [
        " " * 200_000 + "x",
        "a" * 200_000,
        "!" * 200_000,
        "用户" * 100_000,
        "\n" * 200_000,
        "ab " * 70_000,
        "加" * 200_000,
        "😀" * 100_000,
    ]
    for text in texts:
        assert estimate_tokens(text) > 0


def test_message_counting_includes_blocks_tool_calls_and_reasoning() -> None:
    plain = count_message({"role": "user", "content": "x"}, estimate_tokens)
    blocks = count_message(
        {"role": "user", "content": [{"type": "text", "text": "检查配置文件"}, {"type": "image_url"}]}, estimate_tokens
    )
    calls = count_message(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "exec", "arguments": '{"cmd": "ls -la /tmp"}'}}],
        },
        estimate_tokens,
    )
    assert blocks > plain and calls > plain
    assert estimate_tokens("") == 0
