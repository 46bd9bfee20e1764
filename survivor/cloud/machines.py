"""Compute Engine rules for machines, GPUs and scheduling that the discovery document does not carry.

    >>> built_in_gpus("g2-standard-8")
    ('nvidia-l4', 1)
    >>> choice_problems("g2-standard-8", "nvidia-tesla-t4", 4)
    ['compute.gpu nvidia-tesla-t4:4 with machine_type g2-standard-8: g2 machines carry their own GPUs (g2-standard-8: 1 x nvidia-l4); drop compute.gpu (or --gpu none)']

The discovery document says which fields a template takes, not which combinations Compute Engine
accepts. This module holds those combinations, with a source for each, over the GPU and machine
family records of survivor/cloud/hardware.py (what each GPU and family is), and two pure checks: `choice_problems` for what an operator asked for (one line naming both fields,
before any call), and `property_violations` for a REST body (the API's own wording where a public
source shows it), which survivor's Compute fake applies to every template it is sent -- so a
template.py that stops following the table fails the suite.

Sources (each rule below names its own):
- GPU machine types: https://cloud.google.com/compute/docs/gpus -- A and G series carry their GPUs
  ("the GPU model is automatically attached"), N1 takes T4/V100/P100/P4 in fixed counts up to a vCPU
  and memory limit per count: the records of survivor/cloud/hardware.py (`Family.shapes`,
  `Gpu.n1_counts`), each field with its source there.
- Host maintenance: https://cloud.google.com/compute/docs/instances/setting-vm-host-options and the
  discovery document's `Scheduling.onHostMaintenance` ("For preemptible instances, the default and
  only possible behavior is TERMINATE"). The API's answer to a GPU VM asking for MIGRATE:
  "Instances with guest accelerators do not support live migration." (loft-sh/devpod#973 with
  g2-standard-4 and no accelerators listed; openshift/release#63296 with a2-highgpu-1g).
- Spot: https://cloud.google.com/compute/docs/instances/spot and create-use-spot;
  `Scheduling.automaticRestart` ("Preemptible instances cannot be automatically restarted"),
  `instanceTerminationAction` STOP (default) | DELETE.
- `preemptionNoticeDuration`: "for Spot VMs only. If not specified, there will be no wait before the
  G2 Soft Off signal" (discovery document); a preview in which 120 s is the one documented value
  (cloudpilot-ai/karpenter-provider-gcp#295 and #563: "GCE documents exactly one opt-in value,
  `120s`"; gcloud beta `--preemption-notice-duration=120s`).
- Flex-start (docs/flex-start.md, rules F2, F5, F8): "Flex-start VMs support all accelerator-optimized
  machine types (except A4X and G4) and H4D machine types"
  (https://cloud.google.com/compute/docs/instances/about-flex-start-vms; `Family.flex_start`); a MIG resize request's
  `requestedRunDuration` "must be between 10 minutes and 7 days"
  (https://cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from survivor.cloud import hardware
from survivor.cloud.hardware import family

# -- the table -------------------------------------------------------------------------------------

PREEMPTION_NOTICE_SECONDS = (120,)

#: A resize request's run duration, seconds (F5: 10 minutes to 7 days).
FLEX_START_RUN_SECONDS = (600, 7 * 24 * 3600)
TERMINATION_ACTIONS = ("STOP", "DELETE")


# -- lookups ---------------------------------------------------------------------------------------


def built_in_gpus(machine_type: str) -> tuple[str, int] | None:
    """The (type, count) a machine type carries, None for a type GPUs are attached to (or none)."""
    shape = hardware.shape(machine_type)
    return (shape.gpu, shape.count) if shape else None


def carries_gpus(machine_type: str) -> bool:
    """True for every shape of a family with built-in GPUs (a2, a3, a4, g2...)."""
    found = hardware.family_of(machine_type)
    return bool(found and found.carries_gpus)


def n1_kinds() -> Mapping[str, tuple[float, tuple[int, ...]]]:
    """N1's predefined kinds (`standard`, `highmem`, `highcpu`): memory GB per vCPU and vCPU counts."""
    return hardware.FAMILIES["n1"].kinds


