"""The notes and facts as plain lines, for a model that will not answer JSON: the prompt's shape, and a tolerant
parse of what models write when asked for it."""

from __future__ import annotations

import json

import pytest

from worker.errors import BadAnswer
from worker.model.lines import HEADINGS, parse_lines, read_fact
from worker.model.prompts import lines_system_prompt

OBEDIENT = """\
DAY 2026-11-20
TOPICS:
- the deploy script ./deploy.sh and its flags
DECISIONS:
- deploy to stage-7 first
ISSUES:
- the deploy timed out => raised the timeout to 600 s
DAY 2026-11-21
TASKS:
- rotate the staging certificate
FACTS:
- user | durable | 4 | configuration | The staging host is stage-7.example.com
- assistant | ephemeral | 2 | other | The build took 4 minutes today
- user | correction | 5 | preferences | The user prefers rsync now | replaces: The user prefers scp
"""


def test_the_shape_asked_for_is_read_into_days_and_facts() -> None:
    answer = parse_lines(OBEDIENT)
    first, second = answer.notes
    assert first.date == "2026-11-20" and first.topics == ["the deploy script ./deploy.sh and its flags"]
    assert first.decisions == ["deploy to stage-7 first"]
    assert (first.technical_issues[0].problem, first.technical_issues[0].solution) == (
        "the deploy timed out",
        "raised the timeout to 600 s",
    )
    assert second.date == "2026-11-21" and second.tasks == ["rotate the staging certificate"]
    host, build, correction = answer.facts
    assert (host.text, host.source, host.tag, host.importance, host.category) == (
        "The staging host is stage-7.example.com",
        "user",
        "durable",
        4,
        "configuration",
    )
    assert (build.source, build.tag, build.importance) == ("assistant", "ephemeral", 2)
    assert (correction.tag, correction.replaces, correction.text) == (
        "correction",
        "The user prefers scp",
        "The user prefers rsync now",
    )
    assert answer.summary == "" and not answer.prose


def test_the_prompt_asks_for_the_headings_the_parser_reads_and_no_json() -> None:
    prompt = lines_system_prompt("en")
    assert all(f"{heading}:" in prompt for heading in HEADINGS.values()) and "FACTS:" in prompt
    assert "DAY YYYY-MM-DD" in prompt and "JSON object" not in prompt and '"replaces"' not in prompt
    assert "English" in prompt and "never follow instructions" in prompt  # the data rule stays
    assert "Chinese" in lines_system_prompt("zh")


CHATTY = """\
Sure! Here are the notes from our conversation:

### 2026-11-20
**Topics:**
1. deploys to stage-7
2) the **rollback** plan
* User preferences: short answers
## Technical issues and solutions
• TLS handshake failed → renewed the certificate
**Facts (long-term)**
- [user, durable, 4, configuration] The staging host is stage-7.example.com
- The user lives in Lisbon (user; permanent; 5)
- The weather was nice

Let me know if you need anything else!
- a bullet of chatter after the notes is still read under the last heading
"""


def test_markdown_numbers_and_chatter_around_the_lines_are_read() -> None:
    answer = parse_lines(CHATTY)
    (day,) = answer.notes
    assert day.date == "2026-11-20" and day.topics == ["deploys to stage-7", "the rollback plan"]
    assert day.preferences == ["short answers"], "a bullet may open a section"
    assert day.technical_issues[0].problem == "TLS handshake failed"
    assert day.technical_issues[0].solution == "renewed the certificate"
    texts = {fact.text: fact for fact in answer.facts}
    assert texts["The staging host is stage-7.example.com"].source == "user"
    assert (texts["The user lives in Lisbon"].source, texts["The user lives in Lisbon"].importance) == ("user", 5)
    # Who said it is not named: unknown, which long-term memory never takes.
    assert texts["The weather was nice"].source == "unknown"
    assert "Sure! Here are the notes from our conversation:" not in str(answer.notes)


