"""A job's other templates, made from its own (the Spot one `make-template` made): the deadline's
on-demand and flex-start twins, and one per machine shape of `placement.shapes`; and the spec a
template carries.

    >>> template_mode("cifar10-on-demand")
    ('cifar10', 'on-demand')
    >>> shape_template_name("cifar10", 2)
    'cifar10-shape-2'

Pure: bodies in, bodies out. survivor/mig/switch.py and survivor/mig/move.py insert them.
"""

from __future__ import annotations

import json

from survivor.cloud import machines
from survivor.cloud.compute import Compute, name_problems
from survivor.cloud.template import DLVM_PROJECT, IMAGE_FAMILY_PREFIX, MachineOptions, parse_gpu, shape_options
from survivor.jobdir.switches import Mode, FLEX_START, ON_DEMAND, SPOT
from survivor.spec import FallbackSpec, JobSpec


#: The on-demand template of a job is its Spot template's name with this suffix.
ON_DEMAND_SUFFIX = "-on-demand"


#: The flex-start template of a job (docs/flex-start.md): the Spot template's name with this suffix.
FLEX_START_SUFFIX = "-flex-start"


#: Each mode's template suffix; Spot's is the template itself.
SUFFIXES = {ON_DEMAND: ON_DEMAND_SUFFIX, FLEX_START: FLEX_START_SUFFIX}


def template_gpus(body: dict) -> tuple[str | None, int]:
    """Pure: the (GPU type, count) of an `instanceTemplates` body (as sent, or as `get` returns it):
    its `guestAccelerators`, or the GPUs its a2/a3/g2 machine type carries."""
    props = body.get("properties") or {}
    machine = str(props.get("machineType") or "").rsplit("/", 1)[-1]
    accel = (props.get("guestAccelerators") or [{}])[0]
    return machines.gpus_of(
        machine,
        str(accel.get("acceleratorType") or "").rsplit("/", 1)[-1] or None,
        int(accel.get("acceleratorCount") or 0),
    )


def template_mode(name: str) -> tuple[str, Mode]:
    """Pure: (the Spot template's name, the mode) of one of a job's templates, by its suffix."""
    for mode, suffix in SUFFIXES.items():
        if name.endswith(suffix):
            return name[: -len(suffix)], mode
    return name, SPOT


def _twin(spot: dict, fallback: FallbackSpec | None, suffix: str, what: str) -> tuple[dict, dict]:
    """A copy of the Spot template body renamed with `suffix`, with `fallback:`'s machine put in;
    (the body, its properties)."""
    body = json.loads(json.dumps(spot))
    for key in ("id", "kind", "selfLink", "creationTimestamp", "fingerprint"):
        body.pop(key, None)
    body["name"] = spot["name"] + suffix
    body["description"] = (spot.get("description") or "") + f" ({what})"
    props = body["properties"]
    if fallback and fallback.machine_type:
        props["machineType"] = fallback.machine_type
    if fallback and fallback.gpu:
        gpu_type, gpu_count = parse_gpu(fallback.gpu)
        props.pop("guestAccelerators", None)
        if gpu_type and not machines.carries_gpus(props["machineType"]):
            props["guestAccelerators"] = [{"acceleratorType": gpu_type, "acceleratorCount": gpu_count}]
    if "disks" in props:  # a fallback machine of a Hyperdisk-only series (A3 Ultra, A4) takes no pd-balanced
        props["disks"] = machines.with_disk_types(props["machineType"], props["disks"])
    return body, props


def on_demand_template_body(spot: dict, fallback: FallbackSpec | None = None) -> dict:
    """Pure: the on-demand twin of a Spot template body: `provisioningModel: STANDARD`, no Spot
    termination action or notice, automatic restart; the same shape unless `fallback` names a
    machine type or GPUs. Its name is the Spot template's with ON_DEMAND_SUFFIX."""
    body, props = _twin(spot, fallback, ON_DEMAND_SUFFIX, "on-demand fallback")
    accel = (props.get("guestAccelerators") or [{}])[0]
    props["scheduling"] = machines.scheduling(
        props["machineType"], accel.get("acceleratorType"), int(accel.get("acceleratorCount") or 0), spot=False
    )
    return body


def shape_template_name(template: str, shape: int) -> str:
    """Pure: the name of the job's template for `shape`: `template` (the job's own) for 0, else
    `<template>-shape-N` (N: `placement.shapes[N-1]`)."""
    return template if shape == 0 else f"{template}-shape-{shape}"


def job_template_names(template: str, spec: JobSpec) -> list[str]:
    """Pure: every template name the job may come to make from its own `template`: one per shape of
    `placement.shapes` (`shape_template_name`), and, with a deadline, each one's on-demand twin (and
    flex-start twin when `fallback.flex_start` allows it) that the deadline policy and a move make."""
    shapes = len(spec.placement.shapes) if spec.placement else 0
    suffixes = [""]
    if spec.deadline is not None:
        suffixes.append(ON_DEMAND_SUFFIX)
        if spec.fallback is not None and spec.fallback.flex_start:
            suffixes.append(FLEX_START_SUFFIX)
    return [shape_template_name(template, n) + suffix for n in range(shapes + 1) for suffix in suffixes]


