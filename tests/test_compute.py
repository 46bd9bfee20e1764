"""The Compute Engine side against survivor's fake REST API, with the real google-cloud-compute client:
templates, groups, the operator commands and clear failures (the startup script: tests/test_startup.py)."""

import json
import os
import sys

import pytest

from survivor.commands import main as cli
from survivor.cloud.compute import Compute, ComputeError, GroupRef
from survivor.agent.finish import parse_created_by
from survivor.local.compute_server import PROJECT_NUMBER, SchemaError, Validator, discovery
from survivor.spec import JobSpec
from survivor.cloud.template import MachineOptions, template_body

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = os.path.join(ROOT, "templates", "cifar10-4gpu.yaml")
PROJECT = "survivor-local"


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def schema():
    doc = discovery()
    return Validator(doc["schemas"])


def test_dry_run_body_for_the_recipe_validates_and_carries_everything(capsys, schema):
    code, out, _ = run_cli(capsys, "make-template", "cifar10", "--config", RECIPE, "--dry-run")
    assert code == 0
    body = json.loads(out)
    schema.check(body, {"$ref": "InstanceTemplate"}, "InstanceTemplate")
    props = body["properties"]
    items = {i["key"]: i["value"] for i in props["metadata"]["items"]}
    spec = JobSpec.from_yaml(items["survivor-job"])
    assert spec == JobSpec.from_file(RECIPE)
    assert dict(spec.hyperparameters) == {
        "momentum": "0.9",
        "weight-decay": "0.0002",
        "learning-rate": "0.1",
        "batch-norm-decay": "0.997",
        "batch-norm-epsilon": "1e-05",
        "train-batch-size": "128",
    }
    assert items["startup-script"] == open(os.path.join(ROOT, "startup", "startup.sh")).read()
    assert items["enable-guest-attributes"] == "TRUE" and items["install-nvidia-driver"] == "True"
    assert props["guestAccelerators"] == [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 4}]
    assert props["scheduling"] == {
        "onHostMaintenance": "TERMINATE",
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "STOP",
        "automaticRestart": False,
    }
    scopes = props["serviceAccounts"][0]["scopes"]
    assert "https://www.googleapis.com/auth/compute" in scopes
    assert "https://www.googleapis.com/auth/devstorage.read_write" in scopes
    assert "https://www.googleapis.com/auth/cloud-platform" not in scopes
    assert props["labels"] == {"survivor-job": "cifar10"}


def test_on_demand_gpu_vms_terminate_on_maintenance_and_restart():
    spec = JobSpec.from_file(RECIPE)
    body = template_body("t", spec, MachineOptions.from_spec(spec, spot=False), script="#!/bin/bash\n")
    assert body["properties"]["scheduling"] == {
        "onHostMaintenance": "TERMINATE",
        "provisioningModel": "STANDARD",
        "automaticRestart": True,
    }


def test_the_schema_catches_a_misspelt_field_and_a_bad_enum(schema):
    with pytest.raises(SchemaError, match="unknown field 'machinetype'"):
        schema.check({"name": "t", "properties": {"machinetype": "n1"}}, {"$ref": "InstanceTemplate"}, "t")
    with pytest.raises(SchemaError, match="'CHEAP' is not one of"):
        schema.check({"properties": {"scheduling": {"provisioningModel": "CHEAP"}}}, {"$ref": "InstanceTemplate"}, "t")


def test_the_fake_rejects_a_bad_body_sent_by_the_real_client(compute_server):
    import requests

    answer = requests.post(
        f"{compute_server.endpoint}/compute/v1/projects/p/global/instanceTemplates",
        json={"name": "t", "properties": {"machineTyp": "n1-standard-4"}},
    )
    assert answer.status_code == 400 and "unknown field 'machineTyp'" in answer.json()["error"]["message"]
    answer = requests.post(f"{compute_server.endpoint}/compute/v1/projects/p/zones/z/instanceGroupManagers/g/resize")
    assert answer.status_code == 400 and "size" in answer.json()["error"]["message"]


def test_make_template_creates_then_is_unchanged_then_refuses_a_different_body(compute_server, capsys, tmp_path):
    # the recipe's job with a local job dir: nothing to stage in a bucket
    recipe = (
        open(RECIPE)
        .read()
        .replace("job_dir: gs://my-project-cifar-10-checkpoints/cifar10", f"job_dir: {tmp_path / 'jobdir'}")
    )
    (tmp_path / "cifar10.yaml").write_text(recipe)
    args = ["make-template", "cifar10", "--config", str(tmp_path / "cifar10.yaml"), "--project", PROJECT]
    assert run_cli(capsys, *args)[0] == 0
    assert (PROJECT, "cifar10") in compute_server.templates
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and "unchanged" in out
    code, _, err = run_cli(capsys, *args, "--machine-type", "n1-standard-32")
    assert code == 1
    assert "already exists with a different body" in err and "properties.machineType" in err
    assert "cifar10-v2" in err and "survivor delete cifar10" in err


