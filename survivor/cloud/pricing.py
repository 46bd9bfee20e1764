"""survivor's offline price table: the last resort when the Cloud Billing Catalog cannot be read.

The figures below, and those of the GPU and shape records in survivor/cloud/hardware.py (`Gpu.prices`,
`Shape.prices`), are us-central1 list prices in USD per hour, typed in on 2026-11-22 (commit 472da08)
from Google's pages and not checked against them since:
  on-demand machines: https://cloud.google.com/compute/vm-instance-pricing
  on-demand GPUs:     https://cloud.google.com/compute/gpus-pricing
  Spot:               https://cloud.google.com/spot-vms/pricing ("Spot prices are variable and can
                      change up to once every day")
Other regions, discounts and today's Spot prices differ. Prices come first from `--spot-price` /
`--on-demand-price` (per hour, for the whole VM with its GPUs), then from the Cloud Billing Catalog
(survivor/cloud/catalog.py `hourly_prices`), and from this table only when neither is there.
"""

from __future__ import annotations

from dataclasses import dataclass

from survivor.cloud import hardware

#: When and where the table's figures come from, shown beside every estimate made from them.
TABLE_BASIS = "us-central1 list prices as of 2026-11-22 (offline table)"
#: The regions whose list prices the table holds; a job elsewhere is priced at these and told so.
TABLE_REGIONS = ("us-central1",)
OVERRIDE_BASIS = "given on the command line"

#: (on-demand, spot) USD per hour of the N1 machine types (vCPUs and memory). A shape that carries its
#: GPUs (a2, g2) has its figures in its record, a GPU its own per GPU (`Shape.prices`, `Gpu.prices`,
#: survivor/cloud/hardware.py), and so has flex-start's (`Shape.flex_start_price`).
MACHINES = {
    "n1-standard-4": (0.19, 0.04),
    "n1-standard-8": (0.38, 0.08),
    "n1-standard-16": (0.76, 0.16),
    "n1-standard-32": (1.52, 0.32),
    "n1-highmem-8": (0.47, 0.10),
}
#: USD per GiB and month of a disk's provisioned size, us-central1, from Google's "Disk and image
#: pricing" (https://cloud.google.com/compute/disks-image-pricing; its worked example: "a 200 GB
#: standard Persistent Disk volume would cost $8.00 for the whole month ... a 200 GB SSD Persistent
#: Disk volume would cost $34.00", and "You are billed for the total provisioned capacity ... until
#: you delete them"), pd-balanced from the same page's table ($0.100, as third-party summaries such
#: as c3x.dev's "GCP persistent disk types cost" repeat it). What a disk left behind costs a month.
DISKS = {
    "pd-standard": 0.04,
    "pd-balanced": 0.10,
    "pd-ssd": 0.17,
}
DISK_BASIS = "us-central1 list prices of Google's disk pricing page as of 2026-11 (offline table)"


def disk_monthly(disk_type: str, size_gb: int) -> float | None:
    """USD a month for a disk of `disk_type` and `size_gb` from the table; None for a type not in it."""
    rate = DISKS.get(disk_type)
    return None if rate is None else round(rate * size_gb, 2)


@dataclass(frozen=True)
class Cost:
    """`hours` of one machine at Spot and on-demand rates (USD; None where no rate is known)."""

    hours: float
    spot_usd: float | None
    on_demand_usd: float | None
    spot_rate: float | None = None
    on_demand_rate: float | None = None
    basis: str = TABLE_BASIS  # where the rates come from

    @property
    def saving(self) -> float | None:
        """The share of the on-demand price that Spot saves."""
        if not self.spot_rate or not self.on_demand_rate:
            return None
        return round(1 - self.spot_rate / self.on_demand_rate, 3)


def table_basis(region: str) -> str:
    """Pure: what a price from the table is for a job in `region`: the table's own figures, and
    whether they are that region's."""
    if region in TABLE_REGIONS:
        return TABLE_BASIS
    return f"{TABLE_BASIS}, which has no {region} prices"


def money(usd: float | None) -> str:
    """Pure: USD as people write it: `$1,234.50`, `$0.0013` (cents are too coarse below a dollar),
    the sign before the dollar (`-$0.0013`), `unknown` for None."""
    if usd is None:
        return "unknown"
    sign = "-" if usd < 0 else ""
    size = abs(usd)
    return f"{sign}${size:,.2f}" if size >= 1 else f"{sign}${size:.4f}"


def hourly(machine_type: str, gpu_type: str | None, gpu_count: int) -> tuple[float, float] | None:
    """(on-demand, spot) USD per hour for a machine and its GPUs from the table; None if not in it."""
    shape = hardware.shape(machine_type)
    machine = MACHINES.get(machine_type) or (shape.prices if shape else None)
    gpu_record = hardware.gpu(gpu_type)
    gpu_prices = gpu_record.prices if gpu_record else None
    if machine is None or (gpu_count and gpu_prices is None):
        return None
    gpu = gpu_prices if gpu_count and gpu_prices else (0.0, 0.0)
    return round(machine[0] + gpu[0] * gpu_count, 6), round(machine[1] + gpu[1] * gpu_count, 6)


def flex_start_hourly(machine_type: str, gpu_type: str | None = None, gpu_count: int = 0) -> float | None:
    """Flex-start USD per hour for a machine from the table; None if not in it. Flex-start machines
    carry their GPUs, so attached GPUs never add to it."""
    shape = hardware.shape(machine_type)
    return shape.flex_start_price if shape else None


def price_per_hour(text: str) -> float:
    """Parses a `--spot-price` / `--on-demand-price` value: USD per hour, more than 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{text!r}: expected USD per hour for the whole VM with its GPUs, e.g. 0.42")
    return value
