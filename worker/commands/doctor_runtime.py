"""`doctor`'s checks of the running system, read from Redis as `status` reads it.

Is a worker alive (or was one killed), do the running nanobots' hooks and the worker run one version, does the queue
move, did jobs fail in the last hour, can Redis lose jobs (eviction, memory), and do finished summaries wait for nanobot
too long."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from arq.connections import ArqRedis
from redis.exceptions import ResponseError

from nanobot_hooks.contract.client import close_client
from nanobot_hooks.contract.records import utcnow
from nanobot_hooks.settings import SHARED_SETTINGS, HookSettings, plain_setting
from worker.commands.checks import Check, Level
from worker.commands.status_text import ago, beat, plural, since
from worker.connections import open_pool, redis_problem
from worker.errors import NanobotConfigError
from worker.nanobot.config import NanobotConfig
from worker.settings import Settings, SettingsError
from worker.state.formats import memory_off
from worker.state.liveness import nanobots
from worker.state.outcomes import JobOutcome, headline
from worker.state.snapshot import gather

START = "start it: scripts/run-worker (systemd: sudo systemctl restart nanobot-summary-worker)"
QUEUE_SLOW, QUEUE_STUCK = 120.0, 1800.0  # seconds a due job waited: the worker lags / nothing runs the queue
RECORD_TOO_OLD = 3600.0  # seconds a finished summary may wait for nanobot before doctor asks why
FAILED_RECENTLY = timedelta(hours=1)
MEMORY_FULL = 0.9  # share of Redis's maxmemory


async def runtime_checks(settings: Settings) -> list[Check]:
    try:  # the instance's namespace: its worker, queue and outcomes
        settings = settings.for_workspace(NanobotConfig.load(settings.config_path).workspace)
    except (SettingsError, NanobotConfigError):
        return []  # the config and sessions checks say why
    if redis_problem(settings.redis_url, keys=settings.keys, **settings.redis_options()):
        return []  # the Redis check says why
    redis = await open_pool(settings)
    try:
        state = await gather(redis)
        memory = await memory_info(redis)
        hooks = await nanobots(redis)
    finally:
        await close_client(redis)
    return (
        worker_checks(state, settings)
        + version_checks(state, hooks)
        + agreement_checks(state, hooks)
        + queue_checks(state)
        + memory_checks(memory)
        + record_checks(state)
        + outcome_checks(state)
        + notes_checks(state)
        + paused_checks(state)
    )


def paused_checks(state: dict[str, Any]) -> list[Check]:
    """The sessions paused by hand (`rest`, `undo --pause`): nothing summarizes them until resumed."""
    paused = [rest["session"] for rest in state.get("resting") or [] if rest.get("paused")]
    if not paused:
        return []
    shown = ", ".join(paused[:3]) + (f" and {len(paused) - 3} more" if len(paused) > 3 else "")
    return [
        Check(
            "ok",
            f"{len(paused)} session(s) paused by hand, summarized by nothing until resumed: {shown}",
            f"nanobot-summary end-rest {paused[0]} resumes it",
        )
    ]


def _names(jobs: list[dict[str, Any]]) -> str:
    names = [job["session"] or job["name"] for job in jobs]
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def worker_checks(state: dict[str, Any], settings: Settings) -> list[Check]:
    """The workers' checks: alive or not, jobs no live worker runs, settings that disagree with this shell's.

    Alive (arq's health line, unless its worker is seen gone), killed or frozen (a report left to age or whose process
    ended, and not replaced by a restarted worker), or never started; jobs marked running that no live worker runs (as
    status lists them); and a running worker whose settings disagree with this shell's."""
    dead = [report for report in state["workers"] if report["dead"]]
    jobs = stale_job_checks(state)
    if state["worker"] is None:
        # A clean stop withdraws the report: one left while arq's key has expired is a worker that died.
        if dead:
            return [
                Check("FAIL", f"no worker alive: the last one {_death(dead[0])}", f"see its log for why, then {START}")
            ] + jobs
        if jobs:
            return jobs
        auto = " (nanobot queues jobs that nothing runs)" if settings.auto_summary else ""
        # The namespace too: a worker started with another NANOBOT_SUMMARY_NAMESPACE than this shell's is not seen.
        return [
            Check(
                "FAIL",
                f"no worker is running for namespace {settings.summary_namespace}: no health report in Redis{auto}",
                START,
            )
        ]
    checks = [Check("ok", "worker alive: " + "; ".join(part for part in beat(state["worker"]) if part))]
    checks += [Check("warn", f"worker {_death(r)}; another worker runs", "see its log for why") for r in dead]
    return checks + jobs + settings_checks(state, settings)


