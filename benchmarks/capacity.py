"""Capacity wherever it is: deadline and recovery policies replayed on real Spot availability traces.

    $ .venv/bin/python -m benchmarks.capacity --traces benchmarks/traces/aws-02-15-2023 --json rows.json [--write]

A folder of traces in the published format of github.com/skypilot-org/spot-traces: one JSON file a
zone, named `<zone>_<anything>.json` (or `.json.gz`), `{"metadata": {"gap_seconds": g}, "data": [...]}`,
a point counting as capacity when it is above 0; a zone's region is its name less the last letter
(survivor/local/traces.py `load` reads them; the Compute fake replays them too: `follow_capacity`).
As in "Can't Be Late" (NSDI'24), which published these traces, a point without capacity is one in
which a Spot VM in that zone cannot be created and one that runs there is preempted.

Jobs of several lengths and deadlines start at many times (every `--every` hours) in each region as
their home, and every policy replays the same jobs with survivor/local/traces.py `replay` (one-minute
ticks; a restart costs `--restart` hours on a new VM, taken from survivor's boot measurements; a
preemption loses `--lost` hours of work, 0 by default: a noticed preemption loses no step (the notice
commit, docs/benchmarks.md), the same for every policy; the deadline policy and the move decide at
each boot and each look of `survivor watch --every 1m`). On-demand capacity is assumed always
there (no on-demand traces exist); the same prices hold in every region (pricing's table,
n1-standard-8 with one V100, the traces' GPU). The policies, on the same start times:

- `survivor`: survivor/policy/deadline.py `decide` with the job allowed in every region of the
  folder (`placement.regions`): a Spot VM goes to a zone of the group's region with capacity (a
  regional MIG); when the region has had none for `MOVE_AFTER_HOURS` (`move_after_minutes: 1`, one
  look of `survivor watch --every 1m`), survivor/policy/placement.py `decide` (the built rule, not a
  model of it) moves the group to the next region of the list, which may have no capacity either
  (survivor has no oracle): it waits there again before the next move, and once a whole round of the
  regions found none, the wait doubles each round up to 15 minutes (`placement.wait_minutes`).
- `survivor, one region`: the same policy confined to its home region (what survivor is today).
- `SkyPilot EAGER_NEXT_REGION` and `SkyPilot FAILOVER`: Spot only, no deadline, recovering as
  sky/jobs/recovery_strategy.py of skypilot 0.14.1 (the wheel on PyPI; GitHub tag v0.14.1) says.
  FAILOVER (lines 1375-1493, `FailoverStrategyExecutor.recover`, lines 1444-1493): relaunch in the
  same region (`zone=None`, line 1463) with `_launch`'s default `max_retry=3` (line 805), then
  anywhere (`_MAX_RETRY_CNT = 240` tries, line 1380, each a failover through the candidates), for
  ever. EAGER_NEXT_REGION (lines 1496-1580, the default strategy, line 1497): relaunch with the
  previous region blocked (`task.blocked_resources`, lines 1551-1558; 3 tries), then anywhere for
  ever. The 3 tries are 60 s then 1.6x apart (`RETRY_INIT_GAP_SECONDS = 60`, line 178;
  `common_utils.Backoff`, multiplier 1.6): about 0.05 h, the window in which the restriction holds
  here. "Anywhere" tries the home region first, then the others in name order (SkyPilot's
  optimizer orders by price; the prices here are equal). Retries are modelled every tick, where
  SkyPilot backs off up to 5 minutes: in its favour.
- `uniform progress, ...`: Can't Be Late's Uniform Progress (traces.uniform_progress) with its oracle
  of Spot availability, in one region, or anywhere (its multi-region form: a Spot VM wherever there
  is capacity, the current region first).
- `always on-demand`: the price every cost is divided by.

`--json FILE` writes one row a policy (all jobs of all kinds): `{"policy", "jobs", "deadlines_met",
"vm_fraction", "goodput", "mean_cost", "worst_cost", "moves_per_job"}`, costs relative to always
on-demand; `--write` also puts the table and a plot into docs/benchmarks.md and docs/benchmarks/.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass, field, replace
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from survivor.cloud.capacity import TOP_BAND_UPTIME_HOURS, Outlook  # noqa: E402
from survivor.local import capacity_advice  # noqa: E402
from survivor.policy import deadline as deadline_policy, move_bet, placement  # noqa: E402
from survivor.local import traces  # noqa: E402
from survivor.local.traces import TraceError, Zones, load, region_of  # noqa: E402  (the published format's reader)
from survivor.spec import Placement as Rule  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: (training hours, deadline hours) of the jobs replayed: the issue's two, and a short one.
JOBS = ((24.0, 48.0), (12.0, 18.0), (6.0, 9.0))
#: A restart on a new VM, from the boot measurements in docs/benchmarks.md: the MIG's recreation and a
#: Deep Learning VM's boot to its startup script (150 s, "The time without a VM", the goodput run's
#: `--recreation-seconds`), survivor's image to the agent (1 s, "Boot to the first step"), the built-in
#: trainer's start to its first step (about 10 s, "Per boot") and a restore of a few GB (about 20 s at
#: the restore's measured rate): about 180 s. The goal's own figure, 0.2 h, is `--restart 0.2`.
RESTART_HOURS = 0.05
#: Work a preemption loses: none, as survivor commits on the notice (a noticed preemption loses 0
#: steps: the goodput and time-to-safety runs in docs/benchmarks.md). Given to every policy alike,
#: which favours the others (their own checkpointing loses what it has not saved).
LOST_HOURS = 0.0
#: How long a region may have no Spot capacity before survivor's job moves: one look of `survivor watch
#: --every 1m` (Cloud Scheduler's finest period). At the default 15-minute look, a job that starts in
#: a stockout goes on-demand first (rule 5 fires after one restart) and rule 7 keeps it there.
MOVE_AFTER_HOURS = 1 / 60
#: How often `survivor watch` looks (the deadline policy and the move decide at each look).
CHECK_EVERY_HOURS = MOVE_AFTER_HOURS
#: How long SkyPilot's recovery keeps its restriction (same region, or not the previous one): 3 tries,
#: 60 s then 96 s apart (see the module docstring).
SKYPILOT_WINDOW_HOURS = 0.05
#: The replay's tick (survivor/local/traces.py `replay`). A look in the tick from t comes after what
#: the tick's points did (a preemption in it is what the look reacts to), and a VM's creation in it
#: needs capacity through the tick, so the capacity data the look reads is the tick's last point's:
#: read at t, it would still show the capacity whose loss the look is reacting to (Google's
#: obtainability follows "real-time availability"), and the move would wait a tick for nothing.
TICK_HOURS = 1 / 60
#: The replay runs to this many times the deadline (a Spot-only job may need longer; it then missed).
LIMIT_FACTOR = 2.0
#: The table's machine: the traces are of one V100 VM.
MACHINE_TYPE, GPU_TYPE, GPU_COUNT = "n1-standard-8", "nvidia-tesla-v100", 1


@dataclass(frozen=True)
class Constants:
    """The survivor row's constants (survivor/policy/move_bet.py, survivor/cloud/capacity.py): how
    far ahead a move's gain counts (at most the job's time left where it is), the uptime a place in
    Google's longest band is planned with, the restore across locations a move costs, whether the
    deadline policy sizes Spot's slack with the place's hazard, and its cost cap's allowance in
    restarts (survivor/policy/deadline.py rule 7)."""

    horizon_hours: float = move_bet.HORIZON_HOURS
    top_band_uptime_hours: float = TOP_BAND_UPTIME_HOURS
    restore_hours: float = move_bet.RESTORE_ACROSS_HOURS
    deadline_hazard: bool = True  # the deadline policy sizes Spot's slack with the place's hazard
    cap_restarts: float = deadline_policy.COST_CAP_RESTARTS

    @property
    def text(self) -> str:
        """The constants as the tables name them."""
        horizon = "the job's time left here" if self.horizon_hours == float("inf") else f"{self.horizon_hours:g} h"
        return (
            f"horizon {horizon}, top-band uptime {self.top_band_uptime_hours:g} h, restore across locations "
            f"{self.restore_hours:g} h, deadline hazard {'on' if self.deadline_hazard else 'off'}, "
            f"cost cap {self.cap_restarts:g} restarts"
        )

    def costs(self, hours_left: float, restart_hours: float = RESTART_HOURS) -> move_bet.Costs:
        """The move's costs with these constants, for `hours_left` of training."""
        return move_bet.Costs(
            hours_left=hours_left,
            restart_hours=restart_hours,
            restore_hours=self.restore_hours,
            horizon_hours=self.horizon_hours,
            top_band_uptime_hours=self.top_band_uptime_hours,
        )


