"""Compute Engine, through google-cloud-compute (REST): templates, MIGs, instances, operations.

    >>> compute = Compute("my-project")                               # default credentials
    >>> compute.insert_template(body)                                  # waits for the operation
    >>> compute.leave_group(GroupRef("my-project", "cifar10", zone="us-west1-b"), "us-west1-b", "cifar10-x1z2")

`SURVIVOR_COMPUTE_ENDPOINT=http://127.0.0.1:PORT` points every client at a local fake (with anonymous
credentials), the way `STORAGE_EMULATOR_HOST` does for Cloud Storage. Operations are waited on with
operations clients built with the same options -- `ExtendedOperation.result()` builds its own client
that ignores a custom endpoint -- with a deadline and a progress callback. Failures become
`ComputeError`: one sentence saying what happened and what to do.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal, TypeVar

from survivor import log as logs
from survivor.cloud import endpoints
from survivor.spec import JobSpec, SpecError

log = logs.get("compute")

ENDPOINT_ENV = endpoints.COMPUTE.env


@dataclass(frozen=True)
class GroupRef:
    """A managed instance group: its project, its name, and its zone (zonal) or region (regional)."""

    project: str
    name: str
    zone: str | None = None
    region: str | None = None

    @classmethod
    def of_scope(cls, project: str, name: str, scope: str) -> GroupRef:
        """The group `name` under an aggregated list's scope key, `zones/Z` or `regions/R`."""
        kind, where = scope.split("/", 1)
        return cls(project, name, zone=where) if kind == "zones" else cls(project, name, region=where)


#: Which of a job's VMs make a call (survivor/cloud/permissions.py `vm_permissions`): every VM
#: (leaving its group), a VM with a deadline (the switch), a VM with places to move to (the move at boot).
VmUse = Literal["every", "deadline", "move"]
_INSTANCE_ADMIN = "roles/compute.instanceAdmin.v1"
_VIEWER = "roles/compute.viewer"
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Needs:
    """What one Compute Engine method needs: the IAM permission on its resource (its REST reference's
    "Authorization requires the following IAM permission"), which of a job's VMs make the call (None:
    only the operator's commands and the watch), and the smallest predefined role that grants it,
    for preflight's fix line (from the roles' `includedPermissions`: survivor/local/iam_roles.py)."""

    permission: str
    vm: VmUse | None = None
    role: str = ""


#: method id (`compute.instanceTemplates.insert`) -> what it needs, as each `Compute` method that calls
#: it declares (`needs`); survivor/cloud/permissions.py derives the VM's permissions, their roles and
#: `METHOD_PERMISSIONS` (which the Compute fake enforces) from it, so a new call declares it here.
METHOD_NEEDS: dict[str, Needs] = {}


def both_scopes(kind: str, verb: str) -> tuple[str, str]:
    """The method ids of a zonal and a regional group's call: `instanceGroupManagers`, `get` ->
    `compute.instanceGroupManagers.get`, `compute.regionInstanceGroupManagers.get`."""
    return f"compute.{kind}.{verb}", f"compute.region{kind[0].upper()}{kind[1:]}.{verb}"


def needs(permission: str, *methods: str, vm: VmUse | None = None, role: str = "") -> Callable[[F], F]:
    """Declares, on the `Compute` method that makes them, the calls (`methods`, method ids) that need
    `permission`, which VMs make them, and the role that grants it (`Needs`)."""

    def declare(fn: F) -> F:
        for method in methods:
            METHOD_NEEDS[method] = Needs(permission, vm, role)
        return fn

    return declare


class ComputeError(Exception):
    """A Compute Engine call failed. The message is one actionable sentence."""


class NotFound(ComputeError):
    """The resource does not exist."""


class PermissionDenied(ComputeError):
    """The caller lacks a permission the call needs (HTTP 403 or 401, not a disabled API)."""


class InUse(ComputeError):
    """The resource cannot be deleted while another uses it: HTTP 400 `resourceInUseByAnotherResource`,
    "The instance_template resource '...' is already being used by '.../instanceGroupManagers/G'"
    (terraform-google-modules/terraform-google-vm#45, hashicorp/terraform-provider-google#1601)."""


def explain(exc: Exception, what: str) -> ComputeError:
    """Pure decision: the sentence an operator needs for a failed call."""
    from google.api_core import exceptions as gexc

    message = re.sub(r"^(GET|POST|PUT|PATCH|DELETE) \S+: ", "", getattr(exc, "message", None) or str(exc))
    if isinstance(exc, gexc.NotFound):
        return NotFound(f"{what}: not found ({message})")
    if isinstance(exc, gexc.Forbidden) and (
        "accessNotConfigured" in str(exc) or "has not been used in project" in message or "SERVICE_DISABLED" in str(exc)
    ):
        # a project that has not enabled the API: 403 accessNotConfigured, "Compute Engine API has not been
        # used in project N before or it is disabled" (hashicorp/terraform#19912)
        return ComputeError(
            f"{what}: the Compute Engine API is not enabled in this project: gcloud services enable "
            "compute.googleapis.com --project PROJECT (then wait a few minutes)"
        )
    if isinstance(exc, gexc.Conflict):
        return ComputeError(f"{what}: it already exists ({message})")
    if isinstance(exc, gexc.BadRequest) and any(
        (e or {}).get("reason") == "resourceInUseByAnotherResource" for e in getattr(exc, "errors", None) or []
    ):
        return InUse(f"{what}: {message}")
    if isinstance(exc, (gexc.Forbidden, gexc.Unauthorized)):
        return PermissionDenied(
            f"{what}: permission denied ({message}). Use an account with roles/compute.instanceAdmin.v1 on the "
            "project (gcloud auth application-default login), or, on a VM, give its service account that role "
            "and the compute scope."
        )
    return ComputeError(f"{what}: {message}")


