"""The side-by-side benchmark keeps working: its cache billing, and a smoke-sized run through the real gateway."""

from __future__ import annotations

import json

import pytest

from harness.fakellm import FakeRequest
from harness.nanobot_cli import find_nanobot


def load_bench():
    from tests.support.bench import load_bench as load

    return load("bench_compare")


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


def test_a_memory_write_is_counted_warm_when_the_main_model_was_called_within_the_cache_lifetime(monkeypatch):
    bench = load_bench()
    provider = bench.Provider(0, 0, 0, 100, 100, cache_ttl=10.0)
    clock = [0.0]
    monkeypatch.setattr(bench.time, "monotonic", lambda: clock[0])

    def turn(at: float, memory: str, summary: str = "") -> str:
        clock[0] = at
        system = f"identity\n\n---\n\n# Memory\n\n## Long-term Memory\n{memory}" + (
            f"\n\n---\n\n{bench.SUMMARY_SECTION}\n\n{summary}" if summary else ""
        )
        body = {"model": "main", "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]}
        provider(FakeRequest("/v1/chat/completions", {}, body, b"", at))
        return provider.calls[-1].memory_change

    assert turn(0.0, "- fact A") == "", "the first turn: nothing to compare with"
    assert turn(5.0, "- fact A", summary="a summary") == "", "a new summary is not a MEMORY.md change"
    assert turn(8.0, "- fact A\n- fact B") == "warm", "written 3 s after the last call: the cache was warm"
    assert turn(30.0, "- fact A\n- fact B\n- fact C") == "cold", "written in a pause past the cache lifetime"
    assert turn(31.0, "- fact A\n- fact B\n- fact C") == ""


def test_the_naive_design_rereads_the_history_and_ours_reads_it_once():
    bench = load_bench()
    sim = bench.naive_vs_ours(
        turn_tokens=100, reply_tokens=50, summary_tokens=200, interval=10, turns=1000, keep_tokens=300
    )
    assert sim["conversation_tokens"] == 150_000
    assert sim["naive_input"] == sum(150 * n for n in range(10, 1001, 10))
    # Every message once (up to the last kept tail) plus the previous summary each of the 100 times.
    assert sim["ours_input"] == 150_000 - 300 + 100 * 200


def test_the_conversation_pauses_after_every_nth_turn_and_plants_facts_early():
    bench = load_bench()
    script = bench.conversation(48, 300, pause=90.0, pause_every=12)
    assert [i for i, t in enumerate(script) if t.pause] == [12, 24, 36], "a pause after turns 12, 24 and 36"
    assert all(t.pause == 90.0 for t in script if t.pause)
    assert [i for i, t in enumerate(script) if t.fact] == [2, 14, 26, 38]
    assert not any(t.pause for t in bench.conversation(60, 300, pause=90.0, pause_every=0)), "0 = a steady chat"


def test_nanobot_alone_runs_at_its_defaults_and_with_idle_compaction_off():
    bench = load_bench()
    args = bench.parse(["--variant", "tuned:NANOBOT_SUMMARY_THRESHOLD=0.5,nanobot.idleCompactAfterMinutes=2"])
    runs = bench.variants(args.variant, args)
    assert list(runs) == ["alone", "alone-idle-off", "tuned"]
    configs = {name: bench.nanobot_defaults(32_000, args, v.nanobot) for name, v in runs.items()}
    assert configs["alone"]["idleCompactAfterMinutes"] == 1, "its default 15 minutes, scaled with the pauses"
    assert configs["alone"]["idleCompactCheckIntervalSeconds"] == 5
    assert configs["alone-idle-off"]["idleCompactAfterMinutes"] == 0
    assert configs["tuned"]["idleCompactAfterMinutes"] == 2, "a variant may set nanobot's own keys"
    assert runs["tuned"].settings == {"NANOBOT_SUMMARY_THRESHOLD": "0.5", "NANOBOT_SUMMARY_CACHE_TTL": "60"}
    assert bench.run_settings(runs["alone"])["NANOBOT_AUTO_SUMMARY"] == "false", "nanobot alone: the project off"
    assert bench.run_settings(runs["tuned"])["NANOBOT_SUMMARY_RECALL"] == "true"
    quiet = bench.variants(["norecall:NANOBOT_SUMMARY_RECALL=false"], args)["norecall"]
    assert bench.run_settings(quiet)["NANOBOT_SUMMARY_RECALL"] == "false", "a variant's setting wins"
    default = bench.variants([], args)
    assert default["memory"].settings["NANOBOT_MEMORY_SESSIONS"] == "websocket:bench", "a chat trusted with MEMORY.md"
    assert not default["alone"].ours and default["ours"].ours


def test_the_fake_summarizer_names_each_planted_fact_it_saw_as_a_fact():
    bench = load_bench()
    facts = bench.fake_facts("用户说 FACT-AK1234 和 FACT-BL5678，又说 FACT-AK1234")
    assert [f["text"] for f in facts] == [
        "用户新服务器的资产编号是 FACT-AK1234",
        "用户新服务器的资产编号是 FACT-BL5678",
    ]
    assert bench.fake_facts("nothing planted") == []


def test_goals_and_what_a_variant_misses():
    bench = load_bench()
    assert bench.goals(32_000, paused=True) == {
        "main_prompt_tokens": 0.8,
        "main_input_cost": 0.8,
        "all_input_cost": 0.6,
    }
    assert bench.goals(128_000, paused=True) == {"main_prompt_tokens": 0.6, "main_input_cost": 0.6}
    figures = {"turns_waiting": 0, "facts_lost": []}
    aims = bench.goals(32_000, paused=False)
    assert bench.verdict(figures, {"main_prompt_tokens": 0.7, "main_input_cost": 0.8}, aims) == []
    missed = bench.verdict(
        {"turns_waiting": 2, "facts_lost": ["FACT-AK1234"]}, {"main_prompt_tokens": 0.9, "main_input_cost": 0.5}, aims
    )
    assert missed == ["main_prompt_tokens 0.900 > 0.8", "2 turns waited", "facts lost: FACT-AK1234"]


@pytest.mark.slow  # three gateways: the comparison is of nanobot's own turns, alone and with the worker
@pytest.mark.timeout(600)  # beside two busy loops on a slow 2-core machine it took more than the slow tests' 300 s
def test_a_smoke_run_through_the_gateway_writes_every_figure(tmp_path, monkeypatch, capsys):
    # In this process, so its gateways and worker are forks of the test process's servers (harness/forks.py); the
    # script's own start is the same `main`.
    monkeypatch.setenv("NANOBOT_BIN", str(find_nanobot()))
    out = tmp_path / "figures.json"
    load_bench().main(["--smoke", "--quiet", "--json", str(out)])
    done = capsys.readouterr()
    report = json.loads(out.read_text(encoding="utf-8"))
    window = report["windows"]["32000"]
    figures = window["figures"]
    alone, off, ours = figures["alone"], figures["alone-idle-off"], figures["ours"]
    assert alone["turns"] == off["turns"] == ours["turns"] == 8 and alone["main_calls"] >= 8
    assert alone["summary_calls"] == 0, "nanobot alone runs no worker"
    assert ours["summary_calls"] >= 1, f"the worker summarized nothing:\n{done.err[-9000:]}"
    assert alone["nanobot_compactions"] >= 1, "the smoke conversation is long enough for nanobot to compact"
    assert 0 < alone["cached_share"] < 1 and alone["main_input_cost"] < alone["main_prompt_tokens"]
    assert ours["all_input_cost"] > ours["main_input_cost"], "the worker's input at a tenth is added"
    assert alone["all_input_cost"] == alone["main_input_cost"], "nanobot's compactions are main-model calls"
    assert set(window["ratios"]["ours"]) >= {"main_prompt_tokens", "main_input_cost", "all_input_cost"}
    assert set(window["ratios_vs_idle_off"]["ours"]) >= {"main_prompt_tokens", "main_input_cost"}
    assert window["variants"]["alone"]["nanobot"] == {"idleCompactAfterMinutes": 1}
    assert report["sim_1000_turns"]["ours_over_conversation"] < report["sim_1000_turns"]["naive_over_conversation"]
    assert "ours / alone" in done.out and "ours / alone-idle-off" in done.out
    assert ours["memory_changes"] == ours["memory_changes_warm"] == 0, "the smoke chat is not trusted with MEMORY.md"
