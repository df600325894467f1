#!/usr/bin/env python3
"""Manual enqueue: summarize one, several or all nanobot sessions now, or show the planned cut (--dry-run)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from arq.connections import ArqRedis  # noqa: E402
from arq.jobs import Job, JobStatus  # noqa: E402
from rich.progress import Progress  # noqa: E402

from nanobot_hooks.contract import Keys, SummarizeRequest  # noqa: E402
from nanobot_hooks.nanobot_format import is_internal_session  # noqa: E402
from nanobot_hooks.settings import redacted_url  # noqa: E402
from nanobot_hooks.queue import enqueue_summary, load_record  # noqa: E402
from worker.settings import Settings, SettingsError, load_settings  # noqa: E402
from worker.app import build_deps  # noqa: E402
from worker.connections import answers, open_pool  # noqa: E402
from worker.cron import flag_sessions  # noqa: E402
from worker.jobs import Deps, chain_start, plan_for  # noqa: E402
from worker.errors import NanobotConfigError, SessionKeyError, SessionNotFound  # noqa: E402
from worker.outcomes import load_outcome  # noqa: E402
from worker.sessions import list_session_keys, read_session  # noqa: E402


class UsageError(Exception):
    """One line for the user, exit code 2."""


def _date(text: str) -> str:
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date like 2026-11-01") from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/enqueue.py",
        description="Queue summary jobs for nanobot sessions (keys look like telegram:42 or cli:direct). "
        "Reads the same environment as the worker (NANOBOT_CONFIG, REDIS_URL, NANOBOT_SUMMARY_*).",
        epilog="examples:\n  scripts/enqueue.py --dry-run cli:direct\n  scripts/enqueue.py --wait telegram:42\n"
        "  scripts/enqueue.py --all\n  scripts/enqueue.py --all --since 2026-11-01   # catch up the daily notes",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("keys", nargs="*", metavar="KEY", help="session keys")
    parser.add_argument("--all", action="store_true", help="every session of nanobot's workspace")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the planned cut and token counts; no LLM call, nothing queued")
    parser.add_argument("--since", type=_date, metavar="YYYY-MM-DD",
                        help="also write daily notes for every message from this date on (catch-up run)")
    parser.add_argument("--wait", action="store_true", help="block until each job is done and print its outcome")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds --wait waits per job (default 600)")
    args = parser.parse_args(argv)
    if not args.keys and not args.all:
        parser.error("name at least one session KEY, or --all")
    return args


def session_keys(deps: Deps, args: argparse.Namespace) -> list[str]:
    """Every key checked before anything is queued, so a typo queues nothing. With --all, the sessions the
    worker can serve (one it cannot is skipped with a warning, never stopping the others)."""
    if args.all:
        return [k for k in list_session_keys(deps.sessions_dir) if not is_internal_session(k)]
    keys = list(dict.fromkeys(args.keys))
    for key in keys:
        if is_internal_session(key):
            raise UsageError(f"{key!r} is one of nanobot's own sessions (dream, cron, heartbeat): not summarized")
        try:
            read_session(deps.sessions_dir, key)
        except SessionKeyError as exc:
            raise UsageError(str(exc)) from None
        except SessionNotFound:
            known = ", ".join(list_session_keys(deps.sessions_dir)[:5]) or "none"
            raise UsageError(f"no session {key!r} in {deps.sessions_dir} (known: {known})") from None
    return keys


async def connect(settings: Settings) -> ArqRedis:
    if not answers(settings.redis_url, **settings.redis_options()):
        raise UsageError(f"Redis at {redacted_url(settings.redis_url)} does not answer (is the worker's Redis "
                         "running? set REDIS_URL)")
    return await open_pool(settings)


async def dry_run(deps: Deps, keys: list[str], redis: ArqRedis | None) -> None:
    settings = deps.settings
    print(f"model {deps.model.model} ({deps.model.source}); keep {settings.summary_keep}; "
          f"input budget {settings.summary_input_tokens} tokens per call")
    for key in keys:
        session = read_session(deps.sessions_dir, key)
        pending = await load_record(redis, key) if redis is not None else None
        start, previous = chain_start(session, pending)
        request = SummarizeRequest(session_key=key)
        cut, counts = plan_for(deps, session, start, request)
        covered = sum(counts[cut.start:cut.boundary])
        kept = sum(counts[cut.boundary:cut.read])
        print(f"{key}: {cut.read} messages, summarized through {start}"
              + (" (a pending record not yet applied)" if start != session.last_archived else "")
              + (f", {session.skipped_lines} malformed lines skipped" if session.skipped_lines else ""))
        if cut.covered == 0:
            print(f"  nothing to cover: the keep rule leaves messages {cut.start}..{cut.read - 1} in context")
            continue
        calls = -(-(covered + deps.counter(previous)) // max(settings.summary_input_tokens, 1))
        print(f"  would cover messages {cut.start}..{cut.boundary - 1} ({cut.covered} messages, "
              f"{covered:,} tokens) + previous summary ({deps.counter(previous):,} tokens)")
        print(f"  would keep messages {cut.boundary}..{cut.read - 1} ({cut.kept} messages, {kept:,} tokens)")
        print(f"  about {max(calls, 1)} LLM call(s)")


async def wait_for(redis: ArqRedis, key: str, timeout: float) -> int:
    keys = Keys.of(redis)
    job = Job(keys.job_id(key), redis, _queue_name=keys.queue)
    deadline = asyncio.get_running_loop().time() + timeout
    while await job.status() != JobStatus.not_found:
        if asyncio.get_running_loop().time() > deadline:
            print(f"{key}: still {(await job.status()).value} after {timeout:.0f}s (is a worker running?)")
            return 1
        await asyncio.sleep(0.2)
    outcome = await load_outcome(redis, key)
    if outcome is None:
        print(f"{key}: finished, but left no outcome")
        return 1
    print(f"{key}: {outcome.status}: {outcome.detail}")
    return 1 if outcome.status == "failed" else 0


async def run(args: argparse.Namespace) -> int:
    deps = build_deps(load_settings())
    settings = deps.settings  # with the instance's namespace settled
    keys = session_keys(deps, args)
    if not keys:
        print(f"no sessions in {deps.sessions_dir}")
        return 0
    if args.dry_run:
        redis = await connect(settings) if answers(settings.redis_url, **settings.redis_options()) else None
        await dry_run(deps, keys, redis)
        return 0
    redis = await connect(settings)
    status = 0
    with Progress(transient=True, disable=len(keys) < 10) as progress:
        task = progress.add_task("queueing", total=len(keys))
        for key in keys:
            if args.since:
                # the same path as the daily run: the job notes every message from that date on
                await flag_sessions(deps, redis, args.since, [key], reason="manual")
                progress.console.print(f"{key}: queued, notes since {args.since}")
            else:
                job = await enqueue_summary(redis, SummarizeRequest(session_key=key, reason="manual"))
                progress.console.print(f"{key}: {'queued' if job else 'already queued or running'}")
            progress.advance(task)
    if args.wait:
        with Progress(disable=len(keys) < 10) as progress:
            task = progress.add_task("waiting", total=len(keys))
            for key in keys:
                status = max(status, await wait_for(redis, key, args.timeout))
                progress.advance(task)
    await redis.aclose()
    return status


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(run(args))
    except (UsageError, SettingsError, NanobotConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
