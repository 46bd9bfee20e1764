"""A job on Compute Engine: its instance template, its single-VM managed instance group, its status.

    >>> connect = lambda project: Compute(project)
    >>> spec, body = make_template(TemplateRequest("cifar10", "job.yaml", zone="us-west1-b"), connect)
    >>> group = JobAddress("cifar10", zone="us-west1-b").group()
    >>> made = make_group(connect(group.project), group, GroupOptions(template="cifar10"))
    >>> made.state, made.zone                                   # ("running", "us-west1-b")
    >>> stop(connect(group.project), JobAddress("cifar10", zone="us-west1-b"))   # the agent saves first

The recipe's `gcloud compute instance-templates create`, `instance-groups managed create` and
`instances stop/start`, by job name: a job NAME has a template NAME and a single-instance MIG NAME
(zonal with a zone, regional with a region). Every function takes typed options, never the command
line's arguments. What cannot be done as asked raises `RequestError` (a `ComputeError`): one sentence
that says what to do; a job spec or template request that contradicts itself raises `SpecError`.
Lines meant for the operator along the way go through a `say` callback.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from survivor import log as logs
from survivor.cloud import machines
from survivor.operator import image, preflight
from survivor.policy.deadline import (
    FLEX_START,
    FLEX_START_MAX_RUN_HOURS,
    ON_DEMAND,
    SPOT,
    flex_start_failure,
    flex_start_queue,
)
from survivor.cloud.compute import (
    BASE_INSTANCE_NAME_MAX,
    Compute,
    ComputeError,
    GroupRef,
    InUse,
    PermissionDenied,
    distribution_policy,
    explain_operation_errors,
    find_project,
    group_creation,
    location_problems,
    name_problems,
    spec_project,
    PROJECT_HINT,
)
from survivor.cloud.template import (
    DLVM_PROJECT,
    IMAGE_FAMILY_PREFIX,
    STATE_DISK_DEVICE,
    STATE_DISK_LABEL,
    Install,
    MachineOptions,
    body_differences,
    deadline_warning,
    named_differences,
    parse_gpu,
    shape_options,
    template_body,
)
from survivor.jobdir import claims
from survivor.jobdir.storage import JobStorage, StorageError
from survivor.jobdir.switches import Switch, SwitchFailure, parse_time, record_switch, record_switch_failure, switches
from survivor.spec import FallbackSpec, JobSpec, SpecError
from survivor.places import region_of_zone

log = logs.get("group")

#: A callback that shows the operator one line.
Say = Callable[[str], None]
#: Opens Compute Engine for a project (the command line passes one that reports progress).
Connect = Callable[[str], Compute]


def _silent(line: str) -> None:
    """Says nothing: the default `say`."""


class RequestError(ComputeError):
    """What the operator asked of a job's group cannot be done as asked: one sentence with the fix.

    A name Compute Engine refuses, a zone that is a region, an instance without its zone, a group that
    exists with another template, a VM that does not come up.
    """


class PreflightFailed(Exception):
    """Preflight found a problem that blocks creating the template or group: nothing was created."""

    def __init__(self) -> None:
        super().__init__("preflight failed: nothing was created (--skip-preflight to go ahead anyway)")


@dataclass(frozen=True)
class JobAddress:
    """Where a job's group is: its name, project (default from the environment), zone or region.

    `instance` names a standalone VM instead of the group (it needs its zone).
    """

    name: str | None
    project: str | None = None
    zone: str | None = None
    region: str | None = None
    instance: str | None = None

    @property
    def flag(self) -> str:
        """The flag that names the group, for the next command a message suggests: `--zone Z` or `--region R`."""
        return f"--zone {self.zone}" if self.zone else f"--region {self.region}"

    @property
    def place(self) -> str:
        """`zone Z` or `region R`, for the sentences that report on the group."""
        return f"zone {self.zone}" if self.zone else f"region {self.region}"

    def resolved_project(self) -> str:
        """The project; RequestError when neither given nor set in the environment."""
        project = find_project(self.project)
        if not project:
            raise RequestError(PROJECT_HINT)
        return project

    def group(self) -> GroupRef:
        """The job's group; RequestError unless exactly one of zone and region is given, and well formed."""
        project = self.resolved_project()
        if bool(self.zone) == bool(self.region):
            raise RequestError("zone/region: give exactly one of --zone (zonal MIG) or --region (regional MIG)")
        problems = location_problems(self.zone, self.region)
        if problems:
            raise RequestError(problems[0])
        return GroupRef(project, self.name or "", zone=self.zone, region=self.region)

    def instance_zone(self) -> str:
        """The zone of the standalone instance (`instance`): `zone`, which must be a zone."""
        problems = ([] if self.zone else [f"--instance {self.instance}: give its --zone too"]) + location_problems(
            self.zone, None, regional=False
        )
        if problems:
            raise RequestError(problems[0])
        return self.zone or ""


# -- the template --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TemplateRequest:
    """An instance template for a job spec: the spec file and what overrides its `compute:` section.

    None means "as the spec says" for every field; `gpu` is `TYPE:COUNT` or `none`.
    """

    name: str
    config: str
    project: str | None = None
    machine_type: str | None = None
    gpu: str | None = None
    spot: bool | None = None
    image_family: str | None = None
    image_project: str | None = None
    disk_gb: int | None = None
    service_account: str | None = None
    cloud_platform_scope: bool = False
    zone: str | None = None
    region: str | None = None
    preemption_notice: int | None = None
    survivor_wheel: str | None = None
    external_ip: bool | None = None  # None: the spec's compute.external_ip (default true)
    #: what a VM installs at boot: "image" (survivor's image for this install, built once when missing:
    #: a recreated VM installs nothing) or "wheel" (the wheel and lock staged in the bucket, installed
    #: on every fresh boot disk: ~3.5 GB from the package index each time)
    install: str = "image"

    def where(self, spec: JobSpec) -> tuple[str | None, str | None]:
        """(zone, region): as requested, else the spec's compute.zone and compute.region."""
        section = spec.extra.get("compute", {})
        return self.zone or section.get("zone"), self.region or section.get("region")


