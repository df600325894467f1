"""Benchmark: nanobot's own compaction alone vs nanobot with this project, side by side through the real gateway.

One scripted conversation (mixed Chinese and English, planted facts, idle gaps) is sent over the WebSocket
channel of a real `nanobot gateway`, once with the project switched off (nanobot alone) and once with its
hooks and a real worker process. A fake OpenAI-compatible model answers every call on loopback with
latencies (a turn takes `--turn-latency`; a summary grows with its input) and bills them as providers do:
the longest prefix a request shares with a recent request of the same model (within the cache lifetime,
in 128-token blocks, from 1,024 tokens) is cached and costs a tenth. Time is scaled: `--time-scale 100`
plays a 5-minute cache lifetime and 20-minute pauses as 3 s and 12 s; the pauses between turns are at
least `--min-gap` (2 s), longer than a summary takes, as between a user's messages.

Prints a table per window and the ratios (project / nanobot alone); `--json FILE` writes every figure.
`--smoke` is a short run that only checks the script works. Prices: main-model input 1 per token, cached
input 0.1, output 4; the summary model a tenth of that.
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the worker runs from this checkout

from nanobot_hooks.contract import METADATA_KEY  # noqa: E402
from tests.support.fakellm import FakeLLM, FakeRequest, Reply  # noqa: E402
from tests.support.gateway import Gateway, nanobot_env, write_config  # noqa: E402
from tests.support.redis_server import RedisServer, free_port  # noqa: E402
from tests.support.sandbox import NanobotHome  # noqa: E402
from worker.tokens import cl100k_counter  # noqa: E402

SUMMARY_MODEL = "summarizer"
CHAT = "bench"
COMPACTION_MARK = "Create a compact replacement checkpoint"
FACT = re.compile(r"FACT-[A-Z]{2}\d{4}")
PRICE_CACHED, PRICE_OUTPUT, PRICE_SUMMARY = 0.1, 4.0, 0.1
CACHE_BLOCK, CACHE_MIN = 128, 1024

ZH = ("我们今天继续讨论博客的部署方案，服务器在上海机房，配置是四核八G。", "我更喜欢简洁的回答，不要太多客套话。",
      "昨天的构建又报错了，日志里说缓存目录没有写权限。", "周末想把数据库备份脚本改成每天凌晨三点跑。",
      "这个主题的字体在手机上显得太小，需要调整一下样式。", "上次说的那个队列超时问题，我觉得是重试次数设得太多。",
      "老板希望下个月之前把文档站点迁移到新的域名。", "我女儿下周二过生日，提醒我订一个蛋糕。",
      "中文和英文混排的时候，标点符号的宽度总是不一致。", "我们需要确认一下证书什么时候过期，别又忘了续期。",
      "如果换成更便宜的模型，总结的质量会不会下降很多？", "数据迁移之前一定要先做一次完整的快照。")
EN = ("The nginx config still points at the old upstream port.", "Let's keep the deploy script idempotent.",
      "Please check whether the Redis queue drains overnight.", "I tried the build again and it failed the same way.",
      "The staging server runs Debian 12 with Python 3.11.", "We should move the backups to object storage.",
      "Can you compare the two pricing plans for me?", "The theme build takes four minutes on the small runner.")
REPLY_ZH = ("好的，我来整理一下思路。", "建议先在测试环境验证，再推到生产。", "这里有三个可能的原因，我们逐一排查。",
            "可以先把日志级别调到调试模式。", "这个改动不大，风险可控。", "我把步骤列在下面。")
REPLY_EN = ("First, back up the current configuration.", "Then restart the service and watch the logs.",
            "If it still fails, roll back to the previous release.", "That should take about ten minutes.")


# -- the conversation -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Turn:
    text: str
    pause: float  # real-world seconds of silence before this message
    fact: str | None = None


def conversation(turns: int, chars: int, seed: int = 7) -> list[Turn]:
    """`turns` user messages of about `chars` characters, two thirds Chinese; a fact planted every
    ~12 turns; a pause of 20 minutes every ~15 turns, 30-90 s between the others."""
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
        pause = 1200.0 if i and i % 15 == 0 else rng.uniform(30, 90)
        out.append(Turn(" ".join(parts)[: chars + 40], pause, fact))
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


# -- the fake provider ------------------------------------------------------------------------------

@dataclass
class Call:
    kind: str  # turn | compaction | summary
    prompt: int
    cached: int
    completion: int
    started: float
    seconds: float


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

    def __call__(self, request: FakeRequest) -> Reply:
        body = request.body or {}
        model = str(body.get("model"))
        # What a provider reads, in its order: tools, then the messages.
        prompt_text = json.dumps(body.get("tools") or [], ensure_ascii=False) + "".join(
            f"\n<{m.get('role')}>\n" + (m["content"] if isinstance(m.get("content"), str)
                                        else json.dumps(m.get("content"), ensure_ascii=False))
            + (json.dumps(m["tool_calls"], ensure_ascii=False) if m.get("tool_calls") else "")
            for m in request.messages)
        tokens = self._encode(prompt_text)
        now = time.monotonic()
        with self._lock:
            cached = self.cached_prefix(model, tokens, now)
        if model == SUMMARY_MODEL:
            kind = "summary"
            text = json.dumps({"summary": fake_summary(prompt_text, self.summary_chars),
                               "daily_notes": [], "facts": []}, ensure_ascii=False)
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
            self.calls.append(Call(kind, len(tokens), cached, completion, now, delay))
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

    def figures(self) -> dict[str, Any]:
        main = [c for c in self.calls if c.kind in ("turn", "compaction")]
        summaries = [c for c in self.calls if c.kind == "summary"]
        prompt = sum(c.prompt for c in main)
        cached = sum(c.cached for c in main)
        input_cost = prompt - cached + PRICE_CACHED * cached
        output_cost = PRICE_OUTPUT * sum(c.completion for c in main)
        summary_cost = PRICE_SUMMARY * sum(c.prompt - c.cached + PRICE_CACHED * c.cached
                                           + PRICE_OUTPUT * c.completion for c in summaries)
        quiet = [lat for i, lat in enumerate(self.latencies) if i not in self.waited]
        return {
            "turns": self.turns,
            "latency_p50": statistics.median(self.latencies),
            "latency_p95": percentile(self.latencies, 0.95),
            "latency_max": max(self.latencies),
            "latency_p95_quiet_turns": percentile(quiet, 0.95) if quiet else None,
            "turns_waiting": len(self.waited),
            "main_calls": len(main),
            "main_prompt_tokens": prompt,
            "main_prompt_mean": prompt / max(len(main), 1),
            "main_prompt_max": max((c.prompt for c in main), default=0),
            "cached_share": cached / prompt if prompt else 0.0,
            "main_input_cost": input_cost,
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


async def run_one(name: str, window: int, script: list[Turn], args: argparse.Namespace, work: Path,
                  redis: RedisServer, db: int, ours: bool, settings: dict[str, str]) -> Run:
    provider = Provider(args.turn_latency, args.summary_base, args.summary_per_token, args.summary_chars,
                        args.reply_chars, args.cache_ttl / args.time_scale)
    folder = work / name
    folder.mkdir()
    with FakeLLM() as llm:
        llm.responder = provider
        home = NanobotHome.create(folder, llm.url)
        ws_port = free_port()
        write_config(home, llm.url, ws_port, contextWindowTokens=window, maxTokens=1024)
        redis_url = redis.url(db=db)
        base = {"TIKTOKEN_CACHE_DIR": tokenizer_dir(), "NANOBOT_SUMMARY_RECALL": "false" if not ours else "true"}
        env = nanobot_env(home, redis_url, **base,
                          **({"NANOBOT_AUTO_SUMMARY": "false"} if not ours else settings))
        worker = None
        if ours:
            worker_env = nanobot_env(home, redis_url, **base, **settings, NANOBOT_CONFIG=str(home.config_path),
                                     NANOBOT_SUMMARY_MODEL=f"openai/{SUMMARY_MODEL}")
            with open(folder / "worker.log", "wb") as log:  # the child keeps its own copy of the handle
                worker = subprocess.Popen([sys.executable, "-m", "worker"], cwd=ROOT, env=worker_env,
                                          stdout=log, stderr=subprocess.STDOUT)
        gateway = Gateway(nanobot_exe(), home, env, ws_port, folder / "gateway.log")
        await gateway.start()
        latencies: list[float] = []
        waited: list[int] = []
        applied: dict[str, float] = {}
        try:
            for i, turn in enumerate(script):
                if i:
                    await asyncio.sleep(max(turn.pause / args.time_scale, args.min_gap))
                before = len(provider.calls)
                started = time.monotonic()
                await gateway.say(CHAT, turn.text, timeout=300)
                latencies.append(time.monotonic() - started)
                if any(c.kind == "compaction" for c in provider.calls[before:]):
                    waited.append(i)
                note_applied(home, applied)
                if args.progress:
                    print(f"\r  {name}: turn {i + 1}/{len(script)}", end="", file=sys.stderr, flush=True)
            if args.progress:
                print(file=sys.stderr)
        finally:
            await gateway.stop()
            if worker is not None:
                worker.terminate()
                worker.wait(30)
        note_applied(home, applied)
        final = provider.last_prompt
        facts = {t.fact: t.fact in final for t in script if t.fact}
        return Run(name, window, len(script), latencies, waited, provider.calls,
                   ready_to_applied=list(applied.values()), facts_kept=facts)


def note_applied(home: NanobotHome, seen: dict[str, float]) -> None:
    """The summary nanobot applied last, from the session file's first line: when the worker finished it
    (`created_at`, UTC) and when nanobot applied it (`applied_at`, local time)."""
    try:
        with home.session_file(f"websocket:{CHAT}").open(encoding="utf-8") as handle:
            head = json.loads(handle.readline())
    except (OSError, ValueError):
        return
    applied = ((head.get("metadata") or {}).get(METADATA_KEY) or {}).get("applied")
    if isinstance(applied, dict) and applied.get("created_at") and applied["created_at"] not in seen:
        ready = datetime.fromisoformat(applied["created_at"].replace("Z", "+00:00"))
        done = datetime.fromisoformat(applied["applied_at"]).astimezone()
        seen[applied["created_at"]] = (done - ready).total_seconds()


# -- the 1,000-turn arithmetic ------------------------------------------------------------------------

def naive_vs_ours(turn_tokens: int, reply_tokens: int, summary_tokens: int, interval: int, turns: int,
                  keep_tokens: int, overhead: int = 0) -> dict[str, Any]:
    """Summarizing input over `turns` turns when every `interval` user messages a summary runs: the naive
    design (seed 000) re-reads the whole history each time; this project reads the previous summary and
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
    return {"turns": turns, "conversation_tokens": conversation_tokens, "naive_input": naive,
            "ours_input": ours, "ours_over_conversation": ours / conversation_tokens,
            "naive_over_conversation": naive / conversation_tokens, "ours_over_naive": ours / naive}


