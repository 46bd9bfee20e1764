"""A fake Compute Engine REST API that the real google-cloud-compute client talks to.

    >>> server = ComputeServer().start()                   # 127.0.0.1:PORT
    >>> client = compute_v1.InstanceTemplatesClient(
    ...     credentials=AnonymousCredentials(), client_options={"api_endpoint": server.endpoint})

Every request is matched against the Compute v1 discovery document shipped (offline) with
google-api-python-client: an unknown path or method is a 404, a query parameter the method does not
take or an enum value it does not know is a 400, and every request body is validated against its
schema -- an unknown (misspelt) field, a wrong type or a bad enum fails the call as the real API would.

Implemented with real semantics: instanceTemplates (insert/get/list/delete, 409 on duplicates),
instanceGroupManagers and regionInstanceGroupManagers (insert/get/delete/resize/deleteInstances/
listManagedInstances/setInstanceTemplate/recreateInstances; the MIG keeps `targetSize` instances and recreates one that was stopped or
deleted by anything but itself; instanceGroupManagers.aggregatedList lists both kinds), instances (get/start/stop/delete/getSerialPortOutput/
getGuestAttributes), zone/region/global operations (get and wait; operations start RUNNING and are
DONE when next looked at), and a MIG's resize requests (instanceGroupManagerResizeRequests and the
regional ones: insert/get/list/cancel/delete; docs/flex-start.md): CREATING, ACCEPTED at the next
look, then SUCCEEDED with the group grown by `resizeBy` at the look after while `flex_start_capacity`
holds (else still ACCEPTED, with `flex_start_last_attempt` as its `status.lastAttempt.error`);
`end_flex_start_runs` ends their run durations; refused with a run duration outside 10 min to 7 days,
on a group with an autoscaler (`attach_autoscaler`) or with repairs on, a regional group not
ANY_SINGLE_ZONE, or whose template is not a FLEX_START one of a machine flex-start runs that consumes
NO_RESERVATION. instanceGroupManagers.patch changes a group's repairs, target shape and update policy;
a group with repairs off (DO_NOTHING) recreates nothing deleted or stopped outside it.
Failures can be injected per method: an HTTP error (403 ...) or an
operation error (`ZONE_RESOURCE_POOL_EXHAUSTED`, `QUOTA_EXCEEDED`).

Compute Engine rules the discovery document does not carry (survivor/cloud/machines.py: GPUs built into
a2/a3/g2, N1 GPU counts, TERMINATE for GPU VMs, Spot without automatic restart, the 120 s notice)
are enforced on `instanceTemplates.insert` with a 400 in the API's words. The real API may answer
some of them only when an instance is created; the fake answers them at once, so that a template
survivor builds wrong fails a test instead of a MIG.

A MIG's instance creation can fail the way a real one does -- a stockout, a quota, a GPU the zone
does not offer: the group's insert or resize operation still succeeds, the member stays in
`currentAction: CREATING` with `lastAttempt.errors`, the error is listed by `listErrors`, and every
later look at the group retries the creation (as "it will try again until it is successful",
discovery document, `ManagedInstance.currentAction`). `fail_instance_creation` injects such failures;
`hold_instance_creation` keeps a VM being provisioned (no status, no error) for a few looks;
`follow_capacity` refuses Spot VMs in each zone while a Spot trace in the published Can't Be Late
format (survivor/local/traces.py `load`) says that zone had no capacity, its time scaled.

For preflight checks the fake serves `regions.get` (quotas), `acceleratorTypes.list/get`
(`zone_accelerators`: which zone offers which GPU and the most one VM takes, each GPU's record's,
survivor/cloud/hardware.py `Gpu.zones` and `max_per_vm`), `images.getFromFamily` and
`projects.get`; `set_quota`, `accelerators` and `add_image_family` seed them. It also serves Resource
Manager's `POST /v3/projects/P:getIamPolicy` and IAM's `roles.get`: `GET /v1/roles/R` for a predefined
role (survivor/local/iam_roles.py, from a dump of the real answers) and `GET /v1/projects/P/roles/R` for
a custom one (`custom_roles`) (the project's IAM policy, `set_project_policy`; by default
the Compute Engine default service account has Editor, as older projects grant it), and enforces that
policy on `caller` (None: every call is allowed): the group and template calls a VM makes need the
permission survivor/cloud/permissions.py's `METHOD_PERMISSIONS` names, granted by a role as
`roles.get` lists it (what preflight reads), else a 403 in the API's words ("Required
'compute.instanceGroupManagers.update' permission for 'projects/P/zones/Z/instanceGroupManagers/G'").

`on_instance_created` / `on_instance_deleted` let the local simulator attach a running agent to each
instance the MIG creates.
"""

from __future__ import annotations

import base64
import datetime as _dt
import itertools
import json
import os
import random
import re
import signal
import string
import sys
import threading
import time
from typing import Any, Callable, Sequence
from urllib.parse import parse_qs, urlsplit

from survivor.cloud import hardware, machines, permissions
from survivor.extras import require
from survivor.local.capacity_advice import AdviceServing
from survivor.local.iam_roles import PREDEFINED_ROLES, role_resource
from survivor.local.http import HttpError, LocalService, QuietHandler, send_json
from survivor.places import region_of_zone

BASE = "/compute/v1/"
PROJECT_NUMBER = "123456789012"
DEFAULT_ACCOUNT = f"{PROJECT_NUMBER}-compute@developer.gserviceaccount.com"


def guest_cpus(machine_type: str) -> int | None:
    """The vCPUs `machineTypes.get` reports as `guestCpus`: the number a predefined shape's name ends in
    (n1-standard-8, g2-standard-24), or for shapes named by their GPUs their record's `vcpus`
    (survivor/cloud/hardware.py: a2-highgpu-1g 12, a3-highgpu-8g 208). None (a 404) for a shape the
    fake does not know."""
    m = re.fullmatch(r"[a-z0-9]+-[a-z]+-(\d+)", machine_type)
    if m:
        return int(m.group(1))
    shape = hardware.shape(machine_type)
    return shape.vcpus if shape else None


def zone_accelerators() -> dict[str, dict[str, int]]:
    """Each zone's GPUs as `acceleratorTypes` reports them: type -> maximumCardsPerInstance, from the
    GPUs' records when called (survivor/cloud/hardware.py: `Gpu.zones`, the zones that offer it, a
    slice of Google's table with its source there; `Gpu.max_per_vm`, the most one VM takes). Tests
    change `server.accelerators` for their own cases."""
    offered: dict[str, dict[str, int]] = {}
    for gpu in hardware.GPUS.values():
        for zone in gpu.zones:
            offered.setdefault(zone, {})[gpu.name] = gpu.max_per_vm
    return offered


DEFAULT_GPU_QUOTA = 8.0  # per regional GPU metric unless a test sets another with set_quota
DEFAULT_CPU_QUOTA = 512.0  # per regional vCPU metric (CPUS, N2_CPUS...), likewise
DEFAULT_IMAGE_FAMILIES = [
    ("deeplearning-platform-release", "common-cu129-ubuntu-2404-nvidia-580"),
    ("deeplearning-platform-release", "common-cu128-ubuntu-2404-nvidia-570"),
    ("deeplearning-platform-release", "common-cu128-ubuntu-2204-nvidia-570"),
]


class SchemaError(ValueError):
    """A request that does not fit the discovery document."""


class PatternError(SchemaError):
    """A string that does not match its field's pattern (a name); the message is the API's whole answer."""


def discovery() -> dict:
    """The Compute v1 discovery document bundled with google-api-python-client."""
    require("googleapiclient", "operator", "survivor's Compute fake (its discovery document)")
    from googleapiclient.discovery_cache import get_static_doc

    return json.loads(get_static_doc("compute", "v1"))


class Validator:
    """Checks JSON values against the discovery document's schemas."""

    def __init__(self, schemas: dict):
        self.schemas = schemas

    def check(self, value: Any, schema: dict, where: str) -> None:
        """Raises HttpError(400) naming `where` if `value` does not fit the discovery document's `schema`."""
        if "$ref" in schema:
            return self.check(value, self.schemas[schema["$ref"]], where)
        kind = schema.get("type")
        if kind == "object":
            if not isinstance(value, dict):
                raise SchemaError(f"{where}: expected an object, got {type(value).__name__}")
            properties = schema.get("properties", {})
            extra = schema.get("additionalProperties")
            for key, item in value.items():
                if key in properties:
                    self.check(item, properties[key], f"{where}.{key}")
                elif extra is not None:
                    self.check(item, extra, f"{where}.{key}")
                else:
                    raise SchemaError(f"{where}: unknown field {key!r}")
        elif kind == "array":
            if not isinstance(value, list):
                raise SchemaError(f"{where}: expected an array, got {type(value).__name__}")
            for i, item in enumerate(value):
                self.check(item, schema.get("items", {}), f"{where}[{i}]")
        elif kind == "string":
            fmt = schema.get("format")
            if fmt in ("int64", "uint64"):
                if isinstance(value, bool) or not (
                    isinstance(value, int) or (isinstance(value, str) and re.fullmatch(r"-?\d+", value))
                ):
                    raise SchemaError(f"{where}: expected an {fmt} (a string of digits), got {value!r}")
                return
            if not isinstance(value, str):
                raise SchemaError(f"{where}: expected a string, got {value!r}")
            if "enum" in schema and value not in schema["enum"]:
                raise SchemaError(f"{where}: {value!r} is not one of {schema['enum']}")
            if "pattern" in schema and not re.fullmatch(schema["pattern"], value):
                # the API's words (DefangLabs/defang#1665: "Invalid value for field 'resource.name': '...'.
                # Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
                field = "resource" + where[where.index(".") :] if "." in where else where
                raise PatternError(
                    f"Invalid value for field '{field}': '{value}'. Must be a match of regex '(?:{schema['pattern']})'"
                )
        elif kind == "integer":
            if isinstance(value, bool) or not (
                isinstance(value, int) or (isinstance(value, str) and re.fullmatch(r"-?\d+", value))
            ):
                raise SchemaError(f"{where}: expected an integer, got {value!r}")
        elif kind == "number":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SchemaError(f"{where}: expected a number, got {value!r}")
        elif kind == "boolean":
            if not isinstance(value, bool):
                raise SchemaError(f"{where}: expected true or false, got {value!r}")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _items(vm: dict) -> dict[str, str]:
    """An instance's metadata items as a dict."""
    return {i["key"]: i.get("value", "") for i in vm.get("metadata", {}).get("items", [])}


