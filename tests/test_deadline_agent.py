"""The agent's deadline step end to end (survivor/agent/boot.py, step 3b): a VM of a Spot group boots,
the policy says on-demand, the agent asks its group to switch through the Compute fake and ends the
attempt as stopped without training."""

import json
import sys

import pytest

from survivor.cloud.compute import Compute
from survivor.cloud.template import MachineOptions, template_body
from survivor.jobdir.journal import Journal
from survivor.jobdir.storage import open_storage
from survivor.jobdir.switches import switches
from survivor.local.instance import LocalInstance
from survivor.spec import JobSpec
from tests.conftest import dummy_spec

PROJECT = "survivor-local"
ZONE = "us-west1-b"


@pytest.mark.parametrize("earlier_switch", [None, "2019-06-01T00:00:00"], ids=["no-switch", "naive-time-switch"])
def test_a_boot_past_its_deadline_switches_its_group_to_on_demand_and_stops(compute_server, tmp_path, earlier_switch):
    # a deadline already passed: the policy's answer is on-demand, the soonest finish; a switch
    # recorded earlier with a time without a zone (UTC) does not keep the agent from deciding
    spec_yaml = dummy_spec(str(tmp_path / "jobdir"), tmp_path, train_steps=50) + "deadline: '2020-01-01T00:00:00Z'\n"
    spec = JobSpec.from_yaml(spec_yaml)
    if earlier_switch:
        open_storage(spec.job_dir).write(
            "survivor/switches/20190601T000000-spot.json",
            json.dumps({"time": earlier_switch, "to_mode": "spot", "from_mode": "on-demand", "by": "watch"}).encode(),
        )
    compute = Compute(PROJECT, endpoint=compute_server.endpoint)
    compute.insert_template(template_body("dl", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.create_group("dl", "dl", zone=ZONE, size=1)
    member = compute_server.groups[(PROJECT, f"zones/{ZONE}", "dl")]["_members"][0]
    attributes = {i["key"]: i["value"] for i in compute_server.instances[member]["metadata"]["items"]}
    assert "created-by" in attributes  # how the agent finds its group
    vm = LocalInstance(
        attributes,
        str(tmp_path / "vm"),
        name=member[2],
        zone=ZONE,
        project=PROJECT,
        python=sys.executable,
        env={"SURVIVOR_COMPUTE_ENDPOINT": compute_server.endpoint},
    )
    try:
        vm.boot()
        assert vm.wait(120) == 0, open(vm.log_path()).read()[-3000:]
    finally:
        vm.close()
    group = compute_server.groups[(PROJECT, f"zones/{ZONE}", "dl")]
    assert group["instanceTemplate"].endswith("/instanceTemplates/dl-on-demand")
    methods = [m for m, _, _ in compute_server.requests]
    assert "compute.instanceGroupManagers.setInstanceTemplate" in methods
    assert "compute.instanceGroupManagers.recreateInstances" in methods
    storage = open_storage(spec.job_dir)
    *before, switch = switches(storage)
    assert [s.time for s in before] == ([earlier_switch] if earlier_switch else [])
    assert (switch.to_mode, switch.by) == ("on-demand", "agent") and "deadline passed" in switch.reason
    [attempt] = Journal(storage).attempts()
    assert attempt.outcome == "stopped" and "switches to on-demand" in attempt.reason
    assert not (tmp_path / "steps.log").exists()  # nothing trained on the VM being replaced


def test_a_vm_whose_account_may_not_switch_its_group_records_why_and_trains_on(compute_server, tmp_path, capsys):
    # the VM's roles lack the switch's permissions (a new organisation's default account):
    # the switch fails with the API's 403, is recorded with its reason for status and report, training goes on
    from survivor.commands.main import main
    from survivor.jobdir.switches import switch_failures
    from survivor.local.compute_server import DEFAULT_ACCOUNT

    spec_yaml = dummy_spec(str(tmp_path / "jobdir"), tmp_path, train_steps=20) + "deadline: '2020-01-01T00:00:00Z'\n"
    spec = JobSpec.from_yaml(spec_yaml)
    compute = Compute(PROJECT, endpoint=compute_server.endpoint)
    compute.insert_template(template_body("dl", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.create_group("dl", "dl", zone=ZONE, size=1)
    member = compute_server.groups[(PROJECT, f"zones/{ZONE}", "dl")]["_members"][0]
    attributes = {i["key"]: i["value"] for i in compute_server.instances[member]["metadata"]["items"]}
    account = f"serviceAccount:{DEFAULT_ACCOUNT}"
    compute_server.set_project_policy(PROJECT, [{"role": "roles/storage.objectUser", "members": [account]}])
    compute_server.caller = account
    vm = LocalInstance(
        attributes,
        str(tmp_path / "vm"),
        name=member[2],
        zone=ZONE,
        project=PROJECT,
        python=sys.executable,
        env={"SURVIVOR_COMPUTE_ENDPOINT": compute_server.endpoint},
    )
    try:
        vm.boot()
        vm.wait(120)
    finally:
        vm.close()
    storage = open_storage(spec.job_dir)
    assert switches(storage) == []
    [failed] = switch_failures(storage)
    assert (failed.to_mode, failed.by) == ("on-demand", "agent") and "deadline passed" in failed.reason
    assert "Required 'compute.instanceGroupManagers.get' permission" in failed.error
    assert (tmp_path / "steps.log").exists()  # the VM trained on meanwhile
    capsys.readouterr()
    assert main(["status", "--job-dir", spec.job_dir]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(agent) failed: " in out and "compute.instanceGroupManagers.get" in out
