"""MIG resize requests (flex-start, docs/flex-start.md) with the real google-cloud-compute client
(`InstanceGroupManagerResizeRequestsClient`) against survivor's Compute fake: the request's states,
the group growing all at once, and the API's refusals."""

import pytest

from survivor.cloud.compute import Compute, ComputeError, GroupRef
from survivor.local.compute_server import discovery

PROJECT, ZONE = "survivor-local", "us-central1-a"
DAY = 24 * 3600


def template(name: str, machine: str = "a2-highgpu-1g", model: str = "FLEX_START") -> dict:
    scheduling = {"provisioningModel": model, "onHostMaintenance": "TERMINATE", "automaticRestart": False}
    if model == "FLEX_START":
        scheduling["instanceTerminationAction"] = "DELETE"  # docs/flex-start.md F8
    return {
        "name": name,
        "properties": {
            "machineType": machine,
            "scheduling": scheduling,
            "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"},  # docs/flex-start.md F12
            "disks": [
                {
                    "boot": True,
                    "initializeParams": {"sourceImage": "projects/debian-cloud/global/images/family/debian-12"},
                }
            ],
            "networkInterfaces": [{"network": "global/networks/default"}],
        },
    }


def group_of(compute: Compute, name: str, body: dict, *, region: str | None = None) -> GroupRef:
    """A group of no VM from `body`, repairs off (F11; a regional one's VMs in one zone, F13): a
    resize request is what creates its VMs."""
    compute.insert_template(body)
    if region:
        compute.create_group(
            name, body["name"], region=region, size=0, repairs=False, distribution={"targetShape": "ANY_SINGLE_ZONE"}
        )
        return GroupRef(PROJECT, name, region=region)
    compute.create_group(name, body["name"], zone=ZONE, size=0, repairs=False)
    return GroupRef(PROJECT, name, zone=ZONE)


def test_the_discovery_document_the_fake_validates_against_has_the_resource():
    methods = discovery()["resources"]["instanceGroupManagerResizeRequests"]["methods"]
    assert set(methods) == {"insert", "get", "list", "cancel", "delete"}


def test_a_request_is_accepted_then_creates_its_vms_at_once_when_there_is_capacity(compute_server):
    compute = Compute(PROJECT)
    group = group_of(compute, "flex", template("flex-t"))
    compute.request_resize(group, "train-1", count=1, run_seconds=DAY)
    inserted = [r for r in compute_server.requests if r[0] == "compute.instanceGroupManagerResizeRequests.insert"]
    assert inserted[0][2] == {"name": "train-1", "resizeBy": 1, "requestedRunDuration": {"seconds": str(DAY)}}
    assert compute.resize_request(group, "train-1")["state"] == "ACCEPTED"
    assert compute.managed_instances(group) == []  # queued: no VM yet
    assert compute.resize_request(group, "train-1")["state"] == "SUCCEEDED"
    assert len(compute.managed_instances(group)) == 1
    assert compute.get_group(group)["targetSize"] == 1
    assert [r["name"] for r in compute.resize_requests_of(group)] == ["train-1"]
    assert compute.resize_request(group, "nope") is None


def test_a_request_waits_without_capacity_and_a_queued_one_can_be_cancelled_once(compute_server):
    compute = Compute(PROJECT)
    compute_server.flex_start_capacity = False
    group = group_of(compute, "flex", template("flex-t"), region="us-central1")  # a regional group too
    compute.request_resize(group, "train-1", count=1, run_seconds=600)
    for _ in range(3):
        assert compute.resize_request(group, "train-1")["state"] == "ACCEPTED"
    compute.cancel_resize_request(group, "train-1")
    assert compute.resize_request(group, "train-1")["state"] == "CANCELLED"
    assert compute.managed_instances(group) == []
    with pytest.raises(ComputeError, match="cannot be cancelled"):
        compute.cancel_resize_request(group, "train-1")


