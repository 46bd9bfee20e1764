"""A job's single-VM managed instance group made (or found), and waited on until its VM runs.

    >>> made = make_group(compute, JobAddress("cifar10", zone="us-west1-b").group(), GroupOptions(template="cifar10"))
    >>> made.state, made.zone                                   # ("running", "us-west1-b")

The recipe's `gcloud compute instance-groups managed create`, by job name: a job NAME has a
single-instance MIG NAME (zonal with a zone, regional with a region). `make-group` runs it with the
operator's preflight (`preflight=`); a move (survivor/mig/move.py) without, in the next region.
"""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass
from typing import Any, Callable

from survivor.cloud.compute import (
    BASE_INSTANCE_NAME_MAX,
    Compute,
    ComputeError,
    GroupRef,
    PermissionDenied,
    distribution_policy,
    explain_operation_errors,
    group_creation,
    name_problems,
)
from survivor.cloud.template import STATE_DISK_DEVICE
from survivor.mig.address import JobAddress, RequestError, Say, silent
from survivor.mig.templates import template_gpus


@dataclass(frozen=True)
class GroupOptions:
    """How to make a job's group: its template, whether to skip preflight, how long to wait for its VM."""

    template: str
    skip_preflight: bool = False
    wait_seconds: float = 300.0  # 0: do not wait for the VM
    poll_seconds: float = 5.0
    #: refuse a group whose name a group in another zone or region of the project has already: a job
    #: has one group (False for the move at boot, which makes the next region's before deleting the old)
    one_place: bool = True


def group_problems(group: GroupRef, template: str) -> list[str]:
    """Pure decision: why the job's name or its template's cannot name a group (empty when they can)."""
    return name_problems("job", group.name, max_length=BASE_INSTANCE_NAME_MAX) + name_problems("template", template)


def check_names(group: GroupRef, template: str) -> None:
    """RequestError when the job's name or its template's cannot name a group."""
    problems = group_problems(group, template)
    if problems:
        raise RequestError(problems[0])


def _address_of(group: GroupRef) -> JobAddress:
    return JobAddress(group.name, group.project, group.zone, group.region)


def _place_key(group: GroupRef) -> tuple[str, str, str]:
    return group.name, group.zone or "", group.region or ""


def groups_elsewhere(group: GroupRef, groups: list[GroupRef]) -> list[GroupRef]:
    """Pure decision: the groups of `groups` named as `group` but in another zone or region."""
    return [g for g in groups if g.name == group.name and (g.zone, g.region) != (group.zone, group.region)]


def elsewhere_refusal(group: GroupRef, others: list[GroupRef]) -> str:
    """Pure: the one line that refuses a second group of a job's name, naming the one there and the fix."""
    there = _address_of(min(others, key=_place_key))
    return (
        f"group {group.name}: already exists in {there.place}, and a job has one group: use {there.flag} for it, "
        f"or delete it first (`survivor delete {group.name} {there.flag}`) to make it in {_address_of(group).place}"
    )


def in_use_refusal(template: str, users: list[GroupRef]) -> str:
    """Pure: the one line for a template that another group still uses, naming each and how to delete it."""
    users = sorted(users, key=_place_key)  # the aggregated list's scopes come in no promised order
    named = ", ".join(f"{g.name} ({_address_of(g).place})" for g in users)
    commands = ", then ".join(f"`survivor delete {g.name} {_address_of(g).flag}`" for g in users)
    what = "that group" if len(users) == 1 else "those groups"
    return (
        f"template {template}: kept, still used by group{'s' if len(users) > 1 else ''} {named}; {commands} "
        f"deletes {what}, then the template"
    )


def group_body(group: GroupRef, template: str, template_body: dict | None = None) -> dict:
    """The single-VM group's REST body, as make-group's dry run shows it; RequestError for a bad name.
    `template_body`: the template's, when known (its state disk makes the group stateful)."""
    check_names(group, template)
    body: dict[str, Any] = {
        "name": group.name,
        "baseInstanceName": group.name,
        "targetSize": 1,
        "instanceTemplate": f"projects/{group.project}/global/instanceTemplates/{template}",
        "zone" if group.zone else "region": group.zone or group.region,
    }
    if group.region:
        body["distributionPolicy"] = distribution_policy(group.project, [])  # zones: those offering the GPU
    stateful = stateful_policy(template_body or {})
    if stateful:
        body["statefulPolicy"] = stateful
        if group.region:  # a stateful regional group may not move its VMs (their disks are zonal): the API
            # refuses the default PROACTIVE redistribution ("Configuring stateful MIGs", limitations)
            body["updatePolicy"] = {"instanceRedistributionType": "NONE"}
    return body


