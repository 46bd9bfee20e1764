"""A job's state disks (`state_disk_gb`, `autoDelete: NEVER`) outlive its VMs, and
Google bills them until they are deleted. The template labels them with the job; `survivor delete`,
the watch after the finish and a move across regions delete those no pending snapshot needs (and say
why they keep one), and `status` and `report` list what is left with what it costs a month. Real
clients against the Compute fake, which keeps such disks when their VM goes, as Compute Engine does."""

import json

import pytest

from survivor.cloud.compute import Compute, ComputeError, GroupRef
from survivor.cloud.template import STATE_DISK_LABEL
from survivor.commands import main as cli
from survivor.jobdir.disk_tier import PendingFile, PendingSnapshot, pending_name
from survivor.jobdir.journal import Journal
from survivor.jobdir.moves import Move, record_move
from survivor.jobdir.storage import open_storage
from survivor.mig import state_disks
from survivor.operator.watch import watch_once

PROJECT = "survivor-local"
ZONE = "us-west1-b"
GROUP = GroupRef(PROJECT, "g", zone=ZONE)


def _job(tmp_path, capsys, name: str = "g", zone: str = ZONE) -> Compute:
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(
        f"name: {name}\njob_dir: {tmp_path}/j\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\nstate_disk_gb: 50\n"
    )
    assert cli.main(["make-template", name, "--config", str(spec_file), "--project", PROJECT]) == 0
    assert (
        cli.main(
            [
                "make-group",
                name,
                "--template",
                name,
                "--zone",
                zone,
                "--project",
                PROJECT,
                "--wait-seconds",
                "5",
                "--poll-seconds",
                "0.1",
            ]
        )
        == 0
    ), capsys.readouterr().err
    capsys.readouterr()
    return Compute(PROJECT)


def _pending(tmp_path, zone: str = ZONE, step: int = 9) -> None:
    record = PendingSnapshot(step, 1, "g-abcd", zone, (PendingFile("ckpt-9.json", 10, "AAAAAA=="),), "2026-11-01")
    open_storage(str(tmp_path / "j")).write(pending_name("g-abcd"), record.to_json())


def test_the_state_disk_carries_the_jobs_label_and_outlives_its_vm(compute_server, capsys, tmp_path):
    compute = _job(tmp_path, capsys)
    params = (compute.get_template("g") or {})["properties"]["disks"][1]["initializeParams"]
    assert params["labels"] == {STATE_DISK_LABEL: "g"}
    [disk] = compute.labelled_disks(STATE_DISK_LABEL, "g")
    assert (disk["zone"], disk["size_gb"], disk["disk_type"]) == (ZONE, 50, "pd-balanced") and disk["users"]
    assert compute.labelled_disks(STATE_DISK_LABEL, "another-job") == []
    [vm] = compute.managed_instances(GROUP)
    compute.leave_group(GROUP, vm["zone"], vm["name"])  # the finish: the VM leaves its group
    [disk] = compute.labelled_disks(STATE_DISK_LABEL, "g")
    assert disk["users"] == []  # detached, kept, billed


def test_the_fake_refuses_to_delete_a_disk_a_vm_still_uses(compute_server, capsys, tmp_path):
    compute = _job(tmp_path, capsys)
    [disk] = compute.labelled_disks(STATE_DISK_LABEL, "g")
    with pytest.raises(ComputeError, match="is already being used by"):
        compute.delete_disk(disk["zone"], disk["name"])
    assert state_disks.clean(compute, "g", open_storage(str(tmp_path / "j")))[0][1].startswith("attached to VM")


def test_delete_deletes_the_state_disk_once_nothing_waits_on_it(compute_server, capsys, tmp_path):
    _job(tmp_path, capsys)
    assert cli.main(["delete", "g", "--zone", ZONE, "--project", PROJECT]) == 0
    out = capsys.readouterr().out
    assert "state disk g-" in out and "deleted (50 GB pd-balanced, $5.00 a month)" in out
    assert compute_server.disks == {}


