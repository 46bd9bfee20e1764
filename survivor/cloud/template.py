"""The instance template for a job: a pure function from the job spec and machine options to the
exact REST body `instanceTemplates.insert` takes.

    >>> body = template_body("cifar10", spec, MachineOptions(gpu_type="nvidia-tesla-t4", gpu_count=4))
    >>> body["properties"]["scheduling"]["provisioningModel"]
    'SPOT'

It replaces the recipe's `tf-estimator-instance-template.sh` and `tf-estimator-set-metadata.sh`:
the job spec goes into metadata `survivor-job`, `startup/startup.sh` into `startup-script`, guest
attributes are enabled for `survivor status`, Deep Learning VM images get `install-nvidia-driver`,
and scheduling is right for GPUs (`onHostMaintenance: TERMINATE`; Spot: no automatic restart).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
from dataclasses import dataclass, field, fields
from typing import Any

from survivor import __version__

from survivor.cloud import machines
from survivor.spec import JobSpec, Shape, SpecError, dumps_json

DLVM_PROJECT = "deeplearning-platform-release"
#: A persistent disk's smallest size (https://cloud.google.com/compute/docs/disks: "10 GB to 64 TB")
MIN_DISK_GB = 10
METADATA_LIMIT = 512 * 1024
#: The device name of the job's state disk (spec `state_disk_gb`): the group keeps the disk of that
#: name across the VM's recreation (survivor/mig/make.py `stateful_policy`), and startup.sh finds
#: it at /dev/disk/by-id/google-survivor-state.
STATE_DISK_DEVICE = "survivor-state"
#: The label the state disk carries, valued with the job's name: how `survivor delete`, a move, the
#: watch, `status` and `report` find a job's state disks once no VM holds them (their names are the
#: instances', which a group chooses). The template's `initializeParams.labels` are "Labels to apply to
#: this disk" (the Compute v1 discovery document, AttachedDiskInitializeParams.labels;
#: https://cloud.google.com/python/docs/reference/compute/latest/google.cloud.compute_v1.types.AttachedDiskInitializeParams),
#: a field "persisted and returned for instanceTemplate": every disk the group creates from it carries them.
STATE_DISK_LABEL = "survivor-state"

SCOPES = {
    "storage": "https://www.googleapis.com/auth/devstorage.read_write",
    "compute": "https://www.googleapis.com/auth/compute",
    "logging": "https://www.googleapis.com/auth/logging.write",
    "monitoring": "https://www.googleapis.com/auth/monitoring.write",
    "cloud-platform": "https://www.googleapis.com/auth/cloud-platform",
}


#: The templates' default boot image family (and the base survivor's own image is built on):
#: https://cloud.google.com/deep-learning-vm/docs/images lists common-cu129-ubuntu-2404-nvidia-580
#: (Python 3.12, supported to 2028-08); common-cu128-ubuntu-2404-nvidia-570 is not in that table.
DEFAULT_IMAGE_FAMILY = "common-cu129-ubuntu-2404-nvidia-580"
#: survivor's own image families (survivor/operator/image.py family_name) start with this
IMAGE_FAMILY_PREFIX = "survivor-"


@dataclass(frozen=True)
class Install:
    """What the startup script installs: gs:// URLs and sha256 of survivor's wheel, the lock and the
    trainer's requirements, staged in the job dir by survivor/operator/image.py."""

    wheel: str
    wheel_sha256: str
    lock: str
    lock_sha256: str
    requirements: str | None = None
    requirements_sha256: str | None = None
    job_dir: str = ""

    def items(self) -> list[dict[str, str]]:
        """The metadata items startup/startup.sh reads."""
        pairs = [
            ("survivor-wheel", self.wheel),
            ("survivor-wheel-sha256", self.wheel_sha256),
            ("survivor-lock", self.lock),
            ("survivor-lock-sha256", self.lock_sha256),
            ("survivor-requirements", self.requirements),
            ("survivor-requirements-sha256", self.requirements_sha256),
            ("survivor-job-dir", self.job_dir),
        ]
        return [{"key": key, "value": value} for key, value in pairs if value]


