"""survivor preflight: the checks before anything is spent, as pure decisions and against the stand-ins
(the Compute fake, fake-gcs-server behind survivor's bucket-IAM stand-in) with the real clients."""

import json
import pytest

from survivor.commands import main as cli

from survivor.cloud import permissions
from survivor.operator import preflight
from survivor.local.bucket_iam import BucketIam
from survivor.local.compute_server import PROJECT_NUMBER
from survivor.local.iam_roles import PREDEFINED_ROLES
from survivor.operator.preflight import Finding
from survivor.spec import JobSpec
from survivor.cloud.template import MachineOptions, template_body

PROJECT = "survivor-local"
VM_ACCOUNT = f"{PROJECT_NUMBER}-compute@developer.gserviceaccount.com"


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# -- pure decisions --------------------------------------------------------------------------------


def test_spot_uses_the_preemptible_quota_when_granted_and_the_standard_one_otherwise():
    quotas = {"PREEMPTIBLE_NVIDIA_T4_GPUS": (8.0, 0.0), "NVIDIA_T4_GPUS": (0.0, 0.0)}
    [ok] = preflight.quota_findings("us-west1", "nvidia-tesla-t4", 4, True, quotas)
    assert ok.level == "ok" and "PREEMPTIBLE_NVIDIA_T4_GPUS" in ok.message
    quotas = {"PREEMPTIBLE_NVIDIA_T4_GPUS": (0.0, 0.0), "NVIDIA_T4_GPUS": (2.0, 1.0)}
    [bad] = preflight.quota_findings("us-west1", "nvidia-tesla-t4", 4, True, quotas)
    assert bad.level == "error"
    assert bad.message.startswith("quota NVIDIA_T4_GPUS in us-west1: 1 of 2 free, the VM needs 4")
    assert "request more at https://console.cloud.google.com/iam-admin/quotas" in bad.message


def test_on_demand_uses_the_standard_quota():
    [bad] = preflight.quota_findings(
        "us-west1", "nvidia-l4", 1, False, {"NVIDIA_L4_GPUS": (0.0, 0.0), "PREEMPTIBLE_NVIDIA_L4_GPUS": (8.0, 0.0)}
    )
    assert bad.level == "error" and bad.message.startswith("quota NVIDIA_L4_GPUS in us-west1: 0 of 0 free")


def test_a_gpu_is_looked_for_in_the_zone_or_in_the_whole_region():
    offers = {"us-west1-a": {"nvidia-tesla-t4": 4}, "us-west1-c": {"nvidia-l4": 8}}
    [bad] = preflight.gpu_findings("nvidia-tesla-t4", 1, {"us-west1-c": offers["us-west1-c"]}, "us-west1-c", None)
    assert bad.level == "error" and bad.message.startswith("zone us-west1-c does not offer nvidia-tesla-t4 x 1")
    [ok] = preflight.gpu_findings("nvidia-tesla-t4", 4, offers, None, "us-west1")
    assert ok.level == "ok" and "us-west1-a" in ok.message
    [bad] = preflight.gpu_findings("nvidia-tesla-t4", 8, offers, None, "us-west1")
    assert bad.level == "error" and "take fewer per VM (us-west1-a)" in bad.message


def test_the_bucket_policy_must_grant_the_vm_every_object_permission_the_agent_uses():
    member = f"serviceAccount:{VM_ACCOUNT}"
    [ok] = preflight.iam_findings("b", member, [{"role": "roles/storage.objectUser", "members": [member]}])
    assert ok.level == "ok"
    legacy = [{"role": "roles/storage.legacyBucketWriter", "members": [member]}]
    [warning] = preflight.iam_findings("b", member, legacy)
    assert (
        warning.level == "warning" and "does not grant" in warning.message and "storage.objects.get" in warning.message
    )
    assert f"--member={member} --role=roles/storage.objectUser" in warning.message
    [viewer] = preflight.iam_findings("b", member, [{"role": "roles/storage.objectViewer", "members": [member]}])
    assert "storage.objects.create, storage.objects.delete" in viewer.message


def test_the_target_is_read_from_the_template_body():
    spec = JobSpec.from_yaml("job_dir: gs://bkt/run\ntrain_steps: 1\ntrainer: {builtin: dummy}\n")
    body = template_body(
        "t", spec, MachineOptions.from_spec(spec, machine_type="g2-standard-24"), script="#!/bin/bash\n"
    )
    target = preflight.target_from_body(body)
    assert (target.gpu_type, target.gpu_count, target.spot) == ("nvidia-l4", 2, True)
    assert (target.image_project, target.image_family) == (
        "deeplearning-platform-release",
        "common-cu129-ubuntu-2404-nvidia-580",
    )
    assert target.job_dir == "gs://bkt/run" and preflight.bucket_of(target.job_dir) == "bkt"


