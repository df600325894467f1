"""`nanobot-summary hooks uninstall --purge`.

Besides the hooks, everything this project left for its own working taken away, each named with what it held: the
instance's Redis keys, an embedded Redis left running, the `/new` copies, the records' key and the markers in line 1 of
the session files, the recall index and the memory files' bookkeeping, the state folder (the page's token and address);
on request the memory it wrote (`--memory`: the daily notes and MEMORY.md's part between its markers) and the checkout's
venvs (`--venvs`). The user's bytes stay: every message of a session file, nanobot's own metadata, the user's lines of
MEMORY.md."""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from arq.constants import health_check_key_suffix as HEALTH_CHECK_SUFFIX
from arq.constants import in_progress_key_prefix, job_key_prefix, result_key_prefix, retry_key_prefix

from nanobot_hooks.contract.client import close_client
from nanobot_hooks.contract.keys import JOB_DAILY, Keys
from nanobot_hooks.contract.marker import METADATA_KEY
from nanobot_hooks.contract.queue import pending_sessions, reply
from nanobot_hooks.contract.recall import RECALL_INDEX
from nanobot_hooks.contract.records import RECORD_KEY_FILE
from nanobot_hooks.contract.redis_url import redacted_url
from nanobot_hooks.contract.session_format import RETIRED_FOLDER, SESSION_SUFFIX
from worker.commands.embedded import adopt_orphan, embedded_owner
from worker.connections import open_pool, redis_problem
from worker.errors import NanobotConfigError
from worker.files import cache_folder, state_folder
from worker.nanobot.config import NanobotConfig
from worker.nanobot.sessions import list_session_keys
from worker.settings import Settings, SettingsError, load_settings
from worker.state import workers
from worker.summarize.daily import JOB_FLUSH_MEMORY
from worker.summarize.remember import misses_key

# The memory folder's files of the worker's own (relative to the workspace's memory/), and what each holds.
BOOKKEEPING = {
    ".MEMORY.meta.json": "each MEMORY.md fact's importance, day and session",
    ".MEMORY.pending.jsonl": "facts not yet written to MEMORY.md",
    ".MEMORY.md.lock": "MEMORY.md's lock file",
    ".notes.lock": "the daily notes' lock file",
    ".recall.forgotten.json": "the digests of the archived messages forgotten everywhere, kept out of the recall index",
}
DAY_NOTE = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")
NOTED_MARK = re.compile(r"^\.\d{4}-\d{2}-\d{2}\.noted$")
CHECKOUT = Path(__file__).resolve().parents[2]


class PurgeRefused(Exception):
    """Why nothing was purged, in one line."""


def purge(memory: bool, venvs: bool) -> list[str]:
    """Everything the project left, removed; one line per thing (removed, or kept and why)."""
    try:
        settings = load_settings()
    except SettingsError as exc:
        raise PurgeRefused(f"{exc}: fix it, so the purge knows which Redis and nanobot are this instance's") from exc
    if (owner := embedded_owner(settings.redis_url)) and "which is gone" not in owner:
        raise PurgeRefused(
            f"Redis at {redacted_url(settings.redis_url)} is {owner}: stop the worker first (nothing was removed)"
        )
    done: list[str] = []
    if adopted := adopt_orphan(settings.redis_url):
        done.append(adopted)
    try:
        nanobot: NanobotConfig | None = NanobotConfig.load(settings.config_path)
    except NanobotConfigError as exc:
        nanobot = None
        done.append(f"kept nanobot's sessions and workspace as they are: its config cannot be read ({exc})")
    if nanobot is not None:
        done += asyncio.run(redis_keys(settings, nanobot))
        done += session_files(nanobot)
        done += workspace_files(settings.summary_workspace or nanobot.workspace, memory)
    done += state_files()
    if venvs:
        done += checkout_venvs()
    return done


