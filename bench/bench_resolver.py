#!/usr/bin/env python3
"""Benchmark: nanobot's turns with its Redis host's name hung in DNS, beside Redis down and Redis up (issue 26).

Three conditions, each with its own fresh `nanobot gateway` (WebSocket channel) and `nanobot agent` runs, against a
fake OpenAI-compatible model on loopback named `localhost`, so nanobot's LLM client looks its provider's name up in
asyncio's default thread pool as with a real provider. `up`: a real redis-server on a free port; `down`: REDIS_URL
names a free port nobody listens on (refused); `hung`: REDIS_URL is redis://redis.hung.invalid:6379/0 and, in the
nanobot processes only, socket.getaddrinfo never returns for that name (for --hang seconds, then fails), while every
other name resolves as usual. The fault comes from a sitecustomize.py put first on the nanobot processes'
PYTHONPATH (in every condition, so all start alike; only `hung` names a host to hang).

The gateways run side by side, so a busy machine's changing load falls on all alike: one untimed turn each (a
gateway's first turn pays its lazy imports), then --turns rounds of one turn per gateway to one chat, the order
rotated each round, --pause seconds after each round; a turn is timed from sending to its reply. Then, the
gateways stopped, --agent-runs rounds of `nanobot agent -c <config> -s cli:direct -m hi --no-markdown`, each timed
from process start to exit. Prints a table and the headline, hung vs down per turn (goal: at most +0.2 s).

    .venv/bin/python bench/bench_resolver.py [--turns 8] [--pause 1] [--agent-runs 3]
"""

# No `from __future__ import annotations`: the tests load this file without a sys.modules entry
# (tests/support/bench.py), where dataclasses cannot look string annotations up.
import argparse
import asyncio
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the drivers in harness/ come from this checkout

from harness.fakellm import FakeLLM, Reply  # noqa: E402
from harness.gateway import Gateway, nanobot_env, write_config  # noqa: E402
from harness.nanobot_cli import find_nanobot, nanobot_python  # noqa: E402
from harness.redis_server import RedisServer, free_port  # noqa: E402
from harness.sandbox import NanobotHome  # noqa: E402
from nanobot_hooks.link import CALL_TIMEOUT  # noqa: E402

HUNG_HOST = "redis.hung.invalid"
CONDITIONS = ("up", "down", "hung")
GOAL = 0.2  # seconds a turn may take over the same turn with Redis down (issue 26)
CHAT = "bench"
REPLY = "ok from the fake model"
STARTED = time.monotonic()  # the run's start, set again by main

SITECUSTOMIZE = '''\
"""Written by bench/bench_resolver.py: socket.getaddrinfo hangs BENCH_HUNG_SECONDS, then fails, for the one name
BENCH_HUNG_HOST, noting each such call in BENCH_HUNG_LOG; other names resolve as usual. Unset, it does nothing."""
import os, socket, time  # noqa: E401

_HOST = os.environ.get("BENCH_HUNG_HOST", "")
if _HOST:
    _real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if (host.decode() if isinstance(host, bytes) else host) != _HOST:
            return _real(host, *args, **kwargs)
        with open(os.environ.get("BENCH_HUNG_LOG", os.devnull), "a", encoding="utf-8") as log:
            log.write(f"{os.getpid()}\\n")
        time.sleep(float(os.environ.get("BENCH_HUNG_SECONDS", "600")))
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    socket.getaddrinfo = getaddrinfo
'''


def p50_max(values: list[float | None]) -> tuple[float, float] | None:
    done = [v for v in values if v is not None]
    return (statistics.median(done), max(done)) if done else None