# -- against the stand-ins -------------------------------------------------------------------------


@pytest.fixture
def bucket_iam(gcs_server, monkeypatch):
    """survivor's bucket-IAM stand-in in front of fake-gcs-server; the storage client talks to it."""
    with BucketIam(upstream=gcs_server.url, project=PROJECT) as iam:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", iam.endpoint)
        yield iam


def test_the_real_storage_client_reads_and_sets_bucket_policies_through_the_stand_in(bucket, bucket_iam):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    handle = storage.Client(project=PROJECT, credentials=AnonymousCredentials()).bucket(bucket)
    policy = handle.get_iam_policy()
    assert {b["role"] for b in policy.bindings} == {
        "roles/storage.legacyBucketOwner",
        "roles/storage.legacyBucketReader",
    }
    policy.bindings.append({"role": "roles/storage.objectUser", "members": {f"serviceAccount:{VM_ACCOUNT}"}})
    handle.set_iam_policy(policy)
    assert {"role": "roles/storage.objectUser", "members": [f"serviceAccount:{VM_ACCOUNT}"]} in bucket_iam.policy(
        bucket
    )["bindings"]
    assert handle.test_iam_permissions(["storage.objects.get"]) == ["storage.objects.get"]
    blob = handle.blob("x")
    blob.upload_from_string(b"through the stand-in")
    assert blob.download_as_bytes() == b"through the stand-in"


def _job(tmp_path, job_dir: str, compute: str = "") -> str:
    path = tmp_path / "job.yaml"
    path.write_text(f"job_dir: {job_dir}\ntrain_steps: 1\ntrainer: {{builtin: dummy}}\n{compute}")
    return str(path)


def test_preflight_passes_a_job_that_can_run(compute_server, bucket, bucket_iam, capsys, tmp_path):
    bucket_iam.set_bindings(bucket, [{"role": "roles/storage.objectUser", "members": [f"serviceAccount:{VM_ACCOUNT}"]}])
    code, out, _ = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run"),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
    )
    assert code == 0, out
    assert out.splitlines() == [
        f"ok: bucket {bucket} exists",
        f"ok: bucket {bucket}: {VM_ACCOUNT} has roles/storage.objectUser",
        "ok: network default exists",
        f"ok: the organisation policy lets {PROJECT}'s VMs have an external IP",
        "ok: image family deeplearning-platform-release/common-cu129-ubuntu-2404-nvidia-580 resolves",
        "ok: nvidia-tesla-t4 x 1 is offered in us-west1-b",
        "ok: quota PREEMPTIBLE_NVIDIA_T4_GPUS in us-west1: 8 of 8 free, the VM needs 1",
        "ok: quota CPUS in us-west1: 512 of 512 free, the VM needs 16",
        "ok: network default has subnet default in us-west1",
        "ok: quota GPUS_ALL_REGIONS: 8 of 8 free, the VM needs 1",
        f"ok: project {PROJECT}: {VM_ACCOUNT} has compute.instanceGroupManagers.update",
    ]


def test_preflight_names_each_problem_with_its_fix(compute_server, gcs_server, bucket_iam, capsys, tmp_path):
    compute_server.set_quota(PROJECT, "us-west1", "PREEMPTIBLE_NVIDIA_T4_GPUS", 0)
    compute_server.set_quota(PROJECT, "us-west1", "NVIDIA_T4_GPUS", 2)
    code, out, _ = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, "gs://no-such-bucket-x/run"),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
        "--gpu",
        "nvidia-tesla-t4:4",
        "--image-family",
        "no-such-family",
    )
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == (
        "error: bucket no-such-bucket-x does not exist: create it (gcloud storage buckets create "
        "gs://no-such-bucket-x --location REGION) or fix job_dir"
    )
    assert lines[1] == "ok: network default exists"
    assert lines[2] == f"ok: the organisation policy lets {PROJECT}'s VMs have an external IP"
    assert lines[3].startswith("error: image family deeplearning-platform-release/no-such-family has no image")
    assert lines[4] == "ok: nvidia-tesla-t4 x 4 is offered in us-west1-b"
    assert lines[5].startswith(
        "error: quota NVIDIA_T4_GPUS in us-west1: 2 of 2 free, the VM needs 4 (Spot VMs use "
        "PREEMPTIBLE_NVIDIA_T4_GPUS when it is granted, NVIDIA_T4_GPUS otherwise)"
    )