async def redis_keys(settings: Settings, nanobot: NanobotConfig) -> list[str]:
    """The instance's keys and arq's for its sessions' jobs, deleted by name.

    The instance's keys (the queue's records, outcomes, spend, rests, the workers' and hooks' reports) and arq's for its
    sessions' jobs, deleted by name (`instance_keys`): the instance's ACL user may not list keys."""
    if problem := redis_problem(settings.redis_url, keys=None, **settings.redis_options()):
        return [f"kept the instance's Redis keys: {problem}"]
    try:
        settings = settings.for_workspace(nanobot.workspace)
    except (SettingsError, NanobotConfigError) as exc:
        return [f"kept the Redis keys: the instance's namespace is unknown ({exc})"]
    redis = await open_pool(settings)
    keys = settings.keys
    try:
        alive = [report for report in await workers.reports(redis) if not workers.process_gone(report)]
        if alive:
            raise PurgeRefused(
                f"a worker of this instance runs (pid {alive[0].pid}, reported "
                f"{alive[0].heartbeat_at}): stop it first, or it makes its keys again "
                "(nothing was removed)"
            )
        families = {family: [_text(m) for m in await reply(redis.smembers(keys.index(family)))] for family in FAMILIES}
        sessions = set(await pending_sessions(redis)) | {m for f in SESSION_FAMILIES for m in families[f]}
        sessions.update(list_session_keys(nanobot.sessions_dir))
        found = instance_keys(keys, sessions, families)
        deleted = 0
        for start in range(0, len(found), 500):
            deleted += int(await redis.delete(*found[start : start + 500]))
    except PurgeRefused:
        raise
    except Exception as exc:  # noqa: BLE001 (an ACL that forbids DEL, a Redis gone: said, the rest goes on)
        return [f"kept the Redis keys {keys.prefix}*: {type(exc).__name__}: {exc}"]
    finally:
        await close_client(redis)
    return [
        f"deleted {deleted} Redis key(s) {keys.prefix}* and arq's of its jobs (records, outcomes, spend, rests, "
        f"reports) from {redacted_url(settings.redis_url)}"
    ]


# The instance's index families (`worker/state/index.py`) and the names each member stands for.
FAMILIES = ("workers", "hooks", "formats", "spend", "resting", "outcomes")
SESSION_FAMILIES = ("spend", "resting", "outcomes")  # members that are session keys
ARQ_JOBS = (job_key_prefix, in_progress_key_prefix, retry_key_prefix, result_key_prefix)  # arq's keys of one job


def instance_keys(keys: Keys, sessions: Iterable[str], families: Mapping[str, Iterable[str]]) -> list[str]:
    """Every key this instance may have written, by name.

    Its fixed keys, its index's families and their members' keys, and each session's keys with arq's for the session's
    jobs. arq's keys of a cron tick expire by themselves."""
    name_of: dict[str, Callable[[str], str]] = {
        "workers": keys.worker,
        "hooks": keys.hooks,
        "formats": keys.notes_format,
        "spend": keys.spend,
        "resting": keys.rest,
        "outcomes": keys.outcome,
    }
    names = [
        keys.queue,
        f"{keys.queue}{HEALTH_CHECK_SUFFIX}",
        keys.pending,
        keys.stats,
        keys.probe,
        keys.cron(JOB_DAILY),
        keys.cron(JOB_FLUSH_MEMORY),
    ]
    for family, members in families.items():
        names += [keys.index(family), *(name_of[family](member) for member in members)]
    for session in sessions:
        names += [
            keys.record(session),
            keys.context(session),
            keys.daily_flag(session),
            keys.rest(session),
            keys.failures(session),
            keys.progress(session),
            keys.running(session),
            keys.outcome(session),
            keys.spend(session),
            misses_key(keys, session),
        ]
        names += [f"{kind}{job}" for job in (keys.job_id(session), keys.idle_job_id(session)) for kind in ARQ_JOBS]
    return sorted(set(names))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def session_files(nanobot: NanobotConfig) -> list[str]:
    """The `/new` copies, the records' key, and the project's two entries of line 1 of every session file."""
    try:
        sessions = nanobot.sessions_dir
    except NanobotConfigError as exc:
        return [f"kept nothing in the sessions folder to remove: {exc}"]
    done = []
    retired = sessions / RETIRED_FOLDER
    if retired.is_dir():
        copies = sum(1 for entry in retired.iterdir() if entry.is_file())
        shutil.rmtree(retired)
        done.append(
            f"removed {retired} ({copies} file(s): what sessions held when `/new` emptied them, kept for "
            "the notes and the recall tool)"
        )
    key = sessions / RECORD_KEY_FILE
    if key.exists():
        key.unlink()
        done.append(f"removed {key} (the key that signs the summaries' records)")
    marked = sum(unmark(path) for path in sorted(sessions.glob(f"*{SESSION_SUFFIX}")))
    if marked:
        done.append(
            f"removed the worker's marks ({METADATA_KEY}, {METADATA_KEY}_generation) from line 1 of "
            f"{marked} session file(s); every message and nanobot's own metadata kept"
        )
    return done


