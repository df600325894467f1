"""The side-by-side benchmark keeps working: its cache billing, and a smoke-sized run through the real gateway."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from .nanobot_fixtures import find_nanobot

ROOT = Path(__file__).resolve().parent.parent


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_compare", ROOT / "scripts" / "bench_compare.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_cache_bills_the_prefix_shared_with_a_recent_request_in_blocks():
    bench = load_bench()
    provider = bench.Provider(0, 0, 0, 100, 100, cache_ttl=10.0)
    first = list(range(5000))
    assert provider.cached_prefix("m", first, now=0.0) == 0, "nothing cached yet"
    grown = first + list(range(9000, 9700))
    assert provider.cached_prefix("m", grown, now=1.0) == 4992, "the shared 5,000 tokens, in 128-token blocks"
    changed = first[:1500] + [7] + first[1501:]
    assert provider.cached_prefix("m", changed, now=2.0) == 1408, "the cache ends where the prompt changed"
    assert provider.cached_prefix("other", first, now=3.0) == 0, "per model"
    assert provider.cached_prefix("m", first[:1000] + [1], now=4.0) == 0, "under 1,024 tokens nothing is cached"
    assert provider.cached_prefix("m", grown, now=30.0) == 0, "expired after its lifetime"


def test_the_naive_design_rereads_the_history_and_ours_reads_it_once():
    bench = load_bench()
    sim = bench.naive_vs_ours(turn_tokens=100, reply_tokens=50, summary_tokens=200, interval=10, turns=1000,
                              keep_tokens=300)
    assert sim["conversation_tokens"] == 150_000
    assert sim["naive_input"] == sum(150 * n for n in range(10, 1001, 10))
    # Every message once (up to the last kept tail) plus the previous summary each of the 100 times.
    assert sim["ours_input"] == 150_000 - 300 + 100 * 200


def test_a_smoke_run_through_the_gateway_writes_every_figure(tmp_path):
    exe = find_nanobot()
    out = tmp_path / "figures.json"
    env = {**os.environ, "NANOBOT_BIN": str(exe)}
    done = subprocess.run([sys.executable, "scripts/bench_compare.py", "--smoke", "--quiet", "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text(encoding="utf-8"))
    figures = report["windows"]["32000"]["figures"]
    alone, ours = figures["alone"], figures["ours"]
    assert alone["turns"] == ours["turns"] == 8 and alone["main_calls"] >= 8
    assert alone["summary_calls"] == 0 and ours["summary_calls"] >= 1, "the worker summarized"
    assert alone["nanobot_compactions"] >= 1, "the smoke conversation is long enough for nanobot to compact"
    assert 0 < alone["cached_share"] < 1 and alone["main_input_cost"] < alone["main_prompt_tokens"]
    assert set(report["windows"]["32000"]["ratios"]["ours"]) >= {"main_prompt_tokens", "main_input_cost"}
    assert report["sim_1000_turns"]["ours_over_conversation"] < report["sim_1000_turns"]["naive_over_conversation"]
    assert "ours / alone" in done.stdout
