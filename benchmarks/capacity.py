"""Capacity wherever it is: deadline and recovery policies replayed on real Spot availability traces (issue 27).

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

- `survivor`: survivor/operator/deadline.py `decide` with the job allowed in every region of the
  folder (`placement.regions`): a Spot VM goes to a zone of the group's region with capacity (a
  regional MIG); when the region has had none for `MOVE_AFTER_HOURS` (`move_after_minutes: 1`, one
  look of `survivor watch --every 1m`), survivor/operator/placement.py `decide` (the built rule, not a
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
from dataclasses import dataclass, field
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from survivor.cloud.capacity import Outlook  # noqa: E402
from survivor.local import capacity_advice  # noqa: E402
from survivor.operator import move_bet, placement  # noqa: E402
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
#: the restore's measured rate): about 180 s. Issue 27's own figure, 0.2 h, is `--restart 0.2`.
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
#: The replay runs to this many times the deadline (a Spot-only job may need longer; it then missed).
LIMIT_FACTOR = 2.0
#: The table's machine: the traces are of one V100 VM.
MACHINE = dict(machine_type="n1-standard-8", gpu_type="nvidia-tesla-v100", gpu_count=1)
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
            # survivor's own rule (survivor/operator/placement.py `decide`): after `move_after` with no
            # capacity in its region, the group moves to the next region of the list, which it cannot
            # know has capacity (no oracle); there it waits again, and moves on again
            here = up(self._zones(self.region))
            if here:
                self._out_since = None
                return here
            self._out_since = t0 if self._out_since is None else self._out_since
            look = placement.Look(f"regions/{self.region}", idle_seconds=(t0 - self._out_since) * 3600,
                                  capacity_errors=("ZONE_RESOURCE_POOL_EXHAUSTED",),
                                  moves_without_vm=self._fruitless)
            decision = placement.decide(Rule(tuple(self.regions), move_after_minutes=self.move_after * 60), look)
            if not decision.move:
                return []
            self.region, self._out_since, self.moves = decision.to_region, t0, self.moves + 1
            self._fruitless += 1
            return up(self._zones(self.region))
        if self.rule == "advice":
            # survivor with Compute Engine's capacity data (issue 40): the region's outlook is its best
            # zone's advice.capacity scores as the Compute fake serves them from the traces' past
            # (survivor/local/capacity_advice.py); no history (an N1 VM with a V100 has none); the
            # move is survivor/operator/move_bet.py `weigh`, the function placement.decide calls
            here = up(self._zones(self.region))
            if here:
                return here
            at = self.start + t0
            outlooks = {r: self._outlook(r, at) for r in self.regions}
            bet = move_bet.weigh(self.region, outlooks, move_bet.Costs(hours_left=float("inf")))
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

    def _outlook(self, region: str, at: float) -> Outlook:
        best = max((capacity_advice.scores(self.zones, z, at) for z in self._zones(region)),
                   key=lambda sc: (sc.obtainability, sc.uptime_seconds))
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
    "survivor, timer rule (before issue 40)": (traces.survivor_policy, "move"),
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
    return traces.Job(hours=hours, deadline_hours=deadline, overhead_hours=restart, lost_hours=lost, **MACHINE)


def replay_one(zones: Zones, name: str, job: traces.Job, start: float, home: str, base_cost: float) -> Outcome:
    """Replays one job under one policy."""
    make, rule = POLICIES[name]
    where = Placement(zones, start, home, rule)
    run = traces.replay(where, job, make(), limit_factor=LIMIT_FACTOR, check_every_hours=CHECK_EVERY_HOURS,
                        start_mode=traces.ON_DEMAND if name == ALWAYS_ON_DEMAND else traces.SPOT)
    wall = run.finished_at if run.finished_at is not None else job.deadline_hours * LIMIT_FACTOR
    return Outcome((job.hours, job.deadline_hours), home, start, run.met, run.training_hours / wall,
                   min(run.committed_hours, job.hours) / wall, run.cost_usd / base_cost, where.moves)


def run(zones: Zones, every: float, restart: float = RESTART_HOURS,
        jobs: tuple[tuple[float, float], ...] = JOBS, lost: float = LOST_HOURS,
        half: str | None = None) -> dict[str, list[Outcome]]:
    """Every policy on every job: each kind, from each region as home, at starts `every` hours apart
    (as many as fit the traces with the replay's limit); `half` "first" or "second": only jobs whose
    whole replay lies in that half of the traces' time."""
    out: dict[str, list[Outcome]] = {name: [] for name in POLICIES}
    for hours, deadline in jobs:
        job = job_of(hours, deadline, restart, lost)
        base = traces.replay(traces.Trace(0, ()), job, traces.always(traces.ON_DEMAND),
                             start_mode=traces.ON_DEMAND).cost_usd
        starts = []
        lo, hi = {None: (0.0, zones.hours), "first": (0.0, zones.hours / 2),
                  "second": (zones.hours / 2, zones.hours)}[half]
        s = lo
        while s + deadline * LIMIT_FACTOR <= hi:
            starts.append(s)
            s += every
        for home in zones.regions:
            for start in starts:
                for name in POLICIES:
                    out[name].append(replay_one(zones, name, job, start, home, base))
    return out


def rows(results: dict[str, list[Outcome]]) -> list[dict]:
    """One row a policy, over all its jobs."""
    out = []
    for name, outcomes in results.items():
        costs = [o.cost for o in outcomes]
        out.append({
            "policy": name, "jobs": len(outcomes), "deadlines_met": sum(o.met for o in outcomes),
            "vm_fraction": round(statistics.mean(o.vm_fraction for o in outcomes), 4),
            "goodput": round(statistics.mean(o.goodput for o in outcomes), 4),
            "mean_cost": round(statistics.mean(costs), 4), "worst_cost": round(max(costs), 4),
            "moves_per_job": round(statistics.mean(o.moves for o in outcomes), 3)})
    return out


def table(results: dict[str, list[Outcome]]) -> str:
    """The Markdown table of `rows`, and one line a job kind for survivor against the others."""
    lines = ["| policy | jobs | deadlines met | mean cost | moves a job | worst cost | training VM | goodput |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows(results):
        lines.append(f"| {r['policy']} | {r['jobs']} | {r['deadlines_met']} | {r['mean_cost']:.3f} | "
                     f"{r['moves_per_job']:.2f} | {r['worst_cost']:.3f} | {r['vm_fraction']:.1%} | {r['goodput']:.1%} |")
    return "\n".join(lines)


def table_by_kind(results: dict[str, list[Outcome]]) -> str:
    """Mean cost (deadlines met) per job kind and policy."""
    kinds = sorted({o.kind for o in next(iter(results.values()))}, reverse=True)
    lines = ["| policy | " + " | ".join(f"{h:g} h job, {d:g} h deadline" for h, d in kinds) + " |",
             "|---|" + "---|" * len(kinds)]
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


def plot(results: dict[str, list[Outcome]], path: str) -> None:
    """Cost against on-demand per job, policies side by side; a missed deadline is a red cross."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.5))
    for i, outcomes in enumerate(results.values()):
        xs = [i + (j / len(outcomes) - 0.5) * 0.7 for j in range(len(outcomes))]
        ax.scatter([x for x, o in zip(xs, outcomes) if o.met], [o.cost for o in outcomes if o.met], s=4)
        ax.scatter([x for x, o in zip(xs, outcomes) if not o.met], [o.cost for o in outcomes if not o.met], s=20,
                   marker="x", color="red")
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels([n.replace(", ", ",\n").replace(" EAGER", "\nEAGER").replace(" FAILOVER", "\nFAILOVER")
                        for n in results], fontsize=7)
    ax.set_ylabel("cost / always on-demand")
    ax.set_title("Spot availability traces aws-02-15-2023 (1 V100, 9 zones, 3 regions): jobs of 6-24 h "
                 "(red x: deadline missed)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; prints the tables; writes the rows to --json; --write updates the plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", required=True, help="a folder of <zone>_<anything>.json[.gz] traces")
    parser.add_argument("--json", required=True, help="where to write one row a policy")
    parser.add_argument("--every", type=float, default=24.0, help="hours between start times (default 24)")
    parser.add_argument("--restart", type=float, default=RESTART_HOURS,
                        help=f"hours a restart costs (default {RESTART_HOURS}, from the boot measurements)")
    parser.add_argument("--lost", type=float, default=LOST_HOURS,
                        help=f"hours of work a preemption loses (default {LOST_HOURS}: the notice commit)")
    parser.add_argument("--write", action="store_true", help="also draw docs/benchmarks/capacity.png")
    parser.add_argument("--half", choices=("first", "second"), help="only jobs inside that half of the traces' time")
    args = parser.parse_args(argv)
    try:
        zones = load(args.traces)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    shortest = min(deadline for _, deadline in JOBS) * LIMIT_FACTOR
    if zones.hours / (2 if args.half else 1) < shortest:
        print(f"error: --traces {args.traces}: {zones.hours:g} h of traces; the shortest job replayed needs "
              f"{shortest:g} h (its deadline x {LIMIT_FACTOR:g})", file=sys.stderr)
        return 2
    if not args.every > 0 or not args.restart > 0 or not args.lost >= 0:
        print("error: --every and --restart must be above 0 and --lost at least 0 (hours)", file=sys.stderr)
        return 2
    shares = {r: zones.share([z for z in zones.capacity if region_of(z) == r]) for r in zones.regions}
    print(f"{len(zones.capacity)} zones in {len(zones.regions)} regions, {zones.hours:.0f} h; Spot capacity "
          "somewhere in the region " + ", ".join(f"{r} {s:.1%}" for r, s in shares.items())
          + f"; anywhere {zones.share(list(zones.capacity)):.1%}")
    results = run(zones, args.every, args.restart, lost=args.lost, half=args.half)
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(rows(results), f, indent=1)
    print(table(results))
    print()
    print(table_by_kind(results))
    if args.write:
        os.makedirs(os.path.join(ROOT, "docs", "benchmarks"), exist_ok=True)
        plot(results, os.path.join(ROOT, "docs", "benchmarks", "capacity.png"))
        print("plot: docs/benchmarks/capacity.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