def test_group_lifecycle_status_stop_start_delete(compute_server, capsys, tmp_path):
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(
        f"name: demo\njob_dir: {tmp_path / 'jobdir'}\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n"
        "compute: {machine_type: n1-standard-8, gpu: 'nvidia-tesla-t4:1'}\n"
    )
    assert run_cli(capsys, "make-template", "demo", "--config", str(spec_file), "--project", PROJECT)[0] == 0
    assert (
        run_cli(capsys, "make-group", "demo", "--template", "demo", "--zone", "us-west1-b", "--project", PROJECT)[0]
        == 0
    )
    group = compute_server.groups[(PROJECT, "zones/us-west1-b", "demo")]
    assert group["targetSize"] == 1 and len(group["_members"]) == 1

    from survivor.jobdir.journal import Journal
    from survivor.jobdir.storage import open_storage

    journal = Journal(open_storage(str(tmp_path / "jobdir")))
    attempt = journal.begin("demo-x")
    journal.end(attempt, "preempted", end_step=40, reached_step=40, steps_lost=0)
    member = group["_members"][0]
    compute_server.set_guest_attribute(*member, "survivor", "state", "training")
    compute_server.set_guest_attribute(*member, "survivor", "step", "55")

    code, out, _ = run_cli(capsys, "status", "demo", "--zone", "us-west1-b", "--project", PROJECT, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["group"]["target_size"] == 1
    assert report["instances"][0]["guest"] == {"state": "training", "step": "55"}
    assert report["job"]["preemptions"] == 1 and report["job"]["train_steps"] == 100
    assert report["cost"]["so_far"] is not None and report["cost"]["saving_so_far"] is not None
    code, out, _ = run_cli(capsys, "status", "demo", "--zone", "us-west1-b", "--project", PROJECT)
    assert code == 0 and "1 preemptions survived" in " ".join(out.split())

    assert run_cli(capsys, "stop", "demo", "--zone", "us-west1-b", "--project", PROJECT)[0] == 0
    assert group["targetSize"] == 0 and group["_members"] == []
    assert run_cli(capsys, "start", "demo", "--zone", "us-west1-b", "--project", PROJECT)[0] == 0
    assert group["targetSize"] == 1 and len(group["_members"]) == 1

    code, out, _ = run_cli(capsys, "logs", "demo", "--zone", "us-west1-b", "--project", PROJECT)
    assert code == 0 and "booted" in out

    code, out, _ = run_cli(capsys, "delete", "demo", "--zone", "us-west1-b", "--project", PROJECT)
    assert code == 0 and "the job dir is untouched" in out
    assert compute_server.groups == {} and compute_server.templates == {}
    assert (tmp_path / "jobdir" / "survivor" / "attempts").exists()


def test_regional_group(compute_server, capsys, tmp_path):
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(f"job_dir: {tmp_path}/j\ntrain_steps: 1\ntrainer: {{builtin: dummy}}\n")
    run_cli(capsys, "make-template", "reg", "--config", str(spec_file), "--project", PROJECT)
    assert (
        run_cli(capsys, "make-group", "reg", "--template", "reg", "--region", "us-west1", "--project", PROJECT)[0] == 0
    )
    group = compute_server.groups[(PROJECT, "regions/us-west1", "reg")]
    assert group["_members"][0][1].startswith("us-west1-")
    ref = parse_created_by(compute_server.instances[group["_members"][0]]["metadata"]["items"][-2]["value"])
    # created-by names the project by its number, as Compute Engine writes it
    assert ref == GroupRef(PROJECT_NUMBER, "reg", region="us-west1")


def test_leaving_the_group_addresses_it_by_the_project_id_not_created_bys_number():
    from survivor.agent.finish import LeaveGroup, choose_finisher
    from survivor.metadata import InstanceIdentity

    identity = InstanceIdentity(
        "my-project",
        "us-west1-b",
        "vm-1",
        created_by=f"projects/{PROJECT_NUMBER}/zones/us-west1-b/instanceGroupManagers/g",
    )
    finisher = choose_finisher("auto", identity)
    assert isinstance(finisher, LeaveGroup) and finisher.group == GroupRef("my-project", "g", zone="us-west1-b")


@pytest.mark.parametrize(
    "failure, expected",
    [
        (
            dict(operation_error="ZONE_RESOURCE_POOL_EXHAUSTED"),
            "has no capacity for this machine and GPU type right now (a stockout). Try another zone",
        ),
        (dict(operation_error="QUOTA_EXCEEDED"), "a quota is exceeded. Ask for more in the console"),
        (
            dict(
                http=403,
                message="Required 'compute.instanceGroupManagers.create' permission for 'projects/survivor-local'",
            ),
            "permission denied (Required 'compute.instanceGroupManagers.create' permission",
        ),
    ],
)
def test_stockout_quota_and_permission_errors_are_one_actionable_sentence(
    compute_server, capsys, tmp_path, failure, expected
):
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(f"job_dir: {tmp_path}/j\ntrain_steps: 1\ntrainer: {{builtin: dummy}}\n")
    run_cli(capsys, "make-template", "t", "--config", str(spec_file), "--project", PROJECT)
    compute_server.fail("compute.instanceGroupManagers.insert", **failure)
    code, out, err = run_cli(capsys, "make-group", "g", "--template", "t", "--zone", "us-west1-b", "--project", PROJECT)
    assert code == 1
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and expected in lines[0], err
    assert "Traceback" not in err


def test_a_permission_error_is_its_own_kind_and_a_403_elsewhere_in_a_message_is_not_one(compute_server):
    from survivor.agent.finish import is_permission_error
    from survivor.cloud.compute import PermissionDenied

    compute = Compute(PROJECT)
    compute_server.fail(
        "compute.instanceTemplates.get",
        http=403,
        message="Required 'compute.instanceTemplates.get' permission for 'projects/survivor-local'",
    )
    with pytest.raises(PermissionDenied) as refused:
        compute.get_template("t")
    assert is_permission_error(refused.value)
    compute_server.fail("compute.instanceTemplates.get", http=400, message="Invalid value for field name: vm-403")
    with pytest.raises(ComputeError) as flaky:
        compute.get_template("t")
    assert not isinstance(flaky.value, PermissionDenied) and "403" in str(flaky.value)
    assert not is_permission_error(flaky.value)  # was: "403" anywhere in the text


def test_operations_are_waited_on_with_the_custom_endpoint(compute_server):
    compute = Compute(PROJECT)
    spec = JobSpec.from_yaml("job_dir: /tmp/x\ntrain_steps: 1\ntrainer: {builtin: dummy}\n")
    compute.insert_template(template_body("w", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    waits = [r for r in compute_server.requests if r[0] == "compute.globalOperations.wait"]
    assert waits, "the insert's operation must be waited on through the fake"
    with pytest.raises(ComputeError, match="not found"):
        compute.delete_template("nope")


# -- Compute rules the discovery document does not carry, held by the fake -------------------------


def _raw_template(name: str, machine: str, scheduling: dict, accelerators: list | None = None) -> dict:
    props = {
        "machineType": machine,
        "scheduling": scheduling,
        "disks": [
            {"boot": True, "initializeParams": {"sourceImage": "projects/debian-cloud/global/images/family/debian-12"}}
        ],
        "networkInterfaces": [{"network": "global/networks/default"}],
    }
    if accelerators:
        props["guestAccelerators"] = accelerators
    return {"name": name, "properties": props}


T4 = [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 4}]


@pytest.mark.parametrize(
    "machine, scheduling, accelerators, wording",
    [
        (
            "g2-standard-4",
            {"provisioningModel": "STANDARD"},
            None,
            "Instances with guest accelerators do not support live migration.",
        ),
        (
            "n1-standard-16",
            {"onHostMaintenance": "MIGRATE"},
            T4,
            "Instances with guest accelerators do not support live migration.",
        ),
        (
            "g2-standard-8",
            {"onHostMaintenance": "TERMINATE"},
            T4,
            "[g2-standard-8, nvidia-tesla-t4] features are not compatible for creating instance.",
        ),
        (
            "a2-highgpu-1g",
            {"onHostMaintenance": "TERMINATE"},
            [{"acceleratorType": "nvidia-tesla-a100", "acceleratorCount": 1}],
            "[a2-highgpu-1g, nvidia-tesla-a100] features are not compatible for creating instance.",
        ),
        (
            "n1-standard-16",
            {"onHostMaintenance": "TERMINATE"},
            [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 3}],
            "Invalid value for field 'resource.properties.guestAccelerators[0].acceleratorCount': '3'.",
        ),
        (
            "n1-standard-96",
            {"onHostMaintenance": "TERMINATE"},
            [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}],
            "1 nvidia-tesla-t4 accelerators allow at most 48 vCPUs",
        ),
        (
            "n1-standard-8",
            {"provisioningModel": "SPOT", "instanceTerminationAction": "STOP", "automaticRestart": True},
            None,
            "Invalid value for field 'resource.properties.scheduling.provisioningModel': 'SPOT'. Scheduling must have",
        ),
        (
            "n1-standard-8",
            {"preemptible": True, "automaticRestart": True},
            None,
            "Scheduling must have preemptible be false when AutomaticRestart is true.",
        ),
        (
            "n1-standard-8",
            {"provisioningModel": "SPOT", "preemptionNoticeDuration": {"seconds": "30"}},
            None,
            "Invalid value for field 'resource.properties.scheduling.preemptionNoticeDuration': '30s'. Supported values: 120s.",
        ),
        (
            "n1-standard-8",
            {"provisioningModel": "STANDARD", "preemptionNoticeDuration": {"seconds": "120"}},
            None,
            "A preemption notice duration can be set for Spot VMs only.",
        ),
    ],
)
def test_the_fake_refuses_each_compute_rule_in_the_apis_words(
    compute_server, machine, scheduling, accelerators, wording
):
    compute = Compute(PROJECT)
    with pytest.raises(ComputeError) as err:
        compute.insert_template(_raw_template("bad", machine, scheduling, accelerators))
    assert wording in str(err.value)
    assert (PROJECT, "bad") not in compute_server.templates


