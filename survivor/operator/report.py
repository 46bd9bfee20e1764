"""What a job cost and where its time went: `survivor report`'s figures, Markdown and timeline PNG.

    >>> report = build_report(read_job(job_dir), ReportOptions(machine=Machine("n1-standard-8", "nvidia-tesla-t4", 1),
    ...                                              region="us-central1", train_steps=10000))
    >>> report.goodput, report.cost_so_far["job"], report.saving_projected
    (0.83, 1.92, 7.41)
    >>> write_report(report, "/tmp/report")   # report.md and timeline.png side by side
    ('/tmp/report/report.md', '/tmp/report/timeline.png')

The time comes from the goodput ledger (survivor/jobdir/ledger.py: the attempt records' measured
phases, badput by cause in ml-goodput-measurement's terms); the prices from survivor/cloud/catalog.py
(the Cloud Billing Catalog, its day's cache, the command line's overrides, or the offline table;
`prices.basis` says which). Cost is VM time: Compute Engine bills a VM from its boot to its end, so
the ledger's boots (kernel boot to the attempt's end) are what the job cost so far, each boot at
the price of its provisioning mode: Spot, or on-demand after the deadline policy switched the group
(the switch records in survivor/jobdir/switches.py; a switch replaces the VM, so a boot's mode is
the mode of the last switch before it booted). The report lists every switch with its reason and who
decided it, and marks it on the timeline.

A move between regions (survivor/jobdir/moves.py) implies data moved between locations when the new
region is outside the job dir's bucket's location (survivor/cloud/locations.py, docs/bucket-location.md):
the report states, for each move, the bytes of the committed snapshot the first attempt after it
restored (its manifest's files) and whether its region reads the bucket across locations. It prices
none of it: no current per-GiB rate was found in a source (docs/bucket-location.md). The commits
after the move and the data dir's reads cross too and are not counted.

"The same job on on-demand" is the job without disruptions: its productive training, plus one
boot, restore and trainer start (the first attempt's, as measured), at the on-demand price; the
saving is that less the Spot cost. Projected to the finish: the steps left at the measured seconds
per step, in VM time at the measured share of VM time that was productive, at the price of the
mode the group runs in now. The wait before the first VM counts from `ReportOptions.created` (the
group's creation) when it is known.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from survivor.cloud import locations
from survivor.cloud.catalog import Machine, Prices, hourly_prices
from survivor.cloud.pricing import money
from survivor.jobdir.journal import NOTICED, Attempt
from survivor.jobdir.ledger import CAUSE, CAUSES, FLEX_START, CauseName, ON_DEMAND, SPOT, UNSAVED, Ledger, parse_time
from survivor.jobdir.moves import Move
from survivor.jobdir.status import JobView
from survivor.jobdir.storage import JobStorage, open_storage
from survivor.jobdir.store import CheckpointStore
from survivor.jobdir.switches import SwitchFailure
from survivor.places import region_of

#: The causes a job on an on-demand VM without disruptions still spends once, at its start.
ONCE_PER_JOB = ("vm_boot", "restore", "trainer_start")


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


def utc_text(text: str) -> str:
    """Pure: a record's time as the report shows it, UTC to the second; the text as written (cut,
    a table cell) when it is no time or none UTC can show (year 1 at +01:00 is before year 1 in UTC)."""
    when = parse_time(text)
    try:
        return when.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if when else _cell(text[:40])
    except OverflowError:
        return _cell(text[:40])


def move_transfers(
    moves: list[Move], attempts: list[Attempt], sizes: dict[str, int], crossing: tuple[str, ...] | None
) -> list[MoveTransfer]:
    """Pure: each move's restore after it. `sizes`: the bytes of each restored manifest still in the
    job dir; `crossing`: the regions that read the job dir's bucket across locations (None: unknown)."""
    out = []
    for move in moves:
        moved = parse_time(move.time)
        after = next((a for a in attempts if moved and (started := parse_time(a.started)) and started >= moved), None)
        restored = after.restored_from if after else None
        size = 0 if restored == "" else sizes.get(restored) if restored else None
        region = region_of(move.to_place)
        out.append(MoveTransfer(move.time, region, restored, size, None if crossing is None else region in crossing))
    return out


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


