"""A job may name other machines it can train on
(`placement.shapes`), and when its own shape has no capacity in any of its regions it moves to the
next shape, resumes from its last commit and finishes DONE. The simulator plays the watch every
0.3 s on a clock 60 times faster, so `move_after_minutes: 1` is a second here."""

import json

import pytest
import yaml

from survivor.policy import placement
from survivor.spec import JobSpec, Placement, Shape, SpecError

BASE = "job_dir: gs://bucket/run\ntrain_steps: 10\ntrainer: {builtin: dummy}\n"


# -- the spec --------------------------------------------------------------------------------------


def test_a_spec_names_alternative_shapes_with_the_machine_keys_of_compute_and_round_trips():
    spec = JobSpec.from_yaml(
        BASE + "compute: {machine_type: n1-standard-8, gpu: nvidia-tesla-t4:1}\n"
        "placement:\n  regions: [us-west1, us-central1]\n"
        "  shapes: [{machine_type: g2-standard-8}, {machine_type: n1-standard-8, "
        "gpu: nvidia-tesla-v100:1}]\n"
    )
    assert spec.placement.shapes == (
        Shape(machine_type="g2-standard-8"),
        Shape(machine_type="n1-standard-8", gpu="nvidia-tesla-v100:1"),
    )
    assert spec.to_mapping()["placement"]["shapes"] == [
        {"machine_type": "g2-standard-8"},
        {"machine_type": "n1-standard-8", "gpu": "nvidia-tesla-v100:1"},
    ]
    assert JobSpec.from_mapping(spec.to_mapping()) == spec
    assert JobSpec.from_yaml(spec.to_yaml()) == spec
    without = JobSpec.from_yaml(BASE + "placement: {regions: [us-west1, us-central1]}\n")
    assert without.placement.shapes == () and "shapes" not in without.to_mapping()["placement"]


@pytest.mark.parametrize(
    "shapes, line",
    [
        (
            "[{machine_type: g2-standard-8, gpus: nvidia-l4:1}]",
            "placement.shapes[0].gpus: unknown key (did you mean gpu?); expected machine_type or gpu",
        ),
        (
            "[{machine_type: g2-standard-8}, {machine: n1-standard-8}]",
            "placement.shapes[1].machine: unknown key; expected machine_type or gpu",
        ),
        (
            "[{machine_type: n1-standard-8, gpu: 'nvidia-tesla-t4 x 1'}]",
            "placement.shapes[0].gpu = 'nvidia-tesla-t4 x 1': expected TYPE:COUNT such as nvidia-tesla-t4:1, or none",
        ),
        ("[g2-standard-8]", "placement.shapes[0] = 'g2-standard-8': expected a mapping with machine_type and/or gpu"),
        (
            "{machine_type: g2-standard-8}",
            "placement.shapes = {'machine_type': 'g2-standard-8'}: expected a list of "
            "shapes, e.g. [{machine_type: g2-standard-8}]",
        ),
        (
            "[{machine_type: g2-standard-8}, {machine_type: g2-standard-8}]",
            "placement.shapes[1]: the same shape as placement.shapes[0]",
        ),
        (
            "[" + ", ".join(f"{{machine_type: n1-standard-{n}}}" for n in range(1, 12)) + "]",
            "placement.shapes: 11 shapes; expected at most 10",
        ),
    ],
)
def test_a_wrong_shape_is_one_line_naming_its_key(shapes, line):
    with pytest.raises(SpecError) as caught:
        JobSpec.from_yaml(BASE + f"placement:\n  regions: [us-west1]\n  shapes: {shapes}\n")
    assert caught.value.problems == [line]


