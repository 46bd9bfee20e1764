"""Checks before anything is spent: can the job's VM start, find its GPU and reach its bucket?

    $ survivor preflight cifar10 --config my-job.yaml --project my-project --zone us-west1-b
    ok: bucket my-project-cifar-10-checkpoints exists
    error: quota PREEMPTIBLE_NVIDIA_T4_GPUS in us-west1: 0 of 0 free, the VM needs 4; ...

Each finding is one line with its fix. `make-template` and `make-group` run the same checks (unless
`--skip-preflight`); a blocking finding stops them before the call. What is checked, from the
template's REST body:

- the job dir's bucket exists (`testIamPermissions`, which needs no permission of its own) and its
  IAM policy grants the VM's service account the object permissions the agent uses
  (`storage.PERMISSION_FOR`). A role granted on the project is not in the bucket's policy, so a
  missing binding is a warning, not a stop.
- for a job with `placement:`, where the job dir's and data dir's buckets are (`buckets.get`: location,
  locationType) against `placement.regions`: a region outside the bucket's location reads and writes
  it across locations and pays data transfer, a warning naming those regions and the fix
  (survivor/cloud/locations.py holds the rule and its sources; docs/bucket-location.md).
- the GPU's regional quota (`regions.get`; metrics of the discovery document's `Quota.metric`).
  Spot VMs use the PREEMPTIBLE_ quota when the project has one and the standard quota otherwise
  ("To prevent Spot VMs from consuming your quotas for standard VMs' ... GPUs ... consider requesting
  preemptible quota", https://cloud.google.com/compute/docs/instances/create-use-spot).
- the GPU in the zone, or in some zone of the region (`acceleratorTypes.list`).
- the vCPU quota (`machineTypes.get`'s `guestCpus` against the family's metric, `cpu_quota_findings`)
  and a subnet of the job's network (`subnetworks.list`), and, without an external IP, a route to the
  package index (Cloud NAT, `routers.list`: `package_route_findings`), in the job's region and in every
  other region of `placement.regions` (there with the GPU quota too, as warnings: a move there fails
  without them, the job still starts).
- the boot image family (`images.getFromFamily`).
- the Compute Engine and IAM permissions the VM itself uses on the project (`permissions.LEAVE_GROUP`;
  with a `deadline:`, `permissions.DEADLINE_SWITCH`; with `placement:` places, `permissions.BOOT_MOVE`), read from the project's IAM policy (Resource
  Manager `projects.getIamPolicy`, the `operator` extra's google-cloud-resource-manager) through the
  roles it binds as IAM's `roles.get` lists them, predefined and custom alike (no table of Google's
  roles is kept here; the Compute fake serves and enforces the same answers). Without
  `compute.instanceGroupManagers.update` a finished VM cannot leave its group and powers itself off
  instead (survivor/agent/finish.py). A role granted on a folder, the organisation or the service
  account itself is not in the project's policy, so a missing permission is a warning, not a stop,
  except `compute.instanceGroupManagers.update` (leaving the group, the finish): a readable policy
  (and every role it binds readable) without it stops make-template and make-group, since a VM that cannot leave is repaired, boots,
  sees DONE and powers off for ever (`--skip-preflight` forces it).

The decisions are the pure `*_findings` functions; `check` does the calls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Callable

from survivor.cloud import endpoints, locations, machines, permissions
from survivor.jobdir.storage import PERMISSION_FOR
from survivor.mig.templates import template_gpus
from survivor.places import region_of_zone

#: What the agent does in the job dir needs these (survivor/jobdir/storage.py), all object permissions.
OBJECT_PERMISSIONS = tuple(sorted(set(PERMISSION_FOR.values())))
#: The trainer reads data_dir: listing and reading objects (roles/storage.objectViewer, operator guide).
DATA_PERMISSIONS = ("storage.objects.get", "storage.objects.list")

QUOTA_CONSOLE = "https://console.cloud.google.com/iam-admin/quotas"


@dataclass(frozen=True)
class Finding:
    """One line of the preflight: what is wrong (or fine) and what to do."""

    check: str  # bucket | iam | network | quota | gpu | image
    message: str
    level: str = "error"  # error: stops make-template/make-group; warning: printed; ok: printed

    def __str__(self) -> str:
        return f"{self.level}: {self.message}"


@dataclass(frozen=True)
class Target:
    """What a template will ask Compute Engine for, read from its REST body."""

    machine_type: str
    gpu_type: str | None
    gpu_count: int
    spot: bool
    image_project: str | None
    image_family: str | None
    service_account: str
    job_dir: str | None
    disk_gb: int | None = None
    data_dir: str | None = None
    network: str | None = None
    external_ip: bool = True
    deadline: bool = False  # the VM switches its group (the deadline policy) as well as leaving it
    placement_regions: tuple[str, ...] = ()  # placement.regions: where the job may run and read its buckets
    moves: bool = False  # placement: names another region or shape: the VM may move its group at boot
    notify_secrets: tuple[str, ...] = ()  # the Secret Manager versions holding notify: webhooks' URLs
    on_finish: str = "auto"  # the spec's: what a VM made outside a group does at the end (stop or delete itself)


def target_from_body(body: dict[str, Any]) -> Target:
    """Pure: the Target of an `instanceTemplates` body (as sent, or as `get` returns it)."""
    from survivor.spec import JobSpec

    props = body.get("properties") or {}
    machine = str(props.get("machineType") or "").rsplit("/", 1)[-1]
    gpu_type, gpu_count = template_gpus(body)
    initialize = (props.get("disks") or [{}])[0].get("initializeParams") or {}
    source = str(initialize.get("sourceImage") or "")
    m = re.search(r"projects/([^/]+)/global/images/family/([^/]+)$", source)
    items = {i.get("key"): i.get("value") for i in (props.get("metadata") or {}).get("items", [])}
    spec = JobSpec.from_yaml(items["survivor-job"]) if items.get("survivor-job") else None
    accounts = props.get("serviceAccounts") or [{}]
    return Target(
        machine_type=machine,
        gpu_type=gpu_type,
        gpu_count=gpu_count,
        spot=(props.get("scheduling") or {}).get("provisioningModel") == "SPOT",
        image_project=m.group(1) if m else None,
        image_family=m.group(2) if m else None,
        service_account=accounts[0].get("email") or "default",
        job_dir=spec.job_dir if spec else None,
        data_dir=spec.data_dir if spec else None,
        disk_gb=int(initialize["diskSizeGb"]) if initialize.get("diskSizeGb") else None,
        network=((props.get("networkInterfaces") or [{}])[0].get("network") or None),
        external_ip=any(n.get("accessConfigs") for n in props.get("networkInterfaces") or []),
        deadline=bool(spec and spec.deadline is not None),
        placement_regions=tuple(spec.placement.regions) if spec and spec.placement else (),
        moves=bool(spec and spec.placement and len(spec.placement.regions) + len(spec.placement.shapes) > 1),
        notify_secrets=tuple(dict.fromkeys(t.url for t in spec.notify if t.secret)) if spec else (),
        on_finish=spec.on_finish if spec else "auto",
    )


def bucket_of(job_dir: str | None) -> str | None:
    """`gs://bucket/path` -> `bucket`; None for a local job dir."""
    if not job_dir or not job_dir.startswith("gs://"):
        return None
    return job_dir[len("gs://") :].split("/", 1)[0] or None


# -- decisions -------------------------------------------------------------------------------------


def bucket_findings(bucket: str, exists: bool | None, error: str | None = None, key: str = "job_dir") -> list[Finding]:
    """Pure: whether the bucket of `key` (job_dir, data_dir) is there (`exists` None: could not tell,
    `error` says why)."""
    if exists:
        return [Finding("bucket", f"bucket {bucket} exists", "ok")]
    if exists is False:
        label = "" if key == "job_dir" else f" ({key})"
        return [
            Finding(
                "bucket",
                f"bucket {bucket}{label} does not exist: create it (gcloud storage buckets create "
                f"gs://{bucket} --location REGION) or fix {key}",
            )
        ]
    return [Finding("bucket", f"bucket {bucket}: could not check it ({error}); check {key} and your access", "warning")]


def iam_findings(
    bucket: str,
    member: str,
    bindings: list[dict] | None,
    error: str | None = None,
    *,
    needed: tuple[str, ...] = OBJECT_PERMISSIONS,
    role: str = "roles/storage.objectUser",
) -> list[Finding]:
    """Pure: whether the bucket's IAM policy grants `member` (e.g. `serviceAccount:EMAIL`) the object
    permissions `needed` (the agent's in the job dir; the trainer's, get and list, in data_dir) that
    `role` carries. `bindings` None: the policy could not be read (`error`)."""
    account = member.split(":", 1)[-1]
    fix = f"gcloud storage buckets add-iam-policy-binding gs://{bucket} --member={member} --role={role}"
    if bindings is None:
        return [
            Finding(
                "iam",
                f"bucket {bucket}: could not read its IAM policy ({error}); make sure {account} "
                f"has {role} on it ({fix})",
                "warning",
            )
        ]
    roles = [
        binding.get("role", "")
        for binding in bindings
        if {member, "allUsers", "allAuthenticatedUsers"} & set(binding.get("members") or [])
    ]
    granted = permissions.granted_by(roles)  # the one table of what each role grants, with its sources
    missing = [p for p in needed if p not in granted]
    if not missing:
        return [Finding("iam", f"bucket {bucket}: {account} has {', '.join(roles)}", "ok")]
    return [
        Finding(
            "iam",
            f"bucket {bucket}: its IAM policy does not grant {account} {', '.join(missing)} (a role on "
            f"the project may; preflight reads the bucket's policy only); grant it: {fix}",
            "warning",
        )
    ]


def compute_iam_findings(
    project: str,
    member: str,
    bindings: list[dict] | None,
    error: str | None = None,
    *,
    needed: tuple[str, ...] = permissions.LEAVE_GROUP,
    role_permissions: dict[str, frozenset[str]] | None = None,
) -> list[Finding]:
    """Pure: whether the project's IAM policy grants `member` the Compute Engine and IAM permissions
    `needed` (the VM's own calls: leaving its group, the deadline switch); one line per missing
    permission naming a role that grants it. `bindings` None: the policy could not be read (`error`).
    `role_permissions`: each bound role's permissions as IAM's `roles.get` lists them
    (`includedPermissions`), predefined (`roles/compute.viewer`) and custom (`projects/P/roles/R`, as
    the operator guide's `survivorFinish`) alike; a bound role missing from it could not be read, so
    what it lacks is a warning naming it, never a stop."""
    account = member.split(":", 1)[-1]
    if bindings is None:
        return [
            Finding(
                "compute-iam",
                f"project {project}: could not read its IAM policy ({error}); make sure {account} "
                f"has {', '.join(needed)}",
                "warning",
            )
        ]
    roles = [b.get("role", "") for b in bindings if member in (b.get("members") or [])]
    known = role_permissions or {}
    granted = permissions.granted_by(roles, known)
    unread = sorted({r for r in roles if r not in known})
    missing = [p for p in needed if p not in granted]
    if not missing:
        return [Finding("compute-iam", f"project {project}: {account} has {', '.join(needed)}", "ok")]
    also = f"; IAM's roles.get could not read {', '.join(unread)}, which may grant it" if unread else ""
    # Leaving the group is the finish inside a MIG: without it a DONE job's VM powers off, the MIG
    # repairs it ("If a VM fails or is deleted by an action not initiated by the MIG, then the MIG
    # automatically repairs the failed VM", https://cloud.google.com/compute/docs/instance-groups/about-repair)
    # and a billed GPU VM boots, sees DONE and powers off for ever: a readable policy without it stops
    # make-group; --skip-preflight forces it, and `survivor watch` then deletes the group
    return [
        Finding(
            "compute-iam",
            f"project {project}: {account} lacks {p} (grant {permissions.ROLE_FOR[p]}: gcloud "
            f"projects add-iam-policy-binding {project} --member={member} "
            f"--role={permissions.ROLE_FOR[p]}; a role granted on a folder, the organisation "
            "or the account itself is not read here)" + _WHY.get(p, "") + also,
            "error" if p in permissions.LEAVE_GROUP and not unread else "warning",
        )
        for p in missing
    ]


#: What goes wrong on the VM without each permission (the preflight's one line says it).
_WHY = {
    "compute.instances.delete": "; needed only by a VM made from this template outside a group, which "
    "deletes itself once the job ends (on_finish: delete): without it such a VM powers itself off "
    "instead, stopped with its disks still billed; the group's VMs leave their group instead",
    "compute.instanceGroupManagers.update": "; without it a finished VM cannot leave its group: it powers "
    "itself off, the group repairs it, and a billed VM boots again and "
    "again until the group is deleted (--skip-preflight forces this; "
    "`survivor watch` then deletes the group)",
    "compute.instanceGroupManagers.create": "; without it the agent cannot move the job at boot (placement:); "
    "survivor watch, run as you, still can",
    "compute.instanceGroupManagers.delete": "; without it a move leaves the old group behind, billed",
    "compute.acceleratorTypes.list": "; without it the agent cannot tell which places offer the GPU before a "
    "move (placement:)",
    "compute.regions.get": "; without it the agent cannot read the next region's zones, so it never moves (placement:)",
}


def secret_findings(
    version: str,
    member: str,
    bindings: list[dict] | None,
    error: str | None = None,
    *,
    exists: bool = True,
    role_permissions: dict[str, frozenset[str]] | None = None,
) -> list[Finding]:
    """Pure: whether the IAM policy of the secret holding a `notify:` webhook's URL (`version`:
    projects/P/secrets/S/versions/V) grants `member` (the VM's account) `secretmanager.versions.access`,
    which the agent reads it with (survivor/cloud/secrets.py). `role_permissions`: each bound role's
    permissions as IAM's `roles.get` lists them; `bindings` None: the policy could not be read
    (`error`); `exists` False: no such secret. A webhook never costs training, so what is missing
    is a warning; a secret that does not exist is an error (the spec names the wrong one)."""
    from survivor.cloud.secrets import ACCESS_PERMISSION, ACCESSOR_ROLE

    secret = version.rsplit("/versions/", 1)[0]
    project, name = secret.split("/")[1], secret.rsplit("/", 1)[-1]
    account = member.split(":", 1)[-1]
    fix = f"gcloud secrets add-iam-policy-binding {name} --project {project} --member={member} --role={ACCESSOR_ROLE}"
    if not exists:
        return [
            Finding(
                "secret",
                f"notify: secret {secret} does not exist: create it (gcloud secrets create {name} "
                f"--project {project}, then add the webhook's URL as a version) or fix the url",
            )
        ]
    if bindings is None:
        return [
            Finding(
                "secret",
                f"notify: secret {secret}: could not read its IAM policy ({error}); make sure "
                f"{account} has {ACCESSOR_ROLE} on it ({fix})",
                "warning",
            )
        ]
    roles = [b.get("role", "") for b in bindings if member in (b.get("members") or [])]
    known = role_permissions or {}
    if ACCESS_PERMISSION in permissions.granted_by(roles, known):
        return [Finding("secret", f"notify: secret {secret}: {account} has {ACCESS_PERMISSION}", "ok")]
    unread = sorted({r for r in roles if r not in known})
    also = f"; IAM's roles.get could not read {', '.join(unread)}, which may grant it" if unread else ""
    return [
        Finding(
            "secret",
            f"notify: secret {secret}: its IAM policy does not grant {account} {ACCESS_PERMISSION}, "
            f"so the VM cannot read the webhook's URL and its events are not told (a role on the "
            f"project may grant it; preflight reads the secret's policy only); grant it: {fix}" + also,
            "warning",
        )
    ]


def quota_findings(
    region: str, gpu_type: str, count: int, spot: bool, quotas: dict[str, tuple[float, float]], *, level: str = "error"
) -> list[Finding]:
    """Pure: whether the region's GPU quota has room for `count` GPUs ({metric: (limit, usage)});
    `level`: what a shortfall is (a region the job may only move to: a warning)."""
    standard = machines.quota_metric(gpu_type, spot=False)
    preemptible = machines.quota_metric(gpu_type, spot=True)
    metric = standard
    if spot and preemptible in quotas and quotas[preemptible][0] > 0:
        metric = preemptible
    if metric not in quotas:
        return [Finding("quota", f"quota for {gpu_type} in {region}: no regional metric to check", "warning")]
    limit, usage = quotas[metric]
    free = limit - usage
    if free >= count:
        return [Finding("quota", f"quota {metric} in {region}: {free:g} of {limit:g} free, the VM needs {count}", "ok")]
    also = f" (Spot VMs use {preemptible} when it is granted, {standard} otherwise)" if spot else ""
    return [
        Finding(
            "quota",
            f"quota {metric} in {region}: {free:g} of {limit:g} free, the VM needs {count}{also}; "
            f"request more at {QUOTA_CONSOLE} (metric {metric}, region {region}) or use fewer GPUs",
            level,
        )
    ]


def gpu_findings(
    gpu_type: str, count: int, offers: dict[str, dict[str, int]], zone: str | None, region: str | None
) -> list[Finding]:
    """Pure: whether the zone (or some zone of the region) offers `count` x `gpu_type`.
    `offers`: zone -> {GPU type: maximumCardsPerInstance}."""
    fit = sorted(z for z, kinds in offers.items() if kinds.get(gpu_type, 0) >= count)
    where = f"zone {zone}" if zone else f"region {region}"
    if fit:
        return [Finding("gpu", f"{gpu_type} x {count} is offered in {', '.join(fit)}", "ok")]
    others = sorted(z for z, kinds in offers.items() if gpu_type in kinds)
    hint = (
        f"zones of it that offer {gpu_type} take fewer per VM ({', '.join(others)})"
        if others
        else f"see gcloud compute accelerator-types list --filter=name={gpu_type}"
    )
    return [
        Finding(
            "gpu", f"{where} does not offer {gpu_type} x {count}: pick another {'zone' if zone else 'region'} ({hint})"
        )
    ]


def all_regions_gpu_findings(count: int, quotas: dict[str, tuple[float, float]]) -> list[Finding]:
    """Pure: whether the project-wide GPU quota (GPUS_ALL_REGIONS, from `projects.get`) has room for
    `count` GPUs. It caps every region's GPUs together, and a new project's is often 0
    (https://cloud.google.com/compute/resource-usage#gpu_quota): a regional quota with room is not enough."""
    if "GPUS_ALL_REGIONS" not in quotas:
        return [Finding("quota", "quota GPUS_ALL_REGIONS: the project reports none to check", "warning")]
    limit, usage = quotas["GPUS_ALL_REGIONS"]
    free = limit - usage
    if free >= count:
        return [Finding("quota", f"quota GPUS_ALL_REGIONS: {free:g} of {limit:g} free, the VM needs {count}", "ok")]
    return [
        Finding(
            "quota",
            f"quota GPUS_ALL_REGIONS (every region together): {free:g} of {limit:g} free, the VM "
            f"needs {count}; request more at {QUOTA_CONSOLE} (metric GPUS_ALL_REGIONS, global)",
        )
    ]


def network_findings(project: str, network: str, exists: bool, external_ip: bool) -> list[Finding]:
    """Pure: whether the template's VPC network exists (a project made by an organisation's policy
    may have no `default` network: https://cloud.google.com/vpc/docs/vpc#default-network), and what a
    VM without an external IP needs."""
    name = network.rsplit("/", 1)[-1]
    if not exists:
        how = (
            "gcloud compute networks create default --subnet-mode=auto"
            if name == "default"
            else f"gcloud compute networks create {name}"
        )
        return [
            Finding(
                "network",
                f"network {name} does not exist in project {project}: create it ({how}), or "
                "name an existing one in compute.network",
            )
        ]
    out = [Finding("network", f"network {name} exists", "ok")]
    if not external_ip:
        out.append(
            Finding(
                "network",
                f"no external IP: the VM reaches Cloud Storage only if its subnet of {name} "
                "has Private Google Access on (gcloud compute networks subnets update SUBNET "
                "--region REGION --enable-private-ip-google-access); the wheel path's pip and "
                "make-image's builder also need Cloud NAT",
                "warning",
            )
        )
    return out


def cpu_quota_findings(
    region: str,
    machine_type: str,
    vcpus: int | None,
    spot: bool,
    quotas: dict[str, tuple[float, float]],
    *,
    level: str = "error",
) -> list[Finding]:
    """Pure: whether the region's CPU quota has room for the machine's `vcpus` ({metric: (limit, usage)},
    `regions.get`). The metric is the machine family's own (`N2_CPUS`, `A2_CPUS`: the discovery
    document's `Quota.metric` names one for each such family) when the region lists it, else `CPUS`
    for N1, which has none of its own; Spot VMs count against `PREEMPTIBLE_CPUS` when the project has
    it ("To prevent Spot VMs from consuming your quotas for standard VMs' CPUs, GPUs, and disks,
    consider requesting preemptible quota", https://cloud.google.com/compute/docs/instances/create-use-spot).
    A family whose metric the region does not list (its quota lives in Cloud Quotas only) is a warning.
    `level`: what a shortfall is (a region the job may only move to: a warning)."""
    family = machines.family(machine_type)
    metric = f"{family.upper()}_CPUS" if f"{family.upper()}_CPUS" in quotas else ("CPUS" if family == "n1" else None)
    if metric and spot and quotas.get("PREEMPTIBLE_CPUS", (0.0, 0.0))[0] > 0:
        metric = "PREEMPTIBLE_CPUS"
    if vcpus is None:
        return [
            Finding(
                "quota",
                f"{machine_type} in {region}: the zone lists no such machine type, so its vCPU quota was not checked",
                "warning",
            )
        ]
    if metric is None or metric not in quotas:
        return [
            Finding(
                "quota",
                f"CPU quota for {machine_type} in {region}: the region reports no {family.upper()} "
                f"metric to check (see {QUOTA_CONSOLE})",
                "warning",
            )
        ]
    limit, usage = quotas[metric]
    free = limit - usage
    if free >= vcpus:
        return [Finding("quota", f"quota {metric} in {region}: {free:g} of {limit:g} free, the VM needs {vcpus}", "ok")]
    return [
        Finding(
            "quota",
            f"quota {metric} in {region}: {free:g} of {limit:g} free, the VM ({machine_type}) needs "
            f"{vcpus} vCPUs; request more at {QUOTA_CONSOLE} (metric {metric}, region {region})",
            level,
        )
    ]


def subnet_findings(network: str, region: str, subnets: list[dict], *, level: str = "error") -> list[Finding]:
    """Pure: whether the job's network has a subnet in `region` (`subnetworks.list`): a VM draws its
    internal address from a subnet of its own region ("When you create an instance, you must create
    it in a subnet, and the instance draws its internal IP address from that subnet", Google's
    Subnetwork resource reference, e.g. the Terraform/Pulumi `compute.Subnetwork` docs generated from
    it); an auto-mode network "starts with one subnet per region" (discovery document,
    `Network.autoCreateSubnetworks`), a custom-mode one has only those made for it."""
    name = network.rsplit("/", 1)[-1]
    mine = [s["name"] for s in subnets if s["network"] == name]
    if mine:
        return [Finding("network", f"network {name} has subnet {mine[0]} in {region}", "ok")]
    return [
        Finding(
            "network",
            f"network {name} has no subnet in {region}, so no VM of the job can start there: "
            f"create one (gcloud compute networks subnets create {name}-{region} --network {name} "
            f"--region {region} --range CIDR) or take {region} out of placement.regions",
            level,
        )
    ]


def package_route_findings(network: str, region: str, subnets: list[dict], nats: list[dict]) -> list[Finding]:
    """Pure: for a VM without an external IP, whether it can reach the package index from `region`:
    pip (the wheel path at every boot, make-image's builder once) downloads from it, and Private Google
    Access reaches Google's APIs only. Cloud NAT does: "You configure Cloud NAT by creating a Cloud NAT
    gateway in the region of the subnets that require NAT" (https://cloud.google.com/nat/docs/overview),
    on a Cloud Router of the network; it serves every subnet (`sourceSubnetworkIpRangesToNat`
    ALL_SUBNETWORKS_*) or the listed ones (LIST_OF_SUBNETWORKS, discovery document `RouterNat`).
    Without it, the VM needs a mirror of the index that it can reach (a pip configuration baked into the
    base image), which preflight cannot see: a warning that names both."""
    name = network.rsplit("/", 1)[-1]
    mine = {s["name"] for s in subnets if s["network"] == name}
    for nat in nats:
        if nat["network"] != name:
            continue
        if nat["ranges"] != "LIST_OF_SUBNETWORKS" or mine & set(nat["subnets"]):
            return [
                Finding(
                    "network",
                    f"no external IP: Cloud NAT {nat['name']} (router {nat['router']}) routes "
                    f"network {name} in {region} to the package index",
                    "ok",
                )
            ]
    return [
        Finding(
            "network",
            f"no external IP, and no Cloud NAT on network {name} in {region}: the builder of "
            "survivor's image (and every boot with --install wheel) cannot download from the "
            f"package index there; add one (gcloud compute routers create nat-router --network "
            f"{name} --region {region} && gcloud compute routers nats create nat --router "
            f"nat-router --region {region} --auto-allocate-nat-external-ips "
            "--nat-all-subnet-ip-ranges) or configure a mirror of the index in the base image",
            "warning",
        )
    ]


#: The list constraint an organisation sets to keep VMs off external IPs: its allowed values are
#: instance paths (https://cloud.google.com/compute/docs/ip-addresses/reserve-static-external-ip-address
#: "Restricting external IP addresses to specific VMs"; https://cloud.google.com/resource-manager/docs/
#: organization-policy/org-policy-constraints, `compute.vmExternalIpAccess`).
EXTERNAL_IP_CONSTRAINT = "compute.vmExternalIpAccess"


def external_ip_findings(project: str, rules: list[dict] | None, error: str | None = None) -> list[Finding]:
    """Pure: whether the project's effective organisation policy lets the VM have its external IP.
    `rules`: the effective policy's rules ({"allow_all", "deny_all", "allowed_values"}); None when it
    could not be read. A MIG names its VMs `NAME-xxxx` anew at each recreation, so a list of allowed
    instances never names them: only allow_all (or no rule) lets them have an IP."""
    fix = "make the template with --no-external-ip (compute.external_ip: false)"
    if rules is None:
        return [
            Finding(
                "network",
                f"the organisation policy on external IPs ({EXTERNAL_IP_CONSTRAINT}) could not be "
                f"read ({error}); if it denies them, the group's VM is refused: {fix}",
                "warning",
            )
        ]
    if not rules or any(r.get("allow_all") for r in rules):
        return [Finding("network", f"the organisation policy lets {project}'s VMs have an external IP", "ok")]
    if any(r.get("deny_all") for r in rules):
        return [
            Finding(
                "network",
                f"the organisation policy ({EXTERNAL_IP_CONSTRAINT}) denies every VM of {project} "
                f"an external IP: {fix}",
            )
        ]
    return [
        Finding(
            "network",
            f"the organisation policy ({EXTERNAL_IP_CONSTRAINT}) allows external IPs to named VMs "
            f"only, and a group's VMs get new names: {fix}",
        )
    ]


def _external_ip_rules(compute) -> list[dict]:
    """The effective policy's rules for `EXTERNAL_IP_CONSTRAINT` (Org Policy v2 `getEffectivePolicy`,
    REST), at the Compute client's endpoint when it has one (survivor's Compute fake serves it)."""
    from google.cloud import orgpolicy_v2

    kwargs = endpoints.client_kwargs(compute.endpoint)
    client = orgpolicy_v2.OrgPolicyClient(**kwargs)
    policy = client.get_effective_policy(name=f"projects/{compute.project}/policies/{EXTERNAL_IP_CONSTRAINT}")
    return [
        {"allow_all": r.allow_all, "deny_all": r.deny_all, "allowed_values": list(r.values.allowed_values)}
        for r in policy.spec.rules
    ]


def _external_ip_state(compute) -> list[Finding]:
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_errors

    try:
        return external_ip_findings(compute.project, _external_ip_rules(compute))
    except ImportError:
        return external_ip_findings(
            compute.project, None, "google-cloud-org-policy is not installed: pip install -e '.[operator]'"
        )
    except (gexc.GoogleAPICallError, auth_errors.GoogleAuthError, OSError) as exc:
        return external_ip_findings(compute.project, None, getattr(exc, "message", None) or str(exc).splitlines()[0])


def image_findings(
    project: str, family: str, found: bool, disk_gb: int | None = None, image_gb: int | None = None
) -> list[Finding]:
    """Pure: whether the boot image family resolves to an image, and the boot disk can hold it
    (the API refuses "Requested disk size cannot be smaller than the image size (N GB)", e.g.
    elasticluster/elasticluster#716 -- for a MIG only when it creates the VM)."""
    if found and disk_gb and image_gb and disk_gb < image_gb:
        return [
            Finding(
                "image",
                f"compute.disk_gb {disk_gb}: image family {project}/{family} needs a boot disk of at "
                f"least {image_gb} GB; set compute.disk_gb (or --disk-gb) to {image_gb} or more",
            )
        ]
    if found:
        return [Finding("image", f"image family {project}/{family} resolves", "ok")]
    return [
        Finding(
            "image",
            f"image family {project}/{family} has no image: fix --image-family/--image-project "
            "(gcloud compute images describe-from-family FAMILY --project PROJECT)",
        )
    ]


def location_findings(
    bucket: str,
    key: str,
    regions: tuple[str, ...],
    location: str | None,
    location_type: str | None = None,
    data_locations: tuple[str, ...] = (),
    error: str | None = None,
) -> list[Finding]:
    """Pure: for a job with `placement:`, whether each of its regions reads and writes the bucket of
    `key` (job_dir, data_dir) within the bucket's location, or pays data transfer across locations
    (survivor/cloud/locations.py has the rule and its sources). A warning, never a stop: a move still
    works, it only costs more. `location` None: it could not be read (`error`)."""
    if location is None:
        return [
            Finding(
                "location",
                f"bucket {bucket} ({key}): could not read its location ({error}); a job in "
                f"{', '.join(regions)} may pay data transfer to reach it",
                "warning",
            )
        ]
    level, message = locations.crossing_finding(bucket, key, location, location_type, regions, data_locations)
    return [Finding("location", message, level)]


def blocking(findings: list[Finding]) -> list[Finding]:
    """The findings that block (level "error")."""
    return [f for f in findings if f.level == "error"]


# -- the calls -------------------------------------------------------------------------------------


def _bucket_state(bucket: str, member: str, project: str, key: str = "job_dir") -> list[Finding]:
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_errors
    import google.cloud.storage as storage  # not `from google.cloud import`: mypy sees no such name there

    try:
        handle = storage.Client(project=project).bucket(bucket)
        handle.test_iam_permissions(list(OBJECT_PERMISSIONS))
        out = bucket_findings(bucket, True, key=key)
    except gexc.NotFound:
        return bucket_findings(bucket, False, key=key)
    except (gexc.GoogleAPICallError, auth_errors.GoogleAuthError, OSError) as exc:
        return bucket_findings(bucket, None, getattr(exc, "message", None) or str(exc).splitlines()[0], key=key)
    needed, role = (
        (OBJECT_PERMISSIONS, "roles/storage.objectUser")
        if key == "job_dir"
        else (DATA_PERMISSIONS, "roles/storage.objectViewer")
    )
    try:
        policy = handle.get_iam_policy(requested_policy_version=3)
        bindings = [{"role": b["role"], "members": sorted(b["members"])} for b in policy.bindings]
        return out + iam_findings(bucket, member, bindings, needed=needed, role=role)
    except gexc.GoogleAPICallError as exc:
        return out + iam_findings(
            bucket, member, None, getattr(exc, "message", None) or str(exc), needed=needed, role=role
        )


def _location_state(bucket: str, project: str, key: str, regions: tuple[str, ...]) -> list[Finding]:
    """The bucket's location as Cloud Storage reports it (`buckets.get`: location, locationType,
    customPlacementConfig.dataLocations), against the job's placement regions. A missing bucket is
    the bucket check's finding, not this one's."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_errors
    from google.cloud import storage

    try:
        found = storage.Client(project=project).get_bucket(bucket)
    except gexc.NotFound:
        return []
    except (gexc.GoogleAPICallError, auth_errors.GoogleAuthError, OSError) as exc:
        return location_findings(
            bucket, key, regions, None, error=getattr(exc, "message", None) or str(exc).splitlines()[0]
        )
    return location_findings(
        bucket, key, regions, found.location or "", found.location_type, tuple(found.data_locations or ())
    )


def _project_bindings(compute) -> list[dict]:
    """The project's IAM policy bindings (Resource Manager v3 `projects.getIamPolicy`, REST), at the
    Compute client's endpoint when it has one (survivor's Compute fake serves that path too)."""
    from google.cloud import resourcemanager_v3

    kwargs = endpoints.client_kwargs(compute.endpoint)
    client = resourcemanager_v3.ProjectsClient(**kwargs)
    policy = client.get_iam_policy(
        request={"resource": f"projects/{compute.project}", "options": {"requested_policy_version": 3}}
    )
    return [{"role": b.role, "members": sorted(b.members)} for b in policy.bindings]


def _role_permissions(compute, roles: list[str]) -> dict[str, frozenset[str]]:
    """The permissions of each role, predefined (`roles/R`) or custom (`projects/P/roles/R`,
    `organizations/O/roles/R`): IAM v1 `roles.get`'s `includedPermissions` ("roles.get: `roles/{ROLE_NAME}`.
    This method returns results from all predefined roles in IAM", the method's reference in IAM's
    discovery document), through google-api-python-client's bundled discovery document (the IAM admin
    client library has no REST transport), at the Compute fake's endpoint when there is one. A role
    that cannot be read is left out (the findings name it)."""
    roles = sorted(
        {
            r
            for r in roles
            if r.startswith("roles/") or (r.split("/", 1)[0] in ("projects", "organizations") and "/roles/" in r)
        }
    )
    if not roles:
        return {}
    from googleapiclient import discovery, errors

    kwargs = {
        "static_discovery": True,
        "cache_discovery": False,
        **endpoints.client_kwargs(compute.endpoint, transport=None),
    }
    service = discovery.build("iam", "v1", **kwargs)
    out: dict[str, frozenset[str]] = {}
    for role in roles:
        kind = role.split("/", 1)[0]
        collection = {"roles": service, "projects": service.projects(), "organizations": service.organizations()}[kind]
        try:
            found = collection.roles().get(name=role).execute()
            out[role] = frozenset(found.get("includedPermissions") or [])
        except (errors.HttpError, OSError):
            continue
    return out


def _project_state(compute, member: str, needed: tuple[str, ...]) -> list[Finding]:
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_errors

    try:
        bindings = _project_bindings(compute)
    except ImportError:
        return compute_iam_findings(
            compute.project,
            member,
            None,
            "google-cloud-resource-manager is not installed: pip install 'survivor-train[operator]'",
            needed=needed,
        )
    except (gexc.GoogleAPICallError, auth_errors.GoogleAuthError, OSError) as exc:
        return compute_iam_findings(
            compute.project, member, None, getattr(exc, "message", None) or str(exc).splitlines()[0], needed=needed
        )
    try:
        granted = _role_permissions(compute, [b["role"] for b in bindings if member in b["members"]])
    except ImportError:  # google-api-python-client: the operator extra
        granted = {}
    return compute_iam_findings(compute.project, member, bindings, needed=needed, role_permissions=granted)


def goodput_writer_state(compute, member: str) -> list[Finding]:
    """Whether `member` (a deployed watch's service account) may write the job's goodput to Cloud
    Monitoring (`watch --goodput-metrics`): the project's IAM policy and its bound roles, read as for
    the VM's account, judged for monitoring.timeSeries.create (roles/monitoring.metricWriter). Never
    an error: without it only the metrics are missing, and each look says so."""
    from survivor.cloud.monitoring import WRITE_PERMISSION

    return [
        replace(f, check="monitoring-iam", level="warning" if f.level == "error" else f.level)
        for f in _project_state(compute, member, (WRITE_PERMISSION,))
    ]


def _secret_state(compute, version: str, member: str, *, secrets=None) -> list[Finding]:
    """The IAM policy of a notify: URL's secret (Secret Manager `GetIamPolicy`, through
    google-cloud-secret-manager over REST; at SURVIVOR_SECRET_MANAGER_ENDPOINT when a stand-in
    answers), its bound roles read with IAM's `roles.get`, judged by `secret_findings`."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_errors

    from survivor.cloud import secrets as secret_manager

    resource = version.rsplit("/versions/", 1)[0]
    try:
        policy = (secrets or secret_manager.client()).get_iam_policy(request={"resource": resource}, timeout=20.0)
    except gexc.NotFound:
        return secret_findings(version, member, None, exists=False)
    except (gexc.GoogleAPICallError, auth_errors.GoogleAuthError, OSError) as exc:
        return secret_findings(version, member, None, getattr(exc, "message", None) or str(exc).splitlines()[0])
    bindings = [{"role": b.role, "members": sorted(b.members)} for b in policy.bindings]
    try:
        granted = _role_permissions(compute, [b["role"] for b in bindings if member in b["members"]])
    except ImportError:  # google-api-python-client: the operator extra
        granted = {}
    return secret_findings(version, member, bindings, role_permissions=granted)


