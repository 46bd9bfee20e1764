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
`roles/<role>`, fetched daily from the API); iann0036/iam-dataset (commit 2073fa52ac00,
`gcp/roles/<role>.json`) agrees on every permission the VM uses. iam_roles.json beside this file holds,
for each role a job's project may bind, its title, how many permissions it holds in all (`size`) and
every one of them in the services a job's VM and its watch call: `compute.*`, `iam.serviceAccounts.*`,
`monitoring.timeSeries.*` and `secretmanager.versions.*`, each under its `service.resource`, as the
source lists them (`git show 8ab2a6ff:roles/<role>` in that repository, filtered to those prefixes):
a new Compute Engine call the VM makes finds its permission here, granted by the roles that really
grant it, with no edit. Other services' permissions are left out (the fake serves none of them).
What the source says that a hand table here once got wrong: Compute Instance Admin (v1) holds
`compute.acceleratorTypes.list` and `compute.regions.get`; Compute Admin and Compute Instance Admin
hold no `iam.serviceAccounts.actAs` (that is Service Account User's); the basic Viewer holds
`compute.instanceTemplates.useReadOnly`, Compute Viewer does not.
"""

from __future__ import annotations

import json
from pathlib import Path

#: role -> (its title, how many permissions it holds in all, those of them in the services kept)
ROLES: dict[str, tuple[str, int, tuple[str, ...]]] = {
    role: (
        entry["title"],
        entry["size"],
        tuple(f"{resource}.{verb}" for resource, verbs in entry["permissions"].items() for verb in verbs),
    )
    for role, entry in json.loads(Path(__file__).with_name("iam_roles.json").read_text()).items()
}

#: role -> the permissions of it kept here (above)
PREDEFINED_ROLES: dict[str, frozenset[str]] = {role: frozenset(granted) for role, (_, _, granted) in ROLES.items()}


def role_resource(role: str) -> dict | None:
    """The body IAM v1 `roles.get` returns for a predefined role of the table, None for any other."""
    if role not in ROLES:
        return None
    title, _, granted = ROLES[role]
    return {"name": role, "title": title, "stage": "GA", "etag": "AA==", "includedPermissions": sorted(granted)}