def test_a_shape_is_held_to_the_same_machine_rules_as_compute():
    """A g2 carries its own L4: a shape that attaches a T4 to it is refused when the template is
    made, in the words `compute:` gets for the same mistake, naming the shape's keys."""
    from survivor.cloud.template import MachineOptions, machine_problems, template_body

    spec = JobSpec.from_yaml(
        BASE + "placement:\n  regions: [us-west1]\n  shapes:\n"
        "    - {machine_type: g2-standard-8}\n"
        "    - {machine_type: g2-standard-8, gpu: nvidia-tesla-t4:4}\n"
        "    - {machine_type: n1-standard-96, gpu: nvidia-tesla-t4:1}\n"
    )
    options = MachineOptions.from_spec(spec)
    assert machine_problems(spec, options) == [
        "placement.shapes[1]: placement.shapes[1].gpu nvidia-tesla-t4:4 with placement.shapes[1].machine_type "
        "g2-standard-8: g2 machines carry their own GPUs (g2-standard-8: 1 x nvidia-l4); drop placement.shapes[1].gpu "
        "(or --gpu none)",
        "placement.shapes[2]: placement.shapes[2].gpu nvidia-tesla-t4:1 with placement.shapes[2].machine_type "
        "n1-standard-96: 1 x nvidia-tesla-t4 allows up to 48 vCPUs and 312 GB (n1-standard-96 has 96 and 360); "
        "use 4 GPUs or a smaller placement.shapes[2].machine_type",
    ]
    with pytest.raises(SpecError) as caught:
        template_body("job", spec, options, script="#!/bin/sh\n")
    assert [p for p in caught.value.problems if p.startswith("placement.shapes[")] == machine_problems(spec, options)
    good = JobSpec.from_yaml(BASE + "placement: {regions: [us-west1], shapes: [{machine_type: g2-standard-8}]}\n")
    assert machine_problems(good, MachineOptions.from_spec(good)) == []
    same = JobSpec.from_yaml(
        BASE + "compute: {machine_type: n1-standard-8, gpu: nvidia-tesla-t4:1}\n"
        "placement: {regions: [us-west1], shapes: [{machine_type: n1-standard-8}]}\n"
    )
    assert machine_problems(same, MachineOptions.from_spec(same)) == [
        "placement.shapes[0]: the same machine as compute: (n1-standard-8 with nvidia-tesla-t4:1); name another machine "
        "or drop the shape"
    ]  # an N1 shape without gpu gets compute's default T4


def test_a_shapes_template_is_the_jobs_with_only_its_machine_changed():
    from survivor.mig.templates import shape_template_body
    from survivor.cloud.template import MachineOptions, template_body

    spec = JobSpec.from_yaml(
        BASE + "compute: {machine_type: n1-standard-8, gpu: nvidia-tesla-t4:1, "
        "preemption_notice: 120}\nplacement:\n  regions: [us-west1]\n"
        "  shapes: [{machine_type: g2-standard-8}, {machine_type: n1-standard-8, "
        "gpu: nvidia-tesla-v100:1}]\n"
    )
    job = template_body("job", spec, MachineOptions.from_spec(spec), script="#!/bin/sh\n")
    g2 = shape_template_body(job, spec, 1)
    assert g2["name"] == "job-shape-1" and shape_template_body(job, spec, 1) == g2  # deterministic
    assert g2["properties"]["machineType"] == "g2-standard-8" and "guestAccelerators" not in g2["properties"]
    assert g2["properties"]["scheduling"] == job["properties"]["scheduling"]  # still Spot, the same notice
    v100 = shape_template_body(job, spec, 2)
    assert v100["name"] == "job-shape-2"
    assert v100["properties"]["guestAccelerators"] == [{"acceleratorType": "nvidia-tesla-v100", "acceleratorCount": 1}]
    for made in (g2, v100):
        rest = {k: v for k, v in made["properties"].items() if k not in ("machineType", "guestAccelerators")}
        assert rest == {k: v for k, v in job["properties"].items() if k not in ("machineType", "guestAccelerators")}
    assert shape_template_body(job, spec, 0) == job  # shape 0 is the job's own template


# -- the decision over (region, shape) -------------------------------------------------------------


RULE = Placement(
    ("us-west1", "us-central1"),
    move_after_minutes=30,
    preemptions_per_hour=3,
    shapes=(Shape(machine_type="g2-standard-8"), Shape(machine_type="n1-standard-8", gpu="nvidia-tesla-v100:1")),
)
OUT = ("ZONE_RESOURCE_POOL_EXHAUSTED",)