def _death(report: dict[str, Any]) -> str:
    """How a worker died, in words: its process ended (seen on this machine) or it went silent."""
    who = f"({report['host']}:{report['pid']})"
    silent = f"{report['silent_seconds'] or 0:,.0f}s"
    if report.get("ended"):
        return f"{who} ended without stopping cleanly (killed, or crashed), {silent} after its last beat"
    return f"{who} went silent {silent} ago without stopping cleanly (killed, or frozen)"


def stale_job_checks(state: dict[str, Any]) -> list[Check]:
    """The jobs marked running that no live worker runs, as `status` marks them STALE.

    A FAIL while no worker is alive (nothing will run them until one starts), a warning beside a live one (it runs them
    again)."""
    stale = [job for job in state["in_flight"] if job["stale"]]
    if not stale:
        return []
    rerun = max((job["rerun_in_seconds"] or 0 for job in stale), default=0)
    what = (
        f"{len(stale)} job(s) marked running that no live worker runs ({_names(stale)}): "
        "their worker was killed or froze"
    )
    if state["worker"] is None:
        return [Check("FAIL", what, f"{START} (it runs them again within {rerun}s)")]
    return [Check("warn", what, f"nothing to do: a live worker runs them again within {rerun}s")]


def settings_checks(state: dict[str, Any], settings: Settings) -> list[Check]:
    """doctor's advice follows this shell's settings: say so when the running worker's differ."""
    running = state["worker_settings"] or {}
    if "auto_summary" in running and running["auto_summary"] != settings.auto_summary:
        word = {True: "on", False: "off"}
        runner = next((r.get("runner", "") for r in state["workers"] if not r["stale"]), "")
        return [
            Check(
                "warn",
                f"the running worker has automatic summaries {word[bool(running['auto_summary'])]}, "
                f"this shell {word[settings.auto_summary]}: the advice here follows this shell",
                DOCTOR_WITH.get(runner, DOCTOR_WITH[""]),
            )
        ]
    return []


def version_checks(state: dict[str, Any], hooks: list[dict[str, Any]]) -> list[Check]:
    """The running nanobots' hooks checked against the live workers' versions.

    The running nanobots' hooks against the live workers (as status and the page say it, liveness.version_mismatches): a
    FAIL when their contracts differ, a warning for another release of the same."""
    checks = [
        Check(
            "FAIL" if m["serious"] else "warn", f"{m['what']} (nanobot {m['nanobot']}, worker {m['worker']})", m["fix"]
        )
        for m in state.get("versions") or []
    ]
    live = [report for report in state["workers"] if not report["stale"]]
    if checks or not hooks or not live:
        return checks
    return [
        Check(
            "ok",
            f"nanobot's hooks ({len(hooks)} process(es)) and the worker run one version: "
            f"{live[0]['version']} (contract {live[0]['contract']})",
        )
    ]


