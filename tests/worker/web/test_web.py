"""`nanobot-summary web` over data made by real jobs: each page renders what the worker left (the overview links
each session's last outcome to its page, which says why the job did nothing, and shows spend today and this month
against the caps; the session page shows the summary nanobot sends now), forgetting a fact (written or held)
changes only that fact's line of MEMORY.md and undo puts it back byte for byte (the recall index following at
once), an edited or pinned fact keeps its record through the next job's merge (a pinned one outlives the cap),
the page works with Redis down, its benchmark runs, and its systemd unit verifies and runs.
The safety rules are tested in tests/scenarios/test_web_security.py, the pages in a real browser in
tests/scenarios/test_web_browser.py."""

from __future__ import annotations

import asyncio
import grp
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest
from arq.constants import health_check_key_suffix, in_progress_key_prefix

from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.fakellm import Reply
from harness.models import echo_memory
from harness.redis_server import free_port
from harness.transcripts import conversation
from nanobot_hooks.contract.records import utcnow
from nanobot_hooks.contract.session_format import LAST_SUMMARY
from tests.support.bench import load_bench
from tests.support.paths import ROOT
from tests.support.waiting import wait_until
from tests.support.web import (
    API_KEY,
    FACTS,
    KEY,
    OWN_BOTTOM,
    OWN_TOP,
    PAGES,
    QUIET,
    escaped,
    made_by_jobs,
    remembering,
    served,
)
from tests.support.workers import run_burst, running_worker, summarize_now
from worker.memory.dedup import normalize
from worker.memory.longterm import BEGIN, END, load_meta, pending_path, read_held, sidecar_path
from worker.memory.longterm.edit import edit_fact
from worker.memory.longterm.forget import forget_fact
from worker.state import budget, workers
from worker.state.outcomes import load_outcome
from worker.web.instance import Instance


@pytest.fixture
async def data(redis, nanobot_home, fake_llm, worker_deps) -> Path:
    return await made_by_jobs(redis, nanobot_home, fake_llm, worker_deps())


async def test_the_overview_links_each_sessions_last_outcome_to_its_page_which_says_why(data, settings_for, redis):
    async with served(settings_for(summary_daily_tokens_total=50_000)) as page:
        status, body = await page.get("/")
        assert status == 200, body
        assert "No worker is running" in body  # the burst worker ended: the page says so
        # Spend today against the cap, and this month, as the job recorded them.
        month_tokens, _ = await budget.month_spend(redis, page.instance.today()[:7])
        assert month_tokens > 0 and f"{month_tokens:,} tokens</p>" in body and "of 50,000 a day" in body
        for key in (KEY, QUIET):
            assert f'href="/session?key={quote(key, safe="")}"' in body
        outcome = await load_outcome(await page.instance.client(), QUIET)
        assert outcome is not None and outcome.status == "noop" and outcome.detail
        # One click: the session's page says why its last job did nothing.
        status, session = await page.get(f"/session?key={quote(QUIET, safe='')}")
        assert status == 200 and "skipped" in session
        assert f'<p class="why">{escaped(outcome.detail)}</p>' in session


async def test_every_page_renders_real_data(data, settings_for):
    async with served(settings_for()) as page:
        for url in PAGES:
            status, body = await page.get(url)
            assert status == 200, (url, body)
        _, memory = await page.get("/memory")
        assert "The user prefers dark mode in every editor" in memory and KEY in memory
        _, recall = await page.get(f"/recall?q=nickname&session={quote(KEY, safe='')}")
        assert "nickname" in recall
        _, notes = await page.get("/notes")
        assert 'href="/notes?day=2026-11-20"' in notes and "question 5 about the deploy script" in notes
        assert (await page.get("/notes?day=../MEMORY"))[1].count("The user prefers dark mode") == 0


def _outside(raw: bytes) -> tuple[bytes, bytes]:
    """The bytes before the managed part's begin line and after its end line: the user's own."""
    begin, end = raw.index(BEGIN.encode()), raw.index(END.encode()) + len(END)
    return raw[:begin], raw[end:]