def n1_counts(gpu_type: str | None) -> Mapping[int, tuple[int, int]]:
    """The counts an N1 machine takes `gpu_type` in, each with its (max vCPUs, max memory GB); empty
    for a GPU never attached (or unknown)."""
    found = hardware.gpu(gpu_type)
    return found.n1_counts if found else {}


def n1_gpus() -> list[str]:
    """The GPU types an N1 machine takes."""
    return [g.name for g in hardware.GPUS.values() if g.n1_counts]


def flex_start_families() -> list[str]:
    """The families flex-start runs (docs/flex-start.md F2)."""
    return [f.name for f in hardware.FAMILIES.values() if f.flex_start]


def n1_shape(machine_type: str) -> tuple[int, float] | None:
    """(vCPUs, memory GB) of an N1 predefined or custom type; None when it is not one (or shared-core)."""
    name = machine_type.rsplit("/", 1)[-1]
    m = re.fullmatch(r"n1-([a-z]+)-(\d+)", name)
    kinds = n1_kinds()
    if m and m.group(1) in kinds:
        vcpus = int(m.group(2))
        return vcpus, vcpus * kinds[m.group(1)][0]
    m = re.fullmatch(r"(?:n1-)?custom-(\d+)-(\d+)(?:-ext)?", name)
    if m:
        return int(m.group(1)), int(m.group(2)) / 1024
    return None


def gpus_of(machine_type: str, gpu_type: str | None, gpu_count: int) -> tuple[str | None, int]:
    """The GPUs a VM will have: built in, else attached."""
    built_in = built_in_gpus(machine_type)
    if built_in:
        return built_in
    return (gpu_type, gpu_count) if gpu_type and gpu_count else (None, 0)


def has_gpus(machine_type: str, gpu_type: str | None, gpu_count: int) -> bool:
    """True when the VM has GPUs: built into its machine type (a2, a3, g2...) or attached."""
    return carries_gpus(machine_type) or bool(gpu_type and gpu_count)


def flex_start_problem(machine_type: str, gpu_type: str | None = None, gpu_count: int = 0) -> str | None:
    """Pure decision: why a machine (type and attached GPUs) cannot run as flex-start, in one line;
    None when it can (docs/flex-start.md F2). N1 with attached GPUs is a general-purpose series, not an
    accelerator-optimized one, so it is refused whatever its GPUs."""
    runs = flex_start_families()
    if family(machine_type) in runs:
        return None
    gpus = f" with {gpu_count} x {gpu_type}" if gpu_type and gpu_count else ""
    return (
        f"machine_type {machine_type.rsplit('/', 1)[-1]}{gpus}: flex-start runs only accelerator-optimized "
        f"machines but A4X and G4 ({', '.join(f + '-*' for f in runs)})"
    )


def run_duration_problem(seconds: float) -> str | None:
    """Pure decision: why a resize request's run duration is refused (F5: 600 to 604800 s); None if not."""
    low, high = FLEX_START_RUN_SECONDS
    if low <= seconds <= high:
        return None
    return f"requestedRunDuration {seconds:g}s: must be between {low} seconds (10 minutes) and {high} seconds (7 days)"


def quota_metric(gpu_type: str, spot: bool) -> str | None:
    """The regional quota metric a VM's GPUs count against (None when none is known)."""
    found = hardware.gpu(gpu_type)
    return found.quota(spot) if found else None


def _n1_offer(gpu_type: str) -> str:
    return ", ".join(f"{n} (up to {cpus} vCPUs)" for n, (cpus, _) in n1_counts(gpu_type).items())


def _shape_with(gpu_type: str, count: int) -> str | None:
    matches = [t for t, s in hardware.shapes().items() if s.gpu == gpu_type and s.count == count]
    return matches[0] if matches else None


def _home(gpu_type: str) -> str | None:
    """The family whose shapes carry `gpu_type`, None when none does."""
    return next((f.name for f in hardware.FAMILIES.values() for s in f.shapes.values() if s.gpu == gpu_type), None)


# -- what an operator asked for --------------------------------------------------------------------