# How doctor gets the worker's settings, by how the worker is run (nanobot_hooks.settings.runner).
DOCTOR_WITH = {
    "systemd": "run doctor with the worker's environment: set -a; . /etc/nanobot-summary-worker.env; set +a",
    "": "run doctor with the environment the worker was started with (the same NANOBOT_* variables exported)",
}
# Where a setting is changed, by how the process is run (nanobot_hooks.settings.runner).
WORKER_SETTINGS_GO = {
    "systemd": "/etc/nanobot-summary-worker.env, then sudo systemctl restart nanobot-summary-worker",
    "terminal": "the terminal that runs the worker (export NAME=value, then start scripts/run-worker again)",
    "": "the environment the worker is started with (the terminal or the process manager that runs "
    "scripts/run-worker; under Docker Compose deploy/worker.env), then restart it",
}
NANOBOT_SETTINGS_GO = {
    "systemd": "/etc/nanobot-summary-worker.env (nanobot-gateway.service reads it too), then sudo systemctl restart "
    "nanobot-gateway",
    "terminal": "the terminal that runs nanobot (export NAME=value, then start nanobot again)",
    "": "the environment nanobot is started with (the terminal or the process manager that runs it; under "
    "Docker Compose deploy/worker.env), then restart it",
}
AGREE_OR_FAIL = ("auto_summary", "memory_sessions")  # a difference queues jobs nothing wants, or leaks trust


def agreement_checks(state: dict[str, Any], hooks: list[dict[str, Any]]) -> list[Check]:
    """The settings both sides act on, compared between the running worker and each running nanobot.

    The settings nanobot's hooks and the worker both act on (SHARED_SETTINGS), compared between the running worker's
    report and each running nanobot's: each difference names the side that differs (the one off the default; both when
    neither is) and where the setting goes for how that side is run."""
    worker = state["worker_settings"]
    if worker is None or not hooks:
        return []
    live = [r for r in state["workers"] if not r["stale"]]
    where = WORKER_SETTINGS_GO.get(live[0].get("runner", "") if live else "", WORKER_SETTINGS_GO[""])
    checks = []
    for name in SHARED_SETTINGS:
        for nanobot in hooks:
            theirs = nanobot["settings"].get(name)
            if name not in worker or name not in nanobot["settings"] or theirs == worker[name]:
                continue
            checks.append(_disagreement(name, worker[name], theirs, nanobot, where))
    if not checks:
        return [
            Check(
                "ok",
                f"nanobot ({len(hooks)} process(es)) and the worker agree on "
                + ", ".join(HookSettings.env_name(name) for name in SHARED_SETTINGS),
            )
        ]
    return checks


def _disagreement(name: str, worker: Any, theirs: Any, nanobot: dict[str, Any], where: str) -> Check:
    variable = HookSettings.env_name(name)
    default = plain_setting(HookSettings.model_fields[name].default)
    who = f"nanobot ({nanobot.get('host')}:{nanobot.get('pid')})"
    changed = [side for side, value in (("the worker", worker), (who, theirs)) if value != default]
    which = f"{' and '.join(changed)}: changed from the default" if changed else "neither is the default"
    there = NANOBOT_SETTINGS_GO.get(str(nanobot.get("runner") or ""), NANOBOT_SETTINGS_GO[""])
    fix = {"the worker": f"the worker's is set in {where}", who: f"nanobot's in {there}"}
    level: Level = "FAIL" if name in AGREE_OR_FAIL else "warn"
    return Check(
        level,
        f"{variable} differs: the worker runs with {_value(worker)}, {who} with {_value(theirs)}; {which}",
        f"give {variable} one value on both sides: " + "; ".join(fix.values()),
    )


def _value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "unset"}[value]
    return f"{value:g}" if isinstance(value, float) else str(value)


def queue_checks(state: dict[str, Any]) -> list[Check]:
    waited = state["oldest_due_seconds"]
    waiting = f"{plural(state['queued'], 'job')} waiting, {plural(state['idle_checks'], 'idle check')}"
    if waited is None or waited < QUEUE_SLOW:
        return [Check("ok", f"queue moves: {waiting}, none overdue")]
    level: Level = "FAIL" if waited >= QUEUE_STUCK else "warn"
    fix = (
        START
        if state["worker"] is None
        else ("the worker cannot keep up: start another (docs/operations.md, Several workers)")
    )
    return [Check(level, f"queue: the oldest job that is due has waited {waited:,.0f}s for a worker ({waiting})", fix)]


async def memory_info(redis: ArqRedis) -> dict[str, Any] | None:
    """Redis's INFO memory; None when an ACL forbids it (a managed Redis may)."""
    try:
        return dict(await redis.info("memory"))
    except ResponseError:
        return None


