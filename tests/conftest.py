"""Shared fixtures: a real Redis of this test process's own, the fake LLM server, a nanobot home on disk, and the
worker's settings and deps for them, the real nanobot and its gateway, the Procfile's worker, and the hooks'
integration on a stand-in AgentLoop with its log lines caught; the helpers the tests import live in tests/support."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import hypothesis  # noqa: F401 - see _collected_after
import pytest
from arq.connections import ArqRedis

from harness import forks
from harness.defaults import TEST_KEYS, apply_test_defaults
from harness.environment import RUN_CACHE, process_env
from harness.fakellm import FakeLLM, Reply
from harness.forks import FORKS
from harness.gateway import Gateway, write_config
from harness.models import SUMMARY_MODEL, LLMScript, summarizer, summary_json
from harness.nanobot_cli import find_nanobot
from harness.redis_server import RedisServer, free_port
from harness.sandbox import NanobotHome
from nanobot_hooks import logs
from nanobot_hooks.integration import Integration
from nanobot_hooks.settings import HookSettings
from tests.support.standins import Loop, surface_for
from tests.support.workers import ProcfileWorker
from worker.connections import queue_client
from worker.memory.notes import EMPTY_DIGEST
from worker.service.build import build_deps
from worker.settings import Settings
from worker.summarize.deps import Deps

# Before any worker module reads its settings, and inherited by every process the tests start.
apply_test_defaults()
# The run's one cache folder, made by the first pytest process (pytest-xdist's own inherit it) and removed by it.
_RUN_CACHE_MADE = not os.environ.get(RUN_CACHE)
if _RUN_CACHE_MADE:
    os.environ[RUN_CACHE] = tempfile.mkdtemp(prefix="nanobot-summary-tests-cache-")

# The wheels and the installed worker, built once per run and shared by every test process (project_wheels,
# installed_worker).
pytest_plugins = ["tests.support.built"]


def pytest_unconfigure(config: pytest.Config) -> None:
    if _RUN_CACHE_MADE:
        shutil.rmtree(os.environ[RUN_CACHE], ignore_errors=True)


def pytest_configure(config: pytest.Config) -> None:
    # nanobot's and the worker's commands as forks of a process that imported their libraries once (a fresh process
    # spends most of its CPU importing nanobot or litellm); TEST_FRESH_PROCESSES=1 starts each anew (harness/forks.py).
    FORKS["on"] = True
    # The run's first process, where pytest-xdist starts test processes: its servers, for all of them.
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        forks.share(process_env())
    # pytest-xdist's own marker, named here too for runs without xdist (`-p no:xdist`). Nothing relies on it since
    # pytest 9.2: xdist no longer groups by it (tests/support/built.py shares what several tests build).
    config.addinivalue_line("markers", "xdist_group(name): run in the same test process as the group's other tests")
    config.addinivalue_line(
        "markers",
        "older_release_markers: an older release ran here; its markers of no notes, "
        "which this one notes again, are not checked",
    )


# How long a `slow` test may take (pyproject's default is 60 s for the others); its own timeout mark wins.
SLOW_TIMEOUT = 300
# Modules whose every test is slow (real package builds, pip installs, images), marked here until they carry
# `pytestmark = pytest.mark.slow` themselves: a pip install of the worker's dependencies took 405 s of one full
# run, so they keep the 900 s they need.
SLOW_MODULES = (
    "tests/scenarios/test_packaging.py",
    "tests/scenarios/test_docker.py",
    "tests/scenarios/test_upgrade.py",
)
PACKAGE_TIMEOUT = 900
# A test that starts a real nanobot gateway, the real `nanobot` command or the Procfile's worker process is slow:
# each start imports nanobot or litellm anew (seconds, tens of seconds beside other load).
SLOW_FIXTURES = frozenset({"gateway", "nanobot_exe", "procfile_worker"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slow tests marked (SLOW_MODULES, SLOW_FIXTURES, beside those marked in their files); a slow test gets
    SLOW_TIMEOUT unless it names its own timeout."""
    root = config.rootpath
    for item in items:
        try:
            where = item.path.relative_to(root).as_posix()
        except ValueError:
            where = ""
        if where in SLOW_MODULES and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(PACKAGE_TIMEOUT))
        if where in SLOW_MODULES or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of this test process's own, on a free port: two runs on one machine (two checkouts,
    or `pytest -n 2`, whose every process gets its own) never take each other's jobs or keys.
    TEST_REDIS_URL names an existing one instead (its database is flushed by the tests; under `pytest -n`,
    each test process takes the database after it: gw0 the one named, gw1 the next)."""
    configured = os.environ.get("TEST_REDIS_URL")
    if configured:
        yield database_of_this_process(configured)
        return
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server.url()
    finally:
        server.stop()


def database_of_this_process(url: str) -> str:
    """`url` with its database number moved on by this xdist process's number (none outside xdist)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return url
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0) + int(worker[2:])
    return urlunsplit(parts._replace(path=f"/{database}"))


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[ArqRedis]:
    pool = queue_client(redis_url, TEST_KEYS.queue)
    await pool.flushdb()
    yield pool
    await pool.flushdb()
    await pool.aclose()


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    with FakeLLM() as llm:
        yield llm


# A marker of a span noted without notes: the digest of no text (worker.memory.notes.EMPTY_DIGEST).
_NOTED_WITHOUT_NOTES = f"digest={EMPTY_DIGEST} -->".encode()
_MARKERS_READ_UP_TO = 20_000_000  # bytes of a memory file: the benchmarks' huge days are not read at every test