def choice_problems(
    machine_type: str,
    gpu_type: str | None,
    gpu_count: int,
    *,
    gpu_explicit: bool = True,
    num_gpus: int | None = None,
    spot: bool = True,
    preemption_notice: int | None = None,
    termination_action: str = "STOP",
) -> list[str]:
    """Pure decision: one line per contradiction between the job's machine options, naming both
    fields and the fix. Empty when the request is one Compute Engine accepts."""
    out: list[str] = []
    gpu = f"{gpu_type}:{gpu_count}" if gpu_type else "none"
    built_in = built_in_gpus(machine_type)
    predefined = re.fullmatch(r"n1-([a-z]+)-(\d+)", machine_type.rsplit("/", 1)[-1])
    if (
        family(machine_type) == "n1"
        and predefined
        and predefined.group(1) not in ("megamem", "ultramem")  # M1's
        and int(predefined.group(2)) not in n1_kinds().get(predefined.group(1), (0.0, ()))[1]
    ):
        kinds = "; ".join(f"n1-{kind}-{{{','.join(map(str, counts))}}}" for kind, (_, counts) in n1_kinds().items())
        return [f"machine_type {machine_type}: not an N1 machine type ({kinds}; or custom-CPUS-MEMORY_MB)"]
    if carries_gpus(machine_type):
        fam = family(machine_type)
        carried = f"{machine_type}: {built_in[1]} x {built_in[0]}" if built_in else f"{fam} machines"
        if gpu_explicit and gpu_type and (gpu_type, gpu_count) != built_in:
            out.append(
                f"compute.gpu {gpu} with machine_type {machine_type}: {fam} machines carry their own GPUs "
                f"({carried}); drop compute.gpu (or --gpu none)"
            )
        if built_in and num_gpus is not None and num_gpus > built_in[1]:
            bigger = _shape_with(built_in[0], num_gpus)
            out.append(
                f"num_gpus {num_gpus} with machine_type {machine_type}: it carries {built_in[1]} x {built_in[0]}; "
                + (f"use machine_type {bigger} or num_gpus {built_in[1]}" if bigger else f"set num_gpus {built_in[1]}")
            )
    elif gpu_type and gpu_count:
        shape = n1_shape(machine_type)
        counts = n1_counts(gpu_type)
        if not counts:
            home = _home(gpu_type)
            if home:
                count_shape = _shape_with(gpu_type, gpu_count)
                out.append(
                    f"compute.gpu {gpu} with machine_type {machine_type}: {gpu_type} comes only built into "
                    f"{home} machines; use machine_type {count_shape or home + '-...'} "
                    "and drop compute.gpu"
                )
            else:
                out.append(
                    f"compute.gpu {gpu}: unknown GPU type for machine_type {machine_type}; N1 machines take "
                    f"{', '.join(n1_gpus())}"
                )
        elif family(machine_type) != "n1" or shape is None:
            out.append(
                f"compute.gpu {gpu} with machine_type {machine_type}: GPUs attach only to N1 machines "
                f"(n1-standard-*, n1-highmem-*, n1-highcpu-*); use e.g. machine_type n1-standard-16"
            )
        elif gpu_count not in counts:
            out.append(
                f"compute.gpu {gpu} with machine_type {machine_type}: {gpu_type} attaches in counts "
                f"{_n1_offer(gpu_type)}; pick one of those counts"
            )
        else:
            vcpus, memory = shape
            max_cpus, max_memory = counts[gpu_count]
            if vcpus > max_cpus or memory > max_memory:
                fits = [n for n, (c, m) in counts.items() if c >= vcpus and m >= memory]
                out.append(
                    f"compute.gpu {gpu} with machine_type {machine_type}: {gpu_count} x {gpu_type} allows up to "
                    f"{max_cpus} vCPUs and {max_memory} GB ({machine_type} has {vcpus} and {memory:g}); "
                    + (f"use {fits[0]} GPUs or a smaller machine_type" if fits else "use a smaller machine_type")
                )
        if num_gpus is not None and num_gpus > gpu_count:
            out.append(
                f"num_gpus {num_gpus} with compute.gpu {gpu}: the trainer would ask for more GPUs than the VM "
                f"has; set compute.gpu {gpu_type}:{num_gpus} or num_gpus {gpu_count}"
            )
    elif num_gpus and not gpu_type:
        out.append(
            f"num_gpus {num_gpus} with compute.gpu none on machine_type {machine_type}: the VM has no GPU; "
            "set compute.gpu TYPE:COUNT or num_gpus 0"
        )
    if preemption_notice:
        if not spot:
            out.append(
                f"compute.preemption_notice {preemption_notice} with compute.spot false: the notice exists for "
                "Spot VMs only; drop compute.preemption_notice"
            )
        elif preemption_notice not in PREEMPTION_NOTICE_SECONDS:
            out.append(
                f"compute.preemption_notice {preemption_notice}: Compute Engine accepts "
                f"{' or '.join(map(str, PREEMPTION_NOTICE_SECONDS))} seconds only; set 120 or drop it "
                "(without it the notice and the shutdown arrive together)"
            )
    if spot and termination_action not in TERMINATION_ACTIONS:
        out.append(
            f"compute.termination_action {termination_action!r} with compute.spot true: Spot VMs stop or are "
            f"deleted on preemption; set {' or '.join(TERMINATION_ACTIONS)}"
        )
    return out


