"""Real models are not obedient: each scripted misbehaviour through a real arq worker, real Redis, and litellm
over HTTP to the fake LLM. What is committed, what is not, and what it cost."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.fakellm import Error, FakeRequest, Hang, Reply
from harness.models import REFUSAL, Summarizer, is_lines_request, is_summary_request, user_lines
from harness.transcripts import conversation
from tests.support.commands import check, doctor, run_in_process
from tests.support.web import served
from tests.support.workers import run_burst, summarize_now
from worker.memory.notes import is_noted, noted_spans
from worker.model import llm
from worker.state import formats
from worker.state.budget import rest_of, rest_seconds
from worker.summarize import daily
from worker.summarize.daily import daily_summaries

KEY = "telegram:42"
EARLIER = (
    "## Important details\n- staging host stage-7.example.com, port 8443\n- ticket OPS-5521 owned by Alice\n"
    "- repository acme/site, branch release-2.4"
)


HOST_FACT = {
    "text": "The staging host is stage-7.example.com",
    "tag": "durable",
    "importance": 4,
    "source": "user",
    "category": "configuration",
}


def day(n: int) -> datetime:
    return datetime(2026, 11, 20, 9, 0) + timedelta(hours=n)


def route_openai_models_to(home, llm) -> None:
    """Models named `openai/<name>` (a fallback, a priced model) go to the fake LLM too."""
    config = json.loads(home.config_path.read_text(encoding="utf-8"))
    config["providers"]["openai"] = {"apiBase": llm.url, "apiKey": "sk-fake"}
    home.config_path.write_text(json.dumps(config), encoding="utf-8")


async def summarize(redis, deps, reason: str = "tokens", **worker):
    """The session's outcome and record after a job asked for `reason` (a token-triggered one by default)."""
    done = await summarize_now(redis, deps, KEY, reason, **worker)
    return done.outcome, done.record


async def test_a_model_that_only_answers_prose_keeps_the_rolling_summary_going_and_writes_notes_and_facts(
    redis, nanobot_home, fake_llm, deps_for
):
    model = fake_llm.responder = Summarizer("prose", facts=[HOST_FACT])
    deps = deps_for()
    messages: list[dict] = []
    summaries = []
    for round_ in range(3):
        messages += conversation(8, start=day(round_), user=f"round {round_} question {{i}} about host-{round_}-{{i}}")
        nanobot_home.write_session(KEY, messages)
        outcome, record = await summarize(redis, deps)
        assert outcome is not None and outcome.status == "summarized", outcome
        assert record is not None
        assert "notes and facts skipped" not in outcome.detail and outcome.memory_skipped == ""
        summaries.append(record.summary)
    # Each summary folds the one before in, and the chain never stalls on prose.
    for before, after in zip(summaries, summaries[1:], strict=False):
        assert before in after and len(after) > len(before)
    assert "round 2 question" in summaries[-1]
    # The notes of a prose model: one smaller call per job, in plain lines, never as the JSON it does not answer.
    notes_calls = [r for r in fake_llm.requests if not is_summary_request(r)]
    assert len(notes_calls) == 3 and model.calls == 6
    assert all(is_lines_request(r) and "response_format" not in r.body for r in notes_calls)
    memory = nanobot_home.workspace / "memory"
    notes = (memory / "2026-11-20.md").read_text(encoding="utf-8")
    assert "round 0 question 0 about host-0-0" in notes and "round 2 question 2 about host-2-2" in notes
    assert HOST_FACT["text"] in (memory / "MEMORY.md").read_text(encoding="utf-8")
    assert (await formats.learned(redis, deps.model.model)).format == "lines"


LINES = (
    "DAY 2026-11-20\nTOPICS:\n- deploys to stage-7\n- the rollback plan\nFACTS:\n"
    "- user | durable | 4 | configuration | The staging host is stage-7.example.com"
)


def prose_summaries(lines_answer: Reply | Error | Hang):
    """A model that answers its summaries in prose, and the plain lines asked for with `lines_answer`."""
    prose = Summarizer("prose")
    return lambda request: lines_answer if is_lines_request(request) else prose(request)


