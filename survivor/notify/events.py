"""A job's events: what happened, with what an operator needs to act on it, under a stable id.

    >>> event = safe("cifar10", attempt=3, committed_step=1200, steps_lost=0, seconds=4.2, time="2026-11-30T10:00:05Z")
    >>> event.id, event.kind
    ('cifar10/safe/3', 'safe')
    >>> event.summary
    'cifar10: safe after the notice: step 1200 committed, 0 steps lost, 4.2 s from the notice to the commit'

An event's `id` names what it is about (the job, the kind, the attempt or record), never when it was
sent: the agent that saw it and a later look that finds it in the job's records (records.py) give it
the same id, so a receiver drops the second copy (delivery is at least once). Every builder is pure.

From the agent: `notice` (step, source), `safe` (steps lost, seconds from the notice to the commit),
`resumed` (step, seconds without a VM, restore seconds), `done` (steps, wall time, goodput,
preemptions, cost against on-demand), `failed` (reason, last committed step). From `survivor watch`:
`moved`, `switched`, `no_vm` (no training VM longer than a threshold, with the stockout's error),
`deadline_at_risk`, `budget_warning` and `budget_stopped`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Every kind of event, in the order docs/notifications.md lists them.
AGENT_KINDS = ("notice", "safe", "resumed", "done", "failed")
WATCH_KINDS = ("moved", "switched", "no_vm", "deadline_at_risk", "budget_warning", "budget_stopped")
KINDS = AGENT_KINDS + WATCH_KINDS


@dataclass(frozen=True)
class Event:
    """One thing that happened to a job. `facts` are plain JSON values (numbers, strings, None)."""

    id: str
    kind: str
    job: str
    time: str  # when it happened, ISO 8601 UTC
    summary: str  # one line for people
    facts: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The event as survivor's own JSON (the generic webhook's payload, formats.py)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "job": self.job,
            "time": self.time,
            "summary": self.summary,
            "facts": dict(self.facts),
        }


def _event(job: str, kind: str, key: Any, time: str, summary: str, **facts: Any) -> Event:
    return Event(id=f"{job}/{kind}/{key}", kind=kind, job=job, time=time, summary=f"{job}: {summary}", facts=facts)


def _seconds(value: float | None) -> str:
    if value is None:
        return "unknown"
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


# -- from the agent ------------------------------------------------------------------------------------


def notice(job: str, *, attempt: int, step: int | None, source: str, time: str) -> Event:
    """The VM got a notice (`source`: preempted, maintenance, signal) at `step`."""
    return _event(
        job,
        "notice",
        attempt,
        time,
        f"preemption notice ({source}) at step {step}; saving",
        attempt=attempt,
        step=step,
        source=source,
    )


def safe(
    job: str, *, attempt: int, committed_step: int | None, steps_lost: int | None, seconds: float | None, time: str
) -> Event:
    """The notice's checkpoint is committed: what was lost, and how long it took."""
    return _event(
        job,
        "safe",
        attempt,
        time,
        f"safe after the notice: step {committed_step} committed, {steps_lost} steps lost, "
        f"{_seconds(seconds)} from the notice to the commit",
        attempt=attempt,
        committed_step=committed_step,
        steps_lost=steps_lost,
        notice_to_commit_seconds=seconds,
    )


def resumed(
    job: str,
    *,
    attempt: int,
    step: int | None,
    without_vm_seconds: float | None,
    restore_seconds: float | None,
    time: str,
) -> Event:
    """A new VM restored the job at `step` after `without_vm_seconds` without one."""
    return _event(
        job,
        "resumed",
        attempt,
        time,
        f"resumed at step {step} after {_seconds(without_vm_seconds)} without a VM "
        f"(restore {_seconds(restore_seconds)})",
        attempt=attempt,
        step=step,
        without_vm_seconds=without_vm_seconds,
        restore_seconds=restore_seconds,
    )