def parse(argv: list[str] | None) -> argparse.Namespace:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        epilog=doc.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--turns", type=int, default=8, metavar="N", help="timed gateway turns per condition (default: %(default)s)")
    add("--pause", type=float, default=1.0, metavar="S", help="seconds between rounds of turns (default: %(default)s)")
    add(
        "--agent-runs",
        type=int,
        default=3,
        metavar="N",
        help="`nanobot agent -m hi` runs per condition, 0 for none (default: %(default)s)",
    )
    add(
        "--warmup",
        type=int,
        default=1,
        metavar="N",
        help="untimed `nanobot agent` runs first, so no condition pays for cold disk caches, and, unless 0, one "
        "untimed turn per gateway (a gateway's first turn pays its lazy imports) (default: %(default)s)",
    )
    add(
        "--hang",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds the hung look-up takes before it fails (default: %(default)s)",
    )
    add(
        "--turn-timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds a turn may wait for its reply before it counts as unanswered (default: %(default)s)",
    )
    add(
        "--agent-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds an agent run may take before it is killed (default: %(default)s)",
    )
    add(
        "--hooks-from",
        type=Path,
        metavar="DIR",
        help="a folder holding another version's nanobot_hooks/, which nanobot then loads instead of the "
        "installed one: `git archive f327b02^ nanobot_hooks | tar -x -C DIR` shows the figures before the fix",
    )
    add(
        "--work",
        type=Path,
        metavar="DIR",
        help="keep the homes and logs in this new folder (default: a temporary one, removed afterwards)",
    )
    return parser.parse_args(argv)


def nanobot_exe() -> Path:
    """As the tests find it (NANOBOT_BIN, else .venv-nanobot), with a plain message instead of a test's skip."""
    try:
        return find_nanobot()
    except (pytest.skip.Exception, pytest.fail.Exception) as exc:
        sys.exit(f"error: {exc.msg}; run scripts/test once (it builds .venv-nanobot)")


def tokenizer_dir() -> str:
    """litellm's bundled cl100k files (found, not imported), so nanobot counts tokens without fetching them."""
    spec = importlib.util.find_spec("litellm")
    return str(Path(spec.origin).parent / "litellm_core_utils" / "tokenizers") if spec and spec.origin else ""


def injection(folder: Path, exe: Path, extra: Path | None) -> dict[str, str]:
    """The sitecustomize.py in `folder` and the environment that loads it, checked in nanobot's own Python.

    nanobot's console script starts its venv's python without -E or -I, so PYTHONPATH is honoured, and `site`
    imports the first sitecustomize on sys.path: PYTHONPATH comes before site-packages, so ours is the one."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    paths = [str(folder), *([str(extra.resolve())] if extra else []), os.environ.get("PYTHONPATH", "")]
    env = {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    env.update({"TIKTOKEN_CACHE_DIR": tokens} if (tokens := tokenizer_dir()) else {})
    probe = "import socket, sitecustomize; print(sitecustomize.__file__, socket.getaddrinfo.__module__)"
    done = subprocess.run(
        [str(nanobot_python(exe)), "-c", probe],
        env={**os.environ, **env, "BENCH_HUNG_HOST": "x"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.stdout.split() != [str(folder / "sitecustomize.py"), "sitecustomize"]:
        sys.exit(f"error: nanobot's Python does not load {folder}/sitecustomize.py: {done.stdout}{done.stderr}")
    return env


@dataclass
class Side:
    """One condition: its nanobot home, environment and gateway, and its timings (None: no reply in time)."""

    name: str
    home: NanobotHome
    env: dict[str, str]
    gateway: Gateway
    turns: list[float | None] = field(default_factory=list)
    agent: list[float | None] = field(default_factory=list)
    gateway_stop: float = 0.0
    hung_lookups: list[str] = field(default_factory=list)  # the process id of each call of the hung name


def make_side(
    name: str, redis_url: str, exe: Path, llm_url: str, inject: dict[str, str], args: argparse.Namespace, work: Path
) -> Side:
    folder = work / name
    folder.mkdir(parents=True)
    home = NanobotHome.create(folder, llm_url)
    ws_port = free_port()
    write_config(home, llm_url, ws_port)
    hang = (
        {
            "BENCH_HUNG_HOST": HUNG_HOST,
            "BENCH_HUNG_SECONDS": str(args.hang),
            "BENCH_HUNG_LOG": str(folder / "hung-lookups.log"),
        }
        if name == "hung"
        else {}
    )
    env = nanobot_env(home, redis_url, **inject, **hang)
    return Side(name, home, env, Gateway(exe, home, env, ws_port, folder / "gateway.log"))


async def timed_turn(gateway: Gateway, chat: str, text: str, timeout: float) -> float | None:
    """Seconds from sending `text` to its reply; None when no reply came within `timeout`."""
    started = time.monotonic()
    try:
        reply = await gateway.say(chat, text, timeout=timeout)
    except (asyncio.TimeoutError, OSError):
        return None
    return time.monotonic() - started if REPLY in reply else None


async def stop_timed(side: Side) -> None:
    started = time.monotonic()
    await side.gateway.stop()
    side.gateway_stop = time.monotonic() - started


def progress(what: str) -> None:
    print(f"  {time.monotonic() - STARTED:5.0f} s  {what}", file=sys.stderr, flush=True)


def rotated(names: list[str], i: int) -> list[str]:
    """Round `i`'s order: each condition goes first in turn, so none always comes right after the pause."""
    return names[i % len(names) :] + names[: i % len(names)]