def build_report(job: JobView, options: ReportOptions) -> JobReport:
    """Prices the machine for one read of the job dir (`read_job`: attempts, DONE/FAILED, the newest
    commit, moves and switches); the report, with the data each move's restore read across locations."""
    report = job_figures(job, report_prices(options), options.train_steps)
    if job.moves:
        storage = open_storage(job.job_dir)
        report.bucket_location, crossing = _bucket_crossing(storage, [region_of(m.to_place) for m in job.moves])
        report.transfers = move_transfers(job.moves, job.state.attempts, _restored_sizes(storage, job), crossing)
    return report


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


def _restored_sizes(storage: JobStorage, job: JobView) -> dict[str, int]:
    """The bytes of each manifest an attempt restored that is still in the job dir."""
    store = CheckpointStore(storage)
    names = {a.restored_from for a in job.state.attempts if a.restored_from}
    return {name: found.size for name in names if (found := store.load(name, bounded=False)) is not None}


def _bucket_crossing(storage: JobStorage, regions: list[str]) -> tuple[str, tuple[str, ...] | None]:
    """The job dir's bucket's location (`buckets.get`; "" when not known) and which of `regions` read
    it across locations (None: not known: a local job dir, or the bucket could not be read)."""
    client = getattr(storage, "client", None)  # a gs:// job dir's google-cloud-storage client
    bucket_name = getattr(storage, "bucket_name", None)
    if client is None or bucket_name is None:
        return "", None
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_errors

    try:
        found = client.get_bucket(bucket_name)
    except (gexc.GoogleAPICallError, auth_errors.GoogleAuthError, OSError):
        return "", None
    data = tuple(found.data_locations or ())
    where = f"{found.location} ({found.location_type})" if found.location else ""
    return where, locations.crossing_regions(found.location or "", found.location_type, sorted(set(regions)), data)


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
    once = sum(s.seconds for s in ledger.spans if s.cause in ONCE_PER_JOB and s.attempt == _first(ledger))
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


