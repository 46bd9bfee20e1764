"""Where `make-group` starts a job whose spec names other regions (placement.regions): where Compute
Engine's capacity data says it trains best (survivor/policy/placement.py `start_place`, the bet a
move makes), and where the operator named without the data. Pure cases with hand-made outlooks, then
the real google-cloud-compute client against the Compute fake."""

import pytest

from survivor.cloud.capacity import Outlook
from survivor.policy.placement import Place, start_place

WEST, CENTRAL, EAST = Place("us-west1"), Place("us-central1"), Place("us-east1")
STEADY = Outlook(1.0, 1.0)
OUT = Outlook(0.0, 1 / 60)


def test_the_asked_region_out_of_capacity_starts_the_group_where_there_is_some():
    start = start_place(WEST, {WEST: OUT, CENTRAL: STEADY})
    assert start.at == CENTRAL and "us-central1: obtainability 1.00" in start.reason


def test_with_capacity_in_the_asked_region_the_group_starts_there_however_good_the_others():
    assert start_place(WEST, {WEST: STEADY, CENTRAL: STEADY}).at == WEST
    # a small edge elsewhere does not pay for what a move costs: a look would not move it either
    assert start_place(WEST, {WEST: Outlook(0.97, 1.0), CENTRAL: STEADY}).at == WEST


def test_the_best_of_several_places_with_capacity_is_chosen():
    assert start_place(WEST, {WEST: OUT, CENTRAL: Outlook(0.5, 600 / 3600), EAST: STEADY}).at == EAST


def test_without_data_for_the_asked_place_the_group_starts_where_asked():
    start = start_place(WEST, {CENTRAL: STEADY})
    assert start.at == WEST and start.reason.startswith("no capacity data for us-west1")
    assert start_place(WEST, {}).at == WEST


def test_a_place_whose_region_offers_no_gpu_is_never_chosen():
    assert start_place(WEST, {WEST: OUT, CENTRAL: STEADY}, skip=frozenset({CENTRAL})).at == WEST
    assert start_place(WEST, {WEST: OUT, CENTRAL: STEADY, EAST: STEADY}, skip=frozenset({CENTRAL})).at == EAST


def test_nowhere_with_capacity_keeps_the_asked_place():
    start = start_place(WEST, {WEST: OUT, CENTRAL: OUT})
    assert start.at == WEST and "does not pay" in start.reason


SPEC = "job_dir: {job_dir}\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\nplacement: {{regions: [{regions}]}}\n"


@pytest.fixture
def job_template(compute_server, tmp_path, monkeypatch):
    """make-template for a job that may run in `regions` (default us-west1, us-central1)."""
    from survivor.commands.main import main

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "survivor-local")

    def make(regions: str = "us-west1, us-central1") -> None:
        spec = tmp_path / "job.yaml"
        spec.write_text(SPEC.format(job_dir=tmp_path / "job", regions=regions))
        assert main(["make-template", "job", "--config", str(spec)]) == 0

    return make


def make_group(*place: str) -> int:
    from survivor.commands.main import main

    return main(["make-group", "job", "--template", "job", *place, "--wait-seconds", "0"])


def west_out(compute_server) -> None:
    """No Spot capacity in any zone of us-west1 (the fake's advice says so, as its MIG would)."""
    for zone in compute_server.zones_of("us-west1"):
        compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", zone=zone)


def test_make_group_starts_in_the_second_region_when_the_first_has_no_capacity(compute_server, job_template, capsys):
    job_template()
    west_out(compute_server)
    capsys.readouterr()
    assert make_group("--region", "us-west1") == 0
    out = capsys.readouterr().out
    assert "group job: starts in region us-central1, not us-west1: capacity data: starting in us-central1" in out
    assert "later commands take --region us-central1" in out
    assert ("survivor-local", "regions/us-central1", "job") in compute_server.groups
    assert ("survivor-local", "regions/us-west1", "job") not in compute_server.groups
    # a rerun as the line says finds it
    assert make_group("--region", "us-central1") == 0
    assert "already exists" in capsys.readouterr().out


def test_make_group_without_capacity_data_makes_the_group_where_named_and_says_so_once(
    compute_server, job_template, capsys
):
    job_template()
    west_out(compute_server)
    compute_server.fail("compute.advice.capacity", http=403, times=10**6)  # no capacity data
    capsys.readouterr()
    assert make_group("--region", "us-west1") == 0
    captured = capsys.readouterr()
    assert "starts in region us-west1: no capacity data for us-west1" in captured.out
    assert ("survivor-local", "regions/us-west1", "job") in compute_server.groups
    assert ("survivor-local", "regions/us-central1", "job") not in compute_server.groups


