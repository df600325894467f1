"""`nanobot-summary enqueue`.

Summarize one, several or all nanobot sessions now, or show what the job would do (--dry-run, the job's own plan). Only
--dry-run loads the summarizing side (litellm, the token counter)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from arq.connections import ArqRedis
from arq.jobs import Job, JobStatus
from rich.progress import Progress

from nanobot_hooks.contract.client import close_client
from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.queue import load_record
from nanobot_hooks.contract.records import SummarizeRequest, SummaryRecord
from nanobot_hooks.contract.session_format import is_internal_session
from worker.commands.startup import instance, run_command
from worker.connections import open_pool, redis_problem
from worker.errors import NotSummarized
from worker.nanobot.sessions import SessionFile, list_session_keys
from worker.settings import Settings
from worker.state.outcomes import headline, load_outcome
from worker.summarize.manual import MANUAL_KEEP, check_key, manual_request, queue_one

if TYPE_CHECKING:  # the dry run's types: the summarizing side is loaded only when it runs
    from worker.summarize.deps import Deps


class UsageError(Exception):
    """One line for the user, exit code 2."""


def session_keys(sessions_dir: Path, args: argparse.Namespace) -> list[str]:
    """Every key checked before anything is queued, so a typo queues nothing.

    With --all, the sessions the worker can serve (one it cannot is skipped with a warning, never stopping the
    others)."""
    if args.all:
        return [k for k in list_session_keys(sessions_dir) if not is_internal_session(k)]
    keys = list(dict.fromkeys(args.keys))
    for key in keys:
        try:
            check_key(sessions_dir, key)
        except NotSummarized as exc:
            raise UsageError(str(exc)) from None
    return keys


async def connect(settings: Settings) -> ArqRedis:
    if problem := redis_problem(settings.redis_url, keys=settings.keys, **settings.redis_options()):
        raise UsageError(problem)
    return await open_pool(settings)


async def dry_run(
    keys: list[str],
    settings: Settings,
    redis: ArqRedis | None,
    keep: str | None = None,
    since: str | None = None,
    force: bool = False,
) -> None:
    """What the job would do now, from the job's own plan.

    What the job would do now, from the job's own plan (worker.summarize.plan.plan_job) and, for a catch-up (`since`),
    the notes it would add for the messages the summary leaves out (worker.summarize.notes_only)."""
    from worker.service.build import build_deps
    from worker.summarize.jobs import read_for_job

    deps = build_deps(settings)
    print(
        f"model {deps.model.model} ({deps.model.source}); keep {keep or MANUAL_KEEP}"
        f"{'' if keep else ' (a job queued by hand; --keep RULE for another)'}; "
        f"input budget {settings.summary_input_tokens} tokens per call"
    )
    for key in keys:
        req = manual_request(key, keep, since, force)
        # The catch-up reads as its job does: un-noted messages before the watermark are noted too.
        session = read_for_job(deps, req)
        pending = await load_record(redis, key) if redis is not None else None
        covered = print_plan(deps, session, pending, req)
        if since is not None:
            print_notes(deps, session, covered, since)


def summarized_so_far(start: int) -> str:
    """What a summary covers already.

    The messages before the job's start (its watermark, or a pending record's boundary)."""
    return f"messages 0..{start - 1} summarized already" if start else "none summarized yet"


def print_plan(deps: Deps, session: SessionFile, pending: SummaryRecord | None, req: SummarizeRequest) -> set[int]:
    """The summary part of the plan, in a few lines; the messages it would cover (their notes come with it)."""
    from worker.summarize.plan import plan_job

    plan = plan_job(deps, session, pending, req)
    cut, settings = plan.cut, deps.settings
    print(
        f"{session.key}: {cut.read} messages, {summarized_so_far(plan.start)}"
        + (" (a pending record not yet applied)" if plan.start != session.last_archived else "")
        + (f", {session.skipped_lines} malformed lines skipped" if session.skipped_lines else "")
    )
    if plan.skip is not None:
        print(f"  nothing to summarize: {plan.skip}; messages {cut.start}..{cut.read - 1} stay in context")
        return set()
    kept = sum(plan.counts[cut.boundary : cut.read])
    previous = deps.counter(plan.previous)
    calls = -(-(plan.covered_tokens + previous) // max(settings.summary_input_tokens, 1))
    print(
        f"  would cover messages {cut.start}..{cut.boundary - 1} ({len(plan.entries)} of {cut.covered} "
        f"messages shown to the model, {plan.covered_tokens:,} tokens) + previous summary ({previous:,} tokens)"
    )
    print(f"  would keep messages {cut.boundary}..{cut.read - 1} ({cut.kept} messages, {kept:,} tokens)")
    print(f"  about {max(calls, 1)} LLM call(s)")
    return {entry.index for entry in plan.entries}


def print_notes(deps: Deps, session: SessionFile, covered: set[int], since: str) -> None:
    """The catch-up's notes-only part: messages from `since` on that no summary covers and no day file notes yet."""
    from worker.model.prompts import notes_system_prompt
    from worker.summarize.ask import PROMPT_SLACK_TOKENS
    from worker.summarize.remember import known_facts, unnoted
    from worker.text.prepare import chunk, detect_language, transcript
    from worker.text.tokens import count_recurring

    dated = transcript(session.messages, session.first, len(session.messages), deps.counter, deps.tz, since)
    entries = unnoted(deps, session.key, [e for e in dated if e.index not in covered], session.generation)
    if not entries:
        print(f"  notes since {since}: every message is noted already")
        return
    # The chunks the job's notes-only calls take (worker.summarize.notes_only): the budget less what every call
    # sends besides the messages.
    overhead = (
        count_recurring(deps.counter, notes_system_prompt(detect_language(session.messages[session.first :])))
        + count_recurring(deps.counter, "\n".join(known_facts(deps)))
        + PROMPT_SLACK_TOKENS
    )
    calls = len(chunk(entries, deps.settings.summary_input_tokens - overhead, deps.counter))
    print(
        f"  would note {len(entries)} more messages since {since} (not yet in the daily notes) in about "
        f"{calls} notes-only LLM call(s)"
    )