def test_a_project_without_a_default_network_or_all_regions_gpu_quota_is_named(
    compute_server, bucket, bucket_iam, capsys, tmp_path
):
    """A new project's GPUS_ALL_REGIONS is often 0, and an organisation's project may
    have no `default` network: both stop the VM however much regional quota there is."""
    compute_server.networks[PROJECT] = set()
    compute_server.project_quotas[PROJECT] = {"GPUS_ALL_REGIONS": (0.0, 0.0)}
    code, out, _ = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run"),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
    )
    assert code == 1
    assert (
        f"error: network default does not exist in project {PROJECT}: create it (gcloud compute networks create "
        "default --subnet-mode=auto), or name an existing one in compute.network"
    ) in out.splitlines()
    assert (
        "error: quota GPUS_ALL_REGIONS (every region together): 0 of 0 free, the VM needs 1; request more at "
        "https://console.cloud.google.com/iam-admin/quotas (metric GPUS_ALL_REGIONS, global)"
    ) in out.splitlines()
    assert "ok: quota PREEMPTIBLE_NVIDIA_T4_GPUS in us-west1: 8 of 8 free" in out  # the regional one had room


def test_an_organisation_policy_against_external_ips_is_read_before_anything_is_made(
    compute_server, bucket, bucket_iam, capsys, tmp_path
):
    """Org Policy v2's getEffectivePolicy of compute.vmExternalIpAccess (the real
    client, REST, at the fake); deny-all stops preflight with the flag that complies."""
    compute_server.external_ip_denied.add(PROJECT)
    code, out, _ = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run"),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
    )
    assert code == 1
    assert (
        f"error: the organisation policy (compute.vmExternalIpAccess) denies every VM of {PROJECT} an external "
        "IP: make the template with --no-external-ip (compute.external_ip: false)"
    ) in out.splitlines()
    code, out, _ = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run"),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
        "--no-external-ip",
    )
    assert code == 0 and "organisation policy" not in out  # no IP asked: nothing to check


def test_a_list_of_allowed_instances_never_names_a_groups_vms():
    from survivor.operator.preflight import external_ip_findings

    [finding] = external_ip_findings(
        "p",
        [{"allow_all": False, "deny_all": False, "allowed_values": ["projects/p/zones/us-west1-b/instances/bastion"]}],
    )
    assert finding.level == "error" and "named VMs only" in finding.message
    assert external_ip_findings("p", [])[0].level == "ok"  # no rule: the default allows
    assert external_ip_findings("p", None, "403")[0].level == "warning"


def test_a_project_that_has_not_enabled_compute_is_one_line_with_the_command(
    compute_server, bucket, bucket_iam, capsys, tmp_path
):
    compute_server.api_disabled.add(PROJECT)
    code, out, err = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run"),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
    )
    assert code == 1 and "Traceback" not in out + err
    assert (
        "the Compute Engine API is not enabled in this project: gcloud services enable compute.googleapis.com "
        "--project PROJECT (then wait a few minutes)"
    ) in out
    assert "permission denied" not in out  # not mistaken for a missing role


def test_no_external_ip_drops_the_access_config_and_preflight_says_what_the_vm_then_needs(
    compute_server, bucket, bucket_iam, capsys, tmp_path
):
    code, out, _ = run_cli(
        capsys,
        "make-template",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run"),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
        "--no-external-ip",
        "--dry-run",
    )
    assert code == 0
    assert json.loads(out)["properties"]["networkInterfaces"] == [{"network": "global/networks/default"}]
    code, out, _ = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run"),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
        "--no-external-ip",
    )
    assert (
        "warning: no external IP: the VM reaches Cloud Storage only if its subnet of default has Private Google "
        "Access on" in out
    )


def test_a_bucket_policy_without_the_vm_is_a_warning_with_the_grant(
    compute_server, bucket, bucket_iam, capsys, tmp_path
):
    compute_server.set_project_policy(
        PROJECT,
        [{"role": "roles/compute.instanceAdmin.v1", "members": ["serviceAccount:trainer@p.iam.gserviceaccount.com"]}],
    )
    code, out, _ = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run"),
        "--project",
        PROJECT,
        "--service-account",
        "trainer@p.iam.gserviceaccount.com",
    )
    assert code == 0
    [line] = [line for line in out.splitlines() if line.startswith("warning: bucket")]
    assert "does not grant trainer@p.iam.gserviceaccount.com storage.objects.create" in line
    assert line.endswith(
        f"gcloud storage buckets add-iam-policy-binding gs://{bucket} "
        "--member=serviceAccount:trainer@p.iam.gserviceaccount.com --role=roles/storage.objectUser"
    )
    assert "warning: no --zone or --region: GPU offer and quota not checked" in out