async def test_forgetting_a_fact_changes_only_its_line_and_undo_puts_it_back_byte_for_byte(data, settings_for):
    before = data.read_bytes()
    assert before.startswith(OWN_TOP) and before.endswith(OWN_BOTTOM)
    forgotten = "The user prefers dark mode in every editor"
    async with served(settings_for()) as page:
        _, recall = await page.get(f"/recall?q=dark+mode&session={quote(KEY, safe='')}")
        assert forgotten in recall, "the recall index holds the fact before it is forgotten"
        status, location = await page.post("/memory/forget", {"csrf": await page.csrf(), "text": forgotten})
        assert status == 303 and location.startswith("/memory?undo="), location
        after = data.read_bytes()
        assert _outside(after) == _outside(before), "not a byte of the user's own lines changed"
        assert forgotten.encode() not in after and forgotten.lower() not in str(load_meta(sidecar_path(data)))
        # Only the fact's line went, with the heading it alone stood under (the worker's own rendering).
        removed = [line for line in before.split(b"\n") if line not in after.split(b"\n")]
        assert removed == [b"### Preferences", forgotten.encode()], removed
        for fact in FACTS[::2]:
            assert fact.encode() in after
        _, recall = await page.get(f"/recall?q=dark+mode&session={quote(KEY, safe='')}")
        assert forgotten not in recall, "the recall index followed MEMORY.md at once"
        status, body = await page.get(location)
        assert status == 200 and f"Forgotten: <q>{forgotten}</q>" in body
        ticket = location.split("=", 1)[1]
        status, body = await page.post("/memory/undo", {"csrf": await page.csrf(), "ticket": ticket})
        assert status == 200 and f"Undone: the fact is back as it was: <q>{forgotten}</q>" in body
        assert data.read_bytes() == before, "undo puts the fact back where it was, every byte as before"
        assert forgotten.lower() in str(load_meta(sidecar_path(data))), "with its session, day and importance"
        # An undo is used once.
        status, location = await page.post("/memory/undo", {"csrf": await page.csrf(), "ticket": ticket})
        assert location == "/memory?note=gone" and data.read_bytes() == before