@dataclass
class MachineOptions:
    """Where and on what the job runs. CLI flags override the spec's `compute:` section."""

    project: str | None = None
    zone: str | None = None
    region: str | None = None
    machine_type: str = "n1-standard-16"
    gpu_type: str | None = "nvidia-tesla-t4"
    gpu_count: int | None = None  # None: the spec's num_gpus, else 1
    spot: bool = True
    termination_action: str = "STOP"
    preemption_notice: int | None = None  # seconds of warning before the soft off (Spot only)
    # the Deep Learning VM family on Ubuntu 24.04 (python3 3.12; survivor/cloud/runtimes.py has the
    # sources) in Google's supported table, with CUDA 12.9 and the 580 driver that the lock's CUDA 12.9
    # wheels (TensorFlow 2.21's [and-cuda] pins) need without minor-version compatibility;
    # 22.04's Python 3.10 is past its end of life (2026-10); other families stay admitted
    # (compute.image_family) while Google boots them
    image_family: str = DEFAULT_IMAGE_FAMILY
    image_project: str = DLVM_PROJECT
    disk_gb: int = 200
    disk_type: str = machines.DEFAULT_DISK_TYPE  # A3 Ultra and A4 get hyperdisk-balanced instead
    service_account: str = "default"
    cloud_platform_scope: bool = False
    network: str = "global/networks/default"
    #: an external IP (an accessConfig) on the VM's interface; without one a VM reaches Cloud Storage
    #: through Private Google Access on its subnet and nothing else outside (the image path needs
    #: nothing else; the wheel path's pip and make-image's builder need Cloud NAT)
    external_ip: bool = True
    survivor_wheel: str | None = None  # a local survivor_train-*.whl to stage instead of building one
    requirements: str | None = None  # the trainer's pinned requirements (with --hash), baked in by make-image
    labels: dict[str, str] = field(default_factory=dict)
    gpu_explicit: bool = True  # False when the GPU is survivor's default, not the operator's choice

    @classmethod
    def names(cls) -> set[str]:
        """The options a request or the spec's `compute:` section may set, by field name."""
        return {f.name for f in fields(cls)} - {"gpu_explicit"}

    @classmethod
    def from_spec(cls, spec: JobSpec, **overrides: Any) -> "MachineOptions":
        """Options from the spec's `compute:` section, then explicit overrides (None means unset)."""
        known = cls.names()
        section = dict(spec.extra.get("compute", {}))
        if "gpu" in section:
            section["gpu_type"], section["gpu_count"] = parse_gpu(str(section.pop("gpu")))
        unknown = sorted(set(section) - known)
        if unknown:
            raise SpecError(
                [f"compute.{key}: unknown key; expected one of {', '.join(sorted(known))}" for key in unknown]
            )
        values = {**section, **{k: v for k, v in overrides.items() if v is not None}}
        options = cls(**values)
        options.gpu_explicit = "gpu_type" in values
        if not options.gpu_explicit and machines.family(options.machine_type) != "n1":
            # the default T4 attaches to N1 machines only; a2/a3/g2 carry their own GPUs
            options.gpu_type, options.gpu_count = None, 0
        if options.gpu_count is None:
            options.gpu_count = spec.num_gpus if spec.num_gpus is not None else 1
        return options


def network_interface(options: MachineOptions) -> dict[str, Any]:
    """The VM's one interface: with an accessConfig it gets an ephemeral external IP; "If there are
    no accessConfigs specified, then this instance will have no external internet access"
    (https://cloud.google.com/compute/docs/reference/rest/v1/instances, networkInterfaces[].accessConfigs[]);
    an organisation policy (constraints/compute.vmExternalIpAccess) may forbid the IP."""
    interface: dict[str, Any] = {"network": options.network}
    if options.external_ip:
        interface["accessConfigs"] = [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]
    return interface


def parse_gpu(text: str) -> tuple[str | None, int]:
    """`nvidia-tesla-t4:4` -> (`nvidia-tesla-t4`, 4); `none` -> (None, 0)."""
    if text.strip().lower() in ("none", "0", ""):
        return None, 0
    kind, _, count = text.partition(":")
    if not kind.strip() or not count.isdigit() or int(count) < 1:
        raise SpecError([f"gpu = {text!r}: expected TYPE:COUNT, e.g. nvidia-tesla-t4:4, or none"])
    return kind.strip(), int(count)


