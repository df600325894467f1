"""The summarize job end to end inside a real arq worker, real Redis, and litellm over HTTP to the fake LLM."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from harness.defaults import TEST_KEYS
from harness.fakellm import Error, Reply
from harness.models import summary_json
from harness.transcripts import conversation
from nanobot_hooks.contract.marker import METADATA_KEY
from nanobot_hooks.contract.queue import enqueue_summary, load_record, pending_sessions
from nanobot_hooks.contract.records import SummarizeRequest
from tests.support.workers import run_burst, summarize_now
from worker.nanobot.sessions import read_session
from worker.state.outcomes import load_outcome
from worker.summarize.cut import plan_cut
from worker.summarize.plan import plan_for, window_for
from worker.text.tokens import cl100k_counter, count_message

KEY = "telegram:42"


async def test_summary_record_is_stored_published_and_written_to_line_one(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.default = Reply(summary_json("## What happened\n- deploy questions 0..9"))
    path = nanobot_home.write_session(KEY, conversation(15))
    lines_before = path.read_bytes().split(b"\n")[1:]
    deps = deps_for()
    pubsub = redis.pubsub()
    await pubsub.subscribe(TEST_KEYS.notice_channel)

    record = (await summarize_now(redis, deps, KEY, "manual")).record
    assert record is not None
    # keep rule messages:10 -> 30 messages, boundary at the user turn at index 20
    assert (record.start, record.boundary) == (0, 20)
    assert record.boundary_timestamp == conversation(15)[19]["timestamp"]
    assert record.summary.startswith("## What happened")
    assert record.messages_before == 30 and record.messages_after == 11
    assert record.tokens_after < record.tokens_before
    assert await pending_sessions(redis) == [KEY]
    notice = None
    for _ in range(50):
        notice = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
        if notice:
            break
    assert notice is not None and notice["data"] in (KEY, KEY.encode())
    await pubsub.aclose()

    raw = path.read_bytes().split(b"\n")
    assert raw[1:] == lines_before, "every message line is copied byte for byte"
    head = json.loads(raw[0])
    assert head["metadata"][METADATA_KEY]["pending"]["boundary"] == 20
    outcome = await load_outcome(redis, KEY)
    assert outcome is not None and outcome.status == "summarized"

    request = fake_llm.requests[-1].body
    prompt = request["messages"][-1]["content"]
    assert "question 0 about the deploy script" in prompt and "question 9 " in prompt
    assert "question 10 " not in prompt, "the kept tail is not summarized"


async def test_previous_summary_is_folded_in_and_nothing_is_covered_twice(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.default = Reply(summary_json("second summary"))
    messages = conversation(20)
    nanobot_home.write_session(
        KEY, messages, last_archived=10, metadata={"_last_summary": {"text": "EARLIER-SUMMARY-XYZ", "last_active": "x"}}
    )
    record = (await summarize_now(redis, deps_for(), KEY)).record
    assert record is not None and (record.start, record.boundary) == (10, 30)
    prompt = fake_llm.requests[-1].body["messages"][-1]["content"]
    assert "EARLIER-SUMMARY-XYZ" in prompt
    assert "question 4 " not in prompt and "question 5 " in prompt

    # A second job before nanobot applied the first chains from the pending record.
    nanobot_home.write_session(
        KEY,
        messages + conversation(10, user="later {i}", assistant="ok {i}"),
        last_archived=10,
        metadata={"_last_summary": {"text": "EARLIER-SUMMARY-XYZ", "last_active": "x"}},
    )
    second = (await summarize_now(redis, deps_for(), KEY)).record
    assert second is not None and second.start == 30 and second.boundary == 50
    prompt = fake_llm.requests[-1].body["messages"][-1]["content"]
    assert "second summary" in prompt and "question 14 " not in prompt and "question 15 " in prompt


async def test_nothing_to_cover_is_a_noop_without_an_llm_call(redis, nanobot_home, fake_llm, deps_for):
    nanobot_home.write_session(KEY, conversation(4))
    outcome = (await summarize_now(redis, deps_for(), KEY)).outcome
    assert outcome is not None and outcome.status == "noop"
    assert fake_llm.requests == []
    assert await load_record(redis, KEY) is None


@pytest.mark.parametrize("reason", ["tokens", "interval", "daily"])
async def test_a_saving_under_the_minimum_asks_nothing_and_rests_nothing(
    redis, nanobot_home, fake_llm, deps_for, reason
):
    fake_llm.default = Reply(summary_json("a summary"))
    nanobot_home.write_session(KEY, conversation(15))  # ~20 covered messages of ~15 tokens
    deps = deps_for(summary_min_saving=0.05, summary_context_window=32_000)  # asks for 1,600 tokens
    outcome = (await summarize_now(redis, deps, KEY, reason)).outcome
    assert outcome is not None and outcome.status == "noop" and "too little to summarize" in outcome.detail
    assert "of 1,600 tokens" in outcome.detail and outcome.cooldown_until is None
    assert not [r for r in fake_llm.requests if r.path.endswith("completions")], "nothing paid"
    assert await load_record(redis, KEY) is None


async def test_a_manual_summary_is_made_whatever_it_saves(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.default = Reply(summary_json("a summary"))
    nanobot_home.write_session(KEY, conversation(15))
    deps = deps_for(summary_min_saving=0.05, summary_context_window=32_000)
    record = (await summarize_now(redis, deps, KEY, "manual")).record
    assert record is not None and record.boundary == 20


async def test_a_summary_that_hardly_shrinks_the_context_is_not_committed(redis, nanobot_home, fake_llm, deps_for):
    # The covered part passes the minimum, but the answer is nearly as long as what it replaces.
    nanobot_home.write_session(KEY, conversation(15))
    counts = [count_message(m, cl100k_counter()) for m in conversation(15)[:20]]
    fake_llm.default = Reply(summary_json("word " * (sum(counts) - 5)))
    deps = deps_for(
        summary_min_saving=0.5 * sum(counts) / 32_000, summary_context_window=32_000, summary_max_chars=100_000
    )
    outcome = (await summarize_now(redis, deps, KEY, "tokens")).outcome
    assert outcome is not None and outcome.status == "noop" and "would not shrink" in outcome.detail
    assert await load_record(redis, KEY) is None


async def test_huge_session_is_summarized_in_chunks_within_the_input_budget(redis, nanobot_home, fake_llm, deps_for):
    messages = conversation(150, user="历史问题 {i}：请检查部署脚本", assistant="回答 {i}")
    log = "\n".join(f"2026-11-20 10:00:{i % 60:02d} INFO worker line {i} processed item {i * 7}" for i in range(5000))
    messages[41] = {
        "role": "assistant",
        "content": "",
        "timestamp": messages[41]["timestamp"],
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "exec", "arguments": '{"cmd": "cat big.log"}'}}
        ],
    }
    messages.insert(
        42,
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "name": "exec",
            "content": log,
            "timestamp": messages[41]["timestamp"],
        },
    )
    messages.insert(43, {"role": "assistant", "content": "日志看起来正常", "timestamp": messages[41]["timestamp"]})
    assert len(messages) == 302
    nanobot_home.write_session(
        KEY, messages, metadata={"_last_summary": {"text": "OLD-SUMMARY-42", "last_active": "x"}}
    )
    fake_llm.responder = lambda req: Reply(summary_json(f"running summary after {len(fake_llm.requests)} parts"))
    budget = 3000
    deps = deps_for(summary_input_tokens=budget)
    done = await summarize_now(redis, deps, KEY)
    record, outcome = done.record, done.outcome
    calls = re.search(r"in (\d+) call\(s\)", outcome.detail if outcome else "")
    assert record is not None and calls is not None and int(calls.group(1)) > 1
    assert len(fake_llm.requests) == int(calls.group(1))
    count = cl100k_counter()
    assert count is not None
    prompts = [r.body["messages"] for r in fake_llm.requests]
    for messages_sent in prompts:
        sent = sum(count(m["content"]) for m in messages_sent)
        assert sent <= budget, f"{sent} tokens over the input budget {budget}"
    first = prompts[0][-1]["content"]
    assert "OLD-SUMMARY-42" in first, "the previous summary reaches the model"
    assert "历史问题 0：" in first, "the oldest part is not dropped"
    assert any("characters" in m[-1]["content"] and "cut" in m[-1]["content"] for m in prompts), "the log is clamped"
    # each later part folds in the summary of the part before
    for number, messages_sent in enumerate(prompts[1:], start=1):
        assert f"running summary after {number} parts" in messages_sent[-1]["content"]


async def test_second_enqueue_is_refused_while_the_job_runs_and_accepted_after(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.default = Reply(summary_json(), delay=1.0)
    nanobot_home.write_session(KEY, conversation(15))
    deps = deps_for()
    assert await enqueue_summary(redis, SummarizeRequest(session_key=KEY)) is not None
    assert await enqueue_summary(redis, SummarizeRequest(session_key=KEY)) is None, "refused while queued"
    worker_task = asyncio.create_task(run_burst(deps))
    await asyncio.to_thread(fake_llm.wait_for_requests, 1, 10.0)
    assert await enqueue_summary(redis, SummarizeRequest(session_key=KEY)) is None, "refused while running"
    await worker_task
    assert await enqueue_summary(redis, SummarizeRequest(session_key=KEY)) is not None, "accepted after it ended"


async def test_failed_or_empty_answers_commit_nothing_and_the_next_run_succeeds(
    redis, nanobot_home, fake_llm, deps_for
):
    path = nanobot_home.write_session(KEY, conversation(15))
    before = path.read_bytes()
    fake_llm.script(Reply(""), Error.server())
    deps = deps_for(summary_max_tries=2)
    outcome = (await summarize_now(redis, deps, KEY)).outcome
    assert outcome is not None and outcome.status == "failed"
    assert await load_record(redis, KEY) is None
    assert path.read_bytes() == before, "nothing committed to the session file"
    assert len(fake_llm.requests) == 2

    fake_llm.default = Reply(summary_json("recovered"))
    record = (await summarize_now(redis, deps, KEY)).record
    assert record is not None and record.summary == "recovered"


async def test_rate_limit_is_retried_with_backoff(redis, nanobot_home, fake_llm, deps_for):
    nanobot_home.write_session(KEY, conversation(15))
    fake_llm.script(Error.rate_limit(), Error.rate_limit())
    fake_llm.default = Reply(summary_json("after 429s"))
    record = (await summarize_now(redis, deps_for(), KEY)).record
    assert record is not None and record.summary == "after 429s"
    assert len(fake_llm.requests) == 3


async def test_context_length_error_shrinks_the_input_and_retries(redis, nanobot_home, fake_llm, deps_for):
    nanobot_home.write_session(KEY, conversation(60))
    fake_llm.script(Error.context_length())
    fake_llm.default = Reply(summary_json("fits now"))
    record = (await summarize_now(redis, deps_for(summary_input_tokens=4000), KEY)).record
    assert record is not None and record.summary == "fits now"
    first, *rest = [len(r.raw) for r in fake_llm.requests]
    assert rest and max(rest) < first, "the retried requests are smaller"


async def test_broken_json_is_repaired_and_prose_is_accepted(redis, nanobot_home, fake_llm, deps_for):
    nanobot_home.write_session(KEY, conversation(15))
    fake_llm.script(
        Reply(
            '```json\n{"summary": "repaired summary", "facts": [{"text": "user likes tea", '
            '"source": "user", "tag": "permanent",'
        )
    )
    record = (await summarize_now(redis, deps_for(), KEY)).record
    assert record is not None and record.summary == "repaired summary"
    memory = (nanobot_home.workspace / "memory" / "MEMORY.md").read_text(encoding="utf-8")
    assert "\nuser likes tea\n" in memory

    other = "cli:direct"
    nanobot_home.write_session(other, conversation(15))
    fake_llm.script(Reply("The user asked about deploys; answers were given."))
    prose = (await summarize_now(redis, deps_for(), other)).record
    assert prose is not None and prose.summary.startswith("The user asked about deploys")


async def test_fallback_model_takes_over_when_the_summary_model_keeps_failing(redis, nanobot_home, fake_llm, deps_for):
    nanobot_home.write_session(KEY, conversation(15))
    fake_llm.responder = lambda req: (
        Error.server() if req.body["model"] == "bad-model" else Reply(summary_json(f"by {req.body['model']}"))
    )
    deps = deps_for(summary_model="openai/bad-model", summary_fallback_model="openai/good-model")
    deps.model = deps.nanobot.with_credentials("openai/bad-model", "test")
    deps.model = type(deps.model)(model="openai/bad-model", api_base=fake_llm.url, api_key="sk")
    deps.fallback = type(deps.model)(model="openai/good-model", api_base=fake_llm.url, api_key="sk")
    record = (await summarize_now(redis, deps, KEY)).record
    assert record is not None and record.summary == "by good-model"
    assert [r.body["model"] for r in fake_llm.requests][:2] == ["bad-model", "bad-model"]


async def test_malformed_lines_are_skipped_and_counted(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.default = Reply(summary_json())
    path = nanobot_home.write_session(KEY, conversation(15))
    raw = path.read_bytes().split(b"\n")
    raw.insert(5, b"{not json")
    raw.insert(9, b"\xff\xfe broken bytes")
    path.write_bytes(b"\n".join(raw))
    session = read_session(nanobot_home.sessions_dir, KEY)
    assert session.skipped_lines == 2 and len(session.messages) == 30
    await summarize_now(redis, deps_for(), KEY)
    assert await load_record(redis, KEY) is not None
    assert b"{not json" in path.read_bytes() and b"\xff\xfe broken bytes" in path.read_bytes()


async def test_internal_sessions_are_left_alone(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.default = Reply(summary_json())
    nanobot_home.write_session("dream:nightly", conversation(15))
    await enqueue_summary(redis, SummarizeRequest(session_key="dream:nightly"))
    await run_burst(deps_for())
    outcome = await load_outcome(redis, "dream:nightly")
    assert outcome is not None and outcome.status == "noop" and fake_llm.requests == []


async def test_a_timed_out_call_is_retried(redis, nanobot_home, fake_llm, deps_for):
    from harness.fakellm import Hang

    nanobot_home.write_session(KEY, conversation(15))
    fake_llm.script(Hang(5))
    fake_llm.default = Reply(summary_json("after a timeout"))
    record = (await summarize_now(redis, deps_for(summary_timeout=0.5), KEY)).record
    assert record is not None and record.summary == "after a timeout"
    outcome = await load_outcome(redis, KEY)
    assert outcome is not None and outcome.job_try == 2


@pytest.mark.parametrize("keep", ["messages:6", "tokens:300", "fraction:0.002"])
def test_the_plan_counts_tokens_from_the_watermark_on_and_cuts_as_if_it_counted_all(nanobot_home, deps_for, keep):
    nanobot_home.write_session(KEY, conversation(60), last_archived=80)
    deps = deps_for(summary_keep=keep)
    session = read_session(deps.sessions_dir, KEY)
    request = SummarizeRequest(session_key=KEY)
    cut, counts = plan_for(deps, session, 84, request)
    assert counts[:80] == [0] * 80 and all(counts[80:]), "nothing before the watermark is counted"
    every = [count_message(m, deps.counter) for m in session.messages]
    assert counts[80:] == every[80:]
    assert cut == plan_cut(session.messages, 84, every, deps.settings.summary_keep, window_for(deps, request))
    assert cut.covered > 0


async def test_the_last_question_and_its_long_answer_stay_out_of_the_summary(redis, nanobot_home, fake_llm, deps_for):
    # The default keep rule, 3% of a 32,000 window (960 tokens), and an answer just given of about 1,005.
    fake_llm.default = Reply(summary_json("## What happened\n- earlier deploy questions"))
    messages = conversation(10)
    messages[-1]["content"] = "LAST-ANSWER " + "the deploy runs in three stages " * 167
    messages[-2]["content"] = "LAST-QUESTION: how does the deploy run?"
    nanobot_home.write_session(KEY, messages)
    deps = deps_for(summary_keep="fraction:0.03", summary_context_window=32_000)
    assert 960 < count_message(messages[-1], deps.counter) < 1_100
    record = (await summarize_now(redis, deps, KEY)).record
    assert record is not None and record.boundary == len(messages) - 2, "the last user turn is kept"
    assert record.messages_after == 3  # the question, the answer and nanobot's checkpoint marker
    prompt = fake_llm.requests[-1].body["messages"][-1]["content"]
    assert "question 8 " in prompt and "LAST-QUESTION" not in prompt and "LAST-ANSWER" not in prompt


async def test_a_summary_ends_the_sessions_rest_and_its_failure_streak(redis, nanobot_home, fake_llm, deps_for):
    from worker.state import budget

    fake_llm.default = Reply(summary_json("## What happened\n- deploy questions 0..9"))
    nanobot_home.write_session(KEY, conversation(15))
    rest = await budget.start_rest(redis, KEY, "an earlier failure", 600, 3600)
    assert rest is not None and await budget.rest_of(redis, KEY) is not None
    # A rest holds back no manual job.
    assert await enqueue_summary(redis, SummarizeRequest(session_key=KEY, reason="manual"))
    await run_burst(deps_for())
    outcome = await load_outcome(redis, KEY)
    assert outcome is not None and outcome.status == "summarized"
    assert await budget.rest_of(redis, KEY) is None
    assert not await redis.exists(*budget.rest_keys(redis, KEY))


async def test_a_resting_sessions_triggered_job_says_until_when_in_the_zone_the_page_names(
    redis, nanobot_home, fake_llm, deps_for
):
    """The web page names one zone for every time on it, and shows this detail beside them (it said UTC)."""
    from zoneinfo import ZoneInfo

    from worker.state import budget

    nanobot_home.write_session(KEY, conversation(15))
    rest = await budget.start_rest(redis, KEY, "an earlier failure", 600, 3600)
    assert rest is not None
    deps = deps_for()
    deps.tz = ZoneInfo("Asia/Shanghai")
    assert await enqueue_summary(redis, SummarizeRequest(session_key=KEY, reason="tokens"))
    await run_burst(deps)
    outcome = await load_outcome(redis, KEY)
    until = rest.until.astimezone(ZoneInfo("Asia/Shanghai")).strftime("%Y-%m-%d %H:%M:%S")
    assert outcome is not None and outcome.detail.startswith(f"resting until {until} Asia/Shanghai: "), outcome


async def test_a_waiting_record_of_another_version_is_kept_and_the_job_ends_in_a_line(
    redis, nanobot_home, fake_llm, deps_for
):
    """Issue 35: a job that finds its session's record written by a newer worker (which it cannot read) neither
    crashes nor deletes it nor pays for a summary over it: it ends as a noop saying so, the record left for the
    version that reads it."""
    nanobot_home.write_session(KEY, conversation(15))
    future = json.dumps({"session_key": KEY, "summary": "s", "reason": "from-the-future"})
    await redis.set(TEST_KEYS.record(KEY), future)
    await redis.sadd(TEST_KEYS.pending, KEY)
    assert await enqueue_summary(redis, SummarizeRequest(session_key=KEY))
    await run_burst(deps_for())
    outcome = await load_outcome(redis, KEY)
    assert outcome is not None and outcome.status == "noop", outcome
    assert "another version" in outcome.detail
    assert (await redis.get(TEST_KEYS.record(KEY))).decode() == future and await pending_sessions(redis) == [KEY]
    assert not fake_llm.requests, "nothing paid"


async def test_a_pasted_message_longer_than_a_read_holds_reaches_the_model_and_the_index_as_a_marked_excerpt(
    redis, nanobot_home, fake_llm, deps_for
):
    from worker.memory.recall_index.rows import message_rows
    from worker.nanobot.sessions import MESSAGE_BYTES

    messages = conversation(15)
    log = "".join(f"2026-11-20 10:00:{i % 60:02d} INFO 部署 line {i}\n" for i in range(60_000))  # ~2 MB, one line
    messages[2]["content"] = "FIRST: here is the log\n" + log + "LAST LINE of the log"
    nanobot_home.write_session(KEY, messages)
    fake_llm.default = Reply(summary_json("## What happened\n- a log was pasted"))
    done = await summarize_now(redis, deps_for(), KEY, "manual")
    assert done.record is not None and (done.record.start, done.record.boundary) == (0, 20)
    sent = fake_llm.requests[-1].body["messages"][-1]["content"]
    assert "FIRST: here is the log" in sent and "LAST LINE of the log" in sent
    note = re.search(r"\[\.\.\. ([\d,]+) bytes of this message left out \.\.\.\]", sent)
    assert note is not None, "the model is told how much of the message it does not see"
    assert int(note.group(1).replace(",", "")) > len(log.encode()) - MESSAGE_BYTES
    assert len(sent) < 40_000
    # The recall index's row of it: the same bounded excerpt, the same note.
    session = read_session(nanobot_home.sessions_dir, KEY)
    (row,) = message_rows(session.messages, 2, 3, None)
    assert "FIRST: here is the log" in row.body and note.group(0) in row.body and len(row.body) < 20_000
