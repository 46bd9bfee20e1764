"""A job's instance template: described from its spec, checked by preflight, and made, with the boot
image it needs built first when survivor's family does not have it yet.

    >>> connect = lambda project: Compute(project)
    >>> made = make_template(TemplateRequest("cifar10", "job.yaml", machine={"zone": "us-west1-b"}), connect)
    >>> made.state                                              # "created", "unchanged" or "dry-run"

The recipe's `gcloud compute instance-templates create`, by job name: a job NAME has a template
NAME. Every function takes typed options, never the command line's arguments. What cannot be done
as asked raises `RequestError` (survivor/mig/address.py); a job spec or template request that
contradicts itself raises `SpecError`. Lines meant for the operator go through a `say` callback.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from survivor.cloud.compute import Compute, location_problems, name_problems, spec_project
from survivor.cloud.template import (
    Install,
    MachineOptions,
    body_differences,
    deadline_warning,
    named_differences,
    template_body,
)
from survivor.mig.address import RequestError, Say, silent
from survivor.mig.templates import template_name_problems
from survivor.operator import image, preflight
from survivor.places import region_of_zone
from survivor.spec import JobSpec, SpecError


#: Opens Compute Engine for a project (the command line passes one that reports progress).
Connect = Callable[[str], Compute]
#: make-template's choice of what the VM boots: (spec, options) -> the Install its startup script runs.
BootChoice = Callable[[JobSpec, MachineOptions], "Install | None"]


class PreflightFailed(Exception):
    """Preflight found a problem that blocks creating the template or group: nothing was created."""

    def __init__(self) -> None:
        super().__init__("preflight failed: nothing was created (--skip-preflight to go ahead anyway)")


@dataclass(frozen=True)
class TemplateRequest:
    """An instance template for a job spec: the spec file and what overrides its `compute:` section.

    `machine` holds the `MachineOptions` fields the request sets, by their names (`zone`,
    `machine_type`, `spot`, `disk_gb`, ...; a missing or None value means "as the spec says"), so an
    option `MachineOptions` gains reaches the template with no change here. `gpu` is `TYPE:COUNT` or
    `none`.
    """

    name: str
    config: str
    machine: Mapping[str, Any] = field(default_factory=dict)
    gpu: str | None = None
    #: what a VM installs at boot: "image" (survivor's image for this install, built once when missing:
    #: a recreated VM installs nothing) or "wheel" (the wheel and lock staged in the bucket, installed
    #: on every fresh boot disk: ~3.5 GB from the package index each time)
    install: str = "image"

    def __post_init__(self) -> None:
        unknown = sorted(set(self.machine) - MachineOptions.names())
        if unknown:
            raise SpecError(
                [
                    f"{key}: not a machine option; expected one of {', '.join(sorted(MachineOptions.names()))}"
                    for key in unknown
                ]
            )

    @property
    def project(self) -> str | None:
        """The project the request names (None: the spec's, else the environment's)."""
        return self.machine.get("project")

    @property
    def zone(self) -> str | None:
        """The zone the request names (None: the spec's compute.zone)."""
        return self.machine.get("zone")

    @property
    def region(self) -> str | None:
        """The region the request names (None: the spec's compute.region)."""
        return self.machine.get("region")

    def where(self, spec: JobSpec) -> tuple[str | None, str | None]:
        """(zone, region): as requested, else the spec's compute.zone and compute.region."""
        section = spec.extra.get("compute", {})
        return self.zone or section.get("zone"), self.region or section.get("region")


#: Flags of make-template that are not written into the spec the template carries (`with_flags`).
NOT_CARRIED = frozenset({"project", "zone", "region", "survivor_wheel"})


def with_flags(spec: JobSpec, request: TemplateRequest) -> JobSpec:
    """Pure: the spec with the request's machine flags written into its `compute:` section, so that the
    spec the template carries (`survivor-job`) says what the template is: the VM's deadline prices,
    its capacity-data requests and its shapes' templates read the machine from that section. Where the
    checks ran (`project`, `zone`, `region`: the group's place is make-group's) and a local wheel's path
    (`survivor_wheel`, nothing on the VM) stay out."""
    flagged = {k: v for k, v in request.machine.items() if v is not None and k not in NOT_CARRIED}
    if request.gpu:
        flagged["gpu"] = request.gpu
    if not flagged:
        return spec
    section = {
        k: v for k, v in (spec.extra.get("compute") or {}).items() if not ("gpu" in flagged and k.startswith("gpu"))
    }
    return dataclasses.replace(spec, extra={**spec.extra, "compute": {**section, **flagged}})


def describe_template(request: TemplateRequest, boot: BootChoice | None = None) -> tuple[JobSpec, dict]:
    """The job spec and the template body a request describes; SpecError when it contradicts itself.

    `boot` chooses what the VM boots (survivor's image, or the wheel staged in the bucket); it runs only
    once the request is known to be sound.
    """
    problems = name_problems("template", request.name) + location_problems(request.zone, request.region)
    if request.zone and request.region:  # the checks run for one place, as make-group makes one group
        problems.append(f"--zone {request.zone} and --region {request.region}: give one (as make-group takes)")
    if problems:
        raise SpecError(problems)
    spec = with_flags(JobSpec.from_file(request.config), request)
    # the machine flags are the spec's compute: section now (its `gpu` read as from a spec, `none`
    # included); only where the checks run and the local wheel are the request's alone
    options = MachineOptions.from_spec(spec, **{k: v for k, v in request.machine.items() if k in NOT_CARRIED})
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


def boot_choice(request: TemplateRequest, compute: Compute | None, say: Say = silent) -> BootChoice:
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
            if compute_section.get("image_family") or compute_section.get("image_project"):  # with its flags
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


def check_preflight(body: dict, compute: Compute, zone: str | None, region: str | None, say: Say = silent) -> None:
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
    request: TemplateRequest, connect: Connect | None, *, skip_preflight: bool = False, say: Say = silent
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
