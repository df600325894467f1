"""`nanobot-summary` (also `python -m worker`): one command line for the worker and the operator's tasks.

Each subcommand imports what it needs only when it runs: `status`, `undo`, `enqueue` (without --dry-run)
and `doctor` never load litellm, which alone takes seconds to import.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable
from datetime import date
from typing import TypeAlias

from nanobot_hooks.contract.version import RELEASE

PROG = "nanobot-summary"

EPILOG = """\
the first hour:
  nanobot-summary doctor              the set-up and the running worker; each problem with the line that fixes it
  nanobot-summary run                 the worker (scripts/run-worker runs it in its own environment)
  nanobot-summary enqueue --dry-run cli:direct   what a summary of that session would do, no LLM call
  nanobot-summary enqueue --wait cli:direct      make one now, keeping the last exchange; print its outcome
  nanobot-summary status              the worker and its settings, queue, jobs, records waiting, spend, outcomes
  nanobot-summary web                 the same, and MEMORY.md's facts, in a browser: http://127.0.0.1:8766/

Configuration comes from the environment (NANOBOT_SUMMARY_*, NANOBOT_MEMORY_*, NANOBOT_CONFIG, REDIS_URL);
see docs/configuration.md."""


def _date(text: str) -> str:
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date like 2026-11-01") from None


def _lazy(module: str, function: str = "main") -> Callable[[argparse.Namespace], int]:
    """A subcommand's handler, imported only when it runs (litellm alone takes seconds to import)."""

    def handler(args: argparse.Namespace) -> int:
        # __import__, as an import statement does (importlib.import_module would hide it from -X importtime, which
        # tests/scenarios/test_first_hour.py reads to show that no litellm is loaded)
        run: Callable[[argparse.Namespace], int] = getattr(__import__(module, fromlist=[function]), function)
        return run(args)

    return handler


def _hooks(args: argparse.Namespace) -> int:
    from worker.commands.hooks import check, install, uninstall
    from worker.commands.nanobot_env import NanobotEnvError

    if (args.purge or args.memory or args.venvs) and args.action != "uninstall":
        args.parser.error("--purge, --memory and --venvs go with uninstall")
    if (args.memory or args.venvs) and not args.purge:
        args.parser.error("--memory and --venvs go with --purge")
    try:
        if args.action == "install":
            return install(args.python, args.source)
        if args.action == "check":
            return check(args.python)
        if not args.purge:
            return uninstall(args.python)
        try:
            code = uninstall(args.python)
        except NanobotEnvError as exc:  # no nanobot's Python to take the hooks from: the rest is purged still
            print(f"kept the hooks where they are: {exc}")
            code = 1
    except NanobotEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from worker.commands.purge import PurgeRefused, purge

    try:
        lines = purge(args.memory, args.venvs)
    except PurgeRefused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines) if lines else "nothing else was left")
    return code


# What `add_subparsers` returns (argparse names its class privately).
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG,
        description="The nanobot summary worker and its operator commands.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--version", action="version", version=f"{PROG} {RELEASE}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND")
    _add_run(sub)
    _add_enqueue(sub)
    _add_status(sub)
    _add_rest(sub)
    _add_end_rest(sub)
    _add_undo(sub)
    _add_forget(sub)
    _add_doctor(sub)
    _add_web(sub)
    _add_acl(sub)
    _add_hooks(sub)
    return top


def _add_run(sub: Subcommands) -> None:
    run = sub.add_parser(
        "run",
        help="run the worker (the default when no command is named)",
        description="Run the summary worker: it takes summary jobs from Redis, runs the daily "
        "run, and follows changes to nanobot's config file without a restart.",
    )
    run.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    run.add_argument(
        "--no-embedded-redis",
        action="store_true",
        help="fail instead of starting a local redis-server when REDIS_URL answers nothing",
    )
    run.add_argument(
        "--reload", action="store_true", help="development: restart the worker when a .py file of the project changes"
    )
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    run.set_defaults(handler=_lazy("worker.commands.run", "run_worker"))


