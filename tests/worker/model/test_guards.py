"""The guards on a new summary (pure): refusals, error texts and placeholders, and carry-forward of identifiers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.model.guards import MIN_IDENTIFIERS, carry_forward, check, identifiers, unusable
from worker.model.llm import json_mode


@pytest.mark.parametrize(
    "text",
    [
        "I'm sorry, I can't help with that.",
        "I cannot summarize this conversation.",
        "Sorry, but I won't do that.",
        "As an AI language model, I don't keep memories.",
        "抱歉，我无法完成这个请求。",
        "对不起，我不能总结这段对话。",
        "申し訳ありませんが、要約できません。",
        "죄송합니다, 요약할 수 없습니다.",
        "## Summary\nI am unable to help with this.",
    ],
)
def test_refusals_and_apologies_in_any_language_are_refused(text: str) -> None:
    assert "refusal" in (unusable(text) or "")


@pytest.mark.parametrize(
    "text",
    [
        "Error: 500 Internal Server Error",
        '{"error": {"message": "overloaded"}}',
        "Rate limit reached for requests",
        "Traceback (most recent call last):\n  File ...",
    ],
)
def test_error_texts_are_refused(text: str) -> None:
    assert "error" in (unusable(text) or "")


@pytest.mark.parametrize(
    "text", ["", "N/A", "(nothing)", "Summary unavailable", "[summary]", "<summary here>", "TODO", "暂无", "..."]
)
def test_placeholders_are_refused(text: str) -> None:
    assert "placeholder" in (unusable(text) or "")


@pytest.mark.parametrize(
    "text",
    [
        "## Goals\n- migrate the blog to Hugo 0.139\n## Decisions\n- keep old links with aliases",
        "用户正在把博客从 WordPress 迁移到 Hugo，RSS 问题已经解决。",
        'The user said "I\'m sorry I was late" and then asked about the deploy script.',
        "ユーザーはブログを Hugo に移行しています。",
    ],
)
def test_real_summaries_pass(text: str) -> None:
    assert unusable(text) is None


@pytest.mark.parametrize(
    "text",
    [
        "Error handling in the deploy script was reworked: retries now back off, and ./deploy.sh logs to /var/log.",
        "Rate limiting for the API gateway was discussed; the user chose 100 requests per minute.",
        "Exception tracking moved to Sentry (project acme-web).",
        "Unfortunately the migration to Hugo 0.140 broke the theme; the user pinned 0.139.",
        "Sorry-state of the old wiki: the user wants it archived.",
        "## Summary\n- I'm sorry about the outage, the user wrote to the team; then they fixed nginx.\n"
        + "- detail\n" * 80,
    ],
)
def test_summaries_that_merely_open_like_an_error_or_an_apology_pass(text: str) -> None:
    assert unusable(text) is None


def test_identifiers_are_found_in_every_script_and_sentence_openers_are_not() -> None:
    found = identifiers(
        "## Goals\n- Migrate from WordPress to Hugo 0.139 at https://blog.example.com/post/1\n"
        "Port 8080 in /etc/hugo/config.toml; ask Alice about ticket ABC-1234. "
        "与「小明」讨论；タナカさんがデプロイした。김철수 씨가 승인했다."
    )
    assert {
        "wordpress",
        "hugo",
        "0.139",
        "https://blog.example.com/post/1",
        "8080",
        "/etc/hugo/config.toml",
        "alice",
        "abc-1234",
        "小明",
        "タナカ",
        "デプロイ",
        "김철수",
    } <= found
    assert not {"migrate", "port", "goals"} & found


def test_carry_forward_measures_what_the_new_summary_kept() -> None:
    previous = "- host stage-7.example.com, port 8443, ticket OPS-5521, owner Alice, repo acme/site"
    assert carry_forward(previous, previous) == 1.0
    assert carry_forward(previous, "The user talked about deploys.") == 0.0
    assert carry_forward("", "anything") is None
    assert carry_forward("a chat about the weather", "anything") is None
    assert len(identifiers(previous)) >= MIN_IDENTIFIERS


def test_check_refuses_a_summary_that_drops_most_of_the_previous_one() -> None:
    previous = "- host stage-7.example.com, port 8443, ticket OPS-5521, owner Alice, repo acme/site"
    with pytest.raises(ValueError, match="keeps 1 of the previous one's"):
        check(previous, "- the user moved to port 8443 and talked about other things", 0.5)
    assert check(previous, previous + "\n- new: deployed v2.1", 0.5) == 1.0
    assert check(previous, "- the user talked about other things", 0.0) == 0.0, "0 switches the guard off"
    with pytest.raises(ValueError, match="refusal"):
        check("", "I'm sorry, I can't help with that.", 0.5)


@pytest.mark.parametrize(
    "model, wanted, mode",
    [
        ("openai/gpt-4o-mini", "auto", "json_schema"),
        ("gpt-4o-mini", "auto", "json_schema"),
        ("deepseek/deepseek-chat", "auto", "json_object"),
        ("openai/some-local-model", "auto", "json_object"),
        ("anthropic/claude-3-5-haiku-20241022", "auto", "json_object"),
        ("openai/gpt-4o-mini", "off", "off"),
        ("openai/some-local-model", "json_schema", "json_schema"),
    ],
)
def test_the_json_mode_follows_what_litellm_knows_of_the_model(model: str, wanted: str, mode: str) -> None:
    assert json_mode(model, wanted) == mode  # type: ignore[arg-type]


@given(
    st.lists(
        st.sampled_from(
            [
                "a",
                "B",
                "7",
                ".",
                "-",
                "_",
                "+",
                "@",
                "/",
                "\\",
                ":",
                " ",
                "\n",
                "~",
                "`",
                '"',
                "C:",
                "x.py",
                "部署",
                "テスト",
            ]
        ),
        max_size=30,
    ).map("".join)
)
def test_a_text_without_an_at_sign_or_a_slash_yields_what_every_pattern_finds(text: str) -> None:
    from worker.model.guards import _PATTERNS, _identifier_pattern, _scanner

    every = _identifier_pattern(frozenset())
    assert every.pattern == "|".join(f"(?:{p})" for p in _PATTERNS)
    found = [(m.group(1), m.group(0)) for m in _scanner(text).finditer(text)]
    assert found == [(m.group(1), m.group(0)) for m in every.finditer(text)]