def stateful_policy(template_body: dict) -> dict | None:
    """Pure: the group's statefulPolicy for a template with a state disk (device STATE_DISK_DEVICE), or None.

    The disk is preserved with `autoDelete: NEVER`: the group reattaches it when it recreates the VM
    after a preemption, and keeps it even when the group is deleted (a snapshot the agent left on it
    is not lost with the group; the operator deletes the disk)."""
    disks = ((template_body.get("properties") or {}).get("disks")) or []
    if not any(d.get("deviceName") == STATE_DISK_DEVICE for d in disks):
        return None
    return {"preservedState": {"disks": {STATE_DISK_DEVICE: {"autoDelete": "NEVER"}}}}


def regional_zones(compute: Compute, region: str, template: dict) -> list[str]:
    """The region's zones that offer the template's GPU (all of them for a VM without GPUs)."""
    gpu_type, gpu_count = template_gpus(template)
    zones = compute.region(region)["zones"]
    if not gpu_type:
        return zones
    return [z for z in zones if compute.zone_accelerators(z).get(gpu_type, 0) >= gpu_count]


def wait_for_group(
    compute: Compute, group: GroupRef, wait_seconds: float, poll_seconds: float, progress: Say = silent
) -> tuple[str, str, list]:
    """Polls a new group until its VM is RUNNING, its creation failed, or `wait_seconds` passed.

    Returns `group_creation`'s (state, zone, errors).
    """
    deadline = time.monotonic() + wait_seconds
    # errors listed before this wait (slack for the clocks) are an earlier story of the group
    since = (_dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(seconds=60)).isoformat()
    while True:
        state = group_creation(compute.managed_instances(group), compute.group_errors(group), since)
        if state[0] != "waiting" or time.monotonic() >= deadline:
            return state
        progress(f"group {group.name}: waiting for its VM ({max(0.0, deadline - time.monotonic()):.0f} s left)")
        time.sleep(min(poll_seconds, max(0.0, deadline - time.monotonic())))


def choose_start(compute: Compute, group: GroupRef, template: dict) -> tuple[GroupRef, str]:
    """Where `make-group` makes the job's group, and why in one line ("" when there was no choice).

    A regional group (`--region`) of a template whose spec names other regions (`placement.regions`)
    starts where Compute Engine's capacity data says the job trains best (survivor/policy/placement.py
    `start_place`, the bet a move makes), on the job's own `compute:` shape: another shape's group
    runs `<template>-shape-N`, which only a move makes and records. A zonal group (`--zone`) stays in
    the zone named, and so does a group that exists already (a rerun). Without the data (no
    permission, a region or machine without it): where asked, said once in the log
    (survivor/cloud/capacity.py `read_outlooks`)."""
    from survivor.cloud.capacity import FALLBACK, read_outlooks
    from survivor.mig.templates import spec_of
    from survivor.policy.placement import Place, place_machines, start_place
    from survivor.spec import SpecError

    try:
        spec = spec_of(template)
    except (SpecError, ValueError):
        return group, ""
    placement = spec.placement if spec is not None else None
    if placement is None or not group.region or len(set(placement.regions) | {group.region}) < 2:
        return group, ""
    if compute.get_group(group) is not None:
        return group, ""
    machine = place_machines(spec).get(Place(placement.regions[0], 0)) if spec is not None else None
    if machine is None:
        return group, ""
    regions = list(dict.fromkeys([group.region, *placement.regions]))
    try:
        found = read_outlooks(compute.capacity_advice, compute.capacity_history, [(r, machine, None) for r in regions])
    except Exception as exc:  # noqa: BLE001 -- the data is an input, never a requirement
        FALLBACK.say(f"region {group.region}", f"advice: {type(exc).__name__}: {exc}")
        found = {}
    outlooks = {Place(regions[i]): outlook for i, outlook in found.items()}
    asked, skip = Place(group.region), set[Place]()
    for _ in regions:
        start = start_place(asked, outlooks, frozenset(skip))
        if start.at == asked or regional_zones(compute, start.at.region, template):
            break
        skip.add(start.at)  # no zone of its region offers the GPU: the next best
    if start.at == asked:
        return group, f"starts in region {asked.region}: {start.reason}"
    chosen = GroupRef(group.project, group.name, region=start.at.region)
    return chosen, (
        f"starts in region {start.at.region}, not {asked.region}: {start.reason}; later commands take "
        f"--region {start.at.region}"
    )


