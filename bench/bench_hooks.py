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
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nanobot_hooks.integration import Integration

DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1: the integration's tasks fail fast and quietly
KEY = "bench:hooks"  # the session of the turn-path figures


def conversation(count: int) -> list[dict[str, Any]]:
    moment = datetime(2026, 11, 20, 10, 0, 0)
    rows = []
    for i in range(count // 2):
        rows.append(
            {"role": "user", "content": f"question {i} about the deploy script " * 4, "timestamp": moment.isoformat()}
        )
        moment += timedelta(seconds=30)
        rows.append(
            {
                "role": "assistant",
                "content": f"answer {i}: run ./deploy.sh --env prod " * 8,
                "timestamp": moment.isoformat(),
            }
        )
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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200, help="messages in the benchmark session")
    parser.add_argument("--calls", type=int, default=5000, help="calls per turn-path figure")
    parser.add_argument("--turns", type=int, default=200, help="whole turns per side of the comparison")
    parser.add_argument(
        "--redis",
        default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"),
        help="a Redis for the off-path enqueue figure (default: %(default)s)",
    )
    return parser.parse_args()


def nanobot_missing() -> str | None:
    """Why nanobot's parts this benchmark uses cannot be imported here (None when they can)."""
    try:
        from nanobot.agent.hook import AgentHook, AgentHookContext, AgentTurnHookContext  # noqa: F401
        from nanobot.agent.loop import AgentLoop  # noqa: F401
        from nanobot.agent.tools.context import RequestContext, request_context  # noqa: F401
        from nanobot.bus.queue import MessageBus  # noqa: F401
        from nanobot.bus.runtime_events import RuntimeEventContext, SessionTurnPersisted, SessionTurnStarted  # noqa: F401
        from nanobot.providers.base import LLMProvider, LLMResponse, LLMUsage  # noqa: F401
        from nanobot.session.manager import SessionManager  # noqa: F401
        from nanobot.utils.llm_runtime import LLMRuntime  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def bench_provider() -> Any:
    """A nanobot provider that answers at once (its class derives from nanobot's, so it is made here)."""
    from nanobot.providers.base import LLMProvider, LLMResponse, LLMUsage

    class BenchProvider(LLMProvider):
        """Answers at once, reporting `prompt_tokens`: the turn's cost is nanobot's own plus the hooks'."""

        def __init__(self) -> None:
            super().__init__(provider_name="bench")
            self.prompt_tokens = 1000

        async def chat(
            self, messages: list[dict[str, Any]], tools: Any = None, model: Any = None, **kwargs: Any
        ) -> LLMResponse:
            total = self.prompt_tokens + 2
            usage = LLMUsage(
                input_tokens=self.prompt_tokens, output_tokens=2, total_tokens=total, reported_tokens=total
            )
            return LLMResponse(content="ok", usage=usage)

        def get_default_model(self) -> str:
            return "bench-model"

    return BenchProvider()


@dataclass
class Bench:
    """One run: nanobot's loop with the integration installed in a temporary folder, and the figures' sizes."""

    root: Path  # the temporary folder (workspace and sessions), removed at the end
    loop: Any  # nanobot's AgentLoop
    integration: Integration
    provider: Any  # the BenchProvider: its prompt_tokens is what every turn reports
    runtime: Any  # nanobot's LLMRuntime of the requests timed
    calls: int  # calls per turn-path figure
    messages: int  # messages in the benchmark session


def start_loop(args: argparse.Namespace) -> Bench | None:
    """nanobot's AgentLoop with the integration installed (None, said on stderr, when it did not install)."""
    from loguru import logger
    from nanobot.agent.loop import AgentLoop
    from nanobot.bus.queue import MessageBus
    from nanobot.session.manager import SessionManager
    from nanobot.utils.llm_runtime import LLMRuntime

    from nanobot_hooks.plugin import installed

    logger.remove()  # log lines (ours about the dead Redis below included) would drown the figures
    logger.add(sys.stderr, level="ERROR")
    # The integration reads its settings when nanobot builds the loop; Redis is only used off the turn path.
    os.environ["REDIS_URL"] = DEAD_REDIS
    os.environ.setdefault("NANOBOT_SUMMARY_INTERVAL", "10")
    root = Path(tempfile.mkdtemp(prefix="bench-hooks-"))
    workspace = root / "workspace"
    workspace.mkdir()
    provider = bench_provider()
    loop = AgentLoop(
        bus=MessageBus(),
        provider=provider,
        workspace=workspace,
        context_window_tokens=128_000,
        session_manager=SessionManager(workspace, sessions_root=root / "sessions"),
    )
    integration = installed(loop)
    if integration is None:
        print("error: the integration did not install into this nanobot (see the warning above)", file=sys.stderr)
        return None
    runtime = LLMRuntime.capture(provider, "bench-model", context_window_tokens=128_000)
    return Bench(root, loop, integration, provider, runtime, args.calls, args.messages)


