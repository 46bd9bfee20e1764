"""The operator's commands for a job's managed instance group on Compute Engine.

    $ survivor preflight cifar10 --config job.yaml --zone us-west1-b     # checks; changes nothing
    $ survivor make-template cifar10 --config job.yaml
    $ survivor make-group cifar10 --template cifar10 --zone us-west1-b   # waits until its VM runs
    $ survivor status cifar10 --zone us-west1-b
    $ survivor stop cifar10 --zone us-west1-b                            # the agent saves first
    $ survivor start cifar10 --zone us-west1-b
    $ survivor logs cifar10 --zone us-west1-b --follow
    $ survivor delete cifar10 --zone us-west1-b                          # never the job dir

Also make-image (survivor's image, so boots install nothing). Each handler turns its arguments into
typed options and calls survivor/operator/ (template.py, group.py, status.py, image.py) and survivor/mig/make.py; failures reach the terminal through
survivor/commands/errors.py. `status --vertex` and `logs --vertex` read a Vertex AI custom job here too
(survivor/operator/vertex_job.py, survivor/cloud/vertex.py), so a flag of every path of one command is
one handler's; `submit` is survivor/commands/vertex.py's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from typing import TYPE_CHECKING

from survivor.cloud.template import MachineOptions
from survivor.commands.errors import CommandError
from survivor.commands import flags

if TYPE_CHECKING:  # imported where a command uses them: `--help` and the parser need neither
    from rich.table import Table

    from survivor.cloud.compute import Compute, GroupRef
    from survivor.mig.address import JobAddress
    from survivor.operator.status import JobStatus
    from survivor.operator.template import TemplateRequest


def _progress(message: str) -> None:
    """Shows a step of a long call (an operation, a wait) on stderr, indented under the command's line."""
    print(f"  {message}", file=sys.stderr, flush=True)


def _note(line: str) -> None:
    """Shows a warning, a preflight finding or a staging step on stderr."""
    print(line, file=sys.stderr)


def connect(project: str) -> Compute:
    """Compute Engine for `project`, reporting its operations' progress on stderr."""
    from survivor.cloud.compute import Compute

    return Compute(project, progress=_progress)


def _address(args: argparse.Namespace) -> JobAddress:
    """The job's group (or standalone instance) the arguments name."""
    from survivor.mig.address import JobAddress

    return JobAddress(
        args.name, project=args.project, zone=args.zone, region=args.region, instance=getattr(args, "instance", None)
    )


def _template_request(args: argparse.Namespace) -> TemplateRequest:
    """The template the make-template (and preflight) flags describe."""
    from survivor.operator.template import TemplateRequest

    # each flag's dest is the MachineOptions field it sets: a new option needs its flag only
    return TemplateRequest(
        name=args.name,
        config=args.config,
        machine={name: getattr(args, name) for name in MachineOptions.names() if hasattr(args, name)},
        gpu=args.gpu,
        install=getattr(args, "install", "image"),
    )


def make_template(args: argparse.Namespace) -> int:
    """`survivor make-template NAME --config SPEC`: the job's instance template (--dry-run: its REST body)."""
    from survivor.cloud.template import pretty
    from survivor.operator import template as templates

    made = templates.make_template(
        _template_request(args), None if args.dry_run else connect, skip_preflight=args.skip_preflight, say=_note
    )
    if made.state == "dry-run":
        print(pretty(made.body))
    elif made.state == "unchanged":
        print(f"template {args.name}: unchanged")
    else:
        print(f"template {args.name}: created in project {made.project}")
    return 0


def make_image(args: argparse.Namespace) -> int:
    """`survivor make-image --config SPEC --zone Z`: survivor's image for this wheel, lock and the trainer's
    requirements, so that make-template's VMs boot into training installing nothing."""
    from survivor.operator import image

    request = image.ImageRequest(
        config=args.config,
        zone=args.zone,
        project=args.project,
        survivor_wheel=args.survivor_wheel,
        machine_type=args.machine_type,
        disk_gb=args.disk_gb,
        deadline=args.deadline,
        poll_seconds=args.poll_seconds,
        keep_builder=args.keep_builder,
    )
    made = image.build_image(request, connect, progress=_progress)
    if made.image is None:
        print(f"image family {made.family}: already built for this wheel and lock; nothing to do")
    else:
        print(f"image {made.image}: created in family {made.family}; make-template boots it for this wheel and lock")
    return 0