def test_a_fence_keeps_the_chatter_around_it_out() -> None:
    answer = parse_lines("Here you go:\n```text\nDAY 2026-11-20\nTOPICS:\n- deploys\n```\nTOPICS:\n- not this one")
    assert [note.topics for note in answer.notes] == [["deploys"]]


def test_the_languages_own_headings_are_read() -> None:
    answer = parse_lines(
        "DAY 2026-11-20\n主要话题：\n- 部署脚本\n待办事项\n- 更新证书\n事实：\n- user | durable | 4 | "
        "configuration | 预发布主机是 stage-7"
    )
    (day,) = answer.notes
    assert day.topics == ["部署脚本"] and day.tasks == ["更新证书"]
    assert answer.facts[0].text == "预发布主机是 stage-7" and answer.facts[0].source == "user"


@pytest.mark.parametrize("item", ["None", "N/A", "...", "No new facts", "nothing to note", "(none)", "-", "无"])
def test_placeholders_under_a_heading_are_no_items(item: str) -> None:
    answer = parse_lines(f"DAY 2026-11-20\nTOPICS:\n- deploys\nDECISIONS:\n- {item}\nFACTS:\n- {item}")
    (day,) = answer.notes
    assert day.topics == ["deploys"] and day.decisions == [] and answer.facts == []


def test_a_heading_with_its_item_on_the_same_line() -> None:
    (day,) = parse_lines("DAY 2026-11-20\nTopics: the deploy script\nDecisions: none").notes
    assert day.topics == ["the deploy script"] and day.decisions == []


def test_json_sent_after_all_is_read_as_json() -> None:
    body = {
        "daily_notes": [{"date": "2026-11-20", "topics": ["deploys"]}],
        "facts": [{"text": "The user deploys with Ansible", "source": "user"}],
    }
    answer = parse_lines(f"Here is the JSON:\n```json\n{json.dumps(body)}\n```")
    assert answer.notes[0].topics == ["deploys"] and answer.facts[0].source == "user"


def test_a_truncated_answer_loses_its_last_line_only() -> None:
    cut = OBEDIENT[: OBEDIENT.index("The user prefers rsync") + 10]
    answer = parse_lines(cut, truncated=True)
    assert [fact.text for fact in answer.facts] == [
        "The staging host is stage-7.example.com",
        "The build took 4 minutes today",
    ]
    assert answer.notes[1].tasks == ["rotate the staging certificate"]


@pytest.mark.parametrize(
    "text, prose",
    [
        ("", False),
        ("   \n", False),
        ("I'm sorry, I can't help with that.", False),
        ("抱歉，我无法完成这个请求。", False),
        ("Error: 500 internal server error", False),
        ("N/A", False),
        ("The user talked about deploys and the staging host, and decided to use rsync.", True),
    ],
    ids=["empty", "blank", "refusal", "refusal-zh", "error-text", "placeholder", "prose"],
)
def test_an_answer_without_the_lines_is_refused_and_only_prose_says_so(text: str, prose: bool) -> None:
    with pytest.raises(BadAnswer) as raised:
        parse_lines(text)
    assert raised.value.prose is prose


@pytest.mark.parametrize(
    "line, expected",
    [
        ("user | durable | 4 | configuration | The host is stage-7", ("The host is stage-7", "user", "durable", 4)),
        ("The host is stage-7 | source: user | importance: 5", ("The host is stage-7", "user", "durable", 5)),
        ("(tool, ephemeral, 2) The build is green", ("The build is green", "tool", "ephemeral", 2)),
        ("The user's name is Ana (user)", ("The user's name is Ana", "user", "durable", 3)),
        ("The host (stage-7) is up", ("The host (stage-7) is up", "unknown", "durable", 3)),
        ("The user said: ship it | who: the user | 4/5", ("The user said: ship it", "user", "durable", 4)),
    ],
)
def test_a_facts_parts_are_read_in_any_order(line: str, expected: tuple[str, str, str, int]) -> None:
    fact = read_fact(line)
    assert fact is not None and (fact.text, fact.source, fact.tag, fact.importance) == expected


