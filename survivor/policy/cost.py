"""What a job cost, and the same job on on-demand: the figures `survivor report` and `status` show,
the price the agent puts on DONE, and what the budget is checked against.

    >>> figures = job_figures(read_job(job_dir), report_prices(ReportOptions(machine=machine)), 10000)
    >>> figures.goodput, figures.cost_so_far["job"], figures.saving_projected
    (0.83, 1.92, 7.41)
    >>> costs(spec, view, zone="us-west1-b")          # (the job's USD so far, on-demand's), priced offline
    (1.92, 3.4)

The time comes from the goodput ledger (survivor/jobdir/ledger.py: the attempt records' measured
phases, badput by cause in ml-goodput-measurement's terms); the prices from survivor/cloud/catalog.py
(the Cloud Billing Catalog, its day's cache, the command line's overrides, or the offline table;
`prices.basis` says which). Cost is VM time: Compute Engine bills a VM from its boot to its end, so
the ledger's boots (kernel boot to the attempt's end) are what the job cost so far, each boot at
the price of its provisioning mode: Spot, or on-demand after the deadline policy switched the group
(a switch replaces the VM, so a boot's mode is the mode of the last switch before it booted).

"The same job on on-demand" is the job without disruptions: its productive training, plus one
boot, restore and trainer start (the first attempt's, as measured), at the on-demand price; the
saving is that less the Spot cost. Projected to the finish: the steps left at the measured seconds
per step, in VM time at the measured share of VM time that was productive, at the price of the
mode the group runs in now. The wait before the first VM counts from `ReportOptions.created` (the
group's creation) when it is known.

Pure but for the prices, read as `options` say (`report_prices`; the agent's and the watch's
`prices_for`: offline, the day's cache else the table). The report's Markdown, timeline and
transfers are survivor/operator/report.py's.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from survivor import log as logs
from survivor.cloud.catalog import Machine, Prices, hourly_prices
from survivor.jobdir.ledger import CAUSE, CAUSES, CauseName, Ledger
from survivor.jobdir.switches import FLEX_START, ON_DEMAND, SPOT
from survivor.jobdir.moves import Move
from survivor.jobdir.status import JobView
from survivor.jobdir.switches import SwitchFailure
from survivor.notify.events import Event
from survivor.notify.records import done_event
from survivor.places import is_zone, region_of_zone
from survivor.spec import JobSpec, SpecError

log = logs.get("notify")


@dataclass
class ReportOptions:
    """What a report needs besides the job dir.

    Args:
        machine: the VM's machine (None: no cost, only time).
        region: where it runs, for its prices.
        train_steps: the job's steps (None: no projection).
        spot_price, on_demand_price: USD per hour of the whole VM, instead of the catalog's.
        online: read the Cloud Billing Catalog when today's prices are not cached.
        now: what "so far" means (default: the current time).
        created: when the job first asked for a VM (its group's creationTimestamp), so the wait
            before the first boot counts as waiting for capacity; None: the job starts at its first boot.
        fallback: the deadline's on-demand machine when `fallback:` gives it another shape: on-demand
            VM time after a switch is priced as that machine (the comparison stays `machine` on-demand).
    """

    machine: Machine | None = None
    fallback: Machine | None = None
    region: str = "us-central1"
    train_steps: int | None = None
    spot_price: float | None = None
    on_demand_price: float | None = None
    online: bool = True
    now: _dt.datetime | None = None
    created: _dt.datetime | None = None


@dataclass(frozen=True)
class MoveTransfer:
    """The data a move implies: the committed snapshot the first attempt after the move restored from
    the job dir (`restored`: its manifest; "" a fresh start; None not known) and its `bytes` (None:
    not known, or the snapshot was collected since), read in the move's `region`; `across`: that
    region reads the job dir's bucket across locations (None: the bucket's location is not known)."""

    time: str
    region: str
    restored: str | None
    bytes: int | None
    across: bool | None


@dataclass
class JobReport:
    """A job's goodput, badput by cause, cost so far and projected, beside the same job on on-demand.

    `cost_so_far` and `cost_projected` hold "job" (this job: its Spot VM time at the Spot price and
    its on-demand VM time at the on-demand price) and "on_demand" (the same job on on-demand without
    disruptions); `cost_by_mode` is the job's cost so far split by provisioning mode, `vm_hours_by_mode`
    its VM time, and `mode` the mode the group runs in now."""

    job_dir: str
    state: str
    committed_step: int | None
    train_steps: int | None
    wall_hours: float
    vm_hours: float
    goodput: float | None
    badput_seconds: dict[CauseName, float]
    seconds_per_step: float | None
    prices: Prices | None
    cost_so_far: dict[str, float | None] = field(default_factory=dict)
    cost_projected: dict[str, float | None] = field(default_factory=dict)
    hours_left: float | None = None
    boots: int = 0
    preemptions: int = 0
    mode: str = SPOT
    vm_hours_by_mode: dict[str, float] = field(default_factory=dict)
    cost_by_mode: dict[str, float | None] = field(default_factory=dict)
    ledger: Ledger | None = None
    moves: list[Move] = field(default_factory=list)  # where the group went for capacity
    failed_switches: list[SwitchFailure] = field(default_factory=list)  # decided, refused by Compute Engine
    transfers: list[MoveTransfer] = field(default_factory=list)  # each move's restore, across locations or not
    bucket_location: str = ""  # the job dir's bucket's, as Cloud Storage reports it ("" not known)

    @property
    def saving_so_far(self) -> float | None:
        """USD saved so far against the same progress on on-demand."""
        return _minus(self.cost_so_far.get("on_demand"), self.cost_so_far.get("job"))

    @property
    def saving_projected(self) -> float | None:
        """USD saved at the finish against the whole job on on-demand."""
        return _minus(self.cost_projected.get("on_demand"), self.cost_projected.get("job"))

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON values (what `--json` prints)."""
        out = {
            k: v
            for k, v in asdict(self).items()
            if k not in ("ledger", "prices", "moves", "failed_switches", "transfers")
        }
        out["prices"] = asdict(self.prices) if self.prices else None
        out["saving_so_far"] = self.saving_so_far
        out["saving_projected"] = self.saving_projected
        out["badput"] = {
            cause: {
                "seconds": round(self.badput_seconds[cause], 3),
                "label": CAUSE[cause].label,
                "ml_goodput_measurement": CAUSE[cause].google_term,
            }
            for cause in CAUSES
            if cause != "productive"
        }
        del out["badput_seconds"]
        if self.ledger is not None:
            out["switches"] = [asdict(s) for s in self.ledger.switches]
            out["moves"] = [asdict(m) for m in self.moves]
            out["transfers"] = [asdict(t) for t in self.transfers]
            out["failed_switches"] = [asdict(f) for f in self.failed_switches]
            out["boot_modes"] = {str(number): mode for number, mode in self.ledger.modes.items()}
            out["unsaved_boots"] = list(self.ledger.unsaved)
            out["timeline"] = [
                {"start": s.start.isoformat(), "end": s.end.isoformat(), "cause": s.cause, "attempt": s.attempt}
                for s in self.ledger.spans
            ]
        return out


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 4)


