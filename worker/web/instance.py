"""What the web page reads.

This instance's settings, nanobot's sessions folder, the memory files, and a Redis client bound to the instance's
namespace (so no other instance's keys are ever read)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TypeVar
from zoneinfo import ZoneInfo

from arq.connections import ArqRedis
from redis.exceptions import RedisError

from nanobot_hooks.contract.client import close_client
from nanobot_hooks.contract.redis_url import redacted_url
from worker.connections import open_pool, redact_secrets, redis_problem
from worker.memory.writer import MemoryFiles
from worker.nanobot.config import NanobotConfig
from worker.settings import Settings, load_settings
from worker.text.clock import zone_or_utc

log = logging.getLogger("worker.web")
T = TypeVar("T")
PROBE_SECONDS = 1.0  # a Redis that does not answer PING within this is down, for the page


@dataclass
class Instance:
    """One nanobot instance as the page sees it.

    `client()` opens Redis when first needed and again after it failed, so the memory and recall pages work while Redis
    is down."""

    settings: Settings
    sessions_dir: Path
    memory: MemoryFiles
    tz: ZoneInfo
    redis: ArqRedis | None = None
    redis_problem: str | None = field(default=None)

    @classmethod
    def load(cls, settings: Settings | None = None) -> Instance:
        """From the environment (NANOBOT_CONFIG, REDIS_URL, ...), as the worker reads it.

        Raises SettingsError or NanobotConfigError with a readable line."""
        settings = settings or load_settings()
        nanobot = NanobotConfig.load(settings.config_path)
        settings = settings.for_workspace(nanobot.workspace)  # this instance's namespace and keys
        tz = zone_or_utc(settings.summary_timezone or nanobot.timezone)
        memory = MemoryFiles(settings.summary_workspace or nanobot.workspace, tz.key, settings.memory_max_facts)
        return cls(settings, nanobot.sessions_dir, memory, tz)

    @property
    def redis_shown(self) -> str:
        """The Redis URL as pages may show it: no password."""
        return redacted_url(self.settings.redis_url)

    @property
    def workspace(self) -> Path:
        return self.memory.workspace

    def today(self) -> str:
        return datetime.now(self.tz).date().isoformat()

    async def client(self) -> ArqRedis | None:
        """The Redis client, or None with `redis_problem` saying why (a line with no secret in it)."""
        if self.redis is not None:
            return self.redis
        # A quick probe first: arq's pool retries a refused connection for seconds, and a page must not wait.
        settings = self.settings
        problem = await asyncio.to_thread(
            redis_problem, settings.redis_url, PROBE_SECONDS, keys=settings.keys, **settings.redis_options()
        )
        try:
            if problem is None:
                self.redis = await open_pool(settings)
        except (RedisError, OSError, ValueError) as exc:  # a failure to connect is shown on the page, not raised
            problem = redact_secrets(f"{type(exc).__name__}: {exc}")[:300]
        self.redis_problem = problem
        if problem is not None:
            log.warning("%s", problem)
        return self.redis

    async def close(self) -> None:
        if self.redis is not None:
            await close_client(self.redis)
            self.redis = None

    async def read(self, reading: Callable[[ArqRedis], Awaitable[T]]) -> tuple[T | None, str | None]:
        """What `reading` found in Redis, or None and why not (a line with no secret in it).

        A client that failed is closed, and opened again at the next page."""
        redis = await self.client()
        if redis is None:
            return None, self.redis_problem
        try:
            return await reading(redis), None
        except (RedisError, OSError) as exc:
            await self.close()
            return None, redact_secrets(f"{type(exc).__name__}: {exc}")[:300]