def explain_operation_errors(errors: list[tuple[str, str]], what: str, where: str) -> ComputeError:
    """Pure decision: the sentence for an operation that finished with errors (stockout, quota...)."""
    codes = [code for code, _ in errors]
    detail = "; ".join(f"{code}: {message}" for code, message in errors)
    if any(code.startswith("ZONE_RESOURCE_POOL_EXHAUSTED") for code in codes):
        return ComputeError(
            f"{what}: {where} has no capacity for this machine and GPU type right now (a stockout). Try another "
            f"zone (--zone), or a regional MIG (make-group --region) that can place the VM in any zone of the "
            f"region. [{detail}]"
        )
    if any("constraints/compute.vmExternalIpAccess" in message for _, message in errors):
        return ComputeError(
            f"{what}: an organisation policy (constraints/compute.vmExternalIpAccess) forbids the VM an external "
            f"IP. Make the template with --no-external-ip (compute.external_ip: false); the VM then reaches Cloud "
            f"Storage through Private Google Access, which its subnet must have on. [{detail}]"
        )
    if "QUOTA_EXCEEDED" in codes:
        return ComputeError(
            f"{what}: a quota is exceeded. Ask for more in the console (IAM & Admin > Quotas, e.g. "
            f"PREEMPTIBLE_NVIDIA_*_GPUS or GPUS_ALL_REGIONS) or use fewer or smaller GPUs. [{detail}]"
        )
    if any("acceleratorTypes/" in message and "not found" in message for _, message in errors):
        return ComputeError(
            f"{what}: {where} does not offer this GPU. Pick a zone that does (gcloud compute accelerator-types "
            f"list), or a regional MIG, which survivor limits to such zones. [{detail}]"
        )
    if any("PERMISSION" in code or "permission" in message.lower() for code, message in errors):
        return ComputeError(
            f"{what}: permission denied. A MIG creates its VMs as the Google APIs service agent "
            f"(PROJECT_NUMBER@cloudservices.gserviceaccount.com), which must be allowed to use the template's service "
            f"account and image. [{detail}]"
        )
    return ComputeError(f"{what}: the operation failed. [{detail}]")


def group_creation(
    instances: list[dict], errors: list[dict], since: str | None = None
) -> tuple[str, str, list[tuple[str, str]]]:
    """Pure decision: how far a new single-VM group got, from `managed_instances` and `group_errors`.

    ("running", zone, []) once its VM is RUNNING; ("failed", zone, errors) when its creation failed (the
    group keeps retrying, but the operator has to act); else ("waiting", zone, []). Only errors at or
    after `since` (an RFC 3339 time: when this request was made) count: listErrors keeps a group's
    old errors (a first zone's stockout before another zone took the VM, a past recreation). And only
    those naming a VM the group is creating now, in its zone: a regional group that met a stockout in
    one zone and is creating the VM in another during this request is still trying, not failed."""
    for instance in instances:
        if instance["status"] == "RUNNING":
            return "running", instance["zone"], []
    for instance in instances:
        if instance.get("errors"):
            return "failed", instance["zone"], instance["errors"]
    after = _when(since)
    members = {(instance["zone"], instance.get("name")) for instance in instances}
    creating = [
        e
        for e in errors
        if e.get("action") in ("CREATING", "CREATING_WITHOUT_RETRIES", "RECREATING")
        and (after is None or (_when(e.get("timestamp")) or after) >= after)
        and (not instances or _zone_and_name(e.get("instance")) in members)
    ]
    if creating:
        newest = max(
            creating, key=lambda e: _when(e.get("timestamp")) or _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)
        )
        return "failed", _zone_and_name(newest.get("instance"))[0], [(newest["code"], newest["message"])]
    zone = instances[0]["zone"] if instances else ""
    return "waiting", zone, []


def _zone_and_name(url: str | None) -> tuple[str, str]:
    """(zone, name) of an instance URL, full or partial (`projects/P/zones/Z/instances/N`)."""
    parts = (url or "").split("/")
    return (parts[parts.index("zones") + 1] if "zones" in parts else "", parts[-1])


def _when(text: str | None) -> _dt.datetime | None:
    """An RFC 3339 time from the API (aware), or None."""
    if not text:
        return None
    try:
        value = _dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)


def distribution_policy(project: str, zones: list[str]) -> dict:
    """Pure decision: a single-VM regional MIG's distributionPolicy (REST form).

    Target shape ANY: "the group picks zones for creating VM instances to fulfill the requested number
    of VMs within present resource constraints ... Recommended for batch workloads that do not require
    high availability" (https://cloud.google.com/compute/docs/instance-groups/regional-mig-distribution-shape);
    for one VM that means the zone that has room. `zones`: only those that offer the VM's GPU."""
    policy: dict = {"targetShape": "ANY"}
    if zones:
        policy["zones"] = [{"zone": f"projects/{project}/zones/{zone}"} for zone in zones]
    return policy


#: A Compute resource name (discovery document: the `name` pattern of InstanceTemplate,
#: InstanceGroupManager, Instance and Image): RFC 1035, lower case, 1-63 characters.
NAME = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
#: "The maximum character length is 58" for a MIG's baseInstanceName (discovery document,
#: InstanceGroupManager.baseInstanceName), which is the job's name.
BASE_INSTANCE_NAME_MAX = 58
ZONE_NAME = re.compile(r"[a-z]+-[a-z]+[0-9]+-[a-z]")  # us-west1-b, europe-west4-a, me-central2-c
REGION_NAME = re.compile(r"[a-z]+-[a-z]+[0-9]+")  # us-west1


def name_problems(what: str, name: str, *, max_length: int = 63) -> list[str]:
    """Pure decision: why `name` cannot name a template, group or instance (empty when it can)."""
    if NAME.fullmatch(name) and len(name) <= max_length:
        return []
    suggestion = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:max_length].rstrip("-")
    if suggestion and not suggestion[0].isalpha():
        suggestion = "job-" + suggestion
    return [
        f"{what} {name!r}: Compute Engine names are lower-case letters, digits and hyphens, starting with a "
        f"letter, at most {max_length} characters" + (f"; e.g. {suggestion[:max_length]}" if suggestion else "")
    ]