@pytest.mark.parametrize(
    "answer, written",
    [
        (Reply(f"Sure, here they are:\n```text\n{LINES}\n```\n- and a bullet of chatter after the fence"), True),
        (Reply(f"{LINES}\n- user | durable | 3 | other | The user's half-writ", finish_reason="length"), True),
        (Reply(REFUSAL), False),
        (Reply(""), False),
        (Reply("Summary unavailable"), False),
        (Error.rate_limit(), False),
        (Error.server(), False),
        (Hang(30), False),
    ],
    ids=["fenced-with-chatter", "truncated", "refusal", "empty", "placeholder", "429", "500", "hang"],
)
async def test_each_misbehaviour_of_the_plain_lines_call(redis, nanobot_home, fake_llm, deps_for, answer, written):
    fake_llm.responder = prose_summaries(answer)
    nanobot_home.write_session(KEY, conversation(15))
    deps = deps_for(summary_timeout=3.0)  # a hanging call ends at the call's timeout
    outcome, record = await summarize(redis, deps)
    assert outcome is not None and outcome.status == "summarized" and record is not None, outcome
    lines_calls = [r for r in fake_llm.requests if is_lines_request(r)]
    assert len(fake_llm.requests) == 2 and len(lines_calls) == 1, "the summary, then the lines: no JSON notes call"
    memory = nanobot_home.workspace / "memory"
    spans = noted_spans(memory, KEY, "2026-11-20")
    if written:
        notes = (memory / "2026-11-20.md").read_text(encoding="utf-8")
        assert "- deploys to stage-7" in notes and "- the rollback plan" in notes
        assert "chatter" not in notes
        facts = (memory / "MEMORY.md").read_text(encoding="utf-8")
        assert "stage-7.example.com" in facts and "half-writ" not in facts
        assert spans and outcome.memory_skipped == ""
    else:
        # Nothing marked noted: the daily run asks again. Only prose says the model cannot do lines.
        assert spans == [] and outcome.memory_skipped and "notes and facts skipped" in outcome.detail
    assert (await formats.learned(redis, deps.model.model)).format == "lines"


async def test_a_model_that_answers_the_lines_in_prose_too_is_not_asked_again_and_its_notes_are_the_users_lines(
    redis, redis_url, nanobot_home, fake_llm, deps_for, settings_for, capsys
):
    """A model that follows no notes format: asking again is paying for nothing, so the fallback writes each
    span's notes (the user's own lines, marked verbatim) at once, and every view says memory runs on it, and why."""
    fake_llm.responder = prose_summaries(Reply("The user talked about deploys and the staging host."))
    deps = deps_for()
    for key in ("telegram:1", "telegram:2"):
        nanobot_home.write_session(key, conversation(15, user=f"{key} question {{i}} about the deploy"))
        done = await summarize_now(redis, deps, key)
        assert done.outcome is not None and done.outcome.status == "summarized" and done.record is not None
        assert "notes: fallback (the model's answer had no notes)" in done.outcome.detail, done.outcome.detail
    assert sum(1 for r in fake_llm.requests if is_lines_request(r)) == 1, "the failed lines call is paid once"
    assert len(fake_llm.requests) == 3
    learned = await formats.learned(redis, deps.model.model)
    assert learned is not None and learned.format == "off"
    assert "follows neither JSON nor the plain lines" in done.outcome.memory_skipped
    memory = nanobot_home.workspace / "memory"
    notes = (memory / "2026-11-20.md").read_text(encoding="utf-8")
    for key in ("telegram:1", "telegram:2"):
        assert f"- 10:00 {key} question 0 about the deploy" in notes and f"{key} question 9 about the deploy" in notes
        assert noted_spans(memory, key, "2026-11-20")
    assert notes.count("by=fallback") == 2 and "verbatim (the model's answer had no notes)" in notes
    assert "answer 3" not in notes, "only the user's lines"
    env = process_env(nanobot_home, redis_url, config=True)
    text = " ".join((await asyncio.to_thread(run_in_process, capsys, "status", env=env)).stdout.split())
    fallback = f"memory runs on the fallback for model {deps.model.model}: it answered neither JSON nor the plain lines"
    assert f"MEMORY: {fallback}" in text
    assert "MEMORY: telegram:2: notes: fallback, the user's own lines (the model's answer had no notes" in text
    out = (await doctor(capsys, nanobot_home, redis_url)).stdout
    level, line = check(out, "memory runs on the fallback for model")
    assert level == "warn" and fallback in " ".join(line.split())
    level, line = check(
        out, "daily notes: 2 of 2 span(s) in the day files written in the last 7 days were noted by the fallback"
    )
    assert level == "warn"
    async with served(settings_for()) as page:
        status, body = await page.get("/")
    assert status == 200 and fallback in body