#: make-template's choice of what the VM boots: (spec, options) -> the Install its startup script runs.
BootChoice = Callable[[JobSpec, MachineOptions], "Install | None"]


def describe_template(request: TemplateRequest, boot: BootChoice | None = None) -> tuple[JobSpec, dict]:
    """The job spec and the template body a request describes; SpecError when it contradicts itself.

    `boot` chooses what the VM boots (survivor's image, or the wheel staged in the bucket); it runs only
    once the request is known to be sound.
    """
    problems = name_problems("template", request.name) + location_problems(request.zone, request.region)
    if problems:
        raise SpecError(problems)
    spec = JobSpec.from_file(request.config)
    gpu_type = gpu_count = None
    if request.gpu:
        gpu_type, gpu_count = parse_gpu(request.gpu)
    options = MachineOptions.from_spec(
        spec,
        project=request.project,
        machine_type=request.machine_type,
        gpu_type=gpu_type,
        gpu_count=gpu_count,
        spot=request.spot,
        image_family=request.image_family,
        image_project=request.image_project,
        disk_gb=request.disk_gb,
        service_account=request.service_account,
        zone=request.zone,
        region=request.region,
        preemption_notice=request.preemption_notice,
        survivor_wheel=request.survivor_wheel,
        cloud_platform_scope=True if request.cloud_platform_scope else None,
        external_ip=request.external_ip,
    )
    if request.gpu and gpu_type is None:  # `none`: from_spec reads None as "unset"
        options.gpu_type, options.gpu_count = None, 0
    if not (request.zone or request.region):  # the spec's own compute.zone / compute.region
        problems = location_problems(options.zone, options.region, keys=("compute.zone", "compute.region"))
        if problems:
            raise SpecError(problems)
    problems = template_name_problems(request.name, spec)
    if problems:
        raise SpecError(problems)
    template_body(request.name, spec, options)  # a contradictory request is refused before anything is built
    install = boot(spec, options) if boot else None
    return spec, template_body(request.name, spec, options, install=install)


def boot_choice(request: TemplateRequest, compute: Compute | None, say: Say = _silent) -> BootChoice:
    """What a template's VM boots: survivor's image for this wheel and lock (built once when its family
    has none, unless the request asks for the wheel path), so that a VM a MIG recreates with a fresh
    boot disk installs nothing; or, with `install="wheel"`, the wheel and lock staged in the job's
    bucket, which every fresh boot disk installs again. An explicit image family is booted as given.

    `compute` None (a dry run): what would be booted or staged, without building or uploading.
    """

    def choose(spec: JobSpec, options: MachineOptions) -> Install | None:
        if not spec.job_dir.startswith("gs://"):
            say(
                f"warning: job_dir {spec.job_dir} is not on Cloud Storage: a VM can reach neither it nor survivor's "
                "wheel, so the template installs nothing (fine for the local stand-ins only)"
            )
            return None
        try:
            local = image.local_install(options.survivor_wheel, options.requirements)
            compute_section = spec.extra.get("compute") or {}
            if (
                request.image_family
                or request.image_project
                or compute_section.get("image_family")
                or compute_section.get("image_project")
            ):
                # an image family the operator chose, by flag or in the spec (compute.image_family), is
                # booted as given with the wheel staged: survivor's image is built on the default base
                # only (the spec's value is honoured: a family the spec names is never replaced by survivor's)
                return image.install_for(spec.job_dir, local) if compute is None else _staged(spec, local)
            family = image.family_name(
                image.install_for(spec.job_dir, local), image.tensorflow_version(local.lock), image.base_family(options)
            )
            if compute is not None and compute.image_from_family(compute.project, family) is not None:
                options.image_project, options.image_family = compute.project, family
                say(f"  image family {family}: survivor's image for this wheel and lock; boots install nothing")
                return None
            if request.install == "wheel":
                say(
                    "  the wheel path (--install wheel): every fresh boot disk, so every VM a MIG recreates, "
                    "installs the wheel and lock again (~3.5 GB from the package index, minutes)"
                )
                return image.install_for(spec.job_dir, local) if compute is None else _staged(spec, local)
            if compute is None:
                try:
                    project = spec_project(request.project, spec)
                except SpecError:  # a dry run needs no project; the image's family lives in one
                    say(f"  no project given: the body shows the wheel path; with one it boots image family {family}")
                    return image.install_for(spec.job_dir, local)
                options.image_project, options.image_family = project, family
                say(
                    f"  image family {family}: survivor's image for this wheel and lock (make-template builds it "
                    "if it is missing; --install wheel stages the wheel instead)"
                )
                return None
            _build_image(compute, spec, options, local, family, builder_zone(request, spec, options, compute), say)
            options.image_project, options.image_family = compute.project, family
            return None
        except image.ImageError as exc:
            raise SpecError([str(exc)]) from None

    def _staged(spec: JobSpec, local: image.LocalInstall) -> Install:
        installed = image.stage_install(spec.job_dir, local)
        say(f"  staged {installed.wheel} and {installed.lock}")
        return installed

    return choose


#: The builder VM of an image make-template builds, its list price (survivor/cloud/pricing.py's
#: offline table) and how long a build takes on Google Cloud: a Deep Learning VM's boot and the
#: lock's pip install from the package index (3.5 GB), then the image from its disk.
BUILDER_MACHINE = "n1-standard-8"
BUILDER_USD_PER_HOUR = 0.38
BUILDER_MINUTES = (10, 20)