def done(
    job: str,
    *,
    steps: int | None,
    wall_seconds: float | None,
    goodput: float | None,
    preemptions: int,
    cost: float | None,
    on_demand_cost: float | None,
    time: str,
) -> Event:
    """DONE: the job's figures, its cost beside the same job on on-demand (USD, as `survivor report`)."""
    saving = None if cost is None or on_demand_cost is None else round(on_demand_cost - cost, 4)
    share = "unknown" if goodput is None else f"{goodput:.0%}"
    return _event(
        job,
        "done",
        "done",
        time,
        f"DONE at step {steps} in {_seconds(wall_seconds)}, goodput {share}, {preemptions} preemptions, "
        f"cost {_usd(cost)} against {_usd(on_demand_cost)} on-demand",
        steps=steps,
        wall_seconds=wall_seconds,
        goodput=goodput,
        preemptions=preemptions,
        cost_usd=cost,
        on_demand_cost_usd=on_demand_cost,
        saving_usd=saving,
    )


def failed(job: str, *, reason: str, committed_step: int | None, time: str) -> Event:
    """FAILED: why, and the last committed step (what a fixed job resumes from)."""
    return _event(
        job,
        "failed",
        "failed",
        time,
        f"FAILED: {reason[:300]}; last committed step {committed_step}",
        reason=reason[:2000],
        committed_step=committed_step,
    )


# -- from the watch ------------------------------------------------------------------------------------


def moved(job: str, *, from_place: str, to_place: str, why: str, time: str) -> Event:
    """The group moved for capacity (survivor/jobdir/moves.py)."""
    return _event(
        job,
        "moved",
        time,
        time,
        f"moved from {from_place} to {to_place}: {why}",
        from_place=from_place,
        to_place=to_place,
        why=why,
    )


def switched(job: str, *, from_mode: str, to_mode: str, why: str, time: str) -> Event:
    """The group switched between Spot, on-demand and flex-start (survivor/jobdir/switches.py)."""
    return _event(
        job,
        "switched",
        time,
        time,
        f"switched from {from_mode or 'spot'} to {to_mode}: {why}",
        from_mode=from_mode or "spot",
        to_mode=to_mode,
        why=why,
    )


def no_vm(job: str, *, since: str, minutes: float, error: str, time: str) -> Event:
    """No training VM since `since`, longer than the threshold; `error` is why (a stockout's)."""
    return _event(
        job,
        "no_vm",
        since,
        time,
        f"no training VM for {minutes:.0f} min" + (f": {error}" if error else ""),
        since=since,
        minutes=round(minutes, 1),
        error=error,
    )


def deadline_at_risk(job: str, *, reason: str, slack_hours: float | None, key: str, time: str) -> Event:
    """The deadline policy's slack is gone (`slack_hours` < 0): the job may miss its deadline."""
    return _event(
        job, "deadline_at_risk", key, time, f"deadline at risk: {reason}", reason=reason, slack_hours=slack_hours
    )


def budget_warning(job: str, *, spent: float, budget: float, share: float, time: str) -> Event:
    """The job has spent `share` of its budget."""
    return _event(
        job,
        "budget_warning",
        f"{budget:g}-{share:g}",
        time,
        f"has spent {_usd(spent)} of its {_usd(budget)} budget ({spent / budget:.0%})",
        spent_usd=round(spent, 4),
        budget_usd=budget,
        warn_at=share,
    )


def budget_stopped(job: str, *, spent: float, budget: float, committed_step: int | None, time: str) -> Event:
    """The job reached its budget and stopped, committed; `survivor start --budget` resumes it."""
    return _event(
        job,
        "budget_stopped",
        f"{budget:g}",
        time,
        f"stopped at its {_usd(budget)} budget ({_usd(spent)} spent), step {committed_step} committed; "
        "raise it with `survivor start --budget USD` to go on",
        spent_usd=round(spent, 4),
        budget_usd=budget,
        committed_step=committed_step,
    )