def test_the_places_are_every_region_for_one_shape_then_the_next_shape():
    assert placement.places(RULE) == (
        placement.Place("us-west1", 0),
        placement.Place("us-central1", 0),
        placement.Place("us-west1", 1),
        placement.Place("us-central1", 1),
        placement.Place("us-west1", 2),
        placement.Place("us-central1", 2),
    )


@pytest.mark.parametrize(
    "look, expected",
    [
        # the job's own shape: the next region first
        (placement.Look("zones/us-west1-b", idle_seconds=3000, capacity_errors=OUT), (True, "us-central1", 0)),
        # its own shape is out in its last region: the first region for the next shape
        (placement.Look("regions/us-central1", idle_seconds=3000, capacity_errors=OUT), (True, "us-west1", 1)),
        (placement.Look("regions/us-west1", shape=1, idle_seconds=3000, capacity_errors=OUT), (True, "us-central1", 1)),
        (placement.Look("regions/us-central1", shape=1, preemptions_last_hour=3), (True, "us-west1", 2)),
        # round the list: back to the job's own shape in its first region
        (placement.Look("regions/us-central1", shape=2, idle_seconds=3000, capacity_errors=OUT), (True, "us-west1", 0)),
        # a place whose region offers no zone with the shape's GPU is skipped
        (
            placement.Look(
                "regions/us-central1",
                idle_seconds=3000,
                capacity_errors=OUT,
                not_offered=frozenset({placement.Place("us-west1", 1)}),
            ),
            (True, "us-central1", 1),
        ),
        (
            placement.Look(
                "regions/us-central1",
                idle_seconds=3000,
                capacity_errors=OUT,
                not_offered=frozenset(
                    {placement.Place("us-west1", 1), placement.Place("us-central1", 1), placement.Place("us-west1", 2)}
                ),
            ),
            (True, "us-central1", 2),
        ),
        # nowhere else offers anything: stay
        (
            placement.Look(
                "regions/us-west1",
                shape=0,
                idle_seconds=3000,
                capacity_errors=OUT,
                not_offered=frozenset(p for p in placement.places(RULE) if p != placement.Place("us-west1", 0)),
            ),
            (False, None, 0),
        ),
        # the rules of when are the regions' (tests/test_capacity_move.py): not long enough yet, a VM runs
        (placement.Look("regions/us-west1", shape=1, idle_seconds=1000, capacity_errors=OUT), (False, None, 0)),
        (
            placement.Look("regions/us-west1", shape=1, running=True, idle_seconds=9000, capacity_errors=OUT),
            (False, None, 0),
        ),
    ],
)
def test_the_move_decision_walks_regions_then_shapes(look, expected):
    decision = placement.decide(RULE, look)
    assert (decision.move, decision.to_region, decision.to_shape) == expected, decision.reason


def test_a_decision_names_the_shape_it_moves_to():
    decision = placement.decide(RULE, placement.Look("regions/us-central1", idle_seconds=3000, capacity_errors=OUT))
    assert decision.to == placement.Place("us-west1", 1)
    assert placement.shape_text(RULE, 1) == "g2-standard-8" and placement.shape_text(RULE, 0) == "compute:"
    assert placement.shape_text(RULE, 2) == "n1-standard-8 with nvidia-tesla-v100:1"
    one_region = Placement(("us-west1",), shapes=(Shape(machine_type="g2-standard-8"),))
    moved = placement.decide(one_region, placement.Look("zones/us-west1-b", idle_seconds=3000, capacity_errors=OUT))
    assert (moved.move, moved.to) == (True, placement.Place("us-west1", 1))  # one region, two shapes: a move
    assert (
        placement.decide(
            Placement(("us-west1",)), placement.Look("zones/us-west1-b", idle_seconds=3000, capacity_errors=OUT)
        ).move
        is False
    )


# -- the Compute fake's stockouts per machine --------------------------------------------------------