#: The constants tried on a trace set's first half (`fit`); the one chosen is replayed on its second.
#: The cost cap's candidates come outermost, survivor's own default first: a tie keeps the default.
GRID = tuple(
    Constants(h, u, r, z, c)
    for c in (deadline_policy.COST_CAP_RESTARTS, 1.0)
    for h in (1.0, 2.0, float("inf"))
    for u in (2.0, 8.0)
    for r in (0.01, 0.1)
    for z in (False, True)
)


@dataclass
class Placement:
    """Where a job's Spot VM can be and goes (traces.Capacity), for a job started at `start` hours
    into the traces, from `home`, by `rule`:

    - "region": a zone of `home` with capacity (a regional MIG);
    - "move": as "region", and when the group's region has had no capacity for `move_after`
      hours, the first other region with some (survivor with regions);
    - "anywhere": the current region first, else the first with capacity (uniform progress's
      multi-region form);
    - "eager" / "failover": SkyPilot's recovery: for `window` hours after a preemption, anywhere but
      the preempted region / only the preempted region; otherwise anywhere, home first.
    """

    zones: Zones
    start: float
    home: str
    rule: str
    regions: list[str] = field(default_factory=list)  # the allowed ones; default: every region
    move_after: float = MOVE_AFTER_HOURS
    window: float = SKYPILOT_WINDOW_HOURS
    bet: Constants = field(default_factory=lambda: Constants())  # "advice": the move's constants
    hours_left: float = float("inf")  # "advice": the training left, as the job's policy last saw it
    restart: float = RESTART_HOURS  # "advice": a restart's hours, the move's price
    region: str = ""
    zone: str | None = None
    moves: int = 0
    placed: int = 0
    _out_since: float | None = None
    _fruitless: int = 0  # moves since the last VM was placed
    _preempted: tuple[float, str] | None = None

    def __post_init__(self) -> None:
        self.regions = self.regions or self.zones.regions
        self.region = self.home

    def _zones(self, region: str) -> list[str]:
        return sorted(z for z in self.zones.capacity if region_of(z) == region)

    def _order(self, first: str) -> list[str]:
        return [first] + [r for r in self.regions if r != first]

    def candidates(self, t0: float, t1: float) -> list[str]:
        """The zones a Spot VM may be created in now, in the order tried, with capacity."""
        up = lambda zones: [z for z in zones if self.zones.up(z, self.start + t0, self.start + t1)]  # noqa: E731
        if self.rule == "region":
            return up(self._zones(self.home))
        if self.rule == "move":
            # survivor's own rule (survivor/policy/placement.py `decide`): after `move_after` with no
            # capacity in its region, the group moves to the next region of the list, which it cannot
            # know has capacity (no oracle); there it waits again, and moves on again
            here = up(self._zones(self.region))
            if here:
                self._out_since = None
                return here
            self._out_since = t0 if self._out_since is None else self._out_since
            look = placement.Look(
                f"regions/{self.region}",
                idle_seconds=(t0 - self._out_since) * 3600,
                capacity_errors=("ZONE_RESOURCE_POOL_EXHAUSTED",),
                moves_without_vm=self._fruitless,
            )
            decision = placement.decide(Rule(tuple(self.regions), move_after_minutes=self.move_after * 60), look)
            if not decision.move:
                return []
            self.region, self._out_since, self.moves = str(decision.to_region), t0, self.moves + 1
            self._fruitless += 1
            return up(self._zones(self.region))
        if self.rule == "advice":
            # survivor with Compute Engine's capacity data: the region's outlook is its best
            # zone's advice.capacity scores as the Compute fake serves them from the traces' past
            # (survivor/local/capacity_advice.py); no history (an N1 VM with a V100 has none); the
            # move is survivor/policy/move_bet.py `weigh`, the function placement.decide calls
            here = up(self._zones(self.region))
            if here:
                return here
            outlooks = self.outlooks(t0)
            bet = move_bet.weigh(self.region, outlooks, self.bet.costs(self.hours_left, self.restart))
            if bet.to is None:
                return []
            self.region, self.moves = str(bet.to), self.moves + 1
            return up(self._zones(self.region))
        if self.rule == "anywhere":
            return [z for r in self._order(self.region) for z in up(self._zones(r))]
        if self.rule == "eager-shipped":  # skypilot 0.14.1: the preempted region never blocked (#10021)
            return [z for r in self._order(self.home) for z in up(self._zones(r))]
        if self.rule in ("eager", "failover"):
            if self._preempted is not None and t0 - self._preempted[0] < self.window:
                lost = self._preempted[1]
                keep = (lambda r: r != lost) if self.rule == "eager" else (lambda r: r == lost)
                return [z for r in self._order(self.home) if keep(r) for z in up(self._zones(r))]
            return [z for r in self._order(self.home) for z in up(self._zones(r))]
        raise ValueError(f"unknown placement rule {self.rule!r}")

    def outlooks(self, t: float) -> dict[str, Outlook]:
        """Each allowed region's outlook at the look in the tick from `t` hours into the job: its best
        zone's advice.capacity scores as the Compute fake serves them from the traces' past, up to the
        tick's last point (`TICK_HOURS`)."""
        return {r: self._outlook(r, self.start + t + TICK_HOURS - 1e-9) for r in self.regions}

    def _outlook(self, region: str, at: float) -> Outlook:
        best = max(
            (capacity_advice.scores(self.zones, z, at) for z in self._zones(region)),
            key=lambda sc: (sc.obtainability, sc.uptime_seconds),
        )
        return Outlook(best.obtainability, best.uptime_seconds / 3600)

    def available_through(self, t0: float, t1: float) -> bool:
        """True when a Spot VM can be created now under the rule."""
        return bool(self.candidates(t0, t1))

    def place(self, t: float) -> None:
        """The Spot VM goes to the first candidate zone; a region other than the last one is a move."""
        found = self.candidates(t, t + 1e-6)
        if not found:
            return
        self.zone = found[0]
        where = region_of(self.zone)
        if self.placed and where != self.region and self.rule not in ("move", "advice"):  # a move counts where decided
            self.moves += 1
        self.region, self.placed, self._out_since, self._fruitless = where, self.placed + 1, None, 0

    def preempted(self, t0: float, t1: float) -> bool:
        """True when the VM's zone loses its capacity in [t0, t1)."""
        if self.zone is None or self.zones.up(self.zone, self.start + t0, self.start + t1):
            return False
        self._preempted, self.zone = (t0, region_of(self.zone)), None
        return True