def make_group(args: argparse.Namespace) -> int:
    """`survivor make-group NAME --template T --zone Z`: the job's single-VM MIG, waited on until its VM runs."""
    from survivor.mig import make as makes
    from survivor.mig.address import JobAddress
    from survivor.operator.template import check_preflight

    address = _address(args)
    group = address.group()
    if args.dry_run:
        return _dry_run_group(args, group)
    options = makes.GroupOptions(
        template=args.template,
        skip_preflight=args.skip_preflight,
        wait_seconds=args.wait_seconds,
        poll_seconds=args.poll_seconds,
    )
    compute = connect(group.project)
    template = compute.get_template(args.template)
    if template is not None:  # a missing template is make_group's to refuse
        start = makes.choose_start(compute, group, args.template, template)
        if start.why:
            print(f"group {args.name}: {start.why}")
        makes.record_start(compute, start)
        group, options = start.group, dataclasses.replace(options, template=start.template)
        address = JobAddress(args.name, group.project, group.zone, group.region)
    made = makes.make_group(
        compute,
        group,
        options,
        say=_note,
        progress=_progress,
        preflight=lambda body: check_preflight(body, compute, group.zone, group.region, _note),
    )
    if made.state == "stopped":
        print(
            f"group {args.name}: already exists, stopped (target size 0); `survivor start {args.name} "
            f"{address.flag}` starts it"
        )
    elif made.state == "running":
        print(f"group {args.name}: {made.done} ({address.place}); its VM is RUNNING in {made.zone}")
    else:
        print(f"group {args.name}: {made.done} ({address.place}, 1 instance); not waiting for its VM")
    return 0


def _dry_run_group(args: argparse.Namespace, group: GroupRef) -> int:
    """make-group's dry run: the REST body make-group would send, on stdout. It reads, and never
    writes: the template (a state disk makes the group stateful) and, for a group whose spec names
    other places, where Compute Engine's capacity data would start it (`choose_start`: the region,
    and another shape's template, said on stderr). What make-group refuses (a group of the
    name elsewhere or on another template: `refusals`; a template that does not exist) it refuses;
    Compute unreadable (no credentials): the body as named, and one line on stderr saying so."""
    from survivor.mig import make as makes

    makes.group_body(group, args.template)  # a bad name is refused before anything is read
    try:
        compute = connect(group.project)
        template_body = compute.get_template(args.template)
    except Exception as exc:  # noqa: BLE001 -- a dry run shows what it can: the body as named
        _note(
            f"dry run: Compute Engine not read ({type(exc).__name__}: {exc}); the group as named, its template unread"
        )
        print(json.dumps(makes.group_body(group, args.template), indent=2))
        return 0
    # in make-group's order: where it starts, what it refuses there, a missing template
    chosen = makes.choose_start(compute, group, args.template, template_body) if template_body is not None else None
    makes.refusals(compute, *((chosen.group, chosen.template) if chosen else (group, args.template)), say=_note)
    if template_body is None or chosen is None:
        raise CommandError(makes.missing_template(args.template))
    if chosen.why:
        _note(f"group {args.name}: {chosen.why}")
    if chosen.new_template is not None:
        _note(f"dry run: make-group would first make template {chosen.new_template['name']} (the shape's)")
    if chosen.template != args.template:
        template_body = chosen.new_template or compute.get_template(chosen.template) or template_body
    print(json.dumps(makes.group_body(chosen.group, chosen.template, template_body), indent=2))
    return 0


def preflight(args: argparse.Namespace) -> int:
    """`survivor preflight JOB --config ...`: every check, one line each; 1 when one blocks."""
    from survivor.operator.template import preflight_findings
    from survivor.operator.preflight import report

    return 0 if report(preflight_findings(_template_request(args), connect), print) else 1


#: The most of one field `status` shows: a screen's width. A field holds whatever was written to the
#: job dir or a VM's guest attributes, and rich takes minutes over a 60 KB line (its layout and
#: highlighting grow faster than the line); a person reads a screenful.
SCREEN_CHARS = 160


def _shown(value, width: int = SCREEN_CHARS) -> str:
    """A field as `status` prints it: `-` for nothing, one line (control characters as spaces), at most
    `width` characters (the cut marked with `…`), rich's markup escaped (a `[/x]` is text, not a tag)."""
    from rich.markup import escape

    text = "-" if value is None else re.sub(r"[\x00-\x1f\x7f]", " ", str(value)[: width + 1])
    return escape(text if len(text) <= width else text[: width - 1] + "…")