def job_figures(job: JobView, prices: Prices | None, train_steps: int | None) -> JobReport:
    """Pure: the report's figures for one read of the job dir at `prices` (`report_prices`), its moves
    and refused switches listed; no transfers (those read the job dir and its bucket again: the
    dashboard, which refreshes many jobs, shows the figures without them)."""
    latest = job.latest
    report = figures(
        job.ledger,
        prices,
        job_dir=job.job_dir,
        state=job.phase,
        committed_step=latest.step if latest else None,
        train_steps=train_steps,
        preemptions=job.state.preemptions,
    )
    report.moves = job.moves
    report.failed_switches = job.switch_failures
    return report


def report_prices(options: ReportOptions) -> Prices | None:
    """The machine's prices per hour as `options` say (the catalog, its cache, the offline table, the
    prices given; the deadline's fallback machine's on-demand price beside); None without a machine."""
    prices = None
    if options.machine is not None:
        prices = hourly_prices(
            options.machine,
            options.region,
            online=options.online,
            spot_price=options.spot_price,
            on_demand_price=options.on_demand_price,
        )
        if options.fallback is not None and options.fallback != options.machine:
            other = hourly_prices(options.fallback, options.region, online=options.online)
            prices = replace(
                prices,
                fallback_on_demand=other.on_demand,
                flex_start=other.flex_start,
                basis=f"{prices.basis}; the fallback {_machine_text(options.fallback)} on-demand: {other.basis}",
            )
    return prices


