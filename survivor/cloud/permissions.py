"""Which permissions a job needs, and which each Cloud Storage role grants on a bucket.

Cloud Storage's roles on a bucket (`ROLE_PERMISSIONS`), and the Compute Engine and IAM permissions a
job's VM uses on its project (`LEAVE_GROUP`, `DEADLINE_SWITCH`, `BOOT_MOVE`; what a project's roles
grant is read with IAM's `roles.get`, not kept here), and the permission each Compute Engine method
the VM calls needs (`METHOD_PERMISSIONS`, which the fake Compute Engine enforces).

    >>> "storage.objects.get" in ROLE_PERMISSIONS["roles/storage.objectUser"]
    True
    >>> sorted(granted_by(["roles/storage.objectCreator", "roles/storage.legacyBucketReader"]))
    ['storage.buckets.get', 'storage.objects.create', 'storage.objects.list']

`survivor preflight` reads a bucket's IAM policy through it; the bucket-IAM fault proxy
(harness/fault_proxy.py) answers Cloud Storage's 403 to a request whose permission the granted
roles lack. Only the `storage.buckets.*` and `storage.objects.*` permissions are listed: the roles
also carry folder, managed-folder, multipart-upload and project permissions that survivor never uses.

Sources: Google's role reference (https://cloud.google.com/iam/docs/roles-permissions/storage and
https://cloud.google.com/storage/docs/access-control/iam-roles) and the client libraries'
`StorageRoles` (googleapis/java-storage, https://cloud.google.com/java/docs/reference/google-cloud-storage/latest/com.google.cloud.storage.StorageRoles),
which say: admin "storage.buckets.*, storage.objects.*"; objectAdmin "storage.objects.*"; objectViewer
"storage.objects.list, .get"; legacyBucketReader "storage.buckets.get, storage.objects.list";
legacyBucketWriter that and objects.create/.delete; legacyBucketOwner that and buckets.update,
.getIamPolicy, .setIamPolicy; legacyObjectOwner "storage.objects.get, .update, .getIamPolicy,
.setIamPolicy"; legacyObjectReader "storage.objects.get". Storage Object User grants create, delete,
get, list, restore and update of objects but no ACLs or IAM policies. No object role (objectUser,
objectAdmin, objectViewer, objectCreator) has `storage.buckets.get`. Project-wide basic roles (owner,
editor, viewer) never appear in a bucket's policy, so they are not here.
"""

from __future__ import annotations

from typing import Iterable

_OBJECT_USE = ("create", "delete", "get", "list", "restore", "update")
_BUCKET_ADMIN = ("create", "delete", "get", "list", "update", "getIamPolicy", "setIamPolicy")


def _objects(*names: str) -> list[str]:
    return [f"storage.objects.{n}" for n in names]


def _buckets(*names: str) -> list[str]:
    return [f"storage.buckets.{n}" for n in names]


#: The bucket and object permissions of each predefined Cloud Storage role (sources above).
ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    "roles/storage.admin": frozenset(
        _objects(*_OBJECT_USE, "getIamPolicy", "setIamPolicy", "setRetention", "overrideUnlockedRetention")
        + _buckets(*_BUCKET_ADMIN)
    ),
    "roles/storage.objectAdmin": frozenset(
        _objects(*_OBJECT_USE, "getIamPolicy", "setIamPolicy", "setRetention", "overrideUnlockedRetention")
    ),
    "roles/storage.objectUser": frozenset(_objects(*_OBJECT_USE)),
    "roles/storage.objectViewer": frozenset(_objects("get", "list")),
    "roles/storage.objectCreator": frozenset(_objects("create")),
    "roles/storage.legacyBucketOwner": frozenset(
        _buckets("get", "update", "getIamPolicy", "setIamPolicy") + _objects("list", "create", "delete")
    ),
    "roles/storage.legacyBucketWriter": frozenset(_buckets("get") + _objects("list", "create", "delete")),
    "roles/storage.legacyBucketReader": frozenset(_buckets("get") + _objects("list")),
    "roles/storage.legacyObjectOwner": frozenset(_objects("get", "update", "getIamPolicy", "setIamPolicy")),
    "roles/storage.legacyObjectReader": frozenset(_objects("get")),
}