def _print_job_dir(summary: dict) -> None:
    """Shows what the job dir alone says: state, committed step, preemptions, lost steps, every attempt."""
    from survivor.jobdir.status import failed_reason
    from survivor.log import console as make_console

    console = make_console()
    committed = (
        "nothing committed" if summary["committed_step"] is None else f"committed step {summary['committed_step']}"
    )
    # the job dir is the operator's own argument, shown whole (a path: PATH_MAX), as a later command needs it
    console.print(
        f"[bold]{_shown(summary['job_dir'], 4096)}[/bold]: {_shown(summary['state'])}, {committed}, "
        f"{summary['preemptions']} preemptions survived, {summary['steps_lost']} steps lost"
        + ("" if summary.get("goodput") is None else f", goodput {100 * summary['goodput']:.0f}%")
    )
    for line in moves_and_waits_lines(summary):
        console.print(line)
    if summary["failed"]:
        console.print(f"[red]FAILED:[/red] {_shown(failed_reason(summary['failed']))}")
    console.print(boots_table(summary["history"]))


def boots_table(history: list[dict], reason_width: int = SCREEN_CHARS) -> Table:
    """`job_summary`'s boot history as `status` prints it, for a job dir and for a job alike: one
    row a boot, each field `_shown`, the reason cut at `reason_width`."""
    from rich.table import Table

    table = Table("boot", "instance", "restored", "saved", "outcome", "lost", "reason")
    for row in history:
        table.add_row(
            _shown(row["attempt"]),
            _shown(row["instance"]),
            _shown(row["restored"]),
            _shown(row["end_step"]),
            _shown(row["outcome"]),
            _shown(row["steps_lost"]),
            _shown(row["reason"], reason_width),
        )
    return table


def moves_and_waits_lines(summary: dict) -> list[str]:
    """One line per snapshot that waits on a state disk for its instance's next boot, then one per
    move of the job's group to another place (region, machine shape), then where it is now; each
    field `_shown` (cut to a screen's width, markup escaped)."""
    moved = summary.get("moves") or []
    return (
        [
            f"step {_shown(p['step'])} waits on the state disk of {_shown(p['instance'])} ({_shown(p['zone'])}), "
            f"{p['bytes'] / 1e6:.0f} MB: its next boot commits it"
            for p in summary.get("pending") or []
        ]
        + [
            f"moved {_shown(m['time'][:19])} from {_shown(m['from'])} to {_shown(m['to'])}"
            + (f", shape {_shown(m['shape'])}" if m.get("shape") else "")
            + f" ({_shown(m['by'])}): {_shown(m['reason'])}"
            + (" (a state-disk snapshot left behind)" if m.get("lost_pending") else "")
            for m in moved
        ]
        + [f"now at {_shown(m['to'])} on {_shown(m['shape'])}" for m in moved[-1:] if m.get("shape")]
        + [
            f"a switch to {_shown(f['to_mode'])} decided {_shown(f['time'][:19])} ({_shown(f['by'])}) failed: "
            f"{_shown(f['error'])}"
            for f in (summary.get("failed_switches") or [])[-3:]
        ]
    )


def state_disk_lines(report: JobStatus) -> list[str]:
    """`job_status`'s state disks, one line each (where, size, cost a month, why it is there),
    and their total; or why they could not be listed. Each `_shown`."""
    from survivor.cloud.pricing import DISK_BASIS, money

    disks = report.state_disks or []
    lines = [_shown(d["line"], 2 * SCREEN_CHARS) for d in disks]
    if disks:
        lines.append(f"state disks left: {money(report.state_disks_monthly_usd)} a month ({DISK_BASIS})")
    if report.state_disks_error:
        lines.append(f"state disks not listed: {_shown(report.state_disks_error)}")
    return lines


def _print_status(report: JobStatus) -> None:
    """Shows `job_status`'s report: the group, its VM, the job's progress, its cost, its last boots."""
    from survivor.jobdir.status import failed_reason
    from survivor.log import console as make_console

    console = make_console()
    g = report.group
    console.print(
        f"[bold]{_shown(report.name)}[/bold] in {_shown(report.project)}/"
        f"{_shown(report.zone or report.region)}: "
        + (f"group target size {_shown(g['target_size'])}, template {_shown(g['template'])}" if g else "no group")
    )
    for instance in report.instances or []:
        guest = instance.get("guest") or {}
        state = (
            _shown(instance["status"])
            if instance["status"]
            else f"not created yet ({_shown(instance.get('action') or 'CREATING')})"
        )
        errors = "; ".join(f"{_shown(code)}: {_shown(message)}" for code, message in instance.get("errors") or [])
        console.print(
            f"  instance {_shown(instance['name'])} ({_shown(instance['zone'])}): {state}"
            + (f", agent {_shown(guest.get('state'))} at step {_shown(guest.get('step'))}" if guest else "")
            + (f"; the group's last attempt failed: {errors}" if errors and not instance["status"] else "")
        )
        if guest.get("finish"):  # it could not leave its group and powered itself off
            console.print(f"    {_shown(guest['finish'])}")
    if report.resize_request:  # a flex-start group: its request queued, or why it failed
        console.print(f"  flex-start {_shown(report.resize_request)}")
    for line in state_disk_lines(report):
        console.print(f"  {line}")
    job = report.job
    if not job:
        return
    committed = "nothing committed" if job["committed_step"] is None else f"committed step {job['committed_step']}"
    console.print(
        f"  job {_shown(job['state'])}: {committed} of {_shown(job.get('train_steps', '?'))}, "
        f"{job['preemptions']} preemptions survived, {job['steps_lost']} steps lost, "
        f"{job['attempts']} boots"
    )
    for line in moves_and_waits_lines(job):
        console.print(f"  {line}")
    if job.get("failed"):
        console.print(f"  [red]FAILED[/red]: {_shown(failed_reason(job['failed']))}")
    if job.get("budget_stopped"):
        from survivor.policy.budget import stop_line

        where = f"--zone {report.zone}" if report.zone else f"--region {report.region}"
        console.print(
            f"  [yellow]{_shown(stop_line(report.name, job['budget_stopped'], where), 2 * SCREEN_CHARS)}[/yellow]"
        )
    if report.goodput_line:
        console.print(f"  {_shown(report.goodput_line, 2 * SCREEN_CHARS)}")
    # the last ten boots, reasons shorter: this table shares the screen with the group's lines
    console.print(boots_table(job["history"][-10:], reason_width=60))


