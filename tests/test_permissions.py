"""One table of what each Cloud Storage role grants, read by preflight and by the bucket-IAM fault proxy."""

import pytest

from survivor.cloud import permissions

from survivor.operator import preflight
from harness import fault_proxy
from survivor.cloud.permissions import ROLE_PERMISSIONS, granted_by
from survivor.jobdir.storage import PERMISSION_FOR

MEMBER = "serviceAccount:vm@p.iam.gserviceaccount.com"


def test_the_fault_proxy_enforces_the_table_preflight_reads():
    assert fault_proxy.ROLES is permissions.ROLE_PERMISSIONS  # no second copy to drift


@pytest.mark.parametrize("role", sorted(ROLE_PERMISSIONS))
def test_preflight_passes_a_role_exactly_when_the_proxy_lets_every_agent_call_through(role):
    # what the fault proxy lets through: a call whose permission the granted role holds
    proxy_allows_agent = all(permission in fault_proxy.ROLES[role] for permission in PERMISSION_FOR.values())
    [finding] = preflight.iam_findings("b", MEMBER, [{"role": role, "members": [MEMBER]}])
    assert (finding.level == "ok") == proxy_allows_agent, (role, finding)


def test_the_roles_as_google_lists_them():
    # the two copies disagreed here: legacyBucketReader reads bucket metadata; admin has bucket permissions
    assert ROLE_PERMISSIONS["roles/storage.legacyBucketReader"] == {"storage.buckets.get", "storage.objects.list"}
    assert {"storage.buckets.get", "storage.buckets.create", "storage.objects.get"} <= ROLE_PERMISSIONS[
        "roles/storage.admin"
    ]
    for role in (
        "roles/storage.objectAdmin",
        "roles/storage.objectUser",
        "roles/storage.objectViewer",
        "roles/storage.objectCreator",
        "roles/storage.legacyObjectOwner",
        "roles/storage.legacyObjectReader",
    ):
        assert not any(p.startswith("storage.buckets.") for p in ROLE_PERMISSIONS[role]), role
    assert "storage.objects.get" not in ROLE_PERMISSIONS["roles/storage.legacyBucketWriter"]
    assert set(PERMISSION_FOR.values()) <= ROLE_PERMISSIONS["roles/storage.objectUser"]  # the role the guide names
    assert not set(PERMISSION_FOR.values()) <= ROLE_PERMISSIONS["roles/storage.legacyBucketOwner"]  # no objects.get


def test_roles_granted_together_add_up_and_an_unknown_role_grants_nothing():
    assert granted_by(["roles/storage.objectCreator", "roles/storage.objectViewer", "roles/custom.x"]) == {
        "storage.objects.create",
        "storage.objects.get",
        "storage.objects.list",
    }
    assert granted_by([]) == frozenset()
    reader_and_legacy = [
        {"role": "roles/storage.legacyObjectReader", "members": [MEMBER]},
        {"role": "roles/storage.legacyBucketWriter", "members": [MEMBER]},
    ]
    assert [
        f.level for f in preflight.iam_findings("b", MEMBER, reader_and_legacy, needed=preflight.DATA_PERMISSIONS)
    ] == ["ok"]