def scheduling(
    machine_type: str,
    gpu_type: str | None,
    gpu_count: int,
    *,
    spot: bool,
    termination_action: str = "STOP",
    preemption_notice: int | None = None,
) -> dict[str, Any]:
    """Pure decision: the `scheduling` block for these choices (valid when `choice_problems` is empty).

    Every GPU VM terminates on host maintenance; Spot VMs are never restarted automatically;
    `preemptionNoticeDuration` appears only when asked for."""
    gpu = has_gpus(machine_type, gpu_type, gpu_count)
    if spot:
        out: dict[str, Any] = {
            "onHostMaintenance": "TERMINATE",
            "provisioningModel": "SPOT",
            "instanceTerminationAction": termination_action,
            "automaticRestart": False,
        }
        if preemption_notice:
            out["preemptionNoticeDuration"] = {"seconds": str(int(preemption_notice))}
        return out
    return {
        "onHostMaintenance": "TERMINATE" if gpu else "MIGRATE",
        "provisioningModel": "STANDARD",
        "automaticRestart": True,
    }


# -- what a REST body says (the fake's check) ------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    """A rule a template's properties break: `message` in the API's words, `fields` the two it pits."""

    fields: tuple[str, str]
    message: str


def _seconds(duration: Any) -> float | None:
    if not isinstance(duration, dict):
        return None
    return int(duration.get("seconds") or 0) + int(duration.get("nanos") or 0) / 1e9


