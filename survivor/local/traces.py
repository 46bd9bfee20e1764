"""Seeded Spot weather (preemptions and stockout gaps) and a pure event replay of a deadline policy over it;
and the published Spot traces' reader (`load`: Spot capacity per zone, `Zones`).

    >>> trace = make_trace(seed=7, hours=40, preemptions_per_hour=0.3, stockout_chance=0.4, mean_gap_hours=2)
    >>> run = replay(trace, Job(hours=12, deadline_hours=18), survivor_policy())
    >>> run.met, run.cost_usd, run.switches

A trace is a list of outages: at each one's start a running Spot VM is preempted, and until its end
no Spot VM can be created (a stockout; a gap of 0 is a plain preemption the MIG recreates at once).
The replay advances a clock in `tick_hours` steps: a VM boots for the restart overhead, trains,
loses at most `lost_hours` of work to a preemption (survivor commits on the notice), and costs its
mode's price per hour while it exists; waiting for Spot capacity costs nothing. Decisions run where
survivor runs them: at every boot (the agent) and every `check_every_hours` (`survivor watch`).
`survivor_policy` calls survivor/policy/deadline.py's `decide`, the function the agent calls.
"""

from __future__ import annotations

import json
import os
import random
import re
import stat
import zlib
from dataclasses import dataclass, field
from typing import Callable, Protocol

from survivor.policy import deadline as policy
from survivor.cloud import pricing
from survivor.jobdir.switches import ON_DEMAND, SPOT, Mode


@dataclass(frozen=True)
class Trace:
    """Spot outages over a horizon: (start hour, gap hours) each, and the parameters that made them."""

    seed: int
    outages: tuple[tuple[float, float], ...]
    preemptions_per_hour: float = 0.0
    stockout_chance: float = 0.0
    mean_gap_hours: float = 0.0

    def available_through(self, t0: float, t1: float) -> bool:
        """True when a Spot VM can be created at `t0` and kept to `t1`: no outage with a gap overlaps
        [t0, t1). The replay creates a VM only then, so a tick in which an outage starts does not
        re-create the VM it preempted (which would skip the outage)."""
        return not any(start < t1 and t0 < start + gap for start, gap in self.outages if gap > 0)

    def preempted(self, t0: float, t1: float) -> bool:
        """True when an outage starts in [t0, t1)."""
        return any(t0 <= start < t1 for start, _ in self.outages)

    def place(self, t: float) -> None:
        """A Spot VM is created at `t`: one place only, nothing to choose."""


class Capacity(Protocol):
    """Where Spot capacity is, as the replay asks: a `Trace` (one place), or several zones and regions
    with a rule for where a VM goes (benchmarks/capacity.py)."""

    def available_through(self, t0: float, t1: float) -> bool:
        """True when a Spot VM can be created at `t0` and kept to `t1`."""

    def preempted(self, t0: float, t1: float) -> bool:
        """True when the Spot VM that runs loses its capacity in [t0, t1)."""

    def place(self, t: float) -> None:
        """A Spot VM is created at `t` (after `available_through` said it can be): where it lands."""


def make_trace(
    seed: int,
    hours: float,
    preemptions_per_hour: float,
    stockout_chance: float,
    mean_gap_hours: float,
    start_in_stockout: bool | None = None,
) -> Trace:
    """A seeded trace: preemptions a Poisson process of `preemptions_per_hour`; each followed, with
    `stockout_chance`, by a stockout of exponential length (mean `mean_gap_hours`), else by none."""
    rng = random.Random(seed)
    outages = []
    if start_in_stockout if start_in_stockout is not None else rng.random() < stockout_chance / 2:
        outages.append((0.0, rng.expovariate(1 / mean_gap_hours) if mean_gap_hours else 0.0))
    t = outages[-1][1] if outages else 0.0
    while preemptions_per_hour > 0:
        t += rng.expovariate(preemptions_per_hour)
        if t >= hours:
            break
        gap = rng.expovariate(1 / mean_gap_hours) if mean_gap_hours and rng.random() < stockout_chance else 0.0
        outages.append((round(t, 4), round(gap, 4)))
        t += gap
    return Trace(seed, tuple(outages), preemptions_per_hour, stockout_chance, mean_gap_hours)