def test_the_fake_holds_instances_insert_to_the_same_rules(compute_server):
    compute = Compute(PROJECT)
    body = _raw_template("vm", "zones/us-west1-b/machineTypes/g2-standard-8", {"provisioningModel": "STANDARD"})
    with pytest.raises(ComputeError, match=r"Instances with guest accelerators do not support live migration\."):
        compute.insert_instance("us-west1-b", {"name": "vm", **body["properties"]})
    assert (PROJECT, "us-west1-b", "vm") not in compute_server.instances
    body["properties"]["scheduling"] = {"onHostMaintenance": "TERMINATE"}
    compute.insert_instance("us-west1-b", {"name": "vm", **body["properties"]})
    assert compute_server.instances[(PROJECT, "us-west1-b", "vm")]["status"] == "RUNNING"


def test_the_fake_takes_what_the_rules_allow(compute_server):
    compute = Compute(PROJECT)
    compute.insert_template(
        _raw_template(
            "g2",
            "g2-standard-8",
            {"provisioningModel": "SPOT", "automaticRestart": False, "preemptionNoticeDuration": {"seconds": "120"}},
        )
    )
    compute.insert_template(_raw_template("n1", "n1-standard-16", {"onHostMaintenance": "TERMINATE"}, T4))
    assert {(PROJECT, "g2"), (PROJECT, "n1")} <= set(compute_server.templates)


def _job_file(tmp_path, compute_section: str = "") -> str:
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(f"job_dir: {tmp_path}/j\ntrain_steps: 1\ntrainer: {{builtin: dummy}}\n{compute_section}")
    return str(spec_file)


def test_make_template_refuses_a_contradiction_before_any_call(compute_server, capsys, tmp_path):
    code, _, err = run_cli(
        capsys,
        "make-template",
        "t",
        "--config",
        _job_file(tmp_path),
        "--project",
        PROJECT,
        "--machine-type",
        "g2-standard-8",
        "--gpu",
        "nvidia-tesla-t4:4",
    )
    assert code == 2
    assert err.strip() == (
        "error: compute.gpu nvidia-tesla-t4:4 with machine_type g2-standard-8: g2 machines carry "
        "their own GPUs (g2-standard-8: 1 x nvidia-l4); drop compute.gpu (or --gpu none)"
    )
    assert compute_server.requests == []