def test_make_group_with_capacity_everywhere_keeps_the_region_named(compute_server, job_template, capsys):
    job_template()
    assert make_group("--region", "us-west1") == 0
    assert "starts in region us-west1: capacity data: staying" in capsys.readouterr().out
    assert ("survivor-local", "regions/us-west1", "job") in compute_server.groups


def test_a_zone_named_pins_the_group_whatever_the_data(compute_server, job_template, capsys):
    job_template()
    west_out(compute_server)
    assert make_group("--zone", "us-west1-b") == 0
    assert "starts in" not in capsys.readouterr().out
    assert ("survivor-local", "zones/us-west1-b", "job") in compute_server.groups


def test_a_region_without_the_gpu_is_passed_over_for_the_next_best(compute_server, job_template, capsys):
    job_template("us-west1, asia-south9, us-central1")
    west_out(compute_server)
    assert make_group("--region", "us-west1") == 0
    assert ("survivor-local", "regions/us-central1", "job") in compute_server.groups
    assert ("survivor-local", "regions/asia-south9", "job") not in compute_server.groups


def test_a_failure_to_read_the_data_makes_the_group_where_named(tmp_path):
    from survivor.cloud.compute import GroupRef
    from survivor.cloud.template import MachineOptions, template_body
    from survivor.mig.make import choose_start
    from survivor.spec import JobSpec

    class Unreachable:  # Compute's advice cannot be reached at all
        def get_group(self, group):
            return None

        def capacity_advice(self, region, body):
            raise OSError("connection refused")

        capacity_history = capacity_advice

    spec = JobSpec.from_yaml(SPEC.format(job_dir=tmp_path / "job", regions="us-west1, us-central1"))
    template = template_body("job", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n")
    group = GroupRef("survivor-local", "job", region="us-west1")
    start = choose_start(Unreachable(), group, "job", template)  # type: ignore[arg-type]
    assert start.group == group and start.template == "job" and start.move is None
    assert start.why.startswith("starts in region us-west1: no capacity data")


SHAPES = (
    "job_dir: {job_dir}\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n"
    "compute: {{machine_type: n1-standard-8, gpu: 'nvidia-tesla-t4:1'}}\n"
    "placement: {{regions: [us-west1], shapes: [{{machine_type: g2-standard-8}}]}}\n"
)


@pytest.fixture
def shapes_template(compute_server, tmp_path, monkeypatch):
    """make-template for a job of one region and two machine shapes (its own N1 with a T4, then G2)."""
    from survivor.commands.main import main

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "survivor-local")
    spec = tmp_path / "job.yaml"
    spec.write_text(SHAPES.format(job_dir=tmp_path / "job"))
    assert main(["make-template", "job", "--config", str(spec)]) == 0
    return str(tmp_path / "job")


@pytest.mark.parametrize(
    "flag, where, said",
    [
        (
            ["--region", "us-west1"],
            "regions/us-west1",
            "starts in region us-west1 on g2-standard-8 (template job-shape-1)",
        ),
        (  # a zonal group stays in its zone, and takes the shape there
            ["--zone", "us-west1-b"],
            "zones/us-west1-b",
            "starts in zone us-west1-b on g2-standard-8 (template job-shape-1), not zone us-west1-b",
        ),
    ],
    ids=["regional", "zonal"],
)
def test_with_its_own_shape_out_the_group_starts_on_the_next_shape_and_the_records_say_so(
    compute_server, shapes_template, capsys, flag, where, said
):
    from survivor.jobdir.moves import current_shape, moves
    from survivor.jobdir.storage import open_storage

    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", machine_type="n1-standard-8")
    capsys.readouterr()
    assert make_group(*flag) == 0
    out = capsys.readouterr().out
    assert said in out, out
    assert "later commands take" not in out  # the place named is where later commands find it
    group = compute_server.groups[("survivor-local", where, "job")]
    assert group["instanceTemplate"].endswith("/job-shape-1")
    assert compute_server.templates[("survivor-local", "job-shape-1")]["properties"]["machineType"] == "g2-standard-8"
    recorded = moves(open_storage(shapes_template))
    assert [(m.from_place, m.to_place, m.shape, m.machine, m.by) for m in recorded] == [
        (where, where, "1", "g2-standard-8", "make-group")
    ]
    assert current_shape(recorded) == 1 and "capacity data" in recorded[0].reason
    # a rerun finds the group on its shape's template, and records nothing more
    assert make_group(*flag) == 0
    assert "already exists" in capsys.readouterr().out
    assert len(moves(open_storage(shapes_template))) == 1


