"""`nanobot-summary hooks uninstall --purge`: everything the project left goes, each thing named with what it held,
and the user's bytes stay: every message line of a session file, nanobot's own metadata, the user's lines of
MEMORY.md; another instance's Redis keys stay too."""

from __future__ import annotations

import asyncio
import json
import venv
from pathlib import Path

from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.transcripts import conversation
from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.records import utcnow
from tests.support.commands import run_in_process
from worker.connections import queue_client
from worker.state import workers

KEY = "telegram:42"
OWN_TOP = b"# My notes\r\n- I like green tea\r\n\r\n"
PART = (
    b"<!-- nanobot-summary:begin lang=en -->\n## Facts\n- The user's cat is called Miso\n<!-- nanobot-summary:end -->\n"
)
OWN_BOTTOM = b"\n## After the worker's part\nKeep this line."


def left_behind(home, tmp_path: Path) -> dict[str, Path]:
    """What a season of summaries leaves: every file the purge should take, by what it is."""
    session = home.write_session(
        KEY,
        conversation(4),
        last_archived=6,
        metadata={
            "_last_summary": {"text": "nanobot's own"},
            "_summary_worker": {"applied": {"stamp": "x"}},
            "_summary_worker_generation": 1,
        },
    )
    retired = home.sessions_dir / ".summary-worker-retired"
    retired.mkdir()
    (retired / "telegram_42.2026-11-20T10-00-00.jsonl").write_text("{}\n")
    memory = home.workspace / "memory"
    memory.mkdir(exist_ok=True)
    files = {
        "session": session,
        "retired": retired,
        "key": home.sessions_dir / ".summary-records.key",
        "recall": memory / ".recall.sqlite",
        "meta": memory / ".MEMORY.meta.json",
        "pending": memory / ".MEMORY.pending.jsonl",
        "noted": memory / ".2026-11-20.noted",
        "lock": memory / ".notes.lock",
        "note": memory / "2026-11-20.md",
        "memory": memory / "MEMORY.md",
        "forgotten": memory / ".recall.forgotten.json",
        "token": tmp_path / "state" / "nanobot-summary" / "web-token",
    }
    for name in ("key", "recall", "meta", "pending", "noted", "lock", "forgotten"):
        files[name].write_bytes(b"x" * 40)
    files["note"].write_text("# 2026-11-20\n- talked about cats\n")
    files["memory"].write_bytes(OWN_TOP + PART + OWN_BOTTOM)
    files["token"].parent.mkdir(parents=True)
    files["token"].write_text("t" * 40)
    return files


async def test_purge_removes_what_the_project_left_and_keeps_every_user_byte(
    nanobot_home, redis, redis_url, tmp_path, capsys
) -> None:
    files = left_behind(nanobot_home, tmp_path)
    messages = files["session"].read_bytes().split(b"\n")[1:]
    await redis.set(TEST_KEYS.outcome(KEY), "{}")
    await redis.set(TEST_KEYS.rest(KEY), "{}")
    theirs = queue_client(redis_url, Keys("other").queue)
    await theirs.set(Keys("other").outcome(KEY), "{}")
    venv.EnvBuilder(with_pip=False).create(tmp_path / "nanobot-venv")
    env = process_env(
        nanobot_home,
        redis_url,
        config=True,
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    checks = tmp_path / "cache" / "nanobot-summary" / "model-checks.json"
    checks.parent.mkdir(parents=True)
    checks.write_text("{}")

    def purge(*more: str):
        return run_in_process(
            capsys,
            "hooks",
            "uninstall",
            "--purge",
            "--python",
            str(tmp_path / "nanobot-venv" / "bin" / "python"),
            *more,
            env=env,
        )

    try:
        await workers.publish(redis, {}, utcnow())  # a worker of this instance alive: nothing is removed
        refused = await asyncio.to_thread(purge)
        assert refused.returncode == 2 and "a worker of this instance runs" in refused.stderr, refused.stderr
        assert files["retired"].exists() and files["token"].exists() and await redis.get(TEST_KEYS.outcome(KEY))
        await workers.withdraw(redis)
        done = await asyncio.to_thread(purge)
        assert done.returncode == 0, done.stdout + done.stderr
        said = done.stdout
        assert "the hooks are not installed in" in said, said
        assert f"removed {files['retired']} (1 file(s): what sessions held when `/new` emptied them" in said, said
        assert f"removed {files['key']} (the key that signs the summaries' records)" in said, said
        assert "from line 1 of 1 session file(s); every message and nanobot's own metadata kept" in said, said
        assert f"removed {files['recall']} (the recall tool's search index" in said, said
        assert "deleted 2 Redis key(s) nanobot-summary:test:*" in said, said
        assert f"removed {tmp_path / 'state' / 'nanobot-summary'} (" in said and "web-token" in said, said
        assert f"removed {checks.parent} (model-checks.json: the model checks' answers)" in said, said
        assert not checks.parent.exists()
        assert "kept the memory made for you: 1 daily note(s)" in said, said
        for name in ("retired", "key", "recall", "meta", "pending", "noted", "lock", "forgotten", "token"):
            assert not files[name].exists(), name
        assert files["session"].read_bytes().split(b"\n")[1:] == messages, "every message line, byte for byte"
        head = json.loads(files["session"].read_bytes().split(b"\n")[0])
        assert head["metadata"] == {"_last_summary": {"text": "nanobot's own"}} and head["last_archived"] == 6
        assert files["memory"].read_bytes() == OWN_TOP + PART + OWN_BOTTOM and files["note"].exists()
        assert await redis.keys(f"{TEST_KEYS.prefix}*") == []
        assert await theirs.get(Keys("other").outcome(KEY)) is not None, "another instance's keys stay"

        memory = await asyncio.to_thread(purge, "--memory")
        assert memory.returncode == 0, memory.stdout + memory.stderr
        assert "removed 1 daily note(s)" in memory.stdout and "MEMORY.md's part between" in memory.stdout
        assert files["memory"].read_bytes() == OWN_TOP + OWN_BOTTOM, "the user's lines, byte for byte"
        assert not files["note"].exists()
    finally:
        await theirs.aclose()
    wrong = await asyncio.to_thread(run_in_process, capsys, "hooks", "install", "--memory", env=env)
    assert wrong.returncode == 2 and "go with uninstall" in wrong.stderr