def property_violations(properties: dict[str, Any], where: str = "resource.properties") -> list[Violation]:
    """Pure decision: the rules of this table that an instance's (or template's) properties break.

    Wording: where a public source shows the API's text it is used as is (see the module docstring);
    the n1 count/vCPU and notice-duration texts follow the API's "Invalid value for field" form, as
    no source with their exact text was found."""
    out: list[Violation] = []
    machine = str(properties.get("machineType") or "").rsplit("/", 1)[-1]
    accelerators = properties.get("guestAccelerators") or []
    sched = properties.get("scheduling") or {}
    spot = sched.get("provisioningModel") == "SPOT"
    preemptible = bool(sched.get("preemptible"))
    for i, accel in enumerate(accelerators):
        kind = str(accel.get("acceleratorType") or "").rsplit("/", 1)[-1]
        count = int(accel.get("acceleratorCount") or 0)
        shape = n1_shape(machine)
        counts = n1_counts(kind)
        # kubernetes/test-infra#35205 ("[e2-standard-2, nvidia-tesla-t4] features are not compatible for
        # creating instance."), skypilot-org/skypilot#212 (nvidia-tesla-a100 on n1-highmem-8). Whether the
        # API takes a list matching an a2/g2's own GPUs was not found: survivor never sends one.
        if carries_gpus(machine) or not counts or shape is None:
            out.append(
                Violation(
                    ("machineType", f"guestAccelerators[{i}]"),
                    f"[{machine}, {kind}] features are not compatible for creating instance.",
                )
            )
        elif count not in counts:
            out.append(
                Violation(
                    (f"guestAccelerators[{i}].acceleratorCount", "machineType"),
                    f"Invalid value for field '{where}.guestAccelerators[{i}].acceleratorCount': '{count}'. "
                    f"{kind} can be attached in counts of {sorted(counts)} only.",
                )
            )
        else:
            max_cpus, max_memory = counts[count]
            if shape[0] > max_cpus or shape[1] > max_memory:
                out.append(
                    Violation(
                        (f"guestAccelerators[{i}].acceleratorCount", "machineType"),
                        f"Invalid value for field '{where}.machineType': '{machine}'. {count} {kind} "
                        f"accelerators allow at most {max_cpus} vCPUs and {max_memory} GB of memory.",
                    )
                )
    gpu = carries_gpus(machine) or any(int(a.get("acceleratorCount") or 0) for a in accelerators)
    # The default is MIGRATE for standard VMs, TERMINATE for preemptible/Spot (discovery document).
    maintenance = sched.get("onHostMaintenance") or ("TERMINATE" if spot or preemptible else "MIGRATE")
    if gpu and maintenance == "MIGRATE":
        out.append(
            Violation(
                ("scheduling.onHostMaintenance", "guestAccelerators" if accelerators else "machineType"),
                "Instances with guest accelerators do not support live migration.",
            )
        )
    if (spot or preemptible) and sched.get("automaticRestart") is True:
        # hashicorp/terraform#15055 (instance template, preemptible); the SPOT form follows it.
        field = "preemptible" if preemptible else "provisioningModel"
        value = "true" if preemptible else "SPOT"
        out.append(
            Violation(
                (f"scheduling.{field}", "scheduling.automaticRestart"),
                f"Invalid value for field '{where}.scheduling.{field}': '{value}'. Scheduling must have "
                f"{'preemptible be false' if preemptible else 'provisioningModel be STANDARD'} when "
                "AutomaticRestart is true.",
            )
        )
    if preemptible and sched.get("provisioningModel") == "STANDARD":
        # skypilot-org/skypilot#3235
        out.append(
            Violation(
                ("scheduling.provisioningModel", "scheduling.preemptible"),
                f"Invalid value for field '{where}.scheduling.provisioningModel': 'STANDARD'. For "
                "preemptible, only allowed provisioning_model value is SPOT",
            )
        )
    notice = _seconds(sched.get("preemptionNoticeDuration"))
    if notice is not None:
        if not spot:
            out.append(
                Violation(
                    ("scheduling.preemptionNoticeDuration", "scheduling.provisioningModel"),
                    f"Invalid value for field '{where}.scheduling.preemptionNoticeDuration': "
                    f"'{notice:g}s'. A preemption notice duration can be set for Spot VMs only.",
                )
            )
        elif notice not in PREEMPTION_NOTICE_SECONDS:
            out.append(
                Violation(
                    ("scheduling.preemptionNoticeDuration", "scheduling.provisioningModel"),
                    f"Invalid value for field '{where}.scheduling.preemptionNoticeDuration': "
                    f"'{notice:g}s'. Supported values: {', '.join(f'{s}s' for s in PREEMPTION_NOTICE_SECONDS)}.",
                )
            )
    return out + disk_violations(properties)


# -- disks -----------------------------------------------------------------------------------------

#: "Hyperdisk Balanced and Hyperdisk Balanced High Availability are the only Hyperdisk types you can
#: use as a boot disk" (https://cloud.google.com/compute/docs/disks/hd-types/hyperdisk-balanced-ha).
BOOT_HYPERDISKS = ("hyperdisk-balanced", "hyperdisk-balanced-high-availability")
#: survivor's disk type where the series takes Persistent Disk (survivor/cloud/template.py MachineOptions).
DEFAULT_DISK_TYPE = "pd-balanced"
#: Families that take no Hyperdisk Balanced or Extreme, so a template made for A3 Ultra or A4 cannot
#: lend them its disks: A2 and G2 take Persistent Disk and only Hyperdisk ML (G2 also Throughput), by
#: the same page's tables (#a2-disks, #g2-disks, as transcribed in skypilot-org/skypilot#4705); N1 takes
#: no Hyperdisk type ("If a machine series doesn't support Hyperdisk, use Persistent Disk", the machine
#: series table of https://cloud.google.com/compute/docs/disks/hyperdisks).
NO_HYPERDISK_BALANCED = ("n1", "a2", "g2")
BALANCED_HYPERDISKS = ("hyperdisk-balanced", "hyperdisk-balanced-high-availability", "hyperdisk-extreme")