def test_the_fake_stocks_out_one_machine_while_another_has_capacity(compute_server, monkeypatch):
    from survivor.cloud.compute import Compute, GroupRef
    from survivor.mig.templates import shape_template_body
    from survivor.cloud.template import MachineOptions, template_body

    spec = JobSpec.from_yaml(BASE + "placement: {regions: [us-west1], shapes: [{machine_type: g2-standard-8}]}\n")
    compute = Compute("survivor-local")
    job = template_body("job", spec, MachineOptions.from_spec(spec), script="#!/bin/sh\n")
    compute.insert_template(job)
    compute.insert_template(shape_template_body(job, spec, 1))
    compute_server.fail_instance_creation(
        "ZONE_RESOURCE_POOL_EXHAUSTED", zone="us-west1-b", accelerator="nvidia-tesla-t4"
    )
    compute_server.fail_instance_creation(
        "ZONE_RESOURCE_POOL_EXHAUSTED", zone="us-west1-a", machine_type="g2-standard-8"
    )
    t4 = GroupRef("survivor-local", "t4", zone="us-west1-b")
    compute.create_group("t4", "job", zone="us-west1-b", size=1)
    [member] = compute.managed_instances(t4)
    assert not member["status"]
    [(code, message)] = member["errors"]
    assert code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert message == (
        "A n1-standard-16 VM instance with 1 nvidia-tesla-t4 accelerator(s) is currently unavailable "
        "in the us-west1-b zone. Consider trying your request in another zone which has capacity to "
        "accommodate your request."
    )
    compute.create_group("g2", "job-shape-1", zone="us-west1-b", size=1)  # the other shape, the same zone
    [vm] = compute.managed_instances(GroupRef("survivor-local", "g2", zone="us-west1-b"))
    assert vm["status"] == "RUNNING"
    compute.create_group("g2a", "job-shape-1", zone="us-west1-a", size=1)  # that shape, another zone: out
    [out] = compute.managed_instances(GroupRef("survivor-local", "g2a", zone="us-west1-a"))
    assert not out["status"] and out["errors"][0][0] == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert "A g2-standard-8 VM instance with 1 nvidia-l4 accelerator(s)" in out["errors"][0][1]


# -- carrying it out ---------------------------------------------------------------------------------


def stocked_out_group(compute_server, template: str) -> dict:
    """The job's group in us-west1-b on `template`, made 45 minutes ago, its T4 VM refused for a
    stockout 40 minutes ago: past the 30 minutes a move waits (the fake's group record)."""
    import datetime as _dt

    from survivor.cloud.compute import Compute, GroupRef

    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", accelerator="nvidia-tesla-t4")
    # on the job's own shape, as when the stockout began after make-group (which would now start
    # the group on the next shape: tests/test_start_place.py)
    Compute("survivor-local").create_group("job", template, zone="us-west1-b", size=1)
    group = compute_server.groups[("survivor-local", "zones/us-west1-b", "job")]
    now = _dt.datetime.now(_dt.timezone.utc)
    group["creationTimestamp"] = (now - _dt.timedelta(minutes=45)).isoformat()
    Compute("survivor-local").managed_instances(GroupRef("survivor-local", "job", zone="us-west1-b"))
    for error in group["_errors"]:
        error["timestamp"] = (now - _dt.timedelta(minutes=40)).isoformat()
    return group