@dataclass(frozen=True)
class GroupOutcome:
    """What make_group did: `done` is "created" or "already exists"; `state` is "running", "stopped"
    (an existing group at target size 0) or "not waited for"; `zone` where the VM runs."""

    done: str
    state: str
    zone: str | None = None


def make_group(
    compute: Compute,
    group: GroupRef,
    options: GroupOptions,
    *,
    say: Say = silent,
    progress: Say = silent,
    preflight: Callable[[dict], None] | None = None,
) -> GroupOutcome:
    """Creates the job's single-VM group, then waits until its VM runs or the group reports why it cannot.

    A MIG's insert succeeds even when no VM will ever start (a stockout or a quota shows in the
    group's errors, not in the insert), hence the wait. A rerun finds the group and reports on its VM.
    Raises RequestError for a group with another template, a group of the name in another zone or
    region (`options.one_place`), a missing template, a region without the GPU, and a VM that is not
    RUNNING in time; ComputeError (the fix in one sentence) for a VM that
    cannot be created. `preflight`: the operator's checks of the template before the group is made
    (survivor/operator/template.py `check_preflight`, which raises PreflightFailed when one blocks),
    unless `options.skip_preflight`; `say` gets what the make says, `progress` the wait.
    """
    check_names(group, options.template)
    address = JobAddress(group.name, group.project, group.zone, group.region)
    found = compute.get_group(group)
    done = "created"
    template = None
    if found is not None:
        current = (found.get("instanceTemplate") or "").rsplit("/", 1)[-1]
        if current != options.template:
            raise RequestError(
                f"group {group.name}: already exists with template {current}, not {options.template}; "
                f"delete it first (`survivor delete {group.name} {address.flag} --template {current}`) "
                "or use another name"
            )
        if not found.get("targetSize"):
            return GroupOutcome("already exists", "stopped")
        done = "already exists"
    else:
        if options.one_place:
            try:
                listed = [ref for ref, _ in compute.list_groups()]
            except PermissionDenied as exc:  # a role that may create groups but not list them
                say(f"warning: group {group.name}: not checked for a group of this name elsewhere ({exc})")
                listed = []
            others = groups_elsewhere(group, listed)
            if others:
                raise RequestError(elsewhere_refusal(group, others))
        template = compute.get_template(options.template)
        if template is None:
            raise RequestError(
                f"template {options.template}: not found; create it first with `survivor make-template "
                f"{options.template} --config JOB.yaml`"
            )
        if preflight is not None and not options.skip_preflight:
            preflight(template)
        distribution = None
        if group.region:
            zones = regional_zones(compute, group.region, template)
            if not zones:
                raise RequestError(
                    f"group {group.name}: no zone of region {group.region} offers the template's GPU; "
                    "pick another region (gcloud compute accelerator-types list)"
                )
            distribution = distribution_policy(group.project, zones)
        compute.create_group(
            group.name,
            options.template,
            zone=group.zone,
            region=group.region,
            size=1,
            distribution=distribution,
            stateful=stateful_policy(template),
        )
    if options.wait_seconds <= 0:
        return GroupOutcome(done, "not waited for")
    state, zone, errors = wait_for_group(compute, group, options.wait_seconds, options.poll_seconds, progress=progress)
    if state == "running":
        return GroupOutcome(done, "running", zone)
    if state == "failed":
        problem = explain_operation_errors(
            errors, f"group {group.name}: its VM cannot be created", f"zone {zone}" if zone else address.place
        )
        raise ComputeError(
            f"{problem} The group keeps retrying; `survivor delete {group.name} {address.flag}` stops it."
        )
    raise RequestError(
        f"group {group.name}: {done} ({address.place}), but its VM is not RUNNING after "
        f"{options.wait_seconds:g} s and the group reports no error; follow it with `survivor status "
        f"{group.name} {address.flag}`, or wait longer with --wait-seconds"
    )
