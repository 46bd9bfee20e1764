"""A job whose region keeps preempting it moves when its next VM boots there, the
agent deciding as the watch does (`placement.decide`) and moving as it does (`look_and_move`,
by="agent"), before it takes the lease, so the new group's VM restores with one writer throughout."""

import datetime as _dt
import json

import pytest
import yaml

from survivor.cloud.compute import GroupRef
from survivor.jobdir.journal import Journal
from survivor.jobdir.moves import Move, moves
from survivor.jobdir.storage import open_storage
from survivor.local.simulator import Simulator
from survivor.policy import placement
from survivor.spec import Placement
from tests.conftest import PYTHON

NOW = _dt.datetime(2026, 11, 25, 12, 0, tzinfo=_dt.timezone.utc)


def ago(minutes: float) -> str:
    return (NOW - _dt.timedelta(minutes=minutes)).isoformat()


def preempted(number: int, zone: str | None, ended_minutes_ago: float, outcome: str = "preempted"):
    from survivor.jobdir.journal import Attempt

    return Attempt(
        number=number,
        instance="sim-ab12",
        started=ago(ended_minutes_ago + 5),
        ended=ago(ended_minutes_ago),
        outcome=outcome,
        zone=zone,
    )


ME = {"name": "sim-ab12", "zone": "us-west1-b", "status": "RUNNING"}
STOCKOUT = {"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "timestamp": ago(50)}
THREE_HERE = [preempted(1, "us-west1-b", 50), preempted(2, "us-west1-a", 30), preempted(3, "us-west1-b", 10)]


@pytest.mark.parametrize(
    "attempts, instances, errors, recorded, expected",
    [
        # three preemptions in the last hour in us-west1 (two of its zones): the booting VM moves the job
        (THREE_HERE, [ME], [], [], (3, False, (), True)),
        # one was over an hour ago: two in the hour, it stays
        ([preempted(1, "us-west1-b", 70)] + THREE_HERE[1:], [ME], [], [], (2, False, (), False)),
        # one was in another region (the job's VM there before it came back): not this region's doing
        ([preempted(1, "us-central1-c", 50)] + THREE_HERE[1:], [ME], [], [], (2, False, (), False)),
        # an attempt that ended otherwise (stopped, failed) is no preemption
        (THREE_HERE[:2] + [preempted(3, "us-west1-b", 10, outcome="stopped")], [ME], [], [], (2, False, (), False)),
        # a record written before attempts kept their zone counts wherever the group is
        ([preempted(1, None, 50)] + THREE_HERE[1:], [ME], [], [], (3, False, (), True)),
        # preemptions before the job's last move are the old place's
        (
            THREE_HERE,
            [ME],
            [],
            [Move(time=ago(40), from_place="regions/us-central1", to_place="zones/us-west1-b")],
            (2, False, (), False),
        ),
        # another VM of the group trains: no move under it
        (
            THREE_HERE,
            [ME, {"name": "sim-cd34", "zone": "us-west1-a", "status": "RUNNING"}],
            [],
            [],
            (3, True, (), False),
        ),
        # the stockouts listed before this VM came do not count: this boot got capacity
        (THREE_HERE[:1], [ME], [STOCKOUT], [], (1, False, (), False)),
    ],
)
def test_the_boots_look_counts_this_regions_preemptions_of_the_last_hour(
    attempts, instances, errors, recorded, expected
):
    rule = Placement(("us-west1", "us-central1"), move_after_minutes=30, preemptions_per_hour=3)
    look = placement.look_from(
        "zones/us-west1-b",
        instances=instances,
        attempts=attempts,
        errors=errors,
        created=NOW - _dt.timedelta(hours=3),
        recorded=recorded,
        pending=False,
        now=NOW,
        booting="sim-ab12",
    )
    count, running, codes, move = expected
    assert (look.preemptions_last_hour, look.running, look.capacity_errors) == (count, running, codes)
    decision = placement.decide(rule, look)
    assert decision.move is move, decision.reason
    if move:
        assert decision.to_region == "us-central1"
        assert decision.reason == "us-west1 preempted the job 3 times in the last hour"


def test_the_watchs_look_still_counts_its_vm_and_capacity_errors():
    """Without `booting` (the watch), a RUNNING VM is a training VM and listed stockouts count."""
    look = placement.look_from(
        "zones/us-west1-b",
        instances=[ME],
        attempts=[],
        errors=[STOCKOUT],
        created=NOW - _dt.timedelta(hours=3),
        recorded=[],
        pending=False,
        now=NOW,
    )
    assert look.running and look.capacity_errors == ("ZONE_RESOURCE_POOL_EXHAUSTED",)


def test_an_attempt_record_keeps_its_zone_and_reads_without_it(tmp_path):
    journal = Journal(open_storage(str(tmp_path)))
    attempt = journal.begin("sim-ab12", zone="us-west1-b")
    journal.end(attempt, "preempted")
    assert [a.zone for a in journal.attempts()] == ["us-west1-b"]
    record = json.loads(open_storage(str(tmp_path)).read(attempt.name).data)
    del record["zone"]  # as survivor wrote it before
    from survivor.jobdir.journal import Attempt

    assert Attempt.from_json(json.dumps(record).encode()).zone is None
    with pytest.raises(ValueError, match="zone"):
        Attempt.from_json(json.dumps({**record, "zone": 7}).encode())


@pytest.mark.slow
def test_a_region_that_keeps_preempting_is_left_at_the_next_boot(tmp_path):
    """us-west1 preempts every VM of the job about a second into its training; the spec's
    `preemptions_per_hour: 2` makes the third boot there move the job to us-central1 (no watch
    runs), where it finishes DONE with nothing committed lost. Preemptions come only once a VM
    trains, so a slow boot on a loaded machine changes the timing, not the story."""
    job_dir = str(tmp_path / "job")
    steps_log = tmp_path / "steps.log"
    spec = yaml.safe_dump(
        {
            "job_dir": job_dir,
            "train_steps": 120,
            "checkpoint_steps": 10,
            "grace_seconds": 5,
            "sync_seconds": 0.3,
            "trainer": {
                "argv": [
                    PYTHON,
                    "-m",
                    "survivor.trainers.dummy",
                    "--on-sigterm",
                    "save",
                    "--step-seconds",
                    "0.03",
                    "--step-log",
                    str(steps_log),
                ]
            },
            "placement": {"regions": ["us-west1", "us-central1"], "preemptions_per_hour": 2},
        }
    )
    sim = Simulator(
        spec, str(tmp_path / "sim"), preempt_every=1.0, preempting_regions=("us-west1",), recreate_delay=0.2, speed=1.0
    )
    result = sim.run(timeout=300)
    table = result.table()
    assert result.done is not None and result.done["step"] == 120, table
    [move] = moves(open_storage(job_dir))
    assert (move.from_place, move.to_place, move.by) == ("zones/us-west1-b", "regions/us-central1", "agent"), table
    assert move.reason == "us-west1 preempted the job 2 times in the last hour", move.reason
    attempts = Journal(open_storage(job_dir)).attempts()
    # the moving boot recorded no attempt (it never took the lease): two preempted in us-west1, one finished
    assert [(a.outcome, (a.zone or "").rsplit("-", 1)[0]) for a in attempts] == [
        ("preempted", "us-west1"),
        ("preempted", "us-west1"),
        ("finished", "us-central1"),
    ], table
    assert all(a.steps_lost == 0 for a in attempts), table  # every preemption's work was committed
    assert attempts[1].restored_step == attempts[0].end_step and attempts[2].restored_step == attempts[1].end_step
    assert attempts[2].end_step == 120 and result.target_size == 0, table
    boots = [e for e in result.events if e.kind == "boot"]
    assert len(boots) == 4, table  # three in us-west1 (the third moved the job), one in us-central1
    assert {local.zone.rsplit("-", 1)[0] for local in sim.vms.values()} == {"us-west1", "us-central1"}
    log = open(sim.vms[boots[2].instance].log_path(3)).read()
    assert "this boot moved the job and ends without training: us-west1 preempted the job 2 times" in log
    lease = open_storage(job_dir).read("survivor/LEASE")
    if lease is not None:  # one writer: the last holder is the VM of the new group
        holder = json.loads(lease.data)
        assert holder["instance"] == boots[-1].instance and holder["zone"].startswith("us-central1-"), holder
    steps = [int(s) for s in steps_log.read_text().split()]
    assert steps[-1] == 120 and sorted(set(steps)) == list(range(1, 121))


def test_a_vm_of_a_group_its_job_moved_away_from_leaves_it_without_training(compute_server, tmp_path):
    """A move cut before it deleted the old group (or whose delete was refused) leaves that group's
    VM to boot again: it must not train there (the lease belongs to the new group's VM), nor sit
    idle and billed. Before: it trained on in the old group."""
    import sys

    from survivor.cloud.compute import Compute
    from survivor.cloud.template import MachineOptions, template_body
    from survivor.jobdir.moves import record_move
    from survivor.local.instance import LocalInstance
    from survivor.spec import JobSpec
    from tests.conftest import dummy_spec

    project, zone = "survivor-local", "us-west1-b"

    spec_yaml = dummy_spec(
        str(tmp_path / "jobdir"),
        tmp_path,
        train_steps=30,
        on_finish="auto",
        placement={"regions": ["us-west1", "us-central1"]},
    )
    spec = JobSpec.from_yaml(spec_yaml)
    compute = Compute(project, endpoint=compute_server.endpoint)
    compute.insert_template(template_body("job", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.create_group("job", "job", zone=zone, size=1)
    storage = open_storage(spec.job_dir)
    record_move(
        storage,
        Move(
            time=_dt.datetime.now(_dt.timezone.utc).isoformat(),
            from_place=f"zones/{zone}",
            to_place="regions/us-central1",
            reason="a stockout",
            by="watch",
        ),
    )
    group = compute_server.groups[(project, f"zones/{zone}", "job")]
    member = group["_members"][0]
    attributes = {i["key"]: i["value"] for i in compute_server.instances[member]["metadata"]["items"]}
    vm = LocalInstance(
        attributes,
        str(tmp_path / "vm"),
        name=member[2],
        zone=zone,
        project=project,
        python=sys.executable,
        env={"SURVIVOR_COMPUTE_ENDPOINT": compute_server.endpoint},
    )
    try:
        vm.boot()
        assert vm.wait(120) == 0, open(vm.log_path()).read()[-3000:]
    finally:
        vm.close()
    log = open(vm.log_path()).read()
    assert "the job's records moved its group away from this VM's: leaving it without training" in log, log[-3000:]
    assert not (tmp_path / "steps.log").exists()  # nothing trained in the old group
    assert Journal(storage).attempts() == [] and storage.read("survivor/LEASE") is None
    # and it carried out the records: a move cut after its record had no group where it went, and
    # with no watch deployed the job had no VM at all (a hostile review found it)
    assert (project, f"zones/{zone}", "job") not in compute_server.groups  # its group deleted, the VM with it
    moved_to = compute.get_group(placement.group_at(GroupRef(project, "job", zone=zone), "regions/us-central1"))
    assert moved_to is not None and int(moved_to["targetSize"]) == 1
    assert "finish action failed" not in log


def test_a_vm_that_cannot_get_the_lease_after_its_job_moved_leaves_its_group(compute_server, tmp_path):
    """The VM waits for the lease another agent keeps renewing; meanwhile a move records the job
    elsewhere. Before: LeaseHeld, exit for a restart, the VM idle and billed in a group the job left.
    Now: it leaves its group."""
    import sys
    import threading

    from survivor.cloud.compute import Compute
    from survivor.cloud.template import MachineOptions, template_body
    from survivor.jobdir.lease import Holder, Lease
    from survivor.jobdir.moves import record_move
    from survivor.local.instance import LocalInstance
    from survivor.spec import JobSpec
    from tests.conftest import dummy_spec

    project, zone = "survivor-local", "us-west1-b"
    spec = JobSpec.from_yaml(
        dummy_spec(
            str(tmp_path / "jobdir"),
            tmp_path,
            train_steps=30,
            on_finish="auto",
            lease_seconds=2,
            placement={"regions": ["us-west1", "us-central1"]},
        )
    )
    compute = Compute(project, endpoint=compute_server.endpoint)
    compute.insert_template(template_body("job", spec, MachineOptions.from_spec(spec), script="#!/bin/bash\n"))
    compute.create_group("job", "job", zone=zone, size=1)
    storage = open_storage(spec.job_dir)
    holder = Lease(storage, Holder("job-central", "another-boot", "us-central1-a"), ttl=2).acquire()
    holder.start_renewing()  # the new group's VM, training
    group = compute_server.groups[(project, f"zones/{zone}", "job")]
    member = group["_members"][0]
    attributes = {i["key"]: i["value"] for i in compute_server.instances[member]["metadata"]["items"]}
    vm = LocalInstance(
        attributes,
        str(tmp_path / "vm"),
        name=member[2],
        zone=zone,
        project=project,
        python=sys.executable,
        env={"SURVIVOR_COMPUTE_ENDPOINT": compute_server.endpoint},
    )
    moved = threading.Timer(
        1.0,
        lambda: record_move(
            storage,
            Move(
                time=_dt.datetime.now(_dt.timezone.utc).isoformat(),
                from_place=f"zones/{zone}",
                to_place="regions/us-central1",
                reason="a stockout",
                by="watch",
            ),
        ),
    )
    try:
        vm.boot()
        vm.wait_for_message("job", timeout=60)
        moved.start()  # while the VM waits for the lease
        assert vm.wait(120) == 0, open(vm.log_path()).read()[-3000:]
    finally:
        moved.cancel()
        vm.close()
        holder.release()
    log = open(vm.log_path()).read()
    assert "leaving it without training" in log and "not training: another agent holds" not in log, log[-3000:]
    assert not (tmp_path / "steps.log").exists()
    # the records carried out: its group deleted with it (or left), never idle in the old group
    assert (project, f"zones/{zone}", "job") not in compute_server.groups or (
        group["targetSize"] == 0 and group["_members"] == []
    )
