"""`nanobot-summary status` for people: one entry per session, its parts filled into the terminal's width.

No tables: a table of ten columns at 80 columns wraps each cell into one-word lines. An entry starts with the
session and goes on, indented, with whole parts ("tokens 12,000 -> 3,000"), so the same text reads at 80
columns and spreads over fewer lines in a wide terminal. Values are words, never Python's reprs."""

from __future__ import annotations

import shutil
import textwrap
from datetime import datetime
from typing import Any

from nanobot_hooks.contract import utcnow
from worker.state.formats import memory_off

# Stands for a space inside one part while the entry is wrapped, so a part breaks only when it alone is too long.
_GLUE = "\ue000"
INDENT = "    "


def terminal_width() -> int:
    """The terminal's columns (COLUMNS when set, 100 when not a terminal), never under 40."""
    return max(40, shutil.get_terminal_size((100, 24)).columns)


def shown(value: str) -> str:
    """Data as one line: a newline or another control character in a session key is shown escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in value)


def entry(head: str, parts: list[str], width: int, long: str = "", after: str = " -") -> list[str]:
    """`head` (a session key, shown whole), `after` it, then the parts separated by "; ", wrapped at `width`
    with continuation lines indented; `long` (a free text such as a job's detail) follows, wrapped word by word."""
    glued = [part.replace(" ", _GLUE) for part in parts if part]
    text = " ".join([shown(head).replace(" ", _GLUE) + after, "; ".join(glued)]).strip()
    if long:
        text += (": " if glued else " ") + shown(long)
    lines = textwrap.wrap(text, width=width, initial_indent="  ", subsequent_indent=INDENT,
                          break_on_hyphens=False)
    return [line.replace(_GLUE, " ") for line in lines]


def since(moment: datetime | str) -> str:
    """How long ago `moment` was: "45s", "12m", "2.0h"."""
    moment = datetime.fromisoformat(moment) if isinstance(moment, str) else moment
    seconds = (utcnow() - moment).total_seconds()
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def ago(moment: datetime | str) -> str:
    return f"{since(moment)} ago"


def money(spend: dict[str, Any]) -> str:
    if spend["calls"] and spend["unpriced_calls"] == spend["calls"]:
        return "cost unknown"
    return f"${spend['cost']:.4f}" + ("+" if spend["unpriced_calls"] else "")


def arrow(what: str, before: int | None, after: int | None) -> str:
    return f"{what} {before:,} -> {after:,}" if before is not None and after is not None else ""


def beat(line: str) -> list[str]:
    """arq's health line "Nov-25 14:10:02 j_complete=3 j_failed=0 j_retried=0 j_ongoing=1 queued=1" in words."""
    stamp, _, rest = line.partition(" j_")
    fields = dict(part.split("=", 1) for part in f"j_{rest}".split() if "=" in part) if rest else {}
    done = ", ".join(f"{fields[name]} {label}" for name, label in (
        ("j_complete", "done"), ("j_failed", "failed"), ("j_retried", "retried")) if name in fields)
    return [f"last beat {stamp}", f"since it started: {done}" if done else "",
            f"{fields['j_ongoing']} running" if "j_ongoing" in fields else ""]


def plural(number: int, word: str) -> str:
    return f"{number:,} {word}" + ("" if number == 1 else "s")


def counts(stats: dict[str, int]) -> str:
    """{'applied': 4, 'stale': 1} -> "4 applied, 1 stale"."""
    return ", ".join(f"{number} {name}" for name, number in sorted(stats.items())) or "none yet"


SETTING_NAMES = {  # how a running worker's setting reads, in the order shown
    "auto_summary": "automatic summaries", "summary_model": "model", "summary_keep": "keep",
    "summary_interval": "interval (user messages)", "summary_threshold": "threshold",
    "summary_idle": "idle summaries", "summary_idle_keep": "idle keep", "summary_cache_ttl": "cache lifetime (s)",
    "summary_pickup": "pickup", "memory_write": "MEMORY.md writes", "memory_sessions": "MEMORY.md from",
    "summary_recall": "recall tool", "job_timeout": "job timeout (s)",
}


def setting_parts(settings: dict[str, Any]) -> list[str]:
    """The running worker's settings as words; names this version does not know are shown as they come."""
    def word(value: Any) -> str:
        if isinstance(value, bool) or value is None:
            return {True: "on", False: "off", None: "none"}[value]
        return str(value)
    known = [f"{label} {word(settings[name])}" for name, label in SETTING_NAMES.items() if name in settings]
    return known + [f"{name} {word(value)}" for name, value in settings.items() if name not in SETTING_NAMES]


def render(state: dict[str, Any], width: int) -> list[str]:
    """Every section of `status`, as lines no longer than `width` (a part longer than the line is broken)."""
    lines = _overview(state, width) + memory_lines(state, width)
    for title, entries in (("jobs in flight", [_job(job, width) for job in state["in_flight"]]),
                           ("records waiting for nanobot to apply them",
                            [_record(record, width) for record in state["pending_records"]]),
                           ("sessions resting after a failed or fruitless job (the trigger waits)",
                            [_rest(rest, width) for rest in state["resting"]]),
                           ("last job per session", [_outcome(outcome, width) for outcome in state["outcomes"]]),
                           ("summarizing spend per session, since its first job",
                            [_spend(key, spend, width) for key, spend in state["spend"]["sessions"].items()])):
        lines += ["", f"{title}: {len(entries) or 'none'}"] + [line for one in entries for line in one]
    return lines


def _overview(state: dict[str, Any], width: int) -> list[str]:
    health = state["worker"]
    lines = entry("worker:", ["alive", *beat(health)] if health else
                  ["NOT RUNNING: no health report (a live worker sends one every 30 s)"], width, after="")
    if state["worker_settings"] is not None:
        lines += entry("running with:", setting_parts(state["worker_settings"]), width, after="")
    elif health:
        lines += entry("running with:", ["settings not published by this worker"], width, after="")
    for report in state["workers"]:
        if report["stale"]:
            lines += entry(f"worker {report['host']}:{report['pid']}:", [
                f"STALE, silent for {report['silent_seconds'] or 0:,.0f}s", "it did not stop cleanly"], width, after="")
    stale = sum(1 for job in state["in_flight"] if job["stale"])
    flying = f"{len(state['in_flight'])} in flight" + (f" ({stale} stale)" if stale else "")
    lines += entry("queue:", [f"{plural(state['queued'], 'job')} waiting",
                              f"{state['deferred']} of them deferred to a retry",
                              f"{plural(state['idle_checks'], 'idle check')} waiting", flying], width, after="")
    total = state["spend"]["total"]
    lines += entry("nanobot's pickups:", [counts(state["pickups"])], width, after="")
    lines += entry("summarizing so far:", [plural(total["calls"], "call"), f"{total['prompt_tokens']:,} prompt tokens",
                                           f"{total['completion_tokens']:,} completion tokens", money(total)],
                   width, after="")
    return [line[2:] for line in lines]  # the overview starts at the margin; entries below are indented


def memory_lines(state: dict[str, Any], width: int) -> list[str]:
    """Where the daily notes and long-term facts are off, and why (worker.state.formats.memory_off)."""
    reasons = memory_off(state.get("answer_formats") or {}, state["outcomes"])
    return [line[2:] for reason in reasons for line in entry("MEMORY OFF:", [], width, reason, after="")]


def _job(job: dict[str, Any], width: int) -> list[str]:
    parts = [job["kind"], f"try {job['try']}" if job["try"] else ""]
    if job["stale"]:
        rerun = job["rerun_in_seconds"]
        parts.append("STALE" + (f", run again in {rerun}s" if rerun is not None else ""))
    return entry(job["session"] if job["session"] is not None else job["name"], parts, width, job["stale"] or "")


def _record(record: dict[str, Any], width: int) -> list[str]:
    return entry(record["session"], [f"made {ago(record['created_at'])}", f"trigger {record['reason']}",
                                     f"covers messages {record['start']}..{record['boundary'] - 1}",
                                     arrow("tokens", record["tokens_before"], record["tokens_after"]),
                                     arrow("messages", record["messages_before"], record["messages_after"])], width)


def _rest(rest: dict[str, Any], width: int) -> list[str]:
    return entry(rest["session"], [f"until {rest['until'][:19].replace('T', ' ')} UTC",
                                   f"{rest['failures']} failures in a row"], width, rest["reason"])


def _outcome(outcome: dict[str, Any], width: int) -> list[str]:
    spend = outcome["spend"]
    status = outcome["status"].upper() if outcome["status"] == "failed" else outcome["status"]
    if outcome["failures_in_a_row"] > 1:
        status += f" ({outcome['failures_in_a_row']} in a row)"
    took = f"took {outcome['seconds']:.1f}s" if outcome["seconds"] is not None else ""
    took += f" (try {outcome['job_try']})" if took and outcome["job_try"] > 1 else ""
    parts = [f"{status} {ago(outcome['finished_at'])}", f"trigger {outcome['reason']}",
             arrow("tokens", outcome["tokens_before"], outcome["tokens_after"]),
             arrow("messages", outcome["messages_before"], outcome["messages_after"]), outcome["model"],
             plural(spend["calls"], "call") if spend["calls"] else "",
             f"{spend['prompt_tokens'] + spend['completion_tokens']:,} tokens" if spend["calls"] else "",
             money(spend) if spend["calls"] else "",
             took]
    return entry(outcome["session_key"], parts, width, outcome["detail"])


def _spend(key: str, spend: dict[str, Any], width: int) -> list[str]:
    return entry(key, [plural(spend["calls"], "call"), f"{spend['prompt_tokens']:,} prompt tokens",
                       f"{spend['completion_tokens']:,} completion tokens", f"{spend['cached_tokens']:,} cached",
                       money(spend)], width)