def test_make_template_stops_on_a_blocking_finding_before_anything_is_staged(
    compute_server, gcs_server, bucket_iam, capsys, tmp_path
):
    code, _, err = run_cli(
        capsys, "make-template", "t", "--config", _job(tmp_path, "gs://no-such-bucket-y/run"), "--project", PROJECT
    )
    assert code == 1 and "error: bucket no-such-bucket-y does not exist" in err and "nothing was created" in err
    assert "staged" not in err and compute_server.templates == {}


def test_skip_preflight_creates_the_template_anyway(compute_server, capsys, tmp_path):
    args = [
        "make-template",
        "t",
        "--config",
        _job(tmp_path, str(tmp_path / "j")),
        "--project",
        PROJECT,
        "--image-family",
        "no-such-family",
        "--image-project",
        PROJECT,
    ]
    code, _, err = run_cli(capsys, *args)
    assert code == 1 and f"error: image family {PROJECT}/no-such-family has no image" in err
    assert compute_server.templates == {}
    assert run_cli(capsys, *args, "--skip-preflight")[0] == 0
    assert (PROJECT, "t") in compute_server.templates


def test_make_group_runs_preflight_on_the_templates_quota(compute_server, capsys, tmp_path):
    assert (
        run_cli(capsys, "make-template", "t", "--config", _job(tmp_path, str(tmp_path / "j")), "--project", PROJECT)[0]
        == 0
    )
    compute_server.set_quota(PROJECT, "us-west1", "PREEMPTIBLE_NVIDIA_T4_GPUS", 0)
    compute_server.set_quota(PROJECT, "us-west1", "NVIDIA_T4_GPUS", 0)
    code, _, err = run_cli(capsys, "make-group", "g", "--template", "t", "--zone", "us-west1-b", "--project", PROJECT)
    assert code == 1 and "error: quota NVIDIA_T4_GPUS in us-west1: 0 of 0 free, the VM needs 1" in err
    assert compute_server.groups == {}


def test_findings_print_as_one_line_each():
    lines = []
    assert not preflight.report([Finding("gpu", "a"), Finding("iam", "b", "warning")], lines.append)
    assert lines == ["error: a", "warning: b"]


# -- the VM's own Compute permissions ------------------------------------------


def test_the_project_policy_must_grant_the_vm_what_leaving_and_switching_its_group_need():
    member = f"serviceAccount:{VM_ACCOUNT}"
    read = PREDEFINED_ROLES  # what IAM's roles.get lists for each role (the fake's table, with its source)
    [ok] = preflight.compute_iam_findings(
        "p", member, [{"role": "roles/editor", "members": [member]}], role_permissions=read
    )
    assert ok.level == "ok"
    [line] = preflight.compute_iam_findings(
        "p", member, [{"role": "roles/compute.viewer", "members": [member]}], role_permissions=read
    )
    assert line.level == "error" and line.message.startswith(  # the finish that loops
        f"project p: {VM_ACCOUNT} lacks compute.instanceGroupManagers.update (grant roles/compute.instanceAdmin.v1: "
        f"gcloud projects add-iam-policy-binding p --member={member} --role=roles/compute.instanceAdmin.v1"
    )
    assert "powers itself off" in line.message
    admin = [{"role": "roles/compute.instanceAdmin.v1", "members": [member]}]
    [act_as] = preflight.compute_iam_findings(
        "p", member, admin, needed=permissions.DEADLINE_SWITCH, role_permissions=read
    )
    assert "lacks iam.serviceAccounts.actAs (grant roles/iam.serviceAccountUser" in act_as.message
    both = admin + [{"role": "roles/iam.serviceAccountUser", "members": [member]}]
    assert [
        f.level
        for f in preflight.compute_iam_findings(
            "p", member, both, needed=permissions.DEADLINE_SWITCH, role_permissions=read
        )
    ] == ["ok"]


def test_a_role_iam_could_not_read_is_named_and_never_stops_the_job():
    # roles are read with roles.get; one that could not be read may grant the finish
    member = f"serviceAccount:{VM_ACCOUNT}"
    [line] = preflight.compute_iam_findings(
        "p", member, [{"role": "roles/compute.instanceAdmin.v1", "members": [member]}], role_permissions={}
    )
    assert line.level == "warning" and "lacks compute.instanceGroupManagers.update" in line.message
    assert "IAM's roles.get could not read roles/compute.instanceAdmin.v1, which may grant it" in line.message


