"""The events a job's records hold: what the next look tells when the one that saw it could not.

    >>> [e.id for e in job_events("cifar10", view)]          # a JobView: survivor/jobdir/status.py
    ['cifar10/notice/1', 'cifar10/safe/1', 'cifar10/moved/2026-11-30T10:02:11.000+00:00', 'cifar10/resumed/2', ...]

An agent tells each event the moment it is about; its exit does not wait for a webhook, so an event
still being retried then is lost to that process. Every agent event is also in the job's records (the
attempt records, DONE, FAILED), as are the watch's moves and switches, and each gets the same id from
here as from the agent (survivor/notify/events.py): the next boot and `survivor watch` tell what the
job dir has no delivery record of (delivery.py), in the order it happened. Pure.
"""

from __future__ import annotations

import datetime as _dt

from survivor.jobdir.journal import NOTICED, Attempt, Timing
from survivor.jobdir.status import JobView
from survivor.jobdir.switches import parse_time
from survivor.notify import events
from survivor.notify.events import Event


def _iso(when: _dt.datetime) -> str:
    return when.astimezone(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _shifted(text: str | None, seconds: float) -> str:
    when = parse_time(text or "")
    return _iso(when + _dt.timedelta(seconds=seconds)) if when is not None else (text or "")


def without_vm_seconds(previous: Attempt | None, attempt: Attempt) -> float | None:
    """Pure: from the previous attempt's end to this attempt's VM's boot (None: not known)."""
    ended = parse_time(previous.ended or "") if previous else None
    booted = parse_time(attempt.booted or "") or parse_time(attempt.started)
    return round(max(0.0, (booted - ended).total_seconds()), 1) if ended and booted else None


def attempt_events(job: str, attempt: Attempt, previous: Attempt | None) -> list[Event]:
    """Pure: the agent's events an attempt record holds: `resumed` (its restore, after an earlier
    attempt), `notice` and `safe` (it ended on a notice)."""
    out = []
    if previous is not None and attempt.restored_from:  # restored a snapshot (the restore is over)
        restore = attempt.timings.get(Timing.RESTORE)
        out.append(
            events.resumed(
                job,
                attempt=attempt.number,
                step=attempt.restored_step,
                without_vm_seconds=without_vm_seconds(previous, attempt),
                restore_seconds=restore,
                time=_shifted(attempt.started, restore or 0.0),
            )
        )
    if attempt.notice and attempt.outcome in NOTICED:
        seconds = attempt.timings.get(Timing.NOTICE_TO_SAFE)
        out.append(
            events.notice(
                job,
                attempt=attempt.number,
                step=attempt.reached_step,
                source=attempt.notice,
                time=_shifted(attempt.ended, -(seconds or 0.0)),
            )
        )
        out.append(
            events.safe(
                job,
                attempt=attempt.number,
                committed_step=attempt.end_step,
                steps_lost=attempt.steps_lost,
                seconds=seconds,
                time=attempt.ended or "",
            )
        )
    return out


def done_event(
    job: str, view: JobView, *, cost: float | None = None, on_demand_cost: float | None = None
) -> Event | None:
    """Pure: DONE's event from one read of the job dir (None: not DONE), with the cost `survivor
    report` gives (survivor/operator/notices.py prices it)."""
    done = view.state.done
    if done is None:
        return None
    step = done.get("step")
    return events.done(
        job,
        steps=step if isinstance(step, int) else None,
        wall_seconds=round(view.ledger.wall_seconds, 1),
        goodput=None if view.ledger.goodput is None else round(view.ledger.goodput, 4),
        preemptions=view.state.preemptions,
        cost=cost,
        on_demand_cost=on_demand_cost,
        time=str(done.get("time") or ""),
    )


def failed_event(job: str, view: JobView) -> Event | None:
    """Pure: FAILED's event (None: not FAILED): its reason and the last committed step."""
    failed = view.state.failed
    if failed is None:
        return None
    reason = failed.get("reason")
    return events.failed(
        job,
        reason=reason if isinstance(reason, str) else "not recorded",
        committed_step=view.latest.step if view.latest else None,
        time=str(failed.get("time") or ""),
    )


def job_events(
    job: str, view: JobView, *, cost: float | None = None, on_demand_cost: float | None = None
) -> list[Event]:
    """Pure: every event the job's records hold, oldest first: each attempt's, each move and switch,
    DONE or FAILED, the stop at the budget."""
    out: list[Event] = []
    ordered = sorted(view.state.attempts, key=lambda a: a.number)
    for index, attempt in enumerate(ordered):
        out += attempt_events(job, attempt, ordered[index - 1] if index else None)
    out += [
        events.moved(job, from_place=m.from_place, to_place=m.to_place, why=m.reason, time=m.time) for m in view.moves
    ]
    out += [
        events.switched(job, from_mode=s.from_mode, to_mode=s.to_mode, why=s.reason, time=s.time) for s in view.switches
    ]
    out += [
        e
        for e in (done_event(job, view, cost=cost, on_demand_cost=on_demand_cost), failed_event(job, view))
        if e is not None
    ]
    stopped = view.budget_stopped
    if (
        stopped is not None
        and isinstance(stopped.get("spent_usd"), (int, float))
        and isinstance(stopped.get("budget_usd"), (int, float))
        and stopped["budget_usd"] > 0
    ):
        step = stopped.get("step")
        out.append(
            events.budget_stopped(
                job,
                spent=float(stopped["spent_usd"]),
                budget=float(stopped["budget_usd"]),
                committed_step=step if isinstance(step, int) else None,
                time=str(stopped.get("time") or ""),
            )
        )
    epoch = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)
    return sorted(out, key=lambda e: parse_time(e.time) or epoch)  # stable: an attempt's notice before its safe
