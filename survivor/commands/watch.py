"""`survivor watch JOB`: the deadline policy for a job's group, from anywhere, while no VM may run.

    $ survivor watch cifar10 --zone us-west1-b              # one look: decide, switch if needed
    $ survivor watch cifar10 --zone us-west1-b --every 15m  # keep looking (a laptop, Cloud Shell)
    $ survivor watch cifar10 --zone us-west1-b --deploy --service-account SA_EMAIL [--image IMAGE]
    $ survivor watch cifar10 --zone us-west1-b --undeploy

The agent decides at every boot; during a Spot stockout there is no boot, so something outside the
VM has to look. `--deploy` makes Google Cloud do it: a Cloud Run job running one look
(`--once`) and a Cloud Scheduler job triggering it every `--every` (15m by default;
survivor/operator/watch_deploy.py, docs/deadline.md); `--every` alone loops in the foreground.
Never an always-on VM of survivor's.
"""

from __future__ import annotations

import argparse
import re
import sys
import time

from typing import TYPE_CHECKING

from survivor.commands import flags
from survivor.commands.errors import CommandError
from survivor.spec import SpecError

if TYPE_CHECKING:  # the Compute client is imported only by the commands that call it
    from survivor.cloud.compute import GroupRef

EVERY_MINUTES = (1, 1440)  # --every: a minute (Cloud Scheduler's finest) to a day


def every_minutes(text: str) -> int:
    """`15m`, `2h` -> whole minutes, from 1 minute to 24 hours; SpecError naming the value as typed
    for anything else (`10s`, `3d`, `0`, `nan`): a period the look cannot keep is refused, not rounded."""
    match = re.fullmatch(r"([0-9]{1,5})([mh])", text)
    minutes = int(match[1]) * (60 if match[2] == "h" else 1) if match else 0
    if not EVERY_MINUTES[0] <= minutes <= EVERY_MINUTES[1]:
        raise SpecError([f"--every {text!r}: expected whole minutes or hours from 1m to 24h (15m, 1h)"])
    return minutes


def _deployment(args: argparse.Namespace, project: str):
    """The typed deployment options from the flags: the Cloud Run and Scheduler jobs live in the
    group's region (a zone's region for a zonal group) unless --location names another."""
    from survivor.operator.watch_deploy import WatchDeployment

    location = args.location or args.region or args.zone.rsplit("-", 1)[0]
    return WatchDeployment(
        job=args.name,
        project=project,
        region=location,
        zone=args.zone,
        group_region=args.region,
        service_account=args.service_account or "",
        image=args.image,
        every_minutes=every_minutes(args.every or "15m"),
        job_dir=args.job_dir,
        goodput_metrics=args.goodput_metrics,
    )


def run_deploy(args: argparse.Namespace, group: GroupRef) -> int:
    """`--deploy` / `--undeploy`: creates (or updates) or removes the Cloud Run and Scheduler jobs.
    A job that may move (`placement:`) is deployed with its job dir, unless --job-dir names one."""
    from dataclasses import replace

    from google.api_core.exceptions import GoogleAPICallError
    from google.auth.exceptions import DefaultCredentialsError

    from survivor.cloud.compute import Compute, ComputeError
    from survivor.operator import watch_deploy
    from survivor.operator.watch import job_dir_to_deploy_with

    options = _deployment(args, group.project)
    if args.deploy and not options.job_dir:
        try:
            found = job_dir_to_deploy_with(Compute(group.project), group)
        except (ComputeError, DefaultCredentialsError) as exc:  # the deploy goes on; the look reads the group
            print(f"group {group.name}: not read ({exc}); deploying the look without --job-dir", file=sys.stderr)
            found = None
        if found:
            options = replace(options, job_dir=found)
            print(f"group {group.name}: its job may move (placement:); the look is deployed with --job-dir {found}")
    try:
        if args.undeploy:
            done = watch_deploy.undeploy(options)
        else:
            if not args.service_account:
                raise CommandError(
                    "--deploy needs --service-account: the identity the Cloud Run job runs as "
                    "and whose OAuth token Cloud Scheduler sends (docs/deadline.md)"
                )
            done = watch_deploy.deploy(options)
            if options.goodput_metrics:  # the deployed account writes them: said before it is found out at a look
                from survivor.operator.preflight import goodput_writer_state, report

                report(goodput_writer_state(Compute(group.project), f"serviceAccount:{options.service_account}"), print)
    except GoogleAPICallError as exc:
        raise CommandError(
            f"watch {'--undeploy' if args.undeploy else '--deploy'} {options.name}: {exc.message}"
        ) from None
    for system, what in done.items():
        label = "Cloud Run job" if system == "run" else "Cloud Scheduler job"
        print(f"{label} {options.parent}/jobs/{options.name}: {what}")
    return 0