def status(args: argparse.Namespace) -> int:
    """`survivor status`: a job's group, VM, progress, preemptions, lost work and cost; or its job dir alone
    (`--job-dir` without a name); or a Vertex AI custom job (`--vertex`)."""
    if args.vertex:
        return _vertex_status(args)
    if args.name is None:
        if not args.job_dir:
            raise CommandError("give a job name (with --zone or --region), or --job-dir")
        if args.spot_price or args.on_demand_price:
            raise CommandError(
                "--spot-price/--on-demand-price: name the job too, so its machine and compute hours are known"
            )
        from survivor.jobdir.status import job_summary, read_job

        _readable_job_dir(args.job_dir)
        summary = job_summary(read_job(args.job_dir))
        if args.json:
            print(json.dumps(summary, indent=2, default=str))
        else:
            _print_job_dir(summary)
        return 0
    from survivor.operator.status import job_status

    group = _address(args).group()
    found = job_status(
        connect(group.project),
        group,
        args.job_dir,
        spot_price=args.spot_price,
        on_demand_price=args.on_demand_price,
    )
    if args.json:
        print(json.dumps(found.to_json(), indent=2, default=str))
    else:
        _print_status(found)
    return 0


def _vertex_status(args: argparse.Namespace) -> int:
    """`survivor status --vertex JOB`: the custom job's state beside what its job dir says."""
    from survivor.operator import vertex_job

    report = vertex_job.job_report(args.vertex, args.region, args.job_dir)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0
    print(f"{report['display_name']}: {report['state']} ({report['vertex_job']})")
    if "job" in report:
        found = report["job"]
        if found["checkpoint"] is None:
            print(f"  job dir: no checkpoint yet in {found['checkpoints']}")
        else:
            at = "" if found["step"] is None else f" at step {found['step']}"
            print(f"  job dir: newest checkpoint{at}: {found['checkpoint']}")
    print(f"  logs: survivor logs --vertex {report['vertex_job']}")
    return 0


def _readable_job_dir(job_dir: str) -> None:
    """CommandError unless a local job dir (a path or file://) exists as a directory: a command that
    only reads never creates one, and a mistyped path is not a job that has not started."""
    local = job_dir[len("file://") :] if job_dir.startswith("file://") else job_dir
    if not job_dir.startswith("gs://") and not os.path.isdir(local):
        why = "not a directory" if os.path.exists(local) else "no such directory"
        raise CommandError(f"job dir {job_dir}: {why}")


