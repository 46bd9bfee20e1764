"""A job's budget: the watch's stop at it, and the start that raises it.

    >>> look(compute, group, spec, storage, say=print)       # `survivor watch`: the group kept at 0
    >>> start(compute, address, usd=400.0, say=print)        # `survivor start JOB --budget 400`

The stop itself is the agent's (survivor/agent/spending.py): at the budget it saves and commits as on
a notice, records the stop (survivor/jobdir/spending.py) and leaves its group, so nothing committed is
lost and the group is kept at size 0. The watch is the backstop: it records the stop for a job at its
budget whose agent did not (an older agent, one whose prices differ), which that agent then acts on
within its next check, and resizes the group to 0 as `survivor stop` does when a VM still runs
`grace_seconds` after the record (a VM that could not leave its group: the soft off's SIGTERM saves
it), or at once when no VM runs. `survivor start` refuses a job stopped at its budget, or past it,
unless `--budget` raises it above what was spent.

What the job has spent against its budget is survivor/policy/budget.py `budget_standing`: the
agent, the watch and `start` price it alike.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from typing import Any

from survivor.cloud.compute import Compute, GroupRef
from survivor.jobdir import spending
from survivor.jobdir.storage import JobStorage, open_storage
from survivor.jobdir.switches import parse_time
from survivor.policy.budget import budget_standing, stop_line
from survivor.spec import JobSpec

#: How long after the watch recorded the stop a VM that still runs is left to its agent (which
#: checks every `agent/spending.CHECK_SECONDS`, then saves within its grace seconds and leaves).
STOP_GRACE_SECONDS = 300.0


class BudgetRefused(Exception):
    """`survivor start` refused: the job is at its budget and `--budget` does not raise it above
    what was spent."""


@dataclass(frozen=True)
class BudgetStop:
    """What a look found at a job stopped at its budget: its record, and whether this look resized
    the group to 0 (`resized`)."""

    stopped: dict[str, Any]
    resized: bool = False


def look(
    compute: Compute,
    group: GroupRef,
    spec: JobSpec,
    storage: JobStorage,
    *,
    running: bool | None = None,
    say=lambda line: None,
    now: _dt.datetime | None = None,
    grace_seconds: float = STOP_GRACE_SECONDS,
) -> BudgetStop | None:
    """The watch's look at the budget: None while the job is under it (or has none). At it: the stop
    recorded if no one did (by="watch"; the agent acts on it at its next check), and the group
    resized to 0 when no VM runs, or when one still runs `grace_seconds` after the record.
    `running`: whether the group's VM runs (None: asked of the group when it matters)."""
    standing = budget_standing(spec, storage, zone=group.zone, now=now)
    stopped = standing.stopped
    if stopped is None:
        if not standing.over or standing.spent is None or standing.budget is None:
            return None
        stopped = spending.mark_stopped(
            storage, spent=standing.spent, budget=standing.budget, step=standing.committed_step, by="watch"
        )
    found = compute.get_group(group) or {}
    size = int(found.get("targetSize") or 0)
    now = now or _dt.datetime.now(_dt.timezone.utc)
    since = parse_time(str(stopped.get("time") or ""))
    late = since is None or (now - since).total_seconds() >= grace_seconds
    if size > 0 and running is None and not late:
        running = any(m["status"] == "RUNNING" for m in compute.managed_instances(group))
    if size > 0 and (late or not running):
        compute.resize_group(group, 0)
        say(f"job {spec.name}: {stop_line(spec.name, stopped)}; group {group.name} resized to 0")
        return BudgetStop(stopped, resized=True)
    say(
        f"job {spec.name}: {stop_line(spec.name, stopped)}"
        + (f"; its agent saves and leaves group {group.name}" if size > 0 else "")
    )
    return BudgetStop(stopped)


def start(compute: Compute, group: GroupRef, usd: float | None, *, say=lambda line: None) -> None:
    """`survivor start` for a job with a budget: with `usd`, the budget raised to it (recorded in the
    job dir, where it wins over the spec's); a job stopped at its budget, or past it, is refused
    unless `usd` is above what it spent. Then its stop's record is removed; the caller resizes the
    group."""
    from survivor.mig.templates import spec_of, template_body_of_base

    if usd is not None and not (math.isfinite(usd) and 0 < usd <= 1e9):
        raise BudgetRefused(f"--budget {usd!r}: expected US dollars, more than 0")
    found = compute.get_group(group)
    template = compute.get_template((found or {}).get("instanceTemplate", "").rsplit("/", 1)[-1]) if found else None
    spec = spec_of(template_body_of_base(compute, template)) if template else None
    if spec is None:
        if usd is not None:
            raise BudgetRefused(f"group {group.name}: no job spec found in its template; --budget needs it")
        return
    storage = open_storage(spec.job_dir, project=group.project)
    if (
        usd is None
        and spec.budget is None
        and spending.read_raised(storage) is None
        and spending.read_stopped(storage) is None
    ):
        return  # no budget: started as any job
    standing = budget_standing(spec, storage, zone=group.zone)
    spent = standing.spent
    if usd is not None:
        if spent is not None and usd <= spent:
            raise BudgetRefused(
                f"job {spec.name}: --budget {usd:g} is not above what it spent, ${spent:.2f}; give more to resume it"
            )
        spending.raise_budget(storage, usd)
        say(f"job {spec.name}: budget ${usd:g} (was {_money(standing.budget)}; ${spent or 0:.2f} spent)")
    elif standing.stopped is not None or standing.over:
        raise BudgetRefused(
            f"job {spec.name}: at its budget ({_money(standing.budget)}, ${spent or 0:.2f} "
            f"spent); `survivor start {spec.name} --budget USD` with more than ${spent or 0:.2f} "
            f"resumes it"
        )
    if standing.stopped is not None:
        spending.clear_stopped(storage)


def _money(usd: float | None) -> str:
    return "no budget" if usd is None else f"${usd:g}"
