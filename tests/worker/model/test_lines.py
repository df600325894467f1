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
        "the deploy timed out", "raised the timeout to 600 s")
    assert second.date == "2026-11-21" and second.tasks == ["rotate the staging certificate"]
    host, build, correction = answer.facts
    assert (host.text, host.source, host.tag, host.importance, host.category) == (
        "The staging host is stage-7.example.com", "user", "durable", 4, "configuration")
    assert (build.source, build.tag, build.importance) == ("assistant", "ephemeral", 2)
    assert (correction.tag, correction.replaces, correction.text) == (
        "correction", "The user prefers scp", "The user prefers rsync now")
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
    answer = parse_lines("DAY 2026-11-20\n主要话题：\n- 部署脚本\n待办事项\n- 更新证书\n事实：\n- user | durable | 4 | "
                         "configuration | 预发布主机是 stage-7")
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
    body = {"daily_notes": [{"date": "2026-11-20", "topics": ["deploys"]}],
            "facts": [{"text": "The user deploys with Ansible", "source": "user"}]}
    answer = parse_lines(f"Here is the JSON:\n```json\n{json.dumps(body)}\n```")
    assert answer.notes[0].topics == ["deploys"] and answer.facts[0].source == "user"


def test_a_truncated_answer_loses_its_last_line_only() -> None:
    cut = OBEDIENT[:OBEDIENT.index("The user prefers rsync") + 10]
    answer = parse_lines(cut, truncated=True)
    assert [fact.text for fact in answer.facts] == ["The staging host is stage-7.example.com",
                                                    "The build took 4 minutes today"]
    assert answer.notes[1].tasks == ["rotate the staging certificate"]


@pytest.mark.parametrize("text, prose", [
    ("", False), ("   \n", False),
    ("I'm sorry, I can't help with that.", False), ("抱歉，我无法完成这个请求。", False),
    ("Error: 500 internal server error", False), ("N/A", False),
    ("The user talked about deploys and the staging host, and decided to use rsync.", True),
], ids=["empty", "blank", "refusal", "refusal-zh", "error-text", "placeholder", "prose"])
def test_an_answer_without_the_lines_is_refused_and_only_prose_says_so(text: str, prose: bool) -> None:
    with pytest.raises(BadAnswer) as raised:
        parse_lines(text)
    assert raised.value.prose is prose


@pytest.mark.parametrize("line, expected", [
    ("user | durable | 4 | configuration | The host is stage-7", ("The host is stage-7", "user", "durable", 4)),
    ("The host is stage-7 | source: user | importance: 5", ("The host is stage-7", "user", "durable", 5)),
    ("(tool, ephemeral, 2) The build is green", ("The build is green", "tool", "ephemeral", 2)),
    ("The user's name is Ana (user)", ("The user's name is Ana", "user", "durable", 3)),
    ("The host (stage-7) is up", ("The host (stage-7) is up", "unknown", "durable", 3)),
    ("The user said: ship it | who: the user | 4/5", ("The user said: ship it", "user", "durable", 4)),
])
def test_a_facts_parts_are_read_in_any_order(line: str, expected: tuple[str, str, str, int]) -> None:
    fact = read_fact(line)
    assert fact is not None and (fact.text, fact.source, fact.tag, fact.importance) == expected