def _keep(text: str) -> str:
    from worker.keep_rule import KeepRule  # pure: no litellm

    try:
        return str(KeepRule.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def _add_enqueue(sub: Subcommands) -> None:
    enqueue = sub.add_parser(
        "enqueue",
        help="queue summary jobs now, or show what one would do (--dry-run)",
        description=textwrap.fill(
            "Queue summary jobs for nanobot sessions (keys look like telegram:42 or cli:direct). A job queued by "
            "hand is made whatever it saves, does not wait for a session's rest, and keeps only the last exchange "
            "verbatim (turns:1, as an idle summary) unless --keep names another rule: NANOBOT_SUMMARY_KEEP is for "
            "the automatic summaries (3% of a 200,000-token window keeps a few turns entirely, so a first summary "
            "would have nothing to cover). nanobot applies the summary before the session's next turn.",
            100,
        ),
        epilog="examples:\n  nanobot-summary enqueue --dry-run cli:direct\n"
        "  nanobot-summary enqueue --wait telegram:42\n"
        "  nanobot-summary enqueue --wait --keep messages:10 telegram:42   # keep the last 10 messages verbatim\n"
        "  nanobot-summary enqueue --all\n"
        "  nanobot-summary enqueue --all --since 2026-11-01   # catch up the daily notes\n"
        "  nanobot-summary enqueue --all --since 2026-11-01 --dry-run   # what that catch-up would summarize and note",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    enqueue.add_argument("keys", nargs="*", metavar="KEY", help="session keys")
    enqueue.add_argument("--all", action="store_true", help="every session of nanobot's workspace")
    enqueue.add_argument(
        "--dry-run",
        action="store_true",
        help="print what the job would do now (the same plan the job makes, the catch-up's notes "
        "with --since); no LLM call, nothing queued",
    )
    enqueue.add_argument(
        "--keep",
        type=_keep,
        metavar="RULE",
        help="what stays verbatim after this summary: messages:N, tokens:N, fraction:F (of the "
        "window) or turns:N (the last N user turns and their answers); default turns:1",
    )
    enqueue.add_argument(
        "--since",
        type=_date,
        metavar="YYYY-MM-DD",
        help="also write daily notes for every message from this date on (catch-up run)",
    )
    enqueue.add_argument("--wait", action="store_true", help="block until each job is done and print its outcome")
    enqueue.add_argument(
        "--force",
        action="store_true",
        help="call the model even when the plan says no summary could shrink the context (too few "
        "tokens to cover: the job otherwise ends without a call, and the dry run says so)",
    )
    enqueue.add_argument("--timeout", type=float, default=600.0, help="seconds --wait waits per job (default 600)")
    enqueue.set_defaults(handler=_lazy("worker.commands.enqueue"), parser=enqueue)


def _add_status(sub: Subcommands) -> None:
    status = sub.add_parser(
        "status",
        help="health, queue, jobs in flight, records waiting for nanobot, rests, spend, outcomes",
        description="Show this nanobot instance's summary worker as Redis (REDIS_URL) holds it: is a worker alive "
        "and with which settings (its own, as it reports them, not this shell's), queue depth, jobs in flight "
        "(STALE when no live worker runs them), records waiting for nanobot, resting sessions, what summarizing "
        "cost, and each session's last job. Only this instance's namespace is read.",
        epilog="Three outputs of the same data: text for people (one entry per session, wrapped at the terminal's "
        "width: COLUMNS sets it); --json, one JSON object for scripts; --prometheus, metrics named "
        "nanobot_summary_* in Prometheus' text format 0.0.4, e.g. for node_exporter's textfile collector. Exit "
        "code 2 when Redis cannot be used (--prometheus then still prints nanobot_summary_redis_up 0).",
    )
    output = status.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON object, for scripts")
    output.add_argument(
        "--prometheus",
        action="store_true",
        help="print Prometheus metrics (text exposition format 0.0.4), for a scrape",
    )
    status.set_defaults(handler=_lazy("worker.commands.status"))


def _add_rest(sub: Subcommands) -> None:
    rest = sub.add_parser(
        "rest",
        help="keep sessions unsummarized until end-rest (a pause: no trigger, idle or daily job)",
        description=textwrap.fill(
            "Pause sessions: nanobot's trigger, the idle check and the daily run queue no summary for them until "
            "`nanobot-summary end-rest KEY` (or the web page's End rest). `status`, `doctor` and the page show each "
            "paused session. A job queued by hand (`enqueue`) still runs, and ends the pause when it summarizes.",
            100,
        ),
        epilog="examples:\n  nanobot-summary rest telegram:42\n  nanobot-summary end-rest telegram:42   # resume",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rest.add_argument("keys", nargs="+", metavar="KEY", help="session keys")
    rest.set_defaults(handler=_lazy("worker.commands.rest", "pause_main"), parser=rest)


def _add_end_rest(sub: Subcommands) -> None:
    rest = sub.add_parser(
        "end-rest",
        help="end a session's rest after a failed or fruitless job, so its trigger queues jobs again",
        description=textwrap.fill(
            "End the rest of sessions (as the web page's End rest): after a failed or fruitless job a session rests "
            "(NANOBOT_SUMMARY_COOLDOWN, doubling with each failure in a row) and nanobot's trigger queues nothing for "
            "it meanwhile. Ending it deletes the rest and the failure streak: the trigger queues the session's jobs "
            "again from its next turn. `status` lists the resting sessions; a job queued by hand (`enqueue`) does "
            "not wait for a rest anyway.",
            100,
        ),
        epilog="examples:\n  nanobot-summary end-rest telegram:42\n"
        "  nanobot-summary end-rest --all        # e.g. once the summary model's provider answers again",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rest.add_argument("keys", nargs="*", metavar="KEY", help="session keys")
    rest.add_argument("--all", action="store_true", help="every resting session of this instance")
    rest.set_defaults(handler=_lazy("worker.commands.rest"), parser=rest)


def _add_undo(sub: Subcommands) -> None:
    undo = sub.add_parser(
        "undo",
        help="undo a session's summary (nanobot may keep running)",
        description="Undo a session's summary. nanobot then sends the covered messages again (they are still in "
        "the session file) instead of the summary, and no waiting summary of the session is applied. A running "
        "nanobot that holds the session in memory is sent the undo too (as summaries are) and undoes it there; "
        "the command waits for that (15 s at most) and says whether it happened. Then make a fresh summary with "
        "`nanobot-summary enqueue --wait KEY` (with the worker running), or "
        "let the trigger make one. The daily notes keep what the summary added (edit them by hand); "
        "--forget-facts removes the session's facts from MEMORY.md.",
    )
    undo.add_argument("session", help="the session key, e.g. telegram:42")
    undo.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    undo.add_argument(
        "--forget-facts",
        action="store_true",
        help="also remove from MEMORY.md the facts learned in this session (the worker records "
        "each fact's session beside the file); the user's own lines stay",
    )
    undo.add_argument(
        "--keep-summary",
        action="store_true",
        help="with --forget-facts: only forget the facts, leave the summary (nanobot may keep running)",
    )
    undo.add_argument(
        "--pause",
        action="store_true",
        help="also keep the session unsummarized until `nanobot-summary end-rest KEY` (as `rest KEY`): "
        "otherwise its next turns may queue a fresh summary",
    )
    undo.set_defaults(handler=_lazy("worker.commands.undo"))


def _add_forget(sub: Subcommands) -> None:
    forget = sub.add_parser(
        "forget",
        help="forget a fact of MEMORY.md by its text; --everywhere: its notes and recall passages too",
        description=textwrap.fill(
            "Forget a fact of MEMORY.md (written, or held for the next write) by its text, compared as the web "
            "page's Forget compares it (case, punctuation and spacing aside), through the worker's own lock and "
            "write rules: the user's own lines stay, and no job that asked its model before brings it back. Then "
            "say where else the worker keeps the text: the daily notes' lines and the recall index's passages (the "
            "archived messages of a session) that hold each of its words, the commonest aside. --everywhere "
            "removes those too, as the page's Forget everywhere does: then the recall tool no longer returns it, "
            "and the archived messages stay out of the recall index when it is rebuilt or indexes their session "
            "again. nanobot's session files keep the conversation itself: they are nanobot's, and this command "
            "never changes them. Safe while the worker and nanobot run.",
            100,
        ),
        epilog="examples:\n"
        '  nanobot-summary forget "The user\'s therapist is Dr. Rowe on Thursdays"\n'
        '  nanobot-summary forget --everywhere --dry-run "The user\'s therapist is Dr. Rowe on Thursdays"\n'
        '  nanobot-summary forget --everywhere "therapist Dr. Rowe"   # notes and passages holding these words\n'
        "\nexit codes: 0 done (with --dry-run: what would be done, shown); 1 nothing to forget: MEMORY.md holds no "
        "such fact (the\nnearest are named) and, with --everywhere, no note or passage holds the text either; 2 it "
        "could not be done\n(nanobot's config, a read-only MEMORY.md, a lock held too long, a recall index that "
        "cannot be written).\n"
        "The web page's memory page does the same (Forget, then Forget everywhere), with an undo for the fact.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    forget.add_argument(
        "text", nargs="+", metavar="TEXT", help="the fact's text as MEMORY.md shows it (quoted, or as several words)"
    )
    forget.add_argument(
        "--everywhere",
        action="store_true",
        help="also remove every daily-notes line and recall-index passage that holds each of the "
        "text's words (give fewer words to catch a note that says it otherwise)",
    )
    forget.add_argument(
        "--dry-run", action="store_true", help="say what would be forgotten and removed, change nothing"
    )
    forget.set_defaults(handler=_lazy("worker.commands.forget"))


def _add_doctor(sub: Subcommands) -> None:
    doctor = sub.add_parser(
        "doctor",
        help="check the whole set-up in one screen; each problem with the line that fixes it",
        description="Check the set-up: Python, nanobot's config, sessions and workspace, the summary model and its "
        "key (no paid call), Redis (auth, database), nanobot's own compaction and Dream (advised by "
        "NANOBOT_AUTO_SUMMARY), the hooks in nanobot's environment, each channel seen in the sessions folder and "
        "whether it writes MEMORY.md (NANOBOT_MEMORY_SESSIONS). Then the running system: is a worker alive "
        "(or was one killed or frozen), does the queue move, did jobs fail in the last hour, can Redis evict or "
        "refuse jobs (maxmemory-policy, memory), do summaries wait for nanobot too long. Run it with the "
        "worker's environment. Exit code 1 when a check FAILs (warnings alone exit 0).",
    )
    doctor.add_argument(
        "--nanobot-python",
        metavar="PATH",
        help="the Python that runs nanobot (default: the one named by the `nanobot` command on PATH)",
    )
    doctor.set_defaults(handler=_lazy("worker.commands.doctor"))


def _add_acl(sub: Subcommands) -> None:
    acl = sub.add_parser(
        "acl",
        help="print the Redis ACL user that confines this instance to its own keys and channels",
        description="Print a redis.conf / ACL file line for a Redis user that reaches only this instance's keys, "
        "arq's keys of its jobs and its channels, with every command but the dangerous and listing ones: one such "
        "user per instance keeps instances on a shared Redis from reading or writing each other's records.",
    )
    acl.add_argument("--user", help="the user's name (default: nanobot-<namespace>)")
    acl.set_defaults(handler=_lazy("worker.commands.acl"))


def _add_hooks(sub: Subcommands) -> None:
    hooks = sub.add_parser(
        "hooks",
        help="put the hooks into nanobot's environment, take them out, or check what nanobot loads",
        description="install: the hooks of this worker's version into the environment of the Python that runs "
        "nanobot (found from the `nanobot` command, pipx or uv tool venvs, or --python), with every package "
        "nanobot holds kept at its version; uninstall: the hooks and what install added that nothing else needs; "
        "check: load nanobot's entry points in its Python, isolated from the current folder.",
    )
    hooks.add_argument("action", choices=("install", "uninstall", "check"))
    hooks.add_argument("--python", metavar="PATH", help="the Python that runs nanobot")
    hooks.add_argument(
        "--from",
        dest="source",
        metavar="PATH",
        help="install: the hooks' wheel, sdist or folder (default: the hooks of this worker's own "
        f"version, {RELEASE}, from its own environment, with no package index)",
    )
    hooks.add_argument(
        "--purge",
        action="store_true",
        help="uninstall: also remove everything else the project left (the instance's Redis keys, an "
        "orphaned embedded Redis, the `/new` copies, the records' key, the marks in line 1 of the "
        "session files, the recall index, the memory bookkeeping, the state folder with the page's "
        "token); stop the worker first. Messages and your own lines of MEMORY.md are never touched",
    )
    hooks.add_argument(
        "--memory",
        action="store_true",
        help="with --purge: also the memory made for you (the daily notes, MEMORY.md's part between its markers)",
    )
    hooks.add_argument(
        "--venvs", action="store_true", help="with --purge, run from a checkout: also its .venv and .venv-nanobot"
    )
    hooks.set_defaults(handler=_hooks, parser=hooks)


def _add_web(sub: Subcommands) -> None:
    web = sub.add_parser(
        "web",
        help="a local web page: the worker's health, MEMORY.md's facts (forget, edit, pin, undo), notes, "
        "recall, sessions (summarize now, retry, end a rest, forget what a session taught)",
        description="Serve a web page over this nanobot instance: the worker's health, queue, outcomes and spend, "
        "with each session's actions (summarize now, retry a failed job, end a rest, forget what it taught); "
        "MEMORY.md's facts with where each was learned, to search, forget, edit or pin (and undo); the daily notes; "
        "the recall tool's search as a chosen session would run it; each session's outcomes and summary. It binds "
        "127.0.0.1 and answers only to the user who runs it: every request needs the token of that user's token "
        "file (made at the first start, readable by that user only); open the URL it prints, or `--url`'s.",
    )
    web.add_argument("--host", help="address to bind (default 127.0.0.1: this machine only)")
    web.add_argument(
        "--port", type=int, help="port to listen on (default 8766: nanobot's own web chat takes 8765; 0: any free port)"
    )
    web.add_argument("--read-only", action="store_true", help="show, never change (for a shared screen)")
    web.add_argument(
        "--token-file",
        metavar="PATH",
        help="the token file (default $XDG_STATE_HOME/nanobot-summary/web-token, else "
        "~/.local/state/nanobot-summary/web-token; made 0600 at the first start)",
    )
    web.add_argument(
        "--url",
        action="store_true",
        help="print the address to open, with the token, and exit (run it as the page's user): the "
        "running page's address, unless --host or --port names another",
    )
    web.add_argument(
        "--sign-out-all",
        action="store_true",
        help="sign every browser out of the running pages of this token file and exit (a browser "
        "otherwise stays signed in 12 hours idle, 7 days at most)",
    )
    web.set_defaults(handler=_lazy("worker.web.command"))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `python -m worker --burst` (flags only) keeps meaning "run the worker", as before the subcommands.
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv = ["run", *argv]
    top = parser()
    args = top.parse_args(argv)
    if args.command in ("enqueue", "end-rest") and not args.keys and not args.all:
        args.parser.error("name at least one session KEY, or --all")
    warn_unknown_variables()
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


def warn_unknown_variables() -> None:
    """A misspelled variable would be ignored without a word: name it, with the nearest known one."""
    from worker.settings import unknown_variables

    for line in unknown_variables():
        print(f"warning: {line}", file=sys.stderr)