# -- output -------------------------------------------------------------------------------------------

ROWS = ("latency_p50", "latency_p95", "latency_p95_quiet_turns", "latency_max", "turns_waiting", "main_prompt_tokens", "main_prompt_mean",
        "main_prompt_max", "cached_share", "main_input_cost", "main_output_cost", "nanobot_compactions",
        "summary_calls", "summary_input_tokens", "summary_cost", "total_cost", "summaries_applied",
        "ready_to_applied_p50", "ready_to_applied_max", "facts_kept")
RATIOS = ("main_prompt_tokens", "main_input_cost", "total_cost", "latency_p95")


def show(window: int, runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    from rich.console import Console
    from rich.table import Table

    names = list(runs)
    table = Table(title=f"window {window:,} tokens, {runs[names[0]]['turns']} turns")
    table.add_column("figure")
    for name in names:
        table.add_column(name, justify="right")
    for row in ROWS:
        table.add_row(row, *(fmt(runs[n][row]) for n in names))
    ratios = {n: {r: runs[n][r] / runs["alone"][r] for r in RATIOS if runs["alone"][r]} for n in names if n != "alone"}
    quiet = runs["alone"]["latency_p95_quiet_turns"]
    for name, values in ratios.items():
        # The goal's yardstick: nanobot's own turns that needed no summarizing.
        values["latency_p95_vs_quiet"] = runs[name]["latency_p95"] / quiet if quiet else float("nan")
    for name, values in ratios.items():
        table.add_row(f"[bold]{name} / alone[/]", *("" for _ in names))
        for row, value in values.items():
            table.add_row(f"  {row}", *(f"{value:.3f}" if n == name else "" for n in names))
    Console().print(table)
    return ratios


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--window", type=int, nargs="+", default=[32_000, 128_000], help="context windows to run")
    parser.add_argument("--turns", type=int, nargs="+", default=[60, 100],
                        help="turns per window (one number for all, or one per window)")
    parser.add_argument("--chars", type=int, default=1700, help="characters per user message")
    parser.add_argument("--reply-chars", type=int, default=500, help="characters per assistant reply")
    parser.add_argument("--summary-chars", type=int, default=1200, help="characters of a summary (both sides)")
    parser.add_argument("--turn-latency", type=float, default=0.3, help="seconds per main-model turn call")
    parser.add_argument("--summary-base", type=float, default=1.0, help="seconds of any summarizing call")
    parser.add_argument("--summary-per-token", type=float, default=1 / 8000, help="more seconds per input token")
    parser.add_argument("--cache-ttl", type=float, default=300.0, help="provider cache lifetime, real seconds")
    parser.add_argument("--time-scale", type=float, default=100.0, help="real seconds per benchmark second")
    parser.add_argument("--min-gap", type=float, default=2.0,
                        help="shortest pause between turns, in benchmark seconds: a user takes longer to answer "
                             "than a summary takes, and scaling the pauses alone would reverse that")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:VAR=VALUE,...",
                        help="a run of the project with these settings (repeatable); default: defaults and "
                             "NANOBOT_SUMMARY_PICKUP=idle")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--smoke", action="store_true", help="a short run that only checks the script works")
    parser.add_argument("--quiet", dest="progress", action="store_false", help="no progress lines")
    args = parser.parse_args(argv)
    if args.smoke:
        args.window, args.turns, args.chars, args.reply_chars, args.min_gap = [32_000], [8], 6000, 300, 0.5
    if len(args.turns) not in (1, len(args.window)):
        parser.error("--turns takes one number, or one per --window")
    return args