def check(
    body: dict[str, Any],
    compute,
    *,
    zone: str | None = None,
    region: str | None = None,
    storage_check: Callable[..., list[Finding]] | None = None,
) -> list[Finding]:
    """Every finding for a template body, in the order bucket, IAM, location against placement.regions
    (job_dir, then data_dir), network, image,
    GPU, quota, the VM's Compute permissions, each notify: secret's accessor. `compute` is a survivor.cloud.compute.Compute; Compute
    failures become findings, not exceptions."""
    from survivor.cloud.compute import ComputeError

    target = target_from_body(body)
    out: list[Finding] = []
    bucket = bucket_of(target.job_dir)
    # a job dir off Cloud Storage is for the local stand-ins only (make-template warns): so is its data
    data_bucket = bucket_of(target.data_dir) if bucket else None
    if bucket:
        account = target.service_account
        try:
            if account == "default":
                account = compute.default_service_account()
        except ComputeError as exc:
            out.append(Finding("iam", f"the project's default service account: {exc}", "warning"))
        for key, name in (("job_dir", bucket), ("data_dir", data_bucket)):
            if name and not (key == "data_dir" and name == bucket):  # the job dir's grant covers its reads
                out += (storage_check or _bucket_state)(name, f"serviceAccount:{account}", compute.project, key)
                if target.placement_regions:  # the regions a move may take the job to read it too
                    out += _location_state(name, compute.project, key, target.placement_regions)
    try:
        if target.network:
            out += network_findings(
                compute.project, target.network, compute.network_exists(target.network), target.external_ip
            )
            if target.external_ip:
                out += _external_ip_state(compute)
        if target.image_family and target.image_project:  # both or neither: one match of the image URL
            image = compute.image_from_family(target.image_project, target.image_family)
            out += image_findings(
                target.image_project,
                target.image_family,
                image is not None,
                target.disk_gb,
                (image or {}).get("disk_size_gb"),
            )
    except ComputeError as exc:
        out.append(Finding("compute", str(exc)))
    home = region or (region_of_zone(zone) if zone else None)
    # every region the job may run in: where it starts, then those of placement.regions a move may take
    # it to, whose shortfalls are warnings: the job starts without them
    places = ([home] if home else []) + [r for r in target.placement_regions if r != home]
    vcpus: list[int | None] = []  # the machine's vCPUs, read once (machineTypes.get)
    for place in places:
        try:
            out += _region_state(
                compute, target, place, zone if place == home else None, vcpus, "error" if place == home else "warning"
            )
        except ComputeError as exc:
            out.append(Finding("compute", str(exc), "error" if place == home else "warning"))
    if target.spot and (target.moves or target.deadline):
        out += capacity_data_findings(compute, target, places)
    try:
        if target.gpu_type and places:
            out += all_regions_gpu_findings(target.gpu_count, compute.project_quotas())
    except ComputeError as exc:
        out.append(Finding("compute", str(exc)))
    if bucket and account != "default":  # on Google Cloud (a gs:// job dir): the VM's own calls
        needed = permissions.vm_permissions(deadline=target.deadline, moves=target.moves, on_finish=target.on_finish)
        out += _project_state(compute, f"serviceAccount:{account}", needed)
        for version in target.notify_secrets:  # read by the VM's account (survivor/cloud/secrets.py)
            out += _secret_state(compute, version, f"serviceAccount:{account}")
    return out