async def wait_for(redis: ArqRedis, key: str, timeout: float) -> int:
    keys = Keys.of(redis)
    job = Job(keys.job_id(key), redis, _queue_name=keys.queue, _deserializer=redis.job_deserializer)
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
    print(headline(outcome))
    return 1 if outcome.status == "failed" else 0


async def run(args: argparse.Namespace) -> int:
    settings, nanobot = instance()  # the instance's namespace: its queue and keys
    sessions_dir = nanobot.sessions_dir
    keys = session_keys(sessions_dir, args)
    if not keys:
        print(f"no sessions in {sessions_dir}")
        return 0
    if args.dry_run:
        await dry_run_here(keys, settings, args.keep, args.since, args.force)
        return 0
    redis = await connect(settings)
    await queue_all(redis, keys, args.keep, args.since, args.force)
    status = await wait_all(redis, keys, args.timeout) if args.wait else 0
    await close_client(redis)
    return status


async def dry_run_here(
    keys: list[str], settings: Settings, keep: str | None, since: str | None, force: bool = False
) -> None:
    """The dry run, with the summaries waiting in Redis when it answers (planned as if none when not)."""
    redis = None
    if problem := redis_problem(settings.redis_url, keys=settings.keys, **settings.redis_options()):
        print(f"note: {problem}; planned as if no summary were waiting there", file=sys.stderr)
    else:
        redis = await connect(settings)
    try:
        await dry_run(keys, settings, redis, keep, since, force)
    finally:
        if redis is not None:
            await close_client(redis)


async def queue_all(redis: ArqRedis, keys: list[str], keep: str | None, since: str | None, force: bool = False) -> None:
    """A manual job per session (a notes catch-up from `since` when given), one line each."""
    with Progress(transient=True, disable=len(keys) < 10) as progress:
        task = progress.add_task("queueing", total=len(keys))
        for key in keys:
            done = "queued" if await queue_one(redis, key, keep, since, force) else "already queued or running"
            progress.console.print(f"{key}: {done}" + (f", notes since {since}" if since else ""))
            progress.advance(task)


async def wait_all(redis: ArqRedis, keys: list[str], timeout: float) -> int:
    """Wait for each session's job to end; the worst exit code."""
    status = 0
    with Progress(disable=len(keys) < 10) as progress:
        task = progress.add_task("waiting", total=len(keys))
        for key in keys:
            status = max(status, await wait_for(redis, key, timeout))
            progress.advance(task)
    return status


def main(args: argparse.Namespace) -> int:
    return run_command(run(args), UsageError)