#: The baseline: on-demand from the start (its group starts from the on-demand template).
ALWAYS_ON_DEMAND = "always on-demand"
#: name -> (the policy's maker, its placement rule)
POLICIES: dict[str, tuple[Callable[[], traces.Policy], str]] = {
    "survivor": (traces.survivor_policy, "advice"),
    "survivor, timer rule (before capacity data)": (traces.survivor_policy, "move"),
    "survivor, one region": (traces.survivor_policy, "region"),
    "SkyPilot EAGER_NEXT_REGION, as 0.14.1 ships": (lambda: traces.always(traces.SPOT), "eager-shipped"),
    "SkyPilot EAGER_NEXT_REGION, as its docs describe": (lambda: traces.always(traces.SPOT), "eager"),
    "SkyPilot FAILOVER": (lambda: traces.always(traces.SPOT), "failover"),
    "uniform progress, multi-region": (traces.uniform_progress, "anywhere"),
    "uniform progress, one region": (traces.uniform_progress, "region"),
    ALWAYS_ON_DEMAND: (lambda: traces.always(traces.ON_DEMAND), "region"),
}


@dataclass(frozen=True)
class Outcome:
    """One job under one policy: deadline met, VM and goodput shares of its wall time, cost against
    always on-demand, moves."""

    kind: tuple[float, float]
    home: str
    start: float
    met: bool
    vm_fraction: float
    goodput: float
    cost: float
    moves: int


