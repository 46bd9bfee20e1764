"""`survivor watch JOB`: the deadline policy for a job's group, from anywhere, while no VM may run.

    $ survivor watch cifar10 --zone us-west1-b              # one look: decide, switch if needed
    $ survivor watch cifar10 --zone us-west1-b --every 15m  # keep looking (a laptop, Cloud Shell)

The agent decides at every boot; during a Spot stockout there is no boot, so something outside the
VM has to look. One look is what a Cloud Run job runs when Cloud Scheduler triggers it
(docs/deadline.md); `--every` loops in the foreground. Never an always-on VM of survivor's.
"""

from __future__ import annotations

import argparse
import time



def _seconds(text: str) -> float:
    """`15m`, `1h`, `90s` -> seconds."""
    scale = {"s": 1, "m": 60, "h": 3600}
    text = text.strip().lower()
    return float(text[:-1]) * scale[text[-1]] if text[-1:] in scale else float(text)


def run_watch(args: argparse.Namespace) -> int:
    """`survivor watch`: one decision (or one every --every) for the job's group; 0 when done."""
    from survivor.cloud.compute import Compute
    from survivor.cloud.group import JobAddress, watch_once

    group = JobAddress(args.name, args.project, args.zone, args.region).group()
    compute = Compute(group.project)
    every = _seconds(args.every) if args.every else 0.0
    while True:
        watch_once(compute, group, job_dir=args.job_dir, check_every_hours=(every or 900) / 3600, say=print)
        if not every:
            return 0
        time.sleep(every)


def add_commands(sub) -> None:
    """Adds `watch` to the command line's subparsers."""
    p = sub.add_parser("watch", help="decide Spot or on-demand for a job with a deadline (while no VM may run)")
    p.add_argument("name", help="the job's name (its group's)")
    p.add_argument("--project")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--zone")
    where.add_argument("--region")
    p.add_argument("--job-dir", help="the job dir (default: the one in the group's template)")
    p.add_argument("--every", help="look again this often (15m, 1h); default: look once")
    p.set_defaults(func=run_watch)
