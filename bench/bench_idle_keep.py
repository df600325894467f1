"""What an idle summary should keep verbatim: main-model tokens and cost of each keep rule, on bench_compare's
conversation.

A simulation, no model and no network: the conversation, replies and summaries of `bench/bench_compare.py`,
counted with cl100k, the cut made by the worker's own planner (`worker.summarize.plan.plan_for`, the idle keep rule as
the worker applies it). Every pause longer than the cache lifetime gets an idle summary (if it is worth
NANOBOT_SUMMARY_IDLE_MIN_TOKENS, as `worker.summarize.cut.saving_floor` decides); the 60% trigger stays
the safety net (its summary keeps the last exchange).
Billing as bench_compare's: a request's prefix shared with the previous request within the cache lifetime
is cached at a tenth of the price. The figures to weigh: what each rule adds to every later request, against
the last exchange being in the prompt verbatim (what a user's next message after a pause most often refers to).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_compare import PRICE_CACHED, conversation, fake_summary, reply_text
from worker.keep_rule import KeepRule
from worker.summarize.cut import cut_by, saving_floor
from worker.text.tokens import best_counter, count_message

RULES = ("off", "messages:0", "turns:1", "turns:2", "fraction:0.03")  # off: no idle summaries (the safety net only)
SAFETY_NET_KEEP = KeepRule("turns", 1)  # NANOBOT_SUMMARY_KEEP's default keeps the last user turn at least
BASE_PROMPT = 8_300  # nanobot's system prompt and 23 tool schemas, cl100k (measured through the gateway)


@dataclass
class Figures:
    prompt_tokens: int = 0
    input_cost: float = 0.0
    idle_summaries: int = 0
    kept_after_idle: int = 0
    first_after_pause: int = 0
    pauses: int = 0


def summarized_until(
    messages: list[dict[str, Any]], start: int, boundary: int, count: Callable[[str], int], args: argparse.Namespace
) -> tuple[int, int]:
    """The watermark after a summary of messages[start:boundary], and the tokens of that summary."""
    text = "\n".join(m["content"] for m in messages[start:boundary])
    return boundary, count(fake_summary(text, args.summary_chars))


def cached_tokens(request: list[int], previous: list[int] | None) -> int:
    """Tokens of the request's leading blocks equal to the previous request's: what the provider has cached."""
    shared = 0
    if previous is not None:
        for mine, theirs in zip(request, previous, strict=False):
            if mine != theirs:
                break
            shared += mine
    return shared


def simulate(rule: KeepRule | None, window: int, turns: int, args: argparse.Namespace) -> Figures:
    count = best_counter()
    script = conversation(turns, args.chars, args.pause, args.pause_every)
    messages: list[dict[str, Any]] = []
    counts: list[int] = []
    start = 0  # the watermark: messages before it are summarized
    summary = 0  # tokens of the rolling summary
    previous: list[int] | None = None  # the last request, as token blocks, for the cache
    figures = Figures()
    for i, turn in enumerate(script):
        cold = turn.pause > args.cache_ttl
        if cold and i:
            figures.pauses += 1
        if cold and i and rule is not None:
            boundary = cut_by(messages, start, counts, rule, window, explicit=True).boundary
            if sum(counts[start:boundary]) >= saving_floor("idle", window, args.min_saving, args.idle_min_tokens):
                start, summary = summarized_until(messages, start, boundary, count, args)
                figures.idle_summaries += 1
                figures.kept_after_idle += sum(counts[start:])
        user = {"role": "user", "content": turn.text}
        request = [BASE_PROMPT, summary, *counts[start:], count_message(user, count)]
        prompt = sum(request)
        shared = cached_tokens(request, None if cold else previous)
        figures.prompt_tokens += prompt
        figures.input_cost += (prompt - shared) + PRICE_CACHED * shared
        if cold and i:
            figures.first_after_pause += prompt
        previous = request
        reply = {"role": "assistant", "content": reply_text(turn.text[:40], args.reply_chars)}
        messages += [user, reply]
        counts += [count_message(user, count), count_message(reply, count)]
        if prompt >= 0.6 * window:  # the safety net, applied before the next turn
            boundary = cut_by(messages, start, counts, SAFETY_NET_KEEP, window).boundary
            start, summary = summarized_until(messages, start, boundary, count, args)
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--window", type=int, nargs="+", default=[32_000, 128_000])
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--chars", type=int, default=1700, help="characters per user message")
    parser.add_argument("--reply-chars", type=int, default=500, help="characters per assistant reply")
    parser.add_argument("--summary-chars", type=int, default=1200, help="characters of a summary")
    parser.add_argument("--pause", type=float, default=1200.0, help="seconds of a pause in the conversation")
    parser.add_argument("--pause-every", type=int, default=15, help="a pause after every N turns")
    parser.add_argument("--cache-ttl", type=float, default=300.0, help="provider cache lifetime, seconds")
    parser.add_argument("--min-saving", type=float, default=0.05, help="NANOBOT_SUMMARY_MIN_SAVING")
    parser.add_argument("--idle-min-tokens", type=int, default=2_000, help="NANOBOT_SUMMARY_IDLE_MIN_TOKENS")
    parser.add_argument("--rule", nargs="+", default=list(RULES), help="idle keep rules to compare")
    args = parser.parse_args(argv)
    for window in args.window:
        print(
            f"window {window:,}, {args.turns} turns, pauses of {args.pause:.0f} s every {args.pause_every} turns, "
            f"cache {args.cache_ttl:.0f} s"
        )
        print(
            f"  {'idle keep':<14} {'prompt tokens':>14} {'input cost':>11} {'idle sums':>9} "
            f"{'kept/idle':>9} {'1st after pause':>15}"
        )
        base = None
        for text in args.rule:
            rule = None if text == "off" else KeepRule.parse(text)
            f = simulate(rule, window, args.turns, args)
            base = base or f
            print(
                f"  {text:<14} {f.prompt_tokens:>14,} {f.input_cost:>11,.0f} {f.idle_summaries:>9} "
                f"{f.kept_after_idle / max(f.idle_summaries, 1):>9,.0f} "
                f"{f.first_after_pause / max(f.pauses, 1):>15,.0f}"
                f"   ({f.prompt_tokens / base.prompt_tokens:.2f}x / {f.input_cost / base.input_cost:.2f}x)"
            )


if __name__ == "__main__":
    main()