def job_of(hours: float, deadline: float, restart: float, lost: float = LOST_HOURS) -> traces.Job:
    """The replayed job: the table's machine and prices, `restart` hours a restart, `lost` hours of
    work lost to a preemption."""
    return traces.Job(
        hours=hours,
        deadline_hours=deadline,
        overhead_hours=restart,
        lost_hours=lost,
        machine_type=MACHINE_TYPE,
        gpu_type=GPU_TYPE,
        gpu_count=GPU_COUNT,
    )


def planning(choose: traces.Policy, where: Placement, job: traces.Job) -> traces.Policy:
    """survivor with capacity data: at each decision the move plans with the training left (as the
    watch reads it from the job dir) and the deadline policy with the expected preemptions of the
    place the group is in (`Situation.spot_hazard_per_hour`, the same outlook the move weighs), the
    best obtainability of its allowed places (`Situation.spot_obtainability`: a switch back to Spot
    goes wherever there is capacity) and the cost cap's allowance."""

    def decide(view: traces.View) -> str:
        m = view.measured
        where.hours_left = max(0.0, job.hours - m.steps_done / max(m.train_steps, 1) * job.hours)
        outlook = where.outlooks(view.t).get(where.region) if where.bet.deadline_hazard else None
        # a place out of capacity has the shortest uptime band (nothing runs there to last): its
        # hazard is a running VM's only where Spot can be had
        hazard = (
            outlook.hazard_per_hour(where.bet.top_band_uptime_hours)
            if outlook and outlook.obtainability >= capacity_advice.LOW
            else None
        )
        best = max(o.obtainability for o in where.outlooks(view.t).values())
        return choose(
            replace(
                view,
                situation=replace(
                    view.situation,
                    spot_hazard_per_hour=hazard,
                    spot_obtainability=best,
                    cost_cap_restarts=where.bet.cap_restarts,
                ),
            )
        )

    return decide