def location_problems(
    zone: str | None, region: str | None, *, regional: bool = True, keys: tuple[str, str] = ("--zone", "--region")
) -> list[str]:
    """Pure decision: a zone that is a region (or the reverse), one line each with the fix.
    `regional`: the command also takes a region (make-group, preflight), so suggest it; `keys`: how
    the zone and the region were given (flags, or compute.zone/compute.region in the spec)."""
    out = []
    zone_key, region_key = keys
    if zone and not ZONE_NAME.fullmatch(zone):
        hint = f"; for the whole region use {region_key} {zone}" if REGION_NAME.fullmatch(zone) and regional else ""
        out.append(
            f"{zone_key} {zone}: not a zone; a zone is a region and a letter, e.g. {zone.rstrip('-')}-b" + hint
            if REGION_NAME.fullmatch(zone)
            else f"{zone_key} {zone}: not a zone (e.g. us-west1-b)"
        )
    if region and not REGION_NAME.fullmatch(region):
        hint = f"; for that one zone use {zone_key} {region}" if ZONE_NAME.fullmatch(region) else ""
        out.append(f"{region_key} {region}: not a region (e.g. us-west1){hint}")
    return out


PROJECT_HINT = "project: give --project, compute.project in the spec, or set GOOGLE_CLOUD_PROJECT"


def find_project(given: str | None, spec: JobSpec | None = None) -> str | None:
    """The project: as given, else the spec's compute.project, else $GOOGLE_CLOUD_PROJECT (or gcloud's)."""
    return (
        given
        or (spec.extra.get("compute", {}).get("project") if spec else None)
        or os.environ.get("GOOGLE_CLOUD_PROJECT")
        or os.environ.get("CLOUDSDK_CORE_PROJECT")
    )


def spec_project(given: str | None, spec: JobSpec) -> str:
    """The project of a command that reads a job spec; SpecError naming the ways to give it when none."""
    project = find_project(given, spec)
    if not project:
        raise SpecError([PROJECT_HINT])
    return project


def group_scope(group: GroupRef) -> tuple[str, str]:
    """("zone", Z) or ("region", R)."""
    return ("zone", group.zone) if group.zone else ("region", group.region or "")


#: The group calls whose body differs in type and keyword between a zonal group (`instanceGroupManagers`)
#: and a regional one (`regionInstanceGroupManagers`), as google-cloud-compute names them:
#: verb -> ((zonal class, keyword), (regional class, keyword)).
_GROUP_BODIES: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "delete_instances": (
        ("InstanceGroupManagersDeleteInstancesRequest", "instance_group_managers_delete_instances_request_resource"),
        (
            "RegionInstanceGroupManagersDeleteInstancesRequest",
            "region_instance_group_managers_delete_instances_request_resource",
        ),
    ),
    "set_instance_template": (
        (
            "InstanceGroupManagersSetInstanceTemplateRequest",
            "instance_group_managers_set_instance_template_request_resource",
        ),
        (
            "RegionInstanceGroupManagersSetTemplateRequest",
            "region_instance_group_managers_set_template_request_resource",
        ),
    ),
    "recreate_instances": (
        (
            "InstanceGroupManagersRecreateInstancesRequest",
            "instance_group_managers_recreate_instances_request_resource",
        ),
        ("RegionInstanceGroupManagersRecreateRequest", "region_instance_group_managers_recreate_request_resource"),
    ),
}


@dataclass(frozen=True)
class GroupCalls:
    """One group's calls, zonal or regional: the one place that tells `instanceGroupManagers` from
    `regionInstanceGroupManagers`. `groups` and `resize_requests` are the clients of the group's scope:
    `at = compute.group_calls(GroupRef("p", "cifar10", region="us-west1"))`, then
    `at.groups.resize(**at.args(size=0))` is regionInstanceGroupManagers.resize with region=us-west1.
    """

    group: GroupRef
    groups: Any
    resize_requests: Any
    v1: Any

    @property
    def where(self) -> str:
        """`zone Z` or `region R`, for a failure's sentence."""
        return " ".join(group_scope(self.group))

    def place(self, **more: Any) -> dict[str, Any]:
        """The keywords of a call on the scope: `project` and `zone=` or `region=` (and `more`)."""
        kind, where = group_scope(self.group)
        return {"project": self.group.project, kind: where, **more}

    def args(self, **more: Any) -> dict[str, Any]:
        """The keywords of a call on the group: its scope's and `instance_group_manager` (and `more`)."""
        return self.place(instance_group_manager=self.group.name, **more)

    def body(self, verb: str, **fields: Any) -> dict[str, Any]:
        """`verb`'s body made of `fields`, under the keyword this scope's client takes it by."""
        cls, keyword = _GROUP_BODIES[verb][0 if self.group.zone else 1]
        return {keyword: getattr(self.v1, cls)(**fields)}


