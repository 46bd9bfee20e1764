"""A job whose first region runs out of capacity mid-job moves to its next
region, resumes from its last commit with nothing committed lost, and finishes DONE exactly once,
with one writer throughout. The simulator plays the watch (Cloud Scheduler + Cloud Run) every
0.3 s; its clock runs 60 times faster, so `move_after_minutes: 1` is a second here."""

import json

import pytest
import yaml

from survivor.policy import placement
from survivor.jobdir.journal import Journal
from survivor.jobdir.moves import moves
from survivor.jobdir.storage import open_storage
from survivor.local.simulator import Simulator
from survivor.spec import Placement
from tests.conftest import PYTHON


def spec_yaml(job_dir: str, steps_log: str) -> str:
    return yaml.safe_dump(
        {
            "job_dir": job_dir,
            "train_steps": 160,
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
                    steps_log,
                ]
            },
            "placement": {"regions": ["us-west1", "us-central1"], "move_after_minutes": 1},
        }
    )


@pytest.mark.slow
def test_a_job_whose_region_runs_out_moves_and_finishes_done_once(tmp_path):
    job_dir = str(tmp_path / "job")
    sim = Simulator(
        spec_yaml(job_dir, str(tmp_path / "steps.log")),
        str(tmp_path / "sim"),
        preempt_every=1e9,
        region_outages=(("us-west1", 0.5, float("inf")),),
        outages_from_first_commit=True,
        watch_every=0.3,
        speed=60.0,
        recreate_delay=0.2,
    )
    result = sim.run(timeout=240)
    table = result.table()
    assert result.done is not None and result.done["step"] == 160, table
    kinds = [e.kind for e in result.events]
    assert "stockout" in kinds and "move" in kinds, table
    [move] = moves(open_storage(job_dir))
    assert (move.from_place, move.to_place, move.by) == ("zones/us-west1-b", "regions/us-central1", "watch")
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in move.reason
    attempts = Journal(open_storage(job_dir)).attempts()
    before, after = attempts[0], attempts[-1]
    assert before.outcome == "preempted" and after.outcome == "finished", table
    assert after.restored_step == before.end_step and before.steps_lost == 0  # nothing committed was lost
    boots = [e for e in result.events if e.kind == "boot"]
    assert boots[-1].instance.startswith("sim-") and len(boots) == 2, table  # one VM per region
    zones = {local.zone for local in sim.vms.values()}
    assert zones == {"us-west1-b", next(z for z in zones if z.startswith("us-central1-"))}
    assert result.target_size == 0  # the finished VM left the new group
    # one writer throughout: the commits kept are the second VM's, all after the first's last, and
    # the lease names the second VM in its new zone
    storage = open_storage(job_dir)
    commits = [
        tuple(int(x) for x in info.name.rsplit("/", 1)[-1].split("-")[:2])
        for info in storage.list("survivor/snapshots/")
    ]
    assert commits and all(attempt == after.number and step > before.end_step for step, attempt in commits), commits
    lease = storage.read("survivor/LEASE")
    if lease is not None:
        holder = json.loads(lease.data)
        assert holder["instance"] == boots[-1].instance and holder["zone"].startswith("us-central1-"), holder
    steps = [int(s) for s in (tmp_path / "steps.log").read_text().split()]
    assert steps[-1] == 160 and sorted(set(steps)) == list(range(1, 161))


