"""The GPUs and machine families survivor knows: one record each, every other table derived from them.

    >>> GPUS["nvidia-l4"].quota_metric, GPUS["nvidia-l4"].sku_name
    ('NVIDIA_L4_GPUS', 'Nvidia L4')
    >>> shape("g2-standard-24")
    Shape(gpu='nvidia-l4', count=2, vcpus=24, memory_gb=96.0, prices=None, flex_start_price=None)

What Compute Engine, the Billing Catalog and survivor's offline price table say of one GPU type is
in its `Gpu`; what a machine family carries, runs and costs is in its `Family` and its shapes. The
rules over them (survivor/cloud/machines.py), the prices (survivor/cloud/pricing.py, catalog.py) and
survivor's stand-ins (survivor/local/compute_server.py, catalog_server.py) read these two dicts when
they are called, so a GPU type is added here, and only here, and a test that puts a made-up record
in them sees it everywhere.

Sources, field by field (each record below uses them):
- `Shape.gpu`/`count`, the shapes of a family that carries its GPUs:
  https://cloud.google.com/compute/docs/gpus ("For these machine types, the GPU model is
  automatically attached to the instance"); shapes as in skypilot-org/skypilot
  sky/catalog/gcp_catalog.py.
- `Family.carries_gpus`: A and G series carry their GPUs (the same page); a shape missing from
  `shapes` is still one of them.
- `Gpu.n1_counts`: the GPUs an N1 machine takes, count -> (max vCPUs, max memory GB),
  https://cloud.google.com/compute/docs/gpus (N1 tables), via skypilot-org/skypilot
  sky/catalog/gcp_catalog.py `_NUM_ACC_TO_MAX_CPU_AND_MEMORY`. K80 reached end of life (2024) and is
  left out.
- `Gpu.quota_metric`: the regional quota metric, a name of the discovery document's `Quota.metric`
  enum (on demand; Spot uses the PREEMPTIBLE_ one), https://cloud.google.com/compute/resource-usage#gpu_quota.
- `Gpu.sku_name`: the catalog's name for the GPU, as its SKU descriptions spell it ("Nvidia Tesla T4
  GPU running in Americas").
- `Gpu.max_per_vm`: `maximumCardsPerInstance` as the Compute fake's `acceleratorTypes` report it, a
  small, realistic slice of https://cloud.google.com/compute/docs/gpus/gpu-regions-zones.
- `Gpu.zones`: the zones of the Compute fake (survivor/local/compute_server.py) that offer it, a
  small, realistic slice of the same page (not every zone of a region offers every GPU; us-west1-c
  has no T4); test data for the stand-in, never a rule survivor applies.
- `Gpu.catalog_prices`: the stand-in Billing Catalog's (survivor/local/catalog_server.py) "Americas"
  SKUs for one GPU, (on-demand, Spot) USD per hour; test data for the stand-in, None: no SKU there.
- `Family.hyperdisk_only`: machine series whose disks are Hyperdisk only (no Persistent Disk:
  pd-balanced, pd-ssd and pd-standard are refused), with the disk types survivor knows each takes;
  a series not named takes Persistent Disk (survivor's default pd-balanced) and is not checked.
  A3 Ultra (a3-ultragpu-*): Hyperdisk Balanced and Hyperdisk Extreme, Google's "Supported disk types
  for A3" table (https://cloud.google.com/compute/docs/accelerator-optimized-machines#a3-disks; as
  transcribed in skypilot-org/skypilot#4705: "a3 ultra | hyperdisk-balanced, hyperdisk-extreme",
  where A3 High/Mega/Edge also take pd-ssd and pd-balanced). A4 (a4-highgpu-*): Hyperdisk only in
  the same page's A4 table (https://cloud.google.com/compute/docs/accelerator-optimized-machines#a4-disks);
  Google's own A4 blueprint boots `disk_type: hyperdisk-balanced` (GoogleCloudPlatform/cluster-toolkit
  examples/machine-learning/a4-highgpu-8g/a4high-vm.yaml). Only that type is listed: the other
  Hyperdisk types A4 may take are not sent by survivor.
- `Shape.memory_gb`: G2 from https://cloud.google.com/compute/docs/accelerator-optimized-machines;
  A2 High GPU 85 GB per A100. `Shape.vcpus`: a predefined shape's name ends in it (g2-standard-24);
  for shapes named by their GPUs, skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv
  (a2-highgpu-1g 12, -2g 24: 12 per A100) and the machine-type list in
  Cyclenerd/google-cloud-pricing-cost-calculator#116 (a3-highgpu-8g 208). None: not known here
  (the Compute fake's `machineTypes.get` answers 404, the catalog cannot shape it).
- `Gpu.prices`, `Shape.prices`: survivor's offline table (survivor/cloud/pricing.py says where and
  when its figures come from): (on-demand, Spot) USD per hour in us-central1, per GPU; a shape's
  price includes its GPUs, whose own is then (0.0, 0.0). None: not in the table.
- `Shape.flex_start_price`: flex-start USD per hour of the whole machine with its GPUs
  (docs/flex-start.md F9): the Billing Catalog's "DWS Defined Duration" SKUs, us-central1, as a
  public research note on Billing Catalog queries recorded them on 2026-08-02 (a2-highgpu-1g: A100
  $1.61365 + 12 vCPUs $0.20868 + 85 GB $0.19805); found through code search, its repository unnamed:
  a weak source, the catalog comes first.
- `Family.kinds`: N1's predefined shapes, https://cloud.google.com/compute/docs/general-purpose-machines
  (N1 tables: n1-standard-1 to -96, n1-highmem-2 to -96, n1-highcpu-2 to -96, in powers of two and
  96; 3.75, 6.5 and 0.9 GB per vCPU).
- `Family.flex_start`: "Flex-start VMs support all accelerator-optimized machine types (except A4X
  and G4) and H4D machine types" (https://cloud.google.com/compute/docs/instances/about-flex-start-vms;
  the accelerator-optimized series: https://cloud.google.com/compute/docs/machine-resource).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class Gpu:
    """One GPU type: its `acceleratorType` name and what each system says of it (see the module's sources).

    `quota_metric`: the on-demand regional metric (Spot counts against `PREEMPTIBLE_` + it), None when
    none is known; `n1_counts`: count -> (max vCPUs, max memory GB) on an N1 machine, empty when it is
    never attached; `max_per_vm`: the most one VM takes, 0 when the fake's zones offer none;
    `prices`: (on-demand, Spot) USD per hour in the offline table, None when not in it; `zones`
    and `catalog_prices`: what the Compute fake and the stand-in catalog say of it (test data)."""

    name: str
    sku_name: str | None = None
    quota_metric: str | None = None
    n1_counts: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    max_per_vm: int = 0
    prices: tuple[float, float] | None = None
    zones: tuple[str, ...] = ()
    catalog_prices: tuple[float, float] | None = None

    def quota(self, spot: bool) -> str | None:
        """The regional quota metric this GPU counts against on a Spot (preemptible) or on-demand VM."""
        if self.quota_metric is None:
            return None
        return f"PREEMPTIBLE_{self.quota_metric}" if spot else self.quota_metric


@dataclass(frozen=True)
class Shape:
    """One machine type of a family that carries its GPUs: `count` x `gpu`, its vCPUs and memory (None:
    not known here), its offline prices (on-demand, Spot USD per hour, GPUs included) and flex-start's."""

    gpu: str
    count: int
    vcpus: int | None = None
    memory_gb: float | None = None
    prices: tuple[float, float] | None = None
    flex_start_price: float | None = None


@dataclass(frozen=True)
class Family:
    """One machine family (`g2` of `g2-standard-8`): whether every shape carries its GPUs, the shapes
    that carry them known here, its predefined kinds (`kinds`: `standard` of `n1-standard-8` -> memory
    GB per vCPU and the vCPU counts it comes in), whether flex-start runs it, and its Hyperdisk-only
    series (`hyperdisk_only`: series such as `a4-highgpu` -> the disk types it takes)."""

    name: str
    carries_gpus: bool = False
    shapes: Mapping[str, Shape] = field(default_factory=dict)
    kinds: Mapping[str, tuple[float, tuple[int, ...]]] = field(default_factory=dict)
    flex_start: bool = False
    hyperdisk_only: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def _gpu_shapes(gpu: str, counts: Mapping[str, int], vcpus_per_gpu: int | None = None) -> dict[str, Shape]:
    """Shapes named by their GPU count (a2-highgpu-1g), with vCPUs per GPU when known."""
    return {name: Shape(gpu, n, vcpus=vcpus_per_gpu * n if vcpus_per_gpu else None) for name, n in counts.items()}


#: G2's shapes: vCPUs -> (L4s, memory GB, offline prices).
_G2: dict[int, tuple[int, int, tuple[float, float] | None]] = {
    4: (1, 16, (0.71, 0.28)),
    8: (1, 32, (0.85, 0.34)),
    12: (1, 48, None),
    16: (1, 64, None),
    24: (2, 96, None),
    32: (1, 128, None),
    48: (4, 192, None),
    96: (8, 384, None),
}

#: The Compute fake's zones that offer T4 and V100 alike (`Gpu.zones`).
_ZONES_T4_V100 = (
    "us-west1-a",
    "us-west1-b",
    "us-central1-a",
    "us-central1-b",
    "us-central1-c",
    "us-central1-f",
    "europe-west4-a",
    "europe-west4-b",
    "europe-west4-c",
)

#: Every GPU type survivor knows, by `acceleratorType` name.
GPUS: dict[str, Gpu] = {
    g.name: g
    for g in (
        Gpu(
            "nvidia-tesla-t4",
            sku_name="Nvidia Tesla T4",
            quota_metric="NVIDIA_T4_GPUS",
            n1_counts={1: (48, 312), 2: (48, 312), 4: (96, 624)},
            max_per_vm=4,
            prices=(0.35, 0.14),
            zones=_ZONES_T4_V100,
            catalog_prices=(0.35, 0.14),
        ),
        Gpu(
            "nvidia-tesla-v100",
            sku_name="Nvidia Tesla V100",
            quota_metric="NVIDIA_V100_GPUS",
            n1_counts={1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)},
            max_per_vm=8,
            prices=(2.48, 0.99),
            zones=_ZONES_T4_V100,
            catalog_prices=(2.48, 0.992),
        ),
        Gpu(
            "nvidia-tesla-p100",
            sku_name="Nvidia Tesla P100",
            quota_metric="NVIDIA_P100_GPUS",
            n1_counts={1: (16, 104), 2: (32, 208), 4: (96, 624)},
            max_per_vm=4,
            prices=(1.46, 0.58),
            zones=("us-west1-a", "us-west1-b", "europe-west4-b"),
        ),
        Gpu(
            "nvidia-tesla-p4",
            sku_name="Nvidia Tesla P4",
            quota_metric="NVIDIA_P4_GPUS",
            n1_counts={1: (24, 156), 2: (48, 312), 4: (96, 624)},
            max_per_vm=4,
            zones=("us-central1-a", "us-central1-c"),
        ),
        Gpu(
            "nvidia-tesla-a100",
            sku_name="Nvidia Tesla A100",
            quota_metric="NVIDIA_A100_GPUS",
            max_per_vm=16,
            prices=(0.0, 0.0),  # included in the a2 machine price
            zones=(
                "us-west1-b",
                "us-central1-a",
                "us-central1-b",
                "us-central1-c",
                "us-central1-f",
                "europe-west4-a",
                "europe-west4-b",
            ),
            catalog_prices=(2.933908, 1.173563),
        ),
        Gpu("nvidia-a100-80gb", quota_metric="NVIDIA_A100_80GB_GPUS"),
        Gpu(
            "nvidia-l4",
            sku_name="Nvidia L4",
            quota_metric="NVIDIA_L4_GPUS",
            max_per_vm=8,
            prices=(0.0, 0.0),  # included in the g2 machine price
            zones=(
                "us-west1-a",
                "us-west1-b",
                "us-west1-c",
                "us-central1-a",
                "us-central1-b",
                "us-central1-c",
                "europe-west4-a",
                "europe-west4-c",
            ),
            catalog_prices=(0.5599, 0.2240),
        ),
        # only PREEMPTIBLE_NVIDIA_H100_GPUS is a regional metric
        Gpu("nvidia-h100-80gb", quota_metric="NVIDIA_H100_GPUS"),
        Gpu("nvidia-h100-mega-80gb"),
        Gpu("nvidia-h200-141gb"),
        Gpu("nvidia-b200"),
    )
}

