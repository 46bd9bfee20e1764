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
from typing import TYPE_CHECKING, Any, Callable

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

if TYPE_CHECKING:
    from survivor.jobdir.moves import Move


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


def job_of_template(template: str) -> str:
    """Pure: the job template (make-template's) that `template` belongs to: itself, or the one its
    deadline twin (`-on-demand`, `-flex-start`) or machine shape (`-shape-N`) was made from."""
    import re

    from survivor.mig.templates import template_mode

    return re.sub(r"-shape-[0-9]+$", "", template_mode(template)[0])


def groups_of_job(group: GroupRef, template: str, groups: list[tuple[GroupRef, dict]]) -> list[GroupRef]:
    """Pure decision: the groups of `groups` under another name than `group` that run one of the
    templates of `template`'s job: a second group would train the same job dir (one VM holds its
    lease; the others are billed for nothing)."""
    job = job_of_template(template)
    return [
        ref
        for ref, body in groups
        if ref.name != group.name and job_of_template(str(body.get("instanceTemplate") or "").rsplit("/", 1)[-1]) == job
    ]


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


@dataclass(frozen=True)
class StartChoice:
    """Where `make-group` makes a job's group and from which template; `why` in one line ("" when
    there was no choice); `move` the record that says the group starts on another machine shape
    (written to the job dir `job_dir` before the group is made, as a move's is); `new_template` that
    shape's template body, inserted when missing (`record_start` writes both)."""

    group: GroupRef
    template: str
    why: str = ""
    move: Move | None = None
    new_template: dict | None = None
    job_dir: str = ""


def choose_start(compute: Compute, group: GroupRef, template_name: str, template: dict) -> StartChoice:
    """Where `make-group` makes the job's group, on which machine shape, and why; it reads Compute
    Engine and the job dir and writes nothing (make-group's dry run shows it; `record_start` writes
    what it chose).

    A regional group (`--region`) of a template whose spec names other regions or machine shapes
    (`placement.regions`, `placement.shapes`) starts where Compute Engine's capacity data says the
    job trains best (survivor/policy/placement.py `start_place`, the bet a move makes, over every
    region and shape). Another shape's group runs `<template>-shape-N` (`record_start` makes it when
    missing, as a move makes it), and a move's record (`StartChoice.move`, by make-group, written by
    `record_start` before the group is made) says so: the job's looks and boots read the shape from the records as after any
    move, and a look after a make-group cut between the record and the group makes the group
    (survivor/mig/move.py `complete_moves`). A zonal group (`--zone`) stays in the zone named, and
    may start there on another shape of the spec (asked of the data for that zone, one the zone
    offers the GPU of; a move of a zonal group changes its shape in place too); a group that exists
    already keeps its own template (a rerun).
    Without the data (no permission, a region or machine without it): where asked, said once in the
    log (survivor/cloud/capacity.py `read_outlooks`)."""
    from survivor.cloud.capacity import FALLBACK, read_outlooks
    from survivor.jobdir.moves import Move
    from survivor.mig.templates import shape_template_body, shape_template_name, spec_of
    from survivor.policy.placement import Place, machine_text, place_machines, place_of, shape_text, start_place
    from survivor.places import region_of
    from survivor.spec import SpecError

    asked_start = StartChoice(group, template_name)
    try:
        spec = spec_of(template)
    except (SpecError, ValueError):
        return asked_start
    placement = spec.placement if spec is not None else None
    if spec is None or placement is None:
        return asked_start
    home = group.region or region_of(str(group.zone))
    # a zonal group stays in its zone: only its shapes are weighed, for that zone
    regions = [home] if group.zone else list(dict.fromkeys([home, *placement.regions]))
    if len(regions) < 2 and not placement.shapes:
        return asked_start
    found_group = compute.get_group(group)
    if found_group is not None:  # a rerun: make_group reports on the group as it is
        current = (found_group.get("instanceTemplate") or "").rsplit("/", 1)[-1]
        shapes = {shape_template_name(template_name, k) for k in range(1, 1 + len(placement.shapes))}
        return StartChoice(group, current if current in shapes else template_name)
    machines = {p.shape: m for p, m in place_machines(spec).items()}
    if 0 not in machines:
        return asked_start
    wanted = [Place(r, k) for k in sorted(machines) for r in regions]  # in the order a job walks them
    try:
        found = read_outlooks(
            compute.capacity_advice,
            compute.capacity_history,
            [(p.region, machines[p.shape], group.zone) for p in wanted],
        )
    except Exception as exc:  # noqa: BLE001 -- the data is an input, never a requirement
        FALLBACK.say(f"region {home}", f"advice: {type(exc).__name__}: {exc}")
        found = {}
    outlooks = {wanted[i]: outlook for i, outlook in found.items()}

    def name(place: Place) -> str:
        return place.region + (f" on {shape_text(placement, place.shape)}" if place.shape else "")

    asked = Place(home)
    bodies = {0: template}

    def best(among: dict[Place, Any]) -> Any:
        """start_place over `among`, passing over a place whose region offers not its shape's GPU."""
        skip = set[Place]()
        for _ in wanted:
            start = start_place(asked, among, frozenset(skip), name)
            if start.at == asked:
                break
            if start.at.shape not in bodies:
                bodies[start.at.shape] = shape_template_body(template, spec, start.at.shape)
            zones = regional_zones(compute, start.at.region, bodies[start.at.shape])
            if group.zone in zones if group.zone else zones:
                break
            skip.add(start.at)  # no zone of its region offers the shape's GPU: the next best
        return start

    # the job's own shape in every region first, as a move walks them (policy/placement.py `places`):
    # another shape changes speed, price and what the trainer was tuned for
    start = best({p: o for p, o in outlooks.items() if p.shape == 0})
    if start.at == asked and placement.shapes:
        start = best(outlooks)
    if start.at == asked:
        return StartChoice(group, template_name, f"starts in {place_text(group)}: {start.reason}")
    chosen = group if group.zone else GroupRef(group.project, group.name, region=start.at.region)
    later = f"; later commands take --region {start.at.region}" if start.at.region != asked.region else ""
    if start.at.shape == 0:
        return StartChoice(
            chosen, template_name, f"starts in region {start.at.region}, not {asked.region}: {start.reason}{later}"
        )
    body = bodies[start.at.shape]
    record = Move(
        time=_dt.datetime.now(_dt.timezone.utc).isoformat(),
        from_place=place_of(chosen),
        to_place=place_of(chosen),
        reason=start.reason,
        by="make-group",
        shape=str(start.at.shape),
        machine=machine_text(body),
    )
    return StartChoice(
        chosen,
        body["name"],
        f"starts in {place_text(chosen)} on {shape_text(placement, start.at.shape)} (template "
        f"{body['name']}), not {place_text(group)} on its compute: shape: {start.reason}{later}",
        record,
        body if compute.get_template(body["name"]) is None else None,
        spec.job_dir,
    )