def report(args: argparse.Namespace) -> int:
    """`survivor report JOB` (or `--job-dir`): goodput, badput by cause, cost so far and projected beside
    on-demand; writes report.md, timeline.png and report.json into --out; `--json` prints the figures."""
    from survivor.operator.status import job_status
    from survivor.operator import report as reports
    from survivor.policy.cost import ReportOptions
    from survivor.cloud.catalog import Machine
    from survivor.cloud.template import parse_gpu
    from survivor.jobdir.status import read_job
    from survivor.jobdir.switches import parse_time

    options = ReportOptions(spot_price=args.spot_price, on_demand_price=args.on_demand_price, online=not args.offline)
    job_dir = args.job_dir
    if args.name is not None:
        group = _address(args).group()
        found = job_status(connect(group.project), group, args.job_dir, read_job_dir=False)
        job_dir = job_dir or found.job_dir
        machine = found.machine
        if machine:
            options.machine = Machine(machine["machine_type"], machine["gpu_type"], machine["gpu_count"])
        fallback = found.fallback_machine
        if fallback:
            options.fallback = Machine(fallback["machine_type"], fallback["gpu_type"], fallback["gpu_count"])
        options.region = group.region or (group.zone or "").rsplit("-", 1)[0]
        options.train_steps = found.train_steps
        # the group asked for its first VM when it was made: the wait before the first boot counts
        options.created = parse_time((found.group or {}).get("created"))
    elif not job_dir:
        raise CommandError("give a job name (with --zone or --region), or --job-dir")
    if not job_dir and args.name is not None and found.group is None:
        where = f"zone {group.zone}" if group.zone else f"region {group.region}"
        raise CommandError(
            f"job {args.name}: no group {args.name} in {group.project}/{where} (deleted, or "
            f"another zone or region?); for a deleted job's report give --job-dir"
        )
    if not job_dir:
        raise CommandError(f"job {args.name}: its template names no job dir; give --job-dir")
    if args.machine_type:
        gpu_type, gpu_count = parse_gpu(args.gpu) if args.gpu else (None, 0)
        options.machine = Machine(args.machine_type, gpu_type, gpu_count)
    options.region = args.region or options.region
    options.train_steps = args.train_steps or options.train_steps
    _readable_job_dir(job_dir)
    made = reports.build_report(read_job(job_dir, train_steps=options.train_steps, created=options.created), options)
    out = args.out or f"survivor-report-{args.name or os.path.basename(job_dir.rstrip('/')) or 'job'}"
    try:
        md, png = reports.write_report(made, out)
    except OSError as exc:
        why = "not a directory" if os.path.exists(out) and not os.path.isdir(out) else exc.strerror or str(exc)
        raise CommandError(f"--out {out}: cannot write the report there: {why}") from exc
    left = state_disk_lines(found) if args.name is not None else []
    section = "## State disks left\n\n" + "\n".join(f"- {line}" for line in left) + "\n" if left else ""
    if section:  # billed until deleted: the report says so, though the job dir alone cannot
        with open(md, "a", encoding="utf-8") as f:
            f.write("\n" + section)
    if args.json:
        print(
            json.dumps(
                {
                    **made.to_json(),
                    **(
                        {
                            "state_disks": found.state_disks or [],
                            "state_disks_monthly_usd": found.state_disks_monthly_usd,
                        }
                        if args.name is not None
                        else {}
                    ),
                },
                indent=2,
                default=str,
            )
        )
    else:
        print(reports.markdown(made, png))
        if section:
            print(section)
        print(f"written: {md}, {png}", file=sys.stderr)
    return 0


def stop(args: argparse.Namespace) -> int:
    """`survivor stop`: graceful; Compute Engine soft-offs the VM and the agent saves and commits first."""
    from survivor.operator import group as groups

    address = _address(args)
    groups.stop(connect(address.resolved_project()), address)
    if args.instance:
        print(f"instance {args.instance}: stopped (the agent saved on the way down)")
    else:
        print(
            f"group {args.name}: resized to 0; the agent saves and commits before its VM goes. "
            f"`survivor start {args.name} {address.flag}` resumes from that checkpoint."
        )
    return 0


def start(args: argparse.Namespace) -> int:
    """`survivor start`: the group back to one VM (or the instance started); training resumes. A job
    stopped at its budget starts only with `--budget` above what it spent (survivor/operator/budget.py)."""
    from survivor.operator import budget
    from survivor.operator import group as groups

    address = _address(args)
    compute = connect(address.resolved_project())
    usd = getattr(args, "budget", None)
    if usd is not None and args.instance:
        raise CommandError("--budget: for a job's group (name it with --zone or --region), not --instance")
    if not args.instance:
        try:
            budget.start(compute, address.group(), usd, say=print)
        except budget.BudgetRefused as exc:
            raise CommandError(str(exc)) from None
    groups.start(compute, address)
    if args.instance:
        print(f"instance {args.instance}: started")
    else:
        print(f"group {args.name}: resized to 1; training resumes from the newest committed checkpoint")
    return 0


def delete(args: argparse.Namespace) -> int:
    """`survivor delete`: the group, then the template. Never the job dir."""
    from survivor.operator import group as groups

    group = _address(args).group()
    groups.delete(connect(group.project), group, args.template, say=print)
    print("the job dir is untouched")
    return 0


