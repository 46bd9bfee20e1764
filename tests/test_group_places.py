"""A job has one group, in one zone or one region: `make-group` refuses a second
group of the job's name elsewhere in the project, naming the first and the fix, and `delete` names
every group that still uses the template it keeps. The real google-cloud-compute client against
survivor's Compute fake, whose `instanceGroupManagers.aggregatedList` lists zonal and regional
groups by scope and whose `instanceTemplates.delete` of a template in use is the API's 400."""

from __future__ import annotations

import pytest

from survivor.cloud.compute import Compute, GroupRef, InUse, explain
from survivor.commands import main as cli
from survivor.mig.make import GroupOptions, make_group

PROJECT = "survivor-local"
WAIT = ["--wait-seconds", "0", "--project", PROJECT]  # nothing here waits for a VM


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def places(compute_server) -> list[tuple[str, str]]:
    """(scope, name) of every group the fake holds."""
    return sorted((scope, name) for (_, scope, name) in compute_server.groups)


@pytest.fixture
def template(compute_server, capsys, tmp_path) -> str:
    spec = tmp_path / "job.yaml"
    spec.write_text(f"job_dir: {tmp_path}/j\ntrain_steps: 1\ntrainer: {{builtin: dummy}}\n")
    code, _, err = run(capsys, "make-template", "t", "--config", str(spec), "--project", PROJECT)
    assert code == 0, err
    return "t"


def test_make_group_refuses_a_second_group_of_the_job_in_another_zone_or_region(compute_server, capsys, template):
    assert run(capsys, "make-group", "job", "--template", template, "--zone", "us-west1-b", *WAIT)[0] == 0
    code, out, err = run(capsys, "make-group", "job", "--template", template, "--region", "us-west1", *WAIT)
    assert code == 1 and out == ""
    assert err.strip() == (
        "error: group job: already exists in zone us-west1-b, and a job has one group: use --zone "
        "us-west1-b for it, or delete it first (`survivor delete job --zone us-west1-b`) to make it "
        "in region us-west1"
    )
    code, _, err = run(capsys, "make-group", "job", "--template", template, "--zone", "us-central1-a", *WAIT)
    assert code == 1 and "already exists in zone us-west1-b" in err
    assert places(compute_server) == [("zones/us-west1-b", "job")]
    # the same place again is a rerun, not a second group
    assert run(capsys, "make-group", "job", "--template", template, "--zone", "us-west1-b", *WAIT)[0] == 0
    assert places(compute_server) == [("zones/us-west1-b", "job")]


def test_make_group_refuses_a_second_group_of_the_same_job_under_another_name(compute_server, capsys, template):
    """The template carries the job (its spec, its job dir): a group of another name on it, or on one
    of the job's other templates, would be a second VM billed while the first holds the job's lease."""
    from survivor.mig.make import job_of_template

    assert run(capsys, "make-group", "job", "--template", template, "--zone", "us-west1-b", *WAIT)[0] == 0
    code, out, err = run(capsys, "make-group", "other", "--template", template, "--region", "us-west1", *WAIT)
    assert code == 1 and out == ""
    assert err.strip() == (
        "error: group other: template t's job already has group job in zone us-west1-b, and a job has one "
        "group (a second would be billed while the first holds the job dir's lease): use `job --zone "
        "us-west1-b`, or delete it first (`survivor delete job --zone us-west1-b`)"
    )
    assert places(compute_server) == [("zones/us-west1-b", "job")]
    assert [job_of_template(t) for t in ("t", "t-on-demand", "t-shape-2", "t-shape-2-on-demand", "t-flex-start")] == [
        "t"
    ] * 5
    assert job_of_template("t2") == "t2" and job_of_template("t-shaped") == "t-shaped"


def test_a_regional_group_is_found_from_a_zone_too(compute_server, capsys, template):
    assert run(capsys, "make-group", "job", "--template", template, "--region", "us-central1", *WAIT)[0] == 0
    code, _, err = run(capsys, "make-group", "job", "--template", template, "--zone", "us-west1-b", *WAIT)
    assert code == 1 and err.strip().startswith(
        "error: group job: already exists in region us-central1, and a job has "
        "one group: use --region us-central1 for it"
    )
    assert places(compute_server) == [("regions/us-central1", "job")]


def test_a_role_that_may_not_list_groups_makes_the_group_with_a_warning(compute_server, capsys, template):
    compute_server.fail(
        "compute.instanceGroupManagers.aggregatedList",
        http=403,
        message=f"Required 'compute.instanceGroupManagers.list' permission for 'projects/{PROJECT}'",
    )
    code, out, err = run(capsys, "make-group", "job", "--template", template, "--zone", "us-west1-b", *WAIT)
    assert code == 0 and "created" in out
    assert "warning: group job: not checked for a group of this name elsewhere" in err
    assert "compute.instanceGroupManagers.list" in err


