"""What IAM's `roles.get` answers for the predefined roles a job's project binds: the Compute fake's table.

    >>> "compute.acceleratorTypes.list" in PREDEFINED_ROLES["roles/compute.instanceAdmin.v1"]
    True
    >>> "iam.serviceAccounts.actAs" in PREDEFINED_ROLES["roles/compute.admin"]
    False

survivor itself keeps no table of predefined roles: preflight reads every role a project binds with
IAM v1 `roles.get` (`GET https://iam.googleapis.com/v1/roles/ROLE` for a predefined role, as for a
custom one `.../v1/projects/P/roles/R`), and the Compute fake (survivor/local/compute_server.py)
serves that call from this table and enforces it on the VM's calls.

Source: the `includedPermissions` of each role as `gcloud iam roles describe ROLE` (IAM `roles.get`)
printed them on 2026-08-22, in darkbitio/gcp-iam-role-permissions (commit 8ab2a6ff8d7e, files
`roles/<role>`, fetched daily from the API), and the same in iann0036/iam-dataset (commit 2073fa52ac00,
`gcp/roles/<role>.json`): the two agree on every permission below. Only the permissions a job's VM
uses on its project are listed (survivor/cloud/permissions.py `BOOT_MOVE` and `CAPACITY_DATA`, which
hold every smaller set), and the one a deployed watch writes goodput metrics with; each role grants many more (`size`: how many in all, as the source lists).
What the source says that a hand table here once got wrong: Compute Instance Admin (v1) holds
`compute.acceleratorTypes.list` and `compute.regions.get`; Compute Admin and Compute Instance Admin
hold no `iam.serviceAccounts.actAs` (that is Service Account User's); the basic Viewer holds
`compute.instanceTemplates.useReadOnly`, Compute Viewer does not.
"""

from __future__ import annotations

_GROUPS = (
    "compute.instanceGroupManagers.create",
    "compute.instanceGroupManagers.delete",
    "compute.instanceGroupManagers.get",
    "compute.instanceGroupManagers.update",
)
_TEMPLATES = (
    "compute.instanceTemplates.create",
    "compute.instanceTemplates.get",
    "compute.instanceTemplates.useReadOnly",
)
_READ = ("compute.acceleratorTypes.list", "compute.regions.get")
_ADVICE = ("compute.advice.capacity", "compute.advice.capacityHistory")
#: what `survivor watch --goodput-metrics` writes with (survivor/cloud/monitoring.py); Owner, Editor,
#: Monitoring Editor and Monitoring Metric Writer hold it, Viewer does not (the same source, same commit)
_METRICS = ("monitoring.timeSeries.create",)

#: role -> (its title, how many permissions it holds in all, those of them survivor's VM uses)
ROLES: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "roles/owner": ("Owner", 13568, _GROUPS + _TEMPLATES + _READ + _ADVICE + ("iam.serviceAccounts.actAs",) + _METRICS),
    "roles/editor": (
        "Editor",
        11979,
        _GROUPS + _TEMPLATES + _READ + _ADVICE + ("iam.serviceAccounts.actAs",) + _METRICS,
    ),
    "roles/viewer": (
        "Viewer",
        6064,
        ("compute.instanceGroupManagers.get", "compute.instanceTemplates.get", "compute.instanceTemplates.useReadOnly")
        + _READ
        + _ADVICE,
    ),
    "roles/compute.admin": ("Compute Admin", 1095, _GROUPS + _TEMPLATES + _READ + _ADVICE),
    "roles/compute.instanceAdmin.v1": ("Compute Instance Admin (v1)", 531, _GROUPS + _TEMPLATES + _READ),
    "roles/compute.instanceAdmin": ("Compute Instance Admin (beta)", 275, _GROUPS + _TEMPLATES + _READ),
    "roles/compute.viewer": (
        "Compute Viewer",
        419,
        ("compute.instanceGroupManagers.get", "compute.instanceTemplates.get") + _READ + _ADVICE,
    ),
    "roles/iam.serviceAccountUser": ("Service Account User", 5, ("iam.serviceAccounts.actAs",)),
    # a notify: webhook kept in Secret Manager, read by the VM's account: "Secret Manager Secret Accessor
    # (roles/secretmanager.secretAccessor) Allows accessing the payload of secrets": resourcemanager.projects.get,
    # resourcemanager.projects.list, secretmanager.versions.access (https://cloud.google.com/iam/docs/roles-permissions/secretmanager)
    "roles/secretmanager.secretAccessor": ("Secret Manager Secret Accessor", 3, ("secretmanager.versions.access",)),
    # "Write-only access to metrics": monitoring.metricDescriptors.create/get/list,
    # monitoring.monitoredResourceDescriptors.get/list, monitoring.timeSeries.create (roles/monitoring.metricWriter)
    "roles/monitoring.metricWriter": ("Monitoring Metric Writer", 6, _METRICS),
}

#: role -> the permissions of it that survivor's VM uses (above)
PREDEFINED_ROLES: dict[str, frozenset[str]] = {role: frozenset(granted) for role, (_, _, granted) in ROLES.items()}


def role_resource(role: str) -> dict | None:
    """The body IAM v1 `roles.get` returns for a predefined role of the table, None for any other."""
    if role not in ROLES:
        return None
    title, _, granted = ROLES[role]
    return {"name": role, "title": title, "stage": "GA", "etag": "AA==", "includedPermissions": sorted(granted)}