async def gateway_rounds(sides: dict[str, Side], args: argparse.Namespace) -> None:
    """All gateways started side by side, one untimed turn each in another chat (unless --warmup 0), then --turns
    rounds of one turn per gateway, --pause seconds after each round; the gateways' stops timed."""
    try:
        await asyncio.gather(*(side.gateway.start() for side in sides.values()))
        progress(f"{len(sides)} gateways listening")
        for side in sides.values() if args.warmup else ():
            await timed_turn(side.gateway, "warmup", "hi", args.turn_timeout)
        for i in range(args.turns):
            for name in rotated(list(sides), i):
                side = sides[name]
                side.turns.append(await timed_turn(side.gateway, CHAT, f"turn {i + 1}: hi", args.turn_timeout))
            await asyncio.sleep(args.pause)
    finally:
        await asyncio.gather(*(stop_timed(side) for side in sides.values()))


def agent_run(exe: Path, home: NanobotHome, env: dict[str, str], timeout: float) -> float | None:
    """One `nanobot agent -m hi` from process start to exit; None when it failed or was killed at `timeout`."""
    argv = [str(exe), "agent", "-c", str(home.config_path), "-s", "cli:direct", "-m", "hi", "--no-markdown"]
    started = time.monotonic()
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    elapsed = time.monotonic() - started
    return elapsed if done.returncode == 0 and REPLY in done.stdout else None


async def agent_rounds(sides: dict[str, Side], exe: Path, args: argparse.Namespace) -> None:
    """--agent-runs rounds of one `nanobot agent` run per condition, one run at a time."""
    for i in range(args.agent_runs):
        for name in rotated(list(sides), i):
            side = sides[name]
            side.agent.append(await asyncio.to_thread(agent_run, exe, side.home, side.env, args.agent_timeout))


def cells(values: list[float | None], down: list[float | None]) -> str:
    """One column group: replies/tries, p50, max, and p50 minus Redis down's p50."""
    mine, theirs = p50_max(values), p50_max(down)
    done = f"{sum(v is not None for v in values)}/{len(values)}"
    if mine is None:
        return f"{done:>6}{'-':>7}{'-':>7}{'-':>8}"
    delta = f"{mine[0] - theirs[0]:+8.2f}" if theirs else f"{'-':>8}"
    return f"{done:>6}{mine[0]:7.2f}{mine[1]:7.2f}{delta}"


def table(results: dict[str, Side]) -> list[str]:
    head = f"{'ok':>6}{'p50':>7}{'max':>7}{'vs down':>8}"
    lines = [
        f"{'seconds':<10}{'gateway turns':^28}   {'nanobot agent -m hi':^28}",
        f"{'condition':<10}{head}   {head}  gateway stop",
    ]
    down = results["down"]
    for name, f in results.items():
        lines.append(f"{name:<10}{cells(f.turns, down.turns)}   {cells(f.agent, down.agent)}{f.gateway_stop:14.2f}")
    calls = results["hung"].hung_lookups
    lines.append(
        f"\nlook-ups of {HUNG_HOST} (each one hangs): {len(calls)} in {len(set(calls))} processes "
        f"(the gateway and {len(results['hung'].agent)} agent runs)"
    )
    return lines


