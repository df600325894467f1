"""Every command and the worker as processes, each instance under the Redis ACL user `nanobot-summary acl` prints for
it, two instances on one real redis-server: `run` (its daily tick included), `status` in every form, `doctor`,
`enqueue --wait`, `enqueue --all`, `undo` with a gateway holding the session, `end-rest`, `web` and a real
gateway each work for their own instance; Redis's ACL log shows that none tried anything outside its user's
names, and nothing of one instance shows in the other's output. One test with shared processes: the matrix's
cost is mostly each process's start."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp
import pytest

from harness import forks
from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.models import BIG_PROMPT, SMALL_PROMPT, SUMMARY_MODEL, SUMMARY_TEXT, chat_requests, system_text
from harness.redis_server import acl_server, free_port
from harness.sandbox import NanobotHome
from harness.transcripts import conversation
from nanobot_hooks.contract.keys import Keys
from tests.support.crossing import CHAT, SEEDED_TURNS
from tests.support.paths import ROOT
from tests.support.queue_probes import applied, queued_jobs
from tests.support.waiting import wait_until
from tests.support.workers import start_worker
from worker.connections import queue_client
from worker.state import budget

ADMIN, PASSWORD_A, PASSWORD_B = "admin-Pass-0", "a-Pass-1", "b-Pass-2"
KEYS_A = Keys("inst-a")  # the other instance; B is the tests' own namespace (TEST_KEYS)
SESSION_A, SESSION_B = "telegram:900", "telegram:1"


def command(home: NanobotHome, url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`nanobot-summary <args>` in a process of its own, as the instance of `home` with the Redis URL `url`."""
    return forks.run(
        [sys.executable, "-m", "worker", *args], process_env(home, url, config=True, **env), cwd=ROOT, timeout=120
    )


def refused_commands(entries: list) -> list[dict]:
    """The ACL log's entries (each a flat list of names and values), as dicts of text."""
    found = []
    for entry in entries:
        pairs = dict(zip(entry[::2], entry[1::2], strict=True))
        found.append(
            {
                (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                for k, v in pairs.items()
            }
        )
    return found


def daily_tick() -> str:
    """The worker's daily time (HH:MM:SS, UTC: the test config's timezone), 30 s from now: after the worker
    started, and while the commands run, so waiting for it costs little."""
    return (datetime.now(timezone.utc) + timedelta(seconds=30)).strftime("%H:%M:%S")


async def web_page(home: NanobotHome, url: str, folder: Path) -> str:
    """The web page's overview, served by `nanobot-summary web` in its own process, with its token."""
    token_file = folder / "web-token"
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "worker", "web", "--port", str(port), "--token-file", str(token_file)],
        cwd=ROOT,
        env=process_env(home, url, config=True),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = await asyncio.to_thread(process.stdout.readline)  # type: ignore[union-attr]
        assert f"127.0.0.1:{port}" in line, line
        token = token_file.read_text(encoding="utf-8").strip()
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:  # an IP host
            async with client.get(f"http://127.0.0.1:{port}/?token={token}") as answer:
                assert answer.status == 200, answer.status
                return await answer.text()
    finally:
        process.terminate()
        await asyncio.to_thread(process.communicate, timeout=30)


