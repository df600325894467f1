"""`nanobot-summary doctor`: the whole set-up checked in one screen, each problem with the one line that fixes it.

Each check is a function returning `Check`s; nothing here writes anything or makes a paid call (the model's key
is checked with litellm's environment validation)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.redis_url import redacted_url
from nanobot_hooks.contract.version import BEFORE_CONTRACT, CONTRACT, RELEASE, version_mismatch
from worker.commands.checks import Check, Level, as_run_here, render
from worker.commands.doctor_runtime import runtime_checks
from worker.commands.startup import waiting_worker
from worker.errors import NanobotConfigError
from worker.files import read_only
from worker.memory.longterm import pending_path, read_held
from worker.memory.notes import count_spans
from worker.nanobot.config import NanobotConfig
from worker.settings import Settings, SettingsError, load_settings, unknown_variables


def python_checks() -> list[Check]:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info < (3, 11):
        return [
            Check(
                "FAIL",
                f"Python {version} ({sys.executable})",
                "use Python 3.11 or later: PYTHON=python3.12 scripts/run-worker",
            )
        ]
    return [Check("ok", f"Python {version} ({sys.executable})")]


def variable_checks() -> list[Check]:
    return [Check("warn", line.split(";")[0], line.split("; ", 1)[1]) for line in unknown_variables()]


def nanobot_checks(settings: Settings) -> tuple[list[Check], NanobotConfig | None]:
    path = settings.config_path
    try:
        config = NanobotConfig.load(path)
    except NanobotConfigError as exc:
        return [Check("FAIL", str(exc), f"fix the JSON of {path}, or point NANOBOT_CONFIG at nanobot's config")], None
    checks = []
    if not path.exists():
        checks.append(
            Check(
                "FAIL",
                f"nanobot config {path} not found",
                "run `nanobot onboard` (it writes the config), or set NANOBOT_CONFIG to its path",
            )
        )
    else:
        checks.append(Check("ok", f"nanobot config {path}"))
    workspace = settings.summary_workspace or config.workspace
    try:
        checks.append(Check("ok", f"sessions in {config.sessions_dir}; workspace {workspace}"))
    except NanobotConfigError as exc:
        if (pid := waiting_worker(path)) is not None:
            checks.append(
                Check(
                    "warn",
                    f"the worker (pid {pid}) runs and waits for nanobot's first turn: {exc}",
                    "let nanobot run once with this config: nanobot agent -m hello (the worker then starts by itself)",
                )
            )
        else:
            checks.append(Check("FAIL", str(exc), "let nanobot run once with this config: nanobot agent -m hello"))
    return checks + own_summaries_checks(config, settings.auto_summary), config


def own_summaries_checks(config: NanobotConfig, auto_summary: bool) -> list[Check]:
    """nanobot's idle compaction and Dream, advised by what the worker does.

    With automatic summaries on they do its work twice; with them off they are all that summarizes idle sessions and
    writes MEMORY.md."""
    agents = found if isinstance(found := config.data.get("agents"), dict) else {}
    defaults = found if isinstance(found := agents.get("defaults"), dict) else {}
    idle = defaults.get("idleCompactAfterMinutes", defaults.get("sessionTtlMinutes", 15))
    dream = found if isinstance(found := defaults.get("dream"), dict) else {}
    dreams = dream.get("enabled", True) is not False
    where = f"under agents.defaults in {config.path}"
    if not auto_summary:
        return [
            Check(
                "ok",
                "automatic summaries are off (NANOBOT_AUTO_SUMMARY=false): only `nanobot-summary enqueue` "
                "makes summaries, and there is no daily run",
            ),
            Check("ok", f"nanobot's idle compaction is on ({idle} min): it summarizes idle sessions")
            if idle != 0
            else Check(
                "warn",
                "nothing summarizes idle sessions: automatic summaries and nanobot's idle compaction are both off",
                f'set "idleCompactAfterMinutes": 15 {where}, or NANOBOT_AUTO_SUMMARY=true for nanobot and the worker',
            ),
            Check("ok", "nanobot's Dream is on: it keeps memory/MEMORY.md")
            if dreams
            else Check(
                "warn",
                "only jobs queued by hand write memory/MEMORY.md: automatic summaries and nanobot's Dream are both off",
                f'set "dream": {{"enabled": true}} {where}, or NANOBOT_AUTO_SUMMARY=true',
            ),
        ]
    return [
        Check(
            "warn",
            f"nanobot's idle compaction is on ({idle} min): it replaces the worker's summaries",
            f'set "idleCompactAfterMinutes": 0 {where}',
        )
        if idle != 0
        else Check("ok", "nanobot's idle compaction is off"),
        Check(
            "warn",
            "nanobot's Dream is on: it rewrites memory/MEMORY.md every two hours too",
            f'set "dream": {{"enabled": false}} {where}',
        )
        if dreams
        else Check("ok", "nanobot's Dream is off"),
    ]


def model_checks(settings: Settings, config: NanobotConfig) -> list[Check]:
    from worker.model.llm import credentials_problem, routing_problem
    from worker.nanobot.config import resolve_model

    try:
        choice = resolve_model(settings.summary_model, config)
    except NanobotConfigError as exc:
        what, _, fix = str(exc).rpartition(": ")
        return [Check("FAIL", what or str(exc), fix)]
    shown = f"summary model {choice.model} (from {choice.source})" + (
        f" at {redacted_url(choice.api_base)}" if choice.api_base else ""
    )
    if problem := routing_problem(choice.model):
        return [
            Check(
                "FAIL",
                f"{shown}: litellm cannot route it ({problem})",
                "name it as provider/model: NANOBOT_SUMMARY_MODEL=deepseek/deepseek-chat",
            )
        ]
    if problem := credentials_problem(choice):
        what, _, fix = problem.partition(": ")
        return [Check("FAIL", f"{shown}: no API key", fix)]
    key = "a key from nanobot's config" if choice.api_key else "its key in the environment (or none needed)"
    return [Check("ok", f"{shown}, {key}")]


def settled_keys(settings: Settings) -> Keys | None:
    """The instance's Redis names, or None while its namespace cannot be settled (the config check says why)."""
    try:
        return settings.for_workspace(NanobotConfig.load(settings.config_path).workspace).keys
    except (SettingsError, NanobotConfigError):
        return None


