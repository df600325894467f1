"""`nanobot-summary acl`: the instance's Redis user, as a line a real redis-server accepts and that confines it."""

from __future__ import annotations

import pytest
import redis as sync_redis
from redis.exceptions import NoPermissionError

from harness.defaults import TEST_KEYS
from harness.environment import process_env
from harness.redis_server import RedisServer
from nanobot_hooks.contract.keys import Keys, default_namespace
from tests.support.commands import run_in_process
from worker.commands.acl import acl_line
from worker.connections import redis_problem


def test_acl_prints_the_instances_user_which_redis_accepts_and_which_reaches_only_its_names(
    nanobot_home, redis_url, capsys, tmp_path
) -> None:
    env = process_env(nanobot_home, redis_url, config=True)
    del env["NANOBOT_SUMMARY_NAMESPACE"]  # derived from nanobot's workspace id, as by default
    namespace = default_namespace((nanobot_home.workspace / ".nanobot" / "workspace-id").read_text().strip())
    result = run_in_process(capsys, "acl", env=env)
    assert result.returncode == 0, result.stderr
    line = result.stdout.splitlines()[-1]
    assert line == " ".join(["user", f"nanobot-{namespace}", "on", ">PASSWORD", *Keys(namespace).acl_rules()])
    named = run_in_process(capsys, "acl", "--user", "alice", env=env).stdout.splitlines()[-1]
    assert named.startswith("user alice on >PASSWORD resetkeys ")

    # The line as the operator uses it: in redis.conf, the placeholder replaced.
    server = RedisServer(tmp_path / "redis", [line.replace(">PASSWORD", ">pw-1")]).start()
    try:
        with sync_redis.Redis(port=server.port, username=f"nanobot-{namespace}", password="pw-1") as client:
            mine = Keys(namespace)
            client.set(mine.record("telegram:1"), "x")
            client.set(f"arq:job:{mine.job_id('telegram:1')}", "x")
            for refused in (
                lambda: client.get(Keys("other").record("telegram:1")),
                lambda: client.scan(0),
                lambda: client.get(f"arq:job:{Keys('other').job_id('telegram:1')}"),
            ):
                with pytest.raises(NoPermissionError):
                    refused()
    finally:
        server.stop()


def test_a_user_of_another_instance_is_refused_at_start_with_advice_that_never_widens_it(
    nanobot_home, capsys, tmp_path
) -> None:
    """The start-up check reads the instance's own probe key: the instance's user passes it, another instance's
    user is refused in one line that points to `nanobot-summary acl`, never to rules reaching every instance."""
    mine, other = TEST_KEYS, Keys("another")
    server = RedisServer(
        tmp_path / "redis",
        [
            "user default off",
            acl_line("mine", mine.acl_rules()).replace(">PASSWORD", ">pw-1"),
            acl_line("other", other.acl_rules()).replace(">PASSWORD", ">pw-2"),
        ],
    ).start()
    try:
        assert redis_problem(server.url("mine:pw-1"), keys=mine) is None
        refused = run_in_process(capsys, "status", env=process_env(nanobot_home, server.url("other:pw-2"), config=True))
        assert refused.returncode == 2 and "nanobot-summary acl" in refused.stderr, refused.stderr
        assert "~nanobot-summary:*" not in refused.stderr and "~arq:*" not in refused.stderr
        assert "pw-2" not in refused.stderr
    finally:
        server.stop()
