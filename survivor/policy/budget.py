"""A job against its budget: what it has spent, priced as `survivor report` prices it, and its stop.

    >>> standing = budget_standing(spec, storage)           # priced as `survivor report` prices it
    >>> standing.spent, standing.budget, standing.over
    (251.3, 250.0, True)

The agent checks it at boot and while training (survivor/agent/spending.py), the watch at each look
and `survivor start` before it resumes a job (survivor/operator/budget.py: what acts on the stop).
Costs are survivor/policy/cost.py `costs`: the day's cached Billing Catalog prices, else the offline
table, so the agent, the watch and `start` price it alike. Reads the job dir; writes nothing.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

from survivor.jobdir import spending
from survivor.jobdir.status import read_job
from survivor.jobdir.storage import JobStorage
from survivor.policy.cost import costs
from survivor.spec import JobSpec


@dataclass(frozen=True)
class Standing:
    """A job against its budget: `budget` (USD; None: it has none), `spent` (USD so far, None: not
    priced), `stopped` (the stop's record, None: not stopped at it) and the committed step."""

    budget: float | None
    spent: float | None
    stopped: dict[str, Any] | None = None
    committed_step: int | None = None

    @property
    def over(self) -> bool:
        """At or past the budget."""
        return spending.over_budget(self.spent, self.budget)

    def to_json(self) -> dict[str, Any]:
        """`survivor status --json`'s `budget`."""
        return {"usd": self.budget, "spent_usd": self.spent, "stopped": self.stopped}


def budget_standing(
    spec: JobSpec, storage: JobStorage, *, zone: str | None = None, now: _dt.datetime | None = None
) -> Standing:
    """Reads the job dir once: its budget (raised, else the spec's), its stop, and what it has spent,
    priced as `survivor report` prices it (None for a job with no budget: nothing to price)."""
    budget = spending.budget_usd(spec.budget.usd if spec.budget else None, spending.read_raised(storage))
    stopped = spending.read_stopped(storage)
    if budget is None and stopped is None:
        return Standing(None, None)
    view = read_job(storage.url, storage=storage, train_steps=spec.train_steps, now=now)
    spent, _ = costs(spec, view, zone)
    return Standing(budget, spent, stopped, view.latest.step if view.latest else None)


def stop_line(name: str, stopped: dict[str, Any], flag: str = "") -> str:
    """Pure: what `status` and the watch say of a job stopped at its budget."""
    spent, budget = spending.usd_of(stopped, "spent_usd"), spending.usd_of(stopped, "budget_usd")
    step = stopped.get("step")
    where = f" {flag}" if flag else ""
    return (
        f"stopped at its budget: ${spent or 0:.2f} of ${budget or 0:.2f} spent, "
        f"{'nothing' if step is None else f'step {step}'} committed ({stopped.get('by') or '?'}, "
        f"{str(stopped.get('time') or '')[:19]}); `survivor start {name}{where} --budget USD` raises it and "
        f"resumes"
    )