def test_a_job_that_can_move_needs_what_the_agents_move_at_boot_does():
    # the agent moves the job at boot (placement:): it makes and deletes groups and lists the
    # next region's accelerator types, which a switch alone does not
    member = f"serviceAccount:{VM_ACCOUNT}"
    assert permissions.vm_permissions(deadline=False, moves=False) == permissions.LEAVE_GROUP
    assert permissions.vm_permissions(deadline=True, moves=False) == permissions.DEADLINE_SWITCH
    needed = permissions.vm_permissions(deadline=False, moves=True)
    assert set(permissions.DEADLINE_SWITCH) < set(needed)
    # Compute Instance Admin (v1) lists accelerator types and reads regions (IAM's
    # roles.get says so; a hand table once said it did not); only actAs is missing
    [line] = preflight.compute_iam_findings(
        "p",
        member,
        [{"role": "roles/compute.instanceAdmin.v1", "members": [member]}],
        needed=needed,
        role_permissions=PREDEFINED_ROLES,
    )
    assert line.level == "warning" and "lacks iam.serviceAccounts.actAs" in line.message
    admin = [
        {"role": "roles/compute.instanceAdmin.v1", "members": [member]},
        {"role": "roles/iam.serviceAccountUser", "members": [member]},
    ]
    assert [
        f.level
        for f in preflight.compute_iam_findings("p", member, admin, needed=needed, role_permissions=PREDEFINED_ROLES)
    ] == ["ok"]
    viewer = [
        {"role": "roles/compute.viewer", "members": [member]},
        {"role": "roles/iam.serviceAccountUser", "members": [member]},
    ]
    lines = preflight.compute_iam_findings("p", member, viewer, needed=needed, role_permissions=PREDEFINED_ROLES)
    assert "cannot move the job at boot (placement:)" in next(
        line.message for line in lines if "Managers.create" in line.message
    )
    switcher = [
        {"role": "roles/iam.serviceAccountUser", "members": [member]},
        {"role": "projects/p/roles/switch", "members": [member]},
    ]
    lines = preflight.compute_iam_findings(
        "p",
        member,
        switcher,
        needed=needed,
        role_permissions={**PREDEFINED_ROLES, "projects/p/roles/switch": frozenset(permissions.DEADLINE_SWITCH)},
    )
    assert {line.message.split(" lacks ")[1].split(" ")[0] for line in lines} == {
        "compute.instanceGroupManagers.create",
        "compute.instanceGroupManagers.delete",
        "compute.acceleratorTypes.list",
        "compute.regions.get",
    }
    spec = "placement: {regions: [us-west1, us-central1]}\n"
    body = {
        "properties": {
            "machineType": "n1-standard-8",
            "metadata": {
                "items": [
                    {
                        "key": "survivor-job",
                        "value": "job_dir: gs://bkt/run\ntrain_steps: 10\ntrainer: {builtin: dummy}\n" + spec,
                    }
                ]
            },
        }
    }
    assert preflight.target_from_body(body).moves is True
    body["properties"]["metadata"]["items"][0]["value"] = body["properties"]["metadata"]["items"][0]["value"].replace(
        ", us-central1", ""
    )
    assert preflight.target_from_body(body).moves is False