def test_make_template_on_demand_g2_passes_the_fake(compute_server, capsys, tmp_path):
    code, _, err = run_cli(
        capsys,
        "make-template",
        "g2",
        "--config",
        _job_file(tmp_path),
        "--project",
        PROJECT,
        "--machine-type",
        "g2-standard-8",
        "--gpu",
        "none",
        "--on-demand",
    )
    assert code == 0, err
    props = compute_server.templates[(PROJECT, "g2")]["properties"]
    assert props["scheduling"]["onHostMaintenance"] == "TERMINATE" and "guestAccelerators" not in props
    assert run_cli(capsys, "make-group", "g2", "--template", "g2", "--zone", "us-west1-b", "--project", PROJECT)[0] == 0
    code, out, _ = run_cli(capsys, "status", "g2", "--zone", "us-west1-b", "--project", PROJECT, "--json")
    machine = json.loads(out)["machine"]
    assert (machine["gpu_type"], machine["gpu_count"]) == ("nvidia-l4", 1)  # carried, not attached


@pytest.mark.parametrize(
    "code, expected",
    [
        (
            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
            "us-west1-b has no capacity for this machine and GPU type right now (a stockout)",
        ),
        ("QUOTA_EXCEEDED", "a quota is exceeded"),
        ("PERMISSIONS_ERROR", "permission denied. A MIG creates its VMs as the Google APIs service agent"),
    ],
)
def test_make_group_reports_the_migs_creation_error_not_created(compute_server, capsys, tmp_path, code, expected):
    assert run_cli(capsys, "make-template", "t", "--config", _job_file(tmp_path), "--project", PROJECT)[0] == 0
    message = "Required 'compute.images.useReadOnly' permission for 'projects/x'" if code == "PERMISSIONS_ERROR" else ""
    compute_server.fail_instance_creation(code, message=message)
    out_code, out, err = run_cli(
        capsys,
        "make-group",
        "g",
        "--template",
        "t",
        "--zone",
        "us-west1-b",
        "--project",
        PROJECT,
        "--wait-seconds",
        "5",
        "--poll-seconds",
        "0.1",
    )
    assert out_code == 1
    assert "created" not in out
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert line.startswith("error: group g: its VM cannot be created: ") and expected in line
    assert code in line and "The group keeps retrying" in line and "survivor delete g --zone us-west1-b" in line
    # the insert itself succeeded: the group is there, its VM is not
    group = compute_server.groups[(PROJECT, "zones/us-west1-b", "g")]
    assert group["targetSize"] == 1 and not any(m in compute_server.instances for m in group["_members"])


def test_make_group_waits_out_a_passing_stockout_until_the_vm_runs(compute_server, capsys, tmp_path):
    assert run_cli(capsys, "make-template", "t", "--config", _job_file(tmp_path), "--project", PROJECT)[0] == 0
    compute = Compute(PROJECT)
    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", times=1)
    compute.create_group("g", "t", zone="us-west1-b")
    group = GroupRef(PROJECT, "g", zone="us-west1-b")
    [member] = compute.managed_instances(group)  # the group tried again on this look, and got it
    assert member["status"] == "RUNNING"
    assert compute.group_errors(group)[0]["code"] == "ZONE_RESOURCE_POOL_EXHAUSTED"


def test_make_group_says_running_when_the_vm_runs(compute_server, capsys, tmp_path):
    assert run_cli(capsys, "make-template", "t", "--config", _job_file(tmp_path), "--project", PROJECT)[0] == 0
    code, out, _ = run_cli(capsys, "make-group", "g", "--template", "t", "--zone", "us-west1-b", "--project", PROJECT)
    assert code == 0 and "its VM is RUNNING in us-west1-b" in out


def test_a_zone_without_the_gpu_is_reported_by_preflight_and_by_the_mig(compute_server, capsys, tmp_path):
    assert run_cli(capsys, "make-template", "t", "--config", _job_file(tmp_path), "--project", PROJECT)[0] == 0
    code, _, err = run_cli(capsys, "make-group", "g", "--template", "t", "--zone", "us-west1-c", "--project", PROJECT)
    assert code == 1 and "error: zone us-west1-c does not offer nvidia-tesla-t4 x 1" in err
    assert (PROJECT, "zones/us-west1-c", "g") not in compute_server.groups
    code, _, err = run_cli(
        capsys,
        "make-group",
        "g",
        "--template",
        "t",
        "--zone",
        "us-west1-c",
        "--project",
        PROJECT,
        "--skip-preflight",
        "--poll-seconds",
        "0.1",
    )
    assert (
        code == 1
        and "us-west1-c does not offer this GPU" in err
        and "acceleratorTypes/nvidia-tesla-t4' was not found" in err
    )


def test_an_organisation_policy_against_external_ips_names_the_flag_that_complies(compute_server, capsys, tmp_path):
    """constraints/compute.vmExternalIpAccess refuses the VM (412 conditionNotMet in
    the group's errors); make-group says how to comply, and a template made with --no-external-ip runs."""
    compute_server.external_ip_denied.add(PROJECT)
    code, out, err = run_cli(capsys, "make-template", "t", "--config", _job_file(tmp_path), "--project", PROJECT)
    assert code == 1 and "denies every VM of survivor-local an external IP" in out + err  # preflight says it first
    assert (
        run_cli(
            capsys, "make-template", "t", "--config", _job_file(tmp_path), "--project", PROJECT, "--skip-preflight"
        )[0]
        == 0
    )
    code, _, err = run_cli(
        capsys,
        "make-group",
        "g",
        "--template",
        "t",
        "--zone",
        "us-west1-b",
        "--project",
        PROJECT,
        "--wait-seconds",
        "2",
        "--poll-seconds",
        "0.1",
        "--skip-preflight",
    )
    assert code == 1, err
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert (
        "an organisation policy (constraints/compute.vmExternalIpAccess) forbids the VM an external IP. Make the "
        "template with --no-external-ip" in line
    )
    assert "Constraint constraints/compute.vmExternalIpAccess violated for project" in line  # the API's own words
    assert run_cli(capsys, "delete", "g", "--zone", "us-west1-b", "--project", PROJECT, "--template", "keep-it")[0] == 0
    assert (
        run_cli(
            capsys, "make-template", "t2", "--config", _job_file(tmp_path), "--project", PROJECT, "--no-external-ip"
        )[0]
        == 0
    )
    code, out, err = run_cli(
        capsys, "make-group", "g2", "--template", "t2", "--zone", "us-west1-b", "--project", PROJECT
    )
    assert code == 0 and "its VM is RUNNING in us-west1-b" in out, err