async def test_a_notes_call_answered_in_prose_is_asked_again_in_lines_and_the_next_job_asks_lines_at_once(
    redis, nanobot_home, fake_llm, deps_for
):
    json_model, prose = Summarizer(), Summarizer("prose")

    def answers(request: FakeRequest) -> Reply:
        # JSON summaries, prose where notes are asked for as JSON, the lines when those are asked for.
        return json_model(request) if is_summary_request(request) else prose(request)

    fake_llm.responder = answers
    deps = deps_for()
    for key in ("telegram:1", "telegram:2"):
        nanobot_home.write_session(key, conversation(15, user=f"{key} question {{i}}"))
        await daily.set_flag(redis, key, "2026-11-20")  # the daily run: the kept tail is noted too
        done = await summarize_now(redis, deps, key)
        assert done.outcome is not None and done.outcome.status == "summarized" and not done.outcome.memory_skipped
    kinds = [
        "summary" if is_summary_request(r) else "lines" if is_lines_request(r) else "json notes"
        for r in fake_llm.requests
    ]
    assert kinds == ["summary", "json notes", "lines", "summary", "lines"], kinds
    notes = (nanobot_home.workspace / "memory" / "2026-11-20.md").read_text(encoding="utf-8")
    assert "telegram:1 question 14" in notes and "telegram:2 question 14" in notes, "the kept tails are noted"


@pytest.mark.parametrize("kind", ["fenced", "truncated"])
async def test_json_in_a_fence_with_chatter_or_cut_half_way_is_read(redis, nanobot_home, fake_llm, deps_for, kind):
    fact = {
        "text": "The staging host is stage-7.example.com",
        "tag": "durable",
        "importance": 4,
        "source": "user",
        "category": "configuration",
        "replaces": None,
    }
    fake_llm.responder = Summarizer(kind, facts=[fact])
    nanobot_home.write_session(KEY, conversation(15, user="question {i} about stage-7.example.com"))
    outcome, record = await summarize(redis, deps_for())
    assert outcome is not None and outcome.status == "summarized", outcome
    assert record is not None and "- asked: question 0 about stage-7.example.com" in record.summary
    assert "notes and facts skipped" not in outcome.detail, "the JSON's own notes were used: no second call"
    assert len(fake_llm.requests) == 1
    memory = nanobot_home.workspace / "memory"
    if kind == "fenced":
        assert "stage-7.example.com" in (memory / "MEMORY.md").read_text(encoding="utf-8")
    if kind == "fenced":
        assert noted_spans(memory, KEY, "2026-11-20") and (memory / "2026-11-20.md").exists()
    else:
        # A cut answer lost its notes: nothing is marked noted, the next run asks again.
        assert noted_spans(memory, KEY, "2026-11-20") == [] and "notes: none yet" in outcome.detail


@pytest.mark.parametrize("quote", ['{"summary": "a short recap", "daily_notes": []}', '{"facts": []}'])
async def test_a_prose_summary_that_quotes_json_is_committed_whole(redis, nanobot_home, fake_llm, deps_for, quote):
    def prose(request: FakeRequest) -> Reply:
        if not is_summary_request(request):
            return Reply("Here are the notes: nothing new.")
        asked = "\n".join(f"- asked: {text[:60]}" for _, text in user_lines(request))
        return Reply(f"## What happened\n{asked}\n- the notes tool printed {quote} for every request")

    fake_llm.responder = prose
    nanobot_home.write_session(KEY, conversation(15))
    outcome, record = await summarize(redis, deps_for())
    assert outcome is not None and outcome.status == "summarized", outcome
    assert record is not None and record.summary.startswith("## What happened\n- asked: question 0")
    assert record.summary.endswith(f"printed {quote} for every request"), "the prose, whole, not the quote"
    assert await rest_of(redis, KEY) is None