def test_the_fake_refuses_a_vms_move_without_the_permission_to_make_a_group(compute_server):
    from survivor.cloud.compute import Compute, ComputeError
    from survivor.cloud.template import MachineOptions, template_body
    from survivor.spec import JobSpec

    compute = Compute(PROJECT)
    spec = JobSpec.from_yaml("job_dir: /tmp/x\ntrain_steps: 1\ntrainer: {builtin: dummy}\n")
    compute.insert_template(template_body("spot", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    member = f"serviceAccount:{VM_ACCOUNT}"
    compute_server.set_project_policy(PROJECT, [{"role": "roles/compute.viewer", "members": [member]}])
    compute_server.caller = member  # the VM's own calls from here on
    with pytest.raises(ComputeError, match="Required 'compute.instanceGroupManagers.create' permission"):
        compute.create_group("moved", "spot", region="us-central1")
    compute_server.set_project_policy(PROJECT, [{"role": "roles/compute.instanceAdmin.v1", "members": [member]}])
    compute.create_group("moved", "spot", region="us-central1")


def test_preflight_reads_the_project_policy_and_names_each_permission_the_vm_lacks(
    compute_server, bucket, bucket_iam, capsys, tmp_path
):
    member = f"serviceAccount:{VM_ACCOUNT}"
    bucket_iam.set_bindings(bucket, [{"role": "roles/storage.objectUser", "members": [member]}])
    compute_server.set_project_policy(PROJECT, [{"role": "roles/compute.instanceAdmin.v1", "members": [member]}])
    deadline = "deadline: 36h\ncompute: {machine_type: n1-standard-8, gpu: 'nvidia-tesla-t4:1'}\n"
    code, out, _ = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run", deadline),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
    )
    assert code == 0, out  # a warning: a grant on the account itself is not in the project's policy
    [line] = [line for line in out.splitlines() if line.startswith(f"warning: project {PROJECT}")]
    assert f"{VM_ACCOUNT} lacks iam.serviceAccounts.actAs (grant roles/iam.serviceAccountUser" in line

    compute_server.set_project_policy(PROJECT, [{"role": "roles/compute.viewer", "members": [member]}])
    code, out, _ = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run"),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
    )
    assert code != 0, out  # a VM that cannot leave its group loops; a readable policy stops it
    [line] = [line for line in out.splitlines() if line.startswith(f"error: project {PROJECT}")]
    assert "lacks compute.instanceGroupManagers.update (grant roles/compute.instanceAdmin.v1" in line
    assert "`survivor watch` then deletes the group" in line

    # the operator guide's custom role, read through IAM's roles.get, grants what it lists
    custom = f"projects/{PROJECT}/roles/survivorFinish"
    compute_server.custom_roles[custom] = ["compute.instanceGroupManagers.get", "compute.instanceGroupManagers.update"]
    compute_server.set_project_policy(PROJECT, [{"role": custom, "members": [member]}])
    code, out, _ = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run"),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
    )
    assert f"ok: project {PROJECT}: {VM_ACCOUNT} has compute.instanceGroupManagers.update" in out.splitlines()

    # on_finish: delete: a VM made outside a group deletes itself; without the permission it is only
    # stopped (its disks billed): a warning naming it, never a stop, since a group's VM never needs it
    code, out, _ = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run", "on_finish: delete\n"),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
    )
    assert code == 0, out
    [line] = [line for line in out.splitlines() if line.startswith(f"warning: project {PROJECT}")]
    assert "lacks compute.instances.delete (grant roles/compute.instanceAdmin.v1" in line
    assert "outside a group" in line and "disks still billed" in line