def replay_one(
    zones: Zones, name: str, job: traces.Job, start: float, home: str, base_cost: float, bet: Constants = Constants()
) -> Outcome:
    """Replays one job under one policy (`bet`: the survivor row's constants)."""
    make, rule = POLICIES[name]
    where = Placement(zones, start, home, rule, bet=bet, restart=job.overhead_hours)
    choose = planning(make(), where, job) if rule == "advice" else make()
    run = traces.replay(
        where,
        job,
        choose,
        tick_hours=TICK_HOURS,
        limit_factor=LIMIT_FACTOR,
        check_every_hours=CHECK_EVERY_HOURS,
        start_mode=traces.ON_DEMAND if name == ALWAYS_ON_DEMAND else traces.SPOT,
    )
    wall = run.finished_at if run.finished_at is not None else job.deadline_hours * LIMIT_FACTOR
    return Outcome(
        (job.hours, job.deadline_hours),
        home,
        start,
        run.met,
        run.training_hours / wall,
        min(run.committed_hours, job.hours) / wall,
        run.cost_usd / base_cost,
        where.moves,
    )


def run(
    zones: Zones,
    every: float,
    restart: float = RESTART_HOURS,
    jobs: tuple[tuple[float, float], ...] = JOBS,
    lost: float = LOST_HOURS,
    half: str | None = None,
    bet: Constants = Constants(),
    names: tuple[str, ...] = tuple(POLICIES),
) -> dict[str, list[Outcome]]:
    """The policies `names` on every job: each kind, from each region as home, at starts `every` hours
    apart (as many as fit the traces with the replay's limit); `half` "first" or "second": only jobs
    whose whole replay lies in that half of the traces' time; `bet`: the survivor row's constants."""
    out: dict[str, list[Outcome]] = {name: [] for name in names}
    for hours, deadline in jobs:
        job = job_of(hours, deadline, restart, lost)
        base = traces.replay(
            traces.Trace(0, ()), job, traces.always(traces.ON_DEMAND), start_mode=traces.ON_DEMAND
        ).cost_usd
        starts = []
        lo, hi = {None: (0.0, zones.hours), "first": (0.0, zones.hours / 2), "second": (zones.hours / 2, zones.hours)}[
            half
        ]
        s = lo
        while s + deadline * LIMIT_FACTOR <= hi:
            starts.append(s)
            s += every
        for home in zones.regions:
            for start in starts:
                for name in names:
                    out[name].append(replay_one(zones, name, job, start, home, base, bet))
    return out