#: Every machine family survivor knows something of, by name; flex-start's in the order its refusal
#: names them.
FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "a4",
            carries_gpus=True,
            flex_start=True,
            shapes={"a4-highgpu-8g": Shape("nvidia-b200", 8)},
            hyperdisk_only={"a4-highgpu": ("hyperdisk-balanced",)},
        ),
        Family("a4x", carries_gpus=True),
        Family(
            "a3",
            carries_gpus=True,
            flex_start=True,
            shapes={
                **_gpu_shapes("nvidia-h100-80gb", {f"a3-highgpu-{n}g": n for n in (1, 2, 4)}),
                "a3-highgpu-8g": Shape("nvidia-h100-80gb", 8, vcpus=208),
                "a3-megagpu-8g": Shape("nvidia-h100-mega-80gb", 8),
                "a3-ultragpu-8g": Shape("nvidia-h200-141gb", 8),
            },
            hyperdisk_only={"a3-ultragpu": ("hyperdisk-balanced", "hyperdisk-extreme")},
        ),
        Family(
            "a2",
            carries_gpus=True,
            flex_start=True,
            shapes={
                "a2-highgpu-1g": Shape(
                    "nvidia-tesla-a100", 1, vcpus=12, memory_gb=85.0, prices=(3.67, 1.47), flex_start_price=2.02
                ),
                **{
                    f"a2-highgpu-{n}g": Shape("nvidia-tesla-a100", n, vcpus=12 * n, memory_gb=85.0 * n)
                    for n in (2, 4, 8)
                },
                "a2-megagpu-16g": Shape("nvidia-tesla-a100", 16),
                **_gpu_shapes("nvidia-a100-80gb", {f"a2-ultragpu-{n}g": n for n in (1, 2, 4, 8)}, vcpus_per_gpu=12),
            },
        ),
        Family("g4", carries_gpus=True),
        Family(
            "g2",
            carries_gpus=True,
            flex_start=True,
            shapes={
                f"g2-standard-{cpus}": Shape("nvidia-l4", gpus, vcpus=cpus, memory_gb=float(memory), prices=prices)
                for cpus, (gpus, memory, prices) in _G2.items()
            },
        ),
        Family("h4d", flex_start=True),
        Family(
            "n1",
            kinds={
                "standard": (3.75, (1, 2, 4, 8, 16, 32, 64, 96)),
                "highmem": (6.5, (2, 4, 8, 16, 32, 64, 96)),
                "highcpu": (0.9, (2, 4, 8, 16, 32, 64, 96)),
            },
        ),
    )
}


def family(machine_type: str) -> str:
    """`g2-standard-8` -> `g2`; a custom `custom-8-30720` is an N1 shape -> `n1`."""
    name = machine_type.rsplit("/", 1)[-1]
    if name.startswith("custom-"):
        return "n1"
    return name.split("-", 1)[0]


def family_of(machine_type: str) -> Family | None:
    """The record of a machine type's family, None for a family survivor knows nothing of."""
    return FAMILIES.get(family(machine_type))


def shape(machine_type: str) -> Shape | None:
    """The record of a shape that carries its GPUs (a full URL or a name), None for any other type."""
    found = family_of(machine_type)
    return found.shapes.get(machine_type.rsplit("/", 1)[-1]) if found else None


def shapes() -> dict[str, Shape]:
    """Every shape that carries its GPUs, by machine type, family by family."""
    return {name: s for f in FAMILIES.values() for name, s in f.shapes.items()}


def gpu(name: str | None) -> Gpu | None:
    """The record of a GPU type (None for one survivor does not know, or None)."""
    return GPUS.get(name or "")