def test_the_compute_fake_refuses_the_vms_calls_its_project_roles_do_not_grant(compute_server):
    from survivor.cloud.compute import Compute, ComputeError, GroupRef

    compute = Compute(PROJECT)
    spec = JobSpec.from_yaml("job_dir: /tmp/x\ntrain_steps: 1\ntrainer: {builtin: dummy}\n")
    compute.insert_template(template_body("r", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.create_group("r", "r", zone="us-west1-b")
    group = GroupRef(PROJECT, "r", zone="us-west1-b")
    name = compute.managed_instances(group)[0]["name"]
    member = f"serviceAccount:{VM_ACCOUNT}"
    compute_server.set_project_policy(PROJECT, [{"role": "roles/compute.viewer", "members": [member]}])
    compute_server.caller = member
    with pytest.raises(
        ComputeError,
        match="Required 'compute.instanceGroupManagers.update' permission for "
        f"'projects/{PROJECT}/zones/us-west1-b/instanceGroupManagers/r'",
    ):
        compute.leave_group(group, "us-west1-b", name)
    compute_server.set_project_policy(PROJECT, [{"role": "roles/compute.instanceAdmin.v1", "members": [member]}])
    compute.leave_group(group, "us-west1-b", name)
    assert compute_server.groups[(PROJECT, "zones/us-west1-b", "r")]["targetSize"] == 0


# -- a group whose VM cannot leave it is refused, not warned about -------------------


def test_make_group_refuses_a_group_whose_vm_account_cannot_leave_it(
    compute_server, bucket, bucket_iam, capsys, tmp_path
):
    """Must show: make-group is refused by preflight (naming the role to grant) when the project's
    readable policy does not let the VM's account leave its group; --skip-preflight forces it."""
    member = f"serviceAccount:{VM_ACCOUNT}"
    bucket_iam.set_bindings(bucket, [{"role": "roles/storage.objectUser", "members": [member]}])
    compute_server.set_project_policy(PROJECT, [{"role": "roles/compute.viewer", "members": [member]}])
    assert (
        run_cli(
            capsys,
            "make-template",
            "t",
            "--config",
            _job(tmp_path, f"gs://{bucket}/run"),
            "--project",
            PROJECT,
            "--install",
            "wheel",
            "--skip-preflight",
        )[0]
        == 0
    )
    code, _, err = run_cli(capsys, "make-group", "g", "--template", "t", "--zone", "us-west1-b", "--project", PROJECT)
    assert code == 1 and compute_server.groups == {}, err
    assert (
        f"error: project {PROJECT}: {VM_ACCOUNT} lacks compute.instanceGroupManagers.update (grant "
        "roles/compute.instanceAdmin.v1"
    ) in err
    assert (
        run_cli(
            capsys,
            "make-group",
            "g",
            "--template",
            "t",
            "--zone",
            "us-west1-b",
            "--project",
            PROJECT,
            "--skip-preflight",
            "--wait-seconds",
            "0",
        )[0]
        == 0
    )
    assert (PROJECT, "zones/us-west1-b", "g") in compute_server.groups


def test_a_move_needs_to_read_the_next_regions_zones(compute_server):
    """The move at boot reads the next region (regions.get: compute.regions.get); a VM
    account whose custom role lacks it was refused and never moved. BOOT_MOVE names it, so preflight does."""
    from survivor.cloud.compute import Compute, ComputeError

    assert "compute.regions.get" in permissions.BOOT_MOVE
    member = f"serviceAccount:{VM_ACCOUNT}"
    custom = f"projects/{PROJECT}/roles/survivorMove"
    compute_server.custom_roles[custom] = [p for p in permissions.BOOT_MOVE if p != "compute.regions.get"]
    compute_server.set_project_policy(PROJECT, [{"role": custom, "members": [member]}])
    compute_server.caller = member
    with pytest.raises(ComputeError, match="compute.regions.get"):
        Compute(PROJECT).region("us-central1")
    roles = {custom: frozenset(compute_server.custom_roles[custom])}
    [line] = preflight.compute_iam_findings(
        PROJECT, member, compute_server.project_policy(PROJECT), needed=permissions.BOOT_MOVE, role_permissions=roles
    )
    assert line.level == "warning" and "lacks compute.regions.get" in line.message
    compute_server.custom_roles[custom].append("compute.regions.get")
    assert Compute(PROJECT).region("us-central1")["zones"]


# -- predefined roles read with IAM's roles.get, no hand table -------------------------


def test_preflight_reads_predefined_roles_with_roles_get_as_it_reads_custom_ones(
    compute_server, bucket, bucket_iam, capsys, tmp_path
):
    """Compute Instance Admin (v1) with Service Account User grants all a moving job's VM does (IAM's
    roles.get lists acceleratorTypes.list and regions.get in it; a hand table once said it lacked the
    first). A role IAM cannot read is named, never taken to grant nothing without a word."""
    from google.auth.credentials import AnonymousCredentials
    from googleapiclient import discovery

    iam = discovery.build(
        "iam",
        "v1",
        static_discovery=True,
        cache_discovery=False,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": compute_server.endpoint},
    )
    found = iam.roles().get(name="roles/compute.instanceAdmin.v1").execute()
    assert {"compute.acceleratorTypes.list", "compute.regions.get"} <= set(found["includedPermissions"])
    assert found["title"] == "Compute Instance Admin (v1)"

    member = f"serviceAccount:{VM_ACCOUNT}"
    bucket_iam.set_bindings(bucket, [{"role": "roles/storage.objectUser", "members": [member]}])
    compute_server.set_project_policy(
        PROJECT,
        [
            {"role": "roles/compute.instanceAdmin.v1", "members": [member]},
            {"role": "roles/iam.serviceAccountUser", "members": [member]},
        ],
    )
    placement = "placement: {regions: [us-west1, us-central1]}\n"
    code, out, _ = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run", placement),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
    )
    assert f"ok: project {PROJECT}: {VM_ACCOUNT} has {', '.join(permissions.BOOT_MOVE)}" in out, out

    compute_server.set_project_policy(PROJECT, [{"role": "roles/compute.notInTheTable", "members": [member]}])
    code, out, _ = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run"),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
    )
    [line] = [line for line in out.splitlines() if "lacks compute.instanceGroupManagers.update" in line]
    assert line.startswith("warning:") and "could not read roles/compute.notInTheTable" in line


# -- every region of placement.regions: GPU and CPU quota, a subnet of the network ------