@pytest.mark.parametrize(
    "look, expected",
    [
        (
            placement.Look("zones/us-west1-b", idle_seconds=3000, capacity_errors=("ZONE_RESOURCE_POOL_EXHAUSTED",)),
            (True, "us-central1"),
        ),
        (
            placement.Look("zones/us-west1-b", idle_seconds=1700, capacity_errors=("ZONE_RESOURCE_POOL_EXHAUSTED",)),
            (False, None),
        ),  # not long enough yet
        (placement.Look("zones/us-west1-b", idle_seconds=9000), (False, None)),  # idle, but no capacity error
        (
            placement.Look("zones/us-west1-b", running=True, capacity_errors=("QUOTA_EXCEEDED",), idle_seconds=9000),
            (False, None),
        ),
        (
            placement.Look("regions/us-central1", idle_seconds=2000, capacity_errors=("QUOTA_EXCEEDED",)),
            (True, "us-east1"),
        ),
        (placement.Look("regions/us-east1", preemptions_last_hour=3), (True, "us-west1")),  # round the list
        (
            placement.Look("zones/us-west1-b", idle_seconds=2000, capacity_errors=("QUOTA_EXCEEDED",), pending=True),
            (False, None),
        ),  # a state-disk snapshot to wait for
        (
            placement.Look("zones/us-west1-b", idle_seconds=4000, capacity_errors=("QUOTA_EXCEEDED",), pending=True),
            (True, "us-central1"),
        ),  # waited twice the time: moves, the snapshot counted as lost
    ],
)
def test_the_move_decision_at_its_edges(look, expected):
    rule = Placement(("us-west1", "us-central1", "us-east1"), move_after_minutes=30, preemptions_per_hour=3)
    decision = placement.decide(rule, look)
    assert (decision.move, decision.to_region) == expected, decision.reason
    assert decision.lost_pending == (decision.move and look.pending)
    assert placement.decide(Placement(("us-west1",)), look).move is False  # nowhere else to go


@pytest.mark.parametrize(
    "moves_without_vm, minutes, moves",
    [
        (0, 1.5, True),
        (1, 1.5, True),  # the first round: one look's wait a place
        (2, 1.5, False),
        (2, 2.5, True),  # every other place tried: the wait doubles
        (4, 3.5, False),
        (4, 4.5, True),
        (6, 8.5, True),
        (6, 7.5, False),
        (40, 14.5, False),
        (40, 15.5, True),  # at most MAX_ROUND_WAIT_MINUTES
    ],
)
def test_the_wait_before_a_move_doubles_each_round_of_places_without_capacity(moves_without_vm, minutes, moves):
    # in a stockout of every region the job once walked its list every look (5.59 moves a job in
    # benchmarks/capacity.py, 102 in one 12 h job); a whole round found nothing, so the next waits longer
    rule = Placement(("us-west1", "us-central1", "us-east1"), move_after_minutes=1)
    look = placement.Look(
        "regions/us-central1",
        idle_seconds=minutes * 60,
        capacity_errors=("QUOTA_EXCEEDED",),
        moves_without_vm=moves_without_vm,
    )
    decision = placement.decide(rule, look)
    assert decision.move is moves, decision.reason
    if not moves and moves_without_vm >= 2:
        assert "the wait doubles" in decision.reason
    assert placement.MAX_ROUND_WAIT_MINUTES == 15.0
    # a wait longer than the cap is the user's and is kept
    assert placement.wait_minutes(Placement(("a1", "b1"), move_after_minutes=60), 10, 2) == 60


def test_moves_without_a_vm_are_the_moves_after_the_newest_attempt_began():
    from survivor.jobdir.journal import Attempt
    from survivor.jobdir.moves import Move

    def move(at: str) -> Move:
        return Move(
            time=f"2026-11-24T{at}:00+00:00", from_place="regions/a1", to_place="regions/b1", reason="", by="watch"
        )

    attempts = [Attempt(number=1, instance="vm", started="2026-11-24T10:00:00+00:00", outcome="preempted")]
    recorded = [move("09:00"), move("10:30"), move("10:31")]
    assert placement.moves_without_vm(attempts, recorded) == 2
    assert placement.moves_without_vm([], recorded) == 3  # never had a VM: every move found nothing
    recorded.append(Move(time="not a time", from_place="regions/a1", to_place="regions/b1", reason="", by="watch"))
    assert placement.moves_without_vm(attempts, recorded) == 3  # an unreadable time counts: the later one