@pytest.mark.slow  # a gateway, a worker and a dozen commands as processes
@pytest.mark.timeout(900)
async def test_every_command_and_the_worker_work_under_each_instances_acl_user_and_reach_nothing_of_the_other(
    tmp_path, gateway, nanobot_home, fake_llm, script
) -> None:
    server = acl_server(
        tmp_path / "redis", ADMIN, {"a": (PASSWORD_A, KEYS_A.acl_rules()), "b": (PASSWORD_B, TEST_KEYS.acl_rules())}
    ).start()
    admin = queue_client(server.url(f"admin:{ADMIN}"), TEST_KEYS.queue)
    url_a, url_b = server.url(f"a:{PASSWORD_A}"), server.url(f"b:{PASSWORD_B}")
    home_a = NanobotHome.create(tmp_path / "instance-a", fake_llm.url)
    home_a.write_session(SESSION_A, conversation(15, user="instance A's question {i}"))
    as_a = {"NANOBOT_SUMMARY_NAMESPACE": KEYS_A.namespace}
    worker = None
    try:
        # Instance B: a real gateway and `nanobot-summary run`, both as user b; the run's daily tick comes soon.
        nanobot_home.write_session(SESSION_B, conversation(15))
        key = f"websocket:{CHAT}"
        nanobot_home.write_session(key, conversation(SEEDED_TURNS))
        gw = await gateway(redis=url_b, NANOBOT_SUMMARY_INTERVAL="0")
        script.prompt_tokens = BIG_PROMPT
        await gw.say(CHAT, "crossing turn")
        await wait_until(lambda: queued_jobs(admin), what="the job nanobot queued as user b")
        worker = await start_worker(
            nanobot_home,
            admin,
            url_b,
            "worker-b.log",
            NANOBOT_SUMMARY_DAILY_AT=daily_tick(),
            NANOBOT_SUMMARY_MODEL=f"openai/{SUMMARY_MODEL}",
        )
        await wait_until(lambda: applied(admin, key), 90, "the gateway to apply the record the worker made")
        script.prompt_tokens = SMALL_PROMPT
        await gw.say(CHAT, "a turn with the summary")
        assert SUMMARY_TEXT in system_text(chat_requests(fake_llm)[-1])

        waited = await asyncio.to_thread(command, nanobot_home, url_b, "enqueue", "--wait", SESSION_B)
        assert waited.returncode == 0 and "summarized" in waited.stdout, waited.stdout + waited.stderr
        every = await asyncio.to_thread(command, nanobot_home, url_b, "enqueue", "--all")
        assert every.returncode == 0, every.stdout + every.stderr

        rests = queue_client(url_b, TEST_KEYS.queue)
        try:  # a rest, as a failed job leaves one (written as user b)
            await budget.start_rest(rests, SESSION_B, "a failure", 600, 600)
        finally:
            await rests.aclose()
        ended = await asyncio.to_thread(command, nanobot_home, url_b, "end-rest", "--all")
        assert ended.returncode == 0 and SESSION_B in ended.stdout, ended.stdout + ended.stderr

        undone = await asyncio.to_thread(command, nanobot_home, url_b, "undo", key)
        assert undone.returncode == 0 and "undid it there too" in undone.stdout, undone.stdout + undone.stderr

        await wait_until(
            lambda: asyncio.to_thread(
                lambda: "daily run:" in (nanobot_home.root / "worker-b.log").read_text(errors="replace")
            ),
            150,
            "the worker's daily tick",
        )

        text = await asyncio.to_thread(command, nanobot_home, url_b, "status")
        assert text.returncode == 0 and SESSION_B in text.stdout, text.stdout + text.stderr
        raw = await asyncio.to_thread(command, nanobot_home, url_b, "status", "--json")
        assert raw.returncode == 0, raw.stderr
        state = json.loads(raw.stdout)
        assert state["worker"] and any(o["session_key"] == SESSION_B for o in state["outcomes"]), state
        assert any(report["pid"] == worker.pid for report in state["workers"]), state["workers"]
        metrics = await asyncio.to_thread(command, nanobot_home, url_b, "status", "--prometheus")
        assert metrics.returncode == 0 and "nanobot_summary_redis_up 1" in metrics.stdout, metrics.stdout
        doctor = await asyncio.to_thread(command, nanobot_home, url_b, "doctor")
        assert "Traceback" not in doctor.stdout + doctor.stderr and "NOPERM" not in doctor.stdout, doctor.stdout
        assert not re.search(r"FAIL.*Redis", doctor.stdout), doctor.stdout
        page = await web_page(nanobot_home, url_b, tmp_path)
        assert "Redis cannot be read" not in page

        # Instance A, as user a, beside it: its own commands work, and show nothing of B's.
        outputs = []
        for args in (
            ["undo", "--dry-run", SESSION_A],
            ["enqueue", "--all"],
            ["status"],
            ["status", "--json"],
            ["status", "--prometheus"],
            ["end-rest", "--all"],
            ["doctor"],
        ):
            done = await asyncio.to_thread(command, home_a, url_a, *args, **as_a)
            assert "Traceback" not in done.stderr and "NOPERM" not in done.stdout + done.stderr, (args, done.stderr)
            if args[0] != "doctor":
                assert done.returncode == 0, (args, done.stdout, done.stderr)
            outputs.append(done.stdout + done.stderr)
        seen_by_a = "\n".join(outputs)
        assert SESSION_A in seen_by_a and SESSION_B not in seen_by_a and CHAT not in seen_by_a
        assert json.loads(outputs[3])["workers"] == [], "B's worker is not A's"

        log = refused_commands(await admin.execute_command("ACL", "LOG"))
        assert [entry for entry in log if entry.get("username") in ("a", "b")] == [], (
            f"something asked for what its ACL user may not: {log}"
        )
    finally:
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            await asyncio.to_thread(worker.wait, 30)
        await admin.aclose()
        server.stop()