def markdown(report: JobReport, png_name: str = "timeline.png") -> str:
    """The report as Markdown: the figures, badput by cause, the switches between Spot and on-demand,
    cost by provisioning mode beside the same job on on-demand, the timeline."""
    lines = [
        f"# Job report: {report.job_dir}",
        "",
        f"State **{report.state}**, committed step {report.committed_step if report.committed_step is not None else '-'}"
        + (f" of {report.train_steps}" if report.train_steps else "")
        + f"; {report.boots} boots, {report.preemptions} preemptions.",
        "",
        f"- Goodput: **{'-' if report.goodput is None else f'{100 * report.goodput:.1f}%'}** of "
        f"{_duration(report.wall_hours * 3600)} wall time ({_duration(report.vm_hours * 3600)} of VM time)",
    ]
    if report.seconds_per_step:
        lines.append(f"- Measured: {report.seconds_per_step:.3f} s per step of productive training")
    if report.hours_left is not None:
        lines.append(f"- Left: {_duration(report.hours_left * 3600)} of VM time at the measured goodput")
    lines += [
        "",
        "## Where the time went",
        "",
        "| cause | ml-goodput-measurement | time | share |",
        "|---|---|---:|---:|",
    ]
    wall = (report.ledger.wall_seconds if report.ledger else report.wall_hours * 3600) or 1.0  # unrounded
    for cause in CAUSES:
        seconds = report.badput_seconds[cause]
        lines.append(
            f"| {CAUSE[cause].label} | {CAUSE[cause].google_term or '(goodput)'} | {_duration(seconds)} | "
            f"{100 * seconds / wall:.1f}% |"
        )
    unsaved = report.ledger.unsaved if report.ledger else []
    if unsaved:
        lines += [
            "",
            f"{CAUSE['checkpoint'].label.capitalize()} include the agent's wait for a save that never came: "
            f"{UNSAVED} in boot{'s' if len(unsaved) > 1 else ''} {', '.join(map(str, unsaved))} (it did "
            "not exit on SIGTERM and was killed; its steps since its last checkpoint were lost).",
        ]
    lines += ["", "## Switches between Spot and on-demand", ""]
    switches = report.ledger.switches if report.ledger else []
    if not switches:
        lines.append("None: every VM ran on Spot.")
    else:
        lines += [
            f"The group runs **{report.mode}** now.",
            "",
            "| time (UTC) | switch | reason | decided by |",
            "|---|---|---|---|",
        ]
        for switch in switches:
            lines.append(
                f"| {utc_text(switch.time)} | {switch.from_mode or '?'} -> {switch.to_mode} | {_cell(switch.reason)} | "
                f"{_cell(switch.by) or '?'} |"
            )
    if report.failed_switches:
        lines += [
            "",
            "Switches decided but refused by Compute Engine (grant the roles in docs/operator-guide.md):",
            "",
            "| time (UTC) | to | decided by | refusal |",
            "|---|---|---|---|",
        ]
        for failure in report.failed_switches:
            lines.append(
                f"| {utc_text(failure.time)} | {failure.to_mode} | {_cell(failure.by) or '?'} | "
                f"{_cell(failure.error[:300])} |"
            )
    lines += ["", "## Moves between regions", ""]
    if not report.moves:
        lines.append("None: the job stayed where its group was made.")
    else:
        lines += ["| time (UTC) | move | reason | decided by |", "|---|---|---|---|"]
        for move in report.moves:
            lost = " (a state-disk snapshot left behind)" if move.lost_pending else ""
            shape = f" ({_cell(move.machine)})" if move.machine else ""
            lines.append(
                f"| {utc_text(move.time)} | {move.from_place} -> {move.to_place}{shape} | {_cell(move.reason)}{lost} | "
                f"{_cell(move.by) or '?'} |"
            )
        lines += [
            "",
            "Data moved between locations by each move's restore (the commits after it and the data "
            "dir's reads cross too and are not counted):",
            "",
        ]
        lines += [f"- {transfer_line(t, report.bucket_location)}" for t in report.transfers]
    lines += ["", "## Cost", ""]
    if report.prices is None:
        lines.append("No machine known: no cost (name the job, or give --machine-type with --job-dir).")
    else:
        p = report.prices
        fallback = (
            ""
            if p.fallback_on_demand is None
            else f", the deadline's on-demand fallback machine {money(p.fallback_on_demand)}/h"
        )
        lines += [
            f"Prices: Spot {money(p.spot)}/h, on-demand {money(p.on_demand)}/h{fallback} ({p.basis}).",
            "",
            "| VM time | time | price | cost |",
            "|---|---:|---:|---:|",
        ]
        for mode, label in (
            (SPOT, "on Spot"),
            (ON_DEMAND, "on on-demand (after a switch)"),
            (FLEX_START, "on flex-start (after a switch)"),
        ):
            if mode == FLEX_START and not report.vm_hours_by_mode.get(mode):
                continue  # a row only for a job that ran on flex-start
            lines.append(
                f"| {label} | {_duration(3600 * report.vm_hours_by_mode.get(mode, 0.0))} | {money(rate(p, mode))}/h | "
                f"{money(report.cost_by_mode.get(mode))} |"
            )
        lines += [
            "",
            "| | this job | on-demand (same job, no disruptions) | saving |",
            "|---|---:|---:|---:|",
            f"| so far | {money(report.cost_so_far.get('job'))} | {money(report.cost_so_far.get('on_demand'))} | "
            f"{money(report.saving_so_far)} |",
        ]
        if report.cost_projected:
            lines.append(
                f"| projected to the finish (on {report.mode}) | {money(report.cost_projected.get('job'))} | "
                f"{money(report.cost_projected.get('on_demand'))} | {money(report.saving_projected)} |"
            )
    lines += ["", "## Timeline", "", f"![timeline]({png_name})", ""]
    return "\n".join(lines)


def transfer_line(transfer: MoveTransfer, bucket_location: str = "") -> str:
    """Pure: one move's restore, for people: its bytes and whether they crossed locations, unpriced."""
    bucket = f"the job dir's bucket ({bucket_location})" if bucket_location else "the job dir's bucket"
    if transfer.bytes is None:
        size = (
            "the restored snapshot's size is not known (collected since, or not recorded)"
            if transfer.restored
            else "nothing known restored yet"
        )
    elif transfer.restored == "":
        return f"to {transfer.region}: a fresh start, nothing restored"
    else:
        size = f"the restore read {transfer.bytes / 2**30:.2f} GiB ({transfer.bytes} bytes)"
    if transfer.across is None:
        return f"to {transfer.region}: {size} from {bucket}; whether across locations is not known"
    if not transfer.across:
        return f"to {transfer.region}: {size} from {bucket}, within its location: no data transfer fee"
    return (
        f"to {transfer.region}: {size} from {bucket} across locations: data transfer between locations, "
        f"not priced here (no sourced per-GiB rate, docs/bucket-location.md; {locations.PRICING_DOC})"
    )


def _cell(text: str) -> str:
    """Text for a Markdown table cell: a reason may hold a pipe or a line break."""
    return " ".join((text or "").split()).replace("|", "\\|")


