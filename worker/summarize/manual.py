"""A job queued by hand for one session.

The command line's `enqueue` and the web page's "summarize now" and "retry" queue the same request, after the same check
of the key."""

from __future__ import annotations

from pathlib import Path

from arq.connections import ArqRedis

from nanobot_hooks.contract.queue import enqueue_summary
from nanobot_hooks.contract.records import SummarizeRequest
from nanobot_hooks.contract.session_format import is_internal_session
from worker.errors import NotSummarized, SessionKeyError, SessionNotFound
from worker.nanobot.sessions import list_session_keys, read_session

# What a job queued by hand keeps verbatim unless --keep says otherwise: the last exchange, as an idle summary
# keeps. NANOBOT_SUMMARY_KEEP sizes the tail of the automatic summaries (3% of the window: at nanobot's default
# 200,000 that is 6,000 tokens, a few turns entirely, so `enqueue --wait` after a few turns made nothing).
MANUAL_KEEP = "turns:1"


def manual_request(key: str, keep: str | None, since: str | None = None, force: bool = False) -> SummarizeRequest:
    """The request of a job queued by hand.

    With `since`, as the job sees it once it took the catch-up flag (worker.summarize.jobs: notes through the end, from
    that day on), which is what the dry run plans; `force`: the model is called even when the plan says no summary could
    shrink the context."""
    return SummarizeRequest(
        session_key=key,
        reason="manual",
        keep=keep or MANUAL_KEEP,
        notes_through_end=since is not None,
        notes_since=since,
        force=force,
    )


def check_key(sessions_dir: Path, key: str) -> None:
    """Raises NotSummarized unless `key` is a session the worker summarizes.

    NotSummarized unless `key` is a session of nanobot's folder the worker summarizes (the web page's "summarize now"
    asks the same)."""
    if is_internal_session(key):
        raise NotSummarized(f"{key!r} is one of nanobot's own sessions (dream, cron, heartbeat): not summarized")
    try:
        read_session(sessions_dir, key)
    except SessionKeyError as exc:
        raise NotSummarized(str(exc)) from None
    except SessionNotFound:
        known = ", ".join(list_session_keys(sessions_dir)[:5]) or "none"
        raise NotSummarized(f"no session {key!r} in {sessions_dir} (known: {known})") from None


async def queue_one(
    redis: ArqRedis, key: str, keep: str | None = None, since: str | None = None, force: bool = False
) -> bool:
    """A job queued by hand for one session (the command line's and the web page's "summarize now" and "retry").

    False when one is already queued or running (single flight)."""
    from worker.summarize.daily import set_flag  # the catch-up flag the daily run sets too

    if since:
        await set_flag(redis, key, since)
    # The flag, not the request, tells the job to note through the end (it may be taken by a job already
    # queued for the session: that one notes them then).
    return await enqueue_summary(redis, manual_request(key, keep, force=force)) is not None
