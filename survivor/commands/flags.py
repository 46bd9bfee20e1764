"""The flags several commands share, each declared here once: the project, the group's place, the job
dir, the job's name and the VM's prices; and `command`, the one way a command's parser is made.

    >>> p = flags.command(sub, "status", help="...", description="...", examples=["survivor status cifar10 ..."])
    >>> flags.where(p, name_optional=True)      # NAME, --project, --zone, --region
    >>> flags.job_dir(p)
    >>> flags.prices(p, instead_of="the offline table")

A command that gives one of them another meaning (the emulators' --project is the emulated project)
passes its own help or default; the flag's name, type and destination stay the ones declared here.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Sequence

#: Where an operator command's --project comes from (survivor/cloud/compute.py resolve order).
PROJECT_HELP = "Google Cloud project (default: the spec's compute.project, else $GOOGLE_CLOUD_PROJECT)"


#: The width a command's description is wrapped to (its examples are shown as written).
DESCRIPTION_WIDTH = 100


def command(sub, name: str, *, help: str, description: str, examples: Sequence[str]) -> argparse.ArgumentParser:
    """A command's parser: `help` is its line in the list of its parent's --help; its own --help shows
    `description` (paragraphs separated by a blank line, each wrapped here) and then `examples`, each a
    whole command line, `# what it does` after it where that helps.

    >>> parent = argparse.ArgumentParser(prog="survivor")
    >>> p = command(parent.add_subparsers(), "stop", help="stop training gracefully",
    ...             description="Resizes the group to 0; the agent saves first.",
    ...             examples=["survivor stop cifar10 --zone us-west1-b"])
    >>> print(p.format_help())
    usage: survivor stop [-h]
    <BLANKLINE>
    Resizes the group to 0; the agent saves first.
    <BLANKLINE>
    options:
      -h, --help  show this help message and exit
    <BLANKLINE>
    examples:
      survivor stop cifar10 --zone us-west1-b
    <BLANKLINE>
    """
    paragraphs = [textwrap.fill(" ".join(part.split()), DESCRIPTION_WIDTH) for part in description.split("\n\n")]
    return sub.add_parser(
        name,
        help=help,
        description="\n\n".join(paragraphs),
        epilog="examples:\n" + "".join(f"  {line}\n" for line in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


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


def place(
    p, required: bool = False, zone_help: str = "the zonal MIG's zone", region_help: str = "the regional MIG's region"
) -> None:
    """--zone or --region: where the job's group is (a zonal or a regional managed instance group).
    Required: exactly one of them."""
    where = p.add_mutually_exclusive_group(required=True) if required else p
    where.add_argument("--zone", help=zone_help)
    region(where, help=region_help)


def region(p, help: str) -> None:
    """--region: a Google Cloud region (a regional group's, Vertex AI's, or where prices are read)."""
    p.add_argument("--region", help=help)


def where(
    p,
    instance: bool = False,
    name_optional: bool = False,
    name_help: str = "the job's name (its MIG and template)",
    region_help: str = "the regional MIG's region",
) -> None:
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
        p.add_argument(
            flag,
            type=_price,
            metavar="USD_PER_HOUR",
            help=f"the {side} price of the whole VM with its GPUs, instead of {instead_of}",
        )