def test_a_damaged_move_record_is_skipped_with_a_warning(tmp_path, caplog):
    storage = open_storage(str(tmp_path))
    storage.write("survivor/moves/20261124T000000.json", b"{not json")
    storage.write(
        "survivor/moves/20261124T000001.json",
        json.dumps(
            {"time": "2026-11-24T00:00:01+00:00", "from_place": "zones/us-west1-b", "to_place": "regions/../etc"}
        ).encode(),
    )
    assert moves(storage) == []
    assert "ignoring an unreadable move record survivor/moves/20261124T000000.json" in caplog.text


def test_status_and_report_show_a_move(tmp_path, capsys):
    from survivor.commands.main import main
    from survivor.jobdir.moves import Move, record_move

    job_dir = str(tmp_path / "job")
    storage = open_storage(job_dir)
    storage.write("survivor/attempts/000001.json", b"{}")  # a damaged record beside: still one line each
    record_move(
        storage,
        Move(
            time="2026-11-24T10:00:00+00:00",
            from_place="zones/us-west1-b",
            to_place="regions/us-central1",
            reason="no training VM in us-west1 for 31 min with ZONE_RESOURCE_POOL_EXHAUSTED",
            by="watch",
        ),
    )
    assert main(["status", "--job-dir", job_dir]) == 0
    out = capsys.readouterr().out
    assert (
        "moved 2026-11-24T10:00:00 from zones/us-west1-b to regions/us-central1 (watch): no training VM in "
        "us-west1 for 31 min"
    ) in " ".join(out.split())
    assert main(["report", "--job-dir", job_dir, "--out", str(tmp_path / "out"), "--offline"]) == 0
    capsys.readouterr()
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| 2026-11-24 10:00:00 | zones/us-west1-b -> regions/us-central1 | no training VM in us-west1" in md
    assert main(["report", "--job-dir", job_dir, "--out", str(tmp_path / "out2"), "--offline", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["moves"][0]["to_place"] == "regions/us-central1"


def test_survivor_watch_moves_a_stocked_out_job_and_finds_it_after(compute_server, tmp_path, capsys, monkeypatch):
    """The deployed watch's look: no VM for longer than move_after_minutes with a stockout listed, so
    the group moves; the next look, given the job dir, finds the group in its new region."""
    import datetime as _dt

    from survivor.cloud.compute import Compute, GroupRef
    from survivor.commands.main import main

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "survivor-local")
    job_dir = str(tmp_path / "job")
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"job_dir: {job_dir}\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n"
        "placement: {regions: [us-west1, us-central1], move_after_minutes: 30}\n"
    )
    assert main(["make-template", "job", "--config", str(spec)]) == 0
    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", zone="us-west1-b")
    compute_server.fail("compute.advice.capacity", http=403, times=10**6)  # no capacity data: the rule without it
    assert main(["make-group", "job", "--template", "job", "--zone", "us-west1-b", "--wait-seconds", "0"]) == 0
    capsys.readouterr()
    assert main(["watch", "job", "--zone", "us-west1-b", "--job-dir", job_dir]) == 0
    assert (
        "job job in zones/us-west1-b: stay: no training VM for 0 min; capacity errors for 0 of 30 min"
        in capsys.readouterr().out
    )
    group = compute_server.groups[("survivor-local", "zones/us-west1-b", "job")]
    group["creationTimestamp"] = (_dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(minutes=45)).isoformat()
    for error in group["_errors"]:
        error["timestamp"] = (_dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(minutes=40)).isoformat()
    assert main(["watch", "job", "--zone", "us-west1-b", "--job-dir", job_dir]) == 0
    out = capsys.readouterr().out
    assert "job job: moved from zones/us-west1-b to regions/us-central1" in out, out
    compute = Compute("survivor-local")
    assert compute.get_group(GroupRef("survivor-local", "job", zone="us-west1-b")) is None
    [vm] = compute.managed_instances(GroupRef("survivor-local", "job", region="us-central1"))
    assert vm["status"] == "RUNNING" and vm["zone"].startswith("us-central1-")
    # the old address, with the job dir, finds the moved group
    assert main(["watch", "job", "--zone", "us-west1-b", "--job-dir", job_dir]) == 0
    assert "no deadline in its spec" in capsys.readouterr().out
    # without it, the one line says how to find a moved job
    assert main(["watch", "job", "--zone", "us-west1-b"]) != 0
    err = capsys.readouterr().err
    assert "group job: not found in zone us-west1-b" in err and "give --job-dir" in err, err