def test_a_regional_group_gets_shape_any_over_the_zones_that_offer_the_gpu(compute_server, capsys, tmp_path):
    assert run_cli(capsys, "make-template", "t", "--config", _job_file(tmp_path), "--project", PROJECT)[0] == 0
    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", zone="us-west1-a")
    code, out, err = run_cli(capsys, "make-group", "g", "--template", "t", "--region", "us-west1", "--project", PROJECT)
    assert code == 0, err
    group = compute_server.groups[(PROJECT, "regions/us-west1", "g")]
    assert group["distributionPolicy"] == {
        "targetShape": "ANY",
        "zones": [{"zone": f"projects/{PROJECT}/zones/us-west1-a"}, {"zone": f"projects/{PROJECT}/zones/us-west1-b"}],
    }
    assert "RUNNING in us-west1-b" in out  # a stockout in -a: shape ANY places the VM where there is room


# -- the agent finishing inside a fake MIG ---------------------------------------------------------


def _instance_attributes(vm: dict) -> dict[str, str]:
    return {item["key"]: item["value"] for item in vm["metadata"]["items"]}


def agent_in_a_group(name: str, spec_yaml: str, compute_server, tmp_path, capsys):
    """make-template + make-group through the CLI, then a local VM for the instance the MIG created,
    carrying that instance's metadata (created-by included). Returns (group, member, vm)."""
    from survivor.local.instance import LocalInstance

    (tmp_path / "job.yaml").write_text(spec_yaml)
    assert run_cli(capsys, "make-template", name, "--config", str(tmp_path / "job.yaml"), "--project", PROJECT)[0] == 0
    assert run_cli(capsys, "make-group", name, "--template", name, "--zone", "us-west1-b", "--project", PROJECT)[0] == 0
    group = compute_server.groups[(PROJECT, "zones/us-west1-b", name)]
    member = group["_members"][0]
    vm = LocalInstance(
        _instance_attributes(compute_server.instances[member]),
        str(tmp_path / "vm"),
        name=member[2],
        zone=member[1],
        project=PROJECT,
        python=sys.executable,
        env={"SURVIVOR_COMPUTE_ENDPOINT": compute_server.endpoint},
    )
    return group, member, vm


@pytest.mark.parametrize("on_finish", ["auto", "keep-alive"])
def test_a_finished_agent_leaves_its_group_so_nothing_is_recreated(on_finish, compute_server, tmp_path, capsys):
    from tests.conftest import dummy_spec

    spec_yaml = dummy_spec(str(tmp_path / "jobdir"), tmp_path, train_steps=15, on_finish=on_finish)
    group, member, vm = agent_in_a_group("fin", spec_yaml, compute_server, tmp_path, capsys)
    try:
        vm.boot()
        assert vm.wait(120) == 0, open(vm.log_path()).read()[-2000:]
    finally:
        vm.close()
    if on_finish == "auto":
        assert group["targetSize"] == 0 and group["_members"] == [] and member not in compute_server.instances
        assert any(r[0] == "compute.instanceGroupManagers.deleteInstances" for r in compute_server.requests)
    else:
        assert group["targetSize"] == 1 and compute_server.instances[member]["status"] == "RUNNING"


def test_a_finished_vm_that_cannot_leave_its_group_powers_off_and_again_when_recreated(
    compute_server, tmp_path, capsys
):
    """The VM's account lacks compute.instanceGroupManagers.update (new
    organisations no longer grant the default account Editor): the agent cannot leave its group
    once DONE is written, and powered off instead of billing on; the group's recreation of it sees
    DONE and powers off again at once. One line says why, in the log and the guest attributes."""
    from survivor.jobdir.journal import Journal
    from survivor.jobdir.storage import open_storage
    from tests.conftest import dummy_spec

    denied = (
        "Required 'compute.instanceGroupManagers.update' permission for "
        f"'projects/{PROJECT}/zones/us-west1-b/instanceGroupManagers/nope'"
    )
    compute_server.fail("compute.instanceGroupManagers.deleteInstances", http=403, message=denied, times=2)
    job_dir = str(tmp_path / "jobdir")
    spec_yaml = dummy_spec(job_dir, tmp_path, train_steps=15, on_finish="auto")
    group, member, vm = agent_in_a_group("nope", spec_yaml, compute_server, tmp_path, capsys)
    try:
        vm.boot()
        assert vm.wait(120) == 0, open(vm.log_path()).read()[-2000:]
        assert vm.powered_off() and Journal(open_storage(job_dir)).done() is not None
        log = open(vm.log_path()).read()
        assert (
            "this VM's service account cannot leave its group" in log and "compute.instanceGroupManagers.update" in log
        )
        guest = vm.metadata.get("instance/guest-attributes")["survivor"]
        assert guest["finish"].startswith("this VM's service account cannot leave its group")
        vm.boot(wipe=True)  # the group recreates it: DONE is there, so it powers off at once
        assert vm.wait(60) == 0 and vm.powered_off()
        assert "the job dir says DONE" in open(vm.log_path()).read()
    finally:
        vm.close()
    assert group["targetSize"] == 1  # it could not leave: the group still has it, stopped by its own OS