def test_a_one_region_job_out_of_its_shape_changes_its_groups_template(compute_server, tmp_path, capsys, monkeypatch):
    """One region, two shapes: the move is the same group with the shape's template (a second group
    of the same name in the region would share its instances' names); the record names the shape."""

    from survivor.cloud.compute import Compute, GroupRef
    from survivor.commands.main import main
    from survivor.jobdir.moves import moves
    from survivor.jobdir.storage import open_storage

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "survivor-local")
    job_dir = str(tmp_path / "job")
    (tmp_path / "job.yaml").write_text(
        f"job_dir: {job_dir}\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n"
        "placement: {regions: [us-west1], shapes: [{machine_type: g2-standard-8}]}\n"
    )
    assert main(["make-template", "job", "--config", str(tmp_path / "job.yaml")]) == 0
    group = stocked_out_group(compute_server, "job")
    compute = Compute("survivor-local")
    capsys.readouterr()
    assert main(["watch", "job", "--zone", "us-west1-b", "--job-dir", job_dir]) == 0
    out = capsys.readouterr().out
    assert "job job: moved from zones/us-west1-b to zones/us-west1-b, shape g2-standard-8" in out, out
    assert compute.get_template("job-shape-1")["properties"]["machineType"] == "g2-standard-8"
    [vm] = compute.managed_instances(GroupRef("survivor-local", "job", zone="us-west1-b"))
    assert vm["status"] == "RUNNING"
    assert group["instanceTemplate"].endswith("/job-shape-1")
    [move] = moves(open_storage(job_dir))
    assert (move.shape, move.machine) == ("1", "g2-standard-8")
    assert main(["status", "--job-dir", job_dir]) == 0
    assert "now at zones/us-west1-b on g2-standard-8" in " ".join(capsys.readouterr().out.split())


def test_a_job_on_on_demand_keeps_on_demand_on_its_next_shape(compute_server, tmp_path, capsys, monkeypatch):
    """A group the deadline policy put on on-demand, out of its shape: the move puts it on the shape's
    on-demand twin, not the shape's Spot template (the mode is the deadline policy's to change)."""

    from survivor.cloud.compute import Compute, GroupRef
    from survivor.commands.main import main
    from survivor.mig.templates import on_demand_template_body

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "survivor-local")
    job_dir = str(tmp_path / "job")
    (tmp_path / "job.yaml").write_text(
        f"job_dir: {job_dir}\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n"
        "placement: {regions: [us-west1], shapes: [{machine_type: g2-standard-8}]}\n"
    )
    assert main(["make-template", "job", "--config", str(tmp_path / "job.yaml")]) == 0
    compute = Compute("survivor-local")
    compute.insert_template(on_demand_template_body(compute.get_template("job")))
    group = stocked_out_group(compute_server, "job-on-demand")
    capsys.readouterr()
    assert main(["watch", "job", "--zone", "us-west1-b", "--job-dir", job_dir]) == 0
    out = capsys.readouterr().out
    assert "template job-shape-1-on-demand: created (on-demand, shape g2-standard-8)" in out, out
    assert group["instanceTemplate"].endswith("/job-shape-1-on-demand")
    twin = compute.get_template("job-shape-1-on-demand")["properties"]
    assert twin["machineType"] == "g2-standard-8" and twin["scheduling"]["provisioningModel"] == "STANDARD"
    spot = compute.get_template("job-shape-1")["properties"]  # kept for the switch back to Spot
    assert spot["scheduling"]["provisioningModel"] == "SPOT"
    [vm] = compute.managed_instances(GroupRef("survivor-local", "job", zone="us-west1-b"))
    assert vm["status"] == "RUNNING"


def spec_yaml(job_dir: str, steps_log: str) -> str:
    """tests/test_capacity_move.py's job (two regions, a move after a minute), with a machine and one
    other shape to move to."""
    from tests.test_capacity_move import spec_yaml as regions_job

    spec = yaml.safe_load(regions_job(job_dir, steps_log))
    spec["compute"] = {"machine_type": "n1-standard-8", "gpu": "nvidia-tesla-t4:1"}
    spec["placement"]["shapes"] = [{"machine_type": "g2-standard-8"}]
    return yaml.safe_dump(spec)