def missing_template(name: str) -> str:
    """Pure: why make-group (and its dry run) refuses a template that does not exist."""
    return f"template {name}: not found; create it first with `survivor make-template {name} --config JOB.yaml`"


def place_text(group: GroupRef) -> str:
    """Pure: "zone Z" or "region R" of a group, as make-group's line names it."""
    return f"zone {group.zone}" if group.zone else f"region {group.region}"


def record_start(compute: Compute, choice: StartChoice) -> None:
    """Writes what `choose_start` chose, before the group is made: the shape's template when it is
    still missing, then the move's record in the job dir (a rerun of a make-group cut after its
    record writes no second one)."""
    from survivor.jobdir.moves import moves, record_move
    from survivor.jobdir.storage import open_storage

    if choice.new_template is not None and compute.get_template(choice.new_template["name"]) is None:
        compute.insert_template(choice.new_template)
    if choice.move is None:
        return
    storage = open_storage(choice.job_dir)
    recorded, record = moves(storage), choice.move
    last = recorded[-1] if recorded else None
    if last is None or (last.to_place, last.shape, last.by) != (record.to_place, record.shape, record.by):
        record_move(storage, record)


@dataclass(frozen=True)
class GroupOutcome:
    """What make_group did: `done` is "created" or "already exists"; `state` is "running", "stopped"
    (an existing group at target size 0) or "not waited for"; `zone` where the VM runs."""

    done: str
    state: str
    zone: str | None = None


def refusals(
    compute: Compute, group: GroupRef, template: str, *, one_place: bool = True, say: Say = silent
) -> dict | None:
    """What make-group refuses before it makes anything, read and never written (its dry run asks
    the same): RequestError for a group of the name with another template, and, for a new group
    (`one_place`), a group of the name elsewhere or another group of the template's job. Returns
    the group found (None: a new one)."""
    found = compute.get_group(group)
    if found is not None:
        current = (found.get("instanceTemplate") or "").rsplit("/", 1)[-1]
        if current != template:
            flag = JobAddress(group.name, group.project, group.zone, group.region).flag
            raise RequestError(
                f"group {group.name}: already exists with template {current}, not {template}; "
                f"delete it first (`survivor delete {group.name} {flag} --template {current}`) "
                "or use another name"
            )
        return found
    if not one_place:
        return None
    try:
        bodies = compute.list_groups()
    except PermissionDenied as exc:  # a role that may create groups but not list them
        say(f"warning: group {group.name}: not checked for a group of this name elsewhere ({exc})")
        bodies = []
    others = groups_elsewhere(group, [ref for ref, _ in bodies])
    if others:
        raise RequestError(elsewhere_refusal(group, others))
    same_job = groups_of_job(group, template, bodies)
    if same_job:
        there = _address_of(min(same_job, key=_place_key))
        raise RequestError(
            f"group {group.name}: template {template}'s job already has group "
            f"{there.name} in {there.place}, and a job has one group (a second would be billed "
            f"while the first holds the job dir's lease): use `{there.name} {there.flag}`, or "
            f"delete it first (`survivor delete {there.name} {there.flag}`)"
        )
    return None


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
    found = refusals(compute, group, options.template, one_place=options.one_place, say=say)
    done = "created"
    template = None
    if found is not None:
        if not found.get("targetSize"):
            return GroupOutcome("already exists", "stopped")
        done = "already exists"
    else:
        template = compute.get_template(options.template)
        if template is None:
            raise RequestError(missing_template(options.template))
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