def test_each_placement_region_is_checked_for_gpu_and_cpu_quota_and_a_subnet(
    compute_server, bucket, bucket_iam, capsys, tmp_path
):
    """A move to a region without quota or without a subnet of the job's network would fail there; preflight
    says so before anything is made (warnings: the job still starts where it is asked to)."""
    bucket_iam.set_bindings(bucket, [{"role": "roles/storage.objectUser", "members": [f"serviceAccount:{VM_ACCOUNT}"]}])
    compute_server.networks[PROJECT] = {"vpc"}
    compute_server.custom_subnets[(PROJECT, "vpc")] = {"us-west1"}  # custom mode: a subnet in us-west1 only
    compute_server.set_quota(PROJECT, "us-central1", "PREEMPTIBLE_NVIDIA_T4_GPUS", 0)
    compute_server.set_quota(PROJECT, "us-central1", "NVIDIA_T4_GPUS", 0)
    compute_server.set_quota(PROJECT, "us-central1", "CPUS", 8, usage=4)
    extra = "placement: {regions: [us-west1, us-central1]}\ncompute: {network: vpc}\n"
    code, out, _ = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run", extra),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
    )
    assert code == 0, out
    lines = out.splitlines()
    assert "ok: network vpc has subnet vpc in us-west1" in lines
    assert "ok: quota CPUS in us-west1: 512 of 512 free, the VM needs 16" in lines
    [subnet] = [line for line in lines if "no subnet in us-central1" in line]
    assert subnet.startswith("warning: network vpc") and "--network vpc --region us-central1" in subnet
    [cpus] = [line for line in lines if "quota CPUS in us-central1" in line]
    assert cpus.startswith("warning: quota CPUS in us-central1: 4 of 8 free, the VM (n1-standard-16) needs 16 vCPUs")
    [gpus] = [line for line in lines if "NVIDIA_T4_GPUS in us-central1" in line]
    assert gpus.startswith("warning: quota NVIDIA_T4_GPUS in us-central1: 0 of 0 free")

    # where the job starts, the same shortfalls stop it
    compute_server.custom_subnets[(PROJECT, "vpc")] = {"us-central1"}
    code, out, _ = run_cli(
        capsys,
        "preflight",
        "job",
        "--config",
        _job(tmp_path, f"gs://{bucket}/run", extra),
        "--project",
        PROJECT,
        "--zone",
        "us-west1-b",
    )
    assert code != 0 and "error: network vpc has no subnet in us-west1" in out


def test_cpu_quota_uses_the_familys_metric_and_preemptible_cpus_for_spot():
    quotas = {"CPUS": (24.0, 0.0), "N2_CPUS": (8.0, 0.0), "PREEMPTIBLE_CPUS": (0.0, 0.0)}
    [n1] = preflight.cpu_quota_findings("r", "n1-standard-16", 16, True, quotas)
    assert n1.level == "ok" and n1.message.startswith("quota CPUS in r")
    [n2] = preflight.cpu_quota_findings("r", "n2-standard-16", 16, False, quotas)
    assert n2.level == "error" and n2.message.startswith("quota N2_CPUS in r: 8 of 8 free")
    [spot] = preflight.cpu_quota_findings("r", "n1-standard-16", 16, True, {**quotas, "PREEMPTIBLE_CPUS": (64.0, 0.0)})
    assert spot.message.startswith("quota PREEMPTIBLE_CPUS in r")
    [g2] = preflight.cpu_quota_findings("r", "g2-standard-8", 8, True, quotas)
    assert g2.level == "warning" and "no G2 metric to check" in g2.message


# -- without an external IP, a route to the package index (Cloud NAT) -----------------


def test_without_an_external_ip_preflight_says_whether_cloud_nat_routes_to_the_package_index(
    compute_server, bucket, bucket_iam, capsys, tmp_path
):
    bucket_iam.set_bindings(bucket, [{"role": "roles/storage.objectUser", "members": [f"serviceAccount:{VM_ACCOUNT}"]}])
    config = _job(tmp_path, f"gs://{bucket}/run", "compute: {external_ip: false}\n")
    code, out, _ = run_cli(capsys, "preflight", "job", "--config", config, "--project", PROJECT, "--zone", "us-west1-b")
    [line] = [line for line in out.splitlines() if "no Cloud NAT" in line]
    assert line.startswith("warning: no external IP, and no Cloud NAT on network default in us-west1")
    assert "gcloud compute routers nats create" in line and "mirror" in line

    compute_server.add_nat(PROJECT, "us-west1", "default", subnets=["other"])  # serves another subnet only
    code, out, _ = run_cli(capsys, "preflight", "job", "--config", config, "--project", PROJECT, "--zone", "us-west1-b")
    assert any("no Cloud NAT on network default in us-west1" in line for line in out.splitlines())
    compute_server.add_nat(PROJECT, "us-west1", "default", router="all")
    code, out, _ = run_cli(capsys, "preflight", "job", "--config", config, "--project", PROJECT, "--zone", "us-west1-b")
    assert (
        "ok: no external IP: Cloud NAT all-nat (router all) routes network default in us-west1 to the package index"
    ) in out.splitlines()