@dataclass(frozen=True)
class Job:
    """The job replayed: `hours` of training, due `deadline_hours` after its start, its restart
    overhead, the work a preemption loses at most, and prices (USD/hour; pricing's table by default)."""

    hours: float
    deadline_hours: float
    overhead_hours: float = 0.1
    lost_hours: float = 0.05
    machine_type: str = "n1-standard-8"
    gpu_type: str | None = "nvidia-tesla-t4"
    gpu_count: int = 1
    spot_price: float | None = None
    on_demand_price: float | None = None

    def prices(self) -> tuple[float, float]:
        """(spot, on-demand) USD per hour: as given, else pricing's table."""
        table = pricing.hourly(self.machine_type, self.gpu_type, self.gpu_count) or (1.0, 0.3)
        return (
            self.spot_price if self.spot_price is not None else table[1],
            self.on_demand_price if self.on_demand_price is not None else table[0],
        )


@dataclass(frozen=True)
class View:
    """What a policy sees at a decision: the measured state (the same `Measured`/`Situation` the
    agent builds), whether Spot can be had now (only an oracle would know: uniform progress uses it),
    and how many preemptions so far."""

    measured: policy.Measured
    situation: policy.Situation
    spot_available: bool
    preemptions: int
    t: float
    job: Job


#: A policy: the mode the group should run in now.
Policy = Callable[[View], Mode]


def survivor_policy(switch_back: bool = True) -> Policy:
    """survivor's policy: survivor/policy/deadline.py `decide`, as the agent and `watch` call it."""

    def choose(view: View) -> Mode:
        situation = policy.Situation(**{**view.situation.__dict__, "switch_back": switch_back})
        return policy.decide(view.measured, situation).mode

    return choose


def always(mode: Mode) -> Policy:
    """Always Spot, or always on-demand."""
    return lambda view: mode


def fallback_after(n: int) -> Policy:
    """SkyPilot/dstack style: Spot until the `n`th preemption, or Spot cannot be had; on-demand from then on."""
    state = {"fell": False}

    def choose(view: View) -> Mode:
        if view.preemptions >= n or (not view.spot_available and not view.situation.running):
            state["fell"] = True
        return ON_DEMAND if state["fell"] else SPOT

    return choose


def uniform_progress() -> Policy:
    """Can't Be Late's Uniform Progress (NSDI'24), its four rules as the paper states them, with its
    oracle of Spot availability: on-demand when idle and behind `ep(t) = C0 t / D`; Spot whenever
    available (leaving on-demand only once ahead of `ep(t + 2d)`); the safety net `R < C + 2d`."""
    state = {"net": False}

    def choose(view: View) -> Mode:
        job, t, m = view.job, view.t, view.measured
        done = m.steps_done / max(m.train_steps, 1) * job.hours
        remaining, left, d = job.hours - done, job.deadline_hours - t, job.overhead_hours

        def expected(at: float) -> float:
            return job.hours * at / job.deadline_hours

        idle = not view.situation.running
        if state["net"] or (idle and left < remaining + 2 * d):
            state["net"] = True
            return ON_DEMAND
        mode = view.situation.mode
        if mode == SPOT:
            if view.situation.running or view.spot_available:
                return SPOT
            return ON_DEMAND if done < expected(t) else SPOT
        if view.spot_available and done >= expected(t + 2 * d):
            return SPOT
        return ON_DEMAND

    return choose


@dataclass
class Run:
    """A replay's outcome: deadline met, finish hour, cost, hours per mode, switches, preemptions."""

    met: bool
    finished_at: float | None
    cost_usd: float
    spot_hours: float = 0.0
    on_demand_hours: float = 0.0
    switches: int = 0
    preemptions: int = 0
    events: list[tuple[float, str]] = field(default_factory=list)
    training_hours: float = 0.0  # wall hours with a VM training (booted, restored, not preempted)
    committed_hours: float = 0.0  # the training committed at the end (the job's hours once finished)