def memory_checks(info: dict[str, Any] | None) -> list[Check]:
    """An evicting Redis drops queued jobs and waiting records when full; a full one refuses new ones."""
    if info is None:
        return [
            Check(
                "warn",
                "Redis refused INFO memory (ACL): its eviction policy and memory were not checked",
                "allow the user +info, or check maxmemory-policy is noeviction by hand",
            )
        ]
    used, limit = int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
    policy = str(info.get("maxmemory_policy", "noeviction"))
    size = f"{used / 1e6:,.1f} MB used " + (f"of {limit / 1e6:,.1f} MB" if limit else "(no maxmemory limit)")
    if limit and used >= MEMORY_FULL * limit:
        return [
            Check(
                "FAIL",
                f"Redis memory nearly full: {size} (maxmemory-policy {policy})",
                "raise maxmemory (redis-cli CONFIG SET maxmemory ...), or free the memory others use",
            )
        ]
    if limit and policy != "noeviction":
        return [
            Check(
                "warn",
                f"Redis evicts keys when full (maxmemory-policy {policy}; {size}): queued jobs and "
                "summaries waiting for nanobot can vanish",
                "redis-cli CONFIG SET maxmemory-policy noeviction (and in redis.conf), or a Redis of its own",
            )
        ]
    return [Check("ok", f"Redis memory: {size}, maxmemory-policy {policy}")]


def record_checks(state: dict[str, Any]) -> list[Check]:
    now = utcnow()
    old = [
        r
        for r in state["pending_records"]
        if (now - datetime.fromisoformat(r["created_at"])).total_seconds() > RECORD_TOO_OLD
    ]
    if not old:
        return [Check("ok", f"summaries waiting for nanobot: {len(state['pending_records'])}, none for long")]
    return [
        Check(
            "warn",
            f"the summary of {r['session']} has waited {since(r['created_at'])} for nanobot",
            "nanobot applies it at the session's next turn, a gateway with the hooks at once: are the hooks "
            "installed in the nanobot that serves it (see above)?",
        )
        for r in old[:5]
    ]


def outcome_checks(state: dict[str, Any]) -> list[Check]:
    outcomes = sorted((JobOutcome.model_validate(o) for o in state["outcomes"]), key=lambda o: o.finished_at)
    if not outcomes:
        return [
            Check(
                "ok",
                "no job has run yet",
                "nanobot-summary enqueue --dry-run cli:direct   # what a first summary would do",
            )
        ]
    since = utcnow() - FAILED_RECENTLY
    failed = [o for o in outcomes if o.status == "failed"]
    recent = [o for o in failed if o.finished_at >= since]
    checks = [
        Check(
            "FAIL" if o.finished_at >= since else "warn",
            f"last job {ago(o.finished_at)}: {_short(o)}",
            f"fix the above, then: nanobot-summary enqueue --wait {o.session_key}",
        )
        for o in failed[-5:]
    ]
    good = [o for o in outcomes if o.status != "failed"]
    if good:
        checks.append(Check("ok", f"last job {ago(good[-1].finished_at)}: {_short(good[-1])}"))
    if not recent:
        sessions = plural(len(outcomes), "session")
        checks.append(Check("ok", f"no job failed in the last hour (the last jobs of {sessions})"))
    return checks


def notes_checks(state: dict[str, Any]) -> list[Check]:
    """Where the daily notes and long-term facts are off, and why; a model read in plain lines says so."""
    learned = state.get("answer_formats") or {}
    checks = [
        Check(
            "ok",
            f"summary model {model} answers prose where JSON is asked for: its notes and facts are "
            "asked for as plain lines",
        )
        for model, known in learned.items()
        if known["format"] == "lines"
    ]
    return checks + [
        Check(
            "warn",
            f"{'memory off' if 'wrote no notes' in reason else 'memory'}: {reason}",
            "fix what it names (a model that answers neither format: NANOBOT_SUMMARY_MODEL); "
            "the daily run asks again for the notes a job could not write",
        )
        for reason in memory_off(learned, state["outcomes"])
    ]


def _short(outcome: JobOutcome) -> str:
    line = headline(outcome)
    return line if len(line) < 160 else line[:157] + "..."