@pytest.mark.parametrize(
    "answer",
    [
        Reply(REFUSAL),
        Reply("抱歉，我无法完成这个请求。"),
        Reply(""),
        Reply("Summary unavailable"),
        Reply('{"error": {"message": "upstream overloaded"}}'),
        "forgetful",
    ],
    ids=["refusal", "refusal-zh", "empty", "placeholder", "error-text", "drops-the-previous-summary"],
)
async def test_an_unusable_summary_is_never_committed_and_the_session_keeps_its_own(
    redis, nanobot_home, fake_llm, deps_for, answer
):
    if answer == "forgetful":
        fake_llm.responder = Summarizer("forgetful")
    else:
        fake_llm.default = answer
    path = nanobot_home.write_session(
        KEY, conversation(15), metadata={"_last_summary": {"text": EARLIER, "last_active": "x"}}
    )
    before = path.read_bytes()
    outcome, record = await summarize(redis, deps_for())
    assert outcome is not None and outcome.status == "failed", outcome
    assert record is None and path.read_bytes() == before, "nothing committed, line 1 untouched"
    # Asked once more in a second try, then given up: never five paid calls for the same failure.
    assert len(fake_llm.requests) == 2 and outcome.spend.calls == 2
    assert outcome.cooldown_until is not None and await rest_of(redis, KEY) is not None
    if answer == "forgetful":
        assert "identifiers" in outcome.detail and "NANOBOT_SUMMARY_MIN_CARRY" in outcome.detail


async def test_a_provider_that_keeps_failing_is_not_paid_again_at_every_trigger(
    redis, nanobot_home, fake_llm, deps_for
):
    fake_llm.default = Error.server()
    nanobot_home.write_session(KEY, conversation(15))
    deps = deps_for(summary_max_tries=3)
    outcome, _ = await summarize(redis, deps)
    assert outcome is not None and outcome.status == "failed" and len(fake_llm.requests) == 3
    first_rest = await rest_of(redis, KEY)
    assert first_rest is not None and first_rest.failures == 1
    for _ in range(3):  # the trigger fires again and again: every job rests, no call is made
        outcome, _ = await summarize(redis, deps)
        assert outcome is not None and outcome.status == "noop" and "resting until" in outcome.detail
    assert len(fake_llm.requests) == 3
    # A manual enqueue does not wait; failing again doubles the rest.
    outcome, _ = await summarize(redis, deps, reason="manual")
    assert outcome is not None and outcome.status == "failed" and len(fake_llm.requests) == 6
    second_rest = await rest_of(redis, KEY)
    assert second_rest is not None and second_rest.failures == 2
    assert 1700 < (second_rest.until - first_rest.until).total_seconds() + 900 < 1900 + 5
    # A good job ends the rest.
    fake_llm.default = Reply(
        json.dumps({"summary": "## What happened\n- deploy questions", "daily_notes": [], "facts": []})
    )
    outcome, record = await summarize(redis, deps, reason="manual")
    assert outcome is not None and outcome.status == "summarized" and record is not None
    assert await rest_of(redis, KEY) is None and not await redis.exists(TEST_KEYS.rest(KEY))


async def test_a_long_failure_streak_still_rests_the_session_for_the_longest_rest(
    redis, nanobot_home, fake_llm, deps_for
):
    fake_llm.default = Error.server()
    nanobot_home.write_session(KEY, conversation(15))
    deps = deps_for(summary_max_tries=1, summary_cooldown=900, summary_cooldown_max=7200)
    await redis.set(TEST_KEYS.failures(KEY), 10_000)  # 2 ** 10,000 seconds is no float
    outcome, _ = await summarize(redis, deps, reason="manual")
    assert outcome is not None and outcome.status == "failed" and "internal error" not in outcome.detail
    rest = await rest_of(redis, KEY)
    assert rest is not None and rest.failures == 10_001 and outcome.cooldown_until == rest.until
    left = (rest.until - datetime.now(timezone.utc)).total_seconds()
    assert 7200 - 60 < left <= 7200
    assert 7200 - 60 < await redis.ttl(TEST_KEYS.rest(KEY)) <= 7200
    assert rest_seconds(10**9, 900, 7200) == 7200 and rest_seconds(3, 900, 7200) == 3600


