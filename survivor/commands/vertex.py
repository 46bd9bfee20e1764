"""The Vertex AI command: submit.

    $ survivor submit --config job.yaml --region us-central1 --dry-run   # the request; nothing sent

The same job spec and trainer as a Vertex AI custom job; survivor/cloud/vertex.py builds the request
and talks to Vertex AI. Watching it (`status --vertex`, `logs --vertex`) is a path of those commands,
in survivor/commands/group.py, so a flag of `logs` reaches all its paths from one handler.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys

from survivor.cloud import vertex
from survivor.commands import flags
from survivor.commands.errors import CommandError
from survivor.spec import SpecError


def submit(args: argparse.Namespace) -> int:
    """`survivor submit`: sends the custom job (prints it with --dry-run), then says how to watch it."""
    from survivor.operator import vertex_job  # here, not at the top: the parser (`--help`) needs no job dir

    request = vertex.SubmitRequest(
        config=args.config,
        training_input=args.training_input,
        project=args.project,
        region=args.region,
        package=args.package,
        container_image=args.container_image,
        executor_images=tuple(args.executor_image or ()),
        spot=args.spot,
        flex_start=args.flex_start,
        max_wait_hours=args.max_wait,
    )
    strategy_of = None
    if args.training_hours is not None:
        if args.spot or args.flex_start:
            raise SpecError(
                [
                    "--training-hours lets the deadline policy choose Spot, flex-start or standard: drop --spot/--flex-start"
                ]
            )

        def strategy_of(spec, pools):
            steps = 0 if args.dry_run else vertex_job.steps_done(spec.job_dir)
            choice = vertex_job.deadline_strategy(
                spec,
                pools,
                training_hours=args.training_hours,
                now=_dt.datetime.now(_dt.timezone.utc),
                steps_done=steps,
                spot_preemptions_per_hour=args.spot_preemptions_per_hour,
                max_wait_hours=args.max_wait,
            )
            return (
                choice.strategy,
                choice.max_wait_hours,
                f"deadline policy: {choice.strategy}: {choice.decision.reason}",
            )

    submission = vertex.prepare(request, strategy_of=strategy_of)
    for note in submission.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.dry_run:
        print(json.dumps(submission.body, indent=2))
        return 0
    if not submission.project:
        raise SpecError(["project: give --project, vertex.project in the spec, or set GOOGLE_CLOUD_PROJECT"])
    problems = vertex_job.storage_problems(submission.body)
    if problems:
        raise CommandError("; ".join(problems))
    created = vertex.submit(submission.body, submission.project, submission.region)
    print(f"submitted {created['name']}")
    print(f"watch it: survivor status --vertex {created['name']} --job-dir {submission.job_dir}")
    return 0


def add_commands(sub) -> None:
    """Adds `survivor submit` to the command line's subparsers (status and logs take --vertex: group.py)."""
    p = flags.command(
        sub,
        "submit",
        help="run the job on Vertex AI custom jobs (many workers, managed restarts)",
        description="Sends the job spec to Vertex AI as a custom job: the same trainer, on one or many workers "
        "(a Cloud ML Engine trainingInput config translated with --training-input), resumed from "
        "--job-dir by the same contract. Prints how to follow it (survivor status --vertex, "
        "survivor logs --vertex).",
        examples=[
            "survivor submit --config job.yaml --region us-central1 --dry-run   # the request; nothing sent",
            "survivor submit --config job.yaml --training-input config.yaml --package "
            "gs://BUCKET/survivor_train-0.1.0.tar.gz",
        ],
    )
    p.add_argument("--config", required=True, help="the job spec YAML")
    p.add_argument("--training-input", help="a Cloud ML Engine config.yaml (trainingInput: scaleTier, masterType...)")
    flags.project(p, help="Google Cloud project (default: the spec's vertex.project, else $GOOGLE_CLOUD_PROJECT)")
    flags.region(p, help="Vertex region (default: vertex.region or us-central1)")
    p.add_argument(
        "--package", help="gs:// sdist holding the trainer (survivor_train-VERSION.tar.gz for a builtin trainer)"
    )
    p.add_argument("--container-image", help="run this image instead of a Python package")
    p.add_argument(
        "--executor-image",
        action="append",
        default=None,
        metavar="URI",
        help="a prebuilt training image newer than survivor's table (once for -cpu., once for -gpu.)",
    )
    p.add_argument("--spot", action="store_true", default=None, help="Spot VMs for every worker pool")
    p.add_argument(
        "--flex-start",
        action="store_true",
        default=None,
        help="queue for the machines with Dynamic Workload Scheduler (scheduling.strategy FLEX_START; "
        "L4, A100, H100, H200 or B200 GPUs, one machine for every pool)",
    )
    p.add_argument(
        "--max-wait",
        type=float,
        metavar="HOURS",
        help="flex-start: how long the job may queue for its machines (maxWaitDuration; Vertex's default "
        "24; 0: until they come)",
    )
    p.add_argument(
        "--training-hours",
        type=float,
        metavar="HOURS",
        help="hours the whole training takes on these machines: the spec's deadline: policy then chooses "
        "Spot, flex-start (fallback.flex_start) or standard (docs/scaling-out.md)",
    )
    p.add_argument(
        "--spot-preemptions-per-hour",
        type=float,
        metavar="RATE",
        help="with --training-hours: the Spot preemptions an hour to plan with (default: none assumed)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the request; send nothing")
    p.set_defaults(func=submit)
