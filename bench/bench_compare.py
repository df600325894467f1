"""Benchmark: nanobot as its users run it vs nanobot with this project, side by side through the real gateway.

One scripted conversation (mixed Chinese and English, planted facts, pauses) is sent over the WebSocket
channel of a real `nanobot gateway`: twice with the project switched off (nanobot alone at its defaults,
its idle compaction on; and with its idle compaction off), then once per variant of the project (its
hooks and a real worker process; nanobot's idle compaction off, as docs/nanobot.md asks). A fake
OpenAI-compatible model answers every call on loopback with latencies (a turn takes `--turn-latency`; a
summary grows with its input) and bills them as providers do: the longest prefix a request shares with a
recent request of the same model (within the cache lifetime, in 128-token blocks, from 1,024 tokens) is
cached and costs a tenth. Its summaries keep every planted fact they were shown, and it names them as
facts to remember, so a session trusted to write MEMORY.md (the `memory` variant) shows what those
writes cost.

Time: a pause of `--pause` seconds after every `--pause-every` turns, otherwise `--min-gap` between turns.
nanobot's idle compaction is set to its default scaled with the pauses (`--nanobot-idle-minutes`, whole
minutes: nanobot takes no less than 1, so the pauses and the cache lifetime cannot be scaled below a
minute). `--time-scale` divides the pauses and the cache lifetime for runs without nanobot's idle
compaction in play.

Prints a table per window and the ratios (project / nanobot at its defaults, and / nanobot with idle
compaction off); `--json FILE` writes every figure. `--smoke` is a short run that only checks the script
works. Prices: main-model input 1 per token, cached input 0.1, output 4; the summary model a tenth of that.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the worker runs from this checkout

from redis import Redis  # noqa: E402

from harness import forks  # noqa: E402
from harness.fakellm import FakeLLM, FakeRequest, Reply  # noqa: E402
from harness.gateway import Gateway, nanobot_env, write_config  # noqa: E402
from harness.redis_server import RedisServer, free_port  # noqa: E402
from harness.sandbox import NanobotHome  # noqa: E402
from nanobot_hooks.contract.keys import WORKSPACE_ID_FILE, Keys, default_namespace  # noqa: E402
from nanobot_hooks.contract.marker import SessionMarker  # noqa: E402
from nanobot_hooks.link import CALL_TIMEOUT  # noqa: E402
from worker.text.tokens import cl100k_counter  # noqa: E402

if TYPE_CHECKING:
    from rich.table import Table

SUMMARY_MODEL = "summarizer"
CHAT = "bench"
COMPACTION_MARK = "Create a compact replacement checkpoint"
FACT = re.compile(r"FACT-[A-Z]{2}\d{4}")
PRICE_CACHED, PRICE_OUTPUT, PRICE_SUMMARY = 0.1, 4.0, 0.1
CACHE_BLOCK, CACHE_MIN = 128, 1024

ZH = (
    "我们今天继续讨论博客的部署方案，服务器在上海机房，配置是四核八G。",
    "我更喜欢简洁的回答，不要太多客套话。",
    "昨天的构建又报错了，日志里说缓存目录没有写权限。",
    "周末想把数据库备份脚本改成每天凌晨三点跑。",
    "这个主题的字体在手机上显得太小，需要调整一下样式。",
    "上次说的那个队列超时问题，我觉得是重试次数设得太多。",
    "老板希望下个月之前把文档站点迁移到新的域名。",
    "我女儿下周二过生日，提醒我订一个蛋糕。",
    "中文和英文混排的时候，标点符号的宽度总是不一致。",
    "我们需要确认一下证书什么时候过期，别又忘了续期。",
    "如果换成更便宜的模型，总结的质量会不会下降很多？",
    "数据迁移之前一定要先做一次完整的快照。",
)
EN = (
    "The nginx config still points at the old upstream port.",
    "Let's keep the deploy script idempotent.",
    "Please check whether the Redis queue drains overnight.",
    "I tried the build again and it failed the same way.",
    "The staging server runs Debian 12 with Python 3.11.",
    "We should move the backups to object storage.",
    "Can you compare the two pricing plans for me?",
    "The theme build takes four minutes on the small runner.",
)
REPLY_ZH = (
    "好的，我来整理一下思路。",
    "建议先在测试环境验证，再推到生产。",
    "这里有三个可能的原因，我们逐一排查。",
    "可以先把日志级别调到调试模式。",
    "这个改动不大，风险可控。",
    "我把步骤列在下面。",
)
REPLY_EN = (
    "First, back up the current configuration.",
    "Then restart the service and watch the logs.",
    "If it still fails, roll back to the previous release.",
    "That should take about ten minutes.",
)


# -- the conversation -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    text: str
    pause: float  # seconds of silence before this message (unscaled; 0 = the shortest gap)
    fact: str | None = None


def conversation(turns: int, chars: int, pause: float = 0.0, pause_every: int = 0, seed: int = 7) -> list[Turn]:
    """`turns` user messages of about `chars` characters, two thirds Chinese; a fact planted every
    12 turns (from the third); `pause` seconds of silence after every `pause_every` turns (0 = never)."""
    rng = random.Random(seed)
    out: list[Turn] = []
    for i in range(turns):
        parts: list[str] = []
        fact = None
        if i % 12 == 2:
            fact = f"FACT-{rng.choice('ABCDEFGH')}{rng.choice('KLMNPQRS')}{rng.randint(1000, 9999)}"
            parts.append(f"请记住：我的新服务器的资产编号是 {fact}，以后会用到。")
        while sum(len(p) for p in parts) < chars:
            parts.append(rng.choice(ZH) if rng.random() < 0.5 else rng.choice(EN))
        silence = pause if pause_every and i and i % pause_every == 0 else 0.0
        out.append(Turn(" ".join(parts)[: chars + 40], silence, fact))
    return out


def reply_text(seed: str, chars: int) -> str:
    rng = random.Random(seed)
    parts: list[str] = []
    while sum(len(p) for p in parts) < chars:
        parts.append(rng.choice(REPLY_ZH) if rng.random() < 0.6 else rng.choice(REPLY_EN))
    return " ".join(parts)


def fake_summary(text: str, chars: int) -> str:
    """What both summarizers answer: every planted fact they were shown, and a body of `chars` characters."""
    facts = sorted(set(FACT.findall(text)))
    kept = "；".join(f"用户的服务器资产编号 {fact}" for fact in facts)
    return (f"## 摘要\n{kept}\n" if kept else "## 摘要\n") + reply_text(text[-200:], chars)


def fake_facts(text: str) -> list[dict[str, Any]]:
    """The facts the worker's summarizer names: each planted fact it was shown, as a durable one."""
    return [
        {
            "text": f"用户新服务器的资产编号是 {fact}",
            "tag": "durable",
            "importance": 4,
            "category": "configuration",
            "replaces": None,
            "source": "user",
        }
        for fact in sorted(set(FACT.findall(text)))
    ]