def replay(
    trace: Capacity,
    job: Job,
    choose: Policy,
    *,
    tick_hours: float = 1 / 60,
    check_every_hours: float = policy.CHECK_EVERY_HOURS,
    limit_factor: float = 4.0,
    start_mode: Mode = SPOT,
) -> Run:
    """Replays `job` over `trace` under a policy; stops at the finish or `limit_factor` x the deadline.
    The group starts in `start_mode` (survivor's start from a Spot template)."""
    steps_per_hour = 60.0
    spot_price, od_price = job.prices()
    mode, vm, boot_left = start_mode, None, 0.0  # vm: None, "booting", "training"
    done = committed = 0.0
    spot_progress = spot_wall = cost = spot_hours = od_hours = 0.0
    measured_rate = None
    lost_max, preemptions, switches = 0.0, 0, 0
    next_check, t, since_boot, training = 0.0, 0.0, 0.0, 0.0
    events: list[tuple[float, str]] = []
    # what the switch records and attempts tell deadline.measure: failed switch-backs, the last switch
    failed, last_switch, back_on_spot, trained_on_spot = 0, None, False, False

    def view(running: bool) -> View:
        m = policy.Measured(
            steps_done=int(committed * steps_per_hour),
            train_steps=int(job.hours * steps_per_hour),
            step_rate=measured_rate,
            spot_productive_hours=spot_progress,
            spot_wall_hours=spot_wall,
            overhead_hours=job.overhead_hours,
            lost_hours=lost_max,
            elapsed_hours=t,
            failed_switch_backs=failed,
            since_switch_hours=None if last_switch is None else t - last_switch,
            spent_hours=cost / od_price,
            spot_price_ratio=spot_price / od_price,
        )
        s = policy.Situation(
            hours_left=job.deadline_hours - t,
            window_hours=job.deadline_hours,
            mode=mode,
            running=running,
            check_every_hours=check_every_hours,
        )
        return View(m, s, trace.available_through(t, t + tick_hours), preemptions, t, job)

    def decide_now(running: bool) -> None:
        nonlocal mode, vm, boot_left, switches, committed, done, failed, last_switch, back_on_spot, trained_on_spot
        wanted = choose(view(running))
        if wanted != mode:
            events.append((round(t, 3), f"switch to {wanted}"))
            switches += 1
            if wanted == ON_DEMAND and back_on_spot:
                failed = 0 if trained_on_spot else failed + 1
            back_on_spot, trained_on_spot, last_switch = wanted == SPOT, False, t
            mode = wanted
            if vm is not None:  # a graceful recreate: the agent commits on the stop
                committed = done
                vm, boot_left = None, 0.0

    while t < job.deadline_hours * limit_factor:
        if committed >= job.hours - 1e-9:
            return Run(
                t <= job.deadline_hours + 1e-9,
                round(t, 3),
                round(cost, 4),
                round(spot_hours, 3),
                round(od_hours, 3),
                switches,
                preemptions,
                events,
                round(training, 3),
                round(committed, 3),
            )
        if mode == SPOT and vm is not None and trace.preempted(t, t + tick_hours):
            preemptions += 1
            lost = min(job.lost_hours, since_boot) if vm == "training" else 0.0
            lost_max = max(lost_max, lost)
            done = committed = done - lost
            vm = None
            events.append((round(t, 3), "preempted"))
        if vm is None and (mode == ON_DEMAND or trace.available_through(t, t + tick_hours)):
            vm, boot_left = "booting", job.overhead_hours
            if mode == SPOT:
                trace.place(t)
        if vm == "booting":
            boot_left -= tick_hours
            if boot_left <= 1e-9:
                vm, since_boot = "training", 0.0
                decide_now(running=True)  # the agent, at its boot
        if vm != "booting" and t >= next_check:
            next_check = t + check_every_hours
            decide_now(running=vm == "training")  # survivor watch
            if vm is None and (mode == ON_DEMAND or trace.available_through(t, t + tick_hours)):
                vm, boot_left = "booting", job.overhead_hours
                if mode == SPOT:
                    trace.place(t)
        if vm is not None:
            cost += (spot_price if mode == SPOT else od_price) * tick_hours
            if mode == SPOT:
                spot_hours += tick_hours
            else:
                od_hours += tick_hours
        if vm == "training":
            training += tick_hours
            done = min(job.hours, done + tick_hours)
            since_boot += tick_hours
            committed = done  # survivor commits continuously; a preemption loses at most lost_hours
            if mode == SPOT:
                spot_progress += tick_hours
                trained_on_spot = True
            measured_rate = steps_per_hour
        if mode == SPOT:
            spot_wall += tick_hours
        t += tick_hours
    return Run(
        False,
        None,
        round(cost, 4),
        round(spot_hours, 3),
        round(od_hours, 3),
        switches,
        preemptions,
        events,
        round(training, 3),
        round(committed, 3),
    )


