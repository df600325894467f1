"""Every Redis name of one nanobot instance: the key prefix, the namespace, the job names and `Keys`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "JOB_DAILY",
    "JOB_IDLE",
    "JOB_SUMMARIZE",
    "KEY_PREFIX",
    "NAMESPACE_FROM_ID",
    "NAMESPACE_PATTERN",
    "WORKSPACE_ID_FILE",
    "default_namespace",
    "Keys",
]

KEY_PREFIX = "nanobot-summary"

JOB_SUMMARIZE = "summarize_session"
JOB_DAILY = "daily_summaries"
# Deferred by the cache lifetime after each turn; summarizes the session once it has been quiet that long.
JOB_IDLE = "idle_summary"
# arq's own keys of a job, `arq:<kind>:<job id>` (arq.constants): every job id of an instance starts with its prefix.
ARQ_JOB_KEYS = ("job", "in-progress", "retry", "result")
ARQ_ABORT = "arq:abort"  # arq.constants.abort_jobs_ss: one set for every queue

# A namespace: what NANOBOT_SUMMARY_NAMESPACE accepts, and what the default (below) always is.
NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
# nanobot names its sessions folder by this id (`<config dir>/sessions/<id>`), kept in the workspace.
WORKSPACE_ID_FILE = ".nanobot/workspace-id"
NAMESPACE_FROM_ID = 12  # hex digits of the workspace id: 48 bits, no collision among millions of instances


def default_namespace(workspace_id: str) -> str:
    """The namespace of a nanobot instance.

    The start of its workspace id, so its hooks (which read the id from nanobot's session manager) and its worker (from
    the file in the workspace) agree unconfigured, and an operator matches a namespace to its sessions folder by eye."""
    return workspace_id[:NAMESPACE_FROM_ID]


@dataclass(frozen=True)
class Keys:
    """Every Redis name of one nanobot instance, in one place.

    The queue, arq's job ids, the records, the notice channel, and the worker's own keys, all under
    `nanobot-summary:<namespace>:`. Any number of nanobot instances (and their workers) share one Redis database, each
    in its own namespace.

    A client is bound to one namespace by arq's own `default_queue_name` (arq's Worker hands every job a
    client made with its queue's name), so the functions taking a client name their keys with
    `Keys.of(client)` and two workers of two instances in one process never cross."""

    namespace: str

    def __post_init__(self) -> None:
        if not re.match(NAMESPACE_PATTERN, self.namespace):
            raise ValueError(f"not a namespace: {self.namespace!r}")

    @classmethod
    def of(cls, redis: Any) -> Keys:
        """The namespace a client was made for; a client of no namespace is a bug, never a guess."""
        queue = str(getattr(redis, "default_queue_name", ""))
        namespace = queue.removeprefix(f"{KEY_PREFIX}:").removesuffix(":queue")
        if queue != f"{KEY_PREFIX}:{namespace}:queue":
            raise ValueError(f"a Redis client not bound to a namespace (its queue is {queue!r})")
        return cls(namespace)

    @property
    def prefix(self) -> str:
        return f"{KEY_PREFIX}:{self.namespace}:"

    def acl_rules(self) -> list[str]:
        """The Redis ACL rules (after `ACL SETUSER <user> on ><password>`) that confine a client to this instance.

        Its keys (every one under the prefix, arq's through the job ids), its channels (`ready`, `outcome`), every
        command but the dangerous ones (MONITOR, KEYS, CONFIG, FLUSHALL, ...) and those that name keys or channels
        beyond the patterns (listing keys or channels: scan, randomkey, pubsub); nothing of the project needs them (it
        lists what it wrote from `index`). INFO stays: the worker checks the server's version. A namespace has no glob
        characters (NAMESPACE_PATTERN), so a pattern matches this instance's names only. One key of arq's is shared by
        every instance and cannot be renamed: its set of jobs to abort, from which a worker removes each job it
        finishes; write-only (Redis 7's `%W~`), nobody reads it (the worker does not allow aborts, arq's default)."""
        return [
            "resetkeys",
            f"~{self.prefix}*",
            *(f"~arq:{kind}:{self.prefix}*" for kind in ARQ_JOB_KEYS),
            f"%W~{ARQ_ABORT}",
            "resetchannels",
            f"&{self.prefix}*",
            "nocommands",
            "+@all",
            "-@dangerous",
            "+info",
            "-scan",
            "-randomkey",
            "-pubsub",
        ]

    @property
    def probe(self) -> str:
        """A key read (never written) by every command and the worker at start-up, to check the ACL user.

        Read (never written) by every command and the worker at start-up: a user whose ACL allows PING but not this
        instance's keys is told apart there, and a user confined to them (`acl_rules`) passes."""
        return f"{self.prefix}probe"

    def index(self, family: str) -> str:
        """The instance's own index of one family of its keys, read instead of SCAN.

        The instance's own index of one family of its keys whose names it cannot know in advance (a set of the part
        after the family's prefix: a session key, a worker's id, a model): what status, doctor and the page read instead
        of SCAN, which `acl_rules` forbids. Families: `workers`, `hooks` (each running nanobot's report, also the
        presence of its listener), `formats`, `spend`, `resting`, `outcomes`."""
        return f"{self.prefix}index:{family}"

    @property
    def queue(self) -> str:
        """arq's queue; also the `default_queue_name` of every client of this namespace."""
        return f"{self.prefix}queue"

    @property
    def notice_channel(self) -> str:
        """Published (payload: the session key) when a record is stored and ready for pickup."""
        return f"{self.prefix}ready"

    @property
    def outcome_channel(self) -> str:
        """The channel the worker publishes every job's outcome on.

        Published by the worker at the end of every job (payload: JSON with `session`, `status` and `line`, the outcome
        in one line), so that why a summary was or was not made shows in nanobot's own log."""
        return f"{self.prefix}outcome"

    @property
    def pending(self) -> str:
        """Session keys whose record waits for pickup; read by nanobot at start-up."""
        return f"{self.prefix}pending"

    @property
    def stats(self) -> str:
        """Counters kept by nanobot_hooks (a hash).

        Records "applied", "stale" (dropped, the session had changed), "duplicate" (already applied elsewhere), "forged"
        (not signed with the instance's key: refused), "replayed" (signed, but expired, or made before what the session
        applied or undid since: refused); "undone": `nanobot-summary undo`s applied to a live session."""
        return f"{self.prefix}stats"

    def job_id(self, session_key: str) -> str:
        """One id per session: arq refuses a second job while one is queued or running."""
        return f"{self.prefix}job:{session_key}"

    def idle_job_id(self, session_key: str) -> str:
        """One waiting idle check per session, apart from the summarize job's id.

        A check deferred for the cache lifetime must not hold back the threshold trigger's job."""
        return f"{self.prefix}idle:{session_key}"

    def cron(self, name: str) -> str:
        """A cron job's arq name.

        arq makes a unique cron job's id `<name>:<tick in ms>` and refuses a second enqueue of it, so with a name
        without the namespace the first worker of any instance to reach a tick would take it for every instance on the
        Redis. Under the prefix, every arq job id of an instance, and so each of arq's own keys for it (`arq:job:<id>`,
        `arq:in-progress:<id>`, `arq:retry:<id>`), names its instance."""
        return f"{self.prefix}cron:{name}"

    def session_of_job(self, job_id: str) -> str | None:
        start = f"{self.prefix}job:"
        return job_id[len(start) :] if job_id.startswith(start) else None

    def record(self, session_key: str) -> str:
        return f"{self.prefix}record:{session_key}"

    def context(self, session_key: str) -> str:
        """The prompt tokens of the session's recent turns and the summaries applied among them.

        A list of JSON entries, newest last, capped; written by nanobot's hooks, drawn by the web page."""
        return f"{self.prefix}context:{session_key}"

    def daily_flag(self, session_key: str) -> str:
        """Set by the daily run: the next job for the session also notes the kept tail, from this date on."""
        return f"{self.prefix}daily:{session_key}"

    def rest(self, session_key: str) -> str:
        """Set by the worker after a failed or fruitless paid job: the trigger waits until it expires.

        The name keeps the word this rest had before it had its name (as the settings `summary_cooldown` and
        `summary_cooldown_max` and the outcomes' `cooldown_until` do): renamed, a worker or hooks of the release before
        would not see the other's rests."""
        return f"{self.prefix}cooldown:{session_key}"

    def spend(self, scope: str) -> str:
        """A hash of spend.

        `total` since the first job; `session:<key>`; `job:<key>`, the session's current job over all its tries;
        `day:<YYYY-MM-DD>`, tokens of a day in nanobot's timezone (field `tokens`, and `tokens:<key>` per session)."""
        return f"{self.prefix}spend:{scope}"

    def notes_format(self, model: str) -> str:
        """How a summary model answers notes, when not as JSON.

        "lines", or "off" when it follows no format asked for (the worker's, with a lifetime: worker.state.formats)."""
        return f"{self.prefix}format:{model}"

    def failures(self, session_key: str) -> str:
        """Failed jobs of a session in a row (reset by a good one): each doubles the next rest."""
        return f"{self.prefix}failures:{session_key}"

    def progress(self, session_key: str) -> str:
        """Where a chunked summary of the session stopped."""
        return f"{self.prefix}progress:{session_key}"

    def running(self, session_key: str) -> str:
        """The session's run lock: the token of the one summary run of it under way (worker/state/running.py)."""
        return f"{self.prefix}running:{session_key}"

    @property
    def worker_prefix(self) -> str:
        return f"{self.prefix}worker:"

    def worker(self, process: str) -> str:
        """A running worker's report, which status and doctor read.

        A running worker's report (`<host>:<pid>`), rewritten at every beat, deleted at a clean stop
        (worker/state/workers.py): status and doctor read it."""
        return self.worker_prefix + process

    @property
    def hooks_prefix(self) -> str:
        return f"{self.prefix}hooks:"

    def hooks(self, process: str) -> str:
        """The settings a nanobot process's hooks act on, which doctor compares with the worker's.

        The settings a nanobot process's hooks act on (`<host>:<pid>`), written by its listener while it runs (refreshed
        every minute, expiring after three): doctor compares them with the worker's."""
        return self.hooks_prefix + process

    @property
    def outcome_prefix(self) -> str:
        return f"{self.prefix}outcome:"

    def outcome(self, session_key: str) -> str:
        """The last job's outcome for a session."""
        return self.outcome_prefix + session_key