@pytest.mark.slow
def test_a_job_whose_shape_is_out_in_every_region_moves_to_its_next_shape_and_finishes_done(tmp_path):
    from survivor.jobdir.journal import Journal
    from survivor.jobdir.moves import moves
    from survivor.jobdir.storage import open_storage
    from survivor.local.simulator import Simulator

    job_dir = str(tmp_path / "job")
    sim = Simulator(
        spec_yaml(job_dir, str(tmp_path / "steps.log")),
        str(tmp_path / "sim"),
        preempt_every=1e9,
        shape_outages=(("n1-standard-8", 0.5, float("inf")),),
        outages_from_first_commit=True,
        watch_every=0.3,
        speed=60.0,
        recreate_delay=0.2,
    )
    sim.compute.fail("compute.advice.capacity", http=403, times=10**6)  # no capacity data: the walk of the places
    result = sim.run(timeout=240)
    table = result.table()
    assert result.done is not None and result.done["step"] == 160, table
    recorded = moves(open_storage(job_dir))
    # every region for the job's own shape, then the next shape in the first region
    assert [(m.from_place, m.to_place, m.shape) for m in recorded] == [
        ("zones/us-west1-b", "regions/us-central1", "0"),
        ("regions/us-central1", "regions/us-west1", "1"),
    ], table
    assert recorded[-1].machine == "g2-standard-8" and "ZONE_RESOURCE_POOL_EXHAUSTED" in recorded[-1].reason
    attempts = Journal(open_storage(job_dir)).attempts()
    before, after = attempts[0], attempts[-1]
    assert before.outcome == "preempted" and after.outcome == "finished", table
    assert after.restored_step == before.end_step and before.steps_lost == 0  # nothing committed was lost
    assert sum(a.steps_lost or 0 for a in attempts) == 0, table
    boots = [e for e in result.events if e.kind == "boot"]
    assert len(boots) == 2, table  # one VM on the first shape, one on the second
    assert sim.compute.groups[("survivor-local", "regions/us-west1", "sim")]["instanceTemplate"].endswith(
        "/sim-shape-1"
    )
    assert sim.compute.templates[("survivor-local", "sim-shape-1")]["properties"]["machineType"] == "g2-standard-8"
    assert result.target_size == 0
    steps = [int(s) for s in (tmp_path / "steps.log").read_text().split()]
    assert steps[-1] == 160 and sorted(set(steps)) == list(range(1, 161))
    lease = open_storage(job_dir).read("survivor/LEASE")
    if lease is not None:
        assert json.loads(lease.data)["instance"] == boots[-1].instance


@pytest.mark.slow
def test_with_capacity_data_a_job_whose_shape_is_out_moves_once_straight_to_a_shape_with_capacity(tmp_path):
    """The same job with Compute Engine's capacity data: no walk through the regions without its
    shape, one move to the next shape in its own region (the group takes that shape's template,
    and the VM the group made from it at once is not recreated again), and it finishes."""
    from survivor.jobdir.journal import Journal
    from survivor.jobdir.moves import moves
    from survivor.jobdir.storage import open_storage
    from survivor.local.simulator import Simulator

    job_dir = str(tmp_path / "job")
    sim = Simulator(
        spec_yaml(job_dir, str(tmp_path / "steps.log")),
        str(tmp_path / "sim"),
        preempt_every=1e9,
        shape_outages=(("n1-standard-8", 0.5, float("inf")),),
        outages_from_first_commit=True,
        watch_every=0.3,
        speed=60.0,
        recreate_delay=0.2,
    )
    result = sim.run(timeout=240)
    table = result.table()
    assert result.done is not None and result.done["step"] == 160, table
    recorded = moves(open_storage(job_dir))
    assert [(m.from_place, m.to_place, m.shape) for m in recorded] == [("zones/us-west1-b", "zones/us-west1-b", "1")], (
        table
    )
    assert recorded[0].machine == "g2-standard-8" and "capacity data" in recorded[0].reason
    boots = [e for e in result.events if e.kind == "boot"]
    assert len(boots) == 2, table  # one VM on the first shape, one on the second: no third boot
    attempts = Journal(open_storage(job_dir)).attempts()
    assert attempts[-1].outcome == "finished" and sum(a.steps_lost or 0 for a in attempts) == 0, table
    assert sim.compute.groups[("survivor-local", "zones/us-west1-b", "sim")]["instanceTemplate"].endswith(
        "/sim-shape-1"
    )
    steps = [int(s) for s in (tmp_path / "steps.log").read_text().split()]
    assert steps[-1] == 160 and sorted(set(steps)) == list(range(1, 161))