def redis_checks(settings: Settings) -> list[Check]:
    from worker.commands.embedded import embedded_owner
    from worker.connections import redis_problem, server_version, version_problem

    url = redacted_url(settings.redis_url)
    if problem := redis_problem(settings.redis_url, keys=settled_keys(settings), **settings.redis_options()):
        if problem.endswith("start it, or set REDIS_URL"):
            return [
                Check(
                    "warn",
                    problem.rsplit(": ", 1)[0],
                    "`nanobot-summary run` starts an embedded one there; for a lasting one: "
                    "sudo apt install redis-server, or set REDIS_URL",
                )
            ]
        what, _, fix = problem.rpartition(": ")
        return [Check("FAIL", what, fix)]
    version = server_version(settings.redis_url, **settings.redis_options())
    if problem := version_problem(version):
        return [Check("FAIL", f"Redis at {url}: {problem}", "install Redis 5 or later")]
    if owner := embedded_owner(settings.redis_url):
        orphan = "which is gone" in owner
        return [
            Check(
                "warn" if orphan else "ok",
                f"Redis {version} at {url} answers: it is {owner}",
                "nanobot-summary run (it stops the orphan and starts its own)"
                if orphan
                else "for a lasting one: sudo apt install redis-server, or set REDIS_URL",
            )
        ]
    return [Check("ok", f"Redis {version} at {url} answers (credentials and database accepted)")]


def hooks_checks(given: str | None) -> list[Check]:
    """What nanobot's Python loads at its start, probed isolated from this folder (worker/commands/nanobot_env.py).

    A checkout or egg-info here must not pass for hooks installed there."""
    from worker.commands.nanobot_env import NanobotEnvError, find_python, probe

    try:
        found = probe(find_python(given))
    except NanobotEnvError as exc:
        return [
            Check(
                "FAIL" if given else "warn",
                str(exc),
                "nanobot-summary doctor --nanobot-python /path/to/nanobot's/bin/python",
            )
        ]
    python, checks = found.python, []
    install = f"nanobot-summary hooks install --python {python}"
    if not found.nanobot:
        checks.append(Check("FAIL", f"{python} has no nanobot-ai", "name nanobot's own Python with --nanobot-python"))
    elif not found.nanobot.startswith("0.3."):
        checks.append(
            Check(
                "FAIL",
                f"nanobot {found.nanobot}: the hooks support 0.3.x only",
                f"{python} -m pip install 'nanobot-ai>=0.3.5,<0.4'",
            )
        )
    if not found.hooks_load:
        checks.append(Check("FAIL", f"the hooks are not installed in nanobot's environment ({python})", install))
    elif found.errors:
        checks.append(
            Check(
                "FAIL",
                f"nanobot cannot load {', '.join(sorted(found.errors))} ({python}): "
                + "; ".join(found.errors.values()),
                install,
            )
        )
    elif mismatch := version_mismatch(
        (found.hooks or "", BEFORE_CONTRACT if found.contract is None else found.contract),
        (RELEASE, CONTRACT),
        install=install,
    ):
        checks.append(
            Check(
                "FAIL" if mismatch.serious else "warn",
                f"installed in nanobot's environment ({python}) and this command: {mismatch.what}",
                mismatch.fix,
            )
        )
    elif not checks:
        checks.append(Check("ok", f"hooks {found.hooks} installed in nanobot {found.nanobot}'s environment ({python})"))
    return checks


