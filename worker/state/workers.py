"""What a running worker says about itself in Redis, beside arq's health-check key.

Who it is, when it last beat, and the settings it runs with. `status` shows the running worker's settings from it (not
the shell's), and `doctor` tells a worker that stopped cleanly (the report is deleted) from one that was killed or froze
(the report stays, its heartbeat ages).

arq's own health-check key cannot tell these apart: it expires 31 s after the last beat, whatever happened.
The report lives a day, is rewritten at every beat, and is deleted when the worker stops cleanly."""

from __future__ import annotations

import os
import socket
from datetime import datetime
from pathlib import Path
from typing import Any

from arq.connections import ArqRedis
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nanobot_hooks.contract.keys import Keys
from nanobot_hooks.contract.records import utcnow
from nanobot_hooks.contract.version import BEFORE_CONTRACT, CONTRACT, RELEASE
from nanobot_hooks.settings import SHARED_SETTINGS, plain_setting, runner
from worker.state import index

# A report outlives its worker by this long: long enough for `doctor` to say "killed an hour ago".
REPORT_SECONDS = 24 * 3600
# A worker beats every 30 s (arq's health_check_interval); one silent for two and a half beats is stale.
BEAT_SECONDS = 30.0
STALE_BEATS = 2.5


class WorkerReport(BaseModel):
    """One worker process's report.

    Read tolerantly: a field another version adds is ignored, one it leaves out takes its default, so an older or newer
    worker never breaks `status`."""

    model_config = ConfigDict(extra="ignore")

    host: str = ""
    pid: int = 0
    started_at: datetime | None = None
    heartbeat_at: datetime | None = None
    # The worker's RELEASE and CONTRACT (nanobot_hooks.contract.version: the hooks compare them with their own at
    # start-up, and status, doctor and the page say a difference); no contract: a worker from before 0.2.0.
    version: str = ""
    contract: int = BEFORE_CONTRACT
    beat_seconds: float = BEAT_SECONDS
    # The ids of the jobs it ran at its last beat (None: a worker that does not say), so a job marked running
    # that no live worker runs is told apart while other workers live.
    running: list[str] | None = None
    # The settings that change what the worker does (names as in worker.settings.Settings), plus the
    # summary model it resolved from nanobot's config.
    settings: dict[str, Any] = Field(default_factory=dict)
    # The process as this machine's kernel knows it (`process_identity`: boot, pid namespace, start time), so a
    # reader on the same machine tells at once whether it still runs ("": a worker that does not say).
    process: str = ""
    # How it is run ("systemd", "docker", "terminal", "" unknown): where its settings are changed.
    runner: str = ""

    @property
    def worker_id(self) -> str:
        return f"{self.host}:{self.pid}"

    def silent_for(self, now: datetime | None = None) -> float | None:
        """Seconds since the last beat (None: the report has none)."""
        if self.heartbeat_at is None:
            return None
        return max(0.0, ((now or utcnow()) - self.heartbeat_at).total_seconds())

    def stale(self, now: datetime | None = None) -> bool:
        silent = self.silent_for(now)
        return silent is None or silent > STALE_BEATS * self.beat_seconds


# The settings a worker reports (names as in worker.settings.Settings): what changes what it does, and every
# setting the hooks publish too (doctor compares the two sides).
REPORTED_SETTINGS = tuple(
    dict.fromkeys(
        (
            "auto_summary",
            "summary_keep",
            "summary_interval",
            "summary_threshold",
            "summary_idle",
            "summary_idle_keep",
            "summary_cache_ttl",
            "summary_pickup",
            "memory_write",
            "memory_sessions",
            "summary_recall",
            *SHARED_SETTINGS,
        )
    )
)


def settings_report(settings: Any, model: str, job_timeout: float) -> dict[str, Any]:
    """What a worker runs with, as JSON values.

    The settings above (a keep rule as its text, patterns joined by commas), the summary model it resolved (its name
    only, never its key or base URL) and arq's job timeout (which tells how long a job's in-progress mark lives)."""
    chosen = {name: plain_setting(getattr(settings, name)) for name in REPORTED_SETTINGS if hasattr(settings, name)}
    return {**chosen, "summary_model": model, "job_timeout": job_timeout}


def this_worker() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


async def publish(
    redis: ArqRedis,
    settings: dict[str, Any],
    started_at: datetime,
    running: list[str] | None = None,
    beat_seconds: float = BEAT_SECONDS,
    version: str = RELEASE,
    contract: int = CONTRACT,
) -> None:
    """Called by the worker at every heartbeat: its report, rewritten, for another REPORT_SECONDS."""
    host, _, pid = this_worker().rpartition(":")
    report = WorkerReport(
        host=host,
        pid=int(pid),
        started_at=started_at,
        heartbeat_at=utcnow(),
        version=version,
        contract=contract,
        beat_seconds=beat_seconds,
        running=running,
        settings=settings,
        process=process_identity(os.getpid()) or "",
        runner=runner(),
    )
    keys = Keys.of(redis)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.set(keys.worker(report.worker_id), report.model_dump_json(), ex=REPORT_SECONDS)
        index.remember(pipe, keys, "workers", report.worker_id)
        await pipe.execute()


async def withdraw(redis: ArqRedis) -> None:
    """Called by the worker when it stops cleanly: no report left to age into a false alarm."""
    keys = Keys.of(redis)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.delete(keys.worker(this_worker()))
        pipe.srem(keys.index("workers"), this_worker())
        await pipe.execute()


async def reports(redis: ArqRedis) -> list[WorkerReport]:
    """Every report of this namespace, newest beat first; one that cannot be read is skipped."""
    keys = Keys.of(redis)
    ids = await index.members(redis, "workers", keys.worker)
    found = []
    for raw in await redis.mget([keys.worker(worker_id) for worker_id in ids]) if ids else []:
        try:
            found.append(WorkerReport.model_validate_json(raw or b""))
        except ValidationError:
            continue
    oldest = datetime.min.replace(tzinfo=utcnow().tzinfo)
    return sorted(found, key=lambda report: report.heartbeat_at or oldest, reverse=True)


def process_identity(pid: int) -> str | None:
    """A process as the kernel knows it.

    This boot, the process's pid namespace and its start time (Linux's /proc), e.g. "5f0c...:pid:[4026531836]:81234";
    None where it cannot be read (another system, a process gone). Two machines never share a boot id, and a pid reused
    by another process has another start time."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink(f"/proc/{pid}/ns/pid")
        # After the command in parentheses (which may hold spaces): the state first, the start time 20th.
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        state, started = fields[0], fields[19]
    except (OSError, IndexError):
        return None
    return None if state in ("Z", "X") else f"{boot}:{namespace}:{started}"  # a zombie has ended: not reaped yet


def process_gone(report: WorkerReport) -> bool:
    """Whether the worker's process has ended, as seen from this machine.

    Only a report published on this machine, in this pid namespace, can say so (False: it runs, or this machine cannot
    tell)."""
    mine = process_identity(os.getpid())
    if not report.process or mine is None or report.process.rsplit(":", 1)[0] != mine.rsplit(":", 1)[0]:
        return False
    return process_identity(report.pid) != report.process