def machine_problems(spec: JobSpec, options: MachineOptions) -> list[str]:
    """Pure decision: the contradictions between machine type, GPUs, Spot and notice, one line each."""
    problems = []
    for key in ("spot", "external_ip", "cloud_platform_scope"):  # YAML's "false" in quotes is a string
        if not isinstance(getattr(options, key), bool):
            problems.append(f"compute.{key} {getattr(options, key)!r}: expected true or false")
    if isinstance(options.disk_gb, bool) or not isinstance(options.disk_gb, int) or options.disk_gb < MIN_DISK_GB:
        problems.append(
            f"compute.disk_gb {options.disk_gb!r}: expected a whole number of GB >= {MIN_DISK_GB} (and at "
            "least the boot image's size, which survivor preflight checks)"
        )
    # survivor's default pd-balanced becomes what a Hyperdisk-only series takes; a type the operator
    # named is kept, or refused here when the series cannot boot from it
    if options.disk_type != machines.DEFAULT_DISK_TYPE:
        problem = machines.disk_type_problem(options.machine_type, options.disk_type)
        if problem:
            problems.append(problem)
    if spec.state_disk_gb and options.spot and options.termination_action != "STOP":
        # the group's recreation of a stopped VM is the documented case that keeps a stateful disk
        # (docs/large-state.md, "The local tier")
        problems.append(
            f"state_disk_gb {spec.state_disk_gb}: needs termination_action STOP, not {options.termination_action}"
        )
    return (
        problems
        + machines.choice_problems(
            options.machine_type,
            options.gpu_type,
            options.gpu_count or 0,
            gpu_explicit=options.gpu_explicit,
            num_gpus=spec.num_gpus,
            spot=options.spot,
            preemption_notice=options.preemption_notice,
            termination_action=options.termination_action,
        )
        + fallback_problems(spec, options)
        + shape_problems(spec, options)
    )


def shape_options(spec: JobSpec, options: MachineOptions, shape: Shape) -> MachineOptions:
    """The machine options of one of the spec's `placement.shapes`: `options` (the job's own) with
    the machine keys read from the shape exactly as `from_spec` reads them from `compute:` (an N1
    type without `gpu` gets compute's default GPU; a2/a3/g2 carry theirs). SpecError for a bad `gpu`."""
    machine = MachineOptions.from_spec(dataclasses.replace(spec, extra={"compute": shape.to_mapping()}))
    return dataclasses.replace(
        options,
        machine_type=machine.machine_type,
        gpu_type=machine.gpu_type,
        gpu_count=machine.gpu_count,
        gpu_explicit=machine.gpu_explicit,
    )


def shape_problems(spec: JobSpec, options: MachineOptions) -> list[str]:
    """Pure decision: compute:'s machine rules (`machines.choice_problems`) for each of the spec's
    `placement.shapes`, one line each, naming the shape's keys. The rules that do not depend on the
    machine (Spot's notice and termination action) are compute:'s and said once, for compute:."""
    out: list[str] = []
    for i, shape in enumerate(spec.placement.shapes if spec.placement else ()):
        label = f"placement.shapes[{i}]"
        try:
            machine = shape_options(spec, options, shape)
        except SpecError as exc:
            out += [f"{label}: {problem}" for problem in exc.problems]
            continue
        problems = machines.choice_problems(
            machine.machine_type,
            machine.gpu_type,
            machine.gpu_count or 0,
            gpu_explicit=machine.gpu_explicit,
            num_gpus=spec.num_gpus,
            spot=machine.spot,
        )
        out += [
            f"{label}: {problem}".replace("compute.gpu", f"{label}.gpu").replace(
                "machine_type", f"{label}.machine_type"
            )
            for problem in problems
        ]
        if (machine.machine_type, machine.gpu_type, machine.gpu_count) == (
            options.machine_type,
            options.gpu_type,
            options.gpu_count,
        ):
            out.append(
                f"{label}: the same machine as compute: ({machine.machine_type}"
                + (f" with {machine.gpu_type}:{machine.gpu_count}" if machine.gpu_type else "")
                + "); name another machine or drop the shape"
            )
    return out


def deadline_warning(spec: JobSpec, now: datetime.datetime) -> str | None:
    """Pure: one warning line when the spec's `deadline:` is a time already past at `now` (a template
    may be made for a job that is late, so it is not refused), else None."""
    deadline = spec.deadline
    if deadline is None or deadline.at is None or deadline.at > now:
        return None
    return (
        f"warning: deadline {deadline.text} is already past: the deadline policy will find the job late "
        "at its first look"
    )