def template_name_problems(template: str, spec: JobSpec) -> list[str]:
    """Pure decision: one line when a template name the job may make from `template` (its shapes', its
    twins': `job_template_names`) is longer than a Compute Engine name may be (63 characters, the
    discovery document's `name` pattern, survivor/cloud/compute.py NAME), naming the longest and how
    short `template` must be; so it is refused before anything is made, not at a move or a switch."""
    longest = max(job_template_names(template, spec), key=len)
    if not name_problems("template", template) and name_problems("template", longest):
        most = 63 - (len(longest) - len(template))
        return [
            f"template {template!r}: the job may make template {longest!r} ({len(longest)} characters; Compute "
            f"Engine names are at most 63): name the template with at most {most} characters"
        ]
    return []


def shape_template_body(job: dict, spec: JobSpec, shape: int) -> dict:
    """Pure: the template of the job's `shape`, made from the job's own template body `job` as the
    deadline's on-demand twin is (`on_demand_template_body`): the same body with only the machine
    type, the GPUs and what they decide changed (scheduling's maintenance rule, the Deep Learning VM
    image's driver item), named `shape_template_name`. Shape 0 is `job` itself."""
    if shape == 0:
        return job
    body = json.loads(json.dumps(job))
    for key in ("id", "kind", "selfLink", "creationTimestamp", "fingerprint"):
        body.pop(key, None)
    body["name"] = shape_template_name(job["name"], shape)
    body["description"] = (job.get("description") or "") + f" (shape {shape})"
    if spec.placement is None:
        raise ValueError(f"shape {shape}: the spec has no placement.shapes")
    machine = shape_options(spec, MachineOptions.from_spec(spec), spec.placement.shapes[shape - 1])
    props = body["properties"]
    props["machineType"] = machine.machine_type
    if "disks" in props:  # a shape of a Hyperdisk-only series (A3 Ultra, A4) takes no pd-balanced
        props["disks"] = machines.with_disk_types(machine.machine_type, props["disks"])
    props.pop("guestAccelerators", None)
    # a2/a3/g2 carry their GPUs: nothing is attached to them (as template_body does)
    attached = 0 if machines.carries_gpus(machine.machine_type) else (machine.gpu_count or 0 if machine.gpu_type else 0)
    if attached:
        props["guestAccelerators"] = [{"acceleratorType": machine.gpu_type, "acceleratorCount": attached}]
    sched = props.get("scheduling") or {}
    notice = (sched.get("preemptionNoticeDuration") or {}).get("seconds")
    props["scheduling"] = machines.scheduling(
        machine.machine_type,
        machine.gpu_type,
        attached,
        spot=sched.get("provisioningModel") == "SPOT",
        termination_action=sched.get("instanceTerminationAction") or "STOP",
        preemption_notice=int(notice) if notice else None,
    )
    items = [i for i in props.get("metadata", {}).get("items", []) if i.get("key") != "install-nvidia-driver"]
    image = ((props.get("disks") or [{}])[0].get("initializeParams") or {}).get("sourceImage") or ""
    if machines.gpus_of(machine.machine_type, machine.gpu_type, attached)[1] and (
        f"projects/{DLVM_PROJECT}/" in image or f"/family/{IMAGE_FAMILY_PREFIX}" in image
    ):
        items.append({"key": "install-nvidia-driver", "value": "True"})
    if "metadata" in props:
        props["metadata"]["items"] = items
    return body


def flex_start_template_body(spot: dict, fallback: FallbackSpec | None = None) -> dict:
    """Pure: the flex-start twin of a Spot template body, made like the on-demand one (the same
    shape unless `fallback` says otherwise), with the scheduling Google's resize-request example
    gives (docs/flex-start.md F8): `provisioningModel: FLEX_START`, `instanceTerminationAction:
    DELETE`, `onHostMaintenance: TERMINATE`, no automatic restart. The run duration is the resize
    request's. Its name is the Spot template's with FLEX_START_SUFFIX."""
    body, props = _twin(spot, fallback, FLEX_START_SUFFIX, "flex-start fallback")
    props["scheduling"] = {
        "provisioningModel": "FLEX_START",
        "instanceTerminationAction": "DELETE",
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
    }
    # F12: every flex-start and resize-request template of Google's consumes no reservation
    props["reservationAffinity"] = {"consumeReservationType": "NO_RESERVATION"}
    return body


def spec_of(template: dict) -> JobSpec | None:
    """The job spec a template carries in its `survivor-job` metadata (None: it carries none)."""
    items = {i["key"]: i["value"] for i in template["properties"].get("metadata", {}).get("items", [])}
    return JobSpec.from_yaml(items["survivor-job"]) if "survivor-job" in items else None


def template_body_of_base(compute: Compute, body: dict) -> dict:
    """The job's Spot template (the spec's source) for any of its templates (`-on-demand`,
    `-flex-start`, a shape's): the body given when that one is gone or is the base itself."""
    base, _ = template_mode(str(body.get("name") or ""))
    return body if base == body.get("name") else (compute.get_template(base) or body)