def figures(
    ledger: Ledger,
    prices: Prices | None,
    *,
    job_dir: str,
    state: str,
    committed_step: int | None,
    train_steps: int | None,
    preemptions: int,
) -> JobReport:
    """Pure: the report's figures from a ledger and prices."""
    by_cause = ledger.seconds_by_cause()
    once = sum(s.seconds for s in ledger.spans if CAUSE[s.cause].once_per_job and s.attempt == _first(ledger))
    steps_left = max(0, (train_steps or 0) - (committed_step or 0)) if train_steps and state != "DONE" else 0
    per_step = ledger.seconds_per_step
    productive_left = steps_left * per_step if per_step else None
    productive_share = ledger.productive_seconds / ledger.vm_seconds if ledger.vm_seconds else None
    vm_left = productive_left / productive_share if productive_left is not None and productive_share else None
    if steps_left == 0:
        productive_left = vm_left = 0.0
    report = JobReport(
        job_dir=job_dir,
        state=state,
        committed_step=committed_step,
        train_steps=train_steps,
        wall_hours=round(ledger.wall_seconds / 3600, 4),
        vm_hours=round(ledger.vm_seconds / 3600, 4),
        goodput=None if ledger.goodput is None else round(ledger.goodput, 4),
        badput_seconds=by_cause,
        seconds_per_step=per_step,
        prices=prices,
        hours_left=None if vm_left is None else round(vm_left / 3600, 4),
        boots=len(ledger.boots),
        preemptions=preemptions,
        mode=ledger.mode,
        vm_hours_by_mode={mode: round(seconds / 3600, 4) for mode, seconds in ledger.vm_seconds_by_mode().items()},
        ledger=ledger,
    )
    if prices is not None:
        od_hours_so_far = (ledger.productive_seconds + once) / 3600
        report.cost_by_mode = {
            mode: _usd(seconds / 3600, rate(prices, mode)) for mode, seconds in ledger.vm_seconds_by_mode().items()
        }
        report.cost_so_far = {
            "job": _sum(report.cost_by_mode.values()),
            "on_demand": _usd(od_hours_so_far, prices.on_demand),
        }
        if productive_left is not None and vm_left is not None:
            # the VM time left runs in the mode the group is in now, at that mode's price
            left = _usd(vm_left / 3600, rate(prices, ledger.mode))
            report.cost_projected = {
                "job": _sum([report.cost_so_far["job"], left]),
                "on_demand": _usd(od_hours_so_far + productive_left / 3600, prices.on_demand),
            }
    return report


def rate(prices: Prices, mode: str) -> float | None:
    """USD per hour of the job's VM in a provisioning mode ("spot", "on-demand" or "flex-start"):
    on-demand and flex-start are the deadline's fallback machine (on-demand at its own price when it
    has one; flex-start from the catalog's DWS Defined Duration SKUs, docs/flex-start.md)."""
    if mode == FLEX_START:
        return prices.flex_start
    if mode != ON_DEMAND:
        return prices.spot
    return prices.fallback_on_demand if prices.fallback_on_demand is not None else prices.on_demand


def _machine_text(machine: Machine) -> str:
    return machine.machine_type + (f" with {machine.gpu_count} {machine.gpu_type}" if machine.gpu_type else "")


def _sum(values) -> float | None:
    values = list(values)
    return None if any(v is None for v in values) else round(sum(values), 4)