async def after_iteration(bench: Bench) -> None:
    """1. After every LLM call: nanobot's empty hook, then ours."""
    from nanobot.agent.hook import AgentHook, AgentHookContext, AgentTurnHookContext
    from nanobot.agent.tools.context import RequestContext, request_context
    from nanobot.providers.base import LLMUsage

    assert bench.integration.factory is not None
    hook = bench.integration.factory(AgentTurnHookContext(session_key=KEY))
    bare = AgentHook()
    iteration = AgentHookContext(
        iteration=0,
        messages=[],
        session_key=KEY,
        usage=LLMUsage(input_tokens=50_000, output_tokens=10, total_tokens=50_010, reported_tokens=50_010),
    )
    with request_context(RequestContext(channel="cli", chat_id="bench", session_key=KEY, runtime=bench.runtime)):
        baseline = await timed_async(lambda: bare.after_iteration(iteration), bench.calls)
        ours = await timed_async(lambda: hook.after_iteration(iteration), bench.calls)
    print(f"  after_iteration, empty AgentHook     {per_call(baseline)}")
    print(f"  after_iteration, ours                {per_call(ours)}")


def turn_saved(bench: Bench) -> None:
    """2. After the turn is saved: the decision, with nothing to do and when the trigger fires."""
    from nanobot.bus.runtime_events import RuntimeEventContext, SessionTurnPersisted

    n, m = bench.calls, bench.messages
    triggering = bench.integration.triggering
    session = bench.loop.sessions.get_or_create(KEY)
    session.messages = conversation(m)
    event_ctx = RuntimeEventContext(channel="cli", chat_id="bench", session_key=KEY)
    persisted = SessionTurnPersisted(context=event_ctx, turn_id="t", sender_id="u")

    def quiet_turn() -> None:
        session.last_archived = m - 4  # two user turns since the last summary, few tokens
        triggering.usage[KEY] = (1_000, 128_000)

    saved = per_call(timed(lambda: triggering.on_turn_persisted(persisted), n, quiet_turn))
    print(f"  turn saved, nothing to do            {saved}")
    spawned: list[Any] = []

    def fire_turn() -> None:
        session.last_archived = 0
        triggering.usage[KEY] = (90_000, 128_000)

    # Counted up to handing the enqueue to a background task; the task itself is the next section.
    bench.integration.ctx.spawn = spawned.append  # type: ignore[method-assign]
    fired = timed(lambda: triggering.on_turn_persisted(persisted), n, fire_turn)
    del bench.integration.ctx.spawn  # the Context's own spawn again
    for coro in spawned:
        coro.close()
    print(f"  turn saved, trigger fires            {per_call(fired)}")


def pending_summary(bench: Bench, number: int) -> Any:
    """A session of its own with a finished summary waiting for nanobot; returns the start of its next turn."""
    from nanobot.bus.runtime_events import RuntimeEventContext, SessionTurnStarted

    from nanobot_hooks.contract.marker import METADATA_KEY, SessionMarker
    from nanobot_hooks.contract.records import SummaryRecord

    m = bench.messages
    other = f"bench:apply:{number}"
    live = bench.loop.sessions.get_or_create(other)
    live.messages = conversation(m)
    record = SummaryRecord(
        session_key=other,
        summary="rolling summary " * 50,
        start=0,
        boundary=m - 10,
        boundary_timestamp=live.messages[m - 11]["timestamp"],
        messages_before=m,
        messages_after=11,
        tokens_before=20_000,
        tokens_after=3_000,
    )
    live.metadata[METADATA_KEY] = SessionMarker.pending_entry(record)
    return SessionTurnStarted(context=RuntimeEventContext(channel="cli", chat_id="bench", session_key=other))