def fallback_problems(spec: JobSpec, options: MachineOptions) -> list[str]:
    """Pure decision: the same machine rules for the deadline's on-demand `fallback:` machine, which is
    the Spot template's shape with `fallback.machine_type` and `fallback.gpu` put in (as the group's
    on-demand template is made); one line each, naming the fallback's keys."""
    fallback = spec.fallback
    if fallback is None or (fallback.machine_type is None and fallback.gpu is None):
        return []
    machine_type = fallback.machine_type or options.machine_type
    gpu_type, gpu_count = options.gpu_type, options.gpu_count or 0
    if fallback.gpu is not None:
        try:
            gpu_type, gpu_count = parse_gpu(fallback.gpu)
        except SpecError:
            return [f"fallback.gpu = {fallback.gpu!r}: expected TYPE:COUNT, e.g. nvidia-tesla-t4:1, or none"]
    problems = machines.choice_problems(machine_type, gpu_type, gpu_count, num_gpus=spec.num_gpus, spot=False)
    return [
        f"fallback: {problem}".replace("compute.gpu", "fallback.gpu").replace("machine_type", "fallback.machine_type")
        for problem in problems
    ]


def startup_script() -> str:
    """The VM startup script shipped in survivor's package (survivor/startup/startup.sh)."""
    path = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "startup", "startup.sh"
    )  # package data
    with open(path, encoding="utf-8") as f:
        return f.read()


def template_body(
    name: str, spec: JobSpec, options: MachineOptions, script: str | None = None, install: Install | None = None
) -> dict[str, Any]:
    """The REST body of `instanceTemplates.insert` for this job. `install`: what the startup script
    installs (the wheel path); None for survivor's own image, which holds it already."""
    problems = machine_problems(spec, options)
    if problems:
        raise SpecError(problems)
    # a2/a3/g2 carry their GPUs: nothing is attached to them (survivor/cloud/machines.py)
    attached = 0 if machines.carries_gpus(options.machine_type) else (options.gpu_count or 0 if options.gpu_type else 0)
    gpus = machines.gpus_of(options.machine_type, options.gpu_type, attached)[1]
    scheduling = machines.scheduling(
        options.machine_type,
        options.gpu_type,
        attached,
        spot=options.spot,
        termination_action=options.termination_action,
        preemption_notice=options.preemption_notice,
    )
    items = [
        {"key": "survivor-job", "value": dumps_json(spec)},
        {"key": "startup-script", "value": script if script is not None else startup_script()},
        {"key": "enable-guest-attributes", "value": "TRUE"},
    ]
    if install is not None:
        items += install.items()
    elif spec.job_dir.startswith("gs://"):
        items.append({"key": "survivor-job-dir", "value": spec.job_dir})  # for the boot records
    # survivor's images are Deep Learning VM disks too: the driver installs on the first boot with a GPU
    if (options.image_project == DLVM_PROJECT or options.image_family.startswith(IMAGE_FAMILY_PREFIX)) and gpus:
        items.append({"key": "install-nvidia-driver", "value": "True"})
    scopes = (
        [SCOPES["cloud-platform"]]
        if options.cloud_platform_scope
        else [SCOPES["storage"], SCOPES["compute"], SCOPES["logging"], SCOPES["monitoring"]]
    )
    properties: dict[str, Any] = {
        "machineType": options.machine_type,
        "scheduling": scheduling,
        "disks": [
            {
                "boot": True,
                "autoDelete": True,
                "type": "PERSISTENT",
                "initializeParams": {
                    "sourceImage": f"projects/{options.image_project}/global/images/family/{options.image_family}",
                    "diskSizeGb": str(options.disk_gb),
                    # pd-balanced, or what a Hyperdisk-only series (A3 Ultra, A4) takes instead
                    "diskType": machines.disk_type_for(options.machine_type, options.disk_type),
                },
            }
        ]
        + state_disk(spec, options),
        "metadata": {"items": items},
        "serviceAccounts": [{"email": options.service_account, "scopes": scopes}],
        "networkInterfaces": [network_interface(options)],
        "labels": {"survivor-job": spec.name, **options.labels},
    }
    if attached:
        properties["guestAccelerators"] = [{"acceleratorType": options.gpu_type, "acceleratorCount": attached}]
    body = {"name": name, "description": f"survivor {__version__} job {spec.name}", "properties": properties}
    size = sum(len(item["key"]) + len(item["value"].encode()) for item in items)
    if size > METADATA_LIMIT:
        raise SpecError([f"metadata: {size} bytes; Compute Engine allows {METADATA_LIMIT} in all"])
    return body


