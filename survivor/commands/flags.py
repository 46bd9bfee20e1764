"""The flags several commands share, each declared here once: the project, the group's place, the job
dir, the job's name and the VM's prices.

    >>> p = sub.add_parser("status")
    >>> flags.where(p, name_optional=True)      # NAME, --project, --zone, --region
    >>> flags.job_dir(p)
    >>> flags.prices(p, instead_of="the offline table")

A command that gives one of them another meaning (the emulators' --project is the emulated project)
passes its own help or default; the flag's name, type and destination stay the ones declared here.
"""

from __future__ import annotations

import argparse

#: Where an operator command's --project comes from (survivor/cloud/compute.py resolve order).
PROJECT_HELP = "Google Cloud project (default: the spec's compute.project, else $GOOGLE_CLOUD_PROJECT)"


def positive(text: str) -> int:
    """argparse type: a whole number of at least 1 (`--steps 0` and `--steps -5` are refused, one line)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1")
    return value


def project(p, help: str = PROJECT_HELP, default: str | None = None) -> None:
    """--project: the Google Cloud project."""
    p.add_argument("--project", default=default, help=help)


def place(p, required: bool = False, zone_help: str = "the zonal MIG's zone",
          region_help: str = "the regional MIG's region") -> None:
    """--zone or --region: where the job's group is (a zonal or a regional managed instance group).
    Required: exactly one of them."""
    where = p.add_mutually_exclusive_group(required=True) if required else p
    where.add_argument("--zone", help=zone_help)
    region(where, help=region_help)


def region(p, help: str) -> None:
    """--region: a Google Cloud region (a regional group's, Vertex AI's, or where prices are read)."""
    p.add_argument("--region", help=help)


def where(p, instance: bool = False, name_optional: bool = False, name_help: str = "the job's name (its MIG and template)",
          region_help: str = "the regional MIG's region") -> None:
    """The flags that name a job's group (or a standalone instance): NAME, --project, --zone, --region."""
    p.add_argument("name", nargs="?" if name_optional else None, help=name_help)
    project(p)
    place(p, region_help=region_help)
    if instance:
        p.add_argument("--instance", help="a standalone instance instead of the MIG (with --zone)")


def job_dir(p, help: str = "the job dir (default: from the template's job spec)") -> None:
    """--job-dir: the job's directory (gs://BUCKET/PATH or a local path)."""
    p.add_argument("--job-dir", help=help)


def _price(text: str) -> float:
    """argparse's type for --spot-price and --on-demand-price: USD per hour."""
    from survivor.cloud import pricing

    try:
        return pricing.price_per_hour(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def prices(p, instead_of: str) -> None:
    """--spot-price and --on-demand-price: the whole VM's prices in USD per hour, given instead of
    `instead_of`."""
    for flag, side in (("--spot-price", "Spot"), ("--on-demand-price", "on-demand")):
        p.add_argument(flag, type=_price, metavar="USD_PER_HOUR",
                       help=f"the {side} price of the whole VM with its GPUs, instead of {instead_of}")