#: The Compute Engine and IAM permissions a job's VM uses on its project: leaving its MIG
#: (`deleteInstances`) and the deadline switch (`get` the group and its templates, make the
#: on-demand template, `setInstanceTemplate` and `recreateInstances` with a template that runs as
#: the VM's own service account). `deleteInstances` and `setInstanceTemplate` "require the following
#: IAM permission on the specified resource instanceGroupManager: compute.instanceGroupManagers.update"
#: (https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers/deleteInstances,
#: .../setInstanceTemplate); pointing a group at a template uses it (`compute.instanceTemplates.useReadOnly`)
#: and a template that runs as a service account needs `iam.serviceAccounts.actAs` on that account
#: (https://cloud.google.com/iam/docs/service-account-permissions: "attaching a service account to a
#: resource" needs actAs). These two are listed as Google's Compute IAM reference gives them;
#: the search tool here did not return that page's text for them.
LEAVE_GROUP = ("compute.instanceGroupManagers.update",)
DEADLINE_SWITCH = (
    "compute.instanceGroupManagers.get",
    "compute.instanceGroupManagers.update",
    "compute.instanceTemplates.get",
    "compute.instanceTemplates.useReadOnly",
    "compute.instanceTemplates.create",
    "iam.serviceAccounts.actAs",
)

#: A job with `placement:` (more than one place) also moves its group, from the agent at boot
#: (survivor/mig/move.py `look_and_move`): it makes the group in the next region
#: ("To create a MIG: compute.instanceGroupManagers.create on the project", Google's MIG creation
#: guides, e.g. https://docs.cloud.google.com/ai-hypercomputer/docs/create/create-mig-with-a4-or-a3ultra,
#: "Required permissions"), deletes the old one (`compute.instanceGroupManagers.delete`, in the same
#: `compute.instanceGroupManagers.*` family the roles reference lists) and lists the accelerator types
#: of the next region's zones (`compute.acceleratorTypes.list`), after reading that region's zones
#: (`regions.get`: "Authorization requires the following IAM permission on the specified resource
#: region: compute.regions.get", https://cloud.google.com/compute/docs/reference/rest/v1/regions/get;
#: without it a VM with the guide's custom role never moved).
BOOT_MOVE = DEADLINE_SWITCH + (
    "compute.instanceGroupManagers.create",
    "compute.instanceGroupManagers.delete",
    "compute.acceleratorTypes.list",
    "compute.regions.get",
)

#: Compute Engine's capacity data (docs/capacity-data.md): `advice.capacity` needs
#: `compute.advice.capacity`, `advice.capacityHistory` needs `compute.advice.capacityHistory` (each
#: method's REST reference, "IAM Permissions"); Compute Viewer holds both (Google's role reference,
#: https://cloud.google.com/iam/docs/roles-permissions/compute, lists them under roles/compute.viewer),
#: and so do Compute Admin and the basic Editor and Owner roles. survivor reads the data where it
#: decides (preflight warns when they are missing: the data is an input, never a requirement).
CAPACITY_DATA = ("compute.advice.capacity", "compute.advice.capacityHistory")

