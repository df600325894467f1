"""The one environment builder for the processes the tests and benchmarks start (nanobot, the worker, its commands)."""

from __future__ import annotations

import os
from pathlib import Path

from harness.defaults import TEST_DEFAULTS
from harness.sandbox import NanobotHome

RUN_CACHE = "TEST_CACHE_HOME"  # the folder the processes with a home of their own share as XDG_CACHE_HOME


def process_env(
    home: NanobotHome | None = None,
    redis_url: str | None = None,
    *,
    test_defaults: bool = True,
    own_home: bool = True,
    config: bool = False,
    **settings: str,
) -> dict[str, str]:
    """This process's environment without the caller's NANOBOT_* settings or REDIS_URL, so none of them leak
    into the child; then the tests' defaults (`test_defaults`), `redis_url`, and for `home` a HOME folder of its
    own inside it (`own_home`, with the run's cache: RUN_CACHE) and NANOBOT_CONFIG naming its config (`config`);
    `settings` last, over all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_") and k != "REDIS_URL"}
    env.update(NO_COLOR="1", PYTHONUNBUFFERED="1")
    if test_defaults:
        env.update(TEST_DEFAULTS)
    if redis_url is not None:
        env["REDIS_URL"] = redis_url
    if home is not None:
        if own_home:
            user_home = Path(home.root) / "home"
            user_home.mkdir(parents=True, exist_ok=True)
            env["HOME"] = str(user_home)
            # One cache for the whole test run (tests/conftest.py names it): the worker's model checks are worked out
            # once per run, not at every test's worker start (each a litellm import).
            if os.environ.get(RUN_CACHE):
                env["XDG_CACHE_HOME"] = os.environ[RUN_CACHE]
        if config:
            env["NANOBOT_CONFIG"] = str(home.config_path)
    env.update(settings)
    return env