@pytest.mark.parametrize("seconds, ok", [(599, False), (600, True), (7 * DAY, True), (7 * DAY + 1, False)])
def test_a_run_duration_outside_ten_minutes_to_seven_days_is_refused(compute_server, seconds, ok):
    compute = Compute(PROJECT)
    group = group_of(compute, "flex", template("flex-t"))
    if ok:
        compute.request_resize(group, "r", count=1, run_seconds=seconds)
        assert compute.resize_request(group, "r")["state"] == "ACCEPTED"
    else:
        with pytest.raises(ComputeError, match="must be between 600 seconds"):
            compute.request_resize(group, "r", count=1, run_seconds=seconds)
        assert compute.resize_request(group, "r") is None


@pytest.mark.parametrize(
    "body, wording",
    [
        (template("spot-t", model="SPOT"), "provisioningModel FLEX_START; spot-t uses SPOT"),
        (template("n1-t", machine="n1-standard-8"), "flex-start runs only accelerator-optimized machines"),
    ],
)
def test_a_template_that_is_not_flex_start_capable_is_refused(compute_server, body, wording):
    compute = Compute(PROJECT)
    group = group_of(compute, "flex", body)
    with pytest.raises(ComputeError, match=wording):
        compute.request_resize(group, "r", count=1, run_seconds=DAY)
    assert compute.get_group(group)["targetSize"] == 0


def test_a_group_with_an_autoscaler_is_refused(compute_server):
    compute = Compute(PROJECT)
    group = group_of(compute, "flex", template("flex-t"))
    compute_server.attach_autoscaler(PROJECT, f"zones/{ZONE}", "flex")
    with pytest.raises(ComputeError, match="autoscaler"):
        compute.request_resize(group, "r", count=1, run_seconds=DAY)


# -- what Google's documents and samples require of the group and the template -----


def test_a_group_that_repairs_its_vms_is_refused(compute_server):
    """F11: "you must not configure autoscaling and must turn off repairs" (about-resize-requests-mig)."""
    compute = Compute(PROJECT)
    body = template("flex-t")
    compute.insert_template(body)
    compute.create_group("flex", "flex-t", zone=ZONE, size=0)  # repairs on: the API's default
    group = GroupRef(PROJECT, "flex", zone=ZONE)
    with pytest.raises(ComputeError, match="repairs turned off"):
        compute.request_resize(group, "r", count=1, run_seconds=DAY)
    compute.patch_group(group, {"instanceLifecyclePolicy": {"defaultActionOnFailure": "DO_NOTHING"}})
    compute.request_resize(group, "r", count=1, run_seconds=DAY)
    assert compute.resize_request(group, "r")["state"] == "ACCEPTED"


def test_a_flex_start_template_without_no_reservation_is_refused(compute_server):
    """F12: Google's flex-start and resize-request templates set reservationAffinity NO_RESERVATION."""
    compute = Compute(PROJECT)
    body = template("flex-t")
    del body["properties"]["reservationAffinity"]
    group = group_of(compute, "flex", body)
    with pytest.raises(ComputeError, match="NO_RESERVATION"):
        compute.request_resize(group, "r", count=1, run_seconds=DAY)


def test_a_regional_group_not_in_a_single_zone_is_refused(compute_server):
    """F13: the regional example puts the group's VMs in one zone (targetShape ANY_SINGLE_ZONE)."""
    compute = Compute(PROJECT)
    compute.insert_template(template("flex-t"))
    compute.create_group(
        "flex", "flex-t", region="us-central1", size=0, repairs=False, distribution={"targetShape": "ANY"}
    )
    group = GroupRef(PROJECT, "flex", region="us-central1")
    with pytest.raises(ComputeError, match="ANY_SINGLE_ZONE"):
        compute.request_resize(group, "r", count=1, run_seconds=DAY)


def test_a_group_with_repairs_off_does_not_recreate_a_vm_deleted_outside_it(compute_server):
    compute = Compute(PROJECT)
    body = template("spot-t", machine="n1-standard-4", model="SPOT")
    compute.insert_template(body)
    compute.create_group("g", "spot-t", zone=ZONE, size=1, repairs=False)
    group = GroupRef(PROJECT, "g", zone=ZONE)
    [vm] = compute.managed_instances(group)
    compute.delete_instance(PROJECT, ZONE, vm["name"])
    assert compute.managed_instances(group) == []