def test_a_region_that_cannot_take_the_group_is_passed_over_and_named(compute_server, tmp_path, capsys, monkeypatch):
    """The next region offers no zone with the template's GPU (the fake's asia-south9): the move goes
    on to the one after it and says why it passed one over; no record points at a group that is not."""
    import datetime as _dt

    from survivor.cloud.compute import Compute, GroupRef
    from survivor.commands.main import main

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "survivor-local")
    job_dir = str(tmp_path / "job")
    (tmp_path / "job.yaml").write_text(
        f"job_dir: {job_dir}\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n"
        "placement: {regions: [us-west1, asia-south9, us-central1]}\n"
    )
    assert main(["make-template", "job", "--config", str(tmp_path / "job.yaml")]) == 0
    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", zone="us-west1-b")
    compute_server.fail("compute.advice.capacity", http=403, times=10**6)  # no capacity data: the rule without it
    assert main(["make-group", "job", "--template", "job", "--zone", "us-west1-b", "--wait-seconds", "0"]) == 0
    group = compute_server.groups[("survivor-local", "zones/us-west1-b", "job")]
    group["creationTimestamp"] = (_dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(minutes=45)).isoformat()
    Compute("survivor-local").managed_instances(GroupRef("survivor-local", "job", zone="us-west1-b"))
    for error in group["_errors"]:
        error["timestamp"] = (_dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(minutes=40)).isoformat()
    capsys.readouterr()
    assert main(["watch", "job", "--zone", "us-west1-b", "--job-dir", job_dir]) == 0
    assert "moved from zones/us-west1-b to regions/us-central1" in capsys.readouterr().out
    [move] = moves(open_storage(job_dir))
    assert move.to_place == "regions/us-central1" and "asia-south9: " in move.reason
    assert ("survivor-local", "regions/asia-south9", "job") not in compute_server.groups


def test_with_capacity_data_the_watch_moves_a_stocked_out_job_at_once_and_says_why(
    compute_server, tmp_path, capsys, monkeypatch
):
    """No timer: Compute Engine's capacity data says the group's zone has none and the next region has
    some, so the first look moves the job (survivor/policy/move_bet.py), naming the figures."""
    from survivor.commands.main import main

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "survivor-local")
    job_dir = str(tmp_path / "job")
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"job_dir: {job_dir}\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n"
        "placement: {regions: [us-west1, us-central1], move_after_minutes: 30}\n"
    )
    assert main(["make-template", "job", "--config", str(spec)]) == 0
    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", zone="us-west1-b")
    assert main(["make-group", "job", "--template", "job", "--zone", "us-west1-b", "--wait-seconds", "0"]) == 0
    capsys.readouterr()
    assert main(["watch", "job", "--zone", "us-west1-b", "--job-dir", job_dir]) == 0
    out = capsys.readouterr().out
    assert "moved from zones/us-west1-b to regions/us-central1" in out, out
    [move] = moves(open_storage(job_dir))
    assert "capacity data: moving to us-central1: obtainability 1.00" in move.reason


def test_with_capacity_data_saying_no_region_has_capacity_the_job_does_not_move(
    compute_server, tmp_path, capsys, monkeypatch
):
    from survivor.commands.main import main

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "survivor-local")
    job_dir = str(tmp_path / "job")
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"job_dir: {job_dir}\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\n"
        "placement: {regions: [us-west1, us-central1], move_after_minutes: 1}\n"
    )
    assert main(["make-template", "job", "--config", str(spec)]) == 0
    compute_server.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED")  # every zone
    assert main(["make-group", "job", "--template", "job", "--zone", "us-west1-b", "--wait-seconds", "0"]) == 0
    for _ in range(3):
        assert main(["watch", "job", "--zone", "us-west1-b", "--job-dir", job_dir]) == 0
    assert "does not pay" in capsys.readouterr().out and not moves(open_storage(job_dir))
