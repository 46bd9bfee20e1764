"""What `survivor watch` tells a job's webhooks at each look, and the prices its events carry.

    >>> told = tell_look(spec, storage, running=False, now=now, error="ZONE_RESOURCE_POOL_EXHAUSTED")
    >>> [e.kind for e in told]                     # what the records hold that no one told, and the look's own
    ['moved', 'no_vm']

The agent tells each event as it happens (survivor/agent/boot.py); a look tells what the job's records
hold and no delivery record says was told (survivor/notify/records.py: the agent's exit abandons a
webhook still being retried, a move or switch the look itself just recorded), then its own
observations: no training VM for longer than a target's `no_vm_minutes` (with the reason the
group gave), the deadline at risk (the policy's slack below zero), and the budget's warning. A look is
not on any training path, so it waits for its deliveries (`DRAIN_SECONDS` at most) before it ends.
Costs are `survivor report`'s (survivor/operator/report.py), priced offline: the day's cached Billing
Catalog prices, else the offline table (survivor/cloud/catalog.py).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from survivor import log as logs
from survivor.jobdir.spending import budget_usd, read_raised
from survivor.jobdir.status import JobView, read_job
from survivor.jobdir.storage import JobStorage
from survivor.jobdir.switches import parse_time
from survivor.notify import events
from survivor.notify.delivery import Notifier
from survivor.notify.events import Event
from survivor.notify.records import job_events
from survivor.spec import Budget, JobSpec
from survivor.policy.cost import costs

log = logs.get("notify")

#: How long a look waits for its events to be told: under the 60 s an event has (retry.WEBHOOK).
DRAIN_SECONDS = 50.0


def idle_since(view: JobView, created: _dt.datetime | None = None) -> _dt.datetime | None:
    """Pure: since when the job has had no training VM, by its records: its last attempt's end (None
    while one runs or the job is over), or the group's creation before any attempt."""
    if view.state.done is not None or view.state.failed is not None:
        return None
    attempts = view.state.attempts
    if not attempts:
        return created
    last = max(attempts, key=lambda a: a.number)
    return parse_time(last.ended or "") if last.ended else None


def instance_error(members: list[dict[str, Any]]) -> str:
    """Pure: why the group has no VM, as its managed instances' `lastAttempt` says (a stockout's code
    and message), "" when none says."""
    for member in members:
        for error in ((member.get("lastAttempt") or {}).get("errors") or {}).get("errors") or []:
            text = ": ".join(part for part in (error.get("code"), error.get("message")) if part)
            if text:
                return text[:500]
    return ""


def look_events(
    spec: JobSpec,
    view: JobView,
    *,
    running: bool,
    now: _dt.datetime,
    error: str = "",
    slack_hours: float | None = None,
    deadline_reason: str = "",
    spent: float | None = None,
    created: _dt.datetime | None = None,
    cost: float | None = None,
    on_demand_cost: float | None = None,
    budget_usd: float | None = None,
) -> list[Event]:
    """Pure: every event a look tells: the records' (oldest first), then its own: no VM for longer than
    the smallest `no_vm_minutes` of the targets that want it, the deadline at risk (slack below 0),
    the budget's warning. `spent`: the job's cost so far (USD); `budget_usd`: its budget, when
    `survivor start --budget` raised the spec's (survivor/jobdir/spending.py)."""
    found = job_events(spec.name, view, cost=cost, on_demand_cost=on_demand_cost)
    stamp = now.astimezone(_dt.timezone.utc).isoformat(timespec="milliseconds")
    since = None if running else idle_since(view, created)
    thresholds = [t.no_vm_minutes for t in spec.notify if t.wants("no_vm")]
    if since is not None and thresholds and (now - since).total_seconds() >= 60 * min(thresholds):
        found.append(
            events.no_vm(
                spec.name,
                since=since.isoformat(timespec="milliseconds"),
                minutes=(now - since).total_seconds() / 60,
                error=error,
                time=stamp,
            )
        )
    if slack_hours is not None and slack_hours < 0 and view.state.done is None:
        found.append(
            events.deadline_at_risk(
                spec.name,
                reason=deadline_reason,
                slack_hours=round(slack_hours, 2),
                key=f"after-{len(view.state.attempts)}",
                time=stamp,
            )
        )
    usd = budget_usd or (spec.budget.usd if spec.budget else None)
    share = spec.budget.warn_at if spec.budget else Budget.warn_at
    if usd is not None and spent is not None and spent >= share * usd and view.budget_stopped is None:
        found.append(events.budget_warning(spec.name, spent=spent, budget=usd, share=share, time=stamp))
    return found


def tell(
    spec: JobSpec,
    storage: JobStorage,
    told: list[Event],
    *,
    drain_seconds: float = DRAIN_SECONDS,
    notifier: Notifier | None = None,
) -> Notifier | None:
    """Tells `told` (those the job dir has no delivery record of) to the spec's webhooks and waits
    `drain_seconds` at most for them; returns the notifier (None: the spec has no `notify:`)."""
    if not spec.notify:
        return None
    notifier = notifier or Notifier(spec.notify, storage=storage).start()
    notifier.tell(lambda: list(told) or None)
    if not notifier.drain(drain_seconds):
        log.warning("some events were not told in time; the next look tells them", seconds=drain_seconds)
    return notifier


def tell_look(
    spec: JobSpec,
    storage: JobStorage,
    *,
    running: bool,
    now: _dt.datetime | None = None,
    error: str = "",
    slack_hours: float | None = None,
    deadline_reason: str = "",
    created: _dt.datetime | None = None,
    zone: str | None = None,
    drain_seconds: float = DRAIN_SECONDS,
) -> list[Event]:
    """One look's telling (`survivor watch`): reads the job dir, prices it, tells `look_events` that
    no one told. Returns the events looked at. Never raises: a look's decisions matter more."""
    if not spec.notify:
        return []
    try:
        now = now or _dt.datetime.now(_dt.timezone.utc)
        view = read_job(storage.url, storage=storage, train_steps=spec.train_steps, now=now, created=created)
        cost, on_demand = costs(spec, view, zone)
        found = look_events(
            spec,
            view,
            running=running,
            now=now,
            error=error,
            slack_hours=slack_hours,
            deadline_reason=deadline_reason,
            spent=cost,
            created=created,
            cost=cost,
            on_demand_cost=on_demand,
            budget_usd=budget_usd(None, read_raised(storage)),
        )
        tell(spec, storage, found, drain_seconds=drain_seconds)
        return found
    except Exception as exc:  # noqa: BLE001 - telling never costs the look its decision
        log.warning("the look's events were not told", error=f"{type(exc).__name__}: {exc}")
        return []
