"""`nanobot-summary status --prometheus`: the state status gathers, in Prometheus' text exposition format 0.0.4."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from nanobot_hooks.contract.records import utcnow
from worker.state.outcomes import STATUSES as OUTCOME_STATUSES

STATUSES = (*OUTCOME_STATUSES, "unknown")  # JobOutcome.status: "unknown" is another version's
PICKUP_RESULTS = ("applied", "stale", "duplicate", "forged", "replayed")  # counted by nanobot_hooks in Keys.stats
METRIC_PREFIX = "nanobot_summary_"

Samples = list[tuple[dict[str, str], float]]
Family = tuple[str, str, str, Samples]  # name, kind, help text, samples


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(value: str) -> str:
    return _escape_help(value).replace('"', '\\"')


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _family(name: str, kind: str, text: str, samples: Samples) -> list[str]:
    """One metric family: HELP and TYPE, then its samples (a family may have none yet)."""
    full = METRIC_PREFIX + name
    lines = [f"# HELP {full} {_escape_help(text)}", f"# TYPE {full} {kind}"]
    for labels, value in samples:
        inside = ",".join(f'{key}="{_escape_label(label)}"' for key, label in labels.items())
        lines.append(f"{full}{{{inside}}} {_number(value)}" if inside else f"{full} {_number(value)}")
    return lines


def _per_session(outcomes: list[dict[str, Any]], field: str) -> Samples:
    return [({"session": o["session_key"]}, o[field]) for o in outcomes if o[field] is not None]


def prometheus(state: dict[str, Any] | None, now: datetime | None = None) -> str:
    """The state as Prometheus metrics; `None` (Redis did not answer) gives only `redis_up 0`."""
    lines = _family(
        "redis_up", "gauge", "1 if Redis answered when these metrics were read.", [({}, 0 if state is None else 1)]
    )
    if state is None:
        return "\n".join(lines) + "\n"
    now = now or utcnow()
    families = _queue_families(state, now) + _spend_families(state) + _outcome_families(state["outcomes"])
    for name, kind, text, samples in families:
        lines += _family(name, kind, text, samples)
    return "\n".join(lines) + "\n"


def _queue_families(state: dict[str, Any], now: datetime) -> list[Family]:
    records = state["pending_records"]
    oldest = min((datetime.fromisoformat(r["created_at"]) for r in records), default=now)
    return [
        (
            "worker_up",
            "gauge",
            "1 if a worker is alive: arq's health-check key, rewritten every 30 s, is there.",
            [({}, 1 if state["worker"] else 0)],
        ),
        (
            "dead_workers",
            "gauge",
            "Workers whose report is left without a beat, or whose process ended: killed or "
            "frozen, and not replaced by a worker started since (a clean stop withdraws the report; a worker that "
            "publishes none is not counted).",
            [({}, sum(1 for report in state["workers"] if report["dead"]))],
        ),
        (
            "queue_depth",
            "gauge",
            "Summary jobs in the queue that no worker runs yet (deferred ones included, idle checks apart).",
            [({}, state["queued"])],
        ),
        (
            "queue_deferred",
            "gauge",
            "Queued jobs waiting for a later time (a retry's backoff).",
            [({}, state["deferred"])],
        ),
        (
            "idle_checks",
            "gauge",
            "Idle checks waiting for their sessions to be quiet past the cache lifetime.",
            [({}, state["idle_checks"])],
        ),
        (
            "jobs_in_flight",
            "gauge",
            "Jobs of this instance marked running (arq in-progress keys of its namespace).",
            [({}, len(state["in_flight"]))],
        ),
        (
            "jobs_in_flight_stale",
            "gauge",
            "Of those, jobs no live worker runs (killed or frozen worker): arq runs them again when the mark expires.",
            [({}, sum(1 for job in state["in_flight"] if job["stale"]))],
        ),
        ("pending_records", "gauge", "Finished summaries waiting for nanobot to apply them.", [({}, len(records))]),
        (
            "oldest_pending_record_age_seconds",
            "gauge",
            "Age of the oldest summary waiting for nanobot (0 when none): grows while no nanobot applies them.",
            [({}, max(0.0, (now - oldest).total_seconds()))],
        ),
        (
            "resting_sessions",
            "gauge",
            "Sessions resting after a failed or fruitless job (the trigger waits).",
            [({}, len(state["resting"]))],
        ),
        (
            "version_mismatches",
            "gauge",
            "Pairs of versions that differ between a running nanobot's hooks and a live "
            'worker (`status` says which and the command that fixes them); contract="differs": records or jobs of '
            "one are not read by the other.",
            [
                (
                    {"contract": "differs" if serious else "same"},
                    sum(1 for v in state.get("versions") or [] if v["serious"] == serious),
                )
                for serious in (True, False)
            ],
        ),
    ]


def _spend_families(state: dict[str, Any]) -> list[Family]:
    total = state["spend"]["total"]
    return [
        ("llm_calls_total", "counter", "Summarizing LLM calls since the first job.", [({}, total["calls"])]),
        (
            "prompt_tokens_total",
            "counter",
            "Prompt tokens of summarizing calls, as providers reported them.",
            [({}, total["prompt_tokens"])],
        ),
        (
            "completion_tokens_total",
            "counter",
            "Completion tokens of summarizing calls.",
            [({}, total["completion_tokens"])],
        ),
        (
            "cached_tokens_total",
            "counter",
            "Cached prompt tokens of summarizing calls.",
            [({}, total["cached_tokens"])],
        ),
        (
            "cost_usd_total",
            "counter",
            "What summarizing cost, in USD, from litellm's price table.",
            [({}, total["cost"])],
        ),
        (
            "unpriced_calls_total",
            "counter",
            "Summarizing calls of a model litellm has no price for.",
            [({}, total["unpriced_calls"])],
        ),
        (
            "pickups_total",
            "counter",
            "Records nanobot picked up: applied, stale (dropped, the session had changed), duplicate, forged (not "
            "signed with the instance's key: refused).",
            [
                ({"result": result}, state["pickups"].get(result, 0))
                for result in dict.fromkeys([*PICKUP_RESULTS, *sorted(state["pickups"])])
            ],
        ),
    ]


def _outcome_families(outcomes: list[dict[str, Any]]) -> list[Family]:
    return [
        (
            "last_outcome_status",
            "gauge",
            "1 for the status of the session's last job, 0 for the others.",
            [
                ({"session": o["session_key"], "status": status}, 1 if o["status"] == status else 0)
                for o in outcomes
                for status in STATUSES
            ],
        ),
        ("last_outcome_seconds", "gauge", "How long the session's last job ran.", _per_session(outcomes, "seconds")),
        (
            "last_outcome_finished_timestamp_seconds",
            "gauge",
            "When the session's last job ended (Unix time).",
            [({"session": o["session_key"]}, datetime.fromisoformat(o["finished_at"]).timestamp()) for o in outcomes],
        ),
        (
            "last_outcome_tokens_before",
            "gauge",
            "Replayed tokens before the session's last summary (estimate).",
            _per_session(outcomes, "tokens_before"),
        ),
        (
            "last_outcome_tokens_after",
            "gauge",
            "Replayed tokens after it, the summary included (estimate).",
            _per_session(outcomes, "tokens_after"),
        ),
    ]