# -- the published traces ---------------------------------------------------------------------------
# The format of github.com/skypilot-org/spot-traces, published with "Can't Be Late" (NSDI'24): one JSON
# file a zone, `<zone>_<anything>.json` (or `.json.gz`), `{"metadata": {"gap_seconds": g}, "data": [...]}`,
# a point counting as capacity when it is above 0. benchmarks/capacity.py replays the traces stored in
# benchmarks/traces/ (AWS zones: `us-east-1a`); the Compute fake follows one (`follow_capacity`), whose
# files may name the fake's zones (`us-west1-b`).

_NAME = re.compile(r"^([a-z0-9-]+?[0-9]-?[a-z])_.+\.json(\.gz)?$")


class TraceError(ValueError):
    """A trace folder or file that cannot be replayed; the message names it."""


@dataclass(frozen=True)
class Zones:
    """Spot capacity per zone: a boolean per point, `gap_hours` apart, from hour 0 of the traces."""

    gap_hours: float
    capacity: dict[str, tuple[bool, ...]]

    @property
    def regions(self) -> list[str]:
        """The regions, in name order."""
        return sorted({region_of(z) for z in self.capacity})

    @property
    def hours(self) -> float:
        """The hours every zone's trace covers."""
        return self.gap_hours * min(len(points) for points in self.capacity.values())

    def up(self, zone: str, t0: float, t1: float) -> bool:
        """True when `zone` has capacity at every point in [t0, t1) (hours; none past the end)."""
        points = self.capacity[zone]
        first, last = int(t0 / self.gap_hours), int((t1 - 1e-9) / self.gap_hours)
        return 0 <= first and last < len(points) and all(points[first : last + 1])

    def out(self, zone: str, hours: float) -> bool:
        """True when `zone`'s trace has a point without capacity at `hours`; False for a zone not in
        the traces and before or past its points (nothing recorded: no outage)."""
        points = self.capacity.get(zone, ())
        at = int(hours // self.gap_hours) if hours >= 0 else -1
        return 0 <= at < len(points) and not points[at]

    def share(self, zones: list[str]) -> float:
        """The share of points in which at least one of `zones` has capacity."""
        n = min(len(self.capacity[z]) for z in zones)
        return sum(1 for i in range(n) if any(self.capacity[z][i] for z in zones)) / n


def region_of(zone: str) -> str:
    """`us-east-1a` -> `us-east-1`: the published traces' zones, a region less its last letter;
    `us-west1-b` -> `us-west1`: a Compute Engine zone, less its last hyphen and letter."""
    return zone[:-2] if zone[-2:-1] == "-" else zone[:-1]


#: The largest trace file read, and the most its gzip holds: the published ones are under 1 KB
#: compressed and a few hundred KB of JSON; a file or stream without end (`/dev/zero`) is refused.
MAX_TRACE_BYTES = 64 << 20
#: The points' spacing a trace may have: a second to a day (the published ones: 600 s). Infinity,
#: NaN and 0 would make every hour the first point or none.
MIN_GAP_SECONDS, MAX_GAP_SECONDS = 1, 86400


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _read_trace(path: str) -> bytes:
    """The bytes of the trace at `path`, ungzipped when its name ends .gz; TraceError for anything but
    a regular file (a FIFO would block the open or the read for ever, a device never ends) or more
    than MAX_TRACE_BYTES, compressed or not."""
    try:
        # O_NONBLOCK: opening a FIFO without a writer returns at once, for fstat to refuse it
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise TraceError(f"{path}: cannot open it ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise TraceError(f"{path}: not a regular file (a FIFO, a device, a socket or a folder is no trace)")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(MAX_TRACE_BYTES + 1)
        except OSError as exc:
            raise TraceError(f"{path}: cannot read it ({exc.strerror})") from None
    if len(data) > MAX_TRACE_BYTES:
        raise TraceError(f"{path}: larger than {MAX_TRACE_BYTES >> 20} MB; no trace is")
    if path.endswith(".gz"):
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            data = inflate.decompress(data, MAX_TRACE_BYTES + 1)
        except zlib.error as exc:
            raise TraceError(f"{path}: not gzip ({exc})") from None
        if len(data) > MAX_TRACE_BYTES:
            raise TraceError(f"{path}: more than {MAX_TRACE_BYTES >> 20} MB once ungzipped; no trace is")
        if not inflate.eof:
            raise TraceError(f"{path}: a gzip stream cut short")
    return data


def load(folder: str) -> Zones:
    """Reads a folder of traces (one file a zone); TraceError naming the folder or file otherwise."""
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        raise TraceError(f"traces folder {folder}: cannot list it ({exc.strerror})") from None
    capacity: dict[str, tuple[bool, ...]] = {}
    gaps = set()
    for name in names:
        match = _NAME.match(name)
        if not match:
            continue
        path = os.path.join(folder, name)
        data = _read_trace(path)
        try:
            body = json.loads(data, parse_constant=_no_constant)
            gap = float(body["metadata"]["gap_seconds"])
            if not isinstance(body["data"], list):
                raise TypeError("data is not a list")
            points = tuple(float(p) > 0 for p in body["data"])
        except RecursionError:
            raise TraceError(f"{path}: not a trace in the published format: nested too deeply") from None
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            raise TraceError(
                f"{path}: not a trace in the published format "
                f'({{"metadata": {{"gap_seconds": ...}}, "data": [...]}}): '
                f"{type(exc).__name__}: {str(exc)[:200]}"
            ) from None
        if not MIN_GAP_SECONDS <= gap <= MAX_GAP_SECONDS or not points:
            raise TraceError(
                f"{path}: gap_seconds must be from {MIN_GAP_SECONDS} to {MAX_GAP_SECONDS} and data not empty"
            )
        zone = match.group(1)
        if zone in capacity:
            raise TraceError(f"{path}: a second trace for zone {zone}")
        capacity[zone] = points
        gaps.add(gap)
    if not capacity:
        raise TraceError(f"traces folder {folder}: no <zone>_<anything>.json file in it")
    if len(gaps) > 1:
        raise TraceError(f"traces folder {folder}: the zones' gap_seconds differ ({sorted(gaps)}); one is needed")
    return Zones(gaps.pop() / 3600, capacity)


def from_hour(zones: Zones, hours: float) -> Zones:
    """Pure: the traces from `hours` on (the point that holds it first), for a replay that starts there
    (`survivor simulate --trace-start`); TraceError past their end."""
    if not 0 <= hours < zones.hours:
        raise TraceError(f"--trace-start {hours:g}h: expected 0 or more and before the traces' end ({zones.hours:g}h)")
    first = int(hours // zones.gap_hours)
    return Zones(zones.gap_hours, {zone: points[first:] for zone, points in zones.capacity.items()})


def zone_map(zones: Zones, items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Pure: `--trace-zone TRACE_ZONE=ZONE` items as {trace zone: the fake's zone}; TraceError naming
    the item for one that is malformed or names a zone the traces do not have."""
    out: dict[str, str] = {}
    for item in items:
        traced, _, zone = item.partition("=")
        if not traced or not re.fullmatch(r"[a-z]+-[a-z]+[0-9]+-[a-z]", zone):
            raise TraceError(f"--trace-zone {item!r}: expected TRACE_ZONE=ZONE, e.g. us-east-1a=us-west1-b")
        if traced not in zones.capacity:
            raise TraceError(
                f"--trace-zone {item!r}: the traces have no zone {traced} "
                f"(they have {', '.join(sorted(zones.capacity))})"
            )
        if traced in out or zone in out.values():  # one zone, one trace: the fake follows one a zone
            raise TraceError(f"--trace-zone {item!r}: {traced if traced in out else zone} is mapped twice")
        out[traced] = zone
    return out
