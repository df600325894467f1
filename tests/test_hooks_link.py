"""The Redis link's manners inside nanobot: rate-limited warnings, no password in logs, no exception out."""

from __future__ import annotations

import pytest

from nanobot_hooks import logs
from nanobot_hooks.link import RedisLink
from nanobot_hooks.settings import redacted_url

from tests.support.redis_server import free_port


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


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://h:6379/0?password=s3cret", "redis://h:6379/0?password=***"),
    ("unix:///tmp/r.sock?password=x&db=2", "unix:///tmp/r.sock?password=***&db=2"),
    ("redis://:s3cret@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
    ("redis://[fe80::1]:6380/3", "redis://[fe80::1]:6380/3"),
    ("rediss://bob:pw@h:6380/1?ssl_cert_reqs=none&PASSWORD=pw", "rediss://bob:***@h:6380/1?ssl_cert_reqs=none&PASSWORD=***"),
])
def test_query_passwords_are_masked_and_hosts_kept_as_written(url, shown):
    assert redacted_url(url) == shown


def test_a_url_that_cannot_be_parsed_is_not_logged():
    assert "s3cret" not in redacted_url("redis://:s3cret@[::1/0")