# -- the fake provider ------------------------------------------------------------------------------


@dataclass
class Call:
    kind: str  # turn | compaction | summary
    prompt: int
    cached: int
    completion: int
    started: float
    seconds: float
    # A turn whose system prompt before the summary (MEMORY.md's section in it) differs from the last turn's:
    # "warm" when a main-model call came within the cache lifetime (the change cost that cache), else "cold".
    memory_change: str = ""


# nanobot renders the session's summary last in the system prompt; what precedes it changes only with MEMORY.md.
SUMMARY_SECTION = "[Archived Context Summary]"


@dataclass
class Provider:
    """Answers and bills every call; keeps the recent prompts of each model for the cache."""

    turn_latency: float
    summary_base: float
    summary_per_token: float
    summary_chars: int
    reply_chars: int
    cache_ttl: float  # scaled seconds
    calls: list[Call] = field(default_factory=list)
    last_prompt: str = ""
    _before_summary: str | None = None  # the last turn's system prompt up to the summary
    _last_main: float | None = None  # when the main model was last called
    _recent: dict[str, list[tuple[float, list[int]]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        from litellm.litellm_core_utils.default_encoding import encoding

        self._encode = lambda text: encoding.encode(text, disallowed_special=())

    def cached_prefix(self, model: str, tokens: list[int], now: float) -> int:
        recent = [(at, old) for at, old in self._recent.get(model, []) if now - at <= self.cache_ttl]
        best = 0
        for _, old in recent:
            n = 0
            limit = min(len(old), len(tokens))
            while n < limit and old[n] == tokens[n]:
                n += 1
            best = max(best, n)
        self._recent[model] = (recent + [(now, tokens)])[-4:]
        best = best // CACHE_BLOCK * CACHE_BLOCK
        return best if best >= CACHE_MIN else 0

    def _memory_change(self, request: FakeRequest, now: float) -> str:
        system = request.messages[0].get("content") if request.messages else None
        # Up to the summary and the separator nanobot puts before it (a prompt without a summary has neither).
        before = (
            system.split(SUMMARY_SECTION)[0].rstrip().removesuffix("---").rstrip() if isinstance(system, str) else ""
        )
        changed = self._before_summary is not None and before != self._before_summary
        self._before_summary = before
        if not changed:
            return ""
        return "warm" if self._last_main is not None and now - self._last_main <= self.cache_ttl else "cold"

    def __call__(self, request: FakeRequest) -> Reply:
        body = request.body or {}
        model = str(body.get("model"))
        # What a provider reads, in its order: tools, then the messages.
        prompt_text = json.dumps(body.get("tools") or [], ensure_ascii=False) + "".join(
            f"\n<{m.get('role')}>\n"
            + (m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"), ensure_ascii=False))
            + (json.dumps(m["tool_calls"], ensure_ascii=False) if m.get("tool_calls") else "")
            for m in request.messages
        )
        tokens = self._encode(prompt_text)
        now = time.monotonic()
        with self._lock:
            cached = self.cached_prefix(model, tokens, now)
        if model == SUMMARY_MODEL:
            kind = "summary"
            text = json.dumps(
                {
                    "summary": fake_summary(prompt_text, self.summary_chars),
                    "daily_notes": [],
                    "facts": fake_facts(prompt_text),
                },
                ensure_ascii=False,
            )
        elif COMPACTION_MARK in prompt_text:
            kind = "compaction"
            text = fake_summary(prompt_text, self.summary_chars)
        else:
            kind = "turn"
            self.last_prompt = prompt_text
            text = reply_text(request.last_user_text, self.reply_chars)
        delay = self.turn_latency if kind == "turn" else self.summary_base + len(tokens) * self.summary_per_token
        completion = len(self._encode(text))
        with self._lock:
            change = self._memory_change(request, now) if kind == "turn" else ""
            if kind != "summary":
                self._last_main = now
            self.calls.append(Call(kind, len(tokens), cached, completion, now, delay, change))
        return Reply(text, prompt_tokens=len(tokens), completion_tokens=completion, cached_tokens=cached, delay=delay)


# -- one run ----------------------------------------------------------------------------------------


@dataclass
class Run:
    name: str
    window: int
    turns: int
    latencies: list[float]
    waited: list[int]  # turns during which a summary of nanobot's own ran on the main model
    calls: list[Call]
    ready_to_applied: list[float]  # seconds from a finished summary (its record) to nanobot applying it
    facts_kept: dict[str, bool]

    def latency_figures(self) -> dict[str, Any]:
        """Seconds per turn: of all turns, and of the turns no summary of nanobot's own held up (quiet)."""
        quiet = [lat for i, lat in enumerate(self.latencies) if i not in self.waited]
        return {
            "latency_p50": statistics.median(self.latencies),
            "latency_p95": percentile(self.latencies, 0.95),
            "latency_max": max(self.latencies),
            "latency_p95_quiet_turns": percentile(quiet, 0.95) if quiet else None,
        }

    def figures(self) -> dict[str, Any]:
        main = [c for c in self.calls if c.kind in ("turn", "compaction")]
        summaries = [c for c in self.calls if c.kind == "summary"]
        prompt = sum(c.prompt for c in main)
        cached = sum(c.cached for c in main)
        input_cost = prompt - cached + PRICE_CACHED * cached
        output_cost = PRICE_OUTPUT * sum(c.completion for c in main)
        summary_input_cost = PRICE_SUMMARY * sum(c.prompt - c.cached + PRICE_CACHED * c.cached for c in summaries)
        summary_cost = summary_input_cost + PRICE_SUMMARY * PRICE_OUTPUT * sum(c.completion for c in summaries)
        return {
            "turns": self.turns,
            **self.latency_figures(),
            "turns_waiting": len(self.waited),
            "main_calls": len(main),
            "main_prompt_tokens": prompt,
            "main_prompt_mean": prompt / max(len(main), 1),
            "main_prompt_max": max((c.prompt for c in main), default=0),
            "cached_share": cached / prompt if prompt else 0.0,
            "main_input_cost": input_cost,
            # nanobot's compactions run on the main model (inside main_input_cost); the worker's at a tenth.
            "all_input_cost": input_cost + summary_input_cost,
            "main_output_cost": output_cost,
            "nanobot_compactions": sum(1 for c in main if c.kind == "compaction"),
            "summary_calls": len(summaries),
            "summary_input_tokens": sum(c.prompt for c in summaries),
            "summary_output_tokens": sum(c.completion for c in summaries),
            "summary_cost": summary_cost,
            "total_cost": input_cost + output_cost + summary_cost,
            "summary_call_seconds_max": max((c.seconds for c in summaries), default=None),
            "ready_to_applied_p50": statistics.median(self.ready_to_applied) if self.ready_to_applied else None,
            "ready_to_applied_max": max(self.ready_to_applied, default=None),
            "summaries_applied": len(self.ready_to_applied),
            "memory_changes": sum(1 for c in main if c.memory_change),
            "memory_changes_warm": sum(1 for c in main if c.memory_change == "warm"),
            "facts_kept": f"{sum(self.facts_kept.values())}/{len(self.facts_kept)}",
            "facts_lost": sorted(f for f, kept in self.facts_kept.items() if not kept),
        }


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def nanobot_exe() -> Path:
    configured = os.environ.get("NANOBOT_BIN")
    path = Path(configured) if configured else ROOT / ".venv-nanobot" / "bin" / "nanobot"
    if not path.is_file():
        sys.exit(f"no nanobot at {path}: run scripts/test once (it builds .venv-nanobot) or set NANOBOT_BIN")
    return path


def tokenizer_dir() -> str:
    """litellm's bundled cl100k file, so nanobot counts tokens as the provider does (offline too)."""
    import litellm.litellm_core_utils.tokenizers as bundled

    return str(Path(bundled.__file__).parent)


@dataclass(frozen=True)
class Variant:
    """One side of the comparison: nanobot alone (`ours` False) or with the project and these settings."""

    ours: bool
    settings: dict[str, str] = field(default_factory=dict)  # the project's environment
    nanobot: dict[str, Any] = field(default_factory=dict)  # nanobot's agents.defaults


def nanobot_defaults(window: int, args: argparse.Namespace, overrides: dict[str, Any]) -> dict[str, Any]:
    """nanobot's agents.defaults for one run: the window, and idle compaction off unless asked for."""
    return {
        "contextWindowTokens": window,
        "maxTokens": 1024,
        "idleCompactAfterMinutes": 0,
        "idleCompactCheckIntervalSeconds": args.nanobot_idle_check,
        **overrides,
    }


def run_settings(variant: Variant) -> dict[str, str]:
    """The environment of a run's nanobot (and worker): nanobot alone has the project off; a variant's own
    settings win over the harness's (recall on)."""
    base = {"TIKTOKEN_CACHE_DIR": tokenizer_dir()}
    if not variant.ours:
        return {**base, "NANOBOT_SUMMARY_RECALL": "false", "NANOBOT_AUTO_SUMMARY": "false"}
    return {**base, "NANOBOT_SUMMARY_RECALL": "true", **variant.settings}


def start_worker(
    home: NanobotHome, redis_url: str, base: dict[str, str], folder: Path
) -> subprocess.Popen[bytes] | forks.ForkedProcess:
    """The project's worker process for this run, on the summary model, its output in the run's worker.log: a fork of
    the worker's fork server where the tests switched forks on (its smoke run), else a process of its own."""
    worker_env = nanobot_env(
        home, redis_url, **base, NANOBOT_CONFIG=str(home.config_path), NANOBOT_SUMMARY_MODEL=f"openai/{SUMMARY_MODEL}"
    )
    with open(folder / "worker.log", "wb") as log:  # the child keeps its own copy of the handle
        return forks.popen([sys.executable, "-m", "worker"], worker_env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


async def converse(
    name: str,
    script: list[Turn],
    args: argparse.Namespace,
    gateway: Gateway,
    provider: Provider,
    home: NanobotHome,
    applied: dict[str, float],
) -> tuple[list[float], list[int]]:
    """The scripted turns over the gateway, with their pauses: each turn's seconds, and the turns during which
    a summary of nanobot's own ran on the main model; the summaries applied are noted in `applied`."""
    latencies: list[float] = []
    waited: list[int] = []
    for i, turn in enumerate(script):
        if i:
            await asyncio.sleep(max(turn.pause / args.time_scale, args.min_gap))
            note_applied(home, applied)  # a summary applied during the pause (idle pickup)
        before = len(provider.calls)
        started = time.monotonic()
        await gateway.say(CHAT, turn.text, timeout=300)
        latencies.append(time.monotonic() - started)
        if any(c.kind == "compaction" for c in provider.calls[before:]):
            waited.append(i)
        note_applied(home, applied)
        if args.progress and (i + 1) % 12 == 0:
            print(f"  {name}: turn {i + 1}/{len(script)}", file=sys.stderr, flush=True)
    return latencies, waited


async def run_one(
    name: str,
    window: int,
    script: list[Turn],
    args: argparse.Namespace,
    work: Path,
    redis: RedisServer,
    db: int,
    variant: Variant,
) -> Run:
    provider = Provider(
        args.turn_latency,
        args.summary_base,
        args.summary_per_token,
        args.summary_chars,
        args.reply_chars,
        args.cache_ttl / args.time_scale,
    )
    folder = work / name
    folder.mkdir()
    with FakeLLM() as llm:
        llm.responder = provider
        home = NanobotHome.create(folder, llm.url)
        ws_port = free_port()
        write_config(home, llm.url, ws_port, **nanobot_defaults(window, args, variant.nanobot))
        redis_url = redis.url(db=db)
        base = run_settings(variant)
        env = nanobot_env(home, redis_url, **base)
        worker = start_worker(home, redis_url, base, folder) if variant.ours else None
        # A fork of a process that imported nanobot where the tests switched forks on (its smoke run); run as a
        # script, a gateway of its own, as a user starts it.
        gateway = Gateway(nanobot_exe(), home, env, ws_port, folder / "gateway.log", forked=True)
        applied: dict[str, float] = {}
        try:  # the worker is stopped even when the gateway does not start, or its folder cannot be removed
            await gateway.start()
            if worker is not None:
                await worker_ready(redis_url, home_keys(home).queue, worker, folder / "worker.log")
            latencies, waited = await converse(name, script, args, gateway, provider, home, applied)
            if worker is not None:
                await drained(redis_url, home_keys(home))
        finally:
            await gateway.stop()
            if worker is not None:
                await stop_worker(worker)
        note_applied(home, applied)
        if worker is not None and not any(call.kind == "summary" for call in provider.calls):
            print(f"warning: {name}: the worker asked the model for no summary; the logs' ends:", file=sys.stderr)
            for log in ("worker.log", "gateway.log"):
                print(f"--- {log}\n{(folder / log).read_text(errors='replace')[-4000:]}", file=sys.stderr)
        final = provider.last_prompt
        facts = {t.fact: t.fact in final for t in script if t.fact}
        return Run(
            name,
            window,
            len(script),
            latencies,
            waited,
            provider.calls,
            ready_to_applied=list(applied.values()),
            facts_kept=facts,
        )


def home_keys(home: NanobotHome) -> Keys:
    """The key names of this nanobot home's instance, as its worker names them unconfigured (its workspace id)."""
    return Keys(default_namespace((home.workspace / WORKSPACE_ID_FILE).read_text(encoding="utf-8").strip()))


async def worker_ready(
    redis_url: str, queue: str, worker: subprocess.Popen[bytes], log: Path, timeout: float = 300.0
) -> None:
    """Wait for the worker to poll its queue (arq's health-check key): on a loaded machine its start-up
    takes a minute, and jobs queued meanwhile would wait for it, which no user's worker does."""
    deadline = time.monotonic() + timeout
    with Redis.from_url(redis_url) as client:
        while not client.exists(f"{queue}:health-check"):
            if worker.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"the worker did not start:\n{log.read_text(errors='replace')[-3000:]}")
            await asyncio.sleep(0.5)


async def drained(redis_url: str, keys: Keys, timeout: float = 120.0) -> None:
    """Wait, at most `timeout` seconds, for the summary jobs the turns queued to end, retries deferred to later
    included: arq keeps a job in its queue until it ends (an idle check, deferred by design, is not waited for).
    The last turn's reply can reach the bench before nanobot saved the turn, and the hooks queue its job after
    that, within their Redis timeout: the queue is first read once that much time has passed. On a loaded
    machine the last turn can come before the worker's first job, whose cost is the run's all the same."""
    await asyncio.sleep(CALL_TIMEOUT + 1.0)
    deadline = time.monotonic() + timeout
    summary_job = keys.job_id("")
    with Redis.from_url(redis_url) as client:
        while time.monotonic() < deadline:
            waiting = [job for job in client.zrange(keys.queue, 0, -1) if job.decode().startswith(summary_job)]
            if not waiting:
                return
            await asyncio.sleep(0.5)


async def stop_worker(worker: subprocess.Popen[bytes] | forks.ForkedProcess, grace: float = 60.0) -> None:
    """SIGTERM (arq lets a running job finish), then SIGKILL after `grace` seconds; the other runs of the
    window go on meanwhile."""
    worker.terminate()
    try:
        await asyncio.to_thread(worker.wait, grace)
    except subprocess.TimeoutExpired:
        worker.kill()
        await asyncio.to_thread(worker.wait, 10)


def note_applied(home: NanobotHome, seen: dict[str, float]) -> None:
    """The summary nanobot applied last, from the session file's first line: when the worker finished it
    (`created_at`, UTC) and when nanobot applied it (`applied_at`, local time)."""
    try:
        with home.session_file(f"websocket:{CHAT}").open(encoding="utf-8") as handle:
            head = json.loads(handle.readline())
    except (OSError, ValueError):
        return
    applied = SessionMarker.from_metadata(head.get("metadata")).applied
    if applied is not None and applied.stamp and applied.applied_at and applied.stamp not in seen:
        ready = datetime.fromisoformat(applied.stamp.replace("Z", "+00:00"))
        done = datetime.fromisoformat(applied.applied_at).astimezone()
        seen[applied.stamp] = (done - ready).total_seconds()


# -- the 1,000-turn arithmetic ------------------------------------------------------------------------


def naive_vs_ours(
    turn_tokens: int,
    reply_tokens: int,
    summary_tokens: int,
    interval: int,
    turns: int,
    keep_tokens: int,
    overhead: int = 0,
) -> dict[str, Any]:
    """Summarizing input over `turns` turns when every `interval` user messages a summary runs: the naive
    design re-reads the whole history each time; this project reads the previous summary and
    the messages since the last summary (up to the kept tail, which the next summary reads once). Both
    send `overhead` tokens of instructions with every call."""
    per_turn = turn_tokens + reply_tokens
    conversation_tokens = per_turn * turns
    naive = ours = 0
    summarized = 0  # tokens of conversation already covered
    for done in range(interval, turns + 1, interval):
        history = per_turn * done
        naive += overhead + history
        boundary = max(summarized, history - keep_tokens)
        ours += overhead + summary_tokens + (boundary - summarized)
        summarized = boundary
    return {
        "turns": turns,
        "conversation_tokens": conversation_tokens,
        "naive_input": naive,
        "ours_input": ours,
        "ours_over_conversation": ours / conversation_tokens,
        "naive_over_conversation": naive / conversation_tokens,
        "ours_over_naive": ours / naive,
    }


# -- output -------------------------------------------------------------------------------------------

ROWS = (
    "latency_p50",
    "latency_p95",
    "latency_p95_quiet_turns",
    "latency_max",
    "turns_waiting",
    "main_prompt_tokens",
    "main_prompt_mean",
    "main_prompt_max",
    "cached_share",
    "main_input_cost",
    "main_output_cost",
    "nanobot_compactions",
    "summary_calls",
    "summary_input_tokens",
    "summary_cost",
    "all_input_cost",
    "total_cost",
    "summaries_applied",
    "ready_to_applied_p50",
    "ready_to_applied_max",
    "memory_changes",
    "memory_changes_warm",
    "facts_kept",
)
RATIOS = ("main_prompt_tokens", "main_input_cost", "all_input_cost", "total_cost", "latency_p95")
BASELINES = ("alone", "alone-idle-off")  # nanobot at its defaults (the headline), and with idle compaction off


def goals(window: int, paused: bool) -> dict[str, float]:
    """The ratios (project / nanobot at its defaults) each scenario aims for."""
    if window >= 128_000:
        return {"main_prompt_tokens": 0.6, "main_input_cost": 0.6}
    if paused:
        return {"main_prompt_tokens": 0.8, "main_input_cost": 0.8, "all_input_cost": 0.6}
    return {"main_prompt_tokens": 0.8, "main_input_cost": 0.8}


def ratios_over(runs: dict[str, dict[str, Any]], baseline: str) -> dict[str, dict[str, float]]:
    base = runs[baseline]
    return {
        name: {r: figures[r] / base[r] for r in RATIOS if base[r]}
        for name, figures in runs.items()
        if name not in BASELINES
    }


def verdict(figures: dict[str, Any], ratios: dict[str, float], aims: dict[str, float]) -> list[str]:
    """The goals a variant misses ([] = all met): the ratios, no turn waiting, every planted fact kept."""
    missed = [f"{k} {ratios[k]:.3f} > {limit}" for k, limit in aims.items() if ratios.get(k, 0) > limit]
    if figures["turns_waiting"]:
        missed.append(f"{figures['turns_waiting']} turns waited")
    if figures["facts_lost"]:
        missed.append(f"facts lost: {', '.join(figures['facts_lost'])}")
    return missed


def all_ratios(runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Each variant's ratios over each baseline run; over nanobot at its defaults also its latency yardstick."""
    ratios = {baseline: ratios_over(runs, baseline) for baseline in BASELINES if baseline in runs}
    quiet = runs["alone"]["latency_p95_quiet_turns"]
    for name, values in ratios["alone"].items():
        # The latency yardstick: nanobot's own turns that needed no summarizing.
        values["latency_p95_vs_quiet"] = runs[name]["latency_p95"] / quiet if quiet else float("nan")
    return ratios


def figures_table(
    window: int, runs: dict[str, dict[str, Any]], paused: bool, ratios: dict[str, dict[str, dict[str, float]]]
) -> Table:
    """Every figure of every run, then each variant's ratios over each baseline."""
    from rich.table import Table

    names = list(runs)
    table = Table(
        title=f"window {window:,} tokens, {runs[names[0]]['turns']} turns"
        + (", with pauses" if paused else ", without pauses")
    )
    table.add_column("figure")
    for name in names:
        table.add_column(name, justify="right")
    for row in ROWS:
        table.add_row(row, *(fmt(runs[n][row]) for n in names))
    for baseline, per_variant in ratios.items():
        for name, values in per_variant.items():
            table.add_row(f"[bold]{name} / {baseline}[/]", *("" for _ in names))
            for row, value in values.items():
                table.add_row(f"  {row}", *(f"{value:.3f}" if n == name else "" for n in names))
    return table


def headline_table(
    window: int, runs: dict[str, dict[str, Any]], ratios: dict[str, dict[str, dict[str, float]]], aims: dict[str, float]
) -> Table:
    """The headline: one row per variant of the project, its ratios over nanobot at its defaults (and with
    idle compaction off), the turns that waited and the planted facts in the last request."""
    from rich.table import Table

    headline = Table(title=f"window {window:,}: project / nanobot at its defaults (/ idle compaction off)")
    for column in ("variant", "prompt tokens", "cost with caching", "all input", "turns waiting", "facts kept"):
        headline.add_column(column, justify="left" if column == "variant" else "right")
    off = ratios.get("alone-idle-off", {})
    for name, values in ratios["alone"].items():
        cells = [
            f"{values[k]:.3f}" + (f" ({off[name][k]:.3f})" if k in off.get(name, {}) else "")
            for k in ("main_prompt_tokens", "main_input_cost", "all_input_cost")
        ]
        headline.add_row(name, *cells, str(runs[name]["turns_waiting"]), runs[name]["facts_kept"])
    headline.add_row(
        "goal",
        *(f"<= {aims[k]}" if k in aims else "" for k in ("main_prompt_tokens", "main_input_cost", "all_input_cost")),
        "0",
        "all",
    )
    return headline


def show(window: int, runs: dict[str, dict[str, Any]], paused: bool) -> dict[str, Any]:
    from rich.console import Console

    ratios = all_ratios(runs)
    console = Console(width=max(120, 20 + 16 * len(runs)))
    console.print(figures_table(window, runs, paused, ratios))
    aims = goals(window, paused)
    missed = {name: verdict(runs[name], values, aims) for name, values in ratios["alone"].items()}
    console.print(headline_table(window, runs, ratios, aims))
    for name, misses in missed.items():
        print(f"{name}: " + ("every goal met" if not misses else "missed: " + "; ".join(misses)))
    return {
        "vs_defaults": ratios["alone"],
        "vs_idle_off": ratios.get("alone-idle-off", {}),
        "goals": aims,
        "missed": missed,
    }


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def add_conversation_options(parser: argparse.ArgumentParser) -> None:
    """The conversation and the fake model: windows, turns, sizes, latencies, pauses, the cache."""
    parser.add_argument("--window", type=int, nargs="+", default=[32_000], help="context windows to run")
    parser.add_argument(
        "--turns", type=int, nargs="+", default=[48], help="turns per window (one number for all, or one per window)"
    )
    parser.add_argument("--chars", type=int, default=1700, help="characters per user message")
    parser.add_argument("--reply-chars", type=int, default=500, help="characters per assistant reply")
    parser.add_argument("--summary-chars", type=int, default=1200, help="characters of a summary (both sides)")
    parser.add_argument("--turn-latency", type=float, default=0.3, help="seconds per main-model turn call")
    parser.add_argument("--summary-base", type=float, default=1.0, help="seconds of any summarizing call")
    parser.add_argument("--summary-per-token", type=float, default=1 / 8000, help="more seconds per input token")
    parser.add_argument("--pause", type=float, default=90.0, help="seconds of a pause in the conversation")
    parser.add_argument("--pause-every", type=int, default=12, help="a pause after every N turns; 0 = no pauses")
    parser.add_argument("--cache-ttl", type=float, default=60.0, help="provider cache lifetime, seconds")


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The runs: time scale, nanobot's idle compaction, the project's variants, and where the output goes."""
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="divides the pauses and the cache lifetime (nanobot's idle compaction takes whole "
        "minutes: keep 1 when its idle compaction should run in the pauses)",
    )
    parser.add_argument(
        "--min-gap",
        type=float,
        default=2.0,
        help="seconds between turns outside the pauses: a user takes longer to answer than a summary takes",
    )
    parser.add_argument(
        "--nanobot-idle-minutes",
        type=int,
        default=1,
        help="nanobot alone at its defaults: idleCompactAfterMinutes (its default 15 minutes, "
        "scaled with the pauses and the cache lifetime)",
    )
    parser.add_argument(
        "--nanobot-idle-check",
        type=int,
        default=5,
        help="nanobot's idleCompactCheckIntervalSeconds (its default 60, scaled)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:VAR=VALUE,...",
        help="a run of the project with these settings (repeatable); `nanobot.KEY=VALUE` sets "
        "nanobot's agents.defaults KEY instead; default: `ours` (defaults), `ours-idle` "
        "(NANOBOT_SUMMARY_PICKUP=idle) and `memory` (the chat trusted to write MEMORY.md)",
    )
    parser.add_argument(
        "--serial",
        dest="parallel",
        action="store_false",
        help="one run after another (default: a window's runs at the same time, which costs "
        "latency figures nothing that matters here and saves most of the wall time)",
    )
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="run in this (new) folder and keep it: each run's gateway and worker logs and files",
    )
    parser.add_argument("--smoke", action="store_true", help="a short run that only checks the script works")
    parser.add_argument("--quiet", dest="progress", action="store_false", help="no progress lines")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    add_conversation_options(parser)
    add_run_options(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.window, args.turns, args.chars, args.reply_chars, args.min_gap = [32_000], [8], 6000, 300, 0.5
        args.pause_every = 0
    if len(args.turns) not in (1, len(args.window)):
        parser.error("--turns takes one number, or one per --window")
    if args.pause_every and args.pause / args.time_scale < args.nanobot_idle_minutes * 60 + args.nanobot_idle_check:
        print(
            f"note: pauses of {args.pause / args.time_scale:.0f} s are too short for nanobot's idle compaction "
            f"({args.nanobot_idle_minutes} min + a {args.nanobot_idle_check} s check)",
            file=sys.stderr,
        )
    return args


def variants(specs: list[str], args: argparse.Namespace) -> dict[str, Variant]:
    """nanobot alone at its defaults and with idle compaction off, then the project's variants."""
    alone = {
        "alone": Variant(False, nanobot={"idleCompactAfterMinutes": args.nanobot_idle_minutes}),
        "alone-idle-off": Variant(False),
    }
    if not specs:
        specs = (
            ["ours"]
            if args.smoke
            else ["ours", "ours-idle:NANOBOT_SUMMARY_PICKUP=idle", f"memory:NANOBOT_MEMORY_SESSIONS=websocket:{CHAT}"]
        )
    out: dict[str, Variant] = dict(alone)
    for spec in specs:
        name, _, rest = spec.partition(":")
        if name in alone:
            sys.exit(f"--variant {name}: that name is nanobot alone's")
        settings: dict[str, str] = {}
        nanobot: dict[str, Any] = {}
        for item in filter(None, rest.split(",")):
            key, sep, value = item.partition("=")
            if not sep:
                sys.exit(f"--variant {spec}: {item!r} is not VAR=VALUE")
            if key.startswith("nanobot."):
                try:
                    nanobot[key.removeprefix("nanobot.")] = json.loads(value)
                except ValueError:
                    nanobot[key.removeprefix("nanobot.")] = value
            else:
                settings[key] = value
        settings.setdefault("NANOBOT_SUMMARY_CACHE_TTL", f"{args.cache_ttl / args.time_scale:g}")
        out[name] = Variant(True, settings, nanobot)
    return out


async def run_window(
    window: int, turns: int, runs_of: dict[str, Variant], args: argparse.Namespace, work: Path, redis: RedisServer
) -> dict[str, Any]:
    """Every run of one window (at the same time unless --serial): its tables printed, its figures returned."""
    script = conversation(turns, args.chars, args.pause, args.pause_every)
    paused = any(t.pause for t in script)
    # Each run its own Redis database (16 of them): a window's runs may go at the same time.
    jobs = [
        run_one(f"{name}-{window}", window, script, args, work, redis, n % 16, variant)
        for n, (name, variant) in enumerate(runs_of.items())
    ]
    if args.parallel:
        done = await asyncio.gather(*jobs)
    else:
        done = [await job for job in jobs]
    runs = {name: run.figures() for name, run in zip(runs_of, done, strict=True)}
    raw = {
        name: {"latencies": run.latencies, "waited": run.waited, "calls": [asdict(c) for c in run.calls]}
        for name, run in zip(runs_of, done, strict=True)
    }
    ratios = show(window, runs, paused)
    for n in range(len(runs_of)):  # the next window starts from empty databases
        with Redis.from_url(redis.url(db=n % 16)) as client:
            client.flushdb()
    return {
        "figures": runs,
        "ratios": ratios["vs_defaults"],
        "ratios_vs_idle_off": ratios["vs_idle_off"],
        "goals": ratios["goals"],
        "missed": ratios["missed"],
        "paused": paused,
        "variants": {name: asdict(v) for name, v in runs_of.items()},
        "raw": raw,
    }


def sim_1000_turns(first: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """naive_vs_ours over 1,000 turns, with the sizes of the first window's runs (`first`, their raw figures)."""
    summaries = [c for name, r in first.items() if name not in BASELINES for c in r["calls"] if c["kind"] == "summary"]
    turn_calls = [c for c in first["alone"]["calls"] if c["kind"] == "turn"]
    counter = cl100k_counter()
    assert counter is not None
    script = conversation(50, args.chars)
    turn_tokens = round(statistics.mean(counter(t.text) for t in script))
    reply_tokens = round(statistics.mean(c["completion"] for c in turn_calls)) if turn_calls else 0
    summary_tokens = round(statistics.mean(c["completion"] for c in summaries)) if summaries else 400
    from worker.model.prompts import system_prompt

    overhead = counter(system_prompt("zh", 8000)) + 100  # the worker's instructions and the prompt's frame
    return naive_vs_ours(
        turn_tokens,
        reply_tokens,
        summary_tokens,
        interval=10,
        turns=1000,
        keep_tokens=round(0.03 * args.window[0]),
        overhead=overhead,
    )


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    if cl100k_counter() is None:
        sys.exit("cl100k is not available: install the worker extra (pip install -e '.[worker]')")
    report: dict[str, Any] = {
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "windows": {},
    }
    runs_of = variants(args.variant, args)
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        redis = RedisServer(work / "redis").start()
        try:
            for index, window in enumerate(args.window):
                turns = args.turns[index] if len(args.turns) > 1 else args.turns[0]
                report["windows"][str(window)] = await run_window(window, turns, runs_of, args, work, redis)
        finally:
            redis.stop()
    sim = sim_1000_turns(report["windows"][str(args.window[0])]["raw"], args)
    report["sim_1000_turns"] = sim
    print(
        f"1,000 turns, a summary every 10 user messages: summarizing input {sim['ours_input']:,} tokens "
        f"({sim['ours_over_conversation']:.2f}x the conversation's {sim['conversation_tokens']:,}); "
        f"the naive design {sim['naive_input']:,} ({sim['naive_over_conversation']:.1f}x); "
        f"ours / naive {sim['ours_over_naive']:.3f}"
    )
    return report


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    report = asyncio.run(main_async(args))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
