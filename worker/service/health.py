"""The container's health check: does a worker of this instance beat? `python -m worker.service.health`.

Reads arq's health-check key of this instance's queue (a live worker rewrites it every 30 s; it expires 1 s later)
with redis-py, as `arq worker.app.WorkerSettings --check` does, without importing the worker's app: that loads
litellm, seconds of CPU, longer than a health check's timeout on a busy machine. Only the settings (pydantic) and a
Redis client are loaded; tests/worker/service/test_health.py checks that nothing heavier is.

Exit 0 with arq's health line; 1 with one line saying why not (no beat, Redis silent, settings unusable)."""

from __future__ import annotations

import sys
from typing import cast

from arq.constants import health_check_key_suffix
from redis.exceptions import RedisError

from nanobot_hooks.contract.client import sync_client
from nanobot_hooks.contract.redis_url import redacted_url
from nanobot_hooks.settings import SettingsError
from worker.errors import WorkerError
from worker.settings import load_instance_settings

# Seconds for the one GET: a health check answers well inside its timeout (the compose files give it 10 s).
TIMEOUT = 3.0


def verdict(line: str | None, queue: str) -> tuple[int, str]:
    """The exit status and the line printed for arq's health line of `queue` (None: no worker wrote one lately)."""
    if line is None:
        return 1, f"unhealthy: no worker of queue {queue} reported in the last 31 s (arq's health-check key is absent)"
    return 0, f"healthy: {line}"


def main() -> int:
    try:
        settings = load_instance_settings()
    except (SettingsError, WorkerError) as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    queue = settings.keys.queue
    client = sync_client(settings.redis_url, TIMEOUT, **settings.redis_options())
    try:
        raw = cast("bytes | None", client.get(queue + health_check_key_suffix))  # redis-py's sync client
    except RedisError as exc:
        print(f"unhealthy: Redis at {redacted_url(settings.redis_url)} does not answer: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    status, text = verdict(raw.decode() if raw is not None else None, queue)
    print(text, file=sys.stdout if status == 0 else sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