def state_disk(spec: JobSpec, options: MachineOptions) -> list[dict[str, Any]]:
    """The template's state disk (spec `state_disk_gb`) as a one-item list, or none: a blank
    persistent disk named `STATE_DISK_DEVICE`, kept when its VM is deleted (`autoDelete: false`),
    labelled `STATE_DISK_LABEL: <job name>` so that what is left of it can be found and deleted."""
    if not spec.state_disk_gb:
        return []
    return [
        {
            "deviceName": STATE_DISK_DEVICE,
            "autoDelete": False,
            "type": "PERSISTENT",
            "initializeParams": {
                "diskSizeGb": str(spec.state_disk_gb),
                "diskType": machines.disk_type_for(options.machine_type, options.disk_type, boot=False),
                "labels": {STATE_DISK_LABEL: spec.name},
            },
        }
    ]


#: What instanceTemplates.get adds to the body survivor sent (`gcloud compute instance-templates
#: describe` of a template made with a partial body shows each: a disk's deviceName
#: persistent-disk-N, index, kind, mode READ_WRITE; metadata's fingerprint and kind; an interface's
#: kind, name nic0, fingerprint, stackType, subnetwork; an accessConfig's kind, networkTier PREMIUM,
#: natIP; scheduling's defaults): a key survivor does not set that the server filled in is no difference.
SERVER_FILLED = frozenset(
    {
        "id",
        "kind",
        "selfLink",
        "creationTimestamp",
        "fingerprint",
        "deviceName",
        "index",
        "mode",
        "networkTier",
        "natIP",
        "stackType",
        "subnetwork",
        "canIpForward",
        "reservationAffinity",
        "shieldedInstanceConfig",
        "confidentialInstanceConfig",
        "interface",
        "guestOsFeatures",
        "licenses",
        "automaticRestart",
        "onHostMaintenance",
        "preemptible",
        "description@properties",
        "name@networkInterfaces",
    }
)
#: The API returns resource references as full URLs (https://www.googleapis.com/compute/v1/projects/P/
#: global/networks/default) where survivor sends partial ones (global/networks/default).
_URL_PREFIX = re.compile(r"^https?://[^/]+/compute/(?:v1|beta|alpha)/")


def _reference(value: Any, project: str | None) -> Any:
    """A resource reference without the URL prefix and, for the template's own project, without
    `projects/PROJECT/`: the same resource, however the API or survivor spells it."""
    if not isinstance(value, str):
        return value
    value = _URL_PREFIX.sub("", value)
    if project and value.startswith(f"projects/{project}/"):
        value = value[len(f"projects/{project}/") :]
    return value


def body_differences(
    existing: Any, wanted: Any, prefix: str = "", *, project: str | None = None, parent: str = ""
) -> list[str]:
    """Pure decision: the dotted paths where a template as `instanceTemplates.get` returns it differs
    from the body survivor would send: what the server fills in (`SERVER_FILLED`) is no difference,
    and references compare as resources, not as spellings of a URL."""
    out: list[str] = []
    if isinstance(existing, dict) and isinstance(wanted, dict):
        for key in sorted(set(existing) | set(wanted)):
            if key not in wanted and (key in SERVER_FILLED or f"{key}@{parent}" in SERVER_FILLED):
                continue
            out += body_differences(
                existing.get(key), wanted.get(key), f"{prefix}.{key}" if prefix else key, project=project, parent=key
            )
    elif isinstance(existing, list) and isinstance(wanted, list) and len(existing) == len(wanted):
        for i, (a, b) in enumerate(zip(existing, wanted)):
            out += body_differences(a, b, f"{prefix}[{i}]", project=project, parent=parent)
    elif _reference(existing, project) != _reference(wanted, project):
        out.append(prefix or "(body)")
    return out


def named_differences(differences: list[str], body: dict[str, Any]) -> list[str]:
    """Pure: `body_differences` paths with metadata items named by their key
    (`properties.metadata.items[3].value` -> `metadata survivor-wheel`), each once."""
    items = ((body.get("properties") or {}).get("metadata") or {}).get("items") or []
    out: list[str] = []
    for path in differences:
        m = re.fullmatch(r"properties\.metadata\.items\[(\d+)\](?:\.\w+)?", path)
        if m and int(m.group(1)) < len(items):
            path = f"metadata {items[int(m.group(1))].get('key')}"
        if path not in out:
            out.append(path)
    return out


def pretty(body: dict[str, Any]) -> str:
    """The body as indented JSON, as make-template --dry-run prints it."""
    return json.dumps(body, indent=2, sort_keys=False)
