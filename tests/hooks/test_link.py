"""The Redis link's manners inside nanobot: rate-limited warnings, no password in logs, no exception out, and no
thread of nanobot's taken by the Redis host's name."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from harness.defaults import TEST_KEYS
from harness.redis_server import SERVICE, Certificates, RedisServer, SentinelSetup, free_port
from nanobot_hooks import link as link_module
from nanobot_hooks import logs
from nanobot_hooks.contract.queue import enqueue_idle_check
from nanobot_hooks.contract.redis_url import redacted_url
from nanobot_hooks.integration import Integration
from nanobot_hooks.link import RedisLink
from nanobot_hooks.settings import HookSettings
from nanobot_hooks.turn.listener import listen
from tests.support.standins import Loop, surface_for
from tests.support.waiting import wait_until


def test_one_warning_a_minute_per_kind_of_trouble(monkeypatch):
    shown: list[str] = []
    monkeypatch.setattr(logs, "warning", shown.append)
    throttle = logs.Throttle(every=60.0)
    assert throttle.warning("redis", "down", now=0.0)
    assert not throttle.warning("redis", "down", now=30.0)
    assert not throttle.warning("redis", "down", now=59.9)
    assert throttle.warning("other", "other trouble", now=59.9)
    assert throttle.warning("redis", "down", now=61.0)
    assert shown == ["down", "other trouble", "down (2 similar lines suppressed)"]
    assert throttle.recovered("redis") and not throttle.recovered("redis")


def test_passwords_never_reach_the_log():
    assert redacted_url("redis://:s3cret@10.0.0.5:6380/2") == "redis://:***@10.0.0.5:6380/2"
    assert redacted_url("redis://bob:s3cret@host/0") == "redis://bob:***@host/0"
    assert redacted_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


async def test_a_dead_redis_returns_none_and_warns_once(monkeypatch):
    shown: list[str] = []
    monkeypatch.setattr(logs, "warning", shown.append)
    link = RedisLink(f"redis://:pw@127.0.0.1:{free_port()}/0", logs.Throttle(every=60.0), timeout=0.5)
    for _ in range(3):
        assert await link.call("testing", lambda client: client.ping()) is None
    assert len(shown) == 1 and "failed while testing" in shown[0] and ":pw@" not in shown[0]


async def test_a_live_redis_answers_and_recovery_is_noted(monkeypatch, redis_url):
    notes: list[str] = []
    monkeypatch.setattr(logs, "info", notes.append)
    link = RedisLink(redis_url, logs.Throttle(every=60.0))
    link.throttle.warning("redis", "pretend it was down")
    assert await link.call("pinging", lambda client: client.ping()) is True
    assert notes and "answers again" in notes[0]
    await link.close()


@pytest.mark.parametrize("bad", [ValueError("bad reply"), KeyError("x")])
async def test_any_error_in_the_work_is_contained(monkeypatch, redis_url, bad):
    monkeypatch.setattr(logs, "warning", lambda message: None)
    link = RedisLink(redis_url, logs.Throttle(every=60.0))

    async def work(client):
        raise bad

    assert await link.call("working", work) is None
    await link.close()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://h:6379/0?password=s3cret", "redis://h:6379/0?password=***"),
        ("unix:///tmp/r.sock?password=x&db=2", "unix:///tmp/r.sock?password=***&db=2"),
        ("redis://:s3cret@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
        ("redis://[fe80::1]:6380/3", "redis://[fe80::1]:6380/3"),
        (
            "rediss://bob:pw@h:6380/1?ssl_cert_reqs=none&PASSWORD=pw",
            "rediss://bob:***@h:6380/1?ssl_cert_reqs=none&PASSWORD=***",
        ),
    ],
)
def test_query_passwords_are_masked_and_hosts_kept_as_written(url, shown):
    assert redacted_url(url) == shown


def test_a_url_that_cannot_be_parsed_is_not_logged():
    assert "s3cret" not in redacted_url("redis://:s3cret@[::1/0")


HUNG = "redis.hung.invalid"  # a Redis host whose DNS never answers, simulated in this process for this name only


@pytest.fixture
def looked_up(monkeypatch) -> Iterator[list[str]]:
    """socket.getaddrinfo, as asyncio's pool and our resolver call it, hung for HUNG (until the test ends) and
    counted for every name; the hooks' resolver new, with nothing kept from an earlier test."""
    monkeypatch.setattr(link_module, "RESOLVER", link_module.Resolver())
    names: list[str] = []
    release = threading.Event()
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        names.append(host)
        if host == HUNG:
            release.wait(60)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield names
    release.set()