async def test_the_page_works_without_redis_and_says_so(nanobot_home, settings_for):
    settings = settings_for(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    async with served(settings) as page:
        status, body = await page.get("/")
        assert status == 200 and "Redis cannot be read" in body
        assert (await page.get("/memory"))[0] == 200
        assert (await page.get("/sessions"))[0] == 200


UNIT = ROOT / "deploy" / "nanobot-summary-web.service"
INSTALLED = "/opt/nanobot-summary/bin/nanobot-summary"  # the unit's command: the worker's wheel installed there
HERE = str(Path(sys.prefix) / "bin" / "nanobot-summary")  # the same command in this suite's environment


def test_the_web_unit_verifies_with_systemd_analyze(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("needs systemd-analyze")
    text = UNIT.read_text(encoding="utf-8").replace(INSTALLED, HERE)
    text = text.replace("User=nanobot", f"User={pwd.getpwuid(os.getuid()).pw_name}")
    text = text.replace("Group=nanobot", f"Group={grp.getgrgid(os.getgid()).gr_name}")
    (tmp_path / UNIT.name).write_text(text, encoding="utf-8")
    result = subprocess.run([analyze, "verify", str(tmp_path / UNIT.name)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and (result.stdout + result.stderr).strip() == "", result.stdout + result.stderr


@pytest.mark.slow  # a worker process, nanobot's python or a pip run
async def test_the_web_units_command_serves_this_machine_only_to_the_holder_of_its_token_file(
    nanobot_home, redis_url, tmp_path
) -> None:
    """The unit's own command line: loopback only, the token file in the unit's state folder, made 0600 at the
    first start; the journal (not a terminal) gets the address without the token, `--url` gives it."""
    line = next(line for line in UNIT.read_text(encoding="utf-8").splitlines() if line.startswith("ExecStart="))
    command = line.partition("=")[2].replace(INSTALLED, HERE).split()
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert command[command.index("--token-file") + 1].startswith("/var/lib/nanobot-summary-web/")
    assert "StateDirectory=nanobot-summary-web" in UNIT.read_text(encoding="utf-8")
    token_file = tmp_path / "state" / "web-token"
    command[command.index("--token-file") + 1] = str(token_file)
    command[command.index("--port") + 1] = "0"
    env = process_env(nanobot_home, redis_url, config=True)
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = await asyncio.to_thread(process.stdout.readline)
        found = re.search(r"listening on http://127\.0\.0\.1:(\d+)/$", line.strip())
        assert found, line
        token = token_file.read_text(encoding="utf-8").strip()
        assert len(token) >= 32 and token_file.stat().st_mode & 0o777 == 0o600
        assert token_file.parent.stat().st_mode & 0o777 == 0o700
        url = subprocess.run(command + ["--url"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert url.stdout.strip() == f"http://127.0.0.1:0/?token={token}", url
        async with aiohttp.ClientSession() as browser:
            async with browser.get(f"http://127.0.0.1:{found.group(1)}/memory") as response:
                assert response.status == 401
            async with browser.get(
                f"http://127.0.0.1:{found.group(1)}/memory", headers={"Authorization": f"Bearer {token}"}
            ) as response:
                assert response.status == 200
    finally:
        process.terminate()
        rest = await asyncio.to_thread(process.communicate, timeout=20)
    assert process.returncode == 0
    assert token not in rest[0], "the token never reaches the journal"


@pytest.mark.slow  # a worker process, nanobot's python or a pip run
async def test_web_url_names_the_running_page_not_the_default_port(nanobot_home, redis_url, tmp_path) -> None:
    """After `web --port N`, `web --url` printed the default port's address, where nothing listened: the running
    page records its address in the state folder, and `--url` names it (the default again once it stopped)."""
    env = process_env(nanobot_home, redis_url, config=True, XDG_STATE_HOME=str(tmp_path / "state"))
    command = [sys.executable, "-m", "worker", "web"]
    process = subprocess.Popen(
        command + ["--port", "0"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        line = await asyncio.to_thread(process.stdout.readline)
        found = re.search(r"listening on http://127\.0\.0\.1:(\d+)/$", line.strip())
        assert found, line
        token = (tmp_path / "state" / "nanobot-summary" / "web-token").read_text(encoding="utf-8").strip()
        url = subprocess.run(command + ["--url"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert url.stdout.strip() == f"http://127.0.0.1:{found.group(1)}/?token={token}", url
        assert url.stderr == "", url.stderr
    finally:
        process.terminate()
        await asyncio.to_thread(process.communicate, timeout=20)
    after = subprocess.run(command + ["--url"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert after.stdout.strip() == f"http://127.0.0.1:8766/?token={token}", after
    assert "no page of yours is running now" in after.stderr, after.stderr
    assert not (tmp_path / "state" / "nanobot-summary" / "web-page.json").exists(), "its record went with it"


async def test_a_fact_still_held_for_memory_md_is_forgotten_from_the_held_file_and_undo_holds_it_again(
    redis, nanobot_home, fake_llm, worker_deps, settings_for
):
    """NANOBOT_MEMORY_WRITE=idle (the default): a job's facts wait in memory/.MEMORY.pending.jsonl while a session
    is active; a user may want one gone before it is ever written."""
    memory = await made_by_jobs(redis, nanobot_home, fake_llm, worker_deps(memory_write="idle"))
    held = pending_path(memory)
    assert FACTS[1] in held.read_text(encoding="utf-8") and FACTS[1].encode() not in memory.read_bytes()
    async with served(settings_for()) as page:
        _, body = await page.get("/memory")
        assert "Held for the next quiet moment" in body and escaped(FACTS[1]) in body
        status, location = await page.post("/memory/forget", {"csrf": await page.csrf(), "text": FACTS[1], "held": "1"})
        assert status == 303 and location.startswith("/memory?undo=")
        assert FACTS[1] not in held.read_text(encoding="utf-8") and FACTS[2] in held.read_text(encoding="utf-8")
        ticket = location.split("=", 1)[1]
        status, body = await page.post("/memory/undo", {"csrf": await page.csrf(), "ticket": ticket})
        assert status == 200 and "Undone: the fact is held again" in body
    assert [fact.text for h in read_held(memory) for fact in h.batch.facts].count(FACTS[1]) == 1
    assert FACTS[1].encode() not in memory.read_bytes(), "held again, not written while a session is active"


def test_the_page_benchmark_runs_at_its_smoke_size_and_times_every_page(capsys) -> None:
    assert load_bench("bench_web").main(["--smoke"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {page.split("?")[0] for page in figures["pages"]} == {
        "/",
        "/memory",
        "/notes",
        "/sessions",
        "/session",
        "/recall",
    }
    assert all(ms > 0 for ms in figures["pages"].values()) and figures["slowest_ms"] > 0
    assert figures["forget_everywhere"]["removal_ms"] > 0 and figures["forget_everywhere"]["passages"] >= 1


async def test_an_edited_fact_keeps_its_record_survives_the_next_job_and_undo_restores_every_byte(
    data, settings_for, redis, nanobot_home, fake_llm, worker_deps
):
    before = data.read_bytes()
    old, new = FACTS[1], "The user prefers a light theme on sunny days"
    async with served(settings_for()) as page:
        # The same fact twice, or nothing at all, is refused and changes nothing.
        for refused in (FACTS[2], "  \n "):
            status, _ = await page.post("/memory/edit", {"csrf": await page.csrf(), "text": old, "new": refused})
            assert status == 400 and data.read_bytes() == before
        status, location = await page.post("/memory/edit", {"csrf": await page.csrf(), "text": old, "new": new})
        assert status == 303 and location.startswith("/memory?undo=")
        after = data.read_bytes()
        assert _outside(after) == _outside(before)
        assert after == before.replace(old.encode(), new.encode())
        record = load_meta(sidecar_path(data))[normalize(new)]
        assert (record.session, record.importance, record.date) == (KEY, 4, page.instance.today())
        assert normalize(old) not in load_meta(sidecar_path(data))
        ticket = location.split("=")[1]
        status, location = await page.post("/memory/undo", {"csrf": await page.csrf(), "ticket": ticket})
        assert data.read_bytes() == before
        # Edited again, it stays through the next job's merge of what the model remembers.
        markup = f"- {new}\n## not a heading {API_KEY}"
        assert (await page.post("/memory/edit", {"csrf": await page.csrf(), "text": old, "new": markup}))[0] == 303
    edited = data.read_bytes()
    assert API_KEY.encode() not in edited and b"\n## not a heading" not in edited, "one line, redacted"
    edited_line = next(line for line in edited.split(b"\n") if new.encode() in line)
    nanobot_home.write_session(KEY, conversation(18, user="more about the deploy script {i}"))
    fake_llm.responder = learning(NEW_FACT)
    await redis.delete(TEST_KEYS.record(KEY))
    outcome = (await summarize_now(redis, worker_deps(), KEY)).outcome
    assert outcome is not None and "facts +1 added" in outcome.detail, outcome
    merged = data.read_bytes()
    assert NEW_FACT.encode() in merged and edited_line in merged.split(b"\n"), "the merge kept the edited fact"
    assert load_meta(sidecar_path(data))[normalize(edited_line.decode())].session == KEY


NEW_FACT = "The user's build server runs Debian 12"


def learning(text: str):
    """echo_memory's notes and summary, remembering one new fact."""

    def answer(request):
        reply = json.loads(echo_memory(request).content)
        reply["facts"] = [
            {"text": text, "tag": "durable", "importance": 4, "source": "user", "category": "configuration"}
        ]
        return Reply(json.dumps(reply))

    return answer


async def test_the_overview_shows_a_running_worker_alive_with_its_health_line(data, settings_for, redis, worker_deps):
    async with running_worker(worker_deps()), served(settings_for()) as page:
        await wait_until(lambda: redis.exists(TEST_KEYS.queue + health_check_key_suffix), what="arq's health line")
        status, body = await page.get("/")
        assert status == 200 and '<span class="good">alive</span>: since it started' in body and "jobs done" in body
        assert "No worker is running" not in body
        assert "j_complete=" not in body, "arq's health line is read, not shown: its time has no zone"


async def test_a_pinned_fact_outlives_the_caps_eviction_in_the_next_job_and_undo_unpins(
    data, settings_for, redis, nanobot_home, fake_llm, worker_deps
):
    before = data.read_bytes()
    oldest = FACTS[1]  # among facts of one importance and day, the cap evicts the oldest first: this one
    async with served(settings_for()) as page:
        status, location = await page.post("/memory/pin", {"csrf": await page.csrf(), "text": oldest, "pin": "1"})
        assert status == 303 and data.read_bytes() == before, "a pin changes the sidecar only, not the prompt"
        assert load_meta(sidecar_path(data))[normalize(oldest)].pinned
        _, body = await page.get(location)
        assert "Pinned" in body and "pinned</span>" in body
        await page.post("/memory/undo", {"csrf": await page.csrf(), "ticket": location.split("=")[1]})
        assert not load_meta(sidecar_path(data))[normalize(oldest)].pinned
        await page.post("/memory/pin", {"csrf": await page.csrf(), "text": oldest, "pin": "1"})
    nanobot_home.write_session(KEY, conversation(18, user="more about the deploy script {i}"))
    fake_llm.responder = learning(NEW_FACT)
    await redis.delete(TEST_KEYS.record(KEY))
    outcome = (await summarize_now(redis, worker_deps(memory_max_facts=3), KEY)).outcome
    assert outcome is not None and "1 evicted" in outcome.detail, outcome
    merged = data.read_bytes()
    assert oldest.encode() in merged and NEW_FACT.encode() in merged and FACTS[2].encode() not in merged
    assert load_meta(sidecar_path(data))[normalize(oldest)].pinned, "still pinned after the merge"


async def test_the_session_page_shows_the_summary_nanobot_sends_now_from_line_one(nanobot_home, settings_for):
    summary = "## Earlier\n- the user set up <b>staging</b> on port 8443"
    nanobot_home.write_session(
        "cli:direct",
        conversation(6),
        last_archived=8,
        metadata={LAST_SUMMARY: {"text": summary, "last_active": "2026-11-20T10:07:00"}},
    )
    async with served(settings_for()) as page:
        status, body = await page.get(f"/session?key={quote('cli:direct', safe='')}")
    assert status == 200 and "12 messages; nanobot replays them from message 8 on." in body
    assert f'<pre class="summary">{escaped(summary)}</pre>' in body


async def test_the_session_page_draws_the_context_sawtooth_a_point_per_turn_and_a_mark_per_applied_summary(
    nanobot_home, settings_for, redis
):
    """The history nanobot's hooks keep (tests/hooks/test_plugin.py writes it through the hooks): each turn's prompt
    tokens rising, then a summary applied, then lower."""
    from nanobot_hooks.contract.queue import note_context

    nanobot_home.write_session("cli:direct", conversation(6))
    turns = [{"at": 100.0 + n, "tokens": tokens} for n, tokens in enumerate((9_000, 12_000, 15_000, 18_000))]
    applied = {"at": 104.5, "applied": True, "before": 18_000, "after": 6_000}
    after = [{"at": 105.0 + n, "tokens": tokens} for n, tokens in enumerate((7_000, 9_000))]
    # The mark first: nanobot writes it at once, the turns' tokens in batches. The chart puts them in time order.
    await note_context(redis, [("cli:direct", entry) for entry in [applied] + turns + after])
    async with served(settings_for()) as page:
        status, body = await page.get(f"/session?key={quote('cli:direct', safe='')}")
    assert status == 200 and "The whole prompt of each of the last 6 turns" in body
    points = re.search(r'<polyline class="tokens" points="([^"]+)"', body)
    assert points is not None and len(points.group(1).split()) == 6, "a point per turn"
    ys = [int(point.split(",")[1]) for point in points.group(1).split()]
    assert ys[3] < ys[4] and ys[0] > ys[3], "up to the summary, down after it (SVG's y grows downwards)"
    marks = re.findall(r'<line class="applied" x1="(\d+)"', body)
    xs = [int(point.split(",")[0]) for point in points.group(1).split()]
    assert len(marks) == 1 and xs[3] < int(marks[0]) < xs[4], "the summary between the turns it parted"
    assert "summary applied: the replayed history 18,000 → 6,000 tokens (−12,000)" in body


def _text(body: str) -> str:
    """The page's words as a browser shows them: tags out, runs of white space as one space."""
    return " ".join(re.sub(r"<[^>]+>", "", body).split())


async def test_the_overview_spaces_a_stale_job_and_a_report_without_a_version(
    nanobot_home, settings_for, redis
) -> None:
    """Read as words: "cli:direct STALE", "vm:28572, last beat" (was "cli:directSTALE", "vm:28572 , last beat")."""
    report = workers.WorkerReport(host="vm", pid=28572, started_at=utcnow(), heartbeat_at=utcnow() - timedelta(hours=1))
    await redis.set(TEST_KEYS.worker(report.worker_id), report.model_dump_json(), ex=600)
    await redis.sadd(TEST_KEYS.index("workers"), report.worker_id)  # as a worker indexes its report
    # A killed worker's job: still in the queue, its in-progress mark left.
    await redis.zadd(TEST_KEYS.queue, {TEST_KEYS.job_id(QUIET): 0})
    await redis.set(in_progress_key_prefix + TEST_KEYS.job_id(QUIET), b"1", px=60_000)
    async with served(settings_for()) as page:
        status, body = await page.get("/")
    words = _text(body)
    assert status == 200 and f"{QUIET} STALE: no worker is alive" in words, words
    assert "vm:28572, last beat" in words, words


async def test_the_memory_page_counts_no_line_of_nanobots_template_as_the_users_own(
    nanobot_home, nanobot_exe, settings_for
) -> None:
    """MEMORY.md as `nanobot onboard` writes it (nanobot's own template file), one line of the user's added."""
    [template] = nanobot_exe.resolve().parents[1].glob("lib/python3*/site-packages/nanobot/templates/memory/MEMORY.md")
    memory = nanobot_home.workspace / "memory" / "MEMORY.md"
    memory.parent.mkdir(parents=True, exist_ok=True)
    memory.write_bytes(template.read_bytes())
    async with served(settings_for()) as page:
        status, body = await page.get("/memory")
    assert len(template.read_text().splitlines()) >= 15, "nanobot's template: a score of lines, none the user's"
    assert (
        status == 200
        and "The file's 0 line(s) of your own (nanobot's template's headings and placeholders "
        "are nobody's, and not counted)"
        in _text(body)
    ), _text(body)
    memory.write_bytes(template.read_bytes() + b"\n- I like green tea\n")
    async with served(settings_for()) as page:
        status, body = await page.get("/memory")
    assert status == 200 and "The file's 1 line(s) of your own" in _text(body), _text(body)


def backdate(home, seconds: float) -> None:
    """Every session file was last written `seconds` ago: the minute's flush finds every session quiet."""
    moment = time.time() - seconds
    for path in home.sessions_dir.iterdir():
        os.utime(path, (moment, moment))


async def held_again(redis, home, deps) -> None:
    """Another job over KEY remembers FACTS again while the session is active: copies of them wait, held."""
    home.write_session(KEY, conversation(18, user="more about the deploy script {i}"))
    await redis.delete(TEST_KEYS.record(KEY))
    outcome = (await summarize_now(redis, deps, KEY)).outcome
    assert outcome is not None and "facts held for MEMORY.md" in outcome.detail, outcome


async def test_an_edit_or_forget_on_the_page_is_not_undone_by_held_copies_of_the_old_text_at_the_next_flush(
    data, settings_for, redis, nanobot_home, worker_deps
):
    idle = worker_deps(memory_write="idle", summary_cache_ttl=60)
    await held_again(redis, nanobot_home, idle)
    assert FACTS[1] in pending_path(data).read_text(encoding="utf-8")
    new = "The user prefers a light theme on sunny days"
    async with served(settings_for()) as page:
        status, _ = await page.post("/memory/edit", {"csrf": await page.csrf(), "text": FACTS[1], "new": new})
        assert status == 303
        assert (await page.post("/memory/forget", {"csrf": await page.csrf(), "text": FACTS[2]}))[0] == 303
    held = pending_path(data).read_text(encoding="utf-8") if pending_path(data).exists() else ""
    assert FACTS[1] not in held and FACTS[2] not in held, "every held copy of the old texts went"
    backdate(nanobot_home, 120)
    await run_burst(idle)  # the minute's flush, at the worker's start
    after = data.read_text(encoding="utf-8", errors="replace")
    assert new in after and FACTS[1] not in after and FACTS[2] not in after, after


@pytest.mark.parametrize("write", ["now", "idle"])
async def test_a_job_past_its_model_call_when_the_user_forgets_or_edits_cannot_bring_the_old_text_back(
    write, data, settings_for, redis, nanobot_home, fake_llm, worker_deps
):
    """The page's change lands while the job waits for its model's answer, which still holds the old facts."""
    new = "The user prefers a light theme on sunny days"
    changed: list[object] = []

    def answer_after_the_users_change(request):
        if not changed:  # what the page's forget and edit call, in its thread, as the model thinks
            today = Instance.load(settings_for()).today()
            changed.append(forget_fact(data, FACTS[2], today))
            changed.append(edit_fact(data, FACTS[1], new, today))
        return remembering(request)

    fake_llm.responder = answer_after_the_users_change
    deps = worker_deps(memory_write=write, summary_cache_ttl=60)
    # Written just now: with "idle" the job holds its facts (the session is active), with "now" it writes them.
    nanobot_home.write_session(KEY, conversation(18, user="more about the deploy script {i}"))
    await redis.delete(TEST_KEYS.record(KEY))
    outcome = (await summarize_now(redis, deps, KEY)).outcome
    assert outcome is not None and outcome.status == "summarized" and all(changed), outcome
    backdate(nanobot_home, 120)
    await run_burst(deps)  # the minute's flush writes what was held
    after = data.read_text(encoding="utf-8", errors="replace")
    assert FACTS[2] not in after and FACTS[1] not in after and new in after, after
    assert "The user's cat is called Miso" in after and not pending_path(data).exists()
    forgotten_file = data.with_name(".MEMORY.forgotten.json").read_text(encoding="utf-8")
    assert "dark mode" not in forgotten_file and "deploy" not in forgotten_file, "digests, never the text"


async def test_a_held_fact_the_flush_just_wrote_is_forgotten_from_memory_md_and_a_held_one_can_be_edited(
    redis, nanobot_home, fake_llm, worker_deps, settings_for
):
    idle = worker_deps(memory_write="idle", summary_cache_ttl=60)
    memory = await made_by_jobs(redis, nanobot_home, fake_llm, idle)
    held = pending_path(memory)
    new = "The user's cat is called Mochi"
    async with served(settings_for()) as page:
        _, body = await page.get("/memory")
        assert 'aria-label="the held fact\'s new text"' in body, "a held fact has its Edit form"
        status, location = await page.post("/memory/edit", {"csrf": await page.csrf(), "text": FACTS[0], "new": new})
        assert status == 303, location
        assert new in held.read_text(encoding="utf-8") and "Miso" not in held.read_text(encoding="utf-8")
        _, body = await page.get(location)
        assert "Edited (it was held, not yet written)" in body
        edit_ticket = location.split("=", 1)[1]
        backdate(nanobot_home, 120)
        await run_burst(idle)  # the flush writes what the page showed as held a moment ago
        assert FACTS[1] in memory.read_text(encoding="utf-8", errors="replace") and not held.exists()
        status, location = await page.post("/memory/forget", {"csrf": await page.csrf(), "text": FACTS[1], "held": "1"})
        assert status == 303 and location.startswith("/memory?undo="), location
        assert FACTS[1] not in memory.read_text(encoding="utf-8", errors="replace"), "forgotten where it is now"
        # The edit's undo finds the fact written now, and gives it its text back there.
        status, body = await page.post("/memory/undo", {"csrf": await page.csrf(), "ticket": edit_ticket})
        assert status == 200 and "Undone: the fact reads as before" in body
    text = memory.read_text(encoding="utf-8", errors="replace")
    assert "The user's cat is called Miso" in text and new not in text


async def test_a_held_fact_pinned_on_the_page_is_written_pinned_and_outlives_the_cap_edited_or_not(
    redis, nanobot_home, fake_llm, worker_deps, settings_for
):
    """A held fact could be forgotten and edited but not pinned: its pin now rides in the pending file, follows an
    edit, is undone like any pin, and the flush writes the fact pinned, so the cap evicts every other one first."""
    idle = worker_deps(memory_write="idle", summary_cache_ttl=60)
    memory = await made_by_jobs(redis, nanobot_home, fake_llm, idle)
    held = pending_path(memory)
    new = "The user prefers a light theme on sunny days"
    async with served(settings_for()) as page:
        _, body = await page.get("/memory")
        assert body.count('action="/memory/pin"') == len(FACTS), "each held fact has its Pin"
        status, location = await page.post("/memory/pin", {"csrf": await page.csrf(), "text": FACTS[1], "pin": "1"})
        assert status == 303 and location.startswith("/memory?undo="), location
        assert [h.batch.pinned for h in read_held(memory)] == [frozenset({normalize(FACTS[1])})]
        _, body = await page.get(location)
        assert "Pinned" in body and f'{escaped(FACTS[1])} <span class="badge pin">pinned</span>' in body
        status, body = await page.post("/memory/undo", {"csrf": await page.csrf(), "ticket": location.split("=")[1]})
        assert status == 200 and "Undone: unpinned again" in body and not read_held(memory)[0].batch.pinned
        await page.post("/memory/pin", {"csrf": await page.csrf(), "text": FACTS[1], "pin": "1"})
        status, _ = await page.post("/memory/edit", {"csrf": await page.csrf(), "text": FACTS[1], "new": new})
        assert status == 303 and read_held(memory)[0].batch.pinned == {normalize(new)}, "the pin follows the edit"
    assert new in held.read_text(encoding="utf-8") and not memory.with_name(".MEMORY.meta.json").exists()
    backdate(nanobot_home, 120)
    await run_burst(worker_deps(memory_write="idle", summary_cache_ttl=60, memory_max_facts=1))  # the flush
    text = memory.read_text(encoding="utf-8", errors="replace")
    assert new in text and not any(fact in text for fact in FACTS), "the cap of one kept the pinned fact only"
    assert load_meta(sidecar_path(memory))[normalize(new)].pinned and not held.exists()


def correcting(old: str, text: str):
    """echo_memory's notes and summary, correcting the fact `old` into `text`."""

    def answer(request):
        reply = json.loads(echo_memory(request).content)
        reply["facts"] = [
            {
                "text": text,
                "tag": "correction",
                "replaces": old,
                "importance": 4,
                "source": "user",
                "category": "preference",
            }
        ]
        return Reply(json.dumps(reply))

    return answer


async def test_undo_and_an_edit_or_pin_after_a_job_changed_the_fact_say_so_and_keep_the_typed_text(
    data, settings_for, redis, nanobot_home, fake_llm, worker_deps
):
    edited, corrected = "The user prefers a light theme on sunny days", "The user prefers a light theme on rainy days"
    async with served(settings_for()) as page:
        status, location = await page.post("/memory/edit", {"csrf": await page.csrf(), "text": FACTS[1], "new": edited})
        assert status == 303
        # A job merges the user's own correction of the edited fact.
        nanobot_home.write_session(KEY, conversation(18, user="more about the deploy script {i}"))
        fake_llm.responder = correcting(edited, corrected)
        await redis.delete(TEST_KEYS.record(KEY))
        outcome = (await summarize_now(redis, worker_deps(), KEY)).outcome
        assert outcome is not None and "1 replaced" in outcome.detail, outcome
        before = data.read_bytes()
        status, body = await page.post("/memory/undo", {"csrf": await page.csrf(), "ticket": location.split("=", 1)[1]})
        assert status == 409 and "Not undone: the fact changed meanwhile" in body, body
        assert f'It now reads: <q class="now">{corrected}</q>' in body and "back as it was" not in body
        assert data.read_bytes() == before and corrected.encode() in before and FACTS[1].encode() not in before
        # An edit of the text the page showed before: not made, the typed text shown back, for the fact as it is now.
        typed = "The user prefers the solarized theme <always>"
        status, body = await page.post("/memory/edit", {"csrf": await page.csrf(), "text": edited, "new": typed})
        assert status == 409 and "Not edited: the fact changed meanwhile" in body
        assert f'<input type="hidden" name="text" value="{corrected}">' in body
        assert f'aria-label="your text, not saved yet">{escaped(typed)}</textarea>' in body
        # A refused edit keeps the typed text too.
        status, body = await page.post("/memory/edit", {"csrf": await page.csrf(), "text": corrected, "new": FACTS[2]})
        assert status == 400 and "MEMORY.md holds that fact already" in body
        assert f'aria-label="your text, not saved yet">{escaped(FACTS[2])}</textarea>' in body
        # A pin of the old text: not pinned, and said so.
        status, body = await page.post("/memory/pin", {"csrf": await page.csrf(), "text": edited, "pin": "1"})
        assert status == 409 and "Not pinned: the fact changed meanwhile" in body
        assert not any(meta.pinned for meta in load_meta(sidecar_path(data)).values())
        assert data.read_bytes() == before


async def test_a_read_only_memory_md_is_shown_as_such_and_the_page_leaves_it_alone(data, settings_for):
    before = data.read_bytes()
    data.chmod(0o444)
    async with served(settings_for()) as page:
        status, body = await page.get("/memory")
        assert status == 200 and "MEMORY.md is read-only (mode 0444): the worker leaves it alone" in body
        status, body = await page.post("/memory/forget", {"csrf": await page.csrf(), "text": FACTS[1]})
        assert status == 503 and "Not forgotten: MEMORY.md is read-only (mode 0444)" in body
        typed = "The user prefers a light theme"
        status, body = await page.post("/memory/edit", {"csrf": await page.csrf(), "text": FACTS[1], "new": typed})
        assert status == 503 and f'aria-label="your text, not saved yet">{typed}</textarea>' in body
    assert data.read_bytes() == before and (data.stat().st_mode & 0o7777) == 0o444


async def test_the_undo_of_a_pin_or_a_forget_after_a_job_changed_the_fact_says_what_it_is_now(
    data, settings_for, redis, nanobot_home, fake_llm, worker_deps
):
    corrected = "The user prefers dark mode in every editor and terminal"
    async with served(settings_for()) as page:
        _, pinned = await page.post("/memory/pin", {"csrf": await page.csrf(), "text": FACTS[1], "pin": "1"})
        _, forgot = await page.post("/memory/forget", {"csrf": await page.csrf(), "text": FACTS[2]})
        # A job corrects the pinned fact, and learns the forgotten one again (its model asked after the forget).
        nanobot_home.write_session(KEY, conversation(18, user="more about the deploy script {i}"))

        def answer(request):
            reply = json.loads(correcting(FACTS[1], corrected)(request).content)
            reply["facts"].append(
                {"text": FACTS[2], "tag": "durable", "importance": 4, "source": "user", "category": "configuration"}
            )
            return Reply(json.dumps(reply))

        fake_llm.responder = answer
        await redis.delete(TEST_KEYS.record(KEY))
        outcome = (await summarize_now(redis, worker_deps(), KEY)).outcome
        assert outcome is not None and "+1 added, 1 replaced" in outcome.detail, outcome
        before = data.read_bytes()
        status, body = await page.post("/memory/undo", {"csrf": await page.csrf(), "ticket": pinned.split("=")[1]})
        assert status == 409 and "Not undone: the fact changed meanwhile" in body
        assert f'It now reads: <q class="now">{corrected}</q>' in body
        status, body = await page.post("/memory/undo", {"csrf": await page.csrf(), "ticket": forgot.split("=")[1]})
        assert status == 409 and "Nothing to put back: MEMORY.md holds the fact again already" in body
        assert "Undone" not in body
    assert data.read_bytes() == before and data.read_bytes().count(FACTS[2].encode()) == 1