def run_watch(args: argparse.Namespace) -> int:
    """`survivor watch`: one decision (or one every --every) for the job's group; 0 when done."""
    from survivor.cloud.compute import Compute
    from survivor.mig.address import JobAddress
    from survivor.operator.watch import watch_once

    every = every_minutes(args.every) * 60 if args.every else 0
    for flag, value in (("--image", args.image), ("--service-account", args.service_account)):
        if value and not args.deploy:
            raise SpecError([f"{flag} {value!r}: only with --deploy (what the deployed look runs as and from)"])
    group = JobAddress(args.name, args.project, args.zone, args.region).group()
    if args.goodput_metrics and not (args.deploy or args.undeploy):  # a deployed look needs it in its image only
        from survivor.extras import require

        require("google.cloud.monitoring_v3", "operator", "survivor watch --goodput-metrics")
    if args.deploy or args.undeploy:
        return run_deploy(args, group)
    from survivor.operator.watch import JobOver

    compute = Compute(group.project)
    while True:
        looked = watch_once(
            compute,
            group,
            job_dir=args.job_dir,
            check_every_hours=(every or 900) / 3600,
            say=print,
            goodput_metrics=args.goodput_metrics,
        )
        if isinstance(looked, JobOver) and looked.waiting:  # ended, but a state disk is still attached
            print(f"job {args.name}: {looked.state}; the next look comes back for what is left ({looked.waiting})")
        elif isinstance(looked, JobOver):  # the job ended: nothing more to look at
            if args.deployed_in:
                from survivor.operator.watch_deploy import end_schedule

                done = end_schedule(group.project, args.deployed_in, args.name)
                print(
                    f"Cloud Scheduler job projects/{group.project}/locations/{args.deployed_in}/jobs/"
                    f"survivor-watch-{args.name}: {done} (the job is {looked.state}; `survivor watch "
                    f"{args.name} --undeploy` removes the Cloud Run job)"
                )
            return 0
        if not every or args.once:
            return 0
        time.sleep(every)


def add_commands(sub) -> None:
    """Adds `watch` to the command line's subparsers."""
    p = flags.command(
        sub,
        "watch",
        help="decide Spot or on-demand for a job with a deadline (while no VM may run)",
        description="Looks at a job with a deadline: or placement: from outside its VM (during a Spot stockout "
        "no VM boots to decide) and switches its group to on-demand, or moves it, when the policy "
        "says so. Once, every --every in the foreground, or deployed on Google Cloud with --deploy (a "
        "Cloud Run job run by Cloud Scheduler; never an always-on VM).",
        examples=[
            "survivor watch cifar10 --zone us-west1-b                 # one look",
            "survivor watch cifar10 --zone us-west1-b --every 15m     # keep looking",
            "survivor watch cifar10 --zone us-west1-b --deploy --service-account SA_EMAIL",
        ],
    )
    p.add_argument("name", help="the job's name (its group's)")
    flags.project(p, help="Google Cloud project (default: $GOOGLE_CLOUD_PROJECT)")
    flags.place(p, required=True)
    flags.job_dir(p, help="the job dir (default: the one in the group's template)")
    p.add_argument("--every", help="look again this often (15m, 1h); default: look once")
    p.add_argument(
        "--deployed-in",
        metavar="REGION",
        help="set by --deploy: where this look's Cloud Scheduler job lives; the look deletes it once the "
        "job is DONE or FAILED",
    )
    p.add_argument(
        "--goodput-metrics",
        action="store_true",
        help="each look also writes the job's goodput, badput by cause, disruptions and elapsed time to "
        "Cloud Monitoring, as Google's goodput library writes them (docs/notifications.md); needs "
        "monitoring.timeSeries.create (roles/monitoring.metricWriter)",
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="look once even with --every (which then only tells the policy how often it is asked: "
        "what the deployed job runs)",
    )
    deploy = p.add_mutually_exclusive_group()
    deploy.add_argument(
        "--deploy",
        action="store_true",
        help="run the look on Google Cloud: a Cloud Run job triggered by Cloud Scheduler every "
        "--every (default 15m); again to update",
    )
    deploy.add_argument("--undeploy", action="store_true", help="remove the Cloud Run and Cloud Scheduler jobs")
    p.add_argument(
        "--image",
        help="with --deploy: the container image with survivor (default: "
        "REGION-docker.pkg.dev/PROJECT/survivor/survivor:VERSION, docs/deadline.md)",
    )
    p.add_argument("--service-account", help="with --deploy: the service account both jobs use")
    p.add_argument("--location", help="with --deploy: the region of the two jobs (default: the group's)")
    p.set_defaults(func=run_watch)