def capacity_data_findings(compute, target: Target, regions: list[str]) -> list[Finding]:
    """Whether the caller (who runs `survivor watch`) can read Compute Engine's capacity data for the
    job's machine in each of its regions, and what it says now (docs/capacity-data.md): `ok` lines and
    warnings only, never an error: the data is an input, never a requirement (without it a move and
    the deadline policy decide with the rule they had before). One `advice.capacity` call a region;
    a refused permission is said once, naming the role that grants it."""
    from survivor.cloud import capacity
    from survivor.cloud.compute import ComputeError, PermissionDenied

    advice, _ = capacity.request_bodies(target.machine_type, target.gpu_type, target.gpu_count)
    out: list[Finding] = []
    for region in regions:
        try:
            outlook = capacity.outlook_from(compute.capacity_advice(region, advice), None)
        except PermissionDenied as exc:
            return out + [
                Finding(
                    "capacity-data",
                    f"capacity data: {exc}; without compute.advice.capacity and "
                    "compute.advice.capacityHistory (both in roles/compute.viewer) "
                    "moves and the deadline decide without it",
                    "warning",
                )
            ]
        except ComputeError as exc:
            out.append(
                Finding("capacity-data", f"capacity data in {region}: {exc}; decided without it there", "warning")
            )
            continue
        if outlook is None:
            out.append(
                Finding(
                    "capacity-data",
                    f"capacity data in {region}: no scores for {target.machine_type}; decided without it there",
                    "warning",
                )
            )
            continue
        out.append(
            Finding(
                "capacity-data",
                f"capacity data in {region}: Spot obtainability "
                f"{outlook.obtainability:.2f}, estimated uptime "
                f"{outlook.uptime_hours * 60:.0f} min",
                "ok",
            )
        )
    return out