def test_the_move_at_boot_makes_the_next_regions_group_beside_the_old_one(compute_server, template):
    compute = Compute(PROJECT)
    make_group(compute, GroupRef(PROJECT, "job", region="us-west1"), GroupOptions(template, wait_seconds=0))
    # placement's move makes the next region's group before it deletes the old one
    make_group(
        compute,
        GroupRef(PROJECT, "job", region="us-central1"),
        GroupOptions(template, skip_preflight=True, wait_seconds=0, one_place=False),
    )
    assert places(compute_server) == [("regions/us-central1", "job"), ("regions/us-west1", "job")]


def test_delete_keeps_a_template_another_group_uses_and_names_that_group(compute_server, capsys, template):
    compute = Compute(PROJECT)
    compute.create_group("job", template, zone="us-west1-b")
    compute.create_group("job", template, region="us-west1")  # as two make-groups did before this refusal
    code, out, err = run(capsys, "delete", "job", "--zone", "us-west1-b", "--project", PROJECT)
    assert code == 1  # the template it was asked to delete remains
    assert out.splitlines() == ["group job: deleted"]
    assert err.strip().splitlines()[-1] == (
        "error: template t: kept, still used by group job (region us-west1); `survivor delete job "
        "--region us-west1` deletes that group, then the template"
    )
    code, out, _ = run(capsys, "delete", "job", "--region", "us-west1", "--project", PROJECT)
    assert code == 0 and out.splitlines() == ["group job: deleted", "template t: deleted", "the job dir is untouched"]
    assert compute_server.groups == {} and compute_server.templates == {} and compute_server.instances == {}


def test_delete_in_the_wrong_place_names_every_group_still_on_the_template(compute_server, capsys, template):
    compute = Compute(PROJECT)
    compute.create_group("job", template, region="us-west1")
    compute.create_group("shared", template, zone="us-central1-a")
    code, out, err = run(capsys, "delete", "job", "--zone", "us-west1-b", "--template", template, "--project", PROJECT)
    assert code == 1 and out.splitlines() == ["group job: not found (nothing to delete)"]
    assert err.strip().splitlines()[-1] == (
        "error: template t: kept, still used by groups job (region us-west1), shared (zone "
        "us-central1-a); `survivor delete job --region us-west1`, then `survivor delete shared "
        "--zone us-central1-a` deletes those groups, then the template"
    )
    assert len(compute_server.groups) == 2 and list(compute_server.templates) == [(PROJECT, template)]


def test_delete_that_may_not_list_groups_says_the_apis_own_words(compute_server, capsys, template):
    Compute(PROJECT).create_group("job", template, region="us-west1")
    compute_server.fail("compute.instanceGroupManagers.aggregatedList", http=403, message="Required permission")
    code, _, err = run(capsys, "delete", "job", "--zone", "us-west1-b", "--template", template, "--project", PROJECT)
    assert code == 1 and err.strip().splitlines()[-1] == (
        f"error: deleting template t: The instance_template resource 'projects/{PROJECT}/global/instanceTemplates/t' "
        f"is already being used by 'projects/{PROJECT}/regions/us-west1/instanceGroupManagers/job'"
    )


def test_the_fakes_aggregated_list_keys_zonal_and_regional_groups_by_scope(compute_server, template):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1

    compute = Compute(PROJECT)
    compute.create_group("a", template, zone="us-west1-b")
    compute.create_group("b", template, region="us-west1")
    client = compute_v1.InstanceGroupManagersClient(
        credentials=AnonymousCredentials(), client_options={"api_endpoint": compute_server.endpoint}
    )
    scopes = dict(client.aggregated_list(project=PROJECT))
    assert [g.name for g in scopes["zones/us-west1-b"].instance_group_managers] == ["a"]
    assert [g.name for g in scopes["regions/us-west1"].instance_group_managers] == ["b"]
    empty = scopes["zones/us-west1-a"]
    assert not empty.instance_group_managers and empty.warning.code == "NO_RESULTS_ON_PAGE"
    assert empty.warning.message == "There are no results for scope 'zones/us-west1-a' on this page."
    assert sorted((g.name, g.zone, g.region) for g, _ in compute.list_groups()) == [
        ("a", "us-west1-b", None),
        ("b", None, "us-west1"),
    ]


def test_the_fake_refuses_to_delete_a_template_in_use_in_the_apis_words(compute_server, template):
    from google.api_core import exceptions as gexc
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1

    Compute(PROJECT).create_group("job", template, region="us-west1")
    client = compute_v1.InstanceTemplatesClient(
        credentials=AnonymousCredentials(), client_options={"api_endpoint": compute_server.endpoint}
    )
    with pytest.raises(gexc.BadRequest) as caught:
        client.delete(project=PROJECT, instance_template=template)
    assert caught.value.message.split(": ", 1)[1] == (
        f"The instance_template resource 'projects/{PROJECT}/global/instanceTemplates/t' "
        f"is already being used by 'projects/{PROJECT}/regions/us-west1/"
        "instanceGroupManagers/job'"
    )
    assert [e["reason"] for e in caught.value.errors] == ["resourceInUseByAnotherResource"]
    assert isinstance(explain(caught.value, "deleting template t"), InUse)
