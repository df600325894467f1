"""Token counting: cl100k from litellm's bundled files offline, and a CJK-aware estimate close to it."""

from __future__ import annotations

import pytest

from worker.tokens import cl100k_counter, count_message, estimate_tokens

CHINESE = (
    "在这个项目中，我们需要为个人助理实现一个后台摘要服务。当会话的上下文达到模型窗口的百分之六十时，"
    "系统会自动生成摘要，并在下一轮对话中使用。用户偏好使用中文回答，并且希望保留所有的文件路径和编号，"
    "例如 /home/user/project/config.yaml 和订单号 12345。数据库连接失败时，请先检查配置文件中的密码是否正确。"
)
SAMPLES = {
    "zh": CHINESE,
    "ja": "このプロジェクトでは、会話の古い部分を要約するバックグラウンドワーカーを作ります。設定ファイルは /etc/app.yaml です。",
    "ko": "이 프로젝트는 대화의 오래된 부분을 요약하는 백그라운드 작업자를 만듭니다. 설정 파일은 /etc/app.yaml 입니다.",
    "en": "The worker summarizes the older part of a conversation into a rolling summary, so long sessions "
          "stay inside the context window. Paths like /srv/app/config.yaml and ids such as 12345 stay verbatim.",
    "mixed": "好的，我来帮你检查 config.json 文件。The error says: KeyError: 'api_key' at line 42. 请确认已经设置。",
}


def test_cl100k_is_available_offline_through_litellm() -> None:
    count = cl100k_counter()
    assert count is not None
    assert count("hello world") == 2


def test_a_chinese_paragraph_is_counted_within_ten_percent_of_cl100k() -> None:
    count = cl100k_counter()
    assert count is not None
    exact = count(CHINESE)
    assert abs(estimate_tokens(CHINESE) - exact) <= 0.10 * exact
    # chars/4, the usual shortcut, is off by far more: the reason this module exists
    assert abs(len(CHINESE) / 4 - exact) > 0.5 * exact


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_estimate_stays_close_to_cl100k(name: str) -> None:
    count = cl100k_counter()
    assert count is not None
    exact = count(SAMPLES[name])
    assert abs(estimate_tokens(SAMPLES[name]) - exact) <= 0.15 * exact


def test_message_counting_includes_blocks_tool_calls_and_reasoning() -> None:
    plain = count_message({"role": "user", "content": "x"}, estimate_tokens)
    blocks = count_message({"role": "user", "content": [{"type": "text", "text": "检查配置文件"}, {"type": "image_url"}]},
                           estimate_tokens)
    calls = count_message({"role": "assistant", "content": "",
                           "tool_calls": [{"function": {"name": "exec", "arguments": "{\"cmd\": \"ls -la /tmp\"}"}}]},
                          estimate_tokens)
    assert blocks > plain and calls > plain
    assert estimate_tokens("") == 0
