"""One summary run of a session at a time across the instance's workers: the session's run lock in Redis.

arq marks a running job with `arq:in-progress:<id>`; when that mark is lost (evicted under allkeys-lru or
volatile-ttl, a write lost in a failover or an AOF restart) another worker, or the same one, starts the job
again while it runs. The lock is taken before the run's first Redis write or model call, holds a random token
(only its taker releases it) and expires on its own a little after the job's timeout, so a killed worker's
lock never outlives arq's own recovery of its job (the in-progress mark lasts the timeout + 10 s).
"""

from __future__ import annotations

import logging
import secrets

from arq.connections import ArqRedis
from redis.exceptions import RedisError

from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.queue import reply

log = logging.getLogger("worker")

# Seconds the lock outlives the job's timeout: less than arq's 10 s grace on its in-progress mark.
LOCK_MARGIN = 5.0

# Deleted only while it still holds the taker's token: a lock that expired and was taken by another run stays.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


async def take(redis: ArqRedis, session_key: str, job_timeout: float) -> str | None:
    """The session's run lock taken: its token, or None while another run holds it."""
    token = secrets.token_hex(16)
    taken = await redis.set(
        Keys.of(redis).running(session_key), token, nx=True, px=int((job_timeout + LOCK_MARGIN) * 1000)
    )
    return token if taken else None


async def held_for(redis: ArqRedis, session_key: str) -> float:
    """Seconds the run holding the session's lock may still hold it (0 when none does)."""
    left: int = await reply(redis.pttl(Keys.of(redis).running(session_key)))
    return max(0.0, left / 1000)


async def release(redis: ArqRedis, session_key: str, token: str) -> None:
    """The lock given back, if it still holds `token`. Redis gone: it expires by itself."""
    try:
        await reply(redis.eval(_RELEASE, 1, Keys.of(redis).running(session_key), token))
    except (RedisError, OSError) as exc:
        log.warning("%s: the run lock could not be given back (%s); it expires by itself", session_key, exc)