class Compute:
    """The Compute Engine calls survivor makes, for one project."""

    def __init__(
        self,
        project: str,
        endpoint: str | None = None,
        credentials=None,
        deadline: float = 600.0,
        progress: Callable[[str], None] | None = None,
    ):
        from google.cloud import compute_v1

        self.project = project
        self.deadline = deadline
        self.progress = progress
        endpoint = endpoints.COMPUTE.endpoint(endpoint)
        self.endpoint = endpoint  # None: Google's; preflight reads the project's IAM policy there too
        self.v1 = compute_v1
        from google.auth.exceptions import DefaultCredentialsError

        def client(cls):
            """One Compute client; on Google's endpoint with the process's one credential lookup, given
            the scopes the client's own lookup would have asked for."""
            scopes = None if credentials is not None else cls.get_transport_class("rest").AUTH_SCOPES
            return cls(**endpoints.client_kwargs(endpoint, credentials=credentials, scopes=scopes))

        try:
            self.templates = client(compute_v1.InstanceTemplatesClient)
        except DefaultCredentialsError:
            raise ComputeError(
                "no Google Cloud credentials: run `gcloud auth application-default login` (on a VM: give it a "
                f"service account with the compute scope), or point {ENDPOINT_ENV} at survivor's Compute fake"
            ) from None
        self.groups = client(compute_v1.InstanceGroupManagersClient)
        self.region_groups = client(compute_v1.RegionInstanceGroupManagersClient)
        self.resize_requests = client(compute_v1.InstanceGroupManagerResizeRequestsClient)
        self.region_resize_requests = client(compute_v1.RegionInstanceGroupManagerResizeRequestsClient)
        self.instances = client(compute_v1.InstancesClient)
        self.disks = client(compute_v1.DisksClient)
        self.zone_ops = client(compute_v1.ZoneOperationsClient)
        self.region_ops = client(compute_v1.RegionOperationsClient)
        self.global_ops = client(compute_v1.GlobalOperationsClient)
        self.regions = client(compute_v1.RegionsClient)
        self.accelerator_types = client(compute_v1.AcceleratorTypesClient)
        self.images = client(compute_v1.ImagesClient)
        self.projects = client(compute_v1.ProjectsClient)
        self.networks = client(compute_v1.NetworksClient)
        self.subnetworks = client(compute_v1.SubnetworksClient)
        self.routers = client(compute_v1.RoutersClient)
        self.machine_types = client(compute_v1.MachineTypesClient)
        self.advice = client(compute_v1.AdviceClient)

    @classmethod
    def from_environment(cls, project: str) -> "Compute":
        """Default credentials (on a VM: its service account), or the local fake if configured."""
        return cls(project)

    def group_calls(self, group: GroupRef) -> GroupCalls:
        """The clients and keywords of `group`'s calls, zonal or regional."""
        if group.zone:
            return GroupCalls(group, self.groups, self.resize_requests, self.v1)
        return GroupCalls(group, self.region_groups, self.region_resize_requests, self.v1)

    # -- operations -------------------------------------------------------------------------------

    def _wait(self, operation, what: str, where: str) -> None:
        """Waits for an operation to be DONE (with the deadline); raises ComputeError on its errors."""
        op = getattr(operation, "_extended_operation", operation)
        name = op.name
        done = self.v1.Operation.Status.DONE
        deadline = time.monotonic() + self.deadline
        started = time.monotonic()
        while op.status != done:
            if time.monotonic() > deadline:
                raise ComputeError(
                    f"{what}: still not done after {self.deadline:.0f} s (operation {name}); "
                    "check it with gcloud compute operations describe"
                )
            if self.progress:
                self.progress(f"{what}: waiting ({time.monotonic() - started:.0f} s)")
            if op.zone:
                op = self.zone_ops.wait(project=self.project, zone=op.zone.rsplit("/", 1)[-1], operation=name)
            elif op.region:
                op = self.region_ops.wait(project=self.project, region=op.region.rsplit("/", 1)[-1], operation=name)
            else:
                op = self.global_ops.wait(project=self.project, operation=name)
        if op.error and op.error.errors:
            raise explain_operation_errors([(e.code, e.message) for e in op.error.errors], what, where)

    def _call(self, what: str, where: str, fn: Callable[[], Any], wait: bool = True) -> Any:
        try:
            result = fn()
        except ComputeError:
            raise
        except Exception as exc:
            raise explain(exc, what) from exc
        if wait:
            try:
                self._wait(result, what, where)
            except ComputeError:
                raise
            except Exception as exc:
                raise explain(exc, what) from exc
        return result

    # -- capacity data (docs/capacity-data.md) ----------------------------------------------------

    # capacity data (docs/capacity-data.md): `advice.capacity` needs `compute.advice.capacity` (its REST
    # reference, "IAM Permissions"); Compute Viewer holds it (Google's role reference,
    # https://cloud.google.com/iam/docs/roles-permissions/compute, lists it under roles/compute.viewer)
    @needs("compute.advice.capacity", "compute.advice.capacity", role=_VIEWER)
    def capacity_advice(self, region: str, body: dict) -> dict:
        """`advice.capacity` in `region` for a CapacityAdviceRequest REST body: the response as REST
        JSON (`recommendations[].scores`, `.shards`). ComputeError (PermissionDenied for a 403) on
        failure; one call, no retry: the caller falls back to deciding without it."""
        request = self.v1.CapacityAdviceRequest.from_json(json.dumps(body), ignore_unknown_fields=False)
        found = self._call(
            f"capacity advice for {region}",
            f"region {region}",
            lambda: self.advice.capacity(project=self.project, region=region, capacity_advice_request_resource=request),
            wait=False,
        )
        return json.loads(self.v1.CapacityAdviceResponse.to_json(found))

    # `advice.capacityHistory` needs `compute.advice.capacityHistory` (the same sources)
    @needs("compute.advice.capacityHistory", "compute.advice.capacityHistory", role=_VIEWER)
    def capacity_history(self, region: str, body: dict) -> dict:
        """`advice.capacityHistory` in `region` for a CapacityHistoryRequest REST body: the response
        as REST JSON (`preemptionHistory`, `priceHistory`). ComputeError on failure, as above."""
        request = self.v1.CapacityHistoryRequest.from_json(json.dumps(body), ignore_unknown_fields=False)
        found = self._call(
            f"capacity history for {region}",
            f"region {region}",
            lambda: self.advice.capacity_history(
                project=self.project, region=region, capacity_history_request_resource=request
            ),
            wait=False,
        )
        return json.loads(self.v1.CapacityHistoryResponse.to_json(found))

    # -- templates --------------------------------------------------------------------------------

    def template_message(self, body: dict):
        """The request message for a REST body (unknown fields are an error here already)."""
        return self.v1.InstanceTemplate.from_json(json.dumps(body), ignore_unknown_fields=False)

    @needs("compute.instanceTemplates.get", "compute.instanceTemplates.get", vm="deadline", role=_INSTANCE_ADMIN)
    def get_template(self, name: str) -> dict | None:
        """The template's REST body, or None."""
        try:
            template = self._call(
                f"template {name}",
                "global",
                lambda: self.templates.get(project=self.project, instance_template=name),
                wait=False,
            )
        except NotFound:
            return None
        return json.loads(self.v1.InstanceTemplate.to_json(template))

    # the deadline switch makes the on-demand template
    @needs("compute.instanceTemplates.create", "compute.instanceTemplates.insert", vm="deadline", role=_INSTANCE_ADMIN)
    def insert_template(self, body: dict) -> None:
        """Creates the template `body` (REST form) and waits for the operation."""
        message = self.template_message(body)
        self._call(
            f"creating template {body['name']}",
            "global",
            lambda: self.templates.insert(project=self.project, instance_template_resource=message),
        )

    def delete_template(self, name: str) -> None:
        """Deletes the template `name` and waits for the operation."""
        self._call(
            f"deleting template {name}",
            "global",
            lambda: self.templates.delete(project=self.project, instance_template=name),
        )

    # -- managed instance groups ------------------------------------------------------------------

    # the move at boot makes the group in the next region ("To create a MIG:
    # compute.instanceGroupManagers.create on the project", Google's MIG creation guides, e.g.
    # https://docs.cloud.google.com/ai-hypercomputer/docs/create/create-mig-with-a4-or-a3ultra,
    # "Required permissions")
    @needs(
        "compute.instanceGroupManagers.create",
        *both_scopes("instanceGroupManagers", "insert"),
        vm="move",
        role=_INSTANCE_ADMIN,
    )
    def create_group(
        self,
        name: str,
        template: str,
        *,
        zone: str | None = None,
        region: str | None = None,
        size: int = 1,
        distribution: dict | None = None,
        stateful: dict | None = None,
        repairs: bool = True,
    ) -> None:
        """A MIG of `size` from `template`; `distribution` is a regional MIG's distributionPolicy and
        `stateful` its statefulPolicy (REST forms); `repairs=False` turns its repairs off
        (`instanceLifecyclePolicy.defaultActionOnFailure: DO_NOTHING`, as a resize request needs)."""
        body = self.v1.InstanceGroupManager(
            name=name,
            base_instance_name=name,
            target_size=size,
            instance_template=f"projects/{self.project}/global/instanceTemplates/{template}",
        )
        if not repairs:
            body.instance_lifecycle_policy = self.v1.InstanceGroupManagerInstanceLifecyclePolicy(
                default_action_on_failure="DO_NOTHING"
            )
        if stateful:
            body.stateful_policy = self.v1.StatefulPolicy.from_json(json.dumps(stateful))
            if region:  # zonal disks: no proactive redistribution ("Configuring stateful MIGs", limitations)
                body.update_policy = self.v1.InstanceGroupManagerUpdatePolicy(instance_redistribution_type="NONE")
        if distribution:
            body.distribution_policy = self.v1.DistributionPolicy.from_json(json.dumps(distribution))
        at = self.group_calls(GroupRef(self.project, name, zone=zone, region=region))
        self._call(
            f"creating group {name}",
            at.where,
            lambda: at.groups.insert(**at.place(instance_group_manager_resource=body)),
        )

    @needs(
        "compute.instanceGroupManagers.get",
        *both_scopes("instanceGroupManagers", "get"),
        vm="deadline",
        role=_INSTANCE_ADMIN,
    )
    def get_group(self, group: GroupRef) -> dict | None:
        """The group's REST body, or None when it does not exist."""
        at = self.group_calls(group)
        try:
            found = self._call(f"group {group.name}", at.where, lambda: at.groups.get(**at.args()), wait=False)
        except NotFound:
            return None
        return json.loads(self.v1.InstanceGroupManager.to_json(found))

    def list_groups(self) -> list[tuple[GroupRef, dict]]:
        """Every group of the project, zonal and regional, with its REST body: one
        `instanceGroupManagers.aggregatedList`, whose answer keys both `zones/Z` and `regions/R` scopes
        (the method "groups them by zone", yet gcloud's `compute instance-groups managed list` reads
        regional groups from it too: google-cloud-sdk lib/surface/compute/instance_groups/managed/list.py,
        `aggregation_service=instanceGroupManagers`; forseti-security/forseti-security#507). A scope
        without groups carries only a warning."""
        pages = self._call(
            "listing the project's groups",
            "every zone and region",
            lambda: self.groups.aggregated_list(project=self.project),
            wait=False,
        )
        found = []
        try:
            for scope, listed in pages:
                for group in listed.instance_group_managers:
                    ref = GroupRef.of_scope(self.project, group.name, scope)
                    found.append((ref, json.loads(self.v1.InstanceGroupManager.to_json(group))))
        except Exception as exc:  # a later page's request failed
            raise explain(exc, "listing the project's groups") from exc
        return found

    @needs(
        "compute.instanceGroupManagers.update", *both_scopes("instanceGroupManagers", "resize"), role=_INSTANCE_ADMIN
    )
    def resize_group(self, group: GroupRef, size: int) -> None:
        """Sets the group's target size (0 stops its VM gracefully, 1 starts one) and waits."""
        at = self.group_calls(group)
        self._call(f"resizing group {group.name} to {size}", at.where, lambda: at.groups.resize(**at.args(size=size)))

    # the move at boot deletes the old group (`compute.instanceGroupManagers.delete`, in the same
    # `compute.instanceGroupManagers.*` family the roles reference lists)
    @needs(
        "compute.instanceGroupManagers.delete",
        *both_scopes("instanceGroupManagers", "delete"),
        vm="move",
        role=_INSTANCE_ADMIN,
    )
    def delete_group(self, group: GroupRef) -> None:
        """Deletes the group (and so its VM) and waits for the operation."""
        at = self.group_calls(group)
        self._call(f"deleting group {group.name}", at.where, lambda: at.groups.delete(**at.args()))

    @needs("compute.instanceGroupManagers.update", *both_scopes("instanceGroupManagers", "patch"), role=_INSTANCE_ADMIN)
    def patch_group(self, group: GroupRef, patch: dict) -> None:
        """`instanceGroupManagers.patch` (JSON merge patch) of the group with `patch` (REST form: e.g.
        `{"instanceLifecyclePolicy": {"defaultActionOnFailure": "DO_NOTHING"}}`); waits."""
        at = self.group_calls(group)
        body = self.v1.InstanceGroupManager.from_json(json.dumps(patch))
        self._call(
            f"changing group {group.name}",
            at.where,
            lambda: at.groups.patch(**at.args(instance_group_manager_resource=body)),
        )

    # "Authorization requires the following IAM permission on the specified resource
    # instanceGroupManager: compute.instanceGroupManagers.update"
    # (https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers/setInstanceTemplate)
    @needs(
        "compute.instanceGroupManagers.update",
        *both_scopes("instanceGroupManagers", "setInstanceTemplate"),
        vm="deadline",
        role=_INSTANCE_ADMIN,
    )
    def set_group_template(self, group: GroupRef, template: str) -> None:
        """`setInstanceTemplate`: the template the group creates its instances from from now on; waits.

        "The templates for existing instances in the group do not change unless you run
        recreateInstances" (https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers/setInstanceTemplate),
        hence `recreate_instances` after it."""
        at = self.group_calls(group)
        body = at.body(
            "set_instance_template", instance_template=f"projects/{group.project}/global/instanceTemplates/{template}"
        )
        self._call(
            f"setting the template of {group.name}",
            at.where,
            lambda: at.groups.set_instance_template(**at.args(**body)),
        )

    @needs(
        "compute.instanceGroupManagers.update",
        *both_scopes("instanceGroupManagers", "recreateInstances"),
        vm="deadline",
        role=_INSTANCE_ADMIN,
    )
    def recreate_instances(self, group: GroupRef, instances: list[tuple[str, str]]) -> None:
        """`recreateInstances` of (zone, name) members: each is deleted (a graceful stop: the agent
        saves) and created again from the group's current template; waits."""
        at = self.group_calls(group)
        body = at.body("recreate_instances", instances=[f"zones/{zone}/instances/{name}" for zone, name in instances])
        self._call(
            f"recreating the instances of {group.name}",
            at.where,
            lambda: at.groups.recreate_instances(**at.args(**body)),
        )

    # -- resize requests (flex-start: docs/flex-start.md) -------------------------------------------

    # resize requests: "Authorization requires ... compute.instanceGroupManagers.update" (insert's REST
    # reference, https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagerResizeRequests/insert);
    # cancelling one is taken to need the same
    @needs(
        "compute.instanceGroupManagers.update",
        *both_scopes("instanceGroupManagerResizeRequests", "insert"),
        role=_INSTANCE_ADMIN,
    )
    def request_resize(self, group: GroupRef, name: str, count: int, run_seconds: int) -> None:
        """A resize request: `count` VMs created all at once when Dynamic Workload Scheduler has the
        capacity, each deleted after `run_seconds` (600 to 604800: 10 minutes to 7 days); waits for the
        insert, not for the VMs (`resize_request` tells the state: CREATING, ACCEPTED, SUCCEEDED...)."""
        at = self.group_calls(group)
        body = self.v1.InstanceGroupManagerResizeRequest(
            name=name, resize_by=count, requested_run_duration=self.v1.Duration(seconds=int(run_seconds))
        )
        self._call(
            f"requesting {count} flex-start VM(s) for {group.name}",
            at.where,
            lambda: at.resize_requests.insert(**at.args(instance_group_manager_resize_request_resource=body)),
        )

    # reading resize requests is taken to need .get, as reading the group does (an assumption)
    @needs(
        "compute.instanceGroupManagers.get",
        *both_scopes("instanceGroupManagerResizeRequests", "get"),
        role=_INSTANCE_ADMIN,
    )
    def resize_request(self, group: GroupRef, name: str) -> dict | None:
        """The resize request's REST body (its `state` above all), or None when there is none."""
        at = self.group_calls(group)
        try:
            found = self._call(
                f"resize request {name} of {group.name}",
                at.where,
                lambda: at.resize_requests.get(**at.args(resize_request=name)),
                wait=False,
            )
        except NotFound:
            return None
        return json.loads(self.v1.InstanceGroupManagerResizeRequest.to_json(found))

    @needs(
        "compute.instanceGroupManagers.get",
        *both_scopes("instanceGroupManagerResizeRequests", "list"),
        role=_INSTANCE_ADMIN,
    )
    def resize_requests_of(self, group: GroupRef) -> list[dict]:
        """Every resize request of the group (REST bodies; the client pages through them)."""
        at = self.group_calls(group)
        pages = self._call(
            f"resize requests of {group.name}", at.where, lambda: at.resize_requests.list(**at.args()), wait=False
        )
        return [json.loads(self.v1.InstanceGroupManagerResizeRequest.to_json(r)) for r in pages]

    # and so is deleting one, which survivor never calls (the Compute fake serves it and holds it to this)
    @needs(
        "compute.instanceGroupManagers.update",
        *both_scopes("instanceGroupManagerResizeRequests", "cancel"),
        *both_scopes("instanceGroupManagerResizeRequests", "delete"),
        role=_INSTANCE_ADMIN,
    )
    def cancel_resize_request(self, group: GroupRef, name: str) -> None:
        """Cancels a request still queued (ACCEPTED) and waits; the API refuses any other."""
        at = self.group_calls(group)
        self._call(
            f"cancelling resize request {name} of {group.name}",
            at.where,
            lambda: at.resize_requests.cancel(**at.args(resize_request=name)),
        )

    @needs(
        "compute.instanceGroupManagers.get",
        *both_scopes("instanceGroupManagers", "listManagedInstances"),
        vm="deadline",
        role=_INSTANCE_ADMIN,
    )
    def managed_instances(self, group: GroupRef) -> list[dict]:
        """The group's instances: name, zone, status, current action."""
        at = self.group_calls(group)
        pager = self._call(
            f"listing the instances of {group.name}",
            at.where,
            lambda: at.groups.list_managed_instances(**at.args()),
            wait=False,
        )
        out = []
        for item in pager:
            parts = item.instance.split("/")
            errors = [(e.code, e.message) for e in item.last_attempt.errors.errors] if item.last_attempt else []
            out.append(
                {
                    "name": parts[-1],
                    "zone": parts[parts.index("zones") + 1] if "zones" in parts else "",
                    "status": item.instance_status,
                    "action": item.current_action,
                    "errors": errors,
                    "template": (item.version.instance_template or "").rsplit("/", 1)[-1],
                }
            )
        return out

    @needs(
        "compute.instanceGroupManagers.get",
        *both_scopes("instanceGroupManagers", "listErrors"),
        vm="deadline",
        role=_INSTANCE_ADMIN,
    )
    def group_errors(self, group: GroupRef) -> list[dict]:
        """The MIG's `listErrors`, newest first (sorted here: the method takes no orderBy or filter and
        documents no order, https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers/listErrors):
        code, message, action, instance, timestamp."""
        at = self.group_calls(group)
        pager = self._call(
            f"listing the errors of {group.name}", at.where, lambda: at.groups.list_errors(**at.args()), wait=False
        )
        errors = [
            {
                "code": item.error.code,
                "message": item.error.message,
                "timestamp": item.timestamp,
                "action": item.instance_action_details.action,
                "instance": item.instance_action_details.instance,
            }
            for item in pager
        ]
        oldest = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)
        return sorted(errors, key=lambda e: _when(e["timestamp"]) or oldest, reverse=True)

    # "requires the following IAM permission on the specified resource instanceGroupManager:
    # compute.instanceGroupManagers.update"
    # (https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers/deleteInstances)
    @needs(
        "compute.instanceGroupManagers.update",
        *both_scopes("instanceGroupManagers", "deleteInstances"),
        vm="every",
        role=_INSTANCE_ADMIN,
    )
    def leave_group(self, group: GroupRef, zone: str, instance: str) -> None:
        """Deletes `instance` through its MIG, which lowers the target size: nothing is recreated."""
        at = self.group_calls(group)
        body = at.body("delete_instances", instances=[f"zones/{zone}/instances/{instance}"])
        self._call(f"leaving group {group.name}", at.where, lambda: at.groups.delete_instances(**at.args(**body)))

    # -- what preflight reads ---------------------------------------------------------------------

    # the move reads the next region's zones ("Authorization requires the following IAM permission on
    # the specified resource region: compute.regions.get",
    # https://cloud.google.com/compute/docs/reference/rest/v1/regions/get; without it a VM with the
    # guide's custom role never moved)
    @needs("compute.regions.get", "compute.regions.get", vm="move", role=_VIEWER)
    def region(self, region: str) -> dict:
        """`regions.get`: the region's zones (names) and quotas ({metric: (limit, usage)})."""
        found = self._call(
            f"region {region}",
            f"region {region}",
            lambda: self.regions.get(project=self.project, region=region),
            wait=False,
        )
        return {
            "zones": [z.rsplit("/", 1)[-1] for z in found.zones],
            "quotas": {q.metric: (q.limit, q.usage) for q in found.quotas},
        }

    # the move lists the accelerator types of the next region's zones
    @needs("compute.acceleratorTypes.list", "compute.acceleratorTypes.list", vm="move", role=_VIEWER)
    def zone_accelerators(self, zone: str) -> dict[str, int]:
        """The GPU types a zone offers: name -> maximumCardsPerInstance (`acceleratorTypes.list`)."""
        pager = self._call(
            f"accelerator types of {zone}",
            f"zone {zone}",
            lambda: self.accelerator_types.list(project=self.project, zone=zone),
            wait=False,
        )
        return {item.name: item.maximum_cards_per_instance for item in pager}

    def image_from_family(self, project: str, family: str) -> dict | None:
        """The newest image of a family (`images.getFromFamily`), or None when there is none."""
        try:
            found = self._call(
                f"image family {project}/{family}",
                "global",
                lambda: self.images.get_from_family(project=project, family=family),
                wait=False,
            )
        except NotFound:
            return None
        return {
            "name": found.name,
            "self_link": found.self_link,
            "status": found.status,
            "disk_size_gb": int(found.disk_size_gb or 0),
        }

    def insert_image(self, body: dict) -> None:
        """`images.insert` (e.g. from a builder's `sourceDisk`); waits for the operation."""
        message = self.v1.Image.from_json(json.dumps(body), ignore_unknown_fields=False)
        self._call(
            f"creating image {body['name']}",
            "global",
            lambda: self.images.insert(project=self.project, image_resource=message),
        )

    def project_quotas(self) -> dict[str, tuple[float, float]]:
        """The project's global quotas from `projects.get` ({metric: (limit, usage)}), GPUS_ALL_REGIONS among them."""
        found = self._call(
            f"project {self.project}", "global", lambda: self.projects.get(project=self.project), wait=False
        )
        return {q.metric: (q.limit, q.usage) for q in found.quotas}

    def network_exists(self, network: str) -> bool:
        """Whether the VPC network (a name, or `global/networks/NAME`) exists (`networks.get`)."""
        name = network.rsplit("/", 1)[-1]
        try:
            self._call(
                f"network {name}", "global", lambda: self.networks.get(project=self.project, network=name), wait=False
            )
        except NotFound:
            return False
        return True

    def subnets(self, region: str) -> list[dict]:
        """The project's subnets in `region` (`subnetworks.list`): name, network (name), and whether
        Private Google Access is on."""
        pager = self._call(
            f"subnets of {region}",
            f"region {region}",
            lambda: self.subnetworks.list(project=self.project, region=region),
            wait=False,
        )
        return [
            {
                "name": s.name,
                "network": s.network.rsplit("/", 1)[-1],
                "private_google_access": bool(s.private_ip_google_access),
            }
            for s in pager
        ]

    def nat_gateways(self, region: str) -> list[dict]:
        """The Cloud NAT gateways of the Cloud Routers in `region` (`routers.list`, each router's `nats`):
        network (name), which subnets they serve (`sourceSubnetworkIpRangesToNat`) and, for
        LIST_OF_SUBNETWORKS, the subnets' names."""
        pager = self._call(
            f"routers of {region}",
            f"region {region}",
            lambda: self.routers.list(project=self.project, region=region),
            wait=False,
        )
        return [
            {
                "router": r.name,
                "network": r.network.rsplit("/", 1)[-1],
                "name": n.name,
                "ranges": n.source_subnetwork_ip_ranges_to_nat,
                "subnets": [x.name.rsplit("/", 1)[-1] for x in n.subnetworks],
            }
            for r in pager
            for n in r.nats
        ]

    def machine_vcpus(self, zone: str, machine_type: str) -> int | None:
        """The vCPUs of a machine type in a zone (`machineTypes.get`: `guestCpus`), None when the zone
        has no such type."""
        name = machine_type.rsplit("/", 1)[-1]
        try:
            found = self._call(
                f"machine type {name}",
                f"zone {zone}",
                lambda: self.machine_types.get(project=self.project, zone=zone, machine_type=name),
                wait=False,
            )
        except NotFound:
            return None
        return int(found.guest_cpus)

    def default_service_account(self) -> str:
        """The project's Compute Engine default service account (`projects.get`)."""
        found = self._call(
            f"project {self.project}", "global", lambda: self.projects.get(project=self.project), wait=False
        )
        return found.default_service_account

    # -- instances --------------------------------------------------------------------------------

    def insert_instance(self, zone: str, body: dict) -> None:
        """`instances.insert` of a standalone VM (e.g. make-image's builder); waits for the operation."""
        message = self.v1.Instance.from_json(json.dumps(body), ignore_unknown_fields=False)
        self._call(
            f"creating instance {body['name']}",
            f"zone {zone}",
            lambda: self.instances.insert(project=self.project, zone=zone, instance_resource=message),
        )

    def get_instance(self, zone: str, name: str) -> dict | None:
        """The instance's REST body, or None when it does not exist."""
        try:
            found = self._call(
                f"instance {name}",
                f"zone {zone}",
                lambda: self.instances.get(project=self.project, zone=zone, instance=name),
                wait=False,
            )
        except NotFound:
            return None
        return json.loads(self.v1.Instance.to_json(found))

    # a VM outside a group stops itself once its job is done (`on_finish: stop`): "To stop an
    # instance: compute.instances.stop on the instance" (https://cloud.google.com/compute/docs/instances/restarting-an-instance,
    # "Required permissions"; Compute Instance Admin (v1) holds it)
    @needs("compute.instances.stop", "compute.instances.stop", role=_INSTANCE_ADMIN)
    def stop_instance(self, project: str, zone: str, instance: str) -> None:
        """Stops the instance (ACPI soft off: the agent saves first) and waits."""
        self._call(
            f"stopping {instance}",
            f"zone {zone}",
            lambda: self.instances.stop(project=project, zone=zone, instance=instance),
        )

    def start_instance(self, zone: str, instance: str) -> None:
        """Starts the stopped instance and waits."""
        self._call(
            f"starting {instance}",
            f"zone {zone}",
            lambda: self.instances.start(project=self.project, zone=zone, instance=instance),
        )

    # ... or deletes itself (`on_finish: delete`): `compute.instances.delete`, the permission of the
    # method's own name, which Compute Instance Admin (v1) holds (survivor/local/iam_roles.json)
    @needs("compute.instances.delete", "compute.instances.delete", role=_INSTANCE_ADMIN)
    def delete_instance(self, project: str, zone: str, instance: str) -> None:
        """Deletes the instance and waits."""
        self._call(
            f"deleting {instance}",
            f"zone {zone}",
            lambda: self.instances.delete(project=project, zone=zone, instance=instance),
        )

    def labelled_disks(self, key: str, value: str) -> list[dict]:
        """Every disk of the project, in any zone, whose label `key` is `value`: one `disks.aggregatedList`
        with the filter `labels.KEY = VALUE` (the method's `filter` parameter: "You can use filtering on
        nested fields to filter based on resource labels", the Compute v1 discovery document). Each as a
        dict: name, zone, size_gb, disk_type, users (the instances it is attached to), labels."""
        what = f"listing the disks labelled {key}={value}"
        pages = self._call(
            what,
            "every zone",
            lambda: self.disks.aggregated_list(
                request=self.v1.AggregatedListDisksRequest(project=self.project, filter=f"labels.{key} = {value}")
            ),
            wait=False,
        )
        found = []
        try:
            for scope, listed in pages:
                for disk in listed.disks:
                    found.append(
                        {
                            "name": disk.name,
                            "zone": (disk.zone or scope).rsplit("/", 1)[-1],
                            "size_gb": int(disk.size_gb or 0),
                            "disk_type": (disk.type_ or "").rsplit("/", 1)[-1],
                            "users": [u.split("/compute/v1/", 1)[-1] for u in disk.users],
                            "labels": dict(disk.labels),
                        }
                    )
        except Exception as exc:  # a later page's request failed
            raise explain(exc, what) from exc
        return found

    def delete_disk(self, zone: str, name: str) -> None:
        """Deletes a disk and waits; InUse while an instance still has it attached."""
        self._call(
            f"deleting disk {name}",
            f"zone {zone}",
            lambda: self.disks.delete(project=self.project, zone=zone, disk=name),
        )

    def serial_output(self, zone: str, instance: str, start: int = 0) -> tuple[str, int]:
        """The instance's serial port output from byte `start`, and the offset to ask for next."""
        out = self._call(
            f"serial port of {instance}",
            f"zone {zone}",
            lambda: self.instances.get_serial_port_output(
                request=self.v1.GetSerialPortOutputInstanceRequest(
                    project=self.project, zone=zone, instance=instance, start=start
                )
            ),
            wait=False,
        )
        return out.contents, int(out.next_ or 0)

    def guest_attributes(self, zone: str, instance: str, namespace: str = "survivor") -> dict[str, str]:
        """The guest attributes the agent wrote under `namespace` (empty when there are none yet)."""
        try:
            out = self._call(
                f"guest attributes of {instance}",
                f"zone {zone}",
                lambda: self.instances.get_guest_attributes(
                    request=self.v1.GetGuestAttributesInstanceRequest(
                        project=self.project, zone=zone, instance=instance, query_path=f"{namespace}/"
                    )
                ),
                wait=False,
            )
        except NotFound:
            return {}
        return {item.key: item.value for item in out.query_value.items}