def test_with_its_own_shape_available_the_group_starts_on_it_and_nothing_is_recorded(
    compute_server, shapes_template, capsys
):
    from survivor.jobdir.moves import moves
    from survivor.jobdir.storage import open_storage

    assert make_group("--region", "us-west1") == 0
    assert "starts in region us-west1: capacity data: staying" in capsys.readouterr().out
    assert compute_server.groups[("survivor-local", "regions/us-west1", "job")]["instanceTemplate"].endswith("/job")
    assert ("survivor-local", "job-shape-1") not in compute_server.templates
    assert moves(open_storage(shapes_template)) == []


def test_every_region_on_the_jobs_own_shape_comes_before_another_shape(compute_server, tmp_path, monkeypatch, capsys):
    """Capacity for the job's own machine in another region: the group goes there, not to another
    shape here, however close the bets (a move walks the regions on the job's own shape first)."""
    from survivor.commands.main import main

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "survivor-local")
    spec = tmp_path / "job.yaml"
    spec.write_text(
        SHAPES.format(job_dir=tmp_path / "job").replace("regions: [us-west1]", "regions: [us-west1, us-central1]")
    )
    assert main(["make-template", "job", "--config", str(spec)]) == 0
    west_out(compute_server)
    capsys.readouterr()
    assert make_group("--region", "us-west1") == 0
    assert "starts in region us-central1, not us-west1" in capsys.readouterr().out
    assert compute_server.groups[("survivor-local", "regions/us-central1", "job")]["instanceTemplate"].endswith("/job")


def test_a_rerun_after_a_make_group_cut_between_its_record_and_its_group_records_nothing_more(
    compute_server, shapes_template, capsys
):
    from survivor.cloud.compute import Compute, GroupRef
    from survivor.jobdir.moves import moves
    from survivor.jobdir.storage import open_storage
    from survivor.mig.make import choose_start, record_start

    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", machine_type="n1-standard-8")
    compute = Compute("survivor-local")
    group = GroupRef("survivor-local", "job", region="us-west1")
    first = choose_start(compute, group, "job", compute.get_template("job"))
    record_start(compute, first)  # then the make-group was killed
    assert first.template == "job-shape-1" and len(moves(open_storage(shapes_template))) == 1
    assert make_group("--region", "us-west1") == 0
    assert compute_server.groups[("survivor-local", "regions/us-west1", "job")]["instanceTemplate"].endswith(
        "/job-shape-1"
    )
    assert len(moves(open_storage(shapes_template))) == 1


def test_spot_written_as_a_quoted_string_is_refused_naming_the_key(tmp_path, capsys):
    from survivor.commands.main import main

    spec = tmp_path / "job.yaml"
    spec.write_text(
        "job_dir: gs://my-bucket/j\ntrain_steps: 1\ntrainer: {builtin: dummy}\n"
        "compute: {spot: 'false', zone: us-west1-b}\n"
    )
    assert main(["make-template", "job", "--config", str(spec), "--dry-run"]) != 0
    assert "compute.spot 'false': expected true or false" in capsys.readouterr().err


def test_make_templates_machine_flags_are_written_into_the_spec_the_template_carries(tmp_path, capsys):
    """The VM, its deadline prices, its capacity-data requests and its shapes' templates read the
    machine from the carried spec's compute: section: it must say what the template is."""
    import json

    from survivor.commands.main import main

    spec = tmp_path / "job.yaml"
    spec.write_text(
        "job_dir: gs://my-bucket/j\ntrain_steps: 1\ntrainer: {builtin: dummy}\n"
        "compute: {machine_type: n1-standard-8, gpu: 'nvidia-tesla-t4:1', disk_gb: 123, zone: us-west1-b}\n"
    )
    argv = ["make-template", "job", "--config", str(spec), "--dry-run", "--machine-type", "n1-standard-16"]
    assert main([*argv, "--gpu", "nvidia-tesla-t4:2", "--disk-gb", "77", "--on-demand", "--zone", "us-west1-a"]) == 0
    body = json.loads(capsys.readouterr().out)
    items = {i["key"]: i["value"] for i in body["properties"]["metadata"]["items"]}
    carried = json.loads(items["survivor-job"])["compute"]
    assert carried == {
        "machine_type": "n1-standard-16",
        "gpu": "nvidia-tesla-t4:2",
        "disk_gb": 77,
        "spot": False,
        "zone": "us-west1-b",  # where the checks ran is the command's, not the job's machine
    }
    assert body["properties"]["machineType"] == "n1-standard-16"


