"""nanobot-summary status's three outputs: a job followed through a real arq worker (in flight, then its outcome) in
JSON and Prometheus metrics, metrics that parse strictly, and session keys with quotes, backslashes, newlines
and markup carried through every output unharmed."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading

from arq.constants import in_progress_key_prefix
from prometheus_client.parser import text_string_to_metric_families

from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.fakellm import FakeRequest, Hang, Reply
from harness.models import summary_json
from harness.redis_server import free_port
from harness.transcripts import conversation
from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.queue import enqueue_summary, load_record, store_record
from nanobot_hooks.contract.records import SummarizeRequest, SummaryRecord, utcnow
from tests.support.commands import run_in_process
from tests.support.paths import ROOT
from tests.support.waiting import wait_until
from tests.support.workers import running_worker
from worker.connections import queue_client
from worker.state import budget, workers
from worker.state.outcomes import JobOutcome, keep_outcome, load_outcome

KEY = "telegram:42"
ODD = 'web:say "hi" \\ back\nslash [bold]x[/]'
Series = dict[str, dict[tuple[tuple[str, str], ...], float]]

# Format 0.0.4, read strictly: a sample line is a name, optional labels with only \\, \" and \n escaped, a value.
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(?:,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def strict_parse(text: str) -> tuple[Series, dict[str, str]]:
    """Every family: HELP then TYPE (once each), then its samples, contiguous; no series twice."""
    assert text.endswith("\n"), "the exposition ends with a line feed"
    series: Series = {}
    kinds: dict[str, str] = {}
    family = None
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            family = line.split(" ")[2]
            assert re.fullmatch(_NAME, family) and family not in kinds and family not in series, line
            series[family] = {}
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name == family and name not in kinds and kind in {"counter", "gauge"}, line
            kinds[name] = kind
        else:
            match = _SAMPLE.match(line)
            assert match and match.group(1) == family and family in kinds, f"stray sample line: {line!r}"
            labels, rest = [], match.group(2) or ""
            while rest:
                label = _LABEL.match(rest)
                assert label, f"bad labels in {line!r}"
                labels.append((label.group(1), re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group(0)], label.group(2))))
                rest = rest[label.end() :]
            key = tuple(sorted(labels))
            assert key not in series[family], f"series twice: {line!r}"
            series[family][key] = float(match.group(3))
    return series, kinds


def metrics(text: str) -> tuple[Series, dict[str, str]]:
    """The strict reading, checked against prometheus_client's own parser: both must agree."""
    series, kinds = strict_parse(text)
    reference: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            reference.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    assert reference == {name: values for name, values in series.items() if values}
    return series, kinds