def logs(args: argparse.Namespace) -> int:
    """`survivor logs`: the serial port output of the job's VM (the startup script and the agent's journal);
    with --vertex, a Vertex AI custom job's replicas' logs from Cloud Logging."""
    if args.vertex:
        from survivor.cloud import vertex

        try:
            for line in vertex.follow_logs(args.vertex, follow=args.follow, interval=args.interval):
                print(line, flush=True)
        except KeyboardInterrupt:  # Ctrl-C is how an operator ends --follow
            pass
        return 0
    if not args.name and not args.instance:
        raise CommandError(
            "name the job (its MIG), an instance with --instance and --zone, or a Vertex AI custom job with --vertex"
        )
    from survivor.operator import group as groups

    address = _address(args)
    compute = connect(address.resolved_project())
    zone, name = groups.serial_source(compute, address)
    try:
        for text in groups.serial_output(compute, zone, name, follow=args.follow, interval=args.interval):
            sys.stdout.write(text)
            sys.stdout.flush()
    except KeyboardInterrupt:  # Ctrl-C is how an operator ends --follow
        pass
    return 0


def add_commands(sub) -> None:
    """Adds the operator's commands to the command line's subparsers."""
    _add_template_commands(sub)
    _add_group_commands(sub)
    _add_reading_commands(sub)


def _template_flags(p) -> None:
    """The flags that describe a template (make-template and preflight)."""
    p.add_argument("name", help="the template's name (make-group's --template)")
    p.add_argument("--config", required=True, help="the job spec YAML")
    flags.project(p)
    p.add_argument(
        "--machine-type",
        help=f"the VM's machine type (default: the spec's compute.machine_type, else {MachineOptions.machine_type})",
    )
    p.add_argument(
        "--gpu",
        help=f"TYPE:COUNT, e.g. nvidia-tesla-t4:4, or none (default: the spec's compute.gpu, "
        f"else {MachineOptions.gpu_type} times num_gpus on an N1 machine)",
    )
    spot = p.add_mutually_exclusive_group()
    spot.add_argument("--spot", dest="spot", action="store_true", default=None, help="Spot VM (default)")
    spot.add_argument("--on-demand", dest="spot", action="store_false", help="standard (on-demand) VM (default: Spot)")
    p.add_argument(
        "--image-family",
        help=f"the boot image's family (default: the spec's compute.image_family, else {MachineOptions.image_family})",
    )
    p.add_argument(
        "--image-project",
        help=f"the project of that family (default: the spec's compute.image_project, "
        f"else {MachineOptions.image_project})",
    )
    p.add_argument(
        "--disk-gb",
        type=int,
        help=f"the boot disk's size in GB (default: the spec's compute.disk_gb, else {MachineOptions.disk_gb})",
    )
    p.add_argument(
        "--service-account",
        help=f"the VM's service account (default: the spec's "
        f"compute.service_account, else {MachineOptions.service_account}: "
        "Compute Engine's default)",
    )
    p.add_argument(
        "--cloud-platform-scope",
        action="store_true",
        default=None,
        help="the whole cloud-platform scope instead of storage+compute",
    )
    flags.place(
        p,
        zone_help="the zone the group will run in, for the GPU and quota checks (default: the spec's "
        "compute.zone; give it or --region)",
        region_help="the region a regional group will run in (default: the spec's compute.region)",
    )
    p.add_argument(
        "--preemption-notice", type=int, metavar="SECONDS", help="Spot: ask for this much notice before the soft off"
    )
    p.add_argument(
        "--no-external-ip",
        dest="external_ip",
        action="store_false",
        default=None,
        help="no external IP on the VM (an organisation policy may forbid one): it reaches Cloud Storage "
        "through Private Google Access on its subnet; survivor's image installs nothing else",
    )
    p.add_argument(
        "--survivor-wheel", help="stage this local survivor_train-*.whl instead of building one from the checkout"
    )