def build_notice(family: str, zone: str) -> str:
    """What make-template says before it builds survivor's image: the cost and the time, once."""
    low, high = BUILDER_MINUTES
    return (
        f"  image family {family} has no image yet: building survivor's image once, now, so that every VM "
        f"the group recreates installs nothing. A {BUILDER_MACHINE} builder in {zone} for about {low}-{high} "
        f"minutes (about ${BUILDER_USD_PER_HOUR * high / 60:.2f} at ${BUILDER_USD_PER_HOUR}/h list price), then "
        "the image's storage, billed by its size per month "
        "(https://cloud.google.com/compute/disks-image-pricing). "
        "Ctrl-C to stop; --install wheel skips it (every fresh boot disk then installs ~3.5 GB again)."
    )


def builder_zone(request: TemplateRequest, spec: JobSpec, options: MachineOptions, compute: Compute) -> str:
    """Where make-template's builder runs: the template's zone, else the first zone of its region
    (an image is global, so any zone will do; the job's keeps its traffic regional)."""
    zone, region = request.where(spec)
    if zone:
        return zone
    region = region or options.region
    if region:
        zones = compute.region(region)["zones"]
        if zones:
            return sorted(zones)[0]
    raise SpecError(
        [
            "make-template builds survivor's image in the job's zone or region: give --zone or --region "
            "(or compute.zone / compute.region in the spec), or --install wheel"
        ]
    )


def _build_image(
    compute: Compute,
    spec: JobSpec,
    options: MachineOptions,
    local: "image.LocalInstall",
    family: str,
    zone: str,
    say: Say,
) -> None:
    """Builds survivor's image for this install (image.make_image), saying its cost and time first."""
    say(build_notice(family, zone))
    if (
        not options.external_ip
    ):  # the builder follows the job's choice (an organisation may forbid external IPs): say its route first
        for finding in preflight.package_route(compute, options.network, region_of_zone(zone)):
            say(f"  {finding}")
    install = image.stage_install(spec.job_dir, local)
    image.make_image(
        compute,
        install,
        family,
        zone=zone,
        progress=lambda line: say(f"  {line}"),
        machine_type=BUILDER_MACHINE,
        service_account=options.service_account,
        base=image.base_family(options),
        external_ip=options.external_ip,
        network=options.network,
    )


def check_preflight(body: dict, compute: Compute, zone: str | None, region: str | None, say: Say = _silent) -> None:
    """Runs preflight's checks on a template body, saying each warning and error; PreflightFailed when one blocks."""
    findings = [f for f in preflight.check(body, compute, zone=zone, region=region) if f.level != "ok"]
    if not preflight.report(findings, say):
        raise PreflightFailed()


@dataclass(frozen=True)
class TemplateOutcome:
    """What make_template did: `state` is "dry-run", "unchanged" or "created"; `body` the template."""

    state: str
    body: dict
    project: str | None = None


def make_template(
    request: TemplateRequest, connect: Connect | None, *, skip_preflight: bool = False, say: Say = _silent
) -> TemplateOutcome:
    """Creates the job's instance template (`connect` None: a dry run, nothing is called).

    Preflight runs first, on the body as it stands before the boot choice, so nothing is staged or
    created for a job that cannot run. A template of that name with the same body is "unchanged"; one
    with another body is refused (RequestError): templates cannot be changed.
    """
    spec = JobSpec.from_file(request.config)
    late = deadline_warning(spec, _dt.datetime.now(_dt.timezone.utc))
    if late:
        say(late)
    if connect is None:
        _, body = describe_template(request, boot=boot_choice(request, None, say))
        return TemplateOutcome("dry-run", body)
    project = spec_project(request.project, spec)
    compute = connect(project)
    if not skip_preflight:
        _, draft = describe_template(request)
        check_preflight(draft, compute, request.zone, request.region, say)
    _, body = describe_template(request, boot=boot_choice(request, compute, say))
    # What would be sent, normalised through the request message (unknown fields fail here).
    wanted = json.loads(compute.v1.InstanceTemplate.to_json(compute.template_message(body)))
    existing = compute.get_template(request.name)
    if existing is None:
        compute.insert_template(body)
        return TemplateOutcome("created", body, project)
    keys = ("name", "description", "properties")
    differences = body_differences(
        {k: existing.get(k) for k in keys}, {k: wanted.get(k) for k in keys}, project=project
    )
    if not differences:
        return TemplateOutcome("unchanged", body, project)
    named = named_differences(differences, wanted)
    why = (
        " -- survivor's wheel changed (another checkout or version)"
        if set(named) <= {"metadata survivor-wheel", "metadata survivor-wheel-sha256"}
        else ""
    )
    raise RequestError(
        f"template {request.name} already exists with a different body (differs in: {', '.join(named[:6])}){why}. "
        f"Templates cannot be changed: use a new name (e.g. {request.name}-v2) and point the group at it, or "
        f"run `survivor delete {request.name} --zone ZONE` (or --region) first (the job dir is never touched)."
    )


def preflight_findings(request: TemplateRequest, connect: Connect) -> list[preflight.Finding]:
    """Every preflight check for the template a request describes (bucket, IAM, image, GPU offer, quota)."""
    spec, body = describe_template(request)
    project = spec_project(request.project, spec)
    zone, region = request.where(spec)
    findings = preflight.check(body, connect(project), zone=zone, region=region)
    if not (zone or region):
        findings.append(preflight.Finding("gpu", "no --zone or --region: GPU offer and quota not checked", "warning"))
    return findings


# -- the group -----------------------------------------------------------------------------------


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
    target = preflight.target_from_body(template)
    zones = compute.region(region)["zones"]
    if not target.gpu_type:
        return zones
    return [z for z in zones if compute.zone_accelerators(z).get(target.gpu_type, 0) >= target.gpu_count]


