"""`nanobot-summary rest` and `end-rest`.

Pause sessions until resumed, and end the rest of one, several or every resting session, as the web page's "End rest"
does (worker.state.budget.end_rest): nanobot's trigger queues the session's jobs again from its next turn, and its
failure streak starts afresh. A job queued by hand (`enqueue`) does not wait for a rest: this is for the trigger."""

from __future__ import annotations

import argparse

from nanobot_hooks.contract.client import close_client
from nanobot_hooks.contract.records import utcnow
from worker.commands.startup import instance, refuse, run_command
from worker.connections import open_pool, redis_problem
from worker.errors import SessionKeyError
from worker.nanobot.sessions import session_path
from worker.state import budget
from worker.state.snapshot import resting_sessions
from worker.text.clock import moment_text, zone_or_utc


async def run(args: argparse.Namespace) -> int:
    settings, nanobot = instance()  # the instance's namespace: its rests
    tz = zone_or_utc(settings.summary_timezone or nanobot.timezone)  # as status and the page write moments
    for key in args.keys:
        try:
            session_path(nanobot.sessions_dir, key)  # a key of this nanobot's folder, as the page checks it
        except SessionKeyError as exc:
            return refuse(exc)
    if problem := redis_problem(settings.redis_url, keys=settings.keys, **settings.redis_options()):
        return refuse(problem)
    redis = await open_pool(settings)
    try:
        keys = await resting_sessions(redis) if args.all else list(dict.fromkeys(args.keys))
        if not keys:
            print("no session is resting")
        for key in keys:
            ended = await budget.end_rest(redis, key)
            if ended is None:
                print(f"{key}: not resting (the rest ran out, or a job ended it)")
                continue
            if ended.paused:
                print(
                    f"{key}: pause ended ({ended.reason}); nanobot's trigger queues its jobs again from its next turn"
                )
                continue
            print(
                f"{key}: rest ended (it was to last until {moment_text(ended.until, tz, utcnow())}, after "
                f"{ended.failures} failure(s) in a row: {ended.reason}); nanobot's trigger queues its jobs again "
                "from its next turn"
            )
    finally:
        await close_client(redis)
    return 0


def main(args: argparse.Namespace) -> int:
    return run_command(run(args))


async def pause(args: argparse.Namespace) -> int:
    """`nanobot-summary rest KEY...`: each session paused until end-rest."""
    settings, nanobot = instance()
    for key in args.keys:
        try:
            session_path(nanobot.sessions_dir, key)
        except SessionKeyError as exc:
            return refuse(exc)
    if problem := redis_problem(settings.redis_url, keys=settings.keys, **settings.redis_options()):
        return refuse(problem)
    redis = await open_pool(settings)
    try:
        for key in dict.fromkeys(args.keys):
            await budget.pause(redis, key, "paused by `nanobot-summary rest`")
            print(
                f"{key}: paused: nanobot's trigger, the idle check and the daily run queue no summary for it until "
                f"`nanobot-summary end-rest {key}`"
            )
    finally:
        await close_client(redis)
    return 0


def pause_main(args: argparse.Namespace) -> int:
    return run_command(pause(args))