async def test_a_hung_resolver_never_ties_up_the_thread_pool_nanobot_needs(monkeypatch, looked_up) -> None:
    """asyncio looks names up in its default thread pool, which nanobot's LLM client needs for its provider's
    name; the hooks' bound cancelled the wait but not the look-up, so each turn's call held one more thread and
    nanobot's next turn waited for the pool. Turns keep calling here; a quick job of the pool still runs at once,
    one look-up in all is made, and once it ran past the bound the calls fail at once."""
    monkeypatch.setattr(logs, "warning", lambda message: None)
    link = RedisLink(f"redis://{HUNG}:6379/0", logs.Throttle(every=60.0), timeout=0.5, keys=TEST_KEYS)
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=4)  # asyncio's own has min(32, CPUs + 4) threads
    loop.set_default_executor(pool)
    for _ in range(6):  # six turns, each queueing its session's idle check
        assert await link.call("queueing", lambda c: enqueue_idle_check(c, "telegram:42", 60.0)) is None
    # Every thread of the pool is free for nanobot: four jobs meet at a barrier, which a thread held by a look-up
    # would leave broken (a count, not a time: it holds however busy the machine is).
    meeting = threading.Barrier(4, timeout=30)
    met = await asyncio.gather(*(loop.run_in_executor(None, meeting.wait) for _ in range(4)), return_exceptions=True)
    assert not [m for m in met if isinstance(m, BaseException)], "asyncio's default pool is free for nanobot"
    started = time.monotonic()
    for _ in range(10):  # later turns, the look-up still hung: no wait, no new look-up
        assert await link.call("queueing", lambda c: enqueue_idle_check(c, "telegram:42", 60.0)) is None
    # A call that waited would wait out its 0.5 s bound: ten such take 5 s. Half that leaves a busy machine room
    # for ten calls that fail at once (they make no connection).
    assert time.monotonic() - started < 2.5, "the calls did not wait for the hung look-up"
    assert looked_up.count(HUNG) == 1, "one look-up of the name, in a thread of the hooks' own"
    await link.close()
    pool.shutdown(wait=False, cancel_futures=True)


async def test_the_redis_hosts_address_is_looked_up_once_and_kept(looked_up, redis, redis_url, tmp_path) -> None:
    """By the listener, plain and over TLS (where the host's name is still the one the certificate is checked
    against)."""
    # The listener, connecting before any call did, looks the name up itself.
    link = RedisLink(f"redis://localhost:{urlsplit(redis_url).port}/0", logs.Throttle(every=60.0), keys=TEST_KEYS)
    heard: list[str] = []
    listening = asyncio.create_task(listen(link, heard.append))
    try:
        deadline = time.monotonic() + 30
        while not heard and time.monotonic() < deadline:
            await redis.publish(TEST_KEYS.notice_channel, "telegram:42")
            await asyncio.sleep(0.1)
        assert heard and heard[0] == "telegram:42"
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
        await link.close()
    certificates = Certificates.make(tmp_path / "certs")
    server = RedisServer(tmp_path / "redis", tls=certificates).start()
    try:
        tls = (f"rediss://localhost:{server.port}/0?ssl_check_hostname=true", {"ssl_ca_certs": str(certificates.ca)})
        for url, options in [(f"redis://localhost:{urlsplit(redis_url).port}/0", {}), tls]:
            link = RedisLink(url, logs.Throttle(every=60.0), options=options, keys=TEST_KEYS)
            for _ in range(3):  # a new connection each time (as after a failure, or in `nanobot agent`'s next loop)
                assert await link.call("pinging", lambda client: client.ping()) is True
                await link.close()
    finally:
        server.stop()
    assert looked_up.count("localhost") == 1, "looked up once"