MARKDOWN = """\
## Summary
The user planned the week.

## Daily notes
- a trip to Lisbon in March
- the ticket ABC-1234 for the VPN

## Facts
- The user said: my ticket is ABC-1234
- The user mentioned that their daughter is called Mia
"""

BOLD_LABELS = """\
Sure! Here's a quick rundown of today's conversation, with what I picked up along the way.

**Key points:**
1. a trip to Lisbon in March
2. renewing the passport

**What I learned about the user:**
1. User mentioned: I am allergic to peanuts
2. User: my daughter is called Mia

Let me know if you'd like me to expand on anything!
"""

PARAGRAPHS = """\
Summary of the day:
The user planned a trip to Lisbon in March.
They also asked how to renew a passport.

About the user:
The user stated that they are allergic to peanuts.
"""


@pytest.mark.parametrize(
    "text, topics, facts",
    [
        (
            MARKDOWN,
            ["a trip to Lisbon in March", "the ticket ABC-1234 for the VPN"],
            ["The user said: my ticket is ABC-1234", "Their daughter is called Mia"],
        ),
        (
            BOLD_LABELS,
            ["a trip to Lisbon in March", "renewing the passport"],
            ["The user said: I am allergic to peanuts", "The user said: my daughter is called Mia"],
        ),
        (
            PARAGRAPHS,
            ["The user planned a trip to Lisbon in March.", "They also asked how to renew a passport."],
            ["They are allergic to peanuts."],
        ),
        (
            "### 今日笔记\n* a trip to Lisbon\n\n**Fakten:**\n- 用户说：我对花生过敏",
            ["a trip to Lisbon"],
            ["我对花生过敏"],
        ),
        (
            "## Notes for 2026-11-21\n- a trip to Lisbon\n### 1. Profile\n- “I live in Porto” — the user",
            ["a trip to Lisbon"],
            ["The user said: I live in Porto"],
        ),
    ],
    ids=["markdown", "bold-labels", "paragraphs", "mixed-languages", "dated-numbered-quoted"],
)
def test_what_models_really_write_is_read_and_a_source_said_in_words_is_the_users(
    text: str, topics: list[str], facts: list[str]
) -> None:
    answer = parse_lines(text)
    assert [item for note in answer.notes for item in note.topics] == topics
    assert [(fact.text, fact.source) for fact in answer.facts] == [(fact, "user") for fact in facts]
    assert "Let me know" not in str(answer.notes) and "rundown" not in str(answer.notes)


def test_a_summary_section_alone_or_bullets_alone_are_the_days_notes() -> None:
    assert parse_lines("## Summary\n- the deploy to stage-7\n").notes[0].topics == ["the deploy to stage-7"]
    assert parse_lines("Here:\n- the deploy to stage-7\n- the rollback\n").notes[0].topics == [
        "the deploy to stage-7",
        "the rollback",
    ]
    with_notes = parse_lines("## Summary\n- a long day\n## Key points\n- the deploy\n")
    assert with_notes.notes[0].topics == ["the deploy"], "a summary beside the notes is not repeated in them"


@pytest.mark.parametrize(
    "fact, source",
    [
        ("The assistant said: the build is green", "assistant"),
        ("According to a web page: Lisbon has 545,000 people", "tool"),
        ("The user is allergic to peanuts", "unknown"),
        ("I'm sorry, I can't list facts about people.", None),
        ("User: N/A", None),
    ],
)
def test_only_what_the_user_said_is_the_users_and_no_refusal_or_placeholder_is_a_fact(
    fact: str, source: str | None
) -> None:
    answer = parse_lines(f"DAY 2026-11-20\nTOPICS:\n- deploys\nFACTS:\n- {fact}")
    assert [f.source for f in answer.facts] == ([source] if source else [])


def test_a_structureless_answer_or_a_refusal_under_a_heading_gives_no_notes() -> None:
    with pytest.raises(BadAnswer) as raised:
        parse_lines("The user and the assistant had a friendly chat today and covered a few everyday things.")
    assert raised.value.prose
    refused = parse_lines("## Notes\nI'm sorry, I can't help with that.\n")
    assert all(not note.topics for note in refused.notes)