def disk_types(machine_type: str) -> tuple[str, ...] | None:
    """The disk types a Hyperdisk-only series takes (its family's record, survivor/cloud/hardware.py
    `Family.hyperdisk_only`, with the sources); None for a series that takes Persistent Disk too (no
    rule here)."""
    name = machine_type.rsplit("/", 1)[-1]
    found = hardware.family_of(name)
    for series, types in (found.hyperdisk_only if found else {}).items():
        if name.startswith(series + "-"):
            return types
    return None


def disk_type_for(machine_type: str, wanted: str = DEFAULT_DISK_TYPE, *, boot: bool = True) -> str:
    """Pure decision: the disk type a disk of `machine_type` gets: `wanted` when its series takes it,
    else the first type the series takes that can boot (hyperdisk-balanced)."""
    types = disk_types(machine_type)
    if types is None:
        refused = family(machine_type) in NO_HYPERDISK_BALANCED and wanted in BALANCED_HYPERDISKS
        return DEFAULT_DISK_TYPE if refused else wanted
    if wanted in types and (not boot or wanted in BOOT_HYPERDISKS):
        return wanted
    return next(t for t in types if t in BOOT_HYPERDISKS)


def disk_type_problem(machine_type: str, wanted: str, what: str = "compute.disk_type") -> str | None:
    """Pure decision: why a disk type the operator named cannot be the boot disk of `machine_type`, in
    one line; None when it can."""
    chosen = disk_type_for(machine_type, wanted)
    if chosen == wanted:
        return None
    takes = disk_types(machine_type)
    why = f"takes Hyperdisk only ({', '.join(takes)})" if takes else f"takes no {wanted}"
    return f"{what} {wanted} with machine_type {machine_type}: its series {why}; set {what} {chosen} or drop it"


def with_disk_types(machine_type: str, disks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pure: a template's `disks` with each disk type changed to one `machine_type` takes (`disk_type_for`;
    unchanged for a series that takes Persistent Disk): what a shape or a fallback machine's template
    made from the job's own needs."""
    out = []
    for disk in disks:
        params = disk.get("initializeParams") or {}
        kind = params.get("diskType")
        if kind is None:
            out.append(disk)
            continue
        chosen = disk_type_for(machine_type, str(kind).rsplit("/", 1)[-1], boot=bool(disk.get("boot")))
        if chosen == str(kind).rsplit("/", 1)[-1]:
            out.append(disk)
        else:
            out.append({**disk, "initializeParams": {**params, "diskType": chosen}})
    return out


def disk_violations(properties: dict[str, Any]) -> list[Violation]:
    """Pure decision: the disks of an instance's (or template's) properties its machine series does not
    take (`disk_types`, `BOOT_HYPERDISKS`). The wording is the API's for a machine and a disk it
    cannot have ("[e2-medium, local-ssd] features are not compatible for creating instance.",
    hashicorp/terraform-provider-google#8148)."""
    machine = str(properties.get("machineType") or "").rsplit("/", 1)[-1]
    out = []
    for i, disk in enumerate(properties.get("disks") or []):
        kind = str((disk.get("initializeParams") or {}).get("diskType") or "").rsplit("/", 1)[-1]
        if kind and disk_type_for(machine, kind, boot=bool(disk.get("boot"))) != kind:
            out.append(
                Violation(
                    ("machineType", f"disks[{i}].initializeParams.diskType"),
                    f"[{machine}, {kind}] features are not compatible for creating instance.",
                )
            )
    return out
