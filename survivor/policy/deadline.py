"""Whether a job with a deadline can still finish on Spot: a pure policy, and what it reads from the job dir.

    >>> measured = measure(journal.attempts(), switches(storage), spec.train_steps, now=now)
    >>> decision = decide(measured, Situation(hours_left=5.0, window_hours=36.0, mode="spot", running=False))
    >>> decision.mode, decision.reason
    ('on-demand', 'behind: at 41% Spot goodput the remaining 2.90 h of training need 7.07 h on Spot; 5.00 h left')

The same function decides at every boot in the agent (survivor/agent/boot.py), in `survivor watch`
while no VM runs (a Spot stockout), and in benchmarks/deadline.py's simulation of thousands of hours.

The rules, beside "Can't Be Late" (Wu et al., NSDI'24, https://www.usenix.org/conference/nsdi24/presentation/wu-zhanghao),
whose Uniform Progress (UP) policy follows the line of uniform progress `ep(t) = C0 t / D`: on-demand
when idle and behind it, Spot whenever it is available, back from on-demand only at `ep(t + 2d)`, and
a safety net of `2d` (d: a restart's overhead).

1. Safety net: when the remaining work on on-demand (W hours at the measured step rate) plus a
   margin no longer fits in the time left, on-demand, to the end. The margin is what one more
   disruption can cost: two restarts (boot, restore, trainer start: measured), the work between two
   commits (measured steps lost), and one period of the check that notices a missing VM.
2. Spot while it runs: a Spot VM that is training keeps training (UP's exploitation rule too).
3. Behind the goodput line: while no VM trains on Spot (a stockout), on-demand when the time left
   is less than W / g plus the margin, where g is the Spot goodput measured so far (productive hours
   per wall hour on Spot). UP's line is this rule with g = C0 / D, what the deadline needs on
   average; survivor measures g instead, and starts from UP's line while it has little history
   (`PRIOR_HOURS` of it, blended), so a Spot that has done better than the deadline needs is trusted
   longer (less on-demand) and one that has done worse is left sooner (the deadline is kept).
4. Back to Spot (`fallback.switch_back`): on on-demand, Spot again once the time left covers W / g
   plus the margin plus a hysteresis of two restarts, one lost interval and one check period (a
   switch back that finds no Spot capacity is noticed only at the next look, and that wait must not
   already put the job behind the line it left Spot for: with less, a long stockout flaps the group
   between the modes every period); and, after `BACKOFF_AFTER` switches back in a row that found no Spot
   capacity (the group came back to on-demand without a Spot VM having trained), not before a
   back-off since the last switch (`BACKOFF_HOURS`, doubled per further failure, at most
   `MAX_BACKOFF_HOURS`), so a long stockout does not recreate the group's VM every half hour. UP
   needs no such memory: its oracle knows when Spot can be had; survivor learns it from its own
   switches. A single failed try is cheap (a restart on on-demand, no Spot VM billed), cheaper than
   holding on-demand longer, hence the back-off only from the second (docs/deadline.md). With
   Compute Engine's capacity data (`Situation.spot_obtainability`), not while no place the group
   may run Spot in has at least a medium obtainability (`OBTAINABLE`, Google's lowest "medium"
   score): a try where Compute says nothing can be had spends a restart, and rule 7's allowance,
   for nothing. `assess` asks for the data (its `spot` reader) only when the decision without it
   is such a switch back (`uses_capacity`); the place's hazard is not fed (`HAZARD_SIZES_SLACK`).
5. No step rate measured yet: nothing to project. The job stays as it is, except that one whose
   group has had no VM training for longer than one restart (its boot, restore and trainer start:
   measured, else BOOT_HOURS twice) goes on-demand: a VM that was merely booting would be training by
   then, so the group cannot create one (a stockout), and with nothing done the job is behind any
   progress line (UP's rule at zero progress); rule 4 brings it back once a rate is measured.
6. Deadline passed: on-demand, the soonest finish; the reason says it was missed.
7. Cost cap: a job never costs more than on-demand from its start would have (its training plus
   one restart, at the on-demand price) plus `COST_CAP_RESTARTS` (two) more restarts. Two, not one:
   a job that went on-demand before Spot saved anything (a stockout at its start) has spent one
   restart beyond its training at its on-demand boot, so with one it could never try Spot again;
   two allow it one try (a Spot boot and, if that fails, the restart back). The policy keeps the excess, what
   the job has spent beyond its committed training in hours of on-demand (the ledger's VM hours
   per mode, Spot ones at the Spot/on-demand price ratio, less the committed work), low enough that
   on-demand from now, with its restart, still lands inside that bound: Spot (staying, waiting for
   capacity, or going back) only while the excess plus what a Spot choice can add before the next
   decision (a Spot VM's boot, unless one trains now, and the work one preemption loses) is at most
   `COST_CAP_RESTARTS` restarts. Spot training lowers the excess by (1 - ratio) per hour, so a job
   that has trained on Spot may still try it again after a stockout; each failed switch back costs an on-demand restart,
   and a long outage ends the tries once they have used up what Spot saved (a 12 h job once
   went back to Spot 6 times in one outage and cost more than on-demand). Without prices (a machine
   outside the offline table) the rule is skipped.
8. Flex-start (docs/flex-start.md), only with `fallback.flex_start: true`: where rule 3 would leave
   Spot for on-demand, flex-start instead when the machine runs it (survivor/cloud/machines.py
   `flex_start_problem`), it is cheaper than on-demand, the remaining work fits one run duration
   (7 days), and the work plus the margin plus the queue wait the spec assumes
   (`fallback.flex_start_wait_hours`) still fit in the time left. A flex-start request that has waited
   longer than that goes on-demand, and so does one whose request ended FAILED, or whose VM's run is
   over (the request SUCCEEDED and the group has no VM: `survivor watch` reads the group's resize
   requests and members); a flex-start VM that trains keeps training (it is not preempted).
   The safety net, the cost cap and a passed deadline go on-demand directly: they leave no time to queue.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, replace
from typing import Callable, Hashable, Mapping, TypeVar

from survivor.cloud.capacity import Outlook

from survivor.jobdir.journal import Attempt, Journal, Timing
from survivor.jobdir.ledger import EARLIEST, build_ledger
from survivor.jobdir.storage import JobStorage
from survivor.jobdir.switches import Mode, FLEX_START, ON_DEMAND, SPOT, Switch, parse_time, switches
from survivor.spec import FLEX_START_WAIT_HOURS, JobSpec

P = TypeVar("P", bound=Hashable)

#: The longest a flex-start VM runs (docs/flex-start.md F3, F5: a resize request's run duration is at
#: most 7 days, https://cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig).
FLEX_START_MAX_RUN_HOURS = 7 * 24.0
#: A VM's creation and boot up to the agent, when nothing measured it (Compute Engine's own figures
#: for a GPU VM with a Deep Learning image are minutes; the agent's own phases are measured).
BOOT_HOURS = 0.05
#: How often `survivor watch` runs by default (its Cloud Scheduler job's period) and the agent's
#: assumption about it: a VM missing for longer is noticed within this time.
CHECK_EVERY_HOURS = 0.25
#: How many hours of Spot history weigh as much as the prior (the uniform-progress line).
PRIOR_HOURS = 2.0
#: After BACKOFF_AFTER switches back to Spot in a row that found no capacity, how long on-demand runs
#: before the next try: one watch period, doubled per further failure, up to MAX_BACKOFF_HOURS.
BACKOFF_AFTER = 2
BACKOFF_HOURS = CHECK_EVERY_HOURS
MAX_BACKOFF_HOURS = 4.0
#: Rule 7's allowance: the restarts a job may cost beyond on-demand from its start. Two: one try of
#: Spot after an on-demand start (tried against one on the first half of each trace set's time,
#: docs/benchmarks.md "Capacity data"; one kept every such job on on-demand to its end).
COST_CAP_RESTARTS = 2.0
#: With capacity data, the obtainability at least one place must have for a switch back to Spot:
#: Google's lowest "medium" score (docs/capacity-data.md C3: low 0.0-0.3, medium 0.4-0.6).
OBTAINABLE = 0.4
#: Whether the product sizes a Spot run's slack with its place's expected preemptions
#: (`Situation.spot_hazard_per_hour`): off, as the capacity benchmark's fit chose on every trace
#: set's first half (docs/benchmarks.md, "Capacity data": sized from Google's uptime bands, which
#: fall to their shortest whenever a place was out lately, it bought on-demand hours the traces did
#: not need). The best obtainability is fed either way (rule 4).
HAZARD_SIZES_SLACK = False


@dataclass(frozen=True)
class Measured:
    """What the job dir's records say, measured, not estimated.

    Args:
        steps_done: the newest committed step.
        train_steps: the step the job ends at.
        step_rate: training steps per hour while the trainer runs; None before any attempt trained.
        spot_productive_hours: hours of committed training done on Spot.
        spot_wall_hours: wall hours the group spent in Spot mode since the first start (waiting included).
        overhead_hours: one restart: VM boot, restore, trainer start.
        lost_hours: the work one disruption loses (the most steps lost by an attempt, in hours).
        elapsed_hours: wall hours since the job's first start.
        failed_switch_backs: switches back to Spot in a row (the newest last) after which the group
            returned to on-demand with no Spot VM having trained: Spot had no capacity.
        since_switch_hours: wall hours since the group's last switch (None: it never switched).
        spent_hours: what the group's VMs have cost so far, in hours of on-demand (the cost divided by
            the on-demand hourly price); None: the prices are not known, and rule 7 is skipped.
        spot_price_ratio: the Spot hourly price over the on-demand one (what a Spot hour costs in
            hours of on-demand).
        flex_start_price_ratio: the same for a flex-start hour (1.0 when not known: priced as on-demand).
    """

    steps_done: int
    train_steps: int
    step_rate: float | None
    spot_productive_hours: float = 0.0
    spot_wall_hours: float = 0.0
    overhead_hours: float = BOOT_HOURS
    lost_hours: float = 0.0
    elapsed_hours: float = 0.0
    failed_switch_backs: int = 0
    since_switch_hours: float | None = None
    spent_hours: float | None = None
    spot_price_ratio: float = 1.0
    flex_start_price_ratio: float = 1.0


@dataclass(frozen=True)
class FlexStart:
    """Whether flex-start may stand in for on-demand (rule 8), and what it is planned with.

    Args:
        allowed: the spec says `fallback.flex_start: true`.
        unsupported: why the fallback machine cannot run flex-start ("" when it can).
        wait_hours: the queue wait assumed (`fallback.flex_start_wait_hours`).
        price_ratio: flex-start's hourly price over on-demand's (None: not known, never chosen).
    """

    allowed: bool = False
    unsupported: str = ""
    wait_hours: float = FLEX_START_WAIT_HOURS
    price_ratio: float | None = None

    def problem(self, work: float, margin: float, left: float) -> str | None:
        """Pure: why flex-start is not chosen for `work` hours with `margin` and `left` hours to go;
        None when it is."""
        if not self.allowed:
            return "flex-start not allowed by the spec"
        if self.unsupported:
            return self.unsupported
        if self.price_ratio is None or self.price_ratio >= 1.0:
            return "flex-start is not known to be cheaper than on-demand"
        if work + margin > FLEX_START_MAX_RUN_HOURS:
            return (
                f"{work + margin:.2f} h of training and margin exceed flex-start's {FLEX_START_MAX_RUN_HOURS:g} h run"
            )
        if left < work + margin + self.wait_hours:
            return (
                f"a {self.wait_hours:.2f} h flex-start queue, {work:.2f} h of training and a {margin:.2f} h "
                f"margin do not fit in {left:.2f} h"
            )
        return None


@dataclass(frozen=True)
class Situation:
    """Where the job stands against its deadline now.

    Args:
        hours_left: until the deadline (negative once it passed).
        window_hours: from the first start to the deadline.
        mode: what the group runs now, "spot", "on-demand" or "flex-start".
        running: a VM of the group is training now (at a boot: this one).
        check_every_hours: how long a missing VM may go unnoticed (`survivor watch`'s period).
        switch_back: whether the job may return from on-demand to Spot (`fallback.switch_back`).
        flex_start: whether and how flex-start may stand in for on-demand (rule 8; None: it may not).
        flex_start_failed: the group's newest resize request ended FAILED, and why (its final
            `status.error`): the flex-start VM will not come (None: it did not fail).
        flex_start_ended: the group's newest resize request SUCCEEDED and the group has no VM: the
            flex-start VM's run is over (`flex_start_run_end`; None: it is not).
    """

    hours_left: float
    window_hours: float
    mode: Mode = SPOT
    running: bool = False
    check_every_hours: float = CHECK_EVERY_HOURS
    switch_back: bool = True
    flex_start: FlexStart | None = None
    flex_start_failed: str | None = None
    flex_start_ended: str | None = None
    #: the expected preemptions per hour of a running Spot VM where the group is, from Compute
    #: Engine's capacity data (survivor/cloud/capacity.py `Outlook.hazard_per_hour`); None: no data
    spot_hazard_per_hour: float | None = None
    #: the best obtainability (0-1) of a place the group may run Spot in, from the same data (rule 4
    #: does not switch back below `OBTAINABLE`); None: no data, rule 4 as without it
    spot_obtainability: float | None = None
    #: rule 7's allowance in restarts beyond on-demand from the start (the benchmark fits it)
    cost_cap_restarts: float = COST_CAP_RESTARTS


@dataclass(frozen=True)
class SpotOutlook:
    """What Compute Engine's capacity data tells the policy about Spot (docs/capacity-data.md): the
    best obtainability of a place the group may run Spot in, and the expected preemptions per hour
    where it is (None: not known, or not used: `HAZARD_SIZES_SLACK`)."""

    obtainability: float
    hazard_per_hour: float | None = None


def spot_outlook(outlooks: Mapping[P, Outlook], here: P, *, hazard: bool = HAZARD_SIZES_SLACK) -> SpotOutlook | None:
    """Pure: the policy's inputs from the outlooks of the places the group may run Spot in (None:
    none known). The hazard is here's, with `hazard` only, and only where Spot can be had (a place
    out of capacity has the shortest uptime band: nothing runs there to be preempted), as
    benchmarks/capacity.py feeds it."""
    if not outlooks:
        return None
    mine = outlooks.get(here)
    rate = mine.hazard_per_hour() if hazard and mine is not None and mine.obtainability >= OBTAINABLE else None
    return SpotOutlook(max(o.obtainability for o in outlooks.values()), rate)


def uses_capacity(decision: Decision, *, hazard: bool = HAZARD_SIZES_SLACK) -> bool:
    """Pure: whether capacity data could change `decision`, made without it. The data only holds
    Spot back (rule 4's obtainability; the hazard's slack and price), so without the hazard only a
    switch back to Spot is worth asking Compute about; an ordinary boot asks nothing."""
    return hazard or (decision.switch and decision.mode == SPOT)


def spot_restart_hours(work: float, measured: Measured, situation: Situation) -> float:
    """Pure: the slack a Spot run of `work` hours needs for its expected preemptions where it is:
    each costs a restart (0 without capacity data: the measured goodput stands for it)."""
    if situation.spot_hazard_per_hour is None:
        return 0.0
    return work * situation.spot_hazard_per_hour * measured.overhead_hours


def spot_dearer(measured: Measured, situation: Situation) -> bool:
    """Pure: whether a training hour on Spot, with the restarts its expected preemptions cost, is
    dearer than one on on-demand (priced: rule 7's ratio; without data or prices, never)."""
    if situation.spot_hazard_per_hour is None or measured.spent_hours is None:
        return False
    return measured.spot_price_ratio * (1 + situation.spot_hazard_per_hour * measured.overhead_hours) >= 1.0


@dataclass(frozen=True)
class Decision:
    """The mode the group should run in, from which one, and why (one sentence, for logs and records)."""

    mode: Mode
    current: Mode
    reason: str
    slack_hours: float | None = None  # time left minus the work on on-demand and the margin
    #: for flex-start: the run duration to ask for, the remaining work plus the margin, not a fixed week
    run_hours: float | None = None

    @property
    def switch(self) -> bool:
        """True when the group should change its template."""
        return self.mode != self.current


def margin_hours(measured: Measured, situation: Situation) -> float:
    """Pure: what one more disruption can cost: two restarts, one lost interval, one check period."""
    return 2 * measured.overhead_hours + measured.lost_hours + situation.check_every_hours


def spot_goodput(measured: Measured, window_hours: float) -> float:
    """Pure: the Spot goodput to plan with: the measured one, blended with the uniform-progress line
    (the goodput the deadline needs on average) while there are fewer than PRIOR_HOURS of history."""
    if measured.step_rate:
        needed = min(1.0, (measured.train_steps / measured.step_rate) / max(window_hours, 1e-9))
    else:
        needed = 1.0
    blended = (measured.spot_productive_hours + needed * PRIOR_HOURS) / (measured.spot_wall_hours + PRIOR_HOURS)
    # never below the line: the safety net keeps the deadline, so a Spot worse than the deadline
    # needs is not a reason to pay for on-demand sooner than uniform progress would
    return min(1.0, max(blended, needed, 1e-3))


def hysteresis_hours(measured: Measured, situation: Situation) -> float:
    """Pure: how far ahead of the goodput line on-demand must be before going back to Spot: two
    restarts, one lost interval, and one check period (the time a switch back that found no Spot
    capacity goes unnoticed)."""
    return 2 * measured.overhead_hours + measured.lost_hours + situation.check_every_hours


def backoff_hours(measured: Measured) -> float:
    """Pure: how long on-demand runs after the last switch before trying Spot again (0: no back-off)."""
    if measured.failed_switch_backs < BACKOFF_AFTER:
        return 0.0
    return min(MAX_BACKOFF_HOURS, BACKOFF_HOURS * 2 ** (measured.failed_switch_backs - BACKOFF_AFTER))


def excess_hours(measured: Measured) -> float | None:
    """Pure: what the job has spent beyond its committed training, in hours of on-demand (None: no
    prices or no step rate). On-demand from the start has an excess of one restart at its end."""
    if measured.spent_hours is None or not measured.step_rate:
        return None
    return measured.spent_hours - measured.steps_done / measured.step_rate


def spot_risk_hours(measured: Measured, situation: Situation) -> float:
    """Pure: the most a Spot choice can add to the excess before the next decision (each boot is
    one): a Spot VM's boot, unless one trains now, and the work one preemption loses."""
    trains = situation.mode == SPOT and situation.running
    return (0.0 if trains else measured.spot_price_ratio * measured.overhead_hours) + measured.lost_hours


def over_budget(measured: Measured, situation: Situation) -> str | None:
    """Pure: why Spot would risk costing more than on-demand from the start plus
    `situation.cost_cap_restarts` restarts (rule 7), or None when it cannot (or nothing is priced)."""
    excess = excess_hours(measured)
    if excess is None:
        return None
    risk = spot_risk_hours(measured, situation)
    # on-demand from the start has one restart of excess; on-demand from now adds its own restart
    allowance = situation.cost_cap_restarts * measured.overhead_hours
    if excess + risk <= allowance + 1e-9:
        return None
    return (
        f"cost cap: {excess:.2f} h of on-demand spent beyond the committed training, and Spot may add "
        f"{risk:.2f} h more; on-demand from now keeps the job within {situation.cost_cap_restarts:g} "
        f"restarts ({allowance:.2f} h) of on-demand from the start"
    )


def decide(measured: Measured, situation: Situation) -> Decision:
    """Pure decision: Spot or on-demand for a job with a deadline (the rules in the module docstring)."""
    current = situation.mode

    def to(mode: Mode, reason: str, slack: float | None = None) -> Decision:
        return Decision(mode, current, reason, None if slack is None else round(slack, 3))

    left = situation.hours_left
    if measured.steps_done >= measured.train_steps:
        return to(current, "finished: nothing left to train")
    if current == FLEX_START and situation.running:  # not preempted: it trains to the end of its run
        return to(FLEX_START, "flex-start is training; it is not preempted")
    if left <= 0:
        return to(ON_DEMAND, f"the deadline passed {-left:.2f} h ago; on-demand finishes soonest")
    if not measured.step_rate:
        waited = measured.overhead_hours  # one restart: longer without training is no boot, it is a stockout
        if not situation.running and measured.elapsed_hours >= waited:
            return to(
                ON_DEMAND,
                f"nothing trained in {measured.elapsed_hours:.2f} h (more than one {waited:.2f} h "
                "restart) and no step rate to plan with: behind the uniform-progress line; on-demand",
            )
        return to(current, "no step rate measured yet: the first attempt that trains measures it")
    work = (measured.train_steps - measured.steps_done) / measured.step_rate
    margin = margin_hours(measured, situation)
    slack = left - work - margin
    flexing = current == FLEX_START
    if slack < 0:
        return to(
            ON_DEMAND,
            f"safety net: {left:.2f} h left, {work:.2f} h of training on on-demand plus a {margin:.2f} h margin",
            slack,
        )
    flex = situation.flex_start or FlexStart()
    queued = measured.since_switch_hours
    if flexing and not situation.running and situation.flex_start_failed:
        return to(ON_DEMAND, f"the flex-start request failed ({situation.flex_start_failed}); on-demand", slack)
    if flexing and not situation.running and situation.flex_start_ended:  # rule 4 may bring Spot back later
        return to(ON_DEMAND, f"the flex-start VM's run is over ({situation.flex_start_ended}); on-demand", slack)
    if flexing and queued is not None and queued >= flex.wait_hours:
        return to(
            ON_DEMAND,
            f"the flex-start request has waited {queued:.2f} h, longer than the "
            f"{flex.wait_hours:.2f} h planned with; on-demand",
            slack,
        )
    stay = FLEX_START if flexing else ON_DEMAND
    capped = over_budget(measured, situation)
    if capped:
        return to(stay, capped, slack)
    if current == SPOT and situation.running:
        return to(SPOT, f"Spot is training; {slack:.2f} h of slack", slack)
    goodput = spot_goodput(measured, situation.window_hours)
    on_spot = work / goodput + spot_restart_hours(work, measured, situation)
    if spot_dearer(measured, situation):
        return to(
            stay,
            f"{stay}: at {situation.spot_hazard_per_hour:.2f} preemptions an hour a Spot "
            "training hour with its restarts costs more than an on-demand one",
            slack,
        )
    if current == SPOT:
        if left < on_spot:
            behind = (
                f"behind: at {goodput:.0%} Spot goodput the remaining {work:.2f} h of training "
                f"need {on_spot:.2f} h on Spot; {left:.2f} h left"
            )
            if situation.flex_start is None or not situation.flex_start.allowed:
                return to(ON_DEMAND, behind, slack)
            why_not = flex.problem(work, margin, left)
            if why_not is None:
                chosen = to(
                    FLEX_START,
                    f"{behind}; flex-start at {flex.price_ratio:.0%} of the on-demand price "
                    f"fits with a {flex.wait_hours:.2f} h queue",
                    slack,
                )
                return replace(chosen, run_hours=round(work + margin, 3))
            return to(ON_DEMAND, f"{behind}; on-demand: {why_not}", slack)
        return to(SPOT, f"on track: {on_spot:.2f} h on Spot at {goodput:.0%} goodput, {left:.2f} h left", slack)
    hysteresis = hysteresis_hours(measured, situation)
    if situation.switch_back and left >= on_spot + hysteresis:
        obtainable = situation.spot_obtainability
        if obtainable is not None and obtainable < OBTAINABLE:
            return to(
                stay,
                f"staying on {stay}: Compute Engine gives Spot an obtainability of {obtainable:.2f} "
                f"at best, below {OBTAINABLE:g}",
                slack,
            )
        wait, since = backoff_hours(measured), measured.since_switch_hours
        if since is not None and since < wait:
            return to(
                stay,
                f"staying on {stay}: the last {measured.failed_switch_backs} switch(es) back to "
                f"Spot found no capacity; next try in {wait - since:.2f} h",
                slack,
            )
        return to(
            SPOT,
            f"slack again: at {goodput:.0%} Spot goodput {on_spot:.2f} h on Spot fit in the "
            f"{left:.2f} h left with {hysteresis:.2f} h to spare",
            slack,
        )
    return to(stay, f"staying on {stay}: {left:.2f} h left, {work:.2f} h of training", slack)


# -- what the job dir says ------------------------------------------------------------------------


def _time(text: str | None) -> _dt.datetime | None:
    # every record's time through the job dir's one parser: a time without a zone is UTC, so one
    # record written without it cannot make the comparisons with `now` raise;
    # one before EARLIEST (the ledger's bound) is no time of this job, and year 1 would take the
    # first start out of the calendar (OverflowError) once `now` minus the elapsed hours is taken
    at = parse_time(text) if isinstance(text, str) else None
    return at if at is not None and at >= EARLIEST else None


def mode_at(switches: list[Switch], when: _dt.datetime) -> Mode:
    """Pure: the mode in effect at `when`: the last switch's before it, Spot before any."""
    mode = SPOT
    for switch in switches:
        at = _time(switch.time)
        if at is not None and at <= when:
            mode = switch.to_mode
    return mode


def spot_hours(switches: list[Switch], start: _dt.datetime, end: _dt.datetime) -> float:
    """Pure: the wall hours between `start` and `end` the group spent in Spot mode."""
    edges = [(at, s.to_mode) for s in switches if (at := _time(s.time)) is not None and start < at < end]
    total, mode, since = 0.0, mode_at(switches, start), start
    for at, to_mode in sorted(edges, key=lambda e: e[0]):
        if mode == SPOT:
            total += (at - since).total_seconds()
        mode, since = to_mode, at
    if mode == SPOT:
        total += (end - since).total_seconds()
    return total / 3600


def measure(
    attempts: list[Attempt],
    switches: list[Switch],
    train_steps: int,
    now: _dt.datetime,
    first_start: _dt.datetime | None = None,
    spot_price_ratio: float | None = None,
    flex_start_price_ratio: float | None = None,
) -> Measured:
    """Pure: the policy's inputs from the journal's attempts and the switch records.

    The step rate is steps trained per hour of an attempt's wall time less its restore and trainer
    start; `first_start` stands in when no attempt started yet (e.g. the group's creation). With a
    `spot_price_ratio`, what the job spent so far (rule 7) is the goodput ledger's VM time per mode,
    the figure `survivor report` prices, Spot hours weighted by the ratio (flex-start hours by theirs,
    at the on-demand price when it is not known)."""
    starts = [t for a in attempts if (t := _time(a.started)) is not None]
    first = min(starts + ([first_start] if first_start else []), default=now)
    done = max([a.end_step or 0 for a in attempts] + [a.restored_step or 0 for a in attempts] + [0])
    steps = hours = spot_progress = 0.0
    overheads, lost = [], []
    for a in attempts:
        begun, ended = _time(a.started), _time(a.ended)
        overhead = sum(a.timings.get(k, 0.0) for k in (Timing.RESTORE, Timing.SETUP)) / 3600
        if begun is None or ended is None:
            continue
        if a.timings:
            overheads.append(overhead)
        trained = (a.reached_step if a.reached_step is not None else (a.end_step or 0)) - (a.restored_step or 0)
        span = (ended - begun).total_seconds() / 3600 - overhead
        if trained > 0 and span > 0:
            steps, hours = steps + trained, hours + span
            if mode_at(switches, begun) == SPOT:
                spot_progress += max(0, (a.end_step or 0) - (a.restored_step or 0))
            lost.append(a.steps_lost or 0)
    rate = steps / hours if hours > 0 else None
    last = _time(switches[-1].time) if switches else None
    spent = None
    if spot_price_ratio is not None:
        billed = build_ledger(attempts, now=now, created=first_start, switches=switches).vm_seconds_by_mode()
        flex_ratio = flex_start_price_ratio if flex_start_price_ratio is not None else 1.0
        spent = (billed[ON_DEMAND] + spot_price_ratio * billed[SPOT] + flex_ratio * billed[FLEX_START]) / 3600
    return Measured(
        spent_hours=spent,
        spot_price_ratio=spot_price_ratio if spot_price_ratio is not None else 1.0,
        flex_start_price_ratio=flex_start_price_ratio if flex_start_price_ratio is not None else 1.0,
        failed_switch_backs=failed_switch_backs(attempts, switches),
        since_switch_hours=max(0.0, (now - last).total_seconds() / 3600) if last else None,
        steps_done=int(done),
        train_steps=train_steps,
        step_rate=rate,
        spot_productive_hours=spot_progress / rate if rate else 0.0,
        spot_wall_hours=spot_hours(switches, first, now),
        overhead_hours=BOOT_HOURS + (sum(overheads) / len(overheads) if overheads else BOOT_HOURS),
        lost_hours=max(lost) / rate if rate and lost else 0.0,
        elapsed_hours=max(0.0, (now - first).total_seconds() / 3600),
    )


def failed_switch_backs(attempts: list[Attempt], switches: list[Switch]) -> int:
    """Pure: the switches back to Spot in a row, newest last, that the group left for on-demand again
    before any attempt started in between trained a step (Spot had no capacity)."""
    trained = [
        at
        for a in attempts
        if (at := _time(a.started)) is not None
        and (a.reached_step if a.reached_step is not None else (a.end_step or 0)) > (a.restored_step or 0)
    ]
    count, to_spot = 0, None
    for switch in switches:
        at = _time(switch.time)
        if at is None:
            continue
        if switch.to_mode == SPOT:
            to_spot = at
        elif to_spot is not None:
            count = count + 1 if not any(to_spot <= t < at for t in trained) else 0
            to_spot = None
    return count


def _machines(spec: JobSpec):
    """The Spot machine's options and the fallback machine's (type, GPU type, GPU count); None when
    the spec's machine options do not parse."""
    from survivor.cloud.template import MachineOptions, parse_gpu
    from survivor.spec import SpecError

    try:
        spot = MachineOptions.from_spec(spec)
        fallback = spec.fallback
        od_gpu = (
            parse_gpu(fallback.gpu) if fallback and fallback.gpu is not None else (spot.gpu_type, spot.gpu_count or 0)
        )
    except (SpecError, TypeError, ValueError):
        return None
    od_machine = fallback.machine_type if fallback and fallback.machine_type else spot.machine_type
    return spot, (od_machine, *od_gpu)


def price_ratio(spec: JobSpec) -> float | None:
    """The Spot hourly price of the spec's machine over the on-demand one of its fallback machine
    (the group's on-demand template: the Spot shape with `fallback.machine_type`/`gpu` put in), from
    survivor/cloud/pricing.py's offline table; None when either is not in it (rule 7 is then
    skipped). The table, not the Billing Catalog: the agent decides at its boot, which must not wait
    on another API, and the cap needs only the ratio, which list prices give."""
    from survivor.cloud import pricing

    found = _machines(spec)
    if found is None:
        return None
    spot, od = found
    spot_prices = pricing.hourly(spot.machine_type, spot.gpu_type, spot.gpu_count or 0)
    od_prices = pricing.hourly(*od)
    if not spot_prices or not od_prices or not od_prices[0]:
        return None
    return spot_prices[1] / od_prices[0]


def flex_start(spec: JobSpec) -> FlexStart | None:
    """Rule 8's inputs for a spec: whether it allows flex-start, whether its fallback machine runs it
    (survivor/cloud/machines.py), the wait assumed, and flex-start's price over on-demand's for that
    machine from the offline table (the agent's boot waits on no API, as for `price_ratio`)."""
    from survivor.cloud import machines, pricing

    fallback = spec.fallback
    if fallback is None or not fallback.flex_start:
        return None
    found = _machines(spec)
    if found is None:
        return FlexStart(
            allowed=True,
            unsupported="the spec's machine options do not parse",
            wait_hours=fallback.flex_start_wait_hours,
        )
    od = found[1]
    od_prices = pricing.hourly(*od)
    flex = pricing.flex_start_hourly(*od)
    ratio = flex / od_prices[0] if flex and od_prices and od_prices[0] else None
    return FlexStart(
        allowed=True,
        unsupported=machines.flex_start_problem(*od) or "",
        wait_hours=fallback.flex_start_wait_hours,
        price_ratio=ratio,
    )


def situation(
    deadline_at: _dt.datetime,
    first_start: _dt.datetime,
    now: _dt.datetime,
    mode: Mode,
    *,
    running: bool,
    switch_back: bool = True,
    check_every_hours: float = CHECK_EVERY_HOURS,
    flex: FlexStart | None = None,
    flex_failed: str | None = None,
    flex_ended: str | None = None,
) -> Situation:
    """Pure: the Situation for a deadline resolved to a time (spec.Deadline.resolve)."""
    return Situation(
        hours_left=(deadline_at - now).total_seconds() / 3600,
        window_hours=max(1e-6, (deadline_at - first_start).total_seconds() / 3600),
        mode=mode,
        running=running,
        check_every_hours=check_every_hours,
        switch_back=switch_back,
        flex_start=flex,
        flex_start_failed=flex_failed,
        flex_start_ended=flex_ended,
    )


def _newest_request(requests: list[dict]) -> dict | None:
    """The group's newest resize request, by creation time, then name."""
    if not requests:
        return None
    return max(requests, key=lambda r: (str(r.get("creationTimestamp") or ""), str(r.get("name") or "")))


def _errors_text(error: dict | None) -> str:
    """An `error` object's `errors` as "CODE: message; CODE: message" ('' for none)."""
    errors = ((error or {}).get("errors")) or []
    return "; ".join(
        ": ".join(v for v in (str(e.get("code") or ""), str(e.get("message") or "")) if v)
        for e in errors
        if isinstance(e, dict)
    )


def flex_start_failure(requests: list[dict]) -> str | None:
    """Pure: why the group's newest resize request (by creation time, then name) ended FAILED, from
    its final `status.error.errors` ("CODE: message"), or None when it did not fail. The Compute v1
    discovery document: state FAILED, "The request failed before or during provisioning"; `status.error`,
    "Fatal errors ... that caused the transition to the FAILED state ... this field is final"."""
    newest = _newest_request(requests)
    if newest is None or newest.get("state") != "FAILED":
        return None
    return f"resize request {newest.get('name')}: " + (
        _errors_text((newest.get("status") or {}).get("error")) or "FAILED, no error given"
    )


def flex_start_run_end(requests: list[dict], members: int) -> str | None:
    """Pure: why the flex-start VM will not train again, when the group's newest resize request
    SUCCEEDED and the group has no VM (`members`: its managed instances, whatever their status; a
    VM the request has just made is one, still booting). A flex-start VM runs until "Compute Engine
    deletes the Flex-start VMs at the end of their run duration", or until it is deleted
    (about-resize-requests-mig; docs/flex-start.md F4, A4). None otherwise."""
    newest = _newest_request(requests)
    if newest is None or newest.get("state") != "SUCCEEDED" or members:
        return None
    return f"resize request {newest.get('name')} succeeded and the group has no VM left"


def flex_start_missing(requests: list[dict], members: int) -> str | None:
    """Pure: why no flex-start VM will come to a group on its flex-start template that has no VM and
    no resize request that could still bring one (none at all, or the newest CANCELLED): the switch
    was cut, or refused, after it pointed the group at the template and resized it to none and
    before it queued the request (survivor/mig/switch.py `switch_group`). Nothing brings a VM
    then, so the look undoes it (on-demand) instead of waiting out `flex_start_wait_hours`. None
    when a request is queued, running, or ended as `flex_start_failure` or `flex_start_run_end` say."""
    newest = _newest_request(requests)
    if members or (newest is not None and newest.get("state") in ("CREATING", "ACCEPTED", "SUCCEEDED", "FAILED")):
        return None
    return "no resize request asks for its VM: the switch to flex-start was cut or refused before it queued one" + (
        f" (resize request {newest.get('name')} is {newest.get('state')})" if newest else ""
    )


def flex_start_queue(requests: list[dict], now: _dt.datetime) -> str | None:
    """Pure: where the group's newest resize request stands while it is still active (CREATING or
    ACCEPTED), for an operator: how long it has been queued, and what stopped its last attempt when
    Compute says (`status.lastAttempt.error.errors`: "Errors that prevented the ResizeRequest to be
    fulfilled"; "temporary since the ResizeRequest can retry ... cleared when ResizeRequest
    transitions to the final state": the Compute v1 discovery document,
    InstanceGroupManagerResizeRequestStatus). None for a request no longer active, or none."""
    newest = _newest_request(requests)
    if newest is None or newest.get("state") not in ("CREATING", "ACCEPTED"):
        return None
    created = parse_time(newest.get("creationTimestamp"))
    queued = f", queued {(now - created).total_seconds() / 3600:.2f} h" if created else ""
    last = _errors_text(((newest.get("status") or {}).get("lastAttempt") or {}).get("error"))
    return f"resize request {newest.get('name')}: {newest.get('state')}{queued}" + (
        f"; its last attempt: {last} (Compute tries again)" if last else "; no VM yet, nothing failed"
    )


def assess(
    spec: JobSpec,
    storage: JobStorage,
    now: _dt.datetime,
    *,
    running: bool,
    check_every_hours: float = CHECK_EVERY_HOURS,
    first_start: _dt.datetime | None = None,
    flex_failed: str | None = None,
    flex_ended: str | None = None,
    spot: Callable[[], SpotOutlook | None] | None = None,
) -> Decision | None:
    """The decision for a job now, from its job dir's attempts and switches (None without a deadline).

    The group's mode is the last recorded switch's (Spot before any); `running`: a VM of the group
    trains now (the agent at its boot says True); `flex_failed`: the group's flex-start request
    FAILED, and why (`flex_start_failure`, read by `survivor watch`); `flex_ended`: its flex-start
    VM's run is over (`flex_start_run_end`, read by `survivor watch`). `spot`: reads Compute
    Engine's capacity data (survivor/mig/move.py `spot_outlook_for`), called only when it could
    change the decision (`uses_capacity`); None from it, or no `spot`: the rules without the data."""
    if spec.deadline is None:
        return None
    recorded = switches(storage)
    flex = flex_start(spec)
    measured = measure(
        Journal(storage).attempts(),
        recorded,
        spec.train_steps,
        now,
        first_start,
        spot_price_ratio=price_ratio(spec),
        flex_start_price_ratio=flex.price_ratio if flex else None,
    )
    first = now - _dt.timedelta(hours=measured.elapsed_hours)
    where = situation(
        spec.deadline.resolve(first),
        first,
        now,
        mode_at(recorded, now),
        running=running,
        switch_back=spec.fallback.switch_back if spec.fallback else True,
        check_every_hours=check_every_hours,
        flex=flex,
        flex_failed=flex_failed,
        flex_ended=flex_ended,
    )
    decision = decide(measured, where)
    if spot is None or not uses_capacity(decision):
        return decision
    seen = spot()
    if seen is None:
        return decision
    return decide(
        measured, replace(where, spot_obtainability=seen.obtainability, spot_hazard_per_hour=seen.hazard_per_hour)
    )