def _duration(seconds: float) -> str:
    """Seconds for people: `42.0 s`, `12.5 min`, `3.20 h` (a compressed simulation is seconds long)."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.2f} h"


def draw_timeline(report: JobReport, path: str) -> str:
    """The timeline PNG: spans by cause (boots, training, preemptions, capacity gaps; on-demand boots
    hatched) with each switch between Spot and on-demand marked, above the cumulative cost of the job
    (each boot at its mode's price) and of the same VM time on on-demand."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never a display
    import matplotlib.pyplot as plt

    ledger = report.ledger
    if ledger is None:
        raise ValueError("a report without its ledger has no timeline")
    t0 = ledger.start

    def hours(t: _dt.datetime) -> float:
        return (t - t0).total_seconds() / 3600

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True, gridspec_kw={"height_ratios": [1, 2]})
    for cause in CAUSES:
        bars = [(hours(s.start), s.seconds / 3600) for s in ledger.spans if s.cause == cause]
        if bars:
            top.broken_barh(bars, (0, 1), facecolors=CAUSE[cause].colour, label=CAUSE[cause].label)
    for number, start, end, outcome in ledger.boots:
        top.axvline(hours(start), color="black", linewidth=0.6)
        top.text(hours(start), 1.05, f"boot {number}", fontsize=7)
        if ledger.modes.get(number) == ON_DEMAND:  # the same causes, but billed at the on-demand price
            top.broken_barh(
                [(hours(start), (end - start).total_seconds() / 3600)],
                (0, 1),
                facecolors="none",
                edgecolor="#54278f",
                hatch="//",
                linewidth=0,
            )
        if outcome in NOTICED:
            top.axvline(hours(end), color="#de2d26", linewidth=1.2, linestyle="--")
    for switch in ledger.switches:
        when = parse_time(switch.time)
        if when is not None:
            for axis in (top, bottom):
                axis.axvline(hours(when), color="#54278f", linewidth=1.4, linestyle="-.")
            top.text(
                hours(when), -0.02, f"-> {switch.to_mode} ({switch.by or '?'})", fontsize=7, color="#54278f", va="top"
            )
    top.set_yticks([])
    top.set_ylim(0, 1.3)
    if top.get_legend_handles_labels()[0]:  # a job without spans has nothing to label
        top.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=5, fontsize=7, frameon=False)
    top.set_title(
        f"{report.job_dir}: goodput "
        + ("-" if report.goodput is None else f"{100 * report.goodput:.1f}%")
        + " (dashed red: preemption; purple: switch; hatched: on-demand)",
        fontsize=9,
    )
    if report.prices is not None:
        xs, spot, on_demand = [0.0], [0.0], [0.0]
        for number, start, end, _ in ledger.boots:  # cost accrues only while a VM runs, at its mode's price
            own = rate(report.prices, ledger.modes.get(number, SPOT)) or 0
            for t in (start, end):
                xs.append(hours(t))
                spot.append(spot[-1] + (0 if t == start else (end - start).total_seconds() / 3600 * own))
                on_demand.append(
                    on_demand[-1]
                    + (0 if t == start else (end - start).total_seconds() / 3600 * (report.prices.on_demand or 0))
                )
        xs.append(hours(ledger.end))
        spot.append(spot[-1])
        on_demand.append(on_demand[-1])
        bottom.plot(xs, spot, label="this job (Spot; on-demand after a switch)", color="#31a354")
        bottom.plot(xs, on_demand, label="the same VM time on on-demand", color="#3182bd")
        if report.cost_so_far.get("on_demand") is not None:
            bottom.axhline(
                report.cost_so_far["on_demand"],
                color="#3182bd",
                linestyle=":",
                label="the same progress on on-demand, no disruptions",
            )
        bottom.set_ylabel("cumulative USD")
        bottom.legend(fontsize=7, loc="upper left")
    else:
        bottom.text(0.5, 0.5, "no machine known: no cost", ha="center", transform=bottom.transAxes)
    bottom.set_xlabel("hours since the job's start")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(report: JobReport, out_dir: str) -> tuple[str, str]:
    """Writes `report.md` and `timeline.png` (and `report.json`) into `out_dir`; returns both paths."""
    os.makedirs(out_dir, exist_ok=True)
    png = draw_timeline(report, os.path.join(out_dir, "timeline.png"))
    md = os.path.join(out_dir, "report.md")
    with open(md, "w") as f:
        f.write(markdown(report, os.path.basename(png)))
    with open(os.path.join(out_dir, "report.json"), "w") as f:
        json.dump(report.to_json(), f, indent=1, default=str)
    return md, png