async def turn_starts(bench: Bench) -> None:
    """3. At the start of a turn: nothing pending, and a pending summary applied."""
    from nanobot.bus.runtime_events import RuntimeEventContext, SessionTurnStarted

    started = SessionTurnStarted(context=RuntimeEventContext(channel="cli", chat_id="bench", session_key=KEY))
    turn_starts = bench.integration.pickups.on_turn_started  # the integration's one SessionTurnStarted handler
    print(f"  turn starts, nothing pending         {per_call(timed(lambda: turn_starts(started), bench.calls))}")
    applies = []
    for i in range(min(200, bench.calls)):
        event = pending_summary(bench, i)
        start = time.perf_counter_ns()
        turn_starts(event)
        applies.append(time.perf_counter_ns() - start)
    print(f"  turn starts, applies a summary       {per_call(applies)}   (once per summary; includes nanobot's save)")
    await asyncio.sleep(0)
    await asyncio.gather(*list(getattr(bench.loop, "_background_tasks", ())), return_exceptions=True)


async def timed_enqueues(bench: Bench) -> list[int]:
    """The enqueue of 200 sessions, each timed; their jobs, queue entries and records removed afterwards."""
    triggering, names = bench.integration.triggering, bench.integration.settings.keys
    keys = [f"bench:enqueue:{i}" for i in range(200)]
    samples = []
    for k in keys:
        start = time.perf_counter_ns()
        await triggering.enqueue(k, "tokens", 90_000, 128_000)
        samples.append(time.perf_counter_ns() - start)
    client = bench.integration.ctx.link.client()
    await client.zrem(names.queue, *[names.job_id(k) for k in keys])
    await client.delete(*[f"arq:job:{names.job_id(k)}" for k in keys], *[names.record(k) for k in keys])
    return samples


async def enqueue_round_trip(bench: Bench, redis_url: str) -> None:
    """4. Off the turn's path: the enqueue task against a real Redis, skipped when `redis_url` does not answer."""
    print("\noff the turn's path (a background task; the turn does not wait for it)")
    link = bench.integration.ctx.link
    link.url = redis_url
    link._client = None
    probe = await link.call("probing", lambda c: c.ping())
    if not probe:
        print(f"  enqueue round trip                   skipped: {redis_url} does not answer")
    else:
        print(f"  EXISTS + enqueue_job (single flight) {per_call(await timed_enqueues(bench))}")
    link.url = DEAD_REDIS
    link._client = None


async def timed_turns(bench: Bench, side: str, count: int) -> list[float]:
    """`count` turns in ms, with the integration installed (side "with") or not; uninstalled afterwards."""
    if side == "without":
        bench.integration.uninstall()
    else:
        bench.integration.install()
    timings = []
    for i in range(count):
        start = time.perf_counter()
        await bench.loop.process_direct(f"turn {i}", session_key=f"bench:turns:{side}")
        timings.append((time.perf_counter() - start) * 1000)
    bench.integration.uninstall()
    return timings


async def whole_turns(bench: Bench, turns: int) -> None:
    """5. Whole turns, in process, with and without the integration, in blocks taken in turn."""
    print(f"\nwhole turns in process (nanobot + an instant fake provider), {turns} per side, interleaved")
    bench.provider.prompt_tokens = 1_000  # under the threshold: the usual turn
    timings: dict[str, list[float]] = {"with": [], "without": []}
    block = max(1, turns // 10)
    for round_number in range(10):
        for side in ("with", "without") if round_number % 2 == 0 else ("without", "with"):
            timings[side] += await timed_turns(bench, side, block)
    bench.integration.install()
    for side, values in timings.items():
        print(
            f"  {side:<8} the integration         median {statistics.median(values):7.3f} ms per turn (n={len(values)})"
        )
    delta = statistics.median(timings["with"]) - statistics.median(timings["without"])
    print(
        f"  difference of medians                {delta * 1000:+8.1f} us (within the noise of a whole turn;"
        " the figures above are the hooks' own cost)"
    )


async def main() -> int:
    args = parse_args()
    missing = nanobot_missing()
    if missing is not None:
        print(f"error: run this with nanobot's Python ({missing})", file=sys.stderr)
        return 2
    bench = start_loop(args)
    if bench is None:
        return 2
    print(f"nanobot_hooks cost per turn; session of {bench.messages} messages; {bench.calls} calls per figure\n")
    print("on the turn's path")
    await after_iteration(bench)
    turn_saved(bench)
    await turn_starts(bench)
    await enqueue_round_trip(bench, args.redis)
    await whole_turns(bench, args.turns)
    await bench.loop.aclose()
    shutil.rmtree(bench.root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
