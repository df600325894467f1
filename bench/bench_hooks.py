"""What the nanobot_hooks integration costs a nanobot turn: each hook on the turn's path, the off-path
enqueue, and whole in-process turns with and without the integration. Prints figures; asserts nothing.

Run it with nanobot's Python (the environment where nanobot-ai and this project are installed):

    .venv-nanobot/bin/python bench/bench_hooks.py [--messages 200] [--redis redis://127.0.0.1:6379/15]

The turn-path figures need no Redis. The enqueue round trip is measured only when --redis answers;
it uses keys of sessions named `bench:*` and removes them afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1: the integration's tasks fail fast and quietly


def conversation(count: int) -> list[dict[str, Any]]:
    moment = datetime(2026, 11, 20, 10, 0, 0)
    rows = []
    for i in range(count // 2):
        rows.append({"role": "user", "content": f"question {i} about the deploy script " * 4,
                     "timestamp": moment.isoformat()})
        moment += timedelta(seconds=30)
        rows.append({"role": "assistant", "content": f"answer {i}: run ./deploy.sh --env prod " * 8,
                     "timestamp": moment.isoformat()})
        moment += timedelta(seconds=30)
    return rows


def per_call(samples_ns: list[int]) -> str:
    samples_us = [s / 1000 for s in samples_ns]
    p99 = statistics.quantiles(samples_us, n=100)[98] if len(samples_us) >= 100 else max(samples_us)
    return f"median {statistics.median(samples_us):8.2f} us   p99 {p99:8.2f} us   (n={len(samples_us)})"


async def timed_async(fn: Callable[[], Awaitable[Any]], n: int) -> list[int]:
    samples = []
    for _ in range(n):
        start = time.perf_counter_ns()
        await fn()
        samples.append(time.perf_counter_ns() - start)
    return samples


def timed(fn: Callable[[], Any], n: int, before: Callable[[], Any] | None = None) -> list[int]:
    samples = []
    for _ in range(n):
        if before is not None:
            before()
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    return samples


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200, help="messages in the benchmark session")
    parser.add_argument("--calls", type=int, default=5000, help="calls per turn-path figure")
    parser.add_argument("--turns", type=int, default=200, help="whole turns per side of the comparison")
    parser.add_argument("--redis", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"),
                        help="a Redis for the off-path enqueue figure (default: %(default)s)")
    args = parser.parse_args()

    try:
        from nanobot.agent.hook import AgentHook, AgentHookContext, AgentTurnHookContext
        from nanobot.agent.loop import AgentLoop
        from nanobot.agent.tools.context import RequestContext, request_context
        from nanobot.bus.queue import MessageBus
        from nanobot.bus.runtime_events import RuntimeEventContext, SessionTurnPersisted, SessionTurnStarted
        from nanobot.providers.base import LLMProvider, LLMResponse, LLMUsage
        from nanobot.session.manager import SessionManager
        from nanobot.utils.llm_runtime import LLMRuntime
    except ImportError as exc:
        print(f"error: run this with nanobot's Python ({exc})", file=sys.stderr)
        return 2

    from nanobot_hooks.contract import METADATA_KEY, SessionMarker, SummaryRecord
    from nanobot_hooks.plugin import installed

    class BenchProvider(LLMProvider):
        """Answers at once, reporting `prompt_tokens`: the turn's cost is nanobot's own plus the hooks'."""

        def __init__(self) -> None:
            super().__init__(provider_name="bench")
            self.prompt_tokens = 1000

        async def chat(self, messages: list[dict[str, Any]], tools: Any = None, model: Any = None,
                       **kwargs: Any) -> LLMResponse:
            total = self.prompt_tokens + 2
            usage = LLMUsage(input_tokens=self.prompt_tokens, output_tokens=2, total_tokens=total, reported_tokens=total)
            return LLMResponse(content="ok", usage=usage)

        def get_default_model(self) -> str:
            return "bench-model"

    from loguru import logger

    logger.remove()  # log lines (ours about the dead Redis below included) would drown the figures
    logger.add(sys.stderr, level="ERROR")
    # The integration reads its settings when nanobot builds the loop; Redis is only used off the turn path.
    os.environ["REDIS_URL"] = DEAD_REDIS
    os.environ.setdefault("NANOBOT_SUMMARY_INTERVAL", "10")
    root = Path(tempfile.mkdtemp(prefix="bench-hooks-"))
    workspace = root / "workspace"
    workspace.mkdir()
    provider = BenchProvider()
    loop = AgentLoop(bus=MessageBus(), provider=provider, workspace=workspace, context_window_tokens=128_000,
                     session_manager=SessionManager(workspace, sessions_root=root / "sessions"))
    integration = installed(loop)
    if integration is None:
        print("error: the integration did not install into this nanobot (see the warning above)", file=sys.stderr)
        return 2
    sessions, triggering = loop.sessions, integration.triggering
    runtime = LLMRuntime.capture(provider, "bench-model", context_window_tokens=128_000)
    n, m = args.calls, args.messages
    print(f"nanobot_hooks cost per turn; session of {m} messages; {n} calls per figure\n")
    print("on the turn's path")

    # 1. after every LLM call
    key = "bench:hooks"
    hook = integration.factory(AgentTurnHookContext(session_key=key))
    bare = AgentHook()
    iteration = AgentHookContext(iteration=0, messages=[], session_key=key,
                                 usage=LLMUsage(input_tokens=50_000, output_tokens=10, total_tokens=50_010,
                                                 reported_tokens=50_010))
    with request_context(RequestContext(channel="cli", chat_id="bench", session_key=key, runtime=runtime)):
        baseline = await timed_async(lambda: bare.after_iteration(iteration), n)
        ours = await timed_async(lambda: hook.after_iteration(iteration), n)
    print(f"  after_iteration, empty AgentHook     {per_call(baseline)}")
    print(f"  after_iteration, ours                {per_call(ours)}")

    # 2. after the turn is saved: the decision
    session = sessions.get_or_create(key)
    session.messages = conversation(m)
    event_ctx = RuntimeEventContext(channel="cli", chat_id="bench", session_key=key)
    persisted = SessionTurnPersisted(context=event_ctx, turn_id="t", sender_id="u")

    def quiet_turn() -> None:
        session.last_archived = m - 4  # two user turns since the last summary, few tokens
        triggering.usage[key] = (1_000, 128_000)

    print(f"  turn saved, nothing to do            {per_call(timed(lambda: triggering.on_turn_persisted(persisted), n, quiet_turn))}")
    spawned: list[Any] = []

    def fire_turn() -> None:
        session.last_archived = 0
        triggering.usage[key] = (90_000, 128_000)

    # Counted up to handing the enqueue to a background task; the task itself is the next section.
    integration.ctx.spawn = spawned.append  # type: ignore[method-assign]
    fired = timed(lambda: triggering.on_turn_persisted(persisted), n, fire_turn)
    del integration.ctx.spawn  # the Context's own spawn again
    for coro in spawned:
        coro.close()
    print(f"  turn saved, trigger fires            {per_call(fired)}")

    # 3. at the start of a turn
    started = SessionTurnStarted(context=event_ctx)

    turn_starts = integration.pickups.on_turn_started  # the integration's one SessionTurnStarted handler
    print(f"  turn starts, nothing pending         {per_call(timed(lambda: turn_starts(started), n))}")
    applies = []
    for i in range(min(200, n)):
        other = f"bench:apply:{i}"
        live = sessions.get_or_create(other)
        live.messages = conversation(m)
        record = SummaryRecord(session_key=other, summary="rolling summary " * 50, start=0, boundary=m - 10,
                               boundary_timestamp=live.messages[m - 11]["timestamp"], messages_before=m,
                               messages_after=11, tokens_before=20_000, tokens_after=3_000)
        live.metadata[METADATA_KEY] = SessionMarker.pending_entry(record)
        event = SessionTurnStarted(context=RuntimeEventContext(channel="cli", chat_id="bench", session_key=other))
        start = time.perf_counter_ns()
        turn_starts(event)
        applies.append(time.perf_counter_ns() - start)
    print(f"  turn starts, applies a summary       {per_call(applies)}   (once per summary; includes nanobot's save)")
    await asyncio.sleep(0)
    await asyncio.gather(*list(getattr(loop, "_background_tasks", ())), return_exceptions=True)

    # 4. off the turn's path: the enqueue task against a real Redis
    print("\noff the turn's path (a background task; the turn does not wait for it)")
    integration.ctx.link.url = args.redis
    integration.ctx.link._client = None
    probe = await integration.ctx.link.call("probing", lambda c: c.ping())
    if not probe:
        print(f"  enqueue round trip                   skipped: {args.redis} does not answer")
    else:
        keys = [f"bench:enqueue:{i}" for i in range(200)]
        samples = []
        for k in keys:
            start = time.perf_counter_ns()
            await triggering.enqueue(k, "tokens", 90_000, 128_000)
            samples.append(time.perf_counter_ns() - start)
        client = integration.ctx.link.client()
        names = integration.settings.keys
        await client.zrem(names.queue, *[names.job_id(k) for k in keys])
        await client.delete(*[f"arq:job:{names.job_id(k)}" for k in keys], *[names.record(k) for k in keys])
        print(f"  EXISTS + enqueue_job (single flight) {per_call(samples)}")
    integration.ctx.link.url = DEAD_REDIS
    integration.ctx.link._client = None

    # 5. whole turns, in process, with and without the integration
    print(f"\nwhole turns in process (nanobot + an instant fake provider), {args.turns} per side, interleaved")
    provider.prompt_tokens = 1_000  # under the threshold: the usual turn
    timings: dict[str, list[float]] = {"with": [], "without": []}
    block = max(1, args.turns // 10)
    for round_number in range(10):
        for side in ("with", "without") if round_number % 2 == 0 else ("without", "with"):
            if side == "without":
                integration.uninstall()
            else:
                integration.install()
            for i in range(block):
                start = time.perf_counter()
                await loop.process_direct(f"turn {i}", session_key=f"bench:turns:{side}")
                timings[side].append((time.perf_counter() - start) * 1000)
            integration.uninstall()
    integration.install()
    for side, values in timings.items():
        print(f"  {side:<8} the integration         median {statistics.median(values):7.3f} ms per turn "
              f"(n={len(values)})")
    delta = statistics.median(timings["with"]) - statistics.median(timings["without"])
    print(f"  difference of medians                {delta * 1000:+8.1f} us (within the noise of a whole turn;"
          " the figures above are the hooks' own cost)")
    await loop.aclose()
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