def _tail(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


class ComputeServer(AdviceServing, LocalService):
    """The fake. Thread-safe; state is plain dicts a test can read."""

    thread_name = "compute-fake"

    def __init__(self, port: int = 0, zones_per_region: int = 3):
        doc = discovery()
        self.validator = Validator(doc["schemas"])
        #: the regional vCPU metrics regions.get reports: CPUS and each family's (Quota.metric, not committed ones)
        self.cpu_metrics = sorted(
            m
            for m in doc["schemas"]["Quota"]["properties"]["metric"]["enum"]
            if m.endswith("_CPUS") and not m.startswith(("COMMITTED_", "PREEMPTIBLE_")) and m != "CPUS_ALL_REGIONS"
        ) + ["CPUS"]
        self.routes = self._routes(doc)
        self.zones_per_region = zones_per_region
        self.lock = threading.RLock()
        self.templates: dict[tuple[str, str], dict] = {}  # (project, name)
        self.groups: dict[tuple[str, str, str], dict] = {}  # (project, "zones/Z" | "regions/R", name)
        self.instances: dict[tuple[str, str, str], dict] = {}  # (project, zone, name)
        #: persistent disks beside the boot disk that a group's VMs were made with (a job's state disk):
        #: (project, zone, name) -> Disk body, its `users` the instances it is attached to
        self.disks: dict[tuple[str, str, str], dict] = {}
        self.operations: dict[str, dict] = {}
        self.requests: list[tuple[str, str, Any]] = []  # (method id, path, body) for tests to inspect
        self.failures: dict[str, list[tuple[str, Any]]] = {}
        self.on_instance_created: list[Callable[[dict], None]] = []
        self.on_instance_deleted: list[Callable[[dict], None]] = []
        self.accelerators: dict[str, dict[str, int]] = zone_accelerators()
        self.quotas: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}  # (project, region) -> metric
        self.images: dict[tuple[str, str], dict] = {}  # (project, family) -> image
        self.creation_failures: list[dict] = []
        self.creation_holds = 0  # hold_instance_creation
        #: whether an accepted flex-start resize request is provisioned at its next look (False: it waits)
        self.flex_start_capacity = True
        #: (code, message): an ACCEPTED resize request ends FAILED with this error at its next look
        self.flex_start_failure: tuple[str, str] | None = None
        #: (code, message): what an ACCEPTED request waiting for capacity reports as its last attempt
        self.flex_start_last_attempt: tuple[str, str] | None = None
        #: follow_capacity: the trace, trace seconds per real second, the fake's zone of each trace
        #: zone, and the clock and its reading at the trace's hour 0
        self.capacity_trace: tuple[Any, float, dict[str, str], Callable[[], float], float] | None = None
        #: projects whose organisation policy denies external IPs (constraints/compute.vmExternalIpAccess)
        self.external_ip_denied: set[str] = set()
        #: projects whose Compute Engine API is disabled: every call gets the API's 403 accessNotConfigured
        self.api_disabled: set[str] = set()
        #: the VPC networks of each project (a project without one listed has `default`, as a new project does)
        self.networks: dict[str, set[str]] = {}
        #: custom-mode networks: (project, network) -> the regions it has a subnet in (a network not here is
        #: in auto mode, which "starts with one subnet per region", the discovery document's
        #: Network.autoCreateSubnetworks)
        self.custom_subnets: dict[tuple[str, str], set[str]] = {}
        #: Cloud Routers: (project, region) -> [Router bodies] (`routers.list`), with their `nats` (Cloud NAT)
        self.routers: dict[tuple[str, str], list[dict]] = {}
        #: project-wide quotas projects.get reports ({metric: (limit, usage)}), GPUS_ALL_REGIONS above all
        self.project_quotas: dict[str, dict[str, tuple[float, float]]] = {}
        #: project -> its IAM policy's bindings (Resource Manager's getIamPolicy); `caller`: the member
        #: whose calls are checked against it (None: anyone may do anything, as before)
        self.project_policies: dict[str, list[dict]] = {}
        self.caller: str | None = None
        #: custom roles (`projects/P/roles/R`) -> their includedPermissions, served as IAM's roles.get
        self.custom_roles: dict[str, list[str]] = {}
        #: a builder VM (survivor-mode=build) does on its own what startup.sh's build mode does: records
        #: "built" in its job dir and powers off; a test that plays the builder itself sets this False
        self.play_builders = True
        self._ids = itertools.count(1000000000000000000)
        self._listen(port, self._handler_class())
        for project, family in DEFAULT_IMAGE_FAMILIES:
            self.add_image_family(project, family)

    # -- seeding ----------------------------------------------------------------------------------

    def set_quota(self, project: str, region: str, metric: str, limit: float, usage: float = 0.0) -> None:
        """A regional quota as `regions.get` reports it (GPU metrics default to DEFAULT_GPU_QUOTA)."""
        with self.lock:
            self.quotas.setdefault((project, region), {})[metric] = (float(limit), float(usage))

    def add_image_family(self, project: str, family: str) -> dict:
        """An image whose family `images.getFromFamily` resolves."""
        with self.lock:
            name = f"{family}-v20261101"
            # diskSizeGb: the smallest boot disk made from it; 50 GB as in the API's answer quoted by
            # BasedHardware/omi#7155 ("Requested disk size cannot be smaller than the image size (50 GB)")
            image = {
                "kind": "compute#image",
                "id": str(next(self._ids)),
                "name": name,
                "family": family,
                "status": "READY",
                "creationTimestamp": _now(),
                "diskSizeGb": "50",
                "selfLink": f"{self.endpoint}{BASE}projects/{project}/global/images/{name}",
            }
            self.images[(project, family)] = image
            return image

    def set_project_policy(self, project: str, bindings: list[dict]) -> None:
        """Sets the project's IAM policy bindings ([{"role", "members"}]) that getIamPolicy returns
        and `caller`'s calls are checked against."""
        with self.lock:
            self.project_policies[project] = json.loads(json.dumps(bindings))

    def project_policy(self, project: str) -> list[dict]:
        """The project's IAM policy bindings (by default: the default service account is Editor)."""
        with self.lock:
            return self.project_policies.get(
                project, [{"role": "roles/editor", "members": [f"serviceAccount:{DEFAULT_ACCOUNT}"]}]
            )

    def _check_permission(self, method_id: str, path: str) -> None:
        """A 403 in the API's words when `caller` lacks the permission `method_id` needs."""
        needed = permissions.METHOD_PERMISSIONS.get(method_id)
        if self.caller is None or needed is None:
            return
        project = path.split("/")[1]
        roles = [b["role"] for b in self.project_policy(project) if self.caller in b.get("members", [])]
        custom = {name: frozenset(granted) for name, granted in self.custom_roles.items()}
        if needed in permissions.granted_by(roles, {**PREDEFINED_ROLES, **custom}):
            return
        resource = re.match(r"projects/[^/]+/(?:(?:zones|regions)/[^/]+/|global/)?[A-Za-z]+/[^/]+", path)
        raise HttpError(
            403, f"Required '{needed}' permission for '{resource.group(0) if resource else path}'", "forbidden"
        )

    def zones_of(self, region: str) -> list[str]:
        """The region's zones: those of the accelerator table, else REGION-a, -b, -c..."""
        known = sorted(z for z in self.accelerators if region_of_zone(z) == region)
        return known or [f"{region}-{c}" for c in "abcdefg"[: self.zones_per_region]]

    # -- failure injection ------------------------------------------------------------------------

    def fail(
        self,
        method: str,
        *,
        http: int | None = None,
        message: str = "",
        operation_error: str | None = None,
        times: int = 1,
    ) -> None:
        """Makes the next `times` calls of `method` (e.g. `compute.instanceGroupManagers.insert`) fail:
        with an HTTP status, or with a DONE operation carrying `operation_error` (a stockout, a quota)."""
        kind = ("http", (http, message)) if http else ("operation", (operation_error, message))
        with self.lock:
            self.failures.setdefault(method, []).extend([kind] * times)

    def fail_instance_creation(
        self,
        code: str = "ZONE_RESOURCE_POOL_EXHAUSTED",
        *,
        message: str = "",
        zone: str | None = None,
        times: int | None = None,
        spot_only: bool = False,
        machine_type: str | None = None,
        accelerator: str | None = None,
    ) -> None:
        """Makes a MIG's attempts to create an instance (in `zone`, or any; of a Spot template only
        with `spot_only`; of that `machine_type`, or with that `accelerator` type, attached or built
        in, only when given: one shape out of stock while another has capacity) fail with `code` --
        a stockout, QUOTA_EXCEEDED, a permission error -- `times` times (None: until cleared). The
        group's operations still succeed; the failure shows in listManagedInstances and listErrors."""
        with self.lock:
            self.creation_failures.append(
                {
                    "code": code,
                    "message": message,
                    "zone": zone,
                    "remaining": times,
                    "spot_only": spot_only,
                    "machine_type": machine_type,
                    "accelerator": accelerator,
                }
            )

    def hold_instance_creation(self, tries: int) -> None:
        """The next `tries` creations that would succeed leave the VM still being created instead: the
        member shows `currentAction: CREATING` with no status and no error, as a real VM does while it
        is provisioned, and each later look at its group is one more try."""
        with self.lock:
            self.creation_holds = tries

    def follow_capacity(
        self,
        trace: Any,
        *,
        speed: float = 1.0,
        zones: dict[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Makes a MIG's creation of a Spot VM in a zone fail with ZONE_RESOURCE_POOL_EXHAUSTED (in the
        words `fail_instance_creation` gives a stockout) while `trace` (a `traces.Zones`, as `load`
        reads the published Can't Be Late traces) has no capacity in that zone: from now, `speed`
        trace seconds a real second. `zones`: the fake's zone for a trace's zone (the published
        traces name AWS zones, `us-east-1a`); any other is taken as named. A zone the trace does not
        name, and any time past its end, has capacity. On-demand VMs are never refused: the traces
        are of Spot capacity (benchmarks/capacity.py assumes on-demand capacity, as Can't Be Late does)."""
        with self.lock:
            self.capacity_trace = (
                trace,
                float(speed),
                {(zones or {}).get(z, z): z for z in trace.capacity},
                clock,
                clock(),
            )

    def trace_stockout(self, zone: str) -> bool:
        """True when `follow_capacity`'s trace has no capacity in `zone` now."""
        with self.lock:
            if self.capacity_trace is None:
                return False
            trace, speed, named, clock, start = self.capacity_trace
            return zone in named and trace.out(named[zone], (clock() - start) * speed / 3600)

    def clear_instance_creation_failures(self) -> None:
        """Forgets the instance-creation failures injected so far."""
        with self.lock:
            self.creation_failures.clear()

    def _take_failure(self, method: str):
        with self.lock:
            queue = self.failures.get(method) or []
            return queue.pop(0) if queue else None

    # -- routing ----------------------------------------------------------------------------------

    @staticmethod
    def _routes(doc: dict) -> list[tuple[re.Pattern, str, dict]]:
        routes = []

        def walk(resources: dict) -> None:
            for resource in resources.values():
                for method in resource.get("methods", {}).values():
                    pattern = re.sub(r"\{\+?(\w+)\}", r"(?P<\1>[^/]+)", method["path"])
                    routes.append((re.compile(f"^{pattern}$"), method["httpMethod"], method))
                walk(resource.get("resources", {}))

        walk(doc["resources"])
        # literal segments first, so `.../instanceGroupManagers/X/resize` never matches a looser path
        routes.sort(key=lambda r: -r[0].pattern.count("/") * 100 + r[0].pattern.count("(?P"))
        return routes

    def match(self, http_method: str, path: str) -> tuple[dict, dict]:
        """The discovery method and path parameters a request's verb and path select; 404 if none."""
        for pattern, verb, method in self.routes:
            if verb != http_method:
                continue
            m = pattern.match(path)
            if m:
                return method, m.groupdict()
        raise HttpError(404, f"The requested URL /{BASE.strip('/')}/{path} was not found on this server.", "notFound")

    def handle(self, http_method: str, raw_path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        """Validates a request against its discovery method and the API's rules, then serves it: (status, body)."""
        path = raw_path[len(BASE) :]
        method, params = self.match(http_method, path)
        known = method.get("parameters", {})
        for name, value in query.items():
            if name in (
                "alt",
                "prettyPrint",
                "$alt",
                "key",
                "fields",
                "quotaUser",
                "userIp",
                "access_token",
                "callback",
            ):
                continue
            if name not in known:
                raise HttpError(
                    400, f"Invalid JSON payload received. Unknown name {name!r}: Cannot bind query parameter."
                )
            enum = known[name].get("enum")
            if enum and value not in enum:
                raise HttpError(400, f"Invalid value for {name}: {value!r} is not one of {enum}")
        for name in method.get("parameterOrder", []):
            if known.get(name, {}).get("location") == "query" and known[name].get("required") and name not in query:
                raise HttpError(400, f"Required parameter {name!r} is missing")
        request_schema = method.get("request")
        if request_schema:
            if body is None:
                raise HttpError(400, f"{method['id']} needs a request body")
            try:
                self.validator.check(body, request_schema, request_schema["$ref"])
            except PatternError as exc:
                raise HttpError(400, str(exc)) from None
            except SchemaError as exc:
                raise HttpError(400, f"Invalid value in the request body: {exc}") from None
        elif body not in (None, {}, ""):
            raise HttpError(400, f"{method['id']} takes no request body")
        self.requests.append((method["id"], path, body))
        project = params.get("project")
        if project in self.api_disabled:
            # the API's answer to a project that has not enabled it (terraform#19912, midl-dev/tezos-on-gke#34)
            raise HttpError(
                403,
                f"Compute Engine API has not been used in project {PROJECT_NUMBER} before or it is "
                f"disabled. Enable it by visiting https://console.developers.google.com/apis/api/"
                f"compute.googleapis.com/overview?project={PROJECT_NUMBER} then retry. If you enabled "
                "this API recently, wait a few minutes for the action to propagate to our systems and "
                "retry.",
                "accessNotConfigured",
            )
        self._check_permission(method["id"], path)
        failure = self._take_failure(method["id"])
        if failure and failure[0] == "http":
            status, message = failure[1]
            raise HttpError(status, message or f"Required permission for {method['id']} is missing", "forbidden")
        handler = getattr(self, "_" + method["id"].split(".", 1)[1].replace(".", "_"), None)
        if handler is None:
            raise HttpError(501, f"{method['id']} is not implemented by survivor's Compute fake")
        with self.lock:
            result = handler(params, query, body)
            if (
                failure
                and failure[0] == "operation"
                and isinstance(result, dict)
                and result.get("kind") == "compute#operation"
            ):
                code, message = failure[1]
                result["error"] = {"errors": [{"code": code, "message": message or _default_message(code, params)}]}
                result["status"] = "DONE"
                result["httpErrorStatusCode"] = 400 if code != "QUOTA_EXCEEDED" else 403
                self._undo(result)
        return 200, result

    # -- operations -------------------------------------------------------------------------------

    def _operation(
        self, params: dict, kind: str, target: str, scope: str, undo: Callable[[], object] | None = None
    ) -> dict:
        name = f"operation-{next(self._ids)}-{''.join(random.choices(string.hexdigits.lower(), k=8))}"
        project = params["project"]
        op = {
            "kind": "compute#operation",
            "id": str(next(self._ids)),
            "name": name,
            "operationType": kind,
            "targetLink": f"{self.endpoint}{BASE}{target}",
            "status": "RUNNING",
            "progress": 0,
            "insertTime": _now(),
            "startTime": _now(),
        }
        if scope.startswith("zones/"):
            op["zone"] = f"{self.endpoint}{BASE}projects/{project}/{scope}"
        elif scope.startswith("regions/"):
            op["region"] = f"{self.endpoint}{BASE}projects/{project}/{scope}"
        op["selfLink"] = f"{self.endpoint}{BASE}projects/{project}/{scope}/operations/{name}"
        self.operations[name] = {"op": op, "undo": undo}
        return dict(op)

    def _undo(self, op: dict) -> None:
        entry = self.operations.get(op["name"])
        if entry:
            entry["op"].update(error=op["error"], status="DONE", httpErrorStatusCode=op["httpErrorStatusCode"])
            if entry["undo"]:
                entry["undo"]()

    def _get_op(self, params: dict) -> dict:
        entry = self.operations.get(params["operation"])
        if entry is None:
            raise HttpError(404, f"The resource 'operations/{params['operation']}' was not found", "notFound")
        op = entry["op"]
        op.update(status="DONE", progress=100, endTime=op.get("endTime") or _now())
        return dict(op)

    def _zoneOperations_get(self, params, query, body):
        return self._get_op(params)

    _zoneOperations_wait = _zoneOperations_get
    _regionOperations_get = _zoneOperations_get
    _regionOperations_wait = _zoneOperations_get
    _globalOperations_get = _zoneOperations_get
    _globalOperations_wait = _zoneOperations_get

    # -- instance templates -----------------------------------------------------------------------

    def _template_url(self, project: str, name: str) -> str:
        return f"{self.endpoint}{BASE}projects/{project}/global/instanceTemplates/{name}"

    def _instanceTemplates_insert(self, params, query, body):
        key = (params["project"], body.get("name", ""))
        if not key[1]:
            raise HttpError(
                400,
                "Invalid value for field 'resource.name': ''. Must be a match of regex '[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?'",
            )
        if key in self.templates:
            raise HttpError(
                409,
                f"The resource 'projects/{key[0]}/global/instanceTemplates/{key[1]}' already exists",
                "alreadyExists",
            )
        violations = machines.property_violations(body.get("properties") or {})
        if violations:
            raise HttpError(400, violations[0].message, "badRequest")
        stored = _template_as_returned(json.loads(json.dumps(body)), key[0])
        stored.update(
            kind="compute#instanceTemplate",
            id=str(next(self._ids)),
            creationTimestamp=_now(),
            selfLink=self._template_url(*key),
        )
        self.templates[key] = stored
        return self._operation(
            params,
            "insert",
            f"projects/{key[0]}/global/instanceTemplates/{key[1]}",
            "global",
            undo=lambda: self.templates.pop(key, None),
        )

    def _instanceTemplates_get(self, params, query, body):
        key = (params["project"], params["instanceTemplate"])
        if key not in self.templates:
            raise HttpError(
                404, f"The resource 'projects/{key[0]}/global/instanceTemplates/{key[1]}' was not found", "notFound"
            )
        return self.templates[key]

    def _instanceTemplates_list(self, params, query, body):
        items = [t for (p, _), t in self.templates.items() if p == params["project"]]
        return {"kind": "compute#instanceTemplateList", "items": items}

    def _instanceTemplates_delete(self, params, query, body):
        key = (params["project"], params["instanceTemplate"])
        if key not in self.templates:
            raise HttpError(
                404, f"The resource 'projects/{key[0]}/global/instanceTemplates/{key[1]}' was not found", "notFound"
            )
        in_use = [g for g in self.groups.values() if _tail(g["instanceTemplate"]) == key[1] and g["_project"] == key[0]]
        if in_use:
            # full resource paths, the first user only: the API's 400 as terraform-google-modules/
            # terraform-google-vm#45 (a regional group) and hashicorp/terraform-provider-google#1601 (a zonal one) quote it
            raise HttpError(
                400,
                f"The instance_template resource 'projects/{key[0]}/global/instanceTemplates/{key[1]}' "
                f"is already being used by 'projects/{key[0]}/{in_use[0]['_scope']}/instanceGroupManagers/"
                f"{in_use[0]['name']}'",
                "resourceInUseByAnotherResource",
            )
        del self.templates[key]
        return self._operation(params, "delete", f"projects/{key[0]}/global/instanceTemplates/{key[1]}", "global")

    # -- managed instance groups ------------------------------------------------------------------

    def _scope(self, params: dict) -> str:
        return f"zones/{params['zone']}" if "zone" in params else f"regions/{params['region']}"

    def _group(self, params: dict) -> dict:
        key = (params["project"], self._scope(params), params["instanceGroupManager"])
        group = self.groups.get(key)
        if group is None:
            raise HttpError(
                404,
                f"The resource 'projects/{key[0]}/{key[1]}/instanceGroupManagers/{key[2]}' was not found",
                "notFound",
            )
        return group

    def _group_zones(self, group: dict) -> list[str]:
        if group["_scope"].startswith("zones/"):
            return [group["_scope"].split("/")[1]]
        configured = [_tail(z["zone"]) for z in (group.get("distributionPolicy") or {}).get("zones", [])]
        return configured or self.zones_of(group["_scope"].split("/")[1])

    def _instanceGroupManagers_insert(self, params, query, body):
        project, scope, name = params["project"], self._scope(params), body.get("name", "")
        key = (project, scope, name)
        if "region" in params:
            for i, z in enumerate((body.get("distributionPolicy") or {}).get("zones", [])):
                if _tail(z.get("zone", "")) not in self.zones_of(params["region"]):
                    # gcloudrig/gcloudrig#75
                    raise HttpError(
                        400,
                        f"Invalid value for field 'resource.distributionPolicy.zones[{i}].zone': "
                        f"'{z.get('zone')}'. Zone ({_tail(z.get('zone', ''))}) must be a valid zone in "
                        f"region {params['region']}.",
                        "invalid",
                    )
        if key in self.groups:
            raise HttpError(
                409,
                f"The resource 'projects/{project}/{scope}/instanceGroupManagers/{name}' already exists",
                "alreadyExists",
            )
        template = _tail(body.get("instanceTemplate", ""))
        if (project, template) not in self.templates:
            raise HttpError(
                404, f"The resource 'projects/{project}/global/instanceTemplates/{template}' was not found", "notFound"
            )
        # A stateful disk is named by its device name, "the device name of a disk in the instance
        # template" (https://cloud.google.com/compute/docs/instance-groups/configuring-stateful-disks-in-migs);
        # a key naming no disk of the template preserves nothing, so a typo fails here as a 400.
        devices = {
            d.get("deviceName") for d in (self.templates[(project, template)].get("properties") or {}).get("disks", [])
        }
        for device in ((body.get("statefulPolicy") or {}).get("preservedState") or {}).get("disks", {}):
            if device not in devices:
                raise HttpError(
                    400,
                    f"Invalid value for field 'resource.statefulPolicy.preservedState.disks': "
                    f"'{device}'. Stateful disk device name must match a disk in instance template "
                    f"'{template}'.",
                    "invalid",
                )
        # A regional group with a stateful policy must not redistribute its VMs across zones: its disks
        # are zonal ("Configuring stateful MIGs", limitations, https://cloud.google.com/compute/docs/
        # instance-groups/configuring-stateful-migs; gcloud forces NONE on create and otherwise reports
        # this error). The API's default instanceRedistributionType is PROACTIVE.
        redistribution = (body.get("updatePolicy") or {}).get("instanceRedistributionType") or "PROACTIVE"
        if scope.startswith("regions/") and body.get("statefulPolicy") and redistribution != "NONE":
            raise HttpError(
                400,
                "Invalid value for field 'resource.updatePolicy.instanceRedistributionType': "
                f"'{redistribution}'. Stateful regional IGMs cannot use proactive instance "
                "redistribution.",
                "invalid",
            )
        group = json.loads(json.dumps(body))
        group.update(
            kind="compute#instanceGroupManager",
            id=str(next(self._ids)),
            creationTimestamp=_now(),
            selfLink=f"{self.endpoint}{BASE}projects/{project}/{scope}/instanceGroupManagers/{name}",
            _project=project,
            _scope=scope,
            _members=[],
            _pending={},
            _errors=[],
            status={"isStable": True},
        )
        group["targetSize"] = int(body.get("targetSize", 0))
        group.setdefault("baseInstanceName", name)
        if scope.startswith("zones/"):
            group["zone"] = f"{self.endpoint}{BASE}projects/{project}/{scope}"
        else:
            group["region"] = f"{self.endpoint}{BASE}projects/{project}/{scope}"
        self.groups[key] = group
        self._reconcile(group)
        return self._operation(
            params,
            "insert",
            f"projects/{project}/{scope}/instanceGroupManagers/{name}",
            scope,
            undo=lambda: self._drop_group(key),
        )

    _regionInstanceGroupManagers_insert = _instanceGroupManagers_insert

    def _drop_group(self, key) -> None:
        group = self.groups.pop(key, None)
        if group:
            for member in list(group["_members"]):
                self._delete_instance(member, by_group=True)

    def _public_group(self, group: dict) -> dict:
        return {k: v for k, v in group.items() if not k.startswith("_")}

    def _instanceGroupManagers_get(self, params, query, body):
        return self._public_group(self._group(params))

    def _instanceGroupManagers_patch(self, params, query, body):
        """A JSON merge patch of the group (the REST reference's patch: "This method supports PATCH
        semantics and uses the JSON merge patch format and processing rules"): what a flex-start switch
        changes, its repairs (`instanceLifecyclePolicy`), a regional group's target shape
        (`distributionPolicy.targetShape`, "Set a target distribution shape on an existing group",
        https://cloud.google.com/compute/docs/instance-groups/regional-mig-set-target-distribution-shape)
        and its `updatePolicy`. A group's zones are fixed once it is made."""
        group = self._group(params)
        zones = (body.get("distributionPolicy") or {}).get("zones")
        if zones is not None and zones != (group.get("distributionPolicy") or {}).get("zones"):
            raise HttpError(
                400,
                "Invalid value for field 'resource.distributionPolicy.zones': the zones of a "
                "regional managed instance group cannot be changed.",
                "invalid",
            )

        def merge(into: dict, patch: dict) -> None:
            for key, value in patch.items():
                if value is None:
                    into.pop(key, None)
                elif isinstance(value, dict) and isinstance(into.get(key), dict):
                    merge(into[key], value)
                else:
                    into[key] = json.loads(json.dumps(value))

        merge(
            group,
            {
                k: v
                for k, v in body.items()
                if k in ("instanceLifecyclePolicy", "distributionPolicy", "updatePolicy", "description")
            },
        )
        return self._operation(
            params, "compute.instanceGroupManagers.patch", group["selfLink"].split(BASE, 1)[1], group["_scope"]
        )

    _regionInstanceGroupManagers_patch = _instanceGroupManagers_patch

    _regionInstanceGroupManagers_get = _instanceGroupManagers_get

    # -- the aggregated list of groups ------------------------------------------------------------

    def _instanceGroupManagers_aggregatedList(self, params, query, body):
        """Every group of the project, zonal and regional, keyed by scope (`zones/Z`, `regions/R`): the
        discovery document's InstanceGroupManagerAggregatedList. A scope without a group carries the
        `warning` that "replaces the list of managed instance groups when the list is empty"
        (InstanceGroupManagersScopedList), NO_RESULTS_ON_PAGE. Regional groups are in it although the
        method "groups them by zone": gcloud's `compute instance-groups managed list` reads both
        scopes from this one method (google-cloud-sdk lib/surface/compute/instance_groups/managed/
        list.py, `aggregation_service=instanceGroupManagers`), as forseti-security/forseti-security#507
        found in the API explorer. One page: no nextPageToken (the fake's projects hold few groups)."""
        project = params["project"]
        scopes = {f"zones/{z}" for z in self.accelerators} | {
            f"regions/{z.rsplit('-', 1)[0]}" for z in self.accelerators
        }
        found: dict[str, list[dict]] = {}
        for (p, scope, _), group in sorted(self.groups.items()):
            if p == project:
                found.setdefault(scope, []).append(self._public_group(group))
        items: dict[str, dict] = {}
        for scope in sorted(scopes | set(found)):
            if scope in found:
                items[scope] = {"instanceGroupManagers": found[scope]}
            else:
                items[scope] = {
                    "warning": {
                        "code": "NO_RESULTS_ON_PAGE",
                        "message": f"There are no results for scope '{scope}' on this page.",
                        "data": [{"key": "scope", "value": scope}],
                    }
                }
        return {
            "kind": "compute#instanceGroupManagerAggregatedList",
            "id": f"projects/{project}/aggregated/instanceGroupManagers",
            "items": items,
            "selfLink": f"{self.endpoint}{BASE}projects/{project}/aggregated/instanceGroupManagers",
        }

    def _instanceGroupManagers_delete(self, params, query, body):
        group = self._group(params)
        key = (group["_project"], group["_scope"], group["name"])
        self._drop_group(key)
        return self._operation(params, "delete", f"projects/{key[0]}/{key[1]}/instanceGroupManagers/{key[2]}", key[1])

    _regionInstanceGroupManagers_delete = _instanceGroupManagers_delete

    def _instanceGroupManagers_resize(self, params, query, body):
        group = self._group(params)
        size = int(query["size"])
        if size < 0:
            raise HttpError(400, "Invalid value for field 'size': must be >= 0")
        group["targetSize"] = size
        self._reconcile(group)
        return self._operation(
            params, "compute.instanceGroupManagers.resize", group["selfLink"].split(BASE, 1)[1], group["_scope"]
        )

    _regionInstanceGroupManagers_resize = _instanceGroupManagers_resize

    # -- resize requests (flex-start, docs/flex-start.md) -----------------------------------------

    def attach_autoscaler(self, project: str, scope: str, name: str) -> None:
        """Seeds an autoscaler on a group (`status.autoscaler`), as a test of the refusal A2 needs."""
        with self.lock:
            group = self.groups[(project, scope, name)]
            group["status"]["autoscaler"] = f"{self.endpoint}{BASE}projects/{project}/{scope}/autoscalers/{name}"

    def end_flex_start_runs(self, project: str, scope: str, name: str) -> int:
        """Time passes to the end of the run duration of every SUCCEEDED request of a group: "At the
        end of the run duration, the MIG deletes the created VMs" (docs/flex-start.md F4), and its
        target size goes down by as many, or it would recreate them (assumption A4). Returns how many
        VMs it deleted (each a soft off, through `on_instance_deleted`, as any deletion)."""
        with self.lock:
            group = self.groups[(project, scope, name)]
            over = group.setdefault("_runs_over", set())  # the requests whose run already ended
            ending = [
                r
                for r in group.get("_resize_requests", {}).values()
                if r["state"] == "SUCCEEDED" and r["name"] not in over
            ]
            over.update(r["name"] for r in ending)
            ran = sum(int(r["resizeBy"]) for r in ending)
            flex = [
                m
                for m in list(group["_members"])
                if ((self.instances.get(m) or {}).get("scheduling") or {}).get("provisioningModel") == "FLEX_START"
            ]
            ended = flex[:ran]
            for member in ended:
                group["_members"].remove(member)
                self._delete_instance(member, by_group=True)
                group["targetSize"] = max(0, group["targetSize"] - 1)
            return len(ended)

    def _resize_request(self, group: dict, name: str) -> dict:
        found = group.setdefault("_resize_requests", {}).get(name)
        if found is None:
            raise HttpError(
                404,
                f"The resource '{group['selfLink'].split(BASE, 1)[1]}/resizeRequests/{name}' was not found",
                "notFound",
            )
        return found

    def _advance(self, group: dict, request: dict) -> None:
        """Time passes for a request: CREATING becomes ACCEPTED (docs/flex-start.md F6); an ACCEPTED one
        is provisioned all at once when the fake has capacity (`flex_start_capacity`), growing the
        group by resizeBy (F7), and SUCCEEDED."""
        if request["state"] == "CREATING":
            request["state"] = "ACCEPTED"
        elif request["state"] == "ACCEPTED" and self.flex_start_failure is not None:
            # "The request failed before or during provisioning" (the discovery document's FAILED);
            # its final `status.error` says why, and the last attempt's errors are cleared
            code, message = self.flex_start_failure
            request["state"] = "FAILED"
            request["status"] = {"error": {"errors": [{"code": code, "message": message}]}}
        elif request["state"] == "ACCEPTED" and self.flex_start_capacity:
            group["targetSize"] += int(request["resizeBy"])
            self._reconcile(group)
            request["state"] = "SUCCEEDED"
            request["status"] = {}  # "The value is cleared when ResizeRequest transitions to the final state"
        elif request["state"] == "ACCEPTED" and self.flex_start_last_attempt is not None:
            # still queued: `status.lastAttempt.error`, "Errors that prevented the ResizeRequest to be
            # fulfilled" (InstanceGroupManagerResizeRequestStatusLastAttempt, the discovery document)
            code, message = self.flex_start_last_attempt
            request["status"] = {"lastAttempt": {"error": {"errors": [{"code": code, "message": message}]}}}

    def _instanceGroupManagerResizeRequests_insert(self, params, query, body):
        group = self._group(params)
        where = group["selfLink"].split(BASE, 1)[1]
        name = body.get("name", "")
        requests = group.setdefault("_resize_requests", {})
        if name in requests:
            raise HttpError(409, f"The resource '{where}/resizeRequests/{name}' already exists", "alreadyExists")
        if "resizeBy" in body and body.get("instances"):  # F7, the discovery document's words
            raise HttpError(
                400, "Invalid value for field 'resource.instances': resizeBy and instances cannot be used together."
            )
        count = int(body.get("resizeBy") or len(body.get("instances") or []))
        if count <= 0:
            raise HttpError(400, f"Invalid value for field 'resource.resizeBy': '{count}'. Must be greater than 0.")
        run = body.get("requestedRunDuration")
        seconds = int((run or {}).get("seconds") or 0)
        problem = machines.run_duration_problem(seconds) if run is not None else None
        if problem:  # F5
            raise HttpError(400, f"Invalid value for field 'resource.requestedRunDuration': '{seconds}s'. {problem}.")
        # A2 (an assumption, by analogy with a plain resize of an autoscaled group): no autoscaler
        if (group.get("status") or {}).get("autoscaler"):
            raise HttpError(
                412,
                "Resize requests are not allowed for managed instance groups with an autoscaler. "
                "Remove the autoscaler or set autoscaling policy mode to OFF.",
                "conditionNotMet",
            )
        # "To use a resize request in the MIG, you must not configure autoscaling and must turn off
        # repairs" (https://cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig,
        # limitations for the MIG; every Google sample sets it, terraform-google-modules/
        # terraform-docs-samples compute/resize_request_basic/main.tf); docs/flex-start.md F11
        repairs = (group.get("instanceLifecyclePolicy") or {}).get("defaultActionOnFailure") or "REPAIR"
        if repairs != "DO_NOTHING":
            raise HttpError(
                400,
                f"Invalid value for field 'resource': resize requests need repairs turned off in the "
                f"managed instance group {group['name']} (instanceLifecyclePolicy."
                f"defaultActionOnFailure DO_NOTHING); it is {repairs}.",
            )
        # the regional example puts every VM of the request in one zone (docs/flex-start.md F13)
        shape = (group.get("distributionPolicy") or {}).get("targetShape") or "EVEN"
        if group["_scope"].startswith("regions/") and shape != "ANY_SINGLE_ZONE":
            raise HttpError(
                400,
                f"Invalid value for field 'resource': resize requests in a regional managed instance "
                f"group need distributionPolicy.targetShape ANY_SINGLE_ZONE; {group['name']} has "
                f"{shape}.",
            )
        template = self.templates.get((group["_project"], _tail(group["instanceTemplate"])), {})
        properties = template.get("properties") or {}
        # every flex-start and resize-request template of Google's consumes no reservation
        # (terraform-docs-samples compute/resize_request_basic/main.tf: reservation_affinity NO_RESERVATION;
        # docs/flex-start.md F12)
        affinity = (properties.get("reservationAffinity") or {}).get("consumeReservationType") or "ANY_RESERVATION"
        if affinity != "NO_RESERVATION":
            raise HttpError(
                400,
                f"Invalid value for field 'resource': the instance template "
                f"{_tail(group['instanceTemplate'])} of a resize request must set "
                f"reservationAffinity.consumeReservationType NO_RESERVATION; it is {affinity}.",
            )
        model = (properties.get("scheduling") or {}).get("provisioningModel") or "STANDARD"
        if model != "FLEX_START":  # A3 (an assumption: F8 requires it, no source shows the API's text)
            raise HttpError(
                400,
                f"Invalid value for field 'resource': resize requests need the group's instance "
                f"template to use provisioningModel FLEX_START; {_tail(group['instanceTemplate'])} "
                f"uses {model}.",
            )
        accel = (properties.get("guestAccelerators") or [{}])[0]
        unsupported = machines.flex_start_problem(
            str(properties.get("machineType") or ""),
            _tail(str(accel.get("acceleratorType") or "")) or None,
            int(accel.get("acceleratorCount") or 0),
        )
        if unsupported:  # F2
            raise HttpError(400, f"Invalid value for field 'resource': {unsupported}.")
        request = json.loads(json.dumps(body))
        request.update(
            kind="compute#instanceGroupManagerResizeRequest",
            id=str(next(self._ids)),
            creationTimestamp=_now(),
            state="CREATING",
            resizeBy=count,
            selfLink=f"{self.endpoint}{BASE}{where}/resizeRequests/{name}",
        )
        if group["_scope"].startswith("zones/"):
            request["zone"] = group["zone"]
        else:
            request["region"] = group["region"]
        requests[name] = request
        return self._operation(
            params, "insert", f"{where}/resizeRequests/{name}", group["_scope"], undo=lambda: requests.pop(name, None)
        )

    def _instanceGroupManagerResizeRequests_get(self, params, query, body):
        group = self._group(params)
        request = self._resize_request(group, params["resizeRequest"])
        self._advance(group, request)
        return dict(request)

    def _instanceGroupManagerResizeRequests_list(self, params, query, body):
        group = self._group(params)
        items = list(group.setdefault("_resize_requests", {}).values())
        for request in items:
            self._advance(group, request)
        return {
            "kind": "compute#instanceGroupManagerResizeRequestList",
            "items": [dict(r) for r in items],
            "selfLink": f"{group['selfLink']}/resizeRequests",
        }

    def _instanceGroupManagerResizeRequests_cancel(self, params, query, body):
        group = self._group(params)
        request = self._resize_request(group, params["resizeRequest"])
        if request["state"] not in ("CREATING", "ACCEPTED"):  # F6: "only possible for requests that are accepted"
            raise HttpError(
                400,
                f"The resize request '{request['name']}' is in state {request['state']} and cannot "
                "be cancelled; only a request accepted in the queue can.",
            )
        request["state"] = "CANCELLED"
        request["status"] = {}  # a final state: the last attempt's errors are cleared
        return self._operation(params, "cancel", request["selfLink"].split(BASE, 1)[1], group["_scope"])

    def _instanceGroupManagerResizeRequests_delete(self, params, query, body):
        group = self._group(params)
        request = self._resize_request(group, params["resizeRequest"])
        if request["state"] in ("CREATING", "ACCEPTED"):  # F6: "Deletes the specified, inactive resize request"
            raise HttpError(
                400,
                f"The resize request '{request['name']}' is active ({request['state']}); cancel it before deleting it.",
            )
        del group["_resize_requests"][request["name"]]
        return self._operation(params, "delete", request["selfLink"].split(BASE, 1)[1], group["_scope"])

    _regionInstanceGroupManagerResizeRequests_insert = _instanceGroupManagerResizeRequests_insert
    _regionInstanceGroupManagerResizeRequests_get = _instanceGroupManagerResizeRequests_get
    _regionInstanceGroupManagerResizeRequests_list = _instanceGroupManagerResizeRequests_list
    _regionInstanceGroupManagerResizeRequests_cancel = _instanceGroupManagerResizeRequests_cancel
    _regionInstanceGroupManagerResizeRequests_delete = _instanceGroupManagerResizeRequests_delete

    def _instanceGroupManagers_deleteInstances(self, params, query, body):
        group = self._group(params)
        wanted = body.get("instances", [])
        for ref in wanted:
            m = re.search(r"zones/([^/]+)/instances/([^/]+)$", ref)
            if not m:
                raise HttpError(400, f"Invalid value for field 'request.instances': {ref!r}")
            member = (group["_project"], m.group(1), m.group(2))
            if member not in group["_members"]:
                if body.get("skipInstancesOnValidationError"):
                    continue
                raise HttpError(400, f"The instance {ref!r} is not a member of the managed instance group", "invalid")
            group["_members"].remove(member)
            self._delete_instance(member, by_group=True)
            group["targetSize"] = max(0, group["targetSize"] - 1)
        return self._operation(
            params,
            "compute.instanceGroupManagers.deleteInstances",
            group["selfLink"].split(BASE, 1)[1],
            group["_scope"],
        )

    _regionInstanceGroupManagers_deleteInstances = _instanceGroupManagers_deleteInstances

    def _instanceGroupManagers_setInstanceTemplate(self, params, query, body):
        """New and recreated members come from the template; existing ones keep theirs."""
        group = self._group(params)
        name = _tail(body.get("instanceTemplate", ""))
        if (group["_project"], name) not in self.templates:
            raise HttpError(
                404,
                f"The resource 'projects/{group['_project']}/global/instanceTemplates/{name}' was not found",
                "notFound",
            )
        group["instanceTemplate"] = self._template_url(group["_project"], name)
        return self._operation(
            params,
            "compute.instanceGroupManagers.setInstanceTemplate",
            group["selfLink"].split(BASE, 1)[1],
            group["_scope"],
        )

    _regionInstanceGroupManagers_setInstanceTemplate = _instanceGroupManagers_setInstanceTemplate

    def _instanceGroupManagers_recreateInstances(self, params, query, body):
        """Each named member is deleted and created again (same name) from the group's current template."""
        group = self._group(params)
        template = self.templates.get((group["_project"], _tail(group["instanceTemplate"])), {})
        for ref in body.get("instances", []):
            m = re.search(r"zones/([^/]+)/instances/([^/]+)$", ref)
            member = (group["_project"], m.group(1), m.group(2)) if m else None
            if member is None or member not in group["_members"]:
                raise HttpError(400, f"The instance {ref!r} is not a member of the managed instance group", "invalid")
            self._delete_instance(member, by_group=True)
            group["_pending"].pop(member, None)
            self._try_create(member, group, template)
        return self._operation(
            params,
            "compute.instanceGroupManagers.recreateInstances",
            group["selfLink"].split(BASE, 1)[1],
            group["_scope"],
        )

    _regionInstanceGroupManagers_recreateInstances = _instanceGroupManagers_recreateInstances

    def _instanceGroupManagers_listManagedInstances(self, params, query, body):
        group = self._group(params)
        self._retry_pending(group)
        out = []
        for member in group["_members"]:
            vm = self.instances.get(member)
            version = {"instanceTemplate": group["instanceTemplate"]}
            if vm is not None:  # the template it was made from ("version": the VM's, not the group's)
                version = {"instanceTemplate": vm.get("_template") or group["instanceTemplate"]}
                out.append(
                    {
                        "instance": vm["selfLink"],
                        "id": vm["id"],
                        "name": vm["name"],
                        "instanceStatus": vm["status"],
                        "currentAction": "NONE",
                        "version": version,
                    }
                )
            elif member in group["_pending"]:
                # not created yet: no status, no id; the group keeps trying (currentAction CREATING)
                item = {
                    "instance": self._instance_url(member),
                    "name": member[2],
                    "currentAction": "CREATING",
                    "version": version,
                }
                if group["_pending"][member]:  # a VM still being provisioned has no failed attempt
                    item["lastAttempt"] = {"errors": {"errors": group["_pending"][member]}}
                out.append(item)
        return {"managedInstances": out}

    _regionInstanceGroupManagers_listManagedInstances = _instanceGroupManagers_listManagedInstances

    def _instanceGroupManagers_listErrors(self, params, query, body):
        group = self._group(params)
        self._retry_pending(group)
        # oldest first: the API documents no order (and takes no orderBy), so a client must not rely on one
        return {"items": list(group["_errors"])}

    _regionInstanceGroupManagers_listErrors = _instanceGroupManagers_listErrors

    def _instance_url(self, member: tuple[str, str, str]) -> str:
        return f"{self.endpoint}{BASE}projects/{member[0]}/zones/{member[1]}/instances/{member[2]}"

    def _creation_error(self, member: tuple[str, str, str], template: dict) -> dict | None:
        """Why creating this member now fails (an injected failure, a GPU its zone lacks), or None."""
        project, zone, _ = member
        properties = template.get("properties", {})
        machine = str(properties.get("machineType", "")).rsplit("/", 1)[-1]
        accelerators = properties.get("guestAccelerators") or []
        wanted = [(_tail(a.get("acceleratorType", "")), int(a.get("acceleratorCount") or 0)) for a in accelerators]
        built_in = machines.built_in_gpus(machine)
        if built_in:
            wanted.append(built_in)
        for kind, _count in wanted:
            if kind not in self.accelerators.get(zone, {}):
                # fastai/course-v3#430 (the code is not shown there)
                return {
                    "code": "RESOURCE_NOT_FOUND",
                    "message": f"The resource 'projects/{project}/zones/{zone}/acceleratorTypes/{kind}' was not found",
                }
        denied = self._external_ip_violation(project, zone, member[2], properties)
        if denied:
            return {"code": "CONDITION_NOT_MET", "message": denied}
        spot = (properties.get("scheduling") or {}).get("provisioningModel") == "SPOT"
        traced = {"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "", "zone": zone, "remaining": None}
        for failure in ([traced] if spot and self.trace_stockout(zone) else []) + self.creation_failures:
            if failure["zone"] not in (None, zone) or failure["remaining"] == 0:
                continue
            if failure.get("spot_only") and not spot:  # a Spot stockout leaves on-demand capacity
                continue
            if failure.get("machine_type") not in (None, machine):  # another shape's stockout
                continue
            if failure.get("accelerator") not in (None, *(kind for kind, _ in wanted)):
                continue
            if failure["remaining"] is not None:
                failure["remaining"] -= 1
            code = failure["code"]
            message = failure["message"]
            if not message and code.startswith("ZONE_RESOURCE_POOL_EXHAUSTED"):
                gpus = f" with {wanted[0][1]} {wanted[0][0]} accelerator(s)" if wanted else ""
                # the localized message of ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS, google/go-tpm-tools#578
                message = (
                    f"A {machine} VM instance{gpus} is currently unavailable in the {zone} zone. Consider "
                    "trying your request in another zone which has capacity to accommodate your request."
                )
            return {"code": code, "message": message or _default_message(code, {"project": project, "zone": zone})}
        return None

    def _external_ip_violation(self, project: str, zone: str, name: str, properties: dict) -> str | None:
        """The API's words when the organisation policy denies this VM its external IP: a network
        interface with an accessConfig asks for one (a VM without accessConfigs has none:
        https://cloud.google.com/compute/docs/reference/rest/v1/instances). The message is the one
        gcloud and Terraform users quote (googlecodelabs/feedback#695, gardener-extension-provider-gcp#415,
        412 conditionNotMet)."""
        if project not in self.external_ip_denied:
            return None
        if not any(nic.get("accessConfigs") for nic in properties.get("networkInterfaces") or []):
            return None
        return (
            f"Constraint constraints/compute.vmExternalIpAccess violated for project {PROJECT_NUMBER}. Add instance "
            f"projects/{project}/zones/{zone}/instances/{name} to the constraint to use external IP with it."
        )

    def _retry_pending(self, group: dict) -> None:
        """Time passes: the group tries again to create the members it could not."""
        template = self.templates.get((group["_project"], _tail(group["instanceTemplate"])), {})
        for member in list(group["_pending"]):
            if member not in group["_members"]:
                group["_pending"].pop(member, None)
                continue
            self._try_create(member, group, template)

    def _reconcile(self, group: dict) -> None:
        """Creates or deletes members until the group has `targetSize` of them."""
        zones = self._group_zones(group)
        template = self.templates.get((group["_project"], _tail(group["instanceTemplate"])), {})
        while len(group["_members"]) < group["targetSize"]:
            suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=4))
            zone = zones[len(group["_members"]) % len(zones)]
            member = (group["_project"], zone, f"{group['baseInstanceName']}-{suffix}")
            group["_members"].append(member)
            self._try_create(member, group, template)
        while len(group["_members"]) > group["targetSize"]:
            member = group["_members"].pop()
            group["_pending"].pop(member, None)
            self._delete_instance(member, by_group=True)

    def _try_create(self, member: tuple[str, str, str], group: dict, template: dict) -> None:
        """Creates the member, or records why not. A regional group whose target shape is not EVEN
        places it in another of its zones when that one can take it (regional-mig-distribution-shape)."""
        candidates = [member]
        shape = (group.get("distributionPolicy") or {}).get("targetShape", "EVEN")
        if group["_scope"].startswith("regions/") and shape != "EVEN":
            candidates += [(member[0], z, member[2]) for z in self._group_zones(group) if z != member[1]]
        first_error = None
        for candidate in candidates:
            error = self._creation_error(candidate, template)
            if error is None:
                index = group["_members"].index(member)
                group["_members"][index] = candidate
                group["_pending"].pop(member, None)
                if self.creation_holds > 0:  # still being provisioned: the next look tries again
                    self.creation_holds -= 1
                    group["_pending"][candidate] = []
                    return
                self._create_instance(candidate, group)
                return
            first_error = first_error or error
            # each zone the group tried is an error of its own, even when another zone then takes the VM
            self._record_error(group, candidate, error)
        group["_pending"][member] = [first_error]

    def _record_error(self, group: dict, member: tuple[str, str, str], error: dict) -> None:
        group["_errors"].append(
            {
                "error": dict(error),
                "timestamp": _now(),
                "instanceActionDetails": {
                    "action": "CREATING",
                    "instance": self._instance_url(member),
                    "version": {"instanceTemplate": group["instanceTemplate"]},
                },
            }
        )

    # -- instances --------------------------------------------------------------------------------

    def _create_instance(self, member: tuple[str, str, str], group: dict) -> dict:
        project, zone, name = member
        template = self.templates.get((project, _tail(group["instanceTemplate"])), {})
        properties = json.loads(json.dumps(template.get("properties", {})))
        items = list((properties.get("metadata") or {}).get("items", []))
        # created-by names the project by its number, as Compute Engine writes it (`projects/NUMBER/zones/
        # ZONE/instanceGroupManagers/NAME`, https://cloud.google.com/compute/docs/instance-groups/
        # working-with-managed-instances): an API call built from it names no project this fake knows
        created_by = (
            group["selfLink"].split(BASE, 1)[1].replace(f"projects/{project}/", f"projects/{PROJECT_NUMBER}/", 1)
        )
        items += [
            {"key": "created-by", "value": created_by},
            {"key": "instance-template", "value": template.get("selfLink", "").split(BASE, 1)[-1]},
        ]
        vm = {
            "kind": "compute#instance",
            "id": str(next(self._ids)),
            "name": name,
            "zone": f"{self.endpoint}{BASE}projects/{project}/zones/{zone}",
            "status": "RUNNING",
            "machineType": f"{self.endpoint}{BASE}projects/{project}/zones/{zone}/machineTypes/{properties.get('machineType', 'n1-standard-1')}",
            "scheduling": properties.get("scheduling", {}),
            "guestAccelerators": properties.get("guestAccelerators", []),
            "metadata": {"items": items},
            "labels": properties.get("labels", {}),
            "creationTimestamp": _now(),
            "selfLink": f"{self.endpoint}{BASE}projects/{project}/zones/{zone}/instances/{name}",
            "_group": (group["_project"], group["_scope"], group["name"]),
            "_template": group["instanceTemplate"],
            "_serial": f"survivor compute fake: {name} booted\n",
            "_guest": {},
        }
        vm["disks"] = self._attach_disks(member, properties, vm["selfLink"])
        self.instances[member] = vm
        for callback in self.on_instance_created:
            callback(vm)
        return vm

    def _attach_disks(self, member: tuple[str, str, str], properties: dict, instance_url: str) -> list[dict]:
        """The template's persistent disks beside the boot disk, created in the VM's zone or, when one
        of that name is there already (a stateful group's VM recreated), attached again: "If a disk
        with the same name already exists in the given region, the existing disk is attached to the
        new instance and the new disk is not created" (the discovery document's
        AttachedDiskInitializeParams.diskName). It is named `diskName`, else `<instance>-<deviceName>`
        (the fake's choice: survivor finds a disk by its labels, never by its name), and carries the
        template's `initializeParams.labels` ("Labels to apply to this disk")."""
        project, zone, name = member
        attached: list[dict] = []
        for disk in properties.get("disks") or []:
            params = disk.get("initializeParams") or {}
            if disk.get("boot") or disk.get("type", "PERSISTENT") != "PERSISTENT" or disk.get("source"):
                continue
            device = disk.get("deviceName") or f"persistent-disk-{len(attached) + 1}"
            disk_name = params.get("diskName") or f"{name}-{device}"
            key = (project, zone, disk_name)
            url = f"{self.endpoint}{BASE}projects/{project}/zones/{zone}/disks/{disk_name}"
            found = self.disks.get(key)
            if found is None:
                found = self.disks[key] = {
                    "kind": "compute#disk",
                    "id": str(next(self._ids)),
                    "name": disk_name,
                    "zone": f"{self.endpoint}{BASE}projects/{project}/zones/{zone}",
                    "sizeGb": str(params.get("diskSizeGb") or "500"),
                    "type": f"{self.endpoint}{BASE}projects/{project}/zones/{zone}/diskTypes/"
                    f"{_tail(params.get('diskType') or 'pd-standard')}",
                    "labels": dict(params.get("labels") or {}),
                    "status": "READY",
                    "users": [],
                    "creationTimestamp": _now(),
                    "selfLink": url,
                }
            found["users"] = [instance_url]
            found["lastAttachTimestamp"] = _now()
            attached.append(
                {
                    "deviceName": device,
                    "source": url,
                    "boot": False,
                    "type": "PERSISTENT",
                    "autoDelete": bool(disk.get("autoDelete", False)),
                    "mode": "READ_WRITE",
                }
            )
        return attached

    def _release_disks(self, vm: dict) -> None:
        """A deleted VM's disks: deleted with it when `autoDelete` is set, else detached and kept ("Specifies
        whether the disk will be auto-deleted when the instance is deleted", AttachedDisk.autoDelete; a
        stateful group's `autoDelete: NEVER` keeps them too, survivor/mig/make.py stateful_policy)."""
        for attached in vm.get("disks") or []:
            m = re.search(r"projects/([^/]+)/zones/([^/]+)/disks/([^/]+)$", attached.get("source", ""))
            key = (m.group(1), m.group(2), m.group(3)) if m else None
            if key not in self.disks:
                continue
            if attached.get("autoDelete"):
                del self.disks[key]
            else:
                self.disks[key]["users"] = [u for u in self.disks[key]["users"] if u != vm["selfLink"]]
                self.disks[key]["lastDetachTimestamp"] = _now()

    def _disk(self, params: dict) -> tuple[tuple[str, str, str], dict]:
        key = (params["project"], params["zone"], params["disk"])
        found = self.disks.get(key)
        if found is None:
            raise HttpError(
                404, f"The resource 'projects/{key[0]}/zones/{key[1]}/disks/{key[2]}' was not found", "notFound"
            )
        return key, found

    def _disks_get(self, params, query, body):
        return self._disk(params)[1]

    def _disks_delete(self, params, query, body):
        """Deletes a disk no instance uses; one attached is refused as the API refuses it: 400
        resourceInUseByAnotherResource, "The disk resource 'projects/P/zones/Z/disks/D' is already being
        used by 'projects/P/zones/Z/instances/I'" (grucloud's notes on deleting a GCE disk before its VM,
        quoting the API's answer)."""
        key, found = self._disk(params)
        if found["users"]:
            raise HttpError(
                400,
                f"The disk resource 'projects/{key[0]}/zones/{key[1]}/disks/{key[2]}' is already "
                f"being used by '{found['users'][0].split(BASE, 1)[-1]}'",
                "resourceInUseByAnotherResource",
            )
        del self.disks[key]
        return self._operation(params, "delete", f"projects/{key[0]}/zones/{key[1]}/disks/{key[2]}", f"zones/{key[1]}")

    def _disks_aggregatedList(self, params, query, body):
        """The project's disks keyed by `zones/Z` (DiskAggregatedList), filtered as the API filters:
        only `labels.KEY = VALUE` (or `labels.KEY:*`) is understood here, any other filter is a 400 so a
        test never passes on a filter the fake ignored. One page."""
        project, wanted = params["project"], query.get("filter", "").strip()
        match = re.fullmatch(r'\(?\s*labels\.([a-z0-9_-]+)\s*(?:(=)\s*"?([a-z0-9_-]*)"?|:\s*\*)\s*\)?', wanted)
        if wanted and not match:
            raise HttpError(
                400,
                f"Invalid value for field 'filter': {wanted!r} (survivor's Compute fake reads labels.KEY = VALUE only)",
            )
        items: dict[str, dict] = {}
        for (p, zone, _), disk in sorted(self.disks.items()):
            labels = disk.get("labels") or {}
            if p != project or (
                match
                and (match.group(1) not in labels or (match.group(2) and labels[match.group(1)] != match.group(3)))
            ):
                continue
            items.setdefault(f"zones/{zone}", {"disks": []})["disks"].append(disk)
        return {
            "kind": "compute#diskAggregatedList",
            "id": f"projects/{project}/aggregated/disks",
            "items": items,
            "selfLink": f"{self.endpoint}{BASE}projects/{project}/aggregated/disks",
        }

    def add_disk(
        self,
        project: str,
        zone: str,
        name: str,
        *,
        size_gb: int = 100,
        disk_type: str = "pd-balanced",
        labels: dict[str, str] | None = None,
    ) -> dict:
        """Seeds a detached disk, as one a VM deleted outside this fake left behind."""
        with self.lock:
            url = f"{self.endpoint}{BASE}projects/{project}/zones/{zone}/disks/{name}"
            self.disks[(project, zone, name)] = {
                "kind": "compute#disk",
                "id": str(next(self._ids)),
                "name": name,
                "zone": f"{self.endpoint}{BASE}projects/{project}/zones/{zone}",
                "sizeGb": str(size_gb),
                "type": f"{self.endpoint}{BASE}projects/{project}/zones/{zone}/diskTypes/{disk_type}",
                "labels": dict(labels or {}),
                "status": "READY",
                "users": [],
                "creationTimestamp": _now(),
                "selfLink": url,
            }
            return self.disks[(project, zone, name)]

    def _delete_instance(self, member: tuple[str, str, str], by_group: bool) -> None:
        vm = self.instances.pop(member, None)
        if vm is None:
            return
        self._release_disks(vm)
        for callback in self.on_instance_deleted:
            callback(vm)
        group = self.groups.get(vm["_group"]) if vm.get("_group") else None
        if group and not by_group and member in group["_members"] and self._repairs(group):
            # a MIG recreates an instance deleted by anything but itself
            self._create_instance(member, group)

    @staticmethod
    def _repairs(group: dict) -> bool:
        """Whether the group repairs a failed VM: `instanceLifecyclePolicy.defaultActionOnFailure`
        REPAIR (the default) or DO_NOTHING ("If DO_NOTHING then instances will not be repaired",
        https://cloud.google.com/compute/docs/instance-groups/turn-off-vm-repairs-in-mig)."""
        return (group.get("instanceLifecyclePolicy") or {}).get("defaultActionOnFailure", "REPAIR") != "DO_NOTHING"

    def _instance(self, params: dict) -> tuple[tuple[str, str, str], dict]:
        member = (params["project"], params["zone"], params["instance"])
        vm = self.instances.get(member)
        if vm is None:
            raise HttpError(
                404,
                f"The resource 'projects/{member[0]}/zones/{member[1]}/instances/{member[2]}' was not found",
                "notFound",
            )
        return member, vm

    def _public_instance(self, vm: dict) -> dict:
        return {k: v for k, v in vm.items() if not k.startswith("_")}

    def _instances_get(self, params, query, body):
        return self._public_instance(self._instance(params)[1])

    def _instances_stop(self, params, query, body):
        member, vm = self._instance(params)
        vm["status"] = "TERMINATED"
        vm["_serial"] += "survivor compute fake: stopped\n"
        for callback in self.on_instance_deleted:
            callback(vm)
        if vm.get("_group") in self.groups and self._repairs(self.groups[vm["_group"]]):
            vm["status"] = "RUNNING"  # autohealing: the MIG starts it again
            vm["_serial"] += "survivor compute fake: restarted by its managed instance group\n"
            for callback in self.on_instance_created:
                callback(vm)
        return self._operation(params, "stop", vm["selfLink"].split(BASE, 1)[1], f"zones/{member[1]}")

    def _instances_start(self, params, query, body):
        member, vm = self._instance(params)
        was = vm["status"]
        vm["status"] = "RUNNING"
        if was != "RUNNING":
            vm["_serial"] += "survivor compute fake: started\n"
            for callback in self.on_instance_created:
                callback(vm)
        return self._operation(params, "start", vm["selfLink"].split(BASE, 1)[1], f"zones/{member[1]}")

    def _instances_delete(self, params, query, body):
        member, vm = self._instance(params)
        self._delete_instance(member, by_group=False)
        return self._operation(params, "delete", vm["selfLink"].split(BASE, 1)[1], f"zones/{member[1]}")

    def _instances_getSerialPortOutput(self, params, query, body):
        _, vm = self._instance(params)
        start = int(query.get("start", "0") or 0)
        contents = vm["_serial"][start:]
        return {
            "kind": "compute#serialPortOutput",
            "contents": contents,
            "start": str(start),
            "next": str(start + len(contents)),
        }

    def _instances_getGuestAttributes(self, params, query, body):
        _, vm = self._instance(params)
        prefix = query.get("queryPath", "")
        items = [
            {"namespace": ns, "key": k, "value": v}
            for (ns, k), v in sorted(vm["_guest"].items())
            if f"{ns}/{k}".startswith(prefix)
        ]
        return {"kind": "compute#guestAttributes", "queryPath": prefix, "queryValue": {"items": items}}

    def _instances_insert(self, params, query, body):
        """A standalone VM (make-image's builder). Its boot disk takes the instance's name unless
        initializeParams.diskName says otherwise, and goes with it when autoDelete is set."""
        project, zone, name = params["project"], params["zone"], body.get("name", "")
        if not re.fullmatch(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?", name):
            raise HttpError(
                400,
                f"Invalid value for field 'resource.name': '{name}'. Must be a match of regex '[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?'",
            )
        if (project, zone, name) in self.instances:
            raise HttpError(
                409, f"The resource 'projects/{project}/zones/{zone}/instances/{name}' already exists", "alreadyExists"
            )
        violations = machines.property_violations(body, where="resource")
        if violations:
            raise HttpError(400, violations[0].message, "badRequest")
        denied = self._external_ip_violation(project, zone, name, body)
        if denied:
            raise HttpError(412, denied, "conditionNotMet")
        boot = [d for d in body.get("disks", []) if d.get("boot")]
        if len(boot) != 1 or not (boot[0].get("initializeParams") or {}).get("sourceImage"):
            raise HttpError(
                400,
                "Invalid value for field 'resource.disks': a boot disk with initializeParams.sourceImage is required",
            )
        vm = self.add_instance(
            project, zone, name, {i["key"]: i.get("value", "") for i in (body.get("metadata") or {}).get("items", [])}
        )
        vm.update(
            machineType=body.get("machineType", ""),
            scheduling=body.get("scheduling", {}),
            guestAccelerators=body.get("guestAccelerators", []),
            labels=body.get("labels", {}),
        )
        vm["disks"] = [
            {
                "boot": True,
                "autoDelete": bool(boot[0].get("autoDelete", True)),
                "source": f"{self.endpoint}{BASE}projects/{project}/zones/{zone}/disks/"
                f"{boot[0]['initializeParams'].get('diskName') or name}",
            }
        ]
        operation = self._operation(params, "insert", vm["selfLink"].split(BASE, 1)[1], f"zones/{zone}")
        if self.play_builders and _items(vm).get("survivor-mode") == "build":
            threading.Thread(target=self._play_builder, args=((project, zone, name),), daemon=True).start()
        return operation

    def _play_builder(self, key: tuple[str, str, str]) -> None:
        """A builder's boot, as survivor/startup/startup.sh's build mode ends it: the boot record
        `survivor/boots/<time>-<instance>-built.json` in the job dir, the guest attribute
        `survivor/build=done`, then a power-off (nothing is installed: the fake has no disk)."""
        from survivor.jobdir.storage import open_storage

        time.sleep(0.2)
        with self.lock:
            vm = self.instances.get(key)
            job_dir = _items(vm).get("survivor-job-dir", "") if vm else ""
        if not job_dir:
            return
        stamp = time.strftime("%Y%m%dT%H%M%S000000000", time.gmtime())
        try:
            open_storage(job_dir).write(
                f"survivor/boots/{stamp}-{key[2]}-built.json",
                json.dumps({"outcome": "built", "reason": "the compute fake's builder"}).encode(),
            )
        except Exception as exc:  # the builder powers off without a record, as a real one whose bucket failed
            print(f"compute fake: builder {key[2]} could not record its outcome: {exc}", file=sys.stderr)
        else:
            with self.lock:  # the builder may have been deleted meanwhile (an interrupted build): nothing to set
                if key in self.instances:
                    self.set_guest_attribute(*key, "survivor", "build", "done")
        time.sleep(0.2)
        with self.lock:
            if key in self.instances:
                self.power_off(*key)

    def power_off(self, project: str, zone: str, name: str) -> None:
        """What a guest's own `poweroff` does: the instance becomes TERMINATED (its MIG, if any, is not told)."""
        with self.lock:
            vm = self.instances[(project, zone, name)]
            vm["status"] = "TERMINATED"
            vm["_serial"] += "survivor compute fake: powered off by the guest\n"

    def _images_insert(self, params, query, body):
        """An image from a VM's disk. As the API does without forceCreate, refuses a disk attached to a
        RUNNING instance (https://cloud.google.com/compute/docs/samples/compute-images-create:
        "If forceCreate is set to true, proceeds even if the disk is attached to a running instance")."""
        project, name, family = params["project"], body.get("name", ""), body.get("family", "")
        if any(i["name"] == name for (p, _), i in self.images.items() if p == project):
            raise HttpError(
                409, f"The resource 'projects/{project}/global/images/{name}' already exists", "alreadyExists"
            )
        source = body.get("sourceDisk", "")
        m = re.search(r"zones/([^/]+)/disks/([^/]+)$", source)
        if not m:
            raise HttpError(400, f"Invalid value for field 'resource.sourceDisk': '{source}'")
        users = [
            vm
            for (p, z, _), vm in self.instances.items()
            if p == project
            and z == m.group(1)
            and any(_tail(d.get("source", "")) == m.group(2) for d in vm.get("disks", []))
        ]
        if not users:
            raise HttpError(
                404,
                f"The resource 'projects/{project}/zones/{m.group(1)}/disks/{m.group(2)}' was not found",
                "notFound",
            )
        if users[0]["status"] == "RUNNING" and query.get("forceCreate") != "true":
            raise HttpError(
                400,
                f"The disk resource 'projects/{project}/zones/{m.group(1)}/disks/{m.group(2)}' is already "
                f"being used by 'projects/{project}/zones/{m.group(1)}/instances/{users[0]['name']}'",
                "resourceInUseByAnotherResource",
            )
        image = {
            "kind": "compute#image",
            "id": str(next(self._ids)),
            "name": name,
            "family": family,
            "status": "READY",
            "sourceDisk": f"{self.endpoint}{BASE}projects/{project}/zones/{m.group(1)}/disks/{m.group(2)}",
            "labels": body.get("labels", {}),
            "description": body.get("description", ""),
            "creationTimestamp": _now(),
            "selfLink": f"{self.endpoint}{BASE}projects/{project}/global/images/{name}",
        }
        self.images[(project, family or "#" + name)] = image
        return self._operation(params, "insert", f"projects/{project}/global/images/{name}", "global")

    def add_instance(self, project: str, zone: str, name: str, metadata: dict[str, str] | None = None) -> dict:
        """A standalone instance (not in a MIG), as `gcloud compute instances create` would make."""
        with self.lock:
            vm = {
                "kind": "compute#instance",
                "id": str(next(self._ids)),
                "name": name,
                "status": "RUNNING",
                "zone": f"{self.endpoint}{BASE}projects/{project}/zones/{zone}",
                "metadata": {"items": [{"key": k, "value": v} for k, v in (metadata or {}).items()]},
                "creationTimestamp": _now(),
                "selfLink": f"{self.endpoint}{BASE}projects/{project}/zones/{zone}/instances/{name}",
                "_group": None,
                "_serial": f"survivor compute fake: {name} booted\n",
                "_guest": {},
            }
            self.instances[(project, zone, name)] = vm
            return vm

    def set_guest_attribute(self, project: str, zone: str, name: str, namespace: str, key: str, value: str) -> None:
        """What a guest writes from inside (the simulator mirrors its emulator's guest attributes here)."""
        with self.lock:
            self.instances[(project, zone, name)]["_guest"][(namespace, key)] = value

    # -- what preflight reads -----------------------------------------------------------------------

    def _regions_get(self, params, query, body):
        project, region = params["project"], params["region"]
        zones = self.zones_of(region)
        quotas = {
            metric: (DEFAULT_GPU_QUOTA, 0.0)
            for gpu in hardware.GPUS.values()
            for metric in (gpu.quota(spot=False), gpu.quota(spot=True))
            if metric
        }
        # vCPUs: CPUS and each family's own metric of the discovery document's Quota.metric enum;
        # PREEMPTIBLE_CPUS at 0, as a project that never asked for it reports it
        quotas.update({m: (DEFAULT_CPU_QUOTA, 0.0) for m in self.cpu_metrics})
        quotas["PREEMPTIBLE_CPUS"] = (0.0, 0.0)
        quotas.update(self.quotas.get((project, region), {}))
        return {
            "kind": "compute#region",
            "id": str(abs(hash(region)) % 10**15),
            "name": region,
            "status": "UP",
            "selfLink": f"{self.endpoint}{BASE}projects/{project}/regions/{region}",
            "zones": [f"{self.endpoint}{BASE}projects/{project}/zones/{z}" for z in zones],
            "quotas": [{"metric": m, "limit": limit, "usage": usage} for m, (limit, usage) in sorted(quotas.items())],
        }

    def _accelerator(self, project: str, zone: str, kind: str, cards: int) -> dict:
        return {
            "kind": "compute#acceleratorType",
            "name": kind,
            "description": kind.replace("-", " ").title(),
            "maximumCardsPerInstance": cards,
            "zone": f"{self.endpoint}{BASE}projects/{project}/zones/{zone}",
            "selfLink": f"{self.endpoint}{BASE}projects/{project}/zones/{zone}/acceleratorTypes/{kind}",
        }

    def _acceleratorTypes_list(self, params, query, body):
        project, zone = params["project"], params["zone"]
        items = [self._accelerator(project, zone, k, n) for k, n in sorted(self.accelerators.get(zone, {}).items())]
        return {"kind": "compute#acceleratorTypeList", "items": items}

    def _acceleratorTypes_get(self, params, query, body):
        project, zone, kind = params["project"], params["zone"], params["acceleratorType"]
        cards = self.accelerators.get(zone, {}).get(kind)
        if cards is None:
            raise HttpError(
                404, f"The resource 'projects/{project}/zones/{zone}/acceleratorTypes/{kind}' was not found", "notFound"
            )
        return self._accelerator(project, zone, kind, cards)

    def _images_getFromFamily(self, params, query, body):
        image = self.images.get((params["project"], params["family"]))
        if image is None:
            raise HttpError(
                404,
                f"The resource 'projects/{params['project']}/global/images/family/{params['family']}' was not found",
                "notFound",
            )
        return image

    def _projects_get(self, params, query, body):
        # the project's global quotas, GPUS_ALL_REGIONS among them (projects.get: "Global quota limits
        # are present", google.cloud.compute_v1.types.Project)
        quotas = {"GPUS_ALL_REGIONS": (DEFAULT_GPU_QUOTA, 0.0), **self.project_quotas.get(params["project"], {})}
        return {
            "kind": "compute#project",
            "name": params["project"],
            "id": PROJECT_NUMBER,
            "defaultServiceAccount": DEFAULT_ACCOUNT,
            "quotas": [{"metric": m, "limit": limit, "usage": usage} for m, (limit, usage) in sorted(quotas.items())],
            "selfLink": f"{self.endpoint}{BASE}projects/{params['project']}",
        }

    def _networks_get(self, params, query, body):
        project, name = params["project"], params["network"]
        if name not in self.networks.get(project, {"default"}):
            raise HttpError(404, f"The resource 'projects/{project}/global/networks/{name}' was not found", "notFound")
        return {
            "kind": "compute#network",
            "name": name,
            "id": str(abs(hash((project, name))) % 10**15),
            "autoCreateSubnetworks": (project, name) not in self.custom_subnets,
            "selfLink": f"{self.endpoint}{BASE}projects/{project}/global/networks/{name}",
        }

    def add_nat(
        self,
        project: str,
        region: str,
        network: str = "default",
        *,
        router: str = "nat-router",
        subnets: Sequence[str] = (),
    ) -> None:
        """A Cloud Router in `region` of `network` with a Cloud NAT gateway: for every subnet, or for the
        named subnets only (LIST_OF_SUBNETWORKS)."""
        base = f"{self.endpoint}{BASE}projects/{project}"
        nat: dict[str, Any] = {
            "name": f"{router}-nat",
            "natIpAllocateOption": "AUTO_ONLY",
            "sourceSubnetworkIpRangesToNat": "ALL_SUBNETWORKS_ALL_IP_RANGES",
        }
        if subnets:
            nat["sourceSubnetworkIpRangesToNat"] = "LIST_OF_SUBNETWORKS"
            nat["subnetworks"] = [
                {"name": f"{base}/regions/{region}/subnetworks/{s}", "sourceIpRangesToNat": ["ALL_IP_RANGES"]}
                for s in subnets
            ]
        with self.lock:
            self.routers.setdefault((project, region), []).append(
                {
                    "kind": "compute#router",
                    "name": router,
                    "region": f"{base}/regions/{region}",
                    "network": f"{base}/global/networks/{network}",
                    "nats": [nat],
                    "selfLink": f"{base}/regions/{region}/routers/{router}",
                }
            )

    def _subnetworks_list(self, params, query, body):
        # a VM's interface draws its address from a subnet of its own region ("When you create an instance,
        # you must create it in a subnet", Google's Subnetwork resource reference); an auto-mode network
        # has one, named as the network, in every region
        project, region = params["project"], params["region"]
        base = f"{self.endpoint}{BASE}projects/{project}"
        items = [
            {
                "kind": "compute#subnetwork",
                "name": network,
                "region": f"{base}/regions/{region}",
                "network": f"{base}/global/networks/{network}",
                "ipCidrRange": "10.128.0.0/20",
                "privateIpGoogleAccess": False,
                "selfLink": f"{base}/regions/{region}/subnetworks/{network}",
            }
            for network in sorted(self.networks.get(project, {"default"}))
            if region in self.custom_subnets.get((project, network), {region})
        ]
        return {"kind": "compute#subnetworkList", "items": items}

    def _routers_list(self, params, query, body):
        with self.lock:
            items = json.loads(json.dumps(self.routers.get((params["project"], params["region"]), [])))
        return {"kind": "compute#routerList", "items": items}

    def _machineTypes_get(self, params, query, body):
        name = params["machineType"]
        cpus = guest_cpus(name)
        if cpus is None:
            raise HttpError(
                404,
                f"The resource 'projects/{params['project']}/zones/{params['zone']}/machineTypes/{name}' was not found",
                "notFound",
            )
        return {
            "kind": "compute#machineType",
            "name": name,
            "guestCpus": cpus,
            "zone": params["zone"],
            "selfLink": f"{self.endpoint}{BASE}projects/{params['project']}/zones/{params['zone']}/machineTypes/{name}",
        }

    # -- HTTP -------------------------------------------------------------------------------------

    def _handler_class(self):
        server = self

        class Handler(QuietHandler):
            def _send(self, status: int, payload: Any) -> None:
                send_json(self, status, payload)

            def _serve(self, verb: str) -> None:
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    org = re.fullmatch(
                        r"/v2/projects/([^/]+)/policies/compute\.vmExternalIpAccess:getEffectivePolicy", url.path
                    )
                    if org and verb == "GET":  # Org Policy v2, as the real client's REST transport asks
                        rule = {"denyAll": True} if org.group(1) in server.external_ip_denied else {"allowAll": True}
                        return self._send(
                            200,
                            {
                                "name": f"projects/{org.group(1)}/policies/compute.vmExternalIpAccess",
                                "spec": {"rules": [rule]},
                            },
                        )
                    policy = re.fullmatch(r"/v3/projects/([^/:]+):getIamPolicy", url.path)
                    if policy and verb == "POST":  # Resource Manager v3, as the real client's REST transport asks
                        return self._send(
                            200,
                            {"version": 3, "etag": "BwYAAAAAAAA=", "bindings": server.project_policy(policy.group(1))},
                        )
                    predefined = re.fullmatch(r"/v1/(roles/[^/]+)", url.path)
                    if predefined and verb == "GET":  # IAM v1 roles.get of a predefined role ("roles/R")
                        if (found := role_resource(predefined.group(1))) is None:
                            raise HttpError(404, f"The role named {predefined.group(1)} was not found.", "notFound")
                        return self._send(200, found)
                    role = re.fullmatch(r"/v1/((?:projects|organizations)/[^/]+/roles/[^/]+)", url.path)
                    if role and verb == "GET":  # IAM v1 roles.get, for custom roles
                        if role.group(1) not in server.custom_roles:
                            raise HttpError(404, f"The role named {role.group(1)} was not found.", "notFound")
                        return self._send(
                            200,
                            {
                                "name": role.group(1),
                                "stage": "GA",
                                "etag": "BwYAAAAAAAA=",
                                "includedPermissions": server.custom_roles[role.group(1)],
                            },
                        )
                    if not url.path.startswith(BASE):
                        raise HttpError(404, f"not found: {url.path}", "notFound")
                    try:
                        body = json.loads(raw) if raw.strip() else None
                    except ValueError:
                        raise HttpError(400, "the request body is not JSON") from None
                    status, payload = server.handle(verb, url.path, query, body)
                except HttpError as exc:
                    status = exc.status
                    payload = {
                        "error": {
                            "code": exc.status,
                            "message": exc.message,
                            "errors": [{"message": exc.message, "domain": "global", "reason": exc.reason}],
                        }
                    }
                self._send(status, payload)

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

            def do_DELETE(self):
                self._serve("DELETE")

            def do_PATCH(self):
                self._serve("PATCH")

            def do_PUT(self):
                self._serve("PUT")

        return Handler


def _template_as_returned(body: dict, project: str) -> dict:
    """The template as instanceTemplates.get returns it, not as it was sent: what `gcloud compute
    instance-templates describe` shows for a template made from a partial body -- each disk with
    deviceName persistent-disk-N (when unnamed), index, kind, mode READ_WRITE, type PERSISTENT, its
    sourceImage a full URL; metadata with a fingerprint and kind; each interface with kind, name nicN
    and its network a full URL; each accessConfig with kind and networkTier PREMIUM."""
    props = body.get("properties") or {}
    for i, disk in enumerate(props.get("disks") or []):
        disk.setdefault("deviceName", f"persistent-disk-{i}")
        disk.update(index=i, kind="compute#attachedDisk")
        disk.setdefault("mode", "READ_WRITE")
        disk.setdefault("type", "PERSISTENT")
        params = disk.get("initializeParams") or {}
        if str(params.get("sourceImage", "")).startswith("projects/"):
            params["sourceImage"] = f"https://compute.googleapis.com/compute/v1/{params['sourceImage']}"
    metadata = props.setdefault("metadata", {})
    metadata.update(kind="compute#metadata", fingerprint=base64.b64encode(os.urandom(8)).decode())
    for i, nic in enumerate(props.get("networkInterfaces") or []):
        nic.update(kind="compute#networkInterface", name=f"nic{i}")
        network = str(nic.get("network") or "global/networks/default")
        if not network.startswith("https://"):
            network = network if network.startswith("projects/") else f"projects/{project}/{network}"
            nic["network"] = f"https://www.googleapis.com/compute/v1/{network}"
        for config in nic.get("accessConfigs") or []:
            config.update(kind="compute#accessConfig")
            config.setdefault("networkTier", "PREMIUM")
    return body


def _default_message(code: str, params: dict) -> str:
    zone = params.get("zone") or params.get("region") or "the zone"
    if code.startswith("ZONE_RESOURCE_POOL_EXHAUSTED"):
        return (
            f"The zone 'projects/{params.get('project')}/zones/{zone}' does not have enough resources available "
            "to fulfill the request. Try a different zone, or try again later."
        )
    if code == "QUOTA_EXCEEDED":
        return f"Quota 'PREEMPTIBLE_NVIDIA_T4_GPUS' exceeded. Limit: 0.0 in region {zone.rsplit('-', 1)[0]}."
    return code


def serve_forever(
    port: int,
    *,
    project: str,
    stockouts: Sequence[str] = (),
    quotas: Sequence[str] = (),
    image_families: Sequence[str] = (),
    deny_external_ip: bool = False,
    no_default_network: bool = False,
    api_disabled: bool = False,
    capacity: Any = None,
    capacity_zones: dict[str, str] | None = None,
    speed: float = 1.0,
) -> None:
    """Runs the fake in the foreground (for `survivor emulate compute`), seeded from the command line.
    `capacity`: Spot capacity traces (`traces.Zones`) to follow from now, `speed` trace seconds a real
    second, `capacity_zones` the fake's zone for a trace's zone (`follow_capacity`).

    `stockouts`: zones where a MIG's instance creation fails with ZONE_RESOURCE_POOL_EXHAUSTED;
    `quotas`: `REGION:METRIC=LIMIT` for `project`; `image_families`: `PROJECT/FAMILY` that resolve."""
    try:
        server = ComputeServer(port=port)
    except OSError as exc:
        raise SystemExit(f"error: --port {port}: {exc.strerror}; pick another port") from None
    for item in quotas:
        where, _, limit = item.partition("=")
        region, _, metric = where.partition(":")
        try:
            if region == "global":
                server.project_quotas.setdefault(project, {})[metric] = (float(limit), 0.0)
            else:
                server.set_quota(project, region, metric, float(limit))
            if not (region and metric):
                raise ValueError(item)
        except ValueError:
            raise SystemExit(
                f"error: --quota {item!r}: expected REGION:METRIC=LIMIT, e.g. us-west1:PREEMPTIBLE_NVIDIA_T4_GPUS=0"
            ) from None
    for item in image_families:
        owner, _, family = item.partition("/")
        if not (owner and family):
            raise SystemExit(f"error: --image-family {item!r}: expected PROJECT/FAMILY")
        server.add_image_family(owner, family)
    for zone in stockouts:
        server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", zone=zone)
    if deny_external_ip:
        server.external_ip_denied.add(project)
    if no_default_network:
        server.networks[project] = set()
    if api_disabled:
        server.api_disabled.add(project)
    if capacity is not None:
        server.follow_capacity(capacity, speed=speed, zones=capacity_zones)
    server.start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill` ends it like Ctrl-C
    print(
        f"Compute fake on {server.endpoint} (project {project}: default service account "
        f"{PROJECT_NUMBER}-compute@developer.gserviceaccount.com); export SURVIVOR_COMPUTE_ENDPOINT={server.endpoint}",
        flush=True,
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