def wait_for_group(
    compute: Compute, group: GroupRef, wait_seconds: float, poll_seconds: float, progress: Say = _silent
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
class GroupOutcome:
    """What make_group did: `done` is "created" or "already exists"; `state` is "running", "stopped"
    (an existing group at target size 0) or "not waited for"; `zone` where the VM runs."""

    done: str
    state: str
    zone: str | None = None


def make_group(
    compute: Compute, group: GroupRef, options: GroupOptions, *, say: Say = _silent, progress: Say = _silent
) -> GroupOutcome:
    """Creates the job's single-VM group, then waits until its VM runs or the group reports why it cannot.

    A MIG's insert succeeds even when no VM will ever start (a stockout or a quota shows in the
    group's errors, not in the insert), hence the wait. A rerun finds the group and reports on its VM.
    Raises RequestError for a group with another template, a group of the name in another zone or
    region (`options.one_place`), a missing template, a region without the GPU, and a VM that is not
    RUNNING in time; ComputeError (the fix in one sentence) for a VM that
    cannot be created; PreflightFailed when a check blocks. `say` gets preflight's findings,
    `progress` the wait.
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
        if not options.skip_preflight:
            check_preflight(template, compute, group.zone, group.region, say)
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


def stop(compute: Compute, job: JobAddress) -> None:
    """Stops the job gracefully: its group resized to 0 (or its standalone instance stopped).

    Compute Engine soft-offs the VM and the agent saves and commits before it goes.
    """
    if job.instance:
        compute.stop_instance(compute.project, job.instance_zone(), job.instance)
    else:
        compute.resize_group(job.group(), 0)


def start(compute: Compute, job: JobAddress) -> None:
    """Starts the job again: its group resized to 1 (or its standalone instance started)."""
    if job.instance:
        compute.start_instance(job.instance_zone(), job.instance)
    else:
        compute.resize_group(job.group(), 1)


def delete(compute: Compute, group: GroupRef, template: str | None = None, say: Say = _silent) -> None:
    """Deletes the job's group, then its template (the group's, else `template`, else the job's name).

    Never the job dir. Says one line for each thing deleted or not found. A template another group
    still uses is kept: Compute Engine refuses to delete it (400 resourceInUseByAnotherResource,
    naming one user), and RequestError names every group that uses it and how to delete each.
    """
    found = compute.get_group(group)
    template = template or ((found or {}).get("instanceTemplate") or "").rsplit("/", 1)[-1] or group.name
    body = compute.get_template(template)
    spec = spec_of(template_body_of_base(compute, body)) if body is not None else None
    if found is not None:
        compute.delete_group(group)
        say(f"group {group.name}: deleted")
    else:
        say(f"group {group.name}: not found (nothing to delete)")
    if spec is None or spec.state_disk_gb:  # its VMs' state disks outlive them (autoDelete NEVER)
        delete_state_disks(compute, spec.name if spec else group.name, spec.job_dir if spec else None, say)
    if body is not None:
        try:
            compute.delete_template(template)
        except InUse as refused:
            try:
                users = [
                    ref
                    for ref, body in compute.list_groups()
                    if (body.get("instanceTemplate") or "").rsplit("/", 1)[-1] == template
                ]
            except PermissionDenied:
                users = []
            if not users:  # not a group, gone since, or not listable: the API's own words name one user
                raise refused from None
            raise RequestError(in_use_refusal(template, users)) from None
        say(f"template {template}: deleted")


def state_disks_left(compute: Compute, job: str, job_dir: str | None) -> dict[str, Any]:
    """`status`'s and `report`'s view of the job's state disks: {"state_disks": [...]} (each with its
    monthly cost and why it is still there), {"state_disks_error": ...} when they cannot be listed,
    or nothing when the job has none."""
    from survivor.jobdir.storage import open_storage
    from survivor.operator import state_disks

    try:
        storage = open_storage(job_dir) if job_dir else None
    except Exception:  # the job dir's own errors are status's to show; the disks are listed without it
        storage = None
    try:
        found = state_disks.left(compute, job, storage)
    except ComputeError as exc:
        return {"state_disks_error": str(exc)}
    if not found:
        return {}
    return {
        "state_disks": [{**disk.to_json(), "line": state_disks.line(disk, reason)} for disk, reason in found],
        "state_disks_monthly_usd": state_disks.total_monthly([disk for disk, _ in found]),
    }


def template_body_of_base(compute: Compute, body: dict) -> dict:
    """The job's Spot template (the spec's source) for any of its templates (`-on-demand`,
    `-flex-start`, a shape's): the body given when that one is gone or is the base itself."""
    base, _ = template_mode(str(body.get("name") or ""))
    return body if base == body.get("name") else (compute.get_template(base) or body)


def delete_state_disks(compute: Compute, job: str, job_dir: str | None, say: Say = _silent) -> None:
    """`survivor delete`'s last step for a job with state disks: each disk nothing waits on deleted,
    each kept said with why and what it costs a month (survivor/operator/state_disks.py). A job dir
    that cannot be opened keeps them all; disks that cannot be listed are said, not fatal."""
    from survivor.jobdir.storage import open_storage
    from survivor.operator import state_disks

    storage = None
    if job_dir:
        try:
            storage = open_storage(job_dir)
        except Exception as exc:  # a bucket that cannot be reached: every disk is kept
            log.warning("the job dir could not be opened; its state disks are kept", job_dir=job_dir, error=str(exc))
    try:
        state_disks.clean(compute, job, storage, say=say)
    except ComputeError as exc:
        say(
            f"job {job}: its state disks (label {STATE_DISK_LABEL}={job}) could not be listed ({exc}); list them "
            f"with `gcloud compute disks list --filter=labels.{STATE_DISK_LABEL}={job}`"
        )


def serial_source(compute: Compute, job: JobAddress) -> tuple[str, str]:
    """(zone, name) of the VM whose serial port shows the job: the standalone instance, or the group's VM.

    RequestError when the group has no VM, or its VM is not created yet (it has no serial port).
    """
    if job.instance:
        return job.instance_zone(), job.instance
    members = compute.managed_instances(job.group())
    if not members:
        raise RequestError(f"group {job.name} has no instance right now (stopped or finished)")
    zone, name = members[0]["zone"], members[0]["name"]
    if not members[0]["status"]:
        errors = "; ".join(f"{code}: {message}" for code, message in members[0]["errors"])
        raise RequestError(
            f"group {job.name}: its VM {name} is not created yet, so it has no serial port"
            + (f" (the group's last attempt: {errors})" if errors else "")
            + f"; `survivor status {job.name} {job.flag}` follows it"
        )
    return zone, name


def serial_output(
    compute: Compute, zone: str, name: str, *, follow: bool = False, interval: float = 5.0
) -> Iterator[str]:
    """The VM's serial port output (the startup script and the agent's journal), chunk by chunk.

    With `follow`, keeps reading every `interval` seconds until the caller stops.
    """
    offset = 0
    while True:
        text, offset = compute.serial_output(zone, name, offset)
        yield text
        if not follow:
            return
        time.sleep(interval)


# -- status --------------------------------------------------------------------------------------


def _template_machine(template: dict) -> dict[str, Any]:
    """The machine a template asks for: type, GPUs (a2/a3/g2 carry theirs without guestAccelerators), Spot."""
    props = template["properties"]
    accel = (props.get("guestAccelerators") or [{}])[0]
    gpu_type, gpu_count = machines.gpus_of(
        props.get("machineType") or "", accel.get("acceleratorType"), int(accel.get("acceleratorCount") or 0)
    )
    return {
        "machine_type": props.get("machineType"),
        "gpu_type": gpu_type,
        "gpu_count": gpu_count,
        "spot": props.get("scheduling", {}).get("provisioningModel") == "SPOT",
    }


def _report_options(
    machine: dict | None,
    group: GroupRef,
    spec: JobSpec | None,
    spot_price: float | None,
    on_demand_price: float | None,
    created: str | None = None,
    fallback: dict | None = None,
):
    """How `status` prices the job's report (survivor/operator/report.py): from cached catalog prices
    (status never waits on the catalog: `survivor report` fetches and caches them)."""
    from survivor.cloud.catalog import Machine
    from survivor.policy.cost import ReportOptions

    return ReportOptions(
        machine=Machine(machine["machine_type"], machine["gpu_type"], machine["gpu_count"]) if machine else None,
        fallback=Machine(fallback["machine_type"], fallback["gpu_type"], fallback["gpu_count"]) if fallback else None,
        region=group.region or region_of_zone(group.zone or ""),
        train_steps=spec.train_steps if spec else None,
        spot_price=spot_price,
        on_demand_price=on_demand_price,
        online=False,
        created=parse_time(created),
    )


def job_status(
    compute: Compute,
    group: GroupRef,
    job_dir: str | None = None,
    *,
    spot_price: float | None = None,
    on_demand_price: float | None = None,
    read_job_dir: bool = True,
) -> dict[str, Any]:
    """Everything `survivor status` shows: the group, its instance, the job dir's story, and its
    goodput and cost by the goodput ledger, priced as `survivor report` prices (the USD-per-hour
    prices given, else cached catalog prices, else the offline table). The job dir defaults to the
    one in the template's job spec; it is read once (`read_job`), for the story and the price alike.
    `read_job_dir=False`: the group and its machine only (what `survivor report` needs to price)."""
    from survivor.jobdir.status import job_summary, read_job
    from survivor.operator import report
    from survivor.policy.cost import cost_summary, status_line

    out: dict[str, Any] = {"name": group.name, "project": group.project, "zone": group.zone, "region": group.region}
    found = compute.get_group(group)
    spec = None
    if found is None:
        out["group"] = None
    else:
        out["group"] = {
            "target_size": found.get("targetSize"),
            "template": (found.get("instanceTemplate") or "").rsplit("/", 1)[-1],
            "created": found.get("creationTimestamp"),
        }
        instances = compute.managed_instances(group)
        for instance in instances:
            instance["guest"] = compute.guest_attributes(instance["zone"], instance["name"]) if instance["zone"] else {}
        out["instances"] = instances
        current = out["group"]["template"]
        template = compute.get_template(current) if current else None
        base, mode = template_mode(current)
        if mode == FLEX_START:  # its VM comes from a resize request: where that stands
            requests = compute.resize_requests_of(group)
            out["resize_request"] = flex_start_failure(requests) or flex_start_queue(
                requests, _dt.datetime.now(_dt.timezone.utc)
            )
        if template and base != current:  # after a deadline's switch: price the Spot machine
            template = compute.get_template(base) or template
        if template:
            spec = spec_of(template)
            out["machine"] = _template_machine(template)
            if spec and spec.fallback and (spec.fallback.machine_type or spec.fallback.gpu):
                fallback = _template_machine(on_demand_template_body(template, spec.fallback))
                if (fallback["machine_type"], fallback["gpu_type"], fallback["gpu_count"]) != (
                    out["machine"]["machine_type"],
                    out["machine"]["gpu_type"],
                    out["machine"]["gpu_count"],
                ):
                    out["fallback_machine"] = fallback
    job_dir = job_dir or (spec.job_dir if spec else None)
    out["job_dir"] = job_dir
    out["train_steps"] = spec.train_steps if spec else None
    if spec is None or spec.state_disk_gb:  # what is left of its state disks, and what it costs a month
        out.update(state_disks_left(compute, spec.name if spec else group.name, job_dir))
    if job_dir and read_job_dir:
        options = _report_options(
            out.get("machine"),
            group,
            spec,
            spot_price,
            on_demand_price,
            (out.get("group") or {}).get("created"),
            out.get("fallback_machine"),
        )
        view = read_job(job_dir, train_steps=options.train_steps, created=options.created)
        summary = job_summary(view)
        out["job"] = summary
        if spec:
            summary["train_steps"] = spec.train_steps
        made = report.build_report(view, options)
        out["cost"] = cost_summary(made)
        out["goodput_line"] = status_line(made)
    return out


# -- the deadline's switch between Spot and on-demand ---------------------------------------------

#: The on-demand template of a job is its Spot template's name with this suffix.
ON_DEMAND_SUFFIX = "-on-demand"
#: The flex-start template of a job (docs/flex-start.md): the Spot template's name with this suffix.
FLEX_START_SUFFIX = "-flex-start"
#: Each mode's template suffix; Spot's is the template itself.
SUFFIXES = {ON_DEMAND: ON_DEMAND_SUFFIX, FLEX_START: FLEX_START_SUFFIX}


def template_mode(name: str) -> tuple[str, str]:
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


# -- the job's other machine shapes (placement.shapes) ----------------------------------------------


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


#: What a group needs for a resize request (docs/flex-start.md F11, F13): repairs off ("you must not
#: configure autoscaling and must turn off repairs", about-resize-requests-mig), and a regional
#: group's VMs in one zone (the regional example: targetShape ANY_SINGLE_ZONE, redistribution NONE).
FLEX_START_GROUP = {"instanceLifecyclePolicy": {"defaultActionOnFailure": "DO_NOTHING"}}
FLEX_START_REGIONAL = {
    "distributionPolicy": {"targetShape": "ANY_SINGLE_ZONE"},
    "updatePolicy": {"instanceRedistributionType": "NONE"},
}
#: What a group on Spot or on-demand has again: repairs (a preempted VM recreated), and a regional
#: group's shape ANY (compute.distribution_policy).
REPAIRING_GROUP = {"instanceLifecyclePolicy": {"defaultActionOnFailure": "REPAIR"}}
REPAIRING_REGIONAL = {"distributionPolicy": {"targetShape": "ANY"}}
#: How long a switch to flex-start waits for its resize request to be accepted before it lets the
#: Spot VM go (the next look finishes it: `settle_flex_start`), and how often it looks.
ACCEPT_WAIT_SECONDS = 60.0
ACCEPT_POLL_SECONDS = 2.0
#: The shortest run duration a resize request may ask for (F5: 10 minutes).
FLEX_START_MIN_RUN_SECONDS = 600


class FlexStartRefused(ComputeError):
    """Compute Engine refused the resize request (or it failed at once): no flex-start VM will come."""


def flex_start_run_seconds(run_hours: float | None) -> int:
    """Pure: a resize request's `requestedRunDuration` for `run_hours` of remaining work plus margin
    (the deadline's `Decision.run_hours`), rounded up to whole minutes and held to F5's 10 minutes to
    7 days; 7 days when the work is not known. Billing ends when the agent finishes either way; a
    run sized to the work is what Dynamic Workload Scheduler plans its capacity with."""
    if run_hours is None:
        return int(FLEX_START_MAX_RUN_HOURS * 3600)
    seconds = math.ceil(run_hours * 60) * 60
    return max(FLEX_START_MIN_RUN_SECONDS, min(int(FLEX_START_MAX_RUN_HOURS * 3600), seconds))


def _mode_patch(group: GroupRef, to_flex: bool) -> dict:
    if to_flex:
        return {**FLEX_START_GROUP, **(FLEX_START_REGIONAL if group.region else {})}
    return {**REPAIRING_GROUP, **(REPAIRING_REGIONAL if group.region else {})}


def spec_of(template: dict) -> JobSpec | None:
    """The job spec a template carries in its `survivor-job` metadata (None: it carries none)."""
    items = {i["key"]: i["value"] for i in template["properties"].get("metadata", {}).get("items", [])}
    return JobSpec.from_yaml(items["survivor-job"]) if "survivor-job" in items else None


def switch_group(
    compute: Compute,
    group: GroupRef,
    to_mode: str,
    reason: str,
    *,
    by: str,
    storage: JobStorage | None = None,
    say: Say = _silent,
    seen: str | None = None,
    run_hours: float | None = None,
) -> Switch | None:
    """Switches the job's group to its Spot, on-demand or flex-start template; None when it runs that
    one already, or when another look claimed the job first: with `seen` (`claims.what_was_seen`, read
    before the records the decision came from) the switch is claimed in the job dir before anything
    changes, so two looks at once that decided it switch once (survivor/jobdir/claims.py).

    Makes the on-demand or flex-start template from the Spot one the first time
    (`on_demand_template_body`, `flex_start_template_body`, with the spec's `fallback:`), points the
    group at it (`setInstanceTemplate`), records the switch with its reason in the job dir (`storage`),
    then recreates the group's VM from it (`recreateInstances`: the old VM is stopped gracefully, so
    its agent commits first). Flex-start VMs come from a resize request instead (docs/flex-start.md,
    `_to_flex_start`): repairs off, the request (for `run_hours` of work and margin,
    `flex_start_run_seconds`) accepted first, and only then the Spot VM let go; a request Compute
    Engine refuses sends the job on-demand in the same call, so the job is never left with neither
    a VM nor a request. Leaving flex-start cancels a request still queued, turns repairs back on and
    sets the group's size back to one. RequestError for a missing group.
    """
    try:
        try:
            return _switch_group(
                compute, group, to_mode, reason, by=by, storage=storage, say=say, seen=seen, run_hours=run_hours
            )
        except FlexStartRefused as refused:
            _record_failure(storage, to_mode, reason, by, refused)
            say(f"group {group.name}: flex-start refused ({refused}); on-demand instead")
            log.warning("flex-start refused: on-demand", group=group.name, error=str(refused))
            return _switch_group(
                compute, group, ON_DEMAND, f"flex-start refused ({refused}); {reason}", by=by, storage=storage, say=say
            )
    except ComputeError as exc:  # shown by status and report, not only in a log nobody reads
        _record_failure(storage, to_mode, reason, by, exc)
        raise


def _record_failure(storage: JobStorage | None, to_mode: str, reason: str, by: str, exc: Exception) -> None:
    if storage is None:
        return
    failure = SwitchFailure(
        time=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds"),
        to_mode=to_mode,
        reason=reason,
        by=by,
        error=str(exc),
    )
    try:
        record_switch_failure(storage, failure)
    except StorageError as unrecorded:
        log.warning("could not record the failed switch", error=str(unrecorded))


def _switch_group(
    compute: Compute,
    group: GroupRef,
    to_mode: str,
    reason: str,
    *,
    by: str,
    storage: JobStorage | None,
    say: Say,
    seen: str | None = None,
    run_hours: float | None = None,
) -> Switch | None:
    found = compute.get_group(group)
    if found is None:
        raise RequestError(f"group {group.name}: not found; nothing to switch")
    current = (found.get("instanceTemplate") or "").rsplit("/", 1)[-1]
    base, from_mode = template_mode(current)
    target = base + SUFFIXES.get(to_mode, "")
    if target == current:
        return None
    if seen is not None and storage is not None and not claims.claim(storage, seen, what=f"switch to {to_mode}", by=by):
        say(f"group {group.name}: another look switched or moved it first; this one leaves it")
        return None
    if to_mode != SPOT:
        problems = name_problems(f"{to_mode} template", target)
        if problems:
            raise RequestError(problems[0] + f" (shorten the Spot template's name {base!r})")
    now = _dt.datetime.now(_dt.timezone.utc)
    switch = Switch(
        time=now.isoformat(timespec="milliseconds"),
        to_mode=to_mode,
        from_mode=from_mode,
        reason=reason,
        by=by,
        template=target,
    )
    # The record first: a switch is a recorded intention that any later look completes
    # (`complete_switch`), as a move is (placement.complete_moves). Recorded after the group changed, a
    # look cut between the two left a group on-demand that the records called Spot; cut before the
    # group changed, it left the job behind its deadline on a stocked-out Spot template.
    if storage is not None:
        record_switch(storage, switch)
    try:
        _apply_switch(compute, group, switch, base=base, from_mode=from_mode, say=say, run_hours=run_hours)
    except FlexStartRefused:
        raise  # the group runs the flex-start template: switch_group goes on-demand at once
    except (ComputeError, RequestError) as exc:
        _withdraw_if_refused(compute, group, storage, switch, exc)
        raise
    log.info("group switched", group=group.name, to=to_mode, template=target, reason=reason, by=by)
    return switch


def _withdraw_if_refused(
    compute: Compute, group: GroupRef, storage: JobStorage | None, switch: Switch, exc: BaseException
) -> None:
    """A switch Compute Engine refuses (a 403, a missing template: no retry makes it) before the
    group took its template is no switch: its record goes, so status and the deadline policy never
    count it (the failure is recorded by `switch_group`). A passing error leaves the record (the
    next look completes the switch), and so does a refusal after the group took the template (a
    flex-start request refused): the record says what the group runs, and the next look acts on it."""
    from survivor import retry

    if storage is None or (isinstance(exc, ComputeError) and retry.is_transient_compute(exc)):
        return
    try:
        found = compute.get_group(group)
    except ComputeError:
        return  # cannot tell what the group runs: the record stands, the next look reads the group
    if found is not None and (found.get("instanceTemplate") or "").rsplit("/", 1)[-1] == switch.template:
        return
    try:
        storage.delete([switch.name])
    except StorageError as unrecorded:
        log.warning(
            "could not withdraw the refused switch's record; the next look tries it again",
            record=switch.name,
            error=str(unrecorded),
        )


def _apply_switch(
    compute: Compute,
    group: GroupRef,
    switch: Switch,
    *,
    base: str,
    from_mode: str,
    say: Say,
    run_hours: float | None = None,
) -> None:
    """Makes the group run `switch`'s template: the template made from the Spot one the first time,
    set on the group, then the VM recreated from it (or, for flex-start, asked for by a resize
    request). Each step may be repeated: `complete_switch` runs it again after a cut."""
    to_mode, target = switch.to_mode, switch.template
    if to_mode != SPOT and compute.get_template(target) is None:
        spot = compute.get_template(base)
        if spot is None:
            raise RequestError(f"template {base}: not found; the group's Spot template is needed to make {target}")
        spec = spec_of(spot)
        make = flex_start_template_body if to_mode == FLEX_START else on_demand_template_body
        try:
            compute.insert_template(make(spot, spec.fallback if spec else None))
            say(f"template {target}: created ({to_mode}, same shape as {base} unless fallback: says otherwise)")
        except ComputeError:
            if compute.get_template(target) is None:
                raise
            # made meanwhile (a 409: another look completing the same switch): the step is done
    if to_mode == FLEX_START:
        _to_flex_start(compute, group, target, switch.reason, run_hours=run_hours, say=say)
        return
    compute.set_group_template(group, target)
    say(f"group {group.name}: now {to_mode} (template {target}): {switch.reason}")
    if from_mode == FLEX_START:  # a queued request would still add a flex-start VM; the group keeps one VM
        for request in compute.resize_requests_of(group):
            if request.get("state") in ("CREATING", "ACCEPTED"):
                compute.cancel_resize_request(group, request["name"])
        compute.patch_group(group, _mode_patch(group, to_flex=False))  # repairs on again: Spot is preempted
        if int((compute.get_group(group) or {}).get("targetSize") or 0) == 0:
            compute.resize_group(group, 1)
    members = [(m["zone"], m["name"]) for m in compute.managed_instances(group) if m["zone"]]
    if members:
        compute.recreate_instances(group, members)


def _to_flex_start(
    compute: Compute, group: GroupRef, target: str, reason: str, *, run_hours: float | None, say: Say
) -> None:
    """The switch to flex-start, ordered so that a refusal costs nothing:

    1. repairs off (and a regional group's VMs in one zone): what a resize request needs (F11, F13);
    2. with no VM running, the group resized to none (a VM it is still trying to make would come
       from the flex-start template outside any request); a running Spot VM keeps training;
    3. the group pointed at the flex-start template (existing VMs keep theirs: setInstanceTemplate);
    4. the resize request, for `run_hours` of work and margin; refused -> FlexStartRefused, and the
       caller goes on-demand at once (the Spot VM, if any, is still there);
    5. once Compute Engine accepted it, the Spot VM let go (`settle_flex_start`).
    A request already active (a look finishing this switch) is not asked again."""
    members = compute.managed_instances(group)
    compute.patch_group(group, _mode_patch(group, to_flex=True))
    if not any(m["status"] == "RUNNING" for m in members):
        compute.resize_group(group, 0)
    compute.set_group_template(group, target)
    say(f"group {group.name}: now flex-start (template {target}): {reason}")
    active = [r for r in compute.resize_requests_of(group) if r.get("state") in ("CREATING", "ACCEPTED", "SUCCEEDED")]
    name = active[-1]["name"] if active else "survivor-" + _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d%H%M%S")
    if not active:
        seconds = flex_start_run_seconds(run_hours)
        try:
            compute.request_resize(group, name, count=1, run_seconds=seconds)
        except ComputeError as exc:
            if retry_passing(exc):
                raise  # throttled: the next look asks again (complete_switch)
            raise FlexStartRefused(str(exc)) from exc
        say(f"group {group.name}: resize request {name} for one flex-start VM for {seconds / 3600:.2f} h queued")
    deadline = time.monotonic() + ACCEPT_WAIT_SECONDS
    while True:
        request = compute.resize_request(group, name) or {}
        state = request.get("state")
        if state == "FAILED":
            errors = ((request.get("status") or {}).get("error") or {}).get("errors") or [{}]
            raise FlexStartRefused(
                f"resize request {name} FAILED: {errors[0].get('code', '')} {errors[0].get('message', '')}".strip()
            )
        if state in ("ACCEPTED", "SUCCEEDED") or time.monotonic() >= deadline:
            break
        time.sleep(ACCEPT_POLL_SECONDS)
    settle_flex_start(compute, group, say=say)


def settle_flex_start(compute: Compute, group: GroupRef, *, say: Say = _silent) -> list[str]:
    """Lets the group's VMs of another template go (`deleteInstances`: nothing recreates them, the
    target size goes down by as many) once its newest resize request was accepted (ACCEPTED or
    SUCCEEDED), so a Spot VM trains until a flex-start VM is sure to come. Returns their names."""
    requests = compute.resize_requests_of(group)
    newest = max(requests, key=lambda r: r.get("creationTimestamp") or "", default=None)
    if newest is None or newest.get("state") not in ("ACCEPTED", "SUCCEEDED"):
        return []
    found = compute.get_group(group) or {}
    current = (found.get("instanceTemplate") or "").rsplit("/", 1)[-1]
    others = [m for m in compute.managed_instances(group) if m.get("template") and m["template"] != current]
    for member in others:
        compute.leave_group(group, member["zone"], member["name"])
        say(
            f"group {group.name}: {member['name']} ({member['template']}) let go: resize request "
            f"{newest.get('name')} is {newest.get('state')}"
        )
    return [m["name"] for m in others]


def complete_switch(compute: Compute, group: GroupRef, storage: JobStorage, *, say: Say = _silent) -> Switch | None:
    """The newest recorded switch carried out, whatever cut the look that recorded it: when the
    group runs another template than the record names, it is switched to it (`_apply_switch`).
    Returns that switch, or None when the group runs the recorded template already (or nothing was
    recorded). A step Compute Engine refuses raises its ComputeError: the next look tries again."""
    recorded = switches(storage)
    found = compute.get_group(group)
    if not recorded or found is None or not recorded[-1].template:
        return None
    last = recorded[-1]
    current = (found.get("instanceTemplate") or "").rsplit("/", 1)[-1]
    base, from_mode = template_mode(current)
    if current == last.template and last.to_mode == FLEX_START:
        settle_flex_start(compute, group, say=say)  # a Spot VM kept while the request was not yet accepted
    if current == last.template or template_mode(last.template)[0] != base:
        return None  # done; or a record of another template family (a move's new shape): not this one's to redo
    say(
        f"group {group.name}: finishing the switch to {last.to_mode} recorded at {last.time} (template {last.template})"
    )
    log.warning(
        "a recorded switch not carried out: finishing it",
        group=group.name,
        to=last.to_mode,
        template=last.template,
        recorded=last.time,
    )
    try:
        _apply_switch(compute, group, last, base=base, from_mode=from_mode, say=say)
    except FlexStartRefused as refused:  # as switch_group: the refusal goes on-demand in the same look
        record_switch_failure(
            storage,
            SwitchFailure(
                time=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds"),
                to_mode=last.to_mode,
                reason=last.reason,
                by=last.by,
                error=str(refused),
            ),
        )
        return switch_group(
            compute,
            group,
            ON_DEMAND,
            f"flex-start refused ({refused}); {last.reason}",
            by=last.by,
            storage=storage,
            say=say,
        )
    except (ComputeError, RequestError) as exc:
        # never withdrawn here: the record is an earlier look's decision, and this look may only lack
        # what that one had (a permission); the failure is recorded, the next look tries again
        if not (isinstance(exc, ComputeError) and retry_passing(exc)):
            record_switch_failure(
                storage,
                SwitchFailure(
                    time=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds"),
                    to_mode=last.to_mode,
                    reason=last.reason,
                    by=last.by,
                    error=str(exc),
                ),
            )
        raise
    return last


def retry_passing(exc: ComputeError) -> bool:
    """Whether another look may get past `exc` (throttling, a server error): `retry.is_transient_compute`."""
    from survivor import retry

    return retry.is_transient_compute(exc)