def unmark(path: Path) -> bool:
    """The project's entries taken out of line 1 of one session file, under nanobot's lock, every other byte kept."""
    from worker.nanobot.metadata_line import edit_line_one

    def edit(head: dict[str, Any]) -> bool:
        metadata = head.get("metadata")
        if not isinstance(metadata, dict):
            return False
        # The project's entries: its marker and those named after it (the session's generation).
        ours = [name for name in metadata if name == METADATA_KEY or str(name).startswith(f"{METADATA_KEY}_")]
        for name in ours:
            del metadata[name]
        return bool(ours)

    try:
        return bool(edit_line_one(path.parent, path, edit))
    except Exception:  # noqa: BLE001 (one file that cannot be edited must not stop the purge of the others)
        return False


def workspace_files(workspace: Path, memory: bool) -> list[str]:
    """The recall index and the memory files' bookkeeping; with `memory`, the daily notes and MEMORY.md's part."""
    folder = workspace.expanduser() / "memory"
    done = []
    index = workspace.expanduser() / RECALL_INDEX
    gone = [
        path
        for path in (index, *(index.with_name(index.name + end) for end in ("-wal", "-shm", "-journal")))
        if remove(path)
    ]
    if gone:
        done.append(f"removed {index} (the recall tool's search index of the sessions and notes)")
    for name, holds in BOOKKEEPING.items():
        if remove(folder / name):
            done.append(f"removed {folder / name} ({holds})")
    noted = [path for path in sorted(folder.glob(".*.noted")) if NOTED_MARK.match(path.name) and remove(path)]
    if noted:
        done.append(f"removed {len(noted)} memory/.YYYY-MM-DD.noted mark(s) (the daily run's, one per day)")
    notes = sorted(path for path in folder.glob("*.md") if DAY_NOTE.match(path.name)) if folder.is_dir() else []
    if memory:
        for path in notes:
            path.unlink()
        if notes:
            done.append(f"removed {len(notes)} daily note(s) {folder}/YYYY-MM-DD.md (nanobot writes none)")
        if (line := drop_part(folder / "MEMORY.md")) is not None:
            done.append(line)
    elif notes or (folder / "MEMORY.md").exists():
        done.append(
            f"kept the memory made for you: {len(notes)} daily note(s) in {folder} and MEMORY.md's part "
            "between its nanobot-summary markers (--memory removes them; your own lines stay)"
        )
    return done


def drop_part(path: Path) -> str | None:
    """MEMORY.md's part between the project's markers taken out, the user's bytes around it kept as they are."""
    from worker.files import temp_beside
    from worker.memory.longterm.part import locate

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    text = data.decode("utf-8", errors="surrogateescape")
    span = locate(text)
    if span is None:
        return None
    start, end = span
    kept = text[:start] + text[end:].removeprefix("\r\n").removeprefix("\n")
    temp = temp_beside(path, kept.encode("utf-8", errors="surrogateescape"), mode=path.stat().st_mode & 0o777)
    temp.replace(path)
    return f"removed MEMORY.md's part between the nanobot-summary markers from {path} (your own lines kept)"


def state_files() -> list[str]:
    """The state folder and the cache folder, each removed whole.

    The state folder (the page's token and address, the embedded Redis's record, a waiting worker's note) and the cache
    folder (the model checks' answers), each removed whole."""
    done = []
    for folder, holds in (
        (state_folder(), "the page's token and address, the embedded Redis's record, a waiting worker's note"),
        (cache_folder(), "the model checks' answers"),
    ):
        if folder.exists():
            names = sorted(entry.name for entry in folder.iterdir())
            shutil.rmtree(folder)
            done.append(f"removed {folder} ({', '.join(names) or 'empty'}: {holds})")
    return done


def checkout_venvs() -> list[str]:
    """The checkout's own venvs (.venv, .venv-nanobot), when this command runs from a checkout."""
    if not (CHECKOUT / "scripts" / "run-worker").exists():
        return ["kept no venv: this command does not run from a checkout (pipx uninstall nanobot-summary-worker)"]
    done = []
    for name in (".venv", ".venv-nanobot"):
        if (CHECKOUT / name).is_dir():
            shutil.rmtree(CHECKOUT / name)
            done.append(f"removed the checkout's {CHECKOUT / name}")
    return done


def remove(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