@pytest.fixture(autouse=True)
def _no_span_noted_without_notes(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every marker a test leaves in a memory folder under its tmp_path is checked: none may mark a span noted whose
    notes were not written (issue 42). Only for the tests that use tmp_path (a nanobot home lives there too)."""
    root: Path | None = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if root is None or request.node.get_closest_marker("older_release_markers"):
        return
    for folder in root.glob("**/memory"):
        for path in [*folder.glob("*.md"), *folder.glob(".*.noted")]:
            try:
                if path.stat().st_size <= _MARKERS_READ_UP_TO:
                    assert _NOTED_WITHOUT_NOTES not in path.read_bytes(), f"{path}: a span marked noted without notes"
            except OSError:
                continue


@pytest.fixture
def nanobot_home(tmp_path: Path, fake_llm: FakeLLM) -> NanobotHome:
    return NanobotHome.create(tmp_path, fake_llm.url)


@pytest.fixture
def settings_for(redis_url: str, nanobot_home: NanobotHome):
    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "redis_url": redis_url,
            "config": nanobot_home.config_path,
            "summary_retry_delay": 0.05,
            "summary_timeout": 10.0,
        }
        values.update(overrides)
        return Settings(**values)

    return make


@pytest.fixture
def deps_for(settings_for):
    def make(**overrides: Any) -> Deps:
        return build_deps(settings_for(**overrides))

    return make


@pytest.fixture
def default_reply(fake_llm: FakeLLM) -> FakeLLM:
    fake_llm.default = Reply(summary_json())
    return fake_llm


@pytest.fixture(scope="session")
def nanobot_exe() -> Path:
    return find_nanobot()


@pytest.fixture
def script(fake_llm: FakeLLM) -> LLMScript:
    responder = LLMScript()
    fake_llm.responder = responder
    return responder


@pytest.fixture
def worker_deps(deps_for, fake_llm: FakeLLM):
    """The real worker's dependencies, summarizing with a model name the fake LLM recognises."""

    def make(**overrides: Any) -> Deps:
        deps = deps_for(**overrides)
        deps.model, deps.fallback = summarizer(fake_llm.url), None
        return deps

    return make


@pytest.fixture
def agent_home(nanobot_home: NanobotHome, fake_llm: FakeLLM) -> NanobotHome:
    write_config(nanobot_home, fake_llm.url)
    return nanobot_home


@pytest.fixture
async def gateway(nanobot_exe, nanobot_home: NanobotHome, fake_llm: FakeLLM, redis_url: str, tmp_path: Path):
    """A factory: `await gateway(**env)` starts one; all are stopped at the end."""
    ws_port = free_port()
    write_config(nanobot_home, fake_llm.url, ws_port)
    started: list[Gateway] = []

    async def start(redis: str = redis_url, **settings: str) -> Gateway:
        env = process_env(nanobot_home, redis, **settings)
        gw = Gateway(nanobot_exe, nanobot_home, env, ws_port, tmp_path / f"gateway-{len(started)}.log", forked=True)
        started.append(gw)
        await gw.start()
        return gw

    yield start
    for gw in started:
        await gw.stop()


@pytest.fixture
def procfile_worker(nanobot_home: NanobotHome, redis_url: str, tmp_path: Path):
    """A factory: `procfile_worker(**env)` starts the Procfile's worker summarizing with `openai/summarizer`
    (the fake LLM tells its calls from nanobot's by that name; write_config routes it there); all are
    stopped at the end."""
    started: list[ProcfileWorker] = []

    def start(**settings: str) -> ProcfileWorker:
        env = process_env(
            nanobot_home,
            redis_url,
            NANOBOT_CONFIG=str(nanobot_home.config_path),
            NANOBOT_SUMMARY_MODEL=f"openai/{SUMMARY_MODEL}",
            **settings,
        )
        worker = ProcfileWorker(env, tmp_path / f"worker-{len(started)}.log")
        started.append(worker)
        worker.start()
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def quiet(monkeypatch):
    """The hooks' warnings, caught in a list instead of logged; their info lines dropped."""
    shown: list[str] = []
    monkeypatch.setattr(logs, "warning", shown.append)
    monkeypatch.setattr(logs, "info", lambda message: None)
    return shown


@pytest.fixture
async def make(redis_url, quiet):
    """A factory: `make(loop, **settings)` installs the hooks' integration on a stand-in AgentLoop (a new one
    when none is given) with this test's Redis; all are uninstalled and closed at the end."""
    made: list[Integration] = []

    def build(loop: Loop | None = None, **settings: Any) -> Integration:
        loop = loop or Loop()
        integration = Integration(surface_for(loop), HookSettings(redis_url=redis_url, **settings))
        integration.install()
        made.append(integration)
        return integration

    yield build
    for integration in made:
        integration.uninstall()
        await integration.close()


@pytest.fixture(autouse=True)
def _collected_after() -> Iterator[None]:
    """What a test leaves to the garbage collector is collected as it ends, so an unclosed connection's
    ResourceWarning (an error, see pyproject's filterwarnings) fails the test that leaked it, not whichever test
    happens to run at the next collection. Everything alive then is frozen: the next test's collection walks only
    what that test made (a whole collection with litellm loaded takes about half a second). Hypothesis is imported
    before any freeze: its plugins' set-up looks for referrers, which gc no longer lists among frozen objects."""
    yield
    gc.collect()
    gc.freeze()