#: The permission each Compute Engine method a VM calls needs on its resource, by the method's id (the
#: REST reference's "Authorization requires the following IAM permission": deleteInstances and
#: setInstanceTemplate ask for compute.instanceGroupManagers.update; the sources are above). The
#: fake Compute Engine (survivor/local/compute_server.py) answers a 403 by it, so a new call the VM
#: makes joins this table beside its permission above.
METHOD_PERMISSIONS = {
    **{
        f"compute.{kind}.{verb}": "compute.instanceGroupManagers.update"
        for kind in ("instanceGroupManagers", "regionInstanceGroupManagers")
        for verb in ("deleteInstances", "setInstanceTemplate", "recreateInstances", "resize", "patch")
    },
    **{
        f"compute.{kind}.{verb}": "compute.instanceGroupManagers.get"
        for kind in ("instanceGroupManagers", "regionInstanceGroupManagers")
        for verb in ("get", "listManagedInstances", "listErrors")
    },
    "compute.instanceTemplates.get": "compute.instanceTemplates.get",
    # the move at boot (permissions.BOOT_MOVE): a group made in the next region, the old one deleted,
    # the next region's accelerator types listed
    **{
        f"compute.{kind}.insert": "compute.instanceGroupManagers.create"
        for kind in ("instanceGroupManagers", "regionInstanceGroupManagers")
    },
    **{
        f"compute.{kind}.delete": "compute.instanceGroupManagers.delete"
        for kind in ("instanceGroupManagers", "regionInstanceGroupManagers")
    },
    "compute.acceleratorTypes.list": "compute.acceleratorTypes.list",
    "compute.regions.get": "compute.regions.get",  # the move reads the next region's zones (BOOT_MOVE)
    "compute.instanceTemplates.insert": "compute.instanceTemplates.create",
    # resize requests: "Authorization requires ... compute.instanceGroupManagers.update" (insert's REST
    # reference, https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagerResizeRequests/insert);
    # reading them is taken to need .get, as reading the group does (an assumption)
    **{
        f"compute.{kind}.{verb}": "compute.instanceGroupManagers.update"
        for kind in ("instanceGroupManagerResizeRequests", "regionInstanceGroupManagerResizeRequests")
        for verb in ("insert", "cancel", "delete")
    },
    **{
        f"compute.{kind}.{verb}": "compute.instanceGroupManagers.get"
        for kind in ("instanceGroupManagerResizeRequests", "regionInstanceGroupManagerResizeRequests")
        for verb in ("get", "list")
    },
    # capacity data (CAPACITY_DATA): each method needs the permission of its own name
    **{p: p for p in CAPACITY_DATA},
}

_VM_COMPUTE = frozenset(p for p in DEADLINE_SWITCH if p.startswith("compute."))
_GROUPS = frozenset({"compute.instanceGroupManagers.create", "compute.instanceGroupManagers.delete"})

#: The smallest predefined role that grants each of the VM's project permissions, for a fix line
#: only: what a project's roles grant is read from IAM's `roles.get` (survivor/operator/preflight.py),
#: never from a table here. From the roles' `includedPermissions` (IAM `roles.get`, as dumped in
#: darkbitio/gcp-iam-role-permissions, 2026-08-22; survivor/local/iam_roles.py has the detail): Compute
#: Instance Admin (v1) holds `compute.instanceGroupManagers.*` and `compute.instanceTemplates.*` but not
#: `iam.serviceAccounts.actAs` ("If the user will be managing virtual machine instances that are
#: configured to run as a service account, you must also grant the roles/iam.serviceAccountUser
#: role", https://cloud.google.com/iam/docs/roles-permissions/compute); Compute Viewer holds the
#: reads (accelerator types, regions, capacity data).
ROLE_FOR = {
    **{p: "roles/compute.instanceAdmin.v1" for p in _VM_COMPUTE | _GROUPS},
    "compute.acceleratorTypes.list": "roles/compute.viewer",
    "compute.regions.get": "roles/compute.viewer",
    **{p: "roles/compute.viewer" for p in CAPACITY_DATA},
    "iam.serviceAccounts.actAs": "roles/iam.serviceAccountUser",
    # a deployed `survivor watch --goodput-metrics`'s account (survivor/cloud/monitoring.py)
    "monitoring.timeSeries.create": "roles/monitoring.metricWriter",
}


def vm_permissions(*, deadline: bool, moves: bool) -> tuple[str, ...]:
    """Pure: the project permissions a job's VM uses: leaving its group; with a deadline, the switch;
    with places to move to, the move at boot (which makes and deletes groups)."""
    if moves:
        return BOOT_MOVE
    return DEADLINE_SWITCH if deadline else LEAVE_GROUP


def granted_by(roles: Iterable[str], table: dict[str, frozenset[str]] | None = None) -> frozenset[str]:
    """Pure: every permission the `roles` grant together (a role not in the table grants none here);
    `table` defaults to the Cloud Storage roles of a bucket's policy (for a project's: each role's
    permissions as IAM's `roles.get` lists them)."""
    table = ROLE_PERMISSIONS if table is None else table
    granted: set[str] = set()
    for role in roles:
        granted |= table.get(role, frozenset())
    return frozenset(granted)