def _first(ledger: Ledger) -> int:
    return ledger.boots[0][0] if ledger.boots else 0


def _usd(hours: float, rate: float | None) -> float | None:
    """USD for `hours` at `rate`; no time costs nothing, even at a price not known."""
    if not hours:
        return 0.0
    return None if rate is None else round(hours * rate, 4)


def cost_summary(report: JobReport) -> dict[str, Any] | None:
    """Pure: `status --json`'s cost, the same figures as its line and as `report`'s (USD); None
    without prices."""
    p = report.prices
    if p is None:
        return None
    return {
        "vm_hours": report.vm_hours,
        "so_far": report.cost_so_far.get("job"),
        "on_demand_so_far": report.cost_so_far.get("on_demand"),
        "saving_so_far": report.saving_so_far,
        "by_mode": report.cost_by_mode,
        "spot_per_hour": p.spot,
        "on_demand_per_hour": p.on_demand,
        "fallback_on_demand_per_hour": p.fallback_on_demand,
        "basis": p.basis,
    }


def status_line(report: JobReport) -> str:
    """One line for `survivor status`: goodput and cost so far (and what on-demand would have cost)."""
    goodput = "goodput -" if report.goodput is None else f"goodput {100 * report.goodput:.0f}%"
    job, on_demand = report.cost_so_far.get("job"), report.cost_so_far.get("on_demand")
    if job is None or report.prices is None:  # a cost comes only with prices
        return f"{goodput} of {report.wall_hours:.2f} h; cost unknown (no machine or price)"
    od = f" (on-demand ${on_demand:.2f})" if on_demand is not None else ""
    after = [
        f"{mode} ${report.cost_by_mode[mode]:.2f}"
        for mode in (ON_DEMAND, FLEX_START)
        if report.vm_hours_by_mode.get(mode) and report.cost_by_mode.get(mode) is not None
    ]
    where = "on Spot" if not after else f"(Spot ${report.cost_by_mode[SPOT]:.2f} + {' + '.join(after)} after a switch)"
    return f"{goodput} of {report.wall_hours:.2f} h; ${job:.2f} so far {where}{od}; {report.prices.basis}"


def machine_of(spec: JobSpec) -> Machine | None:
    """The machine the spec's `compute:` asks for (None: not one survivor can price)."""
    from survivor.cloud.template import MachineOptions

    try:
        options = MachineOptions.from_spec(spec)
    except (SpecError, ValueError, TypeError):
        return None
    return Machine(options.machine_type, options.gpu_type, options.gpu_count or 0)


def job_region(spec: JobSpec, zone: str | None) -> str:
    """The region a job runs in: its VM's zone's, else its `compute.zone`'s, else us-central1."""
    zone = zone or str(spec.extra.get("compute", {}).get("zone") or "")
    return region_of_zone(zone) if is_zone(zone) else "us-central1"


def prices_for(spec: JobSpec, zone: str | None = None) -> Prices | None:
    """The job's prices as `survivor report` takes them offline (today's cache, else the table)."""
    machine = machine_of(spec)
    if machine is None:
        return None
    try:
        return report_prices(ReportOptions(machine=machine, region=job_region(spec, zone), online=False))
    except Exception as exc:  # noqa: BLE001 - an event without a cost still tells
        log.info("no prices for the job's events", error=f"{type(exc).__name__}: {exc}")
        return None


def costs(spec: JobSpec, view: JobView, zone: str | None = None) -> tuple[float | None, float | None]:
    """USD so far: the job's (each boot at its mode's price) and the same progress on on-demand."""
    prices = prices_for(spec, zone)
    if prices is None:
        return None, None
    figures = job_figures(view, prices, spec.train_steps)
    return figures.cost_so_far.get("job"), figures.cost_so_far.get("on_demand")


def priced_done(spec: JobSpec, view: JobView, zone: str | None = None) -> Event | None:
    """DONE's event with its cost against on-demand (None: not DONE)."""
    cost, on_demand = costs(spec, view, zone)
    return done_event(spec.name, view, cost=cost, on_demand_cost=on_demand)
