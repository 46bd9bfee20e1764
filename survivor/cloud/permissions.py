"""Which Cloud Storage permissions each predefined role grants: one table for the product and the stand-ins.

    >>> "storage.objects.get" in ROLE_PERMISSIONS["roles/storage.objectUser"]
    True
    >>> sorted(granted_by(["roles/storage.objectCreator", "roles/storage.legacyBucketReader"]))
    ['storage.buckets.get', 'storage.objects.create', 'storage.objects.list']

`survivor preflight` reads a bucket's IAM policy through it; the bucket-IAM fault proxy
(survivor/local/fault_proxy.py) answers Cloud Storage's 403 to a request whose permission the granted
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
        + _buckets(*_BUCKET_ADMIN)),
    "roles/storage.objectAdmin": frozenset(
        _objects(*_OBJECT_USE, "getIamPolicy", "setIamPolicy", "setRetention", "overrideUnlockedRetention")),
    "roles/storage.objectUser": frozenset(_objects(*_OBJECT_USE)),
    "roles/storage.objectViewer": frozenset(_objects("get", "list")),
    "roles/storage.objectCreator": frozenset(_objects("create")),
    "roles/storage.legacyBucketOwner": frozenset(
        _buckets("get", "update", "getIamPolicy", "setIamPolicy") + _objects("list", "create", "delete")),
    "roles/storage.legacyBucketWriter": frozenset(_buckets("get") + _objects("list", "create", "delete")),
    "roles/storage.legacyBucketReader": frozenset(_buckets("get") + _objects("list")),
    "roles/storage.legacyObjectOwner": frozenset(_objects("get", "update", "getIamPolicy", "setIamPolicy")),
    "roles/storage.legacyObjectReader": frozenset(_objects("get")),
}


def granted_by(roles: Iterable[str]) -> frozenset[str]:
    """Pure: every permission the `roles` grant together (a role not in the table grants none here)."""
    granted: set[str] = set()
    for role in roles:
        granted |= ROLE_PERMISSIONS.get(role, frozenset())
    return frozenset(granted)
