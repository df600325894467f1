"""`arq worker.app.WorkerSettings`.

The worker's arq options, read from the environment when arq asks for them (`nanobot-summary run` is the other way in:
worker.commands.run)."""

from __future__ import annotations

from typing import Any

from arq.connections import ArqRedis, RedisSettings
from redis.asyncio.connection import SSLConnection
from redis.asyncio.sentinel import SentinelConnectionPool

from worker.nanobot.config import NanobotConfig
from worker.service.arq_worker import worker_options
from worker.service.build import notes_timezone
from worker.settings import load_settings


def __getattr__(name: str) -> Any:
    # `arq worker.app.WorkerSettings` works too; built on access so importing this module reads no environment.
    if name == "WorkerSettings":
        settings = load_settings()
        nanobot = NanobotConfig.load(settings.config_path)
        options = worker_options(settings.for_workspace(nanobot.workspace), notes_timezone(settings, nanobot))
        return {**options, "redis_settings": check_settings(options["redis_pool"])}
    raise AttributeError(name)


def check_settings(client: ArqRedis) -> RedisSettings:
    """arq's settings for its `--check` (the compose health check), which makes a client of its own from them alone.

    Taken from the worker's client as redis-py read the URL (contract.open_client), not from a second reading."""
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    if isinstance(pool, SentinelConnectionPool):
        sentinels = [
            (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
            for s in pool.sentinel_manager.sentinels
        ]
        return RedisSettings(
            host=sentinels,
            sentinel=True,
            sentinel_master=pool.service_name,
            database=kwargs.get("db", 0),
            username=kwargs.get("username"),
            password=kwargs.get("password"),
        )
    tls = isinstance(pool.connection_class, type) and issubclass(pool.connection_class, SSLConnection)
    return RedisSettings(
        host=kwargs.get("host", "localhost"),
        port=kwargs.get("port", 6379),
        unix_socket_path=kwargs.get("path"),
        database=kwargs.get("db", 0),
        username=kwargs.get("username"),
        password=kwargs.get("password"),
        ssl=tls,
        ssl_ca_certs=kwargs.get("ssl_ca_certs"),
        ssl_certfile=kwargs.get("ssl_certfile"),
        ssl_keyfile=kwargs.get("ssl_keyfile"),
        ssl_cert_reqs=kwargs.get("ssl_cert_reqs") or "required",
        conn_timeout=int(kwargs.get("socket_connect_timeout") or 1),
    )
