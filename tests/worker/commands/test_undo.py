"""nanobot-summary undo: after the real nanobot applied a summary, undoing it makes nanobot replay the covered
messages again with every message line unchanged, and a fresh summary starts from the first message; a summary
still waiting is dropped, and a queued job, a dry run and an unknown session leave everything as it was."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.models import (
    BIG_PROMPT,
    SMALL_PROMPT,
    SUMMARY_TEXT,
    chat_requests,
    history_text,
    is_summary_request,
    system_text,
)
from harness.nanobot_cli import ARCHIVED, turn
from harness.sandbox import session_lines
from harness.transcripts import conversation
from nanobot_hooks.contract.marker import METADATA_KEY, SessionMarker
from nanobot_hooks.contract.queue import enqueue_summary, load_record, pending_sessions
from nanobot_hooks.contract.records import SummarizeRequest
from tests.support.commands import run_in_process
from tests.support.crossing import (
    CHAT,
    assert_summary_replaces_covered_messages,
    gateway_cross,
    seed_cross_and_summarize,
)
from tests.support.paths import ROOT
from tests.support.queue_probes import applied, has_record, stats
from tests.support.waiting import wait_until
from tests.support.workers import run_burst, summarize_now

KEY = "telegram:42"


def undo_process(home, redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`nanobot-summary undo` in its own process (the first test: the command as users run it)."""
    return subprocess.run(
        [sys.executable, "-m", "worker", "undo", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=process_env(home, redis_url, config=True),
        timeout=60,
    )


def undo(capsys, home, redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`nanobot-summary undo` in this process (from an async test: through asyncio.to_thread)."""
    return run_in_process(capsys, "undo", *args, env=process_env(home, redis_url, config=True))


def only_the_undo(metadata: dict) -> bool:
    """The project's part of line 1 after an undo: no waiting copy, no applied mark, only the undo's stamp."""
    marker = SessionMarker.from_metadata(metadata)
    return (
        marker.pending is None
        and marker.applied is None
        and marker.undone is not None
        and set(metadata[METADATA_KEY]) == {"undone"}
    )


def message_lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")[1:]


async def test_undoing_an_applied_summary_replays_the_covered_messages_and_a_fresh_one_starts_at_zero(
    nanobot_exe, agent_home, fake_llm, script, redis, redis_url, worker_deps
):
    key = "telegram:7"
    seeded, env, record = await seed_cross_and_summarize(
        nanobot_exe, agent_home, redis_url, script, key, redis, worker_deps()
    )
    assert record.boundary > 0
    script.prompt_tokens = SMALL_PROMPT
    await turn(nanobot_exe, agent_home, env, key, "turn that applies the summary")
    assert_summary_replaces_covered_messages(fake_llm, seeded, record.boundary)

    path = agent_home.session_file(key)
    lines, mtime = message_lines(path), path.stat().st_mtime_ns
    result = undo_process(agent_home, redis_url, key)
    assert result.returncode == 0, result.stderr
    assert f"from {record.boundary} to 0" in result.stdout
    assert message_lines(path) == lines, "every message line byte for byte, nanobot's marker included"
    assert path.stat().st_mtime_ns == mtime, "an unfinished turn's recovery file stays valid"
    head, _ = session_lines(agent_home, key)
    assert head["last_archived"] == head["last_consolidated"] == 0
    assert "_last_summary" not in head["metadata"] and only_the_undo(head["metadata"])

    await turn(nanobot_exe, agent_home, env, key, "turn after the undo")
    request = chat_requests(fake_llm)[-1]
    assert ARCHIVED not in system_text(request)
    assert all(m["content"] in history_text(request) for m in seeded), "the covered messages are sent again"
    # nanobot's hidden marker row stays where the summary was applied, and nanobot sends it too
    # (docs/operations.md says so).
    assert "Continue the active task from the working-memory checkpoint above." in history_text(request)

    fake_llm.clear()
    fresh = (await summarize_now(redis, worker_deps(), key)).record
    assert fresh is not None and fresh.start == 0, "summarized from the first message, no old summary folded in"
    asked = [r for r in fake_llm.requests if is_summary_request(r)]
    assert asked and seeded[0]["content"] in str(asked[0].body)


async def test_undo_while_the_gateway_holds_the_session_reaches_it_and_the_next_turn_sends_every_message(
    gateway, nanobot_home, fake_llm, script, redis, redis_url, worker_deps
):
    key = f"websocket:{CHAT}"
    seeded, gw, _ = await gateway_cross(gateway, nanobot_home, script, redis, "crossing turn")
    await run_burst(worker_deps())
    await wait_until(lambda: applied(redis, key), what="the gateway to apply the record")
    script.prompt_tokens = SMALL_PROMPT
    await gw.say(CHAT, "a turn with the summary")
    assert SUMMARY_TEXT in system_text(chat_requests(fake_llm)[-1]), "the gateway holds the summarized session"

    result = await asyncio.to_thread(undo_process, nanobot_home, redis_url, key)
    assert result.returncode == 0, result.stderr
    assert "the running nanobot that holds the session undid it there too" in result.stdout, result.stdout
    assert await load_record(redis, key) is None and await pending_sessions(redis) == []

    await gw.say(CHAT, "the turn after the undo")
    request = chat_requests(fake_llm)[-1]
    assert ARCHIVED not in system_text(request) and SUMMARY_TEXT not in system_text(request)
    assert all(m["content"] in history_text(request) for m in seeded), "every message is sent again"
    await gw.stop()  # nanobot's shutdown flush writes what it holds
    head, _ = session_lines(nanobot_home, key)
    assert head["last_archived"] == head["last_consolidated"] == 0
    assert "_last_summary" not in head["metadata"] and only_the_undo(head["metadata"])


async def test_a_record_stored_again_after_undo_is_refused_and_every_message_is_sent_also_after_a_restart(
    gateway, nanobot_home, fake_llm, script, redis, redis_url, worker_deps
):
    """A client of the shared Redis that saw the genuine record once stores the same bytes again after the undo: the
    gateway refuses it in one line and counts it, the next turn sends every message, and a restarted gateway (which
    knows the session only from its file) refuses it too."""
    key = f"websocket:{CHAT}"
    seeded, gw, _ = await gateway_cross(gateway, nanobot_home, script, redis, "crossing turn")
    assert gw.process is not None
    gw.process.send_signal(signal.SIGSTOP)  # it hears the notice once the record was read: no race with its pickup
    try:
        await run_burst(worker_deps())
        captured = await redis.get(TEST_KEYS.record(key))
    finally:
        gw.process.send_signal(signal.SIGCONT)
    assert captured, "the genuine record, as any client of the shared Redis reads it"
    await wait_until(lambda: applied(redis, key), what="the gateway to apply the record")
    script.prompt_tokens = SMALL_PROMPT
    await gw.say(CHAT, "a turn with the summary")
    assert SUMMARY_TEXT in system_text(chat_requests(fake_llm)[-1])
    result = await asyncio.to_thread(undo_process, nanobot_home, redis_url, key)
    assert result.returncode == 0 and "undid it there too" in result.stdout, result.stdout + result.stderr

    async def replay() -> None:
        await redis.set(TEST_KEYS.record(key), captured)
        await redis.sadd(TEST_KEYS.pending, key)
        await redis.publish(TEST_KEYS.notice_channel, key)

    async def refused(count: int) -> bool:
        return (await stats(redis)).get("replayed") == count and not await has_record(redis, key)

    await replay()
    await wait_until(lambda: refused(1), what="the gateway to refuse the replayed record")
    await gw.say(CHAT, "the turn after the replay")
    request = chat_requests(fake_llm)[-1]
    assert SUMMARY_TEXT not in system_text(request)
    assert all(m["content"] in history_text(request) for m in seeded), "every message is sent again"
    lines = [line for line in gw.log().splitlines() if "refused the summary record" in line]
    assert len(lines) == 1 and "replayed" in lines[0] and "undo" in lines[0], lines
    assert (await stats(redis)).get("applied") == 1, "applied once"

    await gw.stop()
    await replay()
    gw = await gateway(NANOBOT_SUMMARY_INTERVAL="0")
    script.prompt_tokens = BIG_PROMPT  # the trigger after this turn finds the record waiting, and refuses it
    await gw.say(CHAT, "the first turn after a restart")
    await wait_until(lambda: refused(2), what="the restarted gateway to refuse the replayed record")
    script.prompt_tokens = SMALL_PROMPT
    await gw.say(CHAT, "the second turn after a restart")
    request = chat_requests(fake_llm)[-1]
    assert SUMMARY_TEXT not in system_text(request)
    assert all(m["content"] in history_text(request) for m in seeded)


async def test_a_waiting_summary_is_dropped_and_a_queued_job_dry_run_or_unknown_key_change_nothing(
    nanobot_home, default_reply, redis, redis_url, deps_for, capsys
):
    path = nanobot_home.write_session(KEY, conversation(15))
    await enqueue_summary(redis, SummarizeRequest(session_key=KEY))
    queued = await asyncio.to_thread(undo, capsys, nanobot_home, redis_url, KEY)
    assert queued.returncode == 2 and "queued or running" in queued.stderr
    await run_burst(deps_for())
    record = await load_record(redis, KEY)
    assert record is not None
    before = path.read_bytes()

    dry = await asyncio.to_thread(undo, capsys, nanobot_home, redis_url, "--dry-run", KEY)
    assert dry.returncode == 0 and f"{KEY}: would drop the summary waiting in Redis" in dry.stdout, dry.stdout
    assert f"{KEY}: would remove the worker's marks" in dry.stdout and "would have" not in dry.stdout, dry.stdout
    assert path.read_bytes() == before and await load_record(redis, KEY) is not None

    done = await asyncio.to_thread(undo, capsys, nanobot_home, redis_url, KEY)
    assert done.returncode == 0, done.stderr
    assert await load_record(redis, KEY) is None and await pending_sessions(redis) == []
    head, _ = session_lines(nanobot_home, KEY)
    assert only_the_undo(head["metadata"]), "the copy in line 1 is gone too: nothing left to apply"
    assert message_lines(path) == before.split(b"\n")[1:]
    again = await asyncio.to_thread(undo, capsys, nanobot_home, redis_url, KEY)
    assert again.returncode == 0 and "no summary to undo" in again.stdout

    unknown = await asyncio.to_thread(undo, capsys, nanobot_home, redis_url, "telegram:43")
    assert unknown.returncode == 2 and "no session 'telegram:43'" in unknown.stderr


def test_forget_facts_removes_one_sessions_facts_from_memory_and_keeps_the_rest(
    nanobot_home, redis_url, capsys
) -> None:
    from worker.memory.entries import Fact
    from worker.memory.longterm import write_facts

    memory = nanobot_home.workspace / "memory" / "MEMORY.md"
    memory.parent.mkdir(parents=True, exist_ok=True)
    memory.write_text("# Long-term Memory\n- my own line\n", encoding="utf-8")
    write_facts(
        memory,
        [Fact(text="Remember: the staging host is stage-7", source="user")],
        "en",
        "2026-11-20",
        300,
        session=KEY,
    )
    write_facts(
        memory,
        [Fact(text="Remember: prefers short answers", source="user")],
        "en",
        "2026-11-20",
        300,
        session="cli:direct",
    )
    before = memory.read_bytes()
    listed = undo(capsys, nanobot_home, redis_url, "--forget-facts", "--keep-summary", "--dry-run", KEY)
    assert listed.returncode == 0, listed.stderr
    assert f"{KEY}: would remove from MEMORY.md: Remember: the staging host is stage-7" in listed.stdout
    assert memory.read_bytes() == before
    done = undo(capsys, nanobot_home, redis_url, "--forget-facts", "--keep-summary", KEY)
    assert done.returncode == 0, done.stderr
    text = memory.read_text(encoding="utf-8")
    assert (
        "stage-7" not in text
        and "prefers short answers" in text
        and text.startswith("# Long-term Memory\n- my own line\n")
    )
    again = undo(capsys, nanobot_home, redis_url, "--forget-facts", "--keep-summary", KEY)
    assert "no fact of this session in MEMORY.md" in again.stdout
    assert undo(capsys, nanobot_home, redis_url, "--keep-summary", KEY).returncode == 2


def test_facts_forgotten_by_the_command_are_not_brought_back_by_a_job_that_asked_its_model_before(
    nanobot_home, redis_url, capsys
) -> None:
    """As the page's Forget: `undo --forget-facts` keeps the digests of what it took out, so a batch whose model
    call was made before (merged at once, or held and flushed later) cannot write the fact back; a dry run keeps
    none, and a batch asked for after the forget may."""
    import time

    from worker.memory.entries import Fact
    from worker.memory.longterm import Batch, flush, forgotten, hold_facts, write_batches, write_facts

    memory = nanobot_home.workspace / "memory" / "MEMORY.md"
    memory.parent.mkdir(parents=True, exist_ok=True)
    fact = Fact(text="Remember: the staging host is stage-7", source="user")
    write_facts(memory, [fact], "en", "2026-11-20", 300, session=KEY)
    asked = time.time() - 5  # a job of the session past its model call when the user forgets
    assert undo(capsys, nanobot_home, redis_url, "--forget-facts", "--keep-summary", "--dry-run", KEY).returncode == 0
    assert not forgotten.forgotten_path(memory).exists(), "a dry run takes nothing out"
    assert undo(capsys, nanobot_home, redis_url, "--forget-facts", "--keep-summary", KEY).returncode == 0
    assert "stage-7" not in memory.read_text(encoding="utf-8")
    assert "stage-7" not in forgotten.forgotten_path(memory).read_text(encoding="utf-8"), "digests, never the text"

    write_batches(memory, [Batch([fact], "en", "2026-11-20", KEY, asked)], 300)
    hold_facts(memory, Batch([fact], "en", "2026-11-20", KEY, asked), time.time())
    flush(memory, 300)
    assert "stage-7" not in memory.read_text(encoding="utf-8"), "a job asked before the forget brought it back"
    write_batches(memory, [Batch([fact], "en", "2026-11-20", KEY, time.time() + 1)], 300)
    assert "stage-7" in memory.read_text(encoding="utf-8"), "learned again after the forget, it is written"


async def test_undo_pause_keeps_the_session_unsummarized_until_resumed(nanobot_home, redis, redis_url, capsys):
    """After undo the next turn queued a fresh summary at once; --pause rests the session until end-rest."""
    from nanobot_hooks.contract.session_format import LAST_SUMMARY
    from worker.state import budget

    nanobot_home.write_session(KEY, conversation(8), last_archived=6, metadata={LAST_SUMMARY: {"text": "old"}})
    dry = await asyncio.to_thread(undo, capsys, nanobot_home, redis_url, KEY, "--pause", "--dry-run")
    assert f"{KEY}: would pause its summaries" in dry.stdout and await budget.rest_of(redis, KEY) is None, dry.stdout
    done = await asyncio.to_thread(undo, capsys, nanobot_home, redis_url, KEY, "--pause")
    assert done.returncode == 0, done.stderr
    assert (
        f"{KEY}: paused its summaries: nanobot queues none for it until `nanobot-summary end-rest {KEY}`" in done.stdout
        and "moved the watermark from 6 to 0" in done.stdout
    ), done.stdout
    rest = await budget.rest_of(redis, KEY)
    assert rest is not None and rest.paused and await redis.ttl(TEST_KEYS.rest(KEY)) == -1
