"""`nanobot-summary status` for people: one entry per session, its parts filled into the terminal's width.

No tables: a table of ten columns at 80 columns wraps each cell into one-word lines. An entry starts with the
session and goes on, indented, with whole parts ("tokens 12,000 -> 3,000"), so the same text reads at 80
columns and spreads over fewer lines in a wide terminal. Values are words, never Python's reprs; moments and lengths
are written as the web page writes them (worker.text.clock): in the instance's zone, named once at the top, with
how long ago beside, `2026-11-28 07:35:13 (3 min 12 s ago)`, and `4 min 55 s`."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable
from datetime import datetime, timezone, tzinfo
from typing import Any

from nanobot_hooks.contract.records import utcnow
from worker.state.formats import memory_off
from worker.state.liveness import health_fields
from worker.text.clock import duration, moment_text

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
    """One entry of the text: `head`, `after` it and the parts, wrapped at `width`.

    `head` (a session key, shown whole), `after` it, then the parts separated by "; ", wrapped at `width` with
    continuation lines indented; `long` (a free text such as a job's detail) follows, wrapped word by word."""
    glued = [part.replace(" ", _GLUE) for part in parts if part]
    text = " ".join([shown(head).replace(" ", _GLUE) + after, "; ".join(glued)]).strip()
    if long:
        text += (": " if glued else " ") + shown(long)
    lines = textwrap.wrap(text, width=width, initial_indent="  ", subsequent_indent=INDENT, break_on_hyphens=False)
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


def beat(line: str, last: str | None = None) -> list[str]:
    """arq's health line "Nov-25 14:10:02 j_complete=3 j_failed=0 j_retried=0 j_ongoing=1 queued=1" in words.

    Its counters are every job the process ran, idle checks and scheduled ones included (so they say so); arq counts a
    job put off for later (an idle check waiting for the session to be quiet) as retried, so that count says "put off or
    retried". The last beat is `last` when given (a worker's own report, in the named zone), else arq's zoneless
    stamp."""
    fields = health_fields(line) or {}
    done = ", ".join(
        f"{fields[name]} {label}"
        for name, label in (("jobs_done", "done"), ("jobs_failed", "failed"), ("jobs_retried", "put off or retried"))
        if name in fields
    )
    return [
        f"last beat {last or fields.get('last_beat', line)}",
        f"jobs since it started, idle checks and scheduled ones included: {done}" if done else "",
        f"{fields['jobs_running']} running" if "jobs_running" in fields else "",
    ]


def plural(number: int, word: str) -> str:
    return f"{number:,} {word}" + ("" if number == 1 else "s")


def counts(stats: dict[str, int]) -> str:
    """{'applied': 4, 'stale': 1} -> "4 applied, 1 stale"."""
    return ", ".join(f"{number} {name}" for name, number in sorted(stats.items())) or "none yet"


def keep_words(rule: Any) -> str:
    """A keep rule's text ("fraction:0.03") in words ("the last 3% of the window")."""
    kind, _, amount = str(rule).partition(":")
    try:
        number = float(amount)
    except ValueError:
        return str(rule)
    if number == 0:
        return "nothing"
    if kind == "fraction":
        return f"the last {number:.0%} of the window"
    named = {"messages": "message", "tokens": "token", "turns": "user turn"}.get(kind)
    return f"the last {plural(int(number), named)}" if named else str(rule)


def _sessions_words(patterns: Any) -> str:
    names = {"direct": "one-to-one chats", "*": "every session"}
    return ", ".join(names.get(part, part) for part in str(patterns).split(",") if part) or "no session"


def _on(value: Any) -> str:
    return {True: "on", False: "off"}.get(value, str(value))


SETTING_WORDS = {  # how a running worker's setting reads, in the order shown
    "auto_summary": lambda v: f"automatic summaries {_on(v)}",
    "summary_model": lambda v: f"model {v}",
    "summary_keep": lambda v: f"a summary keeps {keep_words(v)}",
    "summary_threshold": lambda v: f"summarizes at {float(v):.0%} of the window",
    "summary_interval": lambda v: f"or every {plural(int(v), 'user message')}" if v else "no message-count trigger",
    "summary_idle": lambda v: f"idle summaries {_on(v)}",
    "summary_idle_keep": lambda v: f"an idle summary keeps {keep_words(v)}",
    "summary_cache_ttl": lambda v: f"quiet after {float(v):g} s (the prompt cache's life)",
    "summary_pickup": lambda v: {
        "now": "applied before the next turn",
        "idle": "applied once the prompt cache is cold",
    }.get(v, f"pickup {v}"),
    "memory_write": lambda v: {
        "idle": "MEMORY.md written once every session is quiet",
        "now": "MEMORY.md written as each job ends",
    }.get(v, f"MEMORY.md writes {v}"),
    "memory_sessions": lambda v: f"MEMORY.md learns from {_sessions_words(v)}",
    "summary_recall": lambda v: f"recall tool {_on(v)}",
    "summary_recall_scope": lambda v: {
        "session": "recall searches the asking session",
        "trusted": "recall searches every trusted session",
    }.get(v, f"recall {v}"),
    "summary_context_window": lambda v: f"context window {int(v):,} tokens" if v else "nanobot's context window",
    "job_timeout": lambda v: f"a job may run {float(v):g} s",
}


def setting_parts(settings: dict[str, Any]) -> list[str]:
    """The running worker's settings as words.

    Names this version does not know, or a value it cannot read, are shown as they come."""

    def said(name: str, value: Any) -> str:
        try:
            return str(SETTING_WORDS[name](value))
        except (KeyError, TypeError, ValueError):
            return f"{name} {_on(value) if value is not None else 'none'}"

    known = [said(name, settings[name]) for name in SETTING_WORDS if name in settings]
    return known + [said(name, value) for name, value in settings.items() if name not in SETTING_WORDS]


# A moment as status writes it: `2026-11-28 07:35:13 (3 min 12 s ago)` in the instance's zone.
At = Callable[[Any], str]


def render(state: dict[str, Any], width: int, tz: tzinfo = timezone.utc, now: datetime | None = None) -> list[str]:
    """Every section of `status`, as lines no longer than `width` (a part longer than the line is broken).

    Moments in `tz` and from `now` (the time when not given)."""
    moment = now or utcnow()

    def at(value: Any) -> str:
        return moment_text(value, tz, moment)

    lines = _overview(state, width, at) + memory_lines(state, width)
    for title, entries in (
        ("jobs in flight", [_job(job, width) for job in state["in_flight"]]),
        (
            "records waiting for nanobot to apply them",
            [_record(record, width, at) for record in state["pending_records"]],
        ),
        (
            "records of another version, kept for the version that reads them",
            [
                entry(key, [], width, "written by another version of the worker; this one cannot read it", after="")
                for key in state.get("other_version_records") or []
            ],
        ),
        (
            "damaged records, dropped by nanobot's hooks at the session's next turn",
            [
                entry(key, [], width, "no record of any version (not JSON)", after="")
                for key in state.get("damaged_records") or []
            ],
        ),
        (
            "sessions resting (a failed or fruitless job) or paused (the trigger waits)",
            [_rest(rest, width, at) for rest in state["resting"]],
        ),
        (
            "last job per session",
            [
                _outcome(outcome, state["spend"]["sessions"].get(outcome["session_key"]), width, at)
                for outcome in state["outcomes"]
            ],
        ),
    ):
        lines += ["", f"{title}: {len(entries) or 'none'}"] + [line for one in entries for line in one]
    # A session's spend is told in its last job's entry; only the sessions without one get their own.
    listed = {outcome["session_key"] for outcome in state["outcomes"]}
    others = [_spend(key, spend, width) for key, spend in state["spend"]["sessions"].items() if key not in listed]
    if others:
        lines += ["", f"summarizing spend of the other sessions, since their first job: {len(others)}"]
        lines += [line for one in others for line in one]
    return lines


def _overview(state: dict[str, Any], width: int, at: At) -> list[str]:
    health = state["worker"]
    # The newest live worker's own report dates its beat in UTC; arq's line is in the worker's local time, unnamed.
    beats = [report["heartbeat_at"] for report in state["workers"] if not report["dead"] and report.get("heartbeat_at")]
    lines = entry(
        "worker:",
        ["alive", *beat(health, at(beats[0]) if beats else None)]
        if health
        else ["NOT RUNNING: no health report (a live worker sends one every 30 s)"],
        width,
        after="",
    )
    if state["worker_settings"] is not None:
        lines += entry("running with:", setting_parts(state["worker_settings"]), width, after="")
    elif health:
        lines += entry("running with:", ["settings not published by this worker"], width, after="")
    for report in state["workers"]:
        if report["dead"]:  # a dead worker a restarted one replaced is no longer news
            ended = "its process ended" if report.get("ended") else "it did not stop cleanly"
            lines += entry(
                f"worker {report['host']}:{report['pid']}:",
                [f"STALE, silent for {duration(report['silent_seconds'] or 0)}", ended],
                width,
                after="",
            )
    for mismatch in state.get("versions") or []:  # nanobot's hooks and the worker of different versions
        head = "VERSION MISMATCH:" if mismatch["serious"] else "versions differ:"
        lines += entry(
            head, [], width, f"{mismatch['what']} (nanobot {mismatch['nanobot']}); fix: {mismatch['fix']}", after=""
        )
    stale = sum(1 for job in state["in_flight"] if job["stale"])
    flying = f"{len(state['in_flight'])} in flight" + (f" ({stale} stale)" if stale else "")
    lines += entry(
        "queue:",
        [
            f"{plural(state['queued'], 'job')} waiting",
            f"{state['deferred']} of them deferred to a retry",
            f"{plural(state['idle_checks'], 'idle check')} waiting",
            flying,
        ],
        width,
        after="",
    )
    total = state["spend"]["total"]
    lines += entry("nanobot's pickups:", [counts(state["pickups"])], width, after="")
    lines += entry(
        "summarizing so far:",
        [
            plural(total["calls"], "call"),
            f"{total['prompt_tokens']:,} prompt tokens",
            f"{total['completion_tokens']:,} completion tokens",
            money(total),
        ],
        width,
        after="",
    )
    return [line[2:] for line in lines]  # the overview starts at the margin; entries below are indented


def memory_lines(state: dict[str, Any], width: int) -> list[str]:
    """Where the daily notes and long-term facts are off or run on the fallback, and why.

    Where the daily notes and long-term facts are off or run on the fallback, and why
    (worker.state.formats.memory_off)."""
    reasons = memory_off(state.get("answer_formats") or {}, state["outcomes"])
    return [
        line[2:]
        for reason in reasons
        for line in entry("MEMORY OFF:" if "wrote no notes" in reason else "MEMORY:", [], width, reason, after="")
    ]


def _job(job: dict[str, Any], width: int) -> list[str]:
    parts = [job["kind"], f"try {job['try']}" if job["try"] else ""]
    if job["stale"]:
        rerun = job["rerun_in_seconds"]
        parts.append("STALE" + (f", run again in {duration(rerun)}" if rerun is not None else ""))
    return entry(job["session"] if job["session"] is not None else job["name"], parts, width, job["stale"] or "")


def _record(record: dict[str, Any], width: int, at: At) -> list[str]:
    return entry(
        record["session"],
        [
            f"made {at(record['created_at'])}",
            f"trigger {record['reason']}",
            f"covers messages {record['start']}..{record['boundary'] - 1}",
            arrow("tokens", record["tokens_before"], record["tokens_after"]),
            arrow("messages", record["messages_before"], record["messages_after"]),
        ],
        width,
    )


def _rest(rest: dict[str, Any], width: int, at: At) -> list[str]:
    if rest.get("paused"):
        return entry(
            rest["session"],
            ["paused until resumed", f"nanobot-summary end-rest {rest['session']}"],
            width,
            rest["reason"],
        )
    return entry(
        rest["session"], [f"until {at(rest['until'])}", f"{rest['failures']} failures in a row"], width, rest["reason"]
    )


def _outcome(outcome: dict[str, Any], session: dict[str, Any] | None, width: int, at: At) -> list[str]:
    spend = outcome["spend"]
    status = outcome["status"].upper() if outcome["status"] == "failed" else outcome["status"]
    if outcome["failures_in_a_row"] > 1:
        status += f" ({outcome['failures_in_a_row']} in a row)"
    took = f"took {duration(outcome['seconds'])}" if outcome["seconds"] is not None else ""
    took += f" (try {outcome['job_try']})" if took and outcome["job_try"] > 1 else ""
    if outcome.get("unknown"):  # written by another version of the worker
        status += f" (another version's: this one does not know its {outcome['unknown']})"
    parts = [
        at(outcome["finished_at"]),
        f"trigger {outcome['reason']}",
        arrow("tokens", outcome["tokens_before"], outcome["tokens_after"]),
        arrow("messages", outcome["messages_before"], outcome["messages_after"]),
        outcome["model"],
        plural(spend["calls"], "call") if spend["calls"] else "",
        f"{spend['prompt_tokens'] + spend['completion_tokens']:,} tokens" if spend["calls"] else "",
        money(spend) if spend["calls"] else "",
        took,
        _all_jobs(spend, session),
    ]
    # The status after the key, the moment the first part: at 80 columns a long key and the two glued together
    # would push the status to the next line.
    return entry(outcome["session_key"], parts, width, outcome["detail"], after=f" - {status}")


def _all_jobs(last: dict[str, Any], session: dict[str, Any] | None) -> str:
    """The session's spend over all its jobs, when it is more than its last job's (said once, not twice)."""
    tokens = session["prompt_tokens"] + session["completion_tokens"] if session else 0
    if not session or (session["calls"], tokens) == (last["calls"], last["prompt_tokens"] + last["completion_tokens"]):
        return ""
    return f"all its jobs: {plural(session['calls'], 'call')}, {tokens:,} tokens, {money(session)}"


def _spend(key: str, spend: dict[str, Any], width: int) -> list[str]:
    return entry(
        key,
        [
            plural(spend["calls"], "call"),
            f"{spend['prompt_tokens']:,} prompt tokens",
            f"{spend['completion_tokens']:,} completion tokens",
            f"{spend['cached_tokens']:,} cached",
            money(spend),
        ],
        width,
    )