def test_delete_keeps_a_state_disk_a_pending_snapshot_needs_and_status_and_report_show_its_cost(
    compute_server, capsys, tmp_path
):
    _job(tmp_path, capsys)
    _pending(tmp_path)
    assert cli.main(["delete", "g", "--zone", ZONE, "--project", PROJECT]) == 0
    out = capsys.readouterr().out
    assert "kept, 50 GB pd-balanced, $5.00 a month: step 9 waits on it (survivor/pending/g-abcd.json)" in out
    assert len(compute_server.disks) == 1
    # the group is gone: status still finds the disk by the job's name, with its cost
    assert cli.main(["status", "g", "--zone", ZONE, "--project", PROJECT, "--job-dir", str(tmp_path / "j")]) == 0
    out = capsys.readouterr().out
    assert "state disk g-" in out and "$5.00 a month: step 9 waits on it" in out
    assert "state disks left: $5.00 a month" in out
    assert (
        cli.main(["status", "g", "--zone", ZONE, "--project", PROJECT, "--job-dir", str(tmp_path / "j"), "--json"]) == 0
    )
    [disk] = json.loads(capsys.readouterr().out)["state_disks"]
    assert (disk["monthly_usd"], disk["size_gb"], disk["attached_to"]) == (5.0, 50, [])
    assert (
        cli.main(
            [
                "report",
                "g",
                "--zone",
                ZONE,
                "--project",
                PROJECT,
                "--job-dir",
                str(tmp_path / "j"),
                "--offline",
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "## State disks left" in out and "$5.00 a month" in out
    assert "## State disks left" in (tmp_path / "r" / "report.md").read_text()


def test_the_watch_deletes_a_finished_jobs_state_disk(compute_server, capsys, tmp_path):
    compute = _job(tmp_path, capsys)
    Journal(open_storage(str(tmp_path / "j"))).mark_done({"step": 100})
    [vm] = compute.managed_instances(GROUP)
    compute.leave_group(GROUP, vm["zone"], vm["name"])
    lines: list[str] = []
    over = watch_once(compute, GROUP, say=lines.append)
    assert over.state == "DONE" and not over.waiting
    assert any("deleted (50 GB pd-balanced" in line for line in lines), lines
    assert compute_server.disks == {}


def test_the_watch_comes_back_while_a_finished_jobs_state_disk_is_attached(compute_server, capsys, tmp_path):
    compute = _job(tmp_path, capsys)
    Journal(open_storage(str(tmp_path / "j"))).mark_done({"step": 100})
    over = watch_once(compute, GROUP)  # the VM has not left its group yet
    assert over.state == "DONE" and "still attached" in over.waiting
    assert len(compute_server.disks) == 1


@pytest.mark.parametrize("waits", [False, True])
def test_a_move_deletes_the_state_disk_of_the_region_it_left_unless_a_snapshot_waits_on_it(
    compute_server, capsys, tmp_path, waits
):
    compute = Compute(PROJECT)
    compute_server.add_disk(PROJECT, ZONE, "g-abcd-survivor-state", size_gb=50, labels={STATE_DISK_LABEL: "g"})
    compute_server.add_disk(PROJECT, "us-east1-b", "g-efgh-survivor-state", size_gb=50, labels={STATE_DISK_LABEL: "g"})
    compute_server.add_disk(PROJECT, ZONE, "other-job-disk", size_gb=50, labels={STATE_DISK_LABEL: "other"})
    storage = open_storage(str(tmp_path / "j"))
    record_move(
        storage,
        Move(
            time="2026-11-01T00:00:00+00:00",
            from_place=f"zones/{ZONE}",
            to_place="regions/us-east1",
            reason="a stockout",
            by="watch",
        ),
    )
    if waits:
        _pending(tmp_path)
    lines: list[str] = []
    state_disks.clean_after_moves(compute, "g", storage, ["us-west1", "us-east1"], say=lines.append)
    left = sorted(name for _, _, name in compute_server.disks)
    if waits:
        assert left == ["g-abcd-survivor-state", "g-efgh-survivor-state", "other-job-disk"]
        assert any("kept" in line and "step 9 waits on it" in line for line in lines), lines
    else:
        assert left == ["g-efgh-survivor-state", "other-job-disk"]  # the region it is in now keeps its disk
        assert any("g-abcd-survivor-state (us-west1-b): deleted" in line for line in lines), lines


def test_a_disk_price_comes_from_the_table_with_its_basis():
    disk = state_disks.StateDisk("d", ZONE, 200, "pd-ssd")
    assert disk.monthly_usd == 34.0  # Google's own example: 200 GB of SSD PD, $34.00 a month
    assert state_disks.StateDisk("d", ZONE, 200, "hyperdisk-x").monthly_usd is None
    assert state_disks.total_monthly([disk, state_disks.StateDisk("e", ZONE, 100, "pd-balanced")]) == 44.0
