"""Reading the summarizer's answer: JSON only when the answer opens with it, prose (whole) otherwise."""

from __future__ import annotations

import json

import pytest

from worker.errors import BadAnswer
from worker.model.answer import parse_answer

BODY = {
    "summary": "## What happened\n- deploy of stage-7",
    "daily_notes": [{"date": "2026-11-20", "topics": ["deploys"]}],
    "facts": [{"text": "The user deploys with Ansible", "source": "user"}],
}
TEXT = json.dumps(BODY)


@pytest.mark.parametrize(
    "answer",
    [
        TEXT,
        f"\n  {TEXT}\n",
        f"```json\n{TEXT}\n```",
        f"Sure! Here is the JSON you asked for:\n```json\n{TEXT}\n```\nLet me know if you need more.",
        f"Here is the JSON:\n{TEXT}",
        f"Here is the JSON:\n\n{TEXT}\n\nHope this helps {{:}}",
        f"[{TEXT}]",
    ],
    ids=["bare", "whitespace", "fenced", "fence-with-chatter", "line-of-chatter", "chatter-around", "in-an-array"],
)
def test_an_answer_that_opens_with_json_is_read_as_json(answer: str) -> None:
    parsed = parse_answer(answer, 4000)
    assert not parsed.prose and parsed.summary == BODY["summary"]
    assert parsed.notes[0].topics == ["deploys"] and parsed.facts[0].source == "user"


def test_truncated_json_is_repaired() -> None:
    cut = TEXT[: TEXT.index('"facts"') + 12]
    parsed = parse_answer(cut, 4000)
    assert not parsed.prose and parsed.summary == BODY["summary"] and parsed.notes[0].date == "2026-11-20"


@pytest.mark.parametrize(
    "answer",
    [
        '{"error": {"message": "rate limited", "code": 429}}',
        '```json\n{"result": "ok"}\n```',
        'Here is the JSON:\n{"result": "ok"}',
        '{"facts": []}',
    ],
    ids=["error-payload", "fenced-other-keys", "chatter-other-keys", "facts-only"],
)
def test_an_answer_that_opens_with_json_of_other_keys_is_no_summary(answer: str) -> None:
    with pytest.raises(BadAnswer):
        parse_answer(answer, 4000)


QUOTING = [
    '## What happened\n- the user asked why the tool printed {"summary": "a short recap", "daily_notes": []}\n'
    "- the fix: the parser now reads the whole reply",
    '## What happened\n- the notes endpoint returned `{"facts": []}` for every request\n- cause: an empty cache',
    '## Important details\n- the config example:\n```json\n{"summary": "x", "facts": []}\n```\n'
    "- the user keeps it in config/example.json",
    '[2026-11-20] the user set up the deploy of stage-7 and asked about {"summary": 1}',
]


@pytest.mark.parametrize("answer", QUOTING, ids=["quotes-summary", "quotes-facts", "quotes-a-fence", "bracket-date"])
def test_prose_that_quotes_json_is_prose_and_kept_whole(answer: str) -> None:
    parsed = parse_answer(answer, 4000)
    assert parsed.prose and parsed.summary == answer and not parsed.notes and not parsed.facts


def test_prose_is_no_notes() -> None:
    with pytest.raises(BadAnswer) as raised:
        parse_answer(QUOTING[1], 4000, need_summary=False)
    assert raised.value.prose