def test_survivor_watch_deletes_the_group_of_a_done_job_whose_vm_could_not_leave_it(
    compute_server, tmp_path, capsys, monkeypatch
):
    """Forced past preflight, a DONE job's VM cannot leave its group and
    powers off; the group would repair it, and it would boot, see DONE and power off, billed, for
    ever. `survivor watch`, run as the operator, deletes the group, so no VM boots again after DONE."""
    from survivor.jobdir.journal import Journal
    from survivor.jobdir.storage import open_storage
    from survivor.operator import watch
    from tests.conftest import dummy_spec

    denied = (
        "Required 'compute.instanceGroupManagers.update' permission for "
        f"'projects/{PROJECT}/zones/us-west1-b/instanceGroupManagers/nope'"
    )
    compute_server.fail("compute.instanceGroupManagers.deleteInstances", http=403, message=denied, times=5)
    job_dir = str(tmp_path / "jobdir")
    spec_yaml = dummy_spec(job_dir, tmp_path, train_steps=15, on_finish="auto")
    group, member, vm = agent_in_a_group("nope", spec_yaml, compute_server, tmp_path, capsys)
    try:
        vm.boot()
        assert vm.wait(120) == 0, open(vm.log_path()).read()[-2000:]
        assert vm.powered_off() and Journal(open_storage(job_dir)).done() is not None
    finally:
        vm.close()
    assert group["targetSize"] == 1  # the VM could not leave: the group still keeps it
    booted_after_done: list[str] = []
    compute_server.on_instance_created.append(lambda made: booted_after_done.append(made["name"]))
    assert run_cli(capsys, "watch", "nope", "--zone", "us-west1-b", "--project", PROJECT)[1].count("deleted") == 0
    monkeypatch.setattr(watch, "FINISH_GRACE_SECONDS", 0.0)  # the agent's own leave had its time
    code, out, _ = run_cli(capsys, "watch", "nope", "--zone", "us-west1-b", "--project", PROJECT)
    assert code == 0 and "job nope: DONE, but its group still kept a VM" in out and "group nope deleted" in out, out
    assert (PROJECT, "zones/us-west1-b", "nope") not in compute_server.groups and member not in compute_server.instances
    code, out, _ = run_cli(capsys, "watch", "nope", "--zone", "us-west1-b", "--project", PROJECT)
    assert code != 0 and "not found" in out + _  # nothing left to look at
    assert booted_after_done == []


def test_a_look_deletes_only_a_group_that_still_keeps_a_vm_after_the_grace():
    import datetime as dt

    from survivor.operator.watch import over_group_to_delete

    now = dt.datetime(2026, 11, 1, 12, tzinfo=dt.timezone.utc)
    minutes = [now - dt.timedelta(minutes=m) for m in (1, 10)]
    assert not over_group_to_delete(None, minutes[1], 1, now)  # not ended
    assert not over_group_to_delete("DONE", minutes[1], 0, now)  # the VM left: an empty group costs nothing
    assert not over_group_to_delete("DONE", minutes[0], 1, now)  # the agent may be leaving right now
    assert over_group_to_delete("DONE", minutes[1], 1, now) and over_group_to_delete("FAILED", None, 1, now)


def standalone_vm(compute_server, tmp_path, on_finish: str):
    """A local VM `solo` outside any group, known to the Compute fake, running a 10-step dummy job."""
    from survivor.local.instance import LocalInstance
    from tests.conftest import dummy_spec

    compute_server.add_instance(PROJECT, "us-west1-b", "solo")
    return LocalInstance(
        {"survivor-job": dummy_spec(str(tmp_path / "jobdir"), tmp_path, train_steps=10, on_finish=on_finish)},
        str(tmp_path / "vm"),
        name="solo",
        zone="us-west1-b",
        project=PROJECT,
        python=sys.executable,
        env={"SURVIVOR_COMPUTE_ENDPOINT": compute_server.endpoint},
    )


def test_a_standalone_agent_stops_its_instance(compute_server, tmp_path):
    vm = standalone_vm(compute_server, tmp_path, "auto")
    try:
        vm.boot()
        assert vm.wait(120) == 0
    finally:
        vm.close()
    assert compute_server.instances[(PROJECT, "us-west1-b", "solo")]["status"] == "TERMINATED"


@pytest.mark.parametrize("on_finish", ["auto", "delete"])
def test_a_standalone_vm_whose_account_may_not_stop_or_delete_it_powers_off(on_finish, compute_server, tmp_path):
    """Outside a group, a DONE job's VM stops (or deletes) itself; refused the permission, it powers
    off from its guest, which stops it, instead of billing on with a retrying agent. One line says
    why and what to grant."""
    from survivor.jobdir.journal import Journal
    from survivor.jobdir.storage import open_storage

    method = "compute.instances.stop" if on_finish == "auto" else "compute.instances.delete"
    vm = standalone_vm(compute_server, tmp_path, on_finish)
    compute_server.fail(method, http=403, message=f"Required '{method}' permission for 'projects/{PROJECT}'")
    job_dir = str(tmp_path / "jobdir")
    try:
        vm.boot()
        assert vm.wait(120) == 0, open(vm.log_path()).read()[-2000:]
        assert vm.powered_off() and Journal(open_storage(job_dir)).done() is not None
        verb = "stop" if on_finish == "auto" else "delete"
        said = [line["message"] for line in vm.log_lines() if line.get("severity") == "ERROR"]
        assert [m for m in said if m.startswith(f"this VM's service account cannot {verb} it") and method in m], said
    finally:
        vm.close()
    # the API's call was refused, so it changed nothing; the guest's power-off is what stops such a VM
    # on Compute Engine (the fake does not tie a local VM's power-off to its instance's status)
    assert compute_server.instances[(PROJECT, "us-west1-b", "solo")]["status"] == "RUNNING"


