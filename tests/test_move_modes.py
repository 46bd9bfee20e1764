"""A move keeps the job's mode. A group on flex-start gets its VM from a resize
request; a move used to make the new region's group from the `-flex-start` template at size one,
a flex-start VM outside any request. Now the new group is made on the Spot template and the job's
recorded switch to flex-start is carried out on it (repairs off, one zone, the request), and a
request Compute Engine refuses there sends the job on-demand in the same look."""

import datetime as dt

import pytest

from survivor.cloud.compute import Compute, GroupRef
from survivor.cloud.template import MachineOptions, template_body
from survivor.jobdir.moves import Move, record_move
from survivor.jobdir.storage import open_storage
from survivor.jobdir.switches import switches
from survivor.jobdir.switches import FLEX_START, ON_DEMAND
from survivor.mig.switch import switch_group
from survivor.mig.move import complete_moves
from survivor.spec import JobSpec

PROJECT = "survivor-local"
ZONE = "us-west1-b"


@pytest.mark.parametrize("refused", [False, True])
def test_a_move_on_flex_start_asks_the_new_group_for_its_vm_with_a_resize_request(compute_server, tmp_path, refused):
    spec = JobSpec.from_yaml(
        f"job_dir: {tmp_path}/job\ntrain_steps: 1000\ntrainer: {{builtin: dummy}}\n"
        "deadline: 36h\ncompute: {machine_type: a2-highgpu-1g, gpu: none}\n"
        "fallback: {flex_start: true}\n"
        "placement: {regions: [us-west1, us-central1], move_after_minutes: 30}\n"
    )
    compute = Compute(PROJECT, endpoint=compute_server.endpoint)
    compute.insert_template(template_body("cifar", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.create_group("cifar", "cifar", zone=ZONE, size=1)
    old = GroupRef(PROJECT, "cifar", zone=ZONE)
    storage = open_storage(spec.job_dir)
    compute_server.fail_instance_creation(spot_only=True)  # a Spot stockout, everywhere
    compute_server.flex_start_capacity = False  # the request queues
    switch_group(compute, old, FLEX_START, "behind: test", by="watch", storage=storage)
    assert (compute.get_group(old) or {})["instanceTemplate"].endswith("/cifar-flex-start")

    if refused:
        compute_server.fail(
            "compute.regionInstanceGroupManagerResizeRequests.insert",
            http=400,
            message="flex-start is not available for this machine in region us-central1",
        )
    record_move(
        storage,
        Move(
            time=dt.datetime.now(dt.timezone.utc).isoformat(),
            from_place=f"zones/{ZONE}",
            to_place="regions/us-central1",
            reason="no VM for 30 min",
            by="watch",
        ),
    )
    lines: list[str] = []
    assert spec.placement is not None
    new = complete_moves(compute, old, storage, spec.placement, say=lines.append)
    assert new == GroupRef(PROJECT, "cifar", region="us-central1") and compute.get_group(old) is None
    found = compute.get_group(new) or {}
    made = [
        compute_server.instances[(PROJECT, m["zone"], m["name"])]
        for m in compute.managed_instances(new)
        if m["zone"] and (PROJECT, m["zone"], m["name"]) in compute_server.instances
    ]
    if refused:  # within the same look: on-demand, never without a VM and without a request
        assert found["instanceTemplate"].endswith("/cifar-on-demand"), lines
        assert [s.to_mode for s in switches(storage)][-1] == ON_DEMAND
        assert found["targetSize"] == 1
    else:
        assert found["instanceTemplate"].endswith("/cifar-flex-start"), lines
        assert found["instanceLifecyclePolicy"]["defaultActionOnFailure"] == "DO_NOTHING"
        assert found["distributionPolicy"]["targetShape"] == "ANY_SINGLE_ZONE"
        [request] = compute.resize_requests_of(new)
        assert request["state"] == "ACCEPTED"
        # no flex-start VM outside the request
        assert not [vm for vm in made if vm["scheduling"].get("provisioningModel") == "FLEX_START"]
        compute_server.flex_start_capacity = True
        assert (compute.resize_request(new, request["name"]) or {})["state"] == "SUCCEEDED"
        [vm] = compute.managed_instances(new)
        assert (
            compute_server.instances[(PROJECT, vm["zone"], vm["name"])]["scheduling"]["provisioningModel"]
            == "FLEX_START"
        )
