"""The budget as a notice source: at the budget the agent saves and commits as on any notice, then stops.

    >>> source = BudgetSource(spec, storage, zone="us-west1-b")
    >>> watcher = NoticeWatcher(metadata, sources=default_sources(metadata) + [source]).start()
    >>> watcher.wait().source                     # once the job has spent its budget
    'budget'

A thread prices the job every `CHECK_SECONDS` (sooner when the rate it has spent at says the budget
comes sooner) as `survivor report` prices it (survivor/policy/budget.py `budget_standing`), and fires a
"budget" notice when the job is at its budget, or when the watch recorded the stop
(survivor/jobdir/spending.py). The notice takes the path every notice takes (SIGTERM the trainer, its
save committed, the final commit: survivor/agent/boot.py), so the stop loses nothing committed; the
boot's end then records the stop and leaves the group (its size 0) instead of waiting for a VM that is
not coming. A check that fails (the job dir, the prices) is logged and the next one tries again: the
budget never costs training its run.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING

from survivor import log as logs
from survivor.agent.notice import Fire
from survivor.jobdir.storage import JobStorage
from survivor.spec import JobSpec

if TYPE_CHECKING:
    from survivor.policy.budget import Standing

log = logs.get("budget")

#: How often the agent prices the job against its budget, at most; SURVIVOR_BUDGET_CHECK_SECONDS
#: overrides it (tests). A minute of a VM's price is what the stop may overshoot by, plus the save.
CHECK_SECONDS = 60.0
#: The soonest a next check comes, however close the budget.
MIN_CHECK_SECONDS = 1.0


def check_seconds() -> float:
    """The check's interval: `CHECK_SECONDS`, or $SURVIVOR_BUDGET_CHECK_SECONDS."""
    try:
        return max(0.1, float(os.environ.get("SURVIVOR_BUDGET_CHECK_SECONDS", CHECK_SECONDS)))
    except ValueError:
        return CHECK_SECONDS


def next_check(every: float, budget: float | None, spent: float | None, usd_per_second: float | None) -> float:
    """Pure: seconds to the next check: `every`, or sooner when the job, spending `usd_per_second`,
    reaches its budget sooner (never sooner than MIN_CHECK_SECONDS, unless `every` is)."""
    if budget is None or spent is None or not usd_per_second or usd_per_second <= 0:
        return every
    return max(min(every, MIN_CHECK_SECONDS), min(every, (budget - spent) / usd_per_second))


class BudgetSource:
    """Fires a "budget" notice once the job is at its budget (or the watch recorded its stop).
    `standing`: the last check's (survivor/policy/budget.py `Standing`), for the stop's record."""

    def __init__(self, spec: JobSpec, storage: JobStorage, *, zone: str | None = None, every: float | None = None):
        self.spec, self.storage, self.zone = spec, storage, zone
        self.every = check_seconds() if every is None else every
        self.standing: Standing | None = None
        self._stopping = threading.Event()

    def start(self, fire: Fire) -> None:
        """Starts the checking thread (a daemon: it never holds the agent's exit)."""
        threading.Thread(target=self._run, args=(fire,), name="budget", daemon=True).start()

    def stop(self) -> None:
        """Ends the checks."""
        self._stopping.set()

    def _run(self, fire: Fire) -> None:
        from survivor.policy.budget import budget_standing

        delay, last = 0.0, None
        while not self._stopping.wait(delay):
            try:
                standing = budget_standing(self.spec, self.storage, zone=self.zone)
            except Exception as exc:  # noqa: BLE001 - the next check tries again; training goes on
                log.warning("the budget not checked", error=f"{type(exc).__name__}: {exc}"[:300])
                delay = self.every
                continue
            self.standing = standing
            if standing.stopped is not None or standing.over:
                fire(
                    "budget",
                    f"${standing.spent or 0:.4f} spent of ${standing.budget or 0:g}"
                    + (f" (recorded by the {standing.stopped.get('by')})" if standing.stopped else ""),
                )
                return
            now = time.monotonic()
            rate = None
            if last is not None and standing.spent is not None and now > last[0]:
                rate = (standing.spent - last[1]) / (now - last[0])
            if standing.spent is not None:
                last = (now, standing.spent)
            delay = next_check(self.every, standing.budget, standing.spent, rate)