async def test_behind_sentinel_no_name_is_looked_up_in_asyncios_pool(monkeypatch, looked_up, tmp_path) -> None:
    """A Sentinel URL names Sentinels, and the Sentinels may name the primary by host name: each of those names is
    looked up in the hooks' own thread too. The first Sentinel's name hangs; the calls go on through the second,
    at once, with one look-up of the hung name in all."""
    monkeypatch.setattr(logs, "warning", lambda message: None)
    threads: list[str] = []
    counted = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        threads.append(threading.current_thread().name)
        return counted(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="asyncio-default")
    loop.set_default_executor(pool)
    ha = SentinelSetup(tmp_path / "ha", "s3cret-ha-pw", primary_host="localhost").start()
    try:
        url = f"redis+sentinel://:s3cret-ha-pw@{HUNG}:26379,localhost:{ha.sentinel.port}/{SERVICE}/0"
        # A bound a busy machine cannot break; the hung name answers in none: a call that waited for it would
        # wait out the bound and fail, one that tried it first for a while would take a good part of it.
        link = RedisLink(url, logs.Throttle(every=60.0), timeout=10.0, keys=TEST_KEYS)
        for _ in range(4):  # a new connection each time: the Sentinels asked, the primary reached by its name
            started = time.monotonic()
            assert await link.call("pinging", lambda client: client.ping()) is True
            assert time.monotonic() - started < 5.0, "no wait for the Sentinel whose name hangs"
            await link.close()
    finally:
        ha.stop()
        pool.shutdown(wait=False, cancel_futures=True)
    assert not [name for name in threads if name.startswith("asyncio-default")], "asyncio's pool looked up no name"
    assert looked_up.count(HUNG) == 1 and "localhost" in looked_up


async def test_the_look_up_starts_as_nanobot_sets_up_so_a_hung_name_is_not_waited_out_later(quiet, looked_up) -> None:
    """`nanobot agent -m` makes one call after its turn, then waits for it before it exits: a look-up begun at that
    call made it wait out the whole bound. Begun as nanobot sets the hooks up, it is past the bound by then (a
    turn takes longer than 0.5 s), so the call fails at once and nanobot exits."""
    integration = Integration(surface_for(Loop()), HookSettings(redis_url=f"redis://:pw@{HUNG}:6379/0"))
    integration.install()
    integration.ctx.link.timeout = 2.0
    await wait_until(lambda: HUNG in looked_up, 5.0, "the look-up begun by the set-up")
    await asyncio.sleep(2.1)  # nanobot's turn, longer than the bound (a time that must pass, not a wait for an event)
    started = time.monotonic()
    assert await integration.ctx.link.call("queueing", lambda c: enqueue_idle_check(c, "cli:direct", 60.0)) is None
    # A call that waited would wait out its whole 2 s bound; one that does not fails at once (half the bound is
    # room enough for a busy machine).
    assert time.monotonic() - started < 1.0, "the call did not wait for the hung look-up"
    # Behind Sentinel each Sentinel's name; an address or a Unix socket needs none.
    for url in (
        "redis+sentinel://other.invalid:26379,10.0.0.9:26379/mymaster/0",
        "redis://127.0.0.1:6399/0",
        "unix:///run/redis.sock?db=0",
    ):
        RedisLink(url, logs.Throttle(every=60.0)).look_up_soon()
    await wait_until(lambda: "other.invalid" in looked_up, 5.0, "the Sentinel's name looked up")
    assert looked_up.count(HUNG) == 1 and not {"10.0.0.9", "127.0.0.1", "/run/redis.sock"} & set(looked_up)
    integration.uninstall()
    await integration.close()