# Channels whose sessions are nanobot's own web chat: the first chat most users have (`nanobot onboard` ends
# with "Run: nanobot webui"), untrusted by default, since an open WebSocket is anyone.
WEB_CHANNELS = ("websocket", "api")


def channel_checks(settings: Settings, config: NanobotConfig) -> list[Check]:
    """Each channel seen in the sessions folder, and whether its sessions write MEMORY.md (NANOBOT_MEMORY_SESSIONS)."""
    from nanobot_hooks.contract.session_format import channel_of, is_internal_session
    from worker.nanobot.sessions import list_session_keys

    try:
        keys = [key for key in list_session_keys(config.sessions_dir) if not is_internal_session(key)]
    except NanobotConfigError:
        return []  # the sessions check says why
    rule = "NANOBOT_MEMORY_SESSIONS=" + ",".join(settings.memory_sessions)
    checks = []
    for channel in sorted({channel_of(key) for key in keys}):
        sessions = [key for key in keys if channel_of(key) == channel]
        trusted = sum(1 for key in sessions if settings.is_trusted(key, config.web_chat_private))
        seen = f"{channel}: {len(sessions)} session(s)"
        if trusted == len(sessions):
            checks.append(Check("ok", f"{seen}, each writes MEMORY.md ({rule})"))
        elif trusted:
            checks.append(
                Check("ok", f"{seen}, {trusted} of them write MEMORY.md ({rule}: the others are not one-to-one chats)")
            )
        else:
            level: Level = "warn" if channel in WEB_CHANNELS else "ok"
            checks.append(
                Check(
                    level,
                    f"{seen}, none writes MEMORY.md ({rule} does not trust them)",
                    f"if only you use them: {rule},{channel}:* for nanobot and the worker "
                    "(docs/memory-and-recall.md, Who may write long-term memory)",
                )
            )
    return checks


NOTES_DAYS = 7  # how far back doctor counts the spans the fallback noted


def notes_file_checks(workspace: Path) -> list[Check]:
    """The spans of the day files written in the last NOTES_DAYS days that the fallback noted.

    The spans of the day files written in the last NOTES_DAYS days that the fallback noted (the user's own lines: the
    model's answers had no notes); nothing when there are no notes yet."""
    total, fallback = count_spans(workspace.expanduser() / "memory", time.time() - NOTES_DAYS * 24 * 3600)
    if not total:
        return []
    where = f"span(s) in the day files written in the last {NOTES_DAYS} days"
    if not fallback:
        return [Check("ok", f"daily notes: {total} {where}, none by the fallback")]
    return [
        Check(
            "warn",
            f"daily notes: {fallback} of {total} {where} were noted by the fallback (the user's own "
            "lines: the model's answer had no notes)",
            "use a summary model that answers JSON or the plain lines asked for (NANOBOT_SUMMARY_MODEL); "
            "`nanobot-summary status` says which model and why",
        )
    ]


def memory_file_checks(workspace: Path) -> list[Check]:
    """A MEMORY.md the user made read-only.

    The worker leaves it alone, its facts wait held (nothing when it is writable, or not made yet); and the daily notes
    the fallback wrote."""
    path = workspace.expanduser() / "memory" / "MEMORY.md"
    refused = read_only(path)
    if refused is None:
        return notes_file_checks(workspace)
    held = sum(len(h.batch.facts) for h in read_held(path))
    read_only_check = Check(
        "warn",
        f"{path}: {refused}: the worker leaves it alone; {held} fact(s) wait, held, in {pending_path(path).name}",
        f"chmod u+w {path} (the held facts go in at the next quiet moment), or leave it to keep it as it is",
    )
    return [*notes_file_checks(workspace), read_only_check]


def diagnose(args: argparse.Namespace) -> list[Check]:
    checks = python_checks() + variable_checks()
    try:
        settings = load_settings()
    except SettingsError as exc:
        return [*checks, Check("FAIL", str(exc), "fix that variable in the worker's environment")]
    found, config = nanobot_checks(settings)
    checks += found
    if config is not None:
        checks += model_checks(settings, config) + channel_checks(settings, config)
        checks += memory_file_checks(settings.summary_workspace or config.workspace)
    checks += redis_checks(settings)
    checks += hooks_checks(args.nanobot_python or os.environ.get("NANOBOT_PYTHON"))
    checks += asyncio.run(runtime_checks(settings))
    return checks


def main(args: argparse.Namespace) -> int:
    checks = as_run_here(diagnose(args))
    print(render(checks))
    return 1 if any(c.level == "FAIL" for c in checks) else 0