def _add_template_commands(sub) -> None:
    """make-template, make-image and preflight: what a job boots from."""
    p = flags.command(
        sub,
        "make-template",
        help="create the instance template for a job spec",
        description="Turns the job spec and these flags into the job's instance template: a Spot VM (unless "
        "--on-demand) that boots survivor's image for this install, built first when it is missing "
        "(its cost and time said before), or with --install wheel stages survivor's wheel and lock in "
        "the job dir's bucket. Runs preflight's checks first. A rerun of the same request says "
        "`unchanged`.",
        examples=[
            "survivor make-template cifar10 --config job.yaml --zone us-west1-b --project my-project",
            "survivor make-template cifar10 --config job.yaml --zone us-west1-b --dry-run   "
            "# the REST body; nothing sent",
            "survivor make-template cifar10 --config job.yaml --zone us-west1-b --install wheel",
        ],
    )
    _template_flags(p)
    p.add_argument(
        "--install",
        choices=("image", "wheel"),
        default="image",
        help="image (default): boot survivor's image for this install, built once if missing, so a "
        "recreated VM installs nothing; wheel: stage the wheel and lock, installed on every fresh "
        "boot disk (~3.5 GB)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the exact REST body; call nothing")
    p.add_argument(
        "--skip-preflight", action="store_true", help="create it even if `survivor preflight` finds problems"
    )
    p.set_defaults(func=make_template)

    p = flags.command(
        sub,
        "make-image",
        help="bake survivor, its lock and the trainer's requirements into an image that "
        "make-template then boots (boots install nothing)",
        description="Builds survivor's boot image for this wheel, its lock and the trainer's requirements: a "
        "builder VM in --zone installs them and powers off, and the image is made from its disk "
        "(10-20 minutes). make-template then boots it, so a VM its group recreates installs nothing. "
        "An image family already built for this install is left as it is.",
        examples=["survivor make-image --config job.yaml --zone us-west1-b --project my-project"],
    )
    p.add_argument("--config", required=True, help="the job spec YAML (its job dir stages the wheel and lock)")
    flags.project(p)
    p.add_argument("--zone", required=True, help="where the builder VM runs")
    p.add_argument("--survivor-wheel", help="a local survivor_train-*.whl instead of building one from the checkout")
    p.add_argument(
        "--machine-type",
        default="n1-standard-8",
        help="the builder's machine type (no GPU needed; default %(default)s)",
    )
    p.add_argument(
        "--disk-gb",
        type=int,
        default=100,
        help="the builder's (and so the image's) disk size in GB (default %(default)s)",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=3600.0,
        help="give up on the builder after this many seconds (default %(default)g)",
    )
    p.add_argument(
        "--poll-seconds", type=float, default=15.0, help="how often to look at the builder (default %(default)g s)"
    )
    p.add_argument("--keep-builder", action="store_true", help="leave the builder VM for inspection")
    p.set_defaults(func=make_image)

    p = flags.command(
        sub,
        "preflight",
        help="check bucket, IAM, image, GPU offer and quota for a job; change nothing",
        description="Takes make-template's flags and checks, before anything is spent, what the template would "
        "need: the job dir's bucket and its IAM policy for the VM's service account, the image family, "
        "the GPU in the zone and the regional quota, and the project's IAM policy for what the VM "
        "itself does (leaving its group, the deadline's switch). One line per check; exit 1 when one "
        "blocks. Changes nothing.",
        examples=["survivor preflight cifar10 --config job.yaml --zone us-west1-b --project my-project"],
    )
    _template_flags(p)
    p.set_defaults(func=preflight)


def _add_group_commands(sub) -> None:
    """make-group, stop, start and delete: the job's group."""
    p = flags.command(
        sub,
        "make-group",
        help="create the job's single-instance managed instance group",
        description="Creates the job's managed instance group of one VM from its template: zonal with --zone, or "
        "regional with --region (its VM in any zone of the region that offers the GPU). Waits until "
        "the VM is RUNNING or the group says why it cannot start it (a stockout, a quota, a "
        "permission). A job has one group: a group of its name in another zone or region is refused. A "
        "regional group whose spec names other regions (placement.regions) starts in the one Compute Engine's "
        "capacity data says trains best (without the data: the region named), said in one line.",
        examples=[
            "survivor make-group cifar10 --template cifar10 --zone us-west1-b",
            "survivor make-group cifar10 --template cifar10 --region us-west1 --wait-seconds 0   "
            "# do not wait for its VM",
        ],
    )
    flags.where(p)
    p.add_argument(
        "--template", required=True, help="the instance template the group's VM boots from (make-template's NAME)"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the exact REST body, where capacity data would start the group; reads Compute "
        "Engine, changes nothing",
    )
    p.add_argument(
        "--skip-preflight", action="store_true", help="create it even if `survivor preflight` finds problems"
    )
    p.add_argument(
        "--wait-seconds",
        type=float,
        default=300.0,
        help="wait this long for the VM to be RUNNING or for the group's error (0: do not wait; default %(default)g s)",
    )
    p.add_argument(
        "--poll-seconds", type=float, default=5.0, help="how often to look while waiting (default %(default)g s)"
    )
    p.set_defaults(func=make_group)

    for name, func, text, description in (
        (
            "stop",
            stop,
            "stop training gracefully (the agent saves first): MIG resize to 0",
            "Resizes the job's group to 0 (or stops the standalone --instance). Compute Engine soft-offs the VM, "
            "and its agent saves and commits a checkpoint before it goes; `survivor start` resumes from it.",
        ),
        (
            "start",
            start,
            "start training again: MIG resize to 1",
            "Resizes the job's group back to 1 (or starts the standalone --instance); its VM resumes from the "
            "newest committed checkpoint.",
        ),
    ):
        p = flags.command(
            sub,
            name,
            help=text,
            description=description,
            examples=[
                f"survivor {name} cifar10 --zone us-west1-b",
                f"survivor {name} cifar10 --instance cifar10-x1z2 --zone us-west1-b",
            ],
        )
        flags.where(p, instance=True)
        if name == "start":
            p.add_argument(
                "--budget",
                type=float,
                metavar="USD",
                help="the job's budget from now on, in USD as `survivor report` prices it: a job "
                "stopped at its budget resumes only with one above what it spent",
            )
        p.set_defaults(func=func)

    p = flags.command(
        sub,
        "delete",
        help="delete the job's MIG and template (never the job dir)",
        description="Deletes the job's group, then its template (--template when it has another name); a "
        "template another group still uses is kept, and that group named. Never the job dir: its "
        "checkpoints and records stay.",
        examples=["survivor delete cifar10 --zone us-west1-b"],
    )
    flags.where(p)
    p.add_argument("--template", help="template name when it is not the job's name")
    p.set_defaults(func=delete)