def fit(
    zones: Zones,
    every: float,
    restart: float = RESTART_HOURS,
    lost: float = LOST_HOURS,
    grid: tuple[Constants, ...] = GRID,
    jobs: tuple[tuple[float, float], ...] = JOBS,
) -> tuple[Constants, list[tuple[Constants, dict]]]:
    """The survivor row's constants chosen on the first half of the traces' time only: of `grid`,
    the one with every deadline met and the lowest mean cost (then the fewest moves, then the first
    of the grid); with each tried and its row."""
    tried = []
    for bet in grid:
        [row] = rows(run(zones, every, restart, jobs, lost, half="first", bet=bet, names=("survivor",)))
        tried.append((bet, row))
    met = [t for t in tried if t[1]["deadlines_met"] == t[1]["jobs"]] or tried
    best = min(met, key=lambda t: (t[1]["mean_cost"], t[1]["moves_per_job"]))
    return best[0], tried


def load_shapes(folders: list[str]) -> Zones:
    """One job's machine shapes, a folder of traces each (the same region and time, one machine):
    a place is the shape in a region, its zones named `<shape>:<zone>` (the shape: the folder's name
    after its last hyphen, `aws-10-26-2022-k80_8` -> `k80_8`). TraceError when the gaps differ."""
    capacity: dict[str, tuple[bool, ...]] = {}
    gaps = set()
    for folder in folders:
        zones = load(folder)
        shape = os.path.basename(os.path.normpath(folder)).rsplit("-", 1)[-1]
        gaps.add(zones.gap_hours)
        capacity.update({f"{shape}:{zone}": points for zone, points in zones.capacity.items()})
    if len(gaps) > 1:
        raise TraceError(f"--traces {' '.join(folders)}: the shapes' gap_seconds differ; one is needed")
    return Zones(gaps.pop(), capacity)


def rows(results: dict[str, list[Outcome]]) -> list[dict]:
    """One row a policy, over all its jobs."""
    out = []
    for name, outcomes in results.items():
        costs = [o.cost for o in outcomes]
        out.append(
            {
                "policy": name,
                "jobs": len(outcomes),
                "deadlines_met": sum(o.met for o in outcomes),
                "vm_fraction": round(statistics.mean(o.vm_fraction for o in outcomes), 4),
                "goodput": round(statistics.mean(o.goodput for o in outcomes), 4),
                "mean_cost": round(statistics.mean(costs), 4),
                "worst_cost": round(max(costs), 4),
                "moves_per_job": round(statistics.mean(o.moves for o in outcomes), 3),
            }
        )
    return out


