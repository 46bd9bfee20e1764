"""`survivor dashboard`: a read-only web page of jobs on 127.0.0.1 (survivor/operator/dashboard/).

    $ survivor dashboard gs://my-project-checkpoints/                  # every job dir under the prefix
    $ survivor dashboard /tmp/jobs/a /tmp/jobs/b --machine-type n1-standard-8 --gpu nvidia-tesla-t4:1
    $ survivor dashboard --group cifar10 --zone us-west1-b             # a group's job, as `status` finds it

The handler turns the arguments into the board's sources (a group's found through Compute Engine
once, at the start: its job dir, machine, steps and spec) and serves the board until interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys

from survivor.commands import flags
from survivor.commands.errors import CommandError

DESCRIPTION = """\
Serves a read-only web page of jobs on 127.0.0.1: each job's state, step of total, goodput, cost so
far and projected beside on-demand, the deadline's verdict and its last event, and a page per job with
its timeline (boots, notices, commits, moves, switches, time without a VM), badput by cause and cost.
Open pages refresh themselves; each refresh reads from the bucket only the records that changed.
Give job dirs, folders (bucket prefixes) of job dirs, or a group's job (--group NAME with --zone or
--region), as `survivor status` finds it: its template's job dir, machine, steps and deadline."""

EXAMPLES = [
    "survivor dashboard gs://my-project-checkpoints/",
    "survivor dashboard /tmp/jobs/a /tmp/jobs/b --machine-type n1-standard-8 --gpu nvidia-tesla-t4:1",
    "survivor dashboard --group cifar10 --zone us-west1-b --port 8090",
]


def add_commands(sub) -> None:
    """Adds `dashboard`."""
    p = flags.command(
        sub,
        "dashboard",
        help="a read-only web page of jobs on 127.0.0.1, refreshing while they run",
        description=DESCRIPTION,
        examples=EXAMPLES,
    )
    p.add_argument(
        "where",
        nargs="*",
        metavar="JOB_DIR",
        help="a job dir, or a folder (gs://BUCKET/PREFIX or a local path) whose folders are job dirs",
    )
    p.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="NAME",
        help="a job's group (with --zone or --region); may be given more than once",
    )
    flags.project(p)
    flags.place(p, region_help="the regional MIG's region; for job dirs, where the prices are read")
    p.add_argument("--machine-type", help="for job dirs: the VM's machine type, for its prices")
    p.add_argument("--gpu", help="with --machine-type: TYPE:COUNT, e.g. nvidia-tesla-t4:1")
    p.add_argument(
        "--train-steps", type=flags.positive, help="for job dirs: the job's steps, for step of total and the projection"
    )
    flags.prices(p, "cached catalog prices or the offline table")
    p.add_argument(
        "--host", default="127.0.0.1", help="the address to serve on (default: 127.0.0.1, this machine only)"
    )
    p.add_argument("--port", type=int, default=8080, help="the port to serve on (default: 8080)")
    p.add_argument(
        "--refresh",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how often an open page refreshes, and a running job is read again (default: 10)",
    )
    p.set_defaults(func=dashboard)


def dashboard(args: argparse.Namespace) -> int:
    """`survivor dashboard`: the board of the given sources, served until Ctrl-C."""
    from survivor.extras import require

    require("flask", "operator", "survivor dashboard")
    require("waitress", "operator", "survivor dashboard")
    from survivor.operator.dashboard.board import Board
    from survivor.operator.dashboard.web import make_app, serve

    if not args.where and not args.group:
        raise CommandError(
            "give job dirs, a folder (a bucket prefix) of job dirs, or --group NAME with --zone or --region"
        )
    if args.refresh <= 0:
        raise CommandError(f"--refresh {args.refresh}: expected seconds > 0")
    sources = [*(_group_source(args, name) for name in args.group), *(_dir_source(args, url) for url in args.where)]
    board = Board(sources, refresh_seconds=args.refresh, project=args.project)
    hosts = None if args.host in ("127.0.0.1", "localhost") else [args.host]
    app = make_app(board, refresh_seconds=args.refresh, hosts=hosts)
    print(
        f"survivor dashboard: http://{args.host}:{args.port}/ ({len(sources)} source(s); read-only; Ctrl-C stops it)",
        file=sys.stderr,
        flush=True,
    )
    try:
        serve(app, host=args.host, port=args.port)
    except OSError as exc:
        raise CommandError(
            f"--host {args.host} --port {args.port}: cannot serve there ({exc.strerror or exc})"
        ) from exc
    return 0


def _options(args: argparse.Namespace):
    """The prices and steps the command line gives job dirs."""
    from survivor.cloud.catalog import Machine
    from survivor.cloud.template import parse_gpu
    from survivor.policy.cost import ReportOptions

    options = ReportOptions(
        online=False,
        spot_price=args.spot_price,
        on_demand_price=args.on_demand_price,
        train_steps=args.train_steps,
        region=args.region or "us-central1",
    )
    if args.machine_type:
        gpu_type, gpu_count = parse_gpu(args.gpu) if args.gpu else (None, 0)
        options.machine = Machine(args.machine_type, gpu_type, gpu_count)
    return options


def _dir_source(args: argparse.Namespace, url: str):
    """A job dir, or a folder of them, from the command line: a local one must exist (nothing is created)."""
    from survivor.operator.dashboard.board import JobSource

    local = url[len("file://") :] if url.startswith("file://") else url
    if not url.startswith("gs://") and not os.path.isdir(local):
        why = "not a directory" if os.path.exists(local) else "no such directory"
        raise CommandError(f"{url}: {why}")
    return JobSource(url.rstrip("/") or url, options=_options(args))


def _group_source(args: argparse.Namespace, name: str):
    """A group's job as `survivor status NAME` finds it: its template's job dir, machine, steps, spec."""
    from survivor.cloud.catalog import Machine
    from survivor.commands.group import connect
    from survivor.jobdir.switches import parse_time
    from survivor.mig.address import JobAddress
    from survivor.operator.status import job_status
    from survivor.operator.dashboard.board import JobSource
    from survivor.operator.watch import group_spec

    if not (args.zone or args.region):
        raise CommandError(f"--group {name}: give --zone or --region")
    group = JobAddress(name, project=args.project, zone=args.zone, region=args.region).group()
    compute = connect(group.project)
    found = job_status(compute, group, read_job_dir=False)
    if found.group is None:
        where = f"zone {group.zone}" if group.zone else f"region {group.region}"
        raise CommandError(f"--group {name}: no group {name} in {group.project}/{where}")
    if not found.job_dir:
        raise CommandError(f"--group {name}: its template names no job dir")
    _, spec = group_spec(compute, compute.get_group(group) or {})
    options = _options(args)
    options.region = group.region or (group.zone or "").rsplit("-", 1)[0]
    options.train_steps = found.train_steps or options.train_steps
    options.created = parse_time((found.group or {}).get("created"))
    for machine, field in ((found.machine, "machine"), (found.fallback_machine, "fallback")):
        if machine:
            setattr(options, field, Machine(machine["machine_type"], machine["gpu_type"], machine["gpu_count"]))
    return JobSource(found.job_dir, name=name, options=options, spec=spec, exact=True)
