"""A move is a bet with a price: whether moving a job's group to another place is expected to gain
more training time than it costs.

    >>> here, there = Outlook(0.1, 1 / 60), Outlook(1.0, 1.0)
    >>> weigh("us-east1", {"us-east1": here, "us-west1": there}, Costs(hours_left=10.0)).to
    'us-west1'

A place's expected share of wall time with a training VM (`training_share`) is its obtainability
(the chance the next creation there succeeds: docs/capacity-data.md C3) over one plus the restarts
its preemptions cost per hour (its hazard, `Outlook.hazard_per_hour`, times a restart). Over the
horizon the move can pay back in, moving gains the difference of the two shares: the horizon is
how long the job would still run here, its work left at here's share, at most `HORIZON_HOURS` (a
place's outlook says little beyond it). Here's share, not the work left alone: a job with a few
minutes of training left in a place out of capacity would wait there as long as the outage lasts,
and so gains a whole horizon by moving, while one in a place that finishes it about as soon gains
next to nothing. A move costs a restart on a new VM, the restore across locations (the checkpoint
read from another region's bucket path), and, with the chance the target has nothing either (1 -
its obtainability), one more look's wait before the next decision. The job moves to
the place with the largest expected gain less cost, when that is above zero; never on a timer:
time without a VM enters only through what the data says of the place now.

Pure: survivor/policy/placement.py `decide` calls it when it has outlooks; the benchmark's
survivor row (benchmarks/capacity.py) and tests/test_move_bet.py call it the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Mapping, TypeVar

from survivor.cloud.capacity import TOP_BAND_UPTIME_HOURS, Outlook

P = TypeVar("P", bound=Hashable)

#: How far ahead a move's gain counts (hours): a place's outlook says little about capacity beyond
#: it. Chosen on the first half of each trace set's time (docs/benchmarks.md, "Capacity data").
HORIZON_HOURS = 2.0
#: A restart on a new VM (the MIG's recreation, the boot, the trainer's start): 0.05 h, the boot
#: measurements of docs/benchmarks.md.
RESTART_HOURS = 0.05
#: The extra a restore across locations takes (a checkpoint of a few GB read from another
#: region's bucket path at a few hundred MB/s).
RESTORE_ACROSS_HOURS = 0.01
#: How long a move into a place that has nothing either goes unnoticed: one look of `survivor watch`.
LOOK_HOURS = 1 / 60


@dataclass(frozen=True)
class Costs:
    """What a move costs and how long its gain may count."""

    hours_left: float  # the training left (hours)
    restart_hours: float = RESTART_HOURS
    restore_hours: float = RESTORE_ACROSS_HOURS
    look_hours: float = LOOK_HOURS
    horizon_hours: float = HORIZON_HOURS
    top_band_uptime_hours: float = TOP_BAND_UPTIME_HOURS  # a place in Google's longest uptime band


@dataclass(frozen=True)
class Bet:
    """The move weighed: where to (None: stay), the expected gain and cost in hours, and why."""

    to: Hashable | None
    gain_hours: float
    cost_hours: float
    reason: str


def training_share(outlook: Outlook, restart_hours: float, top_band_hours: float = TOP_BAND_UPTIME_HOURS) -> float:
    """Pure: the expected share of wall time with a training VM at a place: its obtainability, less
    the restarts its preemptions cost."""
    return outlook.obtainability / (1.0 + outlook.hazard_per_hour(top_band_hours) * restart_hours)


def weigh(
    here: P, outlooks: Mapping[P, Outlook], costs: Costs, skip: frozenset = frozenset(), name: Callable[[P], str] = str
) -> Bet:
    """Pure: the best move from `here` among the places of `outlooks` (not those in `skip`), or
    staying: each target's gain (the horizon, the job's time left here, times its training share
    less here's) against the move's cost (a restart, the restore across locations, the chance it
    has nothing times a look)."""
    if here not in outlooks:
        return Bet(None, 0.0, 0.0, "no capacity data for the place the job is in")
    mine = training_share(outlooks[here], costs.restart_hours, costs.top_band_uptime_hours)
    horizon = max(0.0, min(costs.horizon_hours, costs.hours_left / max(mine, 1e-9)))
    best: Bet | None = None
    target = here  # the place `best` moves to
    for place, outlook in outlooks.items():
        if place == here or place in skip:
            continue
        gain = horizon * (training_share(outlook, costs.restart_hours, costs.top_band_uptime_hours) - mine)
        cost = costs.restart_hours + costs.restore_hours + (1.0 - outlook.obtainability) * costs.look_hours
        if best is None or gain - cost > best.gain_hours - best.cost_hours:
            best, target = Bet(place, gain, cost, ""), place
    if best is None:
        return Bet(None, 0.0, 0.0, "no other place has capacity data")
    text = (
        f"{name(target)}: obtainability {outlooks[target].obtainability:.2f}, uptime "
        f"{outlooks[target].uptime_hours:.2f} h, against here's {outlooks[here].obtainability:.2f} and "
        f"{outlooks[here].uptime_hours:.2f} h: {best.gain_hours:.2f} h gained for {best.cost_hours:.2f} h"
    )
    if best.gain_hours - best.cost_hours <= 0:
        return Bet(None, best.gain_hours, best.cost_hours, f"staying: the best move, to {text}, does not pay")
    return Bet(best.to, best.gain_hours, best.cost_hours, f"moving to {text}")