def test_stopping_a_mig_instance_directly_gets_it_restarted_which_is_why_agents_leave(compute_server):
    compute = Compute(PROJECT)
    spec = JobSpec.from_yaml("job_dir: /tmp/x\ntrain_steps: 1\ntrainer: {builtin: dummy}\n")
    compute.insert_template(template_body("r", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.create_group("r", "r", zone="us-west1-b")
    name = compute.managed_instances(GroupRef(PROJECT, "r", zone="us-west1-b"))[0]["name"]
    compute.stop_instance(PROJECT, "us-west1-b", name)
    assert compute.get_instance("us-west1-b", name)["status"] == "RUNNING"


def test_a_job_that_keeps_failing_ends_failed_and_leaves_its_group(compute_server, tmp_path, capsys):
    from survivor.jobdir.journal import Journal
    from survivor.jobdir.storage import open_storage
    from tests.conftest import dummy_spec

    job_dir = str(tmp_path / "jobdir")
    spec_yaml = dummy_spec(job_dir, tmp_path, extra_args=["--fail-at-start"], on_finish="auto")
    group, member, vm = agent_in_a_group("bad", spec_yaml, compute_server, tmp_path, capsys)
    try:
        codes = []
        for _ in range(3):  # systemd restarting the agent on the same VM
            vm.boot()
            codes.append(vm.wait(60))
    finally:
        vm.close()
    assert codes == [1, 1, 0]
    assert "exited with code 3" in Journal(open_storage(job_dir)).failed()["reason"]
    assert group["targetSize"] == 0 and member not in compute_server.instances
    code, out, _ = run_cli(capsys, "status", "--job-dir", job_dir)
    assert code == 0 and "FAILED" in out and "exited with code 3" in " ".join(out.split())


def test_list_errors_order_is_not_trusted_and_old_errors_do_not_fail_a_new_request():
    """listErrors takes no orderBy or filter and documents no order. The newest
    error is found by its timestamp, and one from before the request (a past recreation, a first
    zone's stockout) does not make a group that is being created "failed"."""
    from survivor.cloud.compute import group_creation

    old = {
        "code": "ZONE_RESOURCE_POOL_EXHAUSTED",
        "message": "old",
        "action": "CREATING",
        "instance": "projects/p/zones/us-west1-a/instances/g-1",
        "timestamp": "2026-11-24T08:00:00+00:00",
    }
    new = {
        "code": "QUOTA_EXCEEDED",
        "message": "new",
        "action": "CREATING",
        "instance": "projects/p/zones/us-west1-b/instances/g-1",
        "timestamp": "2026-11-24T10:00:00+00:00",
    }
    creating = [{"name": "g-1", "zone": "us-west1-b", "status": None, "errors": []}]
    assert group_creation(creating, [old, new]) == ("failed", "us-west1-b", [("QUOTA_EXCEEDED", "new")])
    assert group_creation(creating, [new, old]) == ("failed", "us-west1-b", [("QUOTA_EXCEEDED", "new")])
    assert group_creation(creating, [old], since="2026-11-24T09:00:00+00:00") == ("waiting", "us-west1-b", [])


def test_the_fake_lists_errors_oldest_first_and_survivor_sorts_them(compute_server, capsys, tmp_path):
    assert run_cli(capsys, "make-template", "t", "--config", _job_file(tmp_path), "--project", PROJECT)[0] == 0
    compute = Compute(PROJECT)
    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", times=1)
    compute_server.fail_instance_creation("QUOTA_EXCEEDED", times=1)
    compute.create_group("g", "t", zone="us-west1-b")
    group = GroupRef(PROJECT, "g", zone="us-west1-b")
    [member] = compute.managed_instances(group)  # a second try: QUOTA_EXCEEDED, then running on the third
    raw = compute_server.groups[(PROJECT, "zones/us-west1-b", "g")]["_errors"]
    # the first listed is the newest here: no order is documented, so only the timestamps say
    raw[0]["timestamp"], raw[1]["timestamp"] = "2026-11-24T10:00:00+00:00", "2026-11-24T09:00:00+00:00"
    assert [e["code"] for e in compute.group_errors(group)] == ["ZONE_RESOURCE_POOL_EXHAUSTED", "QUOTA_EXCEEDED"]


def test_make_template_again_on_an_unchanged_spec_is_unchanged_though_get_returns_it_normalized(
    compute_server, capsys, tmp_path
):
    """instanceTemplates.get returns full URLs, disk device names, modes, kinds and
    a metadata fingerprint survivor never sent; a rerun compares what survivor sets, as resources."""
    job = _job_file(tmp_path)
    assert run_cli(capsys, "make-template", "t", "--config", job, "--project", PROJECT)[0] == 0
    stored = compute_server.templates[(PROJECT, "t")]["properties"]
    assert stored["networkInterfaces"][0]["network"].startswith("https://www.googleapis.com/compute/v1/projects/")
    assert stored["disks"][0]["deviceName"] == "persistent-disk-0" and stored["metadata"]["fingerprint"]
    code, out, err = run_cli(capsys, "make-template", "t", "--config", job, "--project", PROJECT)
    assert code == 0 and "unchanged" in out + err, out + err
    code, out, err = run_cli(capsys, "make-template", "t", "--config", job, "--project", PROJECT, "--no-external-ip")
    assert (
        code == 1
        # the spec the template carries says the flag too (its compute: external_ip)
        and "already exists with a different body (differs in: metadata survivor-job, "
        "properties.networkInterfaces[0].accessConfigs)"
        in err
    ), err
    code, out, err = run_cli(capsys, "make-template", "t", "--config", job, "--project", PROJECT, "--disk-gb", "300")
    assert code == 1 and "properties.disks[0].initializeParams.diskSizeGb" in err, err


def test_references_compare_as_resources_not_spellings():
    from survivor.cloud.template import body_differences

    sent = {"properties": {"networkInterfaces": [{"network": "global/networks/default"}]}}
    got = {
        "properties": {
            "networkInterfaces": [
                {
                    "network": "https://www.googleapis.com/compute/v1/projects/p/global/networks/default",
                    "name": "nic0",
                    "kind": "x",
                }
            ]
        }
    }
    assert body_differences(got, sent, project="p") == []
    assert body_differences(got, sent, project="q") == ["properties.networkInterfaces[0].network"]
    got["properties"]["networkInterfaces"][0]["accessConfigs"] = [{"type": "ONE_TO_ONE_NAT"}]
    assert body_differences(got, sent, project="p") == ["properties.networkInterfaces[0].accessConfigs"]


def test_a_first_zone_stockout_in_a_regional_group_that_then_tries_another_zone_is_not_failed(
    compute_server, capsys, tmp_path
):
    """An ANY group's stockout in its first zone, listed during this very request, is
    not why its VM is not running when the group is creating it in another zone."""
    assert run_cli(capsys, "make-template", "t", "--config", _job_file(tmp_path), "--project", PROJECT)[0] == 0
    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", zone="us-west1-a")
    compute_server.hold_instance_creation(tries=3)  # -b takes a few looks to provision the VM
    code, out, err = run_cli(
        capsys,
        "make-group",
        "g",
        "--template",
        "t",
        "--region",
        "us-west1",
        "--project",
        PROJECT,
        "--wait-seconds",
        "5",
        "--poll-seconds",
        "0.1",
    )
    assert code == 0 and "RUNNING in us-west1-b" in out, err
    assert [e["code"] for e in Compute(PROJECT).group_errors(GroupRef(PROJECT, "g", region="us-west1"))] == [
        "ZONE_RESOURCE_POOL_EXHAUSTED"
    ]  # -a's stockout is listed all the same


def test_a_rerun_of_make_group_on_a_group_recreating_its_vm_is_not_failed_by_an_old_error(
    compute_server, capsys, tmp_path
):
    assert run_cli(capsys, "make-template", "t", "--config", _job_file(tmp_path), "--project", PROJECT)[0] == 0
    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", times=1)
    args = [
        "make-group",
        "g",
        "--template",
        "t",
        "--zone",
        "us-west1-b",
        "--project",
        PROJECT,
        "--wait-seconds",
        "5",
        "--poll-seconds",
        "0.1",
    ]
    assert run_cli(capsys, *args)[0] == 0  # a stockout, then the VM ran
    [old] = compute_server.groups[(PROJECT, "zones/us-west1-b", "g")]["_errors"]
    old["timestamp"] = "2026-11-24T08:00:00.000-08:00"  # that was hours ago; the fake keeps it
    compute, group = Compute(PROJECT), GroupRef(PROJECT, "g", zone="us-west1-b")
    compute_server.hold_instance_creation(tries=3)
    compute.recreate_instances(group, [(m["zone"], m["name"]) for m in compute.managed_instances(group)])
    [member] = compute.managed_instances(group)
    assert (member["status"], member["action"], member["errors"]) == ("", "CREATING", [])  # mid-recreation
    code, out, err = run_cli(capsys, *args)
    assert code == 0 and "RUNNING in us-west1-b" in out, err


def test_an_error_for_a_zone_the_group_left_does_not_fail_it():
    from survivor.cloud.compute import group_creation

    creating = [{"name": "g-1", "zone": "us-west1-b", "status": "", "errors": []}]
    left = {
        "code": "ZONE_RESOURCE_POOL_EXHAUSTED",
        "message": "a",
        "action": "CREATING",
        "instance": "projects/p/zones/us-west1-a/instances/g-1",
        "timestamp": "2026-11-24T10:00:00+00:00",
    }
    here = dict(
        left,
        instance="projects/p/zones/us-west1-b/instances/g-1",
        code="QUOTA_EXCEEDED",
        message="b",
        timestamp="2026-11-24T09:59:00+00:00",
    )
    since = "2026-11-24T09:00:00+00:00"
    assert group_creation(creating, [left], since=since) == ("waiting", "us-west1-b", [])
    assert group_creation(creating, [left, here], since=since) == ("failed", "us-west1-b", [("QUOTA_EXCEEDED", "b")])
    assert group_creation([], [left], since=since) == ("failed", "us-west1-a", [("ZONE_RESOURCE_POOL_EXHAUSTED", "a")])


def test_status_and_report_read_the_job_dir_once_and_agree(compute_server, capsys, tmp_path, monkeypatch):
    """One view of a job (jobdir/status.py read_job) for status and report: each command reads
    the journal and the newest commit once, and both show the goodput of the same ledger."""
    from survivor.jobdir import journal as journal_module
    from survivor.jobdir import store as store_module
    from survivor.jobdir.journal import Journal
    from survivor.jobdir.storage import open_storage

    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(
        f"name: once\njob_dir: {tmp_path / 'jobdir'}\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n"
        "compute: {machine_type: n1-standard-8, gpu: 'nvidia-tesla-t4:1'}\n"
    )
    assert run_cli(capsys, "make-template", "once", "--config", str(spec_file), "--project", PROJECT)[0] == 0
    assert (
        run_cli(
            capsys,
            "make-group",
            "once",
            "--template",
            "once",
            "--zone",
            "us-west1-b",
            "--project",
            PROJECT,
            "--wait-seconds",
            "0",
        )[0]
        == 0
    )
    journal = Journal(open_storage(str(tmp_path / "jobdir")))
    attempt = journal.begin("once-x")
    journal.end(attempt, "preempted", end_step=40, reached_step=40, steps_lost=0)

    reads = {"journal": 0, "latest": 0}
    state, latest = journal_module.Journal.state, store_module.CheckpointStore.latest

    def counted_state(self, *a, **k):
        reads["journal"] += 1
        return state(self, *a, **k)

    def counted_latest(self, *a, **k):
        reads["latest"] += 1
        return latest(self, *a, **k)

    monkeypatch.setattr(journal_module.Journal, "state", counted_state)
    monkeypatch.setattr(store_module.CheckpointStore, "latest", counted_latest)
    where = ("--zone", "us-west1-b", "--project", PROJECT)
    code, out, _ = run_cli(capsys, "status", "once", *where, "--json")
    assert code == 0 and reads == {"journal": 1, "latest": 1}
    status = json.loads(out)
    reads.update(journal=0, latest=0)
    code, out, _ = run_cli(capsys, "report", "once", *where, "--offline", "--json", "--out", str(tmp_path / "r"))
    assert code == 0 and reads == {"journal": 1, "latest": 1}
    report = json.loads(out)
    assert status["job"]["state"] == report["state"] == "WAITING"
    assert status["job"]["goodput"] == pytest.approx(report["goodput"], abs=1e-3)
