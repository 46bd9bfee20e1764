"""Which permissions a job needs, and which each Cloud Storage role grants on a bucket.

Cloud Storage's roles on a bucket (`ROLE_PERMISSIONS`), and the Compute Engine and IAM permissions a
job's VM uses on its project (`LEAVE_GROUP`, `DEADLINE_SWITCH`, `BOOT_MOVE`; what a project's roles
grant is read with IAM's `roles.get`, not kept here) and the permission each Compute Engine method
needs (`METHOD_PERMISSIONS`, which the fake Compute Engine enforces), both derived from what each
method of survivor/cloud/compute.py `Compute` declares it calls and needs (`needs`).

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

from survivor.cloud import compute

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


#: What each Compute Engine method a job's VM or survivor's commands call needs, by the method's id,
#: as the `Compute` method that calls it declares (survivor/cloud/compute.py `needs`, each with its
#: source). The fake Compute Engine (survivor/local/compute_server.py) answers a 403 by it.
METHOD_PERMISSIONS = {method: need.permission for method, need in compute.METHOD_NEEDS.items()}

#: Two permissions the VM's calls need beyond their methods': the deadline switch points its group at
#: a template (`compute.instanceTemplates.useReadOnly`) that runs as the VM's own service account, and
#: "attaching a service account to a resource" needs `iam.serviceAccounts.actAs` on that account
#: (https://cloud.google.com/iam/docs/service-account-permissions). These two are listed as Google's
#: Compute IAM reference gives them; the search tool here did not return that page's text for them.
_SWITCH_TEMPLATE = ("compute.instanceTemplates.useReadOnly", "iam.serviceAccounts.actAs")


def _used_by(use: compute.VmUse, *, beyond: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The permissions of the calls the VMs of `use` make (`Needs.vm`) not in `beyond`, each once, in the
    order declared."""
    used = dict.fromkeys(n.permission for n in compute.METHOD_NEEDS.values() if n.vm == use)
    return tuple(p for p in used if p not in beyond)


#: The Compute Engine and IAM permissions a job's VM uses on its project, from its calls
#: (`compute.METHOD_NEEDS`): leaving its MIG (`deleteInstances`); with a deadline, the switch (`get`
#: the group and its templates, make the on-demand template, `setInstanceTemplate` and
#: `recreateInstances`, and `_SWITCH_TEMPLATE`); with `placement:` (more than one place), the move at
#: boot (survivor/mig/move.py `look_and_move`: a group made in the next region, the old one deleted,
#: that region's zones and their accelerator types read).
LEAVE_GROUP = _used_by("every")
DEADLINE_SWITCH = LEAVE_GROUP + _used_by("deadline", beyond=LEAVE_GROUP) + _SWITCH_TEMPLATE
BOOT_MOVE = DEADLINE_SWITCH + _used_by("move", beyond=DEADLINE_SWITCH)

#: Compute Engine's capacity data (docs/capacity-data.md, `Compute.capacity_advice` and
#: `capacity_history` say what each needs); Compute Viewer holds both, and so do Compute Admin and the
#: basic Editor and Owner roles. survivor reads the data where it decides (preflight warns when they
#: are missing: the data is an input, never a requirement).
CAPACITY_DATA = ("compute.advice.capacity", "compute.advice.capacityHistory")

#: The smallest predefined role that grants each of the VM's project permissions, for a fix line
#: only: what a project's roles grant is read from IAM's `roles.get` (survivor/operator/preflight.py),
#: never from a table here. Each call's is declared with it (`Needs.role`), from the roles'
#: `includedPermissions` (IAM `roles.get`, as dumped in darkbitio/gcp-iam-role-permissions,
#: 2026-08-22; survivor/local/iam_roles.py has the detail): Compute Instance Admin (v1) holds
#: `compute.instanceGroupManagers.*` and `compute.instanceTemplates.*` but not
#: `iam.serviceAccounts.actAs` ("If the user will be managing virtual machine instances that are
#: configured to run as a service account, you must also grant the roles/iam.serviceAccountUser
#: role", https://cloud.google.com/iam/docs/roles-permissions/compute); Compute Viewer holds the
#: reads (accelerator types, regions, capacity data).
ROLE_FOR = {
    **{n.permission: n.role for n in compute.METHOD_NEEDS.values() if n.role},
    "compute.instanceTemplates.useReadOnly": "roles/compute.instanceAdmin.v1",
    "iam.serviceAccounts.actAs": "roles/iam.serviceAccountUser",
    # a deployed `survivor watch --goodput-metrics`'s account (survivor/cloud/monitoring.py)
    "monitoring.timeSeries.create": "roles/monitoring.metricWriter",
}


#: A VM made from the template outside a group finishes by stopping or deleting itself
#: (survivor/agent/finish.py). Refused `compute.instances.stop`, it powers off from its guest, which
#: stops it as well (survivor/agent/finish.py `CANNOT_FINISH`), so `auto` and `stop` need nothing;
#: refused `compute.instances.delete`, it is stopped, not deleted, and its disks stay billed. A
#: group's VM leaves its group instead, so this is never required of it.
STANDALONE_FINISH = {"delete": compute.METHOD_NEEDS["compute.instances.delete"].permission}


def vm_permissions(*, deadline: bool, moves: bool, on_finish: str = "keep-alive") -> tuple[str, ...]:
    """Pure: the project permissions a job's VM uses: leaving its group; with a deadline, the switch;
    with places to move to, the move at boot (which makes and deletes groups); last, what the job's
    `on_finish` needs of a VM outside a group (`STANDALONE_FINISH`: never a stop, as the template is
    made for a group)."""
    used = BOOT_MOVE if moves else DEADLINE_SWITCH if deadline else LEAVE_GROUP
    standalone = STANDALONE_FINISH.get(on_finish)
    return used + (standalone,) if standalone and standalone not in used else used


def granted_by(roles: Iterable[str], table: dict[str, frozenset[str]] | None = None) -> frozenset[str]:
    """Pure: every permission the `roles` grant together (a role not in the table grants none here);
    `table` defaults to the Cloud Storage roles of a bucket's policy (for a project's: each role's
    permissions as IAM's `roles.get` lists them)."""
    table = ROLE_PERMISSIONS if table is None else table
    granted: set[str] = set()
    for role in roles:
        granted |= table.get(role, frozenset())
    return frozenset(granted)
