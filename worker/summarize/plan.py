"""A job's plan: where the chain starts, the cut it makes now, and the messages it would summarize (or why it skips).

The job and `enqueue --dry-run` both make it here."""

from __future__ import annotations

from dataclasses import dataclass, field

from nanobot_hooks.contract.records import SummarizeRequest, SummaryRecord
from worker.keep_rule import KeepRule
from worker.model.llm import context_window
from worker.nanobot.sessions import SessionFile
from worker.summarize.cut import Cut, cut_by, saves_enough, saving_floor
from worker.summarize.deps import Deps
from worker.text.prepare import Entry, Lines, transcript
from worker.text.tokens import count_message

# The fewest tokens a summary takes, whatever it covers: a cheap model's summary of two short turns measured 44
# tokens. Messages (and the previous summary) that add up to less than this over the saving asked for cannot come
# out shorter: the plan of a job queued by hand says so before the call is paid (--force calls anyway); an automatic
# one has NANOBOT_SUMMARY_MIN_SAVING's floor.
MIN_SUMMARY_TOKENS = 50


def chain_start(session: SessionFile, pending: SummaryRecord | None) -> tuple[int, str]:
    """Where to start, and the summary to fold in.

    An unapplied record that still fits counts as applied (an undo waiting for nanobot is no summary: line 1, undone
    already, is where to start)."""
    start, previous = session.last_archived, session.previous_summary
    if pending is not None and not pending.undoes and pending.boundary >= start:
        if pending.fits(start, len(session.messages), session.timestamp_before(pending.boundary)):
            return pending.boundary, pending.summary
    return start, previous


def window_for(deps: Deps, req: SummarizeRequest) -> int:
    return (
        deps.settings.summary_context_window
        or req.context_window
        or deps.nanobot.context_window
        or context_window(deps.model.model)
    )


@dataclass
class JobPlan:
    """What a job does with a session now: the cut, and the messages it would summarize; or why it skips.

    The job and `enqueue --dry-run` both make it here, so the dry run says exactly what the job would do."""

    start: int
    previous: str
    cut: Cut
    counts: list[int]
    window: int
    floor: float  # tokens it must take out of the context (saving_floor)
    covered_tokens: int = 0
    entries: list[Entry] = field(default_factory=list)
    skip: str | None = None  # the outcome's detail when nothing is to be summarized


def plan_job(
    deps: Deps, session: SessionFile, pending: SummaryRecord | None, req: SummarizeRequest, lines: Lines | None = None
) -> JobPlan:
    start, previous = chain_start(session, pending)
    cut, counts = plan_for(deps, session, start, req)
    window = window_for(deps, req)
    floor = saving_floor(req.reason, window, deps.settings.summary_min_saving, deps.settings.summary_idle_min_tokens)
    plan = JobPlan(start, previous, cut, counts, window, floor, sum(counts[cut.start : cut.boundary]))
    if cut.covered == 0:
        plan.skip = "nothing to cover beyond the keep rule"
    elif not saves_enough(plan.covered_tokens, floor):
        plan.skip = (
            f"too little to summarize ({plan.covered_tokens:,} of {floor:,.0f} tokens "
            + ("NANOBOT_SUMMARY_IDLE_MIN_TOKENS" if req.reason == "idle" else "NANOBOT_SUMMARY_MIN_SAVING")
            + " asks a summary to take out of the context)"
        )
    else:
        # Rendered only when it will be used (a 100,000-message session renders for long); hidden rows
        # (nanobot's checkpoint marker) and command messages drop out here, so a cut of only those is empty.
        plan.entries = transcript(session.messages, cut.start, cut.boundary, deps.counter, deps.tz, lines=lines)
        if not plan.entries:
            plan.skip = (
                f"nothing to cover beyond the keep rule (messages {cut.start}..{cut.boundary - 1} are "
                "nanobot's hidden or command rows)"
            )
        elif (
            req.reason == "manual"
            and not req.force
            and not saves_enough(plan.covered_tokens + deps.counter(previous) - MIN_SUMMARY_TOKENS, max(floor / 2, 1))
        ):
            plan.skip = (
                f"a summary would not shrink the context: the messages to cover hold "
                f"{plan.covered_tokens:,} tokens"
                + (f" and the previous summary {deps.counter(previous):,}" if previous else "")
                + f", and a summary takes {MIN_SUMMARY_TOKENS} or more; no model was called (wait for more "
                "messages, or enqueue --force to ask anyway)"
            )
    return plan


def plan_for(deps: Deps, session: SessionFile, start: int, req: SummarizeRequest) -> tuple[Cut, list[int]]:
    """The cut a job makes now, with each message's token count from the watermark on.

    The cut a job makes now (and `--dry-run` prints), with each message's token count from the watermark on (0 before
    it: no figure reads them, and counting a long history's old messages would be slow)."""
    first = min(start, session.last_archived)
    counts = [0] * first + [count_message(m, deps.counter) for m in session.messages[first:]]
    keep = KeepRule.parse(req.keep) if req.keep else deps.settings.summary_keep
    return cut_by(session.messages, start, counts, keep, window_for(deps, req), explicit=bool(req.keep)), counts