def package_route(compute, network: str, region: str) -> list[Finding]:
    """Whether a VM without an external IP on `network` in `region` reaches the package index (Cloud NAT:
    `subnetworks.list`, `routers.list`); what make-image and make-template say before a builder is made.
    A failed read is a warning naming it."""
    from survivor.cloud.compute import ComputeError

    try:
        return package_route_findings(network, region, compute.subnets(region), compute.nat_gateways(region))
    except ComputeError as exc:
        return [
            Finding(
                "network",
                f"no external IP: could not tell whether Cloud NAT serves {network} in {region} ({exc})",
                "warning",
            )
        ]


def _region_state(
    compute, target: Target, region: str, zone: str | None, vcpus: list[int | None], level: str
) -> list[Finding]:
    """One region's findings (`regions.get`, `acceleratorTypes.list`, `machineTypes.get`,
    `subnetworks.list`, `routers.list`): where the job starts (`zone`, or any zone of it: level error)
    the GPU offer too; in every region the GPU and CPU quota, the network's subnet and, without an
    external IP, its route to the package index."""
    out: list[Finding] = []
    info = compute.region(region)
    if target.gpu_type:
        if level == "error":
            zones = [zone] if zone else info["zones"]
            out += gpu_findings(
                target.gpu_type, target.gpu_count, {z: compute.zone_accelerators(z) for z in zones}, zone, region
            )
        out += quota_findings(region, target.gpu_type, target.gpu_count, target.spot, info["quotas"], level=level)
    if not vcpus and (zone or info["zones"]):
        vcpus.append(compute.machine_vcpus(zone or sorted(info["zones"])[0], target.machine_type))
    if vcpus:
        out += cpu_quota_findings(region, target.machine_type, vcpus[0], target.spot, info["quotas"], level=level)
    if target.network:
        subnets = compute.subnets(region)
        out += subnet_findings(target.network, region, subnets, level=level)
        if not target.external_ip:
            out += package_route_findings(target.network, region, subnets, compute.nat_gateways(region))
    return out


def report(findings: list[Finding], write: Callable[[str], None]) -> bool:
    """Writes each finding on its line; True when none blocks."""
    for finding in findings:
        write(str(finding))
    return not blocking(findings)
