"""The instance's own index of the keys it writes under names it cannot know in advance.

The instance's own index of the keys it writes under names it cannot know in advance (a session's outcome, a worker's
report, a model's answer format): read instead of SCAN, which the instance's Redis ACL user may not run
(`Keys.acl_rules`), so status, doctor, the page and `end-rest --all` list only what this instance wrote.

Each family is a set in `Keys.index(family)` of the part of the name after the family's prefix; a writer adds its
member beside every write (`remember`), and a reader (`members`) keeps the members whose key still exists and
removes the others (expired, deleted) in one atomic step, so the index never outgrows the keys it names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from arq.connections import ArqRedis

from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.queue import reply

# KEYS[1] the index, KEYS[2..] each member's key; ARGV the members. Members whose key is gone are removed and the
# others returned: one round trip, and no writer's SADD between a check and its SREM is lost.
_KEEP_LIVE = """
local live = {}
for i, member in ipairs(ARGV) do
  if redis.call('EXISTS', KEYS[i + 1]) == 1 then
    live[#live + 1] = member
  else
    redis.call('SREM', KEYS[1], member)
  end
end
return live
"""

# Members checked per script call: a long family is read in slices, never one script holding Redis for long.
SLICE = 500


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def remember(pipe: Any, keys: Keys, family: str, member: str) -> Any:
    """Add `member` to the family's index, in the writer's own pipeline (or on its client: the awaitable returned)."""
    return pipe.sadd(keys.index(family), member)


async def members(redis: ArqRedis, family: str, name_of: Callable[[str], str]) -> list[str]:
    """The family's members whose key (`name_of(member)`) exists, sorted; the others are dropped from the index."""
    index = Keys.of(redis).index(family)
    found = sorted(_text(member) for member in await reply(redis.smembers(index)))
    live: list[str] = []
    for start in range(0, len(found), SLICE):
        part = found[start : start + SLICE]
        names = [index, *(name_of(member) for member in part)]
        kept = await reply(redis.eval(_KEEP_LIVE, len(names), *names, *part))
        live += [_text(member) for member in cast(list[Any], kept)]
    return sorted(live)
