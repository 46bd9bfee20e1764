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

from survivor.cloud import locations
from survivor.cloud.pricing import money
from survivor.jobdir.journal import NOTICED, Attempt
from survivor.jobdir.ledger import CAUSE, CAUSES, UNSAVED, parse_time
from survivor.jobdir.switches import FLEX_START, ON_DEMAND, SPOT
from survivor.jobdir.moves import Move
from survivor.jobdir.status import JobView
from survivor.jobdir.storage import JobStorage, open_storage
from survivor.jobdir.store import CheckpointStore
from survivor.places import region_of
from survivor.policy.cost import JobReport, MoveTransfer, ReportOptions, job_figures, rate, report_prices


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


def build_report(job: JobView, options: ReportOptions) -> JobReport:
    """Prices the machine for one read of the job dir (`read_job`: attempts, DONE/FAILED, the newest
    commit, moves and switches); the report, with the data each move's restore read across locations."""
    report = job_figures(job, report_prices(options), options.train_steps)
    if job.moves:
        storage = open_storage(job.job_dir)
        report.bucket_location, crossing = _bucket_crossing(storage, [region_of(m.to_place) for m in job.moves])
        report.transfers = move_transfers(job.moves, job.state.attempts, _restored_sizes(storage, job), crossing)
    return report


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