async def status(capsys, redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`nanobot-summary status ARGS` in this process (test_commands; the help test runs the real one)."""
    return await asyncio.to_thread(
        run_in_process, capsys, "status", *args, env=process_env(redis_url=redis_url, COLUMNS="250")
    )


def value(series: Series, name: str, **labels: str) -> float:
    return series[f"nanobot_summary_{name}"][tuple(sorted(labels.items()))]


class Gate:
    """A fake-LLM answer held back until the test opens the gate: meanwhile the job is in flight."""

    def __init__(self) -> None:
        self.open = threading.Event()

    def __call__(self, request: FakeRequest) -> Reply:
        self.open.wait(60)
        return Reply(summary_json())


async def test_a_job_through_a_real_worker_shows_in_flight_then_its_outcome(
    nanobot_home, fake_llm, redis, redis_url, deps_for, capsys
):
    gate = fake_llm.responder = Gate()
    nanobot_home.write_session(KEY, conversation(15))
    async with running_worker(deps_for(summary_timeout=60.0)):
        await wait_until(lambda: redis.exists(f"{TEST_KEYS.queue}:health-check"), 60, "the worker's health report")
        await enqueue_summary(redis, SummarizeRequest(session_key=KEY, reason="tokens"))
        await asyncio.to_thread(fake_llm.wait_for_requests, 1, 60)
        try:
            during = json.loads((await status(capsys, redis_url, "--json")).stdout)
            assert [
                (job["job_id"], job["kind"], job["session"], job["try"], job["stale"]) for job in during["in_flight"]
            ] == [(TEST_KEYS.job_id(KEY), "summary", KEY, 1, None)]
            assert during["queued"] == 0 and during["outcomes"] == []
            # arq's health line as named numbers: what it counts says the same in the JSON as in the text.
            assert during["worker"]["jobs_done"] == 0 and "last_beat" in during["worker"], during["worker"]
            series, _ = metrics((await status(capsys, redis_url, "--prometheus")).stdout)
            assert value(series, "jobs_in_flight") == 1 and value(series, "queue_depth") == 0
            assert value(series, "worker_up") == 1 and value(series, "redis_up") == 1
            assert "jobs in flight: 1\n  telegram:42 - summary; try 1\n" in (await status(capsys, redis_url)).stdout
        finally:
            gate.open.set()
        await wait_until(lambda: load_outcome(redis, KEY), 60, "the job's outcome")
        await wait_until(lambda: _gone(redis, in_progress_key_prefix + TEST_KEYS.job_id(KEY)), 60, "the job's end")
        outcome, record = await load_outcome(redis, KEY), await load_record(redis, KEY)
        assert outcome is not None and outcome.status == "summarized" and record is not None

        await outcome_shown_everywhere(capsys, redis_url, outcome, record)


async def outcome_shown_everywhere(capsys, redis_url: str, outcome: JobOutcome, record: SummaryRecord) -> None:
    """The finished job in the metrics, the JSON and the text, with the figures its outcome and record hold."""
    result = await status(capsys, redis_url, "--prometheus")
    assert result.returncode == 0, result.stderr
    series, kinds = metrics(result.stdout)
    assert {value(series, "last_outcome_status", session=KEY, status=s) for s in ("noted", "noop", "failed")} == {
        0
    } and value(series, "last_outcome_status", session=KEY, status="summarized") == 1
    assert value(series, "last_outcome_seconds", session=KEY) == outcome.seconds
    assert value(series, "last_outcome_tokens_before", session=KEY) == outcome.tokens_before
    assert value(series, "last_outcome_tokens_after", session=KEY) == outcome.tokens_after
    assert value(series, "last_outcome_finished_timestamp_seconds", session=KEY) == outcome.finished_at.timestamp()
    assert value(series, "pending_records") == 1 and value(series, "jobs_in_flight") == 0
    assert value(series, "llm_calls_total") == outcome.spend.calls >= 1
    assert value(series, "prompt_tokens_total") == outcome.spend.prompt_tokens > 0
    assert value(series, "pickups_total", result="applied") == 0
    assert value(series, "pickups_total", result="forged") == 0, "refused records are a series from the start"
    assert kinds["nanobot_summary_llm_calls_total"] == kinds["nanobot_summary_pickups_total"] == "counter"
    assert kinds["nanobot_summary_queue_depth"] == kinds["nanobot_summary_last_outcome_status"] == "gauge"

    after = json.loads((await status(capsys, redis_url, "--json")).stdout)
    assert after["namespace"] == TEST_KEYS.namespace
    shown = after["outcomes"][0]
    assert (shown["reason"], shown["model"], shown["failures_in_a_row"]) == ("tokens", outcome.model, 0)
    assert (shown["messages_before"], shown["messages_after"]) == (record.messages_before, record.messages_after)
    assert after["pending_records"][0]["boundary"] == record.boundary
    tables = (await status(capsys, redis_url)).stdout
    assert outcome.model in tables and f"{record.messages_before} -> {record.messages_after}" in tables


async def _gone(redis, key: str) -> bool:
    return not await redis.exists(key)


async def test_session_keys_with_quotes_backslashes_newlines_and_markup_survive_every_output(redis, redis_url, capsys):
    await keep_outcome(
        redis,
        JobOutcome(
            session_key=ODD,
            status="failed",
            detail="broke on [red]x[/]",
            seconds=1.25,
            reason="interval",
            model="openai/m",
        ),
    )
    await store_record(
        redis,
        SummaryRecord(
            session_key=ODD,
            summary="s",
            start=0,
            boundary=4,
            boundary_timestamp="t",
            messages_before=9,
            messages_after=6,
            tokens_before=900,
            tokens_after=300,
        ),
    )
    await budget.start_rest(redis, ODD, "it failed", base=60, longest=600)

    result = await status(capsys, redis_url, "--prometheus")
    assert result.returncode == 0, result.stderr
    series, _ = metrics(result.stdout)
    assert value(series, "last_outcome_status", session=ODD, status="failed") == 1
    assert value(series, "last_outcome_seconds", session=ODD) == 1.25
    assert value(series, "pending_records") == 1 and value(series, "resting_sessions") == 1
    assert value(series, "oldest_pending_record_age_seconds") >= 0
    assert ODD not in result.stdout and '\\"hi\\" \\\\ back\\nslash' in result.stdout

    shown = json.loads((await status(capsys, redis_url, "--json")).stdout)
    assert [o["session_key"] for o in shown["outcomes"]] == [ODD] and shown["resting"][0]["session"] == ODD
    tables = await status(capsys, redis_url)
    assert tables.returncode == 0, tables.stderr
    assert "[bold]x[/]" in tables.stdout and "[red]x[/]" in tables.stdout, "markup in data is shown, not obeyed"


def test_help_explains_the_three_outputs_and_a_dead_redis_still_gives_metrics(capsys) -> None:
    helped = subprocess.run(
        [sys.executable, "-m", "worker", "status", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout
    assert "text for people" in helped and "--json" in helped and "--prometheus" in helped and "0.0.4" in helped
    dead = run_in_process(
        capsys, "status", "--prometheus", env=process_env(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    )
    assert dead.returncode == 2 and "does not answer" in dead.stderr
    series, _ = metrics(dead.stdout)
    assert series == {"nanobot_summary_redis_up": {(): 0.0}}


async def test_spend_adds_up_over_calls_whatever_fields_a_call_left_at_zero(redis) -> None:
    from worker.model.llm import Completion

    priced = Completion(
        text="",
        model="m",
        prompt_tokens=100,
        completion_tokens=20,
        cached_tokens=0,
        cost=0.25,
        finish_reason="stop",
        seconds=0.1,
    )
    unpriced = Completion(
        text="",
        model="m",
        prompt_tokens=7,
        completion_tokens=0,
        cached_tokens=3,
        cost=None,
        finish_reason="stop",
        seconds=0.1,
    )
    await budget.start_job(redis, KEY)
    await budget.record_call(redis, KEY, unpriced, "2026-11-20")
    assert set(await redis.hgetall(TEST_KEYS.spend(f"job:{KEY}"))) == {
        b"calls",
        b"prompt_tokens",
        b"cached_tokens",
        b"unpriced_calls",
    }, "a field at zero is sent no command"
    for completion in (priced, priced):
        await budget.record_call(redis, KEY, completion, "2026-11-20")
    wanted = budget.Spend(calls=3, prompt_tokens=207, completion_tokens=40, cached_tokens=3, cost=0.5, unpriced_calls=1)
    assert await budget.job_spend(redis, KEY) == wanted
    keys = TEST_KEYS
    assert budget.Spend.from_hash(await redis.hgetall(keys.spend("total"))) == wanted
    assert budget.Spend.from_hash(await redis.hgetall(keys.spend(f"session:{KEY}"))) == wanted
    assert await budget.over_cap(redis, KEY, "2026-11-20", 247, None) is not None
    assert await budget.over_cap(redis, KEY, "2026-11-20", 248, None) is None


async def test_status_and_its_metrics_see_only_this_instances_jobs_in_flight(
    nanobot_home, fake_llm, redis, redis_url, deps_for, capsys
) -> None:
    """Two instances on one Redis, a job of each running: each one's status lists its own job only (another
    instance's session keys name people, e.g. an email address)."""
    fake_llm.default = Hang(120)  # both jobs wait for the model (asynchronously: the fake serves both)
    other_key = "email:jane.doe@example.com"
    nanobot_home.write_session(KEY, conversation(15))
    nanobot_home.write_session(other_key, conversation(15))
    other = queue_client(redis_url, Keys("other").queue)
    try:
        async with (
            running_worker(deps_for(summary_timeout=60.0)),
            running_worker(deps_for(summary_timeout=60.0, summary_namespace="other")),
        ):
            await enqueue_summary(redis, SummarizeRequest(session_key=KEY))
            await enqueue_summary(other, SummarizeRequest(session_key=other_key))
            await asyncio.to_thread(fake_llm.wait_for_requests, 2, 60)
            shown = json.loads((await status(capsys, redis_url, "--json")).stdout)
            series, _ = metrics((await status(capsys, redis_url, "--prometheus")).stdout)
            text = (await status(capsys, redis_url)).stdout
            theirs = await asyncio.to_thread(
                run_in_process,
                capsys,
                "status",
                "--json",
                env=process_env(redis_url=redis_url, NANOBOT_SUMMARY_NAMESPACE="other"),
            )
    finally:
        await other.aclose()
    assert [job["session"] for job in shown["in_flight"]] == [KEY]
    assert value(series, "jobs_in_flight") == 1 and value(series, "jobs_in_flight_stale") == 0
    assert "jane.doe" not in json.dumps(shown) and "jane.doe" not in text
    assert [job["session"] for job in json.loads(theirs.stdout)["in_flight"]] == [other_key]


async def test_status_reads_at_80_columns_and_wide_with_the_running_workers_settings(
    nanobot_home, fake_llm, redis, redis_url, deps_for, capsys
) -> None:
    """One entry per session, whole parts wrapped at the terminal's width (no table of one-word columns), counts
    in words, and the settings of the running worker (its report), not those of the shell status runs in."""
    fake_llm.default = Reply(summary_json())
    key = "websocket:8f2a1c3e-9b7d-4e11-a2c4-5d6e7f8a9b0c"
    nanobot_home.write_session(key, conversation(15))
    async with running_worker(deps_for()):
        await enqueue_summary(redis, SummarizeRequest(session_key=key, reason="interval"))
        await wait_until(lambda: load_outcome(redis, key), 60, "the job's outcome")
        await redis.hincrby(TEST_KEYS.stats, "applied", 4)  # the hooks' counter of records nanobot applied
        # The report the running worker publishes at each beat (worker/state/workers.py).
        await workers.publish(
            redis, {"auto_summary": False, "summary_keep": "turns:2", "memory_write": "idle"}, utcnow()
        )
        narrow, wide = [
            (
                await asyncio.to_thread(
                    run_in_process,
                    capsys,
                    "status",
                    env=process_env(redis_url=redis_url, COLUMNS=str(columns), NANOBOT_AUTO_SUMMARY="true"),
                )
            ).stdout
            for columns in (80, 200)
        ]
    for text, columns in ((narrow, 80), (wide, 200)):
        assert max(len(line) for line in text.splitlines()) <= columns, text
        assert "pickups: 4 applied" in text and "{'" not in text and "': " not in text, text
        assert (
            "running with: automatic summaries off; a summary keeps the last 2 user turns; MEMORY.md written "
            "once every session is quiet" in " ".join(line.strip() for line in text.splitlines())
        ), text
        assert "fraction:" not in text and "turns:2" not in text and "writes idle" not in text, text
        assert "auto summary on" not in text
    last = wide.split("last job per session: 1\n")[1].split("\n\n")[0].splitlines()
    assert last[0].startswith(f"  {key} - summarized ") and "trigger interval" in last[0] and len(last) <= 3, wide
    last = narrow.split("last job per session: 1\n")[1].split("\n\n")[0].splitlines()
    # At 80 columns the moment (`2026-11-28 07:35:13 (2 min ago)`, as the page writes it) goes to the next line.
    assert last[0].rstrip().startswith(f"  {key} - summarized") and 2 <= len(last) <= 7, narrow
    # (The detail's last words may end the entry on a short line of their own: a wrapped text's tail, no column.)
    assert all(len(line.split()) > 2 for line in last[:-1]), "no line of one or two words"
    # The session's one job's figures are said once, in its entry, not again in a section of spend per session.
    per_session = narrow.split("last job per session: 1\n")[1]
    assert "summarizing spend" not in per_session and per_session.count("1 call;") == 1, narrow


async def test_a_finished_cron_tick_is_not_in_flight(nanobot_home, redis, redis_url, deps_for, capsys) -> None:
    """arq keeps a finished cron tick's in-progress mark 60 s (no other worker runs the tick again): the minute's
    MEMORY.md check was always listed in flight, also after its worker was gone."""
    async with running_worker(deps_for(memory_write="idle")):  # its flush_memory runs at start, then every minute

        async def tick_done() -> bool:
            marks = [k async for k in redis.scan_iter(match=f"{in_progress_key_prefix}{TEST_KEYS.cron('')}*")]
            return bool(marks) and 0 < await redis.pttl(marks[0]) <= 60_000

        await wait_until(tick_done, 60, "the minute's check to run once")
        shown = json.loads((await status(capsys, redis_url, "--json")).stdout)
    assert shown["in_flight"] == [], shown["in_flight"]


async def test_json_says_null_for_a_cost_no_price_is_known_for(redis, redis_url, capsys) -> None:
    """Calls of a model litellm has no price for: their cost is unknown (null), not $0.00; the text says so too."""
    from worker.model.llm import Completion

    unpriced = Completion(
        text="",
        model="m",
        prompt_tokens=700,
        completion_tokens=50,
        cached_tokens=0,
        cost=None,
        finish_reason="stop",
        seconds=0.1,
    )
    await budget.start_job(redis, KEY)
    await budget.record_call(redis, KEY, unpriced, "2026-11-20")
    await keep_outcome(
        redis, JobOutcome(session_key=KEY, status="summarized", detail="ok", spend=await budget.job_spend(redis, KEY))
    )
    shown = json.loads((await status(capsys, redis_url, "--json")).stdout)
    assert shown["spend"]["total"]["cost"] is None and shown["spend"]["total"]["unpriced_calls"] == 1
    assert shown["spend"]["sessions"][KEY]["cost"] is None and shown["outcomes"][0]["spend"]["cost"] is None
    assert "cost unknown" in (await status(capsys, redis_url)).stdout
    series, _ = metrics((await status(capsys, redis_url, "--prometheus")).stdout)
    assert value(series, "unpriced_calls_total") == 1 and value(series, "cost_usd_total") == 0


async def test_status_writes_moments_and_lengths_as_the_page_does_in_one_named_zone(redis, redis_url, capsys) -> None:
    """status wrote "2.0h ago", "until 2026-11-28 07:35:13 UTC", "took 295.3s" and arq's zoneless "Nov-28 07:35:13"
    where the page writes `2026-11-28 15:35:13 (2 h ago)` in the instance's named zone and `4 min 55 s`
    (worker.text.clock)."""
    from datetime import timedelta
    from zoneinfo import ZoneInfo

    from arq.constants import health_check_key_suffix

    zone = ZoneInfo("Asia/Shanghai")
    now = utcnow()
    finished = now - timedelta(hours=2, minutes=5)
    await keep_outcome(
        redis,
        JobOutcome(
            session_key=KEY,
            status="failed",
            detail="the model answered 500",
            seconds=295.3,
            reason="interval",
            model="openai/m",
            finished_at=finished,
        ),
    )
    await store_record(
        redis,
        SummaryRecord(
            session_key=KEY,
            summary="s",
            start=0,
            boundary=4,
            boundary_timestamp="t",
            messages_before=9,
            messages_after=6,
            tokens_before=900,
            tokens_after=300,
            created_at=now - timedelta(minutes=3),
        ),
    )
    rest = await budget.start_rest(redis, KEY, "it failed", base=600, longest=600)
    await redis.set(
        TEST_KEYS.queue + health_check_key_suffix,
        "Nov-28 07:35:13 j_complete=3 j_failed=1 j_retried=0 j_ongoing=0 queued=0",
        ex=60,
    )
    await workers.publish(redis, {}, now)
    text = (
        await asyncio.to_thread(
            run_in_process,
            capsys,
            "status",
            env=process_env(redis_url=redis_url, COLUMNS="250", NANOBOT_SUMMARY_TIMEZONE="Asia/Shanghai"),
        )
    ).stdout

    def written(moment) -> str:
        return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S")

    assert text.splitlines()[0].endswith(", times in Asia/Shanghai"), text
    assert f"FAILED {written(finished)} (2 h 5 min ago)" in text, text
    assert "took 4 min 55 s" in text and "295.3" not in text, text
    assert rest is not None and re.search(rf"until {written(rest.until)} \(in (9 min 5\d s|10 min)\)", text), text
    assert re.search(rf"made {written(now - timedelta(minutes=3))} \(3 min( \d s)? ago\)", text), text
    assert re.search(r"last beat \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \((just now|\d+ s ago)\)", text), text
    assert "Nov-28" not in text and " UTC" not in text and not re.search(r"\d+(\.\d)?[smh] ago", text), text


def test_arqs_retried_count_is_told_as_put_off_or_retried() -> None:
    """arq counts an idle check deferred until the session is quiet (Retry(defer=...)) as retried: a healthy worker
    showed "retried" climbing with no failure at all."""
    from worker.commands.status_text import beat

    line = "Nov-28 07:35:13 j_complete=3 j_failed=0 j_retried=7 j_ongoing=0 queued=1"
    assert "3 done, 0 failed, 7 put off or retried" in beat(line)[1], beat(line)