def variants(specs: list[str], smoke: bool = False) -> dict[str, dict[str, str]]:
    if not specs:
        return {"ours": {}} if smoke else {"ours": {}, "ours-idle": {"NANOBOT_SUMMARY_PICKUP": "idle"}}
    out: dict[str, dict[str, str]] = {}
    for spec in specs:
        name, _, rest = spec.partition(":")
        out[name] = dict(item.split("=", 1) for item in rest.split(",") if item)
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    if cl100k_counter() is None:
        sys.exit("cl100k is not available: install the worker extra (pip install -e '.[worker]')")
    report: dict[str, Any] = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                              "windows": {}}
    projects = variants(args.variant, args.smoke)
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        work = Path(tmp)
        redis = RedisServer(work / "redis").start()
        try:
            db = 0
            for index, window in enumerate(args.window):
                turns = args.turns[index] if len(args.turns) > 1 else args.turns[0]
                script = conversation(turns, args.chars)
                runs: dict[str, dict[str, Any]] = {}
                raw: dict[str, Any] = {}
                for name, settings in [("alone", {}), *projects.items()]:
                    db += 1
                    if settings:
                        settings = {**settings, "NANOBOT_SUMMARY_CACHE_TTL": settings.get(
                            "NANOBOT_SUMMARY_CACHE_TTL", str(args.cache_ttl / args.time_scale))}
                    run = await run_one(f"{name}-{window}", window, script, args, work, redis, db % 16,
                                        ours=name != "alone", settings=settings)
                    runs[name] = run.figures()
                    raw[name] = {"latencies": run.latencies, "waited": run.waited,
                                 "calls": [asdict(c) for c in run.calls]}
                ratios = show(window, runs)
                report["windows"][str(window)] = {"figures": runs, "ratios": ratios, "settings": projects,
                                                  "raw": raw}
        finally:
            redis.stop()
    first = report["windows"][str(args.window[0])]["raw"]
    summaries = [c for name, r in first.items() if name != "alone" for c in r["calls"] if c["kind"] == "summary"]
    turn_calls = [c for c in first["alone"]["calls"] if c["kind"] == "turn"]
    counter = cl100k_counter()
    assert counter is not None
    script = conversation(50, args.chars)
    turn_tokens = round(statistics.mean(counter(t.text) for t in script))
    reply_tokens = round(statistics.mean(c["completion"] for c in turn_calls)) if turn_calls else 0
    summary_tokens = round(statistics.mean(c["completion"] for c in summaries)) if summaries else 400
    from worker.prompts import system_prompt
    overhead = counter(system_prompt("zh", 8000)) + 100  # the worker's instructions and the prompt's frame
    sim = naive_vs_ours(turn_tokens, reply_tokens, summary_tokens, interval=10, turns=1000,
                        keep_tokens=round(0.03 * args.window[0]), overhead=overhead)
    report["sim_1000_turns"] = sim
    print(f"1,000 turns, a summary every 10 user messages: summarizing input {sim['ours_input']:,} tokens "
          f"({sim['ours_over_conversation']:.2f}x the conversation's {sim['conversation_tokens']:,}); "
          f"the naive design {sim['naive_input']:,} ({sim['naive_over_conversation']:.1f}x); "
          f"ours / naive {sim['ours_over_naive']:.3f}")
    return report


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    report = asyncio.run(main_async(args))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
