"""The version handshake in a real nanobot gateway (the real nanobot-ai, real Redis, the fake LLM): a live worker of
another contract is said in one line of the gateway's log, with the command that fixes it, and the gateway
answers its turns meanwhile; its hooks' record names their own versions."""

from __future__ import annotations

import json

from harness.defaults import TEST_KEYS
from nanobot_hooks.contract.records import utcnow
from nanobot_hooks.contract.version import CONTRACT, RELEASE
from tests.support.crossing import CHAT
from tests.support.waiting import wait_until
from worker.state.workers import publish, this_worker


async def test_the_gateway_says_a_worker_of_another_contract_once_and_answers_meanwhile(gateway, redis) -> None:
    # A newer worker, beating now, and the last to write arq's health line (which names its writer).
    await publish(redis, {}, utcnow(), version="9.0.0", contract=CONTRACT + 1)
    await redis.set(TEST_KEYS.queue + ":health-check", f"Nov-29 02:00:00 j_complete=0 worker={this_worker()}")
    gw = await gateway()
    reply = await gw.say(CHAT, "hello")
    await wait_until(lambda: "version mismatch" in gw.log(), 30, "the mismatch in the gateway's log")
    assert reply, "the turn is answered"
    [line] = [line for line in gw.log().splitlines() if "version mismatch" in line]
    assert (
        "WARNING" in line
        and f"nanobot's hooks {RELEASE} (contract {CONTRACT}) and the worker 9.0.0 "
        f"(contract {CONTRACT + 1}) speak different contracts"
        in line
    ), line
    assert line.endswith("fix: nanobot-summary hooks install, then restart nanobot"), line
    [key] = await redis.keys(f"{TEST_KEYS.hooks_prefix}*")
    published = json.loads(await redis.get(key))
    assert published["version"] == RELEASE and published["contract"] == CONTRACT, published