def table(results: dict[str, list[Outcome]]) -> str:
    """The Markdown table of `rows`, and one line a job kind for survivor against the others."""
    lines = [
        "| policy | jobs | deadlines met | mean cost | moves a job | worst cost | training VM | goodput |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows(results):
        lines.append(
            f"| {r['policy']} | {r['jobs']} | {r['deadlines_met']} | {r['mean_cost']:.3f} | "
            f"{r['moves_per_job']:.2f} | {r['worst_cost']:.3f} | {r['vm_fraction']:.1%} | {r['goodput']:.1%} |"
        )
    return "\n".join(lines)


def table_by_kind(results: dict[str, list[Outcome]]) -> str:
    """Mean cost (deadlines met) per job kind and policy."""
    kinds = sorted({o.kind for o in next(iter(results.values()))}, reverse=True)
    lines = [
        "| policy | " + " | ".join(f"{h:g} h job, {d:g} h deadline" for h, d in kinds) + " |",
        "|---|" + "---|" * len(kinds),
    ]
    for name, outcomes in results.items():
        cells = []
        for kind in kinds:
            mine = [o for o in outcomes if o.kind == kind]
            if not mine:
                cells.append("-")
                continue
            cells.append(f"{statistics.mean(o.cost for o in mine):.3f} ({sum(o.met for o in mine)}/{len(mine)} met)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def must_show(results: dict[str, list[Outcome]]) -> list[str]:
    """The must-show points of placement with capacity data on these results, each one line saying whether it holds: survivor
    meets every deadline; its mean cost is below every other policy that meets every deadline; its
    share of wall time with a training VM is at least survivor confined to one region's and uniform
    progress across regions'; its moves a job are at most twice the fewest of any multi-region row."""
    table = {r["policy"]: r for r in rows(results)}
    me = table["survivor"]
    lines = [
        f"{'holds' if me['deadlines_met'] == me['jobs'] else 'FAILS'}: survivor meets every deadline "
        f"({me['deadlines_met']}/{me['jobs']})"
    ]
    rivals = {n: r for n, r in table.items() if n != "survivor" and r["deadlines_met"] == r["jobs"]}
    cheaper = {n: r["mean_cost"] for n, r in rivals.items() if r["mean_cost"] <= me["mean_cost"]}
    lines.append(
        f"{'FAILS' if cheaper else 'holds'}: survivor's mean cost {me['mean_cost']:.4f} below every other "
        "policy that meets every deadline"
        + (" (not below: " + ", ".join(f"{n} {c:.4f}" for n, c in cheaper.items()) + ")" if cheaper else "")
    )
    shares = {n: table[n]["vm_fraction"] for n in ("survivor, one region", "uniform progress, multi-region")}
    below = {n: v for n, v in shares.items() if v > me["vm_fraction"]}
    lines.append(
        f"{'FAILS' if below else 'holds'}: survivor's training VM {me['vm_fraction']:.1%} at least "
        + " and ".join(f"{n}'s {v:.1%}" for n, v in shares.items())
    )
    multi = [
        r["moves_per_job"]
        for n, r in table.items()
        if n not in ("survivor", ALWAYS_ON_DEMAND) and "one region" not in n
    ]
    fewest = min(multi) if multi else 0.0
    ok = me["moves_per_job"] <= 2 * fewest + 1e-9
    lines.append(
        f"{'holds' if ok else 'FAILS'}: survivor's {me['moves_per_job']:.2f} moves a job at most twice the "
        f"fewest of a multi-region row ({fewest:.2f})"
    )
    return lines


def plot(results: dict[str, list[Outcome]], path: str, title: str) -> None:
    """Cost against on-demand per job, policies side by side; a missed deadline is a red cross."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.5))
    for i, outcomes in enumerate(results.values()):
        xs = [i + (j / len(outcomes) - 0.5) * 0.7 for j in range(len(outcomes))]
        ax.scatter([x for x, o in zip(xs, outcomes) if o.met], [o.cost for o in outcomes if o.met], s=4)
        ax.scatter(
            [x for x, o in zip(xs, outcomes) if not o.met],
            [o.cost for o in outcomes if not o.met],
            s=20,
            marker="x",
            color="red",
        )
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels(
        [n.replace(", ", ",\n").replace(" EAGER", "\nEAGER").replace(" FAILOVER", "\nFAILOVER") for n in results],
        fontsize=7,
    )
    ax.set_ylabel("cost / always on-demand")
    ax.set_title(f"{title}: jobs of 6-24 h (red x: deadline missed)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; prints the tables; writes the rows to --json; --write updates the plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--traces",
        required=True,
        nargs="+",
        help="a folder of <zone>_<anything>.json[.gz] traces; several: one a machine shape of "
        "the same job (a place is a shape in a region)",
    )
    parser.add_argument("--json", required=True, help="where to write one row a policy")
    parser.add_argument("--every", type=float, default=24.0, help="hours between start times (default 24)")
    parser.add_argument(
        "--restart",
        type=float,
        default=RESTART_HOURS,
        help=f"hours a restart costs (default {RESTART_HOURS}, from the boot measurements)",
    )
    parser.add_argument(
        "--lost",
        type=float,
        default=LOST_HOURS,
        help=f"hours of work a preemption loses (default {LOST_HOURS}: the notice commit)",
    )
    parser.add_argument("--write", action="store_true", help="also draw docs/benchmarks/capacity-NAME.png")
    parser.add_argument(
        "--half",
        choices=("first", "second"),
        help="only jobs inside that half of the traces' time; second: survivor's constants "
        "chosen on the first half (`fit`) first",
    )
    args = parser.parse_args(argv)
    try:
        zones = load(args.traces[0]) if len(args.traces) == 1 else load_shapes(args.traces)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    shortest = min(deadline for _, deadline in JOBS) * LIMIT_FACTOR
    if zones.hours / (2 if args.half else 1) < shortest:
        print(
            f"error: --traces {args.traces}: {zones.hours:g} h of traces; the shortest job replayed needs "
            f"{shortest:g} h (its deadline x {LIMIT_FACTOR:g})",
            file=sys.stderr,
        )
        return 2
    if not args.every > 0 or not args.restart > 0 or not args.lost >= 0:
        print("error: --every and --restart must be above 0 and --lost at least 0 (hours)", file=sys.stderr)
        return 2
    shares = {r: zones.share([z for z in zones.capacity if region_of(z) == r]) for r in zones.regions}
    print(
        f"{len(zones.capacity)} zones in {len(zones.regions)} regions, {zones.hours:.0f} h; Spot capacity "
        "somewhere in the region "
        + ", ".join(f"{r} {s:.1%}" for r, s in shares.items())
        + f"; anywhere {zones.share(list(zones.capacity)):.1%}"
    )
    bet = Constants()
    if args.half == "second":
        bet, tried = fit(zones, args.every, args.restart, args.lost)
        print(f"survivor's constants chosen on the first half ({len(tried)} tried): {bet.text}")
        for tried_bet, row in sorted(tried, key=lambda t: t[1]["mean_cost"])[:5]:
            print(
                f"  first half: mean cost {row['mean_cost']:.4f}, {row['deadlines_met']}/{row['jobs']} met, "
                f"{row['moves_per_job']:.2f} moves a job: {tried_bet.text}"
            )
    results = run(zones, args.every, args.restart, lost=args.lost, half=args.half, bet=bet)
    out = rows(results)
    out[0]["constants"] = bet.text
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    print(table(results))
    print()
    print(table_by_kind(results))
    print()
    print("\n".join(must_show(results)))
    if args.write:
        names = [os.path.basename(os.path.normpath(t)) for t in args.traces]
        name = names[0] if len(names) == 1 else os.path.commonprefix(names).rstrip("-") + "-shapes"
        os.makedirs(os.path.join(ROOT, "docs", "benchmarks"), exist_ok=True)
        path = os.path.join(ROOT, "docs", "benchmarks", f"capacity-{name}.png")
        plot(results, path, f"Spot traces {name}" + (f", {args.half} half" if args.half else ""))
        print(f"plot: {os.path.relpath(path, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