async def test_a_429_is_retried_after_the_retry_after_it_names(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.script(Error.rate_limit(retry_after=1.5))
    fake_llm.responder = Summarizer()
    nanobot_home.write_session(KEY, conversation(15))
    outcome, record = await summarize(redis, deps_for(summary_retry_delay=0.05))
    assert outcome is not None and outcome.status == "summarized" and outcome.job_try == 2
    first, second = fake_llm.requests
    assert second.received_at - first.received_at >= 1.5


def _slow(model: Summarizer, seconds: float):
    return lambda request: replace(model(request), delay=seconds)


def _stalls_after(model: Summarizer, answered: int, seconds: float):
    """Answers the first `answered` requests at once and each later one after `seconds`: where a job runs out of
    time depends on the requests, not on how busy the machine is."""

    def respond(request: FakeRequest) -> Reply:
        reply = model(request)
        return reply if model.calls <= answered else replace(reply, delay=seconds)

    return respond


def _summarized_users(requests: list[FakeRequest]) -> list[str]:
    return [text for r in requests if is_summary_request(r) for _, text in user_lines(r)]


def _backlog(home) -> list[dict]:
    messages = conversation(60, user="backlog message {i} " + "with a long body of text " * 30)
    home.write_session(KEY, messages)
    return messages


async def test_a_try_that_would_run_out_of_time_keeps_its_chunks_and_the_retry_resumes(
    redis, nanobot_home, fake_llm, deps_for
):
    _backlog(nanobot_home)
    fake_llm.responder = _slow(Summarizer(), 0.3)
    deps = deps_for(summary_input_tokens=3000, summary_timeout=1.0, summary_max_tries=10)
    deps.job_timeout = 2.5  # room for a few calls per try
    outcome, record = await summarize(redis, deps)
    assert outcome is not None and outcome.status == "summarized" and outcome.job_try > 1, outcome
    users = _summarized_users(fake_llm.requests)
    assert len(users) == len(set(users)), "no message was sent to the summarizer twice"
    assert len(fake_llm.requests) == outcome.spend.calls > 3


async def test_a_job_cancelled_for_time_leaves_an_outcome_and_the_next_job_resumes(
    redis, nanobot_home, fake_llm, deps_for
):
    _backlog(nanobot_home)
    fake_llm.responder = _stalls_after(Summarizer(), 2, 30.0)
    deps = deps_for(summary_input_tokens=2000)
    outcome, record = await summarize(redis, deps, job_timeout=2)  # arq cancels the try at its third call
    assert outcome is not None and outcome.status == "failed" and "cancelled" in outcome.detail
    assert record is None
    before = fake_llm.requests
    assert len(before) == 3
    assert await rest_of(redis, KEY) is None, "a cancelled try is no failure of the session: no rest"
    in_flight = set(_summarized_users(before[-1:]))  # cut off by the cancel: never answered
    fake_llm.responder = Summarizer()
    outcome, record = await summarize(redis, deps)
    assert outcome is not None and outcome.status == "summarized" and record is not None
    again = set(_summarized_users(before)) & set(_summarized_users(fake_llm.requests[len(before) :]))
    assert again == in_flight, "only the chunk cut off in flight is asked again, no finished one"


async def test_structured_output_is_asked_for_and_a_server_that_refuses_it_is_asked_without(
    redis, nanobot_home, fake_llm, deps_for, monkeypatch
):
    monkeypatch.setattr(llm, "_REFUSED", {})
    model = Summarizer()

    def strict_server(request: FakeRequest) -> Reply | Error:
        if (request.body or {}).get("response_format"):
            return Error(
                400,
                "Invalid parameter: 'response_format' of type 'json_object' is not supported",
                type="invalid_request_error",
            )
        return model(request)

    fake_llm.responder = strict_server
    nanobot_home.write_session(KEY, conversation(15))
    deps = deps_for()
    outcome, record = await summarize(redis, deps)
    assert outcome is not None and outcome.status == "summarized" and record is not None
    first, second = fake_llm.requests
    assert first.body["response_format"] == {"type": "json_object"} and "response_format" not in second.body
    nanobot_home.write_session(KEY, conversation(25))
    await summarize(redis, deps)
    assert "response_format" not in fake_llm.requests[-1].body, "remembered: not asked with it again"


async def test_each_job_records_calls_tokens_and_cost_and_status_shows_them(
    redis, redis_url, nanobot_home, fake_llm, deps_for, capsys
):
    route_openai_models_to(nanobot_home, fake_llm)
    model = Summarizer()
    fake_llm.responder = lambda request: replace(
        model(request), prompt_tokens=10_000, completion_tokens=1_000, cached_tokens=4_000
    )
    nanobot_home.write_session(KEY, conversation(15))
    outcome, record = await summarize(redis, deps_for(summary_model="openai/gpt-4o-mini"))
    assert outcome is not None and outcome.status == "summarized"
    assert fake_llm.requests[0].body["response_format"]["type"] == "json_schema"
    spend = outcome.spend
    assert (spend.calls, spend.prompt_tokens, spend.completion_tokens, spend.cached_tokens) == (1, 10_000, 1_000, 4_000)
    # gpt-4o-mini in litellm's table: 6,000 tokens at $0.15/M, 4,000 cached at $0.075/M, 1,000 out at $0.60/M.
    assert spend.cost == pytest.approx(6_000 * 0.15e-6 + 4_000 * 0.075e-6 + 1_000 * 0.6e-6, rel=0.01)
    env = process_env(nanobot_home, redis_url, config=True)
    shown = await asyncio.to_thread(run_in_process, capsys, "status", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    state = json.loads(shown.stdout)
    assert state["spend"]["sessions"][KEY]["calls"] == 1 and state["spend"]["total"]["prompt_tokens"] == 10_000
    assert state["spend"]["sessions"][KEY]["cost"] == pytest.approx(spend.cost)
    [last] = state["outcomes"]
    assert last["spend"]["calls"] == 1 and last["reason"] == "tokens" and last["model"] == "openai/gpt-4o-mini"
    table = await asyncio.to_thread(run_in_process, capsys, "status", env=env)
    assert table.returncode == 0 and "summarizing so far: 1 call; 10,000 prompt tokens" in table.stdout


async def test_a_daily_token_cap_stops_summarizing_until_tomorrow(redis, nanobot_home, fake_llm, deps_for):
    model = Summarizer()
    fake_llm.responder = lambda request: replace(model(request), prompt_tokens=900, completion_tokens=100)
    deps = deps_for(summary_daily_tokens=500)
    nanobot_home.write_session(KEY, conversation(15))
    outcome, _ = await summarize(redis, deps)
    assert outcome is not None and outcome.status == "summarized"
    nanobot_home.write_session(KEY, conversation(30))
    outcome, _ = await summarize(redis, deps, reason="manual")
    assert outcome is not None and outcome.status == "noop" and "daily cap" in outcome.detail
    assert len(fake_llm.requests) == 1
    rest = await rest_of(redis, KEY)
    assert rest is not None and rest.until > datetime.now(rest.until.tzinfo) + timedelta(seconds=50)


async def test_fidelity_is_recorded_for_each_summary(redis, nanobot_home, fake_llm, deps_for):
    fake_llm.responder = Summarizer()
    nanobot_home.write_session(
        KEY,
        conversation(15, user="question {i} about host-{i}.example.com"),
        metadata={"_last_summary": {"text": EARLIER, "last_active": "x"}},
    )
    outcome, _ = await summarize(redis, deps_for())
    assert outcome is not None and outcome.status == "summarized"
    assert outcome.carry_forward == 1.0, "the obedient model keeps every identifier of the previous summary"
    assert outcome.covered_kept is not None and 0.3 < outcome.covered_kept <= 1.0


async def test_notes_a_prose_model_could_not_give_are_not_marked_noted_and_are_asked_for_again(
    redis, nanobot_home, fake_llm, deps_for
):
    prose = Summarizer("prose")
    json_model = Summarizer()
    fake_llm.responder = lambda request: (
        prose(request) if is_summary_request(request) else Error.rate_limit()
    )  # the notes call fails once
    morning = datetime.now().replace(hour=8, minute=0, second=0, microsecond=0)
    nanobot_home.write_session(KEY, conversation(15, start=morning))
    deps = deps_for()
    outcome, record = await summarize(redis, deps)
    assert outcome is not None and outcome.status == "summarized" and record is not None
    assert "notes and facts skipped" in outcome.detail
    memory = nanobot_home.workspace / "memory"
    assert noted_spans(memory, KEY, morning.date().isoformat()) == [], "nothing marked as noted"
    # The daily run asks again (a model that gives notes now) and notes them.
    fake_llm.responder = json_model
    await daily_summaries({"deps": deps, "redis": redis})
    await run_burst(deps)
    spans = noted_spans(memory, KEY, morning.date().isoformat())
    assert all(is_noted(m["timestamp"], spans) for m in conversation(15, start=morning)[: record.boundary])


async def test_a_bad_answer_then_a_failing_fallback_still_gives_up_after_two_tries(
    redis, nanobot_home, fake_llm, deps_for
):
    calls = {"main": 0, "fallback": 0}

    def two_models(request: FakeRequest) -> Reply | Error:
        if request.body["model"] == "fallback-model":
            calls["fallback"] += 1
            return Error.rate_limit()
        calls["main"] += 1
        return Reply(REFUSAL)

    fake_llm.responder = two_models
    route_openai_models_to(nanobot_home, fake_llm)
    nanobot_home.write_session(KEY, conversation(15))
    outcome, record = await summarize(redis, deps_for(summary_fallback_model="openai/fallback-model"))
    assert outcome is not None and outcome.status == "failed" and record is None
    assert calls == {"main": 2, "fallback": 1}, calls


async def test_a_job_that_finds_the_session_resting_neither_pays_nor_lengthens_the_rest(
    redis, nanobot_home, fake_llm, deps_for
):
    fake_llm.default = Reply(REFUSAL)
    nanobot_home.write_session(KEY, conversation(15))
    deps = deps_for()
    await summarize(redis, deps)
    first = await rest_of(redis, KEY)
    assert first is not None and first.failures == 1
    for _ in range(2):  # the daily run, the trigger: jobs that find the rest
        outcome, _ = await summarize(redis, deps, reason="daily")
        assert outcome is not None and outcome.status == "noop" and outcome.spend.calls == 0
    rest = await rest_of(redis, KEY)
    assert rest is not None and (rest.failures, rest.until) == (1, first.until)


async def test_an_empty_notes_answer_does_not_switch_notes_off_for_the_model(redis, nanobot_home, fake_llm, deps_for):
    prose = Summarizer("prose")
    notes_answers = [
        Reply(""),
        Reply(json.dumps({"daily_notes": [{"date": "2026-11-20", "topics": ["deploys"]}], "facts": []})),
    ]
    fake_llm.responder = lambda request: prose(request) if is_summary_request(request) else notes_answers.pop(0)
    deps = deps_for()
    for key in ("telegram:1", "telegram:2"):
        nanobot_home.write_session(key, conversation(15))
        await summarize_now(redis, deps, key)
    assert notes_answers == [], "the second session's notes were asked for"
    assert "deploys" in (nanobot_home.workspace / "memory" / "2026-11-20.md").read_text(encoding="utf-8")


async def test_the_daily_cap_reached_by_the_summary_call_keeps_the_summary(redis, nanobot_home, fake_llm, deps_for):
    prose = Summarizer("prose")
    fake_llm.responder = lambda request: replace(prose(request), prompt_tokens=900, completion_tokens=100)
    nanobot_home.write_session(KEY, conversation(15))
    outcome, record = await summarize(redis, deps_for(summary_daily_tokens=500))
    assert outcome is not None and outcome.status == "summarized" and record is not None
    assert "notes and facts skipped" in outcome.detail and "daily cap" in outcome.detail
    assert len(fake_llm.requests) == 1


async def test_a_summary_that_would_not_shrink_still_writes_its_paid_notes(redis, nanobot_home, fake_llm, deps_for):
    notes = [{"date": "2026-11-20", "topics": ["the deploy script"]}]
    fake_llm.default = Reply(
        json.dumps(
            {"summary": "## What happened\n" + "- a very long summary line\n" * 60, "daily_notes": notes, "facts": []}
        )
    )
    nanobot_home.write_session(KEY, conversation(12, user="q{i}", assistant="a{i}"))
    outcome, record = await summarize(redis, deps_for(summary_keep="messages:2"))
    assert outcome is not None and outcome.status == "noop" and "would not shrink" in outcome.detail
    assert record is None
    assert "the deploy script" in (nanobot_home.workspace / "memory" / "2026-11-20.md").read_text(encoding="utf-8")