def dry_run(capsys, *place: str) -> tuple[dict, str]:
    """make-group --dry-run: (the body it prints, what it says on stderr)."""
    import json

    from survivor.commands.main import main

    capsys.readouterr()
    assert main(["make-group", "job", "--template", "job", *place, "--dry-run"]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def test_a_dry_run_shows_where_capacity_data_would_start_the_group_and_makes_nothing(
    compute_server, job_template, capsys
):
    job_template()
    west_out(compute_server)
    body, said = dry_run(capsys, "--region", "us-west1")
    assert "group job: starts in region us-central1, not us-west1: capacity data" in said
    assert body["region"] == "us-central1" and body["instanceTemplate"].endswith("/job")
    assert not compute_server.groups
    # make-group then does what the dry run showed
    assert make_group("--region", "us-west1") == 0
    made = compute_server.groups[("survivor-local", "regions/us-central1", "job")]
    assert made["instanceTemplate"] == body["instanceTemplate"]


def test_a_dry_run_on_another_shape_names_its_template_and_neither_makes_it_nor_records_a_move(
    compute_server, shapes_template, capsys
):
    from survivor.jobdir.moves import moves
    from survivor.jobdir.storage import open_storage

    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", machine_type="n1-standard-8")
    body, said = dry_run(capsys, "--region", "us-west1")
    assert "on g2-standard-8 (template job-shape-1)" in said
    assert "make-group would first make template job-shape-1" in said
    assert body["instanceTemplate"].endswith("/job-shape-1")
    assert ("survivor-local", "job-shape-1") not in compute_server.templates
    assert moves(open_storage(shapes_template)) == [] and not compute_server.groups


def test_a_dry_run_shows_the_stateful_policy_of_a_template_with_a_state_disk(
    compute_server, tmp_path, monkeypatch, capsys
):
    from survivor.commands.main import main

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "survivor-local")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"job_dir: {tmp_path}/job\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\nstate_disk_gb: 50\n")
    assert main(["make-template", "job", "--config", str(spec)]) == 0
    body, _ = dry_run(capsys, "--zone", "us-west1-b")
    assert body["statefulPolicy"]["preservedState"]["disks"]


def test_a_dry_run_that_cannot_read_compute_prints_the_group_as_named_and_says_why(capsys, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "survivor-local")
    monkeypatch.setenv("SURVIVOR_COMPUTE_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    body, said = dry_run(capsys, "--region", "us-west1")
    assert body["region"] == "us-west1" and body["instanceTemplate"].endswith("/job")
    assert said.startswith("dry run: Compute Engine not read (") and said.count("\n") == 1


def test_a_zonal_group_stays_on_its_own_shape_where_its_zone_offers_not_the_next_shapes_gpu(
    compute_server, shapes_template, capsys
):
    from survivor.jobdir.moves import moves
    from survivor.jobdir.storage import open_storage

    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", machine_type="n1-standard-8")
    capsys.readouterr()
    assert make_group("--zone", "us-central1-f") == 0  # a T4 zone without L4s
    assert "starts in zone us-central1-f: capacity data" in capsys.readouterr().out
    group = compute_server.groups[("survivor-local", "zones/us-central1-f", "job")]
    assert group["instanceTemplate"].endswith("/job")
    assert ("survivor-local", "job-shape-1") not in compute_server.templates
    assert moves(open_storage(shapes_template)) == []


def test_a_dry_run_of_a_template_that_does_not_exist_is_refused_as_make_group_refuses_it(
    compute_server, capsys, monkeypatch
):
    from survivor.commands.main import main

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "survivor-local")
    capsys.readouterr()
    assert main(["make-group", "job", "--template", "nope", "--zone", "us-west1-b", "--dry-run"]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == (
        "error: template nope: not found; create it first with `survivor make-template nope --config JOB.yaml`"
    )
    assert captured.out == ""
    assert main(["make-group", "job", "--template", "nope", "--zone", "us-west1-b", "--wait-seconds", "0"]) == 1
    assert capsys.readouterr().err.strip() == captured.err.strip()


def test_a_dry_run_refuses_what_make_group_refuses_and_shows_a_rerun_as_make_group_finds_it(
    compute_server, shapes_template, capsys
):
    from survivor.commands.main import main

    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", machine_type="n1-standard-8")
    assert make_group("--region", "us-west1") == 0  # on job-shape-1, the first shape out
    # a rerun: the group on its shape's template, as make-group reports on it
    body, _ = dry_run(capsys, "--region", "us-west1")
    assert body["instanceTemplate"].endswith("/job-shape-1")
    # a second group of the job elsewhere: refused with make-group's own line
    refused = ["make-group", "job", "--template", "job", "--zone", "us-west1-b"]
    capsys.readouterr()
    assert main([*refused, "--dry-run"]) == 1
    said = capsys.readouterr()
    assert said.out == "" and "a job has one group" in said.err
    assert main([*refused, "--wait-seconds", "0"]) == 1
    assert capsys.readouterr().err == said.err