def headlines(results: dict[str, Side]) -> list[str]:
    hung, down = results["hung"], results["down"]
    turn_h, turn_d = p50_max(hung.turns), p50_max(down.turns)
    if turn_h and turn_d and None not in hung.turns:
        delta, worst = turn_h[0] - turn_d[0], turn_h[1] - turn_d[1]
        verdict = "met" if max(delta, worst) <= GOAL else "MISSED"
        lines = [
            f"hung resolver vs Redis down: {delta:+.2f} s per turn at p50, {worst:+.2f} s at the max "
            f"(goal <= +{GOAL} s): {verdict}"
        ]
    else:
        lines = [
            f"hung resolver vs Redis down: {sum(v is None for v in hung.turns)} of {len(hung.turns)} turns "
            f"got no reply within the turn timeout (goal: each at most +{GOAL} s): MISSED"
        ]
    agent_h, agent_d = p50_max(hung.agent), p50_max(down.agent)
    if agent_h and agent_d:
        lines.append(
            f"nanobot agent -m hi, hung resolver vs Redis down: {agent_h[0] - agent_d[0]:+.2f} s from start "
            f"to exit at p50 (it waits for the hooks' Redis calls, each bounded to {CALL_TIMEOUT:g} s, "
            "before it exits)"
        )
    return lines


async def run(args: argparse.Namespace, work: Path) -> dict[str, Side]:
    exe = nanobot_exe()
    inject = injection(work / "inject", exe, args.hooks_from)
    with FakeLLM(default=Reply(REPLY)) as llm:
        # A name, not 127.0.0.1: a provider's name is what nanobot's client looks up in asyncio's default pool.
        llm_url = llm.url.replace("127.0.0.1", "localhost")
        if args.warmup:
            home = NanobotHome.create(work / "warmup", llm_url)
            env = nanobot_env(home, f"redis://127.0.0.1:{free_port()}/0", **inject)
            for _ in range(args.warmup):
                await asyncio.to_thread(agent_run, exe, home, env, args.agent_timeout)
        redis = RedisServer(work / "redis").start()
        try:
            urls = {
                "up": redis.url(),
                "down": f"redis://127.0.0.1:{free_port()}/0",
                "hung": f"redis://{HUNG_HOST}:6379/0",
            }
            sides = {name: make_side(name, urls[name], exe, llm_url, inject, args, work) for name in CONDITIONS}
            await gateway_rounds(sides, args)
            progress(f"{args.turns} rounds of turns done, gateways stopped")
            await agent_rounds(sides, exe, args)
            progress(f"{args.agent_runs} rounds of agent runs done")
        finally:
            redis.stop()
    log = work / "hung" / "hung-lookups.log"
    sides["hung"].hung_lookups = log.read_text(encoding="utf-8").split() if log.exists() else []
    return sides


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    work = (args.work or Path(tempfile.mkdtemp(prefix="bench-resolver-"))).resolve()
    global STARTED
    STARTED = time.monotonic()
    try:
        results = asyncio.run(run(args, work))
    except (pytest.skip.Exception, AssertionError) as exc:  # no redis-server; a gateway that did not start
        print(f"error: {exc}\n(homes and logs kept in {work})", file=sys.stderr)
        return 1
    print(
        f"nanobot with its Redis host's name hung in DNS: {args.turns} gateway turns ({args.pause:g} s pauses) and "
        f"{args.agent_runs} `nanobot agent -m hi` runs per condition\n"
    )
    print("\n".join([*table(results), "", *headlines(results)]))
    print(f"\n(took {time.monotonic() - STARTED:.0f} s)")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