def _add_reading_commands(sub) -> None:
    """status, report and logs: what a job is doing and what it cost."""
    p = flags.command(
        sub,
        "status",
        help="MIG, instance, progress, preemptions, lost work and cost of a job",
        description="Shows the job's group, its VM and what its agent reports, the committed step, the "
        "preemptions survived, the steps lost, the cost so far and the last boots. With --job-dir "
        "alone, what the job dir says (a deleted job's too); with --vertex, a Vertex AI custom job.",
        examples=[
            "survivor status cifar10 --zone us-west1-b",
            "survivor status --job-dir gs://my-project-cifar-10-checkpoints/cifar10 --json",
            "survivor status --vertex projects/P/locations/us-central1/customJobs/ID --job-dir gs://BUCKET/run",
        ],
    )
    flags.where(p, name_optional=True, name_help="the job's name (omit with --job-dir alone for the job dir only)")
    flags.job_dir(p)
    p.add_argument("--vertex", metavar="CUSTOM_JOB", help="a Vertex AI custom job's name (from survivor submit)")
    flags.prices(p, "pricing's offline table")
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(func=status)

    p = flags.command(
        sub,
        "report",
        help="a job's goodput, badput by cause and cost beside on-demand: Markdown, a timeline PNG and JSON",
        description="Goodput, badput by cause, and the cost so far and projected beside on-demand, from the job "
        "dir's records and the Cloud Billing Catalog's prices (else cached ones, else survivor's "
        "offline table). Writes report.md, timeline.png and report.json into --out and prints the "
        "Markdown.",
        examples=[
            "survivor report cifar10 --zone us-west1-b",
            "survivor report --job-dir gs://my-project-cifar-10-checkpoints/cifar10 --machine-type "
            "n1-standard-8 --gpu nvidia-tesla-t4:1 --region us-west1 --offline",
        ],
    )
    flags.where(
        p,
        name_optional=True,
        name_help="the job's name (omit with --job-dir)",
        region_help="the regional MIG's region; with --job-dir, where the prices are read",
    )
    flags.job_dir(p)
    p.add_argument("--machine-type", help="with --job-dir: the VM's machine type, for its prices")
    p.add_argument("--gpu", help="with --machine-type: TYPE:COUNT, e.g. nvidia-tesla-t4:1")
    p.add_argument("--train-steps", type=int, help="with --job-dir: the job's steps, for the projection")
    flags.prices(p, "the Cloud Billing Catalog's")
    p.add_argument(
        "--offline",
        action="store_true",
        help="do not read the Cloud Billing Catalog: cached prices or the offline table",
    )
    p.add_argument(
        "--out", help="the directory for report.md, timeline.png, report.json (default: ./survivor-report-NAME)"
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=report)

    p = flags.command(
        sub,
        "logs",
        help="the job instance's serial port output, or a Vertex AI job's logs",
        description="Prints the serial port output of the job's VM (its startup script and the agent's "
        "journal); --follow keeps printing until Ctrl-C. With --vertex, a Vertex AI custom job's "
        "replicas' logs from Cloud Logging.",
        examples=[
            "survivor logs cifar10 --zone us-west1-b --follow",
            "survivor logs --vertex projects/P/locations/us-central1/customJobs/ID",
        ],
    )
    flags.where(p, instance=True, name_optional=True)
    p.add_argument("--vertex", metavar="CUSTOM_JOB", help="a Vertex AI custom job's name: its replicas' logs")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new output until interrupted")
    p.add_argument(
        "--interval", type=float, default=5.0, help="with --follow: seconds between reads (default %(default)g)"
    )
    p.set_defaults(func=logs)
