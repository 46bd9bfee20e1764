"""The local tier: a job with `state_disk_gb` gets a disk its group keeps across the VM's
recreation; a commit too large for the notice goes to that disk, and the next boot of the same
instance commits it before it restores. A copy that does not verify, or a record naming another
instance, is ignored with a warning, and the previous committed snapshot restores."""

import json
import os
import shlex
import stat
import subprocess
import time

import pytest

from survivor.agent.mirror import Mirror
from survivor.cloud.compute import Compute, ComputeError, GroupRef
from survivor.mig.make import stateful_policy
from survivor.cloud.template import STATE_DISK_DEVICE, MachineOptions, template_body
from survivor.commands import main as cli
from survivor.jobdir.disk_tier import (
    MARKER,
    PENDING,
    RATE_ENV,
    STATE_DISK_DIR,
    DiskTier,
    PendingFile,
    PendingSnapshot,
    fits,
    pending_name,
)
from survivor.jobdir.journal import Journal
from survivor.jobdir.status import job_summary, read_job
from survivor.jobdir.storage import crc32c_of_bytes, open_storage
from survivor.jobdir.store import CheckpointStore, ManifestError
from survivor.spec import JobSpec, SpecError
from tests.conftest import dummy_spec, executed_steps

PROJECT = "survivor-local"
ZONE = "us-west1-b"


def _spec(tmp_path, **fields) -> JobSpec:
    return JobSpec.from_mapping(
        {"job_dir": str(tmp_path / "j"), "train_steps": 10, "trainer": {"builtin": "dummy"}, **fields}
    )


# -- the template and the group -------------------------------------------------------------------


def test_a_state_disk_job_gets_a_kept_disk_and_a_stateful_group_through_the_real_client(
    compute_server, capsys, tmp_path
):
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(f"job_dir: {tmp_path}/j\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\nstate_disk_gb: 50\n")
    assert cli.main(["make-template", "t", "--config", str(spec_file), "--project", PROJECT]) == 0
    assert (
        cli.main(
            [
                "make-group",
                "g",
                "--template",
                "t",
                "--zone",
                ZONE,
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
    compute = Compute(PROJECT)
    disks = compute.get_template("t")["properties"]["disks"]
    assert len(disks) == 2 and disks[0]["boot"] is True
    assert disks[1]["deviceName"] == STATE_DISK_DEVICE and disks[1]["autoDelete"] is False
    assert disks[1]["initializeParams"]["diskSizeGb"] == "50"
    group = compute.get_group(GroupRef(PROJECT, "g", zone=ZONE))
    assert group["statefulPolicy"]["preservedState"]["disks"] == {STATE_DISK_DEVICE: {"autoDelete": "NEVER"}}
    [sent] = [body for method, _, body in compute_server.requests if method == "compute.instanceGroupManagers.insert"]
    assert sent["statefulPolicy"] == {"preservedState": {"disks": {STATE_DISK_DEVICE: {"autoDelete": "NEVER"}}}}


def test_a_regional_group_with_a_state_disk_does_not_redistribute_and_the_fake_refuses_one_that_would(
    compute_server, capsys, tmp_path
):
    """make-group sent no updatePolicy, so the API's default PROACTIVE
    redistribution made it refuse a stateful regional group."""
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(f"job_dir: {tmp_path}/j\ntrain_steps: 100\ntrainer: {{builtin: dummy}}\nstate_disk_gb: 50\n")
    assert cli.main(["make-template", "t", "--config", str(spec_file), "--project", PROJECT]) == 0
    assert (
        cli.main(
            [
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
            ]
        )
        == 0
    ), capsys.readouterr().err
    [sent] = [
        body for method, _, body in compute_server.requests if method == "compute.regionInstanceGroupManagers.insert"
    ]
    assert sent["updatePolicy"] == {"instanceRedistributionType": "NONE"} and sent["statefulPolicy"]
    compute = Compute(PROJECT)
    body = {**sent, "name": "h", "baseInstanceName": "h"}
    del body["updatePolicy"]
    from google.api_core.exceptions import BadRequest

    with pytest.raises(BadRequest, match="Stateful regional IGMs cannot use proactive instance redistribution"):
        compute.region_groups.insert(
            project=PROJECT,
            region="us-west1",
            instance_group_manager_resource=(
                compute.v1.InstanceGroupManager.from_json(json.dumps(body), ignore_unknown_fields=True)
            ),
        )


def test_a_job_without_a_state_disk_has_one_disk_and_a_stateless_group(tmp_path):
    body = template_body("t", _spec(tmp_path), MachineOptions(gpu_type=None, gpu_count=0))
    assert len(body["properties"]["disks"]) == 1
    assert stateful_policy(body) is None


def test_the_fake_refuses_a_stateful_disk_the_template_does_not_have(compute_server, tmp_path):
    compute = Compute(PROJECT)
    compute.insert_template(template_body("t", _spec(tmp_path), MachineOptions(gpu_type=None, gpu_count=0)))
    with pytest.raises(ComputeError, match="survivor-state"):
        compute.create_group(
            "g", "t", zone=ZONE, stateful={"preservedState": {"disks": {STATE_DISK_DEVICE: {"autoDelete": "NEVER"}}}}
        )


def test_a_state_disk_needs_spot_vms_that_stop(tmp_path):
    with pytest.raises(SpecError, match="state_disk_gb 20: needs termination_action STOP, not DELETE"):
        template_body(
            "t",
            _spec(tmp_path, state_disk_gb=20),
            MachineOptions(gpu_type=None, gpu_count=0, termination_action="DELETE"),
        )


@pytest.mark.parametrize("value", [5, "big", True, 10**6])
def test_state_disk_gb_is_a_whole_number_of_gb_a_persistent_disk_can_hold(tmp_path, value):
    with pytest.raises(SpecError) as caught:
        _spec(tmp_path, state_disk_gb=value)
    [line] = caught.value.problems
    assert line.startswith(f"state_disk_gb = {value!r}: expected a whole number")


# -- the record -----------------------------------------------------------------------------------


def _record(**changes) -> PendingSnapshot:
    fields = dict(
        step=7,
        attempt=2,
        instance="vm-1",
        zone=ZONE,
        files=(PendingFile("ckpt-7.data", 3, crc32c_of_bytes(b"abc")),),
        created="now",
    )
    fields.update(changes)
    return PendingSnapshot(**fields)


def test_a_pending_record_round_trips_and_says_its_tier():
    record = _record()
    raw = json.loads(record.to_json())
    assert raw["tier"] == "disk" and raw["instance"] == "vm-1" and raw["disk"] == STATE_DISK_DEVICE
    assert PendingSnapshot.from_json(record.to_json()) == record


@pytest.mark.parametrize(
    "change",
    [
        {"tier": "gcs"},
        {"extra": 1},
        {"step": -1},
        {"step": True},
        {"files": []},
        {"files": [{"path": "../x", "size": 1, "crc32c": "AAAAAA=="}]},
        {"files": [{"path": "x", "size": 1, "crc32c": "AAAAAA==", "object": "y"}]},
        {"files": [{"path": 3, "size": 1, "crc32c": "AAAAAA=="}]},
    ],
)
def test_a_pending_record_is_parsed_strictly(change):
    raw = json.loads(_record().to_json())
    raw.update(change)
    with pytest.raises(ManifestError):
        PendingSnapshot.from_json(json.dumps(raw).encode())


def test_fits_compares_the_bytes_to_send_with_the_time_left():
    assert fits(0, 1.0, 0.0)
    assert fits(100, 10.0, 10.0) and not fits(101, 10.0, 10.0)
    assert not fits(1, 1e9, -1.0)


# -- the mirror after a notice --------------------------------------------------------------------


def _checkpoint(local, step: int, size: int = 4096) -> None:
    """Writes a checkpoint as the trainer contract says (a temporary name, then a rename): the mirror
    is already polling, and a file opened in place can be seen empty."""
    os.makedirs(local, exist_ok=True)
    final = os.path.join(local, f"dummy-checkpoint-{step}.json")
    with open(final + ".tmp", "w") as f:
        f.write(json.dumps({"step": step, "pad": "x" * size}))
    os.replace(final + ".tmp", final)


def _noticed_save(tmp_path, max_step: int, mounted: bool):
    """A mirror with a state disk (marked as mounted, or not) that saves step 9 after a notice with 5 s
    left, then syncs as the agent's exit does: (storage, store, disk_root, mirror)."""
    local, disk_root = str(tmp_path / "job"), str(tmp_path / "disk")
    os.makedirs(disk_root)
    if mounted:
        open(os.path.join(disk_root, MARKER), "w").close()
    storage = open_storage(str(tmp_path / "jobdir"))
    store = CheckpointStore(storage, max_step=max_step)
    mirror = Mirror(
        store,
        storage,
        local,
        attempt=1,
        interval=3600,
        committed_step=None,
        on_commit=lambda s: None,
        disk=DiskTier(disk_root, storage, "vm-1", ZONE),
    ).start()
    mirror.after_notice(deadline=time.monotonic() + 5)
    _checkpoint(local, 9)
    mirror.final_sync()
    return storage, store, disk_root, mirror


@pytest.mark.parametrize("mounted", [True, False])
def test_a_commit_that_cannot_finish_in_time_goes_to_a_mounted_state_disk(tmp_path, monkeypatch, mounted):
    """Only a disk with startup.sh's marker is used: an unmounted mount point is on the boot disk."""
    monkeypatch.setenv(RATE_ENV, "1")  # one byte a second: nothing fits
    storage, store, disk_root, mirror = _noticed_save(tmp_path, max_step=100, mounted=mounted)
    assert mirror.committed_step == 9
    if mounted:
        assert store.latest() is None  # nothing in Cloud Storage yet
        record = PendingSnapshot.from_json(storage.read(pending_name("vm-1")).data)
        assert (record.step, record.instance, record.zone) == (9, "vm-1", ZONE)
        assert os.path.isfile(os.path.join(disk_root, "snapshots", "9-1", "dummy-checkpoint-9.json"))
    else:
        assert store.latest().step == 9 and storage.list(PENDING) == []


def test_the_jobs_final_step_always_goes_to_cloud_storage(tmp_path, monkeypatch):
    monkeypatch.setenv(RATE_ENV, "1")
    storage, store, _, mirror = _noticed_save(tmp_path, max_step=9, mounted=True)
    assert store.latest().step == 9 and storage.list(PENDING) == []


# -- the next boot --------------------------------------------------------------------------------


def _saved(tmp_path, instance="vm-1"):
    """A job dir with step 4 committed and step 9 saved on vm-1's state disk."""
    local, disk_root = str(tmp_path / "job"), str(tmp_path / "disk")
    os.makedirs(disk_root, exist_ok=True)
    open(os.path.join(disk_root, MARKER), "w").close()
    storage = open_storage(str(tmp_path / "jobdir"))
    store = CheckpointStore(storage)
    _checkpoint(local, 4)
    from survivor.jobdir.snapshot import scan

    store.commit(local, scan(local), attempt=1)
    _checkpoint(local, 9)
    os.remove(os.path.join(local, "dummy-checkpoint-4.json"))
    DiskTier(disk_root, storage, instance, ZONE).save(local, scan(local), attempt=1)
    return storage, disk_root


def test_the_next_boot_commits_the_disks_snapshot_before_it_restores(tmp_path):
    storage, disk_root = _saved(tmp_path)
    store = CheckpointStore(storage)
    assert DiskTier(disk_root, storage, "vm-1", ZONE).recover(store, attempt=2) == 9
    assert storage.list(PENDING) == [] and os.listdir(os.path.join(disk_root, "snapshots")) == []
    restored = CheckpointStore(storage).restore(str(tmp_path / "restored"))
    assert restored.step == 9 and restored.attempt == 2


def test_a_copy_whose_record_was_never_written_is_not_followed_and_the_next_save_clears_it(tmp_path):
    """The VM gone between the disk copy and its record (here: the record's write fails, a file where
    the job dir's pending folder should be) leaves the same state as a kill there: a copy on the disk
    that nothing names. The next boot restores the previous commit; the next save leaves one copy."""
    from survivor.jobdir.snapshot import scan
    from survivor.jobdir.storage import StorageError

    storage, disk_root = _saved(tmp_path)  # step 4 committed; step 9 on the disk, which the next boot commits
    assert DiskTier(disk_root, storage, "vm-1", ZONE).recover(CheckpointStore(storage), attempt=2) == 9
    local, pending_dir = str(tmp_path / "job"), os.path.join(str(tmp_path / "jobdir"), PENDING.rstrip("/"))
    os.rmdir(pending_dir)
    open(pending_dir, "w").close()
    _checkpoint(local, 12)
    with pytest.raises(StorageError):
        DiskTier(disk_root, storage, "vm-1", ZONE).save(local, scan(local), attempt=2)
    assert os.listdir(os.path.join(disk_root, "snapshots")) == ["12-2"]  # copied, never recorded
    os.remove(pending_dir)  # the job dir is well again; the VM went before the record was written
    assert DiskTier(disk_root, storage, "vm-1", ZONE).recover(CheckpointStore(storage), attempt=3) is None
    assert CheckpointStore(storage).restore(str(tmp_path / "restored")).step == 9
    _checkpoint(local, 15)
    DiskTier(disk_root, storage, "vm-1", ZONE).save(local, scan(local), attempt=3)
    assert os.listdir(os.path.join(disk_root, "snapshots")) == ["15-3"]


def test_status_shows_a_snapshot_waiting_on_a_state_disk_until_its_boot_commits_it(tmp_path, capsys, caplog):
    storage, disk_root = _saved(tmp_path)
    storage.write(PENDING + "vm-bad.json", b"{not json")
    summary = job_summary(read_job(str(tmp_path / "jobdir")))
    assert summary["committed_step"] == 4
    [pending] = summary["pending"]
    assert (pending["step"], pending["instance"], pending["zone"]) == (9, "vm-1", ZONE) and pending["bytes"] > 4096
    assert any(PENDING + "vm-bad.json" in r.getMessage() for r in caplog.records)
    assert cli.main(["status", "--job-dir", str(tmp_path / "jobdir")]) == 0
    assert "step 9 waits on the state disk of vm-1 (us-west1-b)" in capsys.readouterr().out
    assert (
        DiskTier(disk_root, storage, "vm-1", ZONE).recover(CheckpointStore(storage), attempt=2) == 9
    )  # beside a bad one
    assert job_summary(read_job(str(tmp_path / "jobdir")))["pending"] == []


def test_a_damaged_copy_is_ignored_with_a_warning_and_the_previous_commit_restores(tmp_path, caplog):
    storage, disk_root = _saved(tmp_path)
    path = os.path.join(disk_root, "snapshots", "9-1", "dummy-checkpoint-9.json")
    data = bytearray(open(path, "rb").read())
    data[20] ^= 1
    open(path, "wb").write(bytes(data))
    store = CheckpointStore(storage)
    assert DiskTier(disk_root, storage, "vm-1", ZONE).recover(store, attempt=2) is None
    [warning] = [r for r in caplog.records if "does not verify" in r.getMessage()]
    assert pending_name("vm-1") in str(warning.__dict__)
    assert CheckpointStore(storage).restore(str(tmp_path / "restored")).step == 4


def test_a_record_naming_another_instance_is_ignored_and_kept_for_it(tmp_path, caplog):
    storage, disk_root = _saved(tmp_path, instance="vm-other")
    store = CheckpointStore(storage)
    assert DiskTier(disk_root, storage, "vm-1", ZONE).recover(store, attempt=2) is None
    assert any("another instance" in r.getMessage() for r in caplog.records)
    assert [o.name for o in storage.list(PENDING)] == [pending_name("vm-other")]
    assert CheckpointStore(storage).restore(str(tmp_path / "restored")).step == 4


def test_a_record_waits_while_this_instances_state_disk_is_not_mounted(tmp_path, monkeypatch, caplog):
    import survivor.jobdir.disk_tier as disk_tier

    monkeypatch.setattr(disk_tier, "MOUNT_WAIT_SECONDS", 0.0)
    storage, disk_root = _saved(tmp_path)
    os.remove(os.path.join(disk_root, MARKER))
    assert DiskTier(disk_root, storage, "vm-1", ZONE).recover(CheckpointStore(storage), attempt=2) is None
    assert any("not mounted" in r.getMessage() for r in caplog.records)
    assert [o.name for o in storage.list(PENDING)] == [pending_name("vm-1")]  # kept for a boot that mounts it


def test_startup_sh_mounts_the_disk_where_the_agent_looks_and_marks_it_as_the_agent_expects():
    from survivor.cloud.template import startup_script
    from survivor.jobdir.disk_tier import STATE_DISK_DIR

    script = startup_script()
    assert f'STATE_DIR="${{ROOT}}{STATE_DISK_DIR}"' in script and f'"${{STATE_DIR}}/{MARKER}"' in script
    assert f"google-{STATE_DISK_DEVICE}" in script


# -- end to end: a LocalInstance with a state disk -------------------------------------------------


#: the jobs below wait for step 23, then give a notice: the steps after it (3 s at 0.03 s a step)
#: must outlast a loaded machine's delay between the test's wait and the agent's SIGTERM, or the job
#: finishes before its notice
STEPS = 120


def _journal(job_dir):
    return Journal(open_storage(job_dir)).state()


def test_preempted_with_too_little_time_the_state_disk_keeps_the_checkpoint_and_the_next_boot_loses_no_step(
    job_dir, tmp_path, instance_factory
):
    spec = dummy_spec(job_dir, tmp_path, train_steps=STEPS, checkpoint_steps=5, state_disk_gb=10)
    vm = instance_factory(spec, state_disk=True, env={RATE_ENV: "1"})
    vm.boot()
    vm.wait_for_step(23)
    vm.set_preempted()
    assert vm.wait(30) == 0, f"see {vm.log_path()}"
    first = _journal(job_dir).attempts[-1]
    assert first.outcome == "preempted" and first.steps_lost == 0
    record = PendingSnapshot.from_json(open_storage(job_dir).read(pending_name(vm.name)).data)
    assert record.step == first.end_step == first.reached_step
    assert CheckpointStore(open_storage(job_dir)).latest().step < record.step  # not in Cloud Storage yet

    vm.boot(wipe=True)  # the group recreates the VM: a new boot disk, the same state disk
    assert vm.wait(120) == 0, f"see {vm.log_path()}"
    state = _journal(job_dir)
    second = state.attempts[-1]
    assert second.restored_step == record.step and state.done["step"] == STEPS
    assert any(line.get("message") == "committed the state disk's snapshot" for line in vm.log_lines())
    assert open_storage(job_dir).list(PENDING) == []
    steps = executed_steps(tmp_path)
    assert len(steps) == STEPS and steps[-1] == STEPS  # every step run once: none lost


def test_a_damaged_state_disk_copy_is_ignored_and_the_previous_commit_restores(tmp_path, instance_factory):
    job_dir = str(tmp_path / "jobdir")
    spec = dummy_spec(job_dir, tmp_path, train_steps=STEPS, checkpoint_steps=5, state_disk_gb=10)
    vm = instance_factory(spec, state_disk=True, env={RATE_ENV: "1"})
    vm.boot()
    vm.wait_for_step(23)
    vm.set_preempted()
    assert vm.wait(30) == 0, f"see {vm.log_path()}"
    record = PendingSnapshot.from_json(open_storage(job_dir).read(pending_name(vm.name)).data)
    previous = CheckpointStore(open_storage(job_dir)).latest().step
    folder = os.path.join(vm.state_disk, "snapshots", record.dirname)
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "r+b") as f:
            f.write(b"#")

    vm.boot(wipe=True)
    assert vm.wait(120) == 0, f"see {vm.log_path()}"
    assert _journal(job_dir).attempts[-1].restored_step == previous
    warnings = [line for line in vm.log_lines() if "does not verify" in line.get("message", "")]
    assert len(warnings) == 1 and pending_name(vm.name) in json.dumps(warnings[0])


# -- the state disk under a hostile trainer or a damaged job dir -------------------------


def _preempted_with_a_pending_snapshot(tmp_path, instance_factory, **fields):
    """A VM preempted with too little time: its last checkpoint waits on its state disk. Returns
    (vm, job_dir, record, the step committed in the job dir before it)."""
    job_dir = str(tmp_path / "jobdir")
    spec = dummy_spec(job_dir, tmp_path, train_steps=STEPS, checkpoint_steps=5, state_disk_gb=10, **fields)
    vm = instance_factory(spec, state_disk=True, env={RATE_ENV: "1"})
    vm.boot()
    vm.wait_for_step(23)
    vm.set_preempted()
    assert vm.wait(30) == 0, f"see {vm.log_path()}"
    record = PendingSnapshot.from_json(open_storage(job_dir).read(pending_name(vm.name)).data)
    previous = CheckpointStore(open_storage(job_dir)).latest().step
    assert previous < record.step
    return vm, job_dir, record, previous


def test_a_pending_snapshot_is_not_obsolete_against_a_newer_manifest_that_does_not_verify(tmp_path, instance_factory):
    """Item 3: a newer manifest that parses but names a chunk that is not stored used to make the
    pending record 'obsolete': record and copy deleted, an older commit restored. Only a snapshot
    that verifies makes it obsolete; here the disk's snapshot is committed and restored."""
    vm, job_dir, record, previous = _preempted_with_a_pending_snapshot(tmp_path, instance_factory)
    storage = open_storage(job_dir)
    store = CheckpointStore(storage, max_step=STEPS)
    good = json.loads(storage.read(store.latest().name).data)
    good["step"], good["attempt"], good["seq"] = record.step + 10, 9, 99
    good["files"][0]["chunks"][0]["object"] = "survivor/blobs/chunks/" + "0" * 64  # never stored
    storage.write(f"survivor/snapshots/{record.step + 10:012d}-000009-0099.json", json.dumps(good).encode())
    vm.boot(wipe=True)
    assert vm.wait(120) == 0, f"see {vm.log_path()}"
    state = _journal(job_dir)
    assert state.attempts[-1].restored_step == record.step and state.done["step"] == STEPS
    assert storage.list(PENDING) == []


def test_a_fifo_in_the_state_disks_copy_does_not_hang_the_boot(tmp_path, instance_factory):
    """Item 5: a FIFO where the copy's file was: the boot opened it and waited for ever. It is
    refused with one warning naming it, and the previous commit restores."""
    vm, job_dir, record, previous = _preempted_with_a_pending_snapshot(tmp_path, instance_factory)
    folder = os.path.join(vm.state_disk, "snapshots", record.dirname)
    victim = os.path.join(folder, sorted(os.listdir(folder))[0])
    os.remove(victim)
    os.mkfifo(victim)
    vm.boot(wipe=True)
    assert vm.wait(60) == 0, f"the boot hung or failed; see {vm.log_path()}"
    assert _journal(job_dir).attempts[-1].restored_step == previous
    warnings = [line for line in vm.log_lines() if "does not verify" in line.get("message", "")]
    assert len(warnings) == 1 and "not a regular file" in json.dumps(warnings[0])


def test_a_link_at_the_state_disks_snapshots_is_never_followed(tmp_path, instance_factory):
    """Item 8: `<disk>/snapshots` replaced by a link to another directory. Saving used to clear
    everything in the link's target (with the agent as root, a link to / wipes the machine). The
    disk is not used then: the notice's commit goes to Cloud Storage and the target is untouched."""
    job_dir = str(tmp_path / "jobdir")
    spec = dummy_spec(job_dir, tmp_path, train_steps=STEPS, checkpoint_steps=5, state_disk_gb=10)
    vm = instance_factory(spec, state_disk=True, env={RATE_ENV: "1"})
    target = tmp_path / "precious"
    target.mkdir()
    (target / "sentinel").write_text("keep me")
    (target / "12-1").mkdir()  # even a name the disk tier would give its own folders
    os.makedirs(vm.state_disk, exist_ok=True)
    os.symlink(target, os.path.join(vm.state_disk, "snapshots"))
    vm.boot()
    vm.wait_for_step(23)
    vm.set_preempted()
    assert vm.wait(30) == 0, f"see {vm.log_path()}"
    assert (target / "sentinel").read_text() == "keep me" and (target / "12-1").is_dir()
    attempt = _journal(job_dir).attempts[-1]
    assert attempt.outcome == "preempted" and attempt.steps_lost == 0
    assert CheckpointStore(open_storage(job_dir)).latest().step == attempt.end_step  # in Cloud Storage
    assert open_storage(job_dir).list(PENDING) == []


def test_a_pending_record_beyond_train_steps_is_refused_before_it_is_committed(tmp_path, caplog):
    """Item 12: such a record was committed, then refused at restore, and its copy deleted."""
    storage, disk_root = _saved(tmp_path)  # step 4 committed; step 9 pending
    store = CheckpointStore(storage, max_step=8)
    assert DiskTier(disk_root, storage, "vm-1", ZONE).recover(store, attempt=2) is None
    assert any("beyond train_steps" in r.getMessage() for r in caplog.records)
    assert store.latest().step == 4  # nothing committed
    assert [o.name for o in storage.list(PENDING)] == [pending_name("vm-1")]  # kept, as is its copy
    assert os.listdir(os.path.join(disk_root, "snapshots")) == ["9-1"]


def _run_mount_state_disk(root: str) -> subprocess.CompletedProcess:
    """startup.sh's own mount_state_disk, cut from the script as it ships, run as root with ROOT set
    to a sandbox (log and guest_attribute stubbed): what a boot does with the state disk."""
    from survivor.cloud.template import startup_script

    script = startup_script()
    function = script[script.index("mount_state_disk() {") :]
    function = function[: function.index("\n}\n") + 3]
    program = "\n".join(
        [
            "set -uo pipefail",
            f"ROOT={shlex.quote(root)}",
            'log() { echo "$*"; }',
            "guest_attribute() { :; }",
            'readonly STATE_DEVICE="${ROOT}/dev/disk/by-id/google-survivor-state"',
            f'readonly STATE_DIR="${{ROOT}}{STATE_DISK_DIR}"',
            function,
            "mount_state_disk",
        ]
    )
    return subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=120)


@pytest.fixture
def loop_disk(tmp_path):
    """A 16 MiB loop device standing in for the state disk at the sandbox's by-id path (root only)."""
    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate(16 << 20)
    made = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True)
    if made.returncode or os.geteuid() != 0:
        pytest.skip("needs root and a loop device")
    device = made.stdout.strip()
    root = tmp_path / "root"
    (root / "dev/disk/by-id").mkdir(parents=True)
    (root / "etc").mkdir()
    os.symlink(device, root / "dev/disk/by-id/google-survivor-state")
    yield str(root)
    subprocess.run(["umount", "-R", str(root) + STATE_DISK_DIR], capture_output=True)
    subprocess.run(["losetup", "-d", device], capture_output=True)


def test_startup_sh_never_mounts_over_or_chowns_through_a_link_at_the_mount_point(loop_disk, tmp_path):
    """In a sandbox as root: a link where the mount point belongs (the agent's user
    could make one under /var/lib/survivor) is refused: nothing is mounted over its target and its
    owner does not change. The mount point now lies where only root writes."""
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep").write_text("root's")
    mount_point = loop_disk + STATE_DISK_DIR
    os.makedirs(os.path.dirname(mount_point), exist_ok=True)
    os.symlink(precious, mount_point)
    done = _run_mount_state_disk(loop_disk)
    assert done.returncode == 1 and "is a link or not a directory" in done.stdout, done.stdout + done.stderr
    assert os.stat(precious).st_uid == 0 and (precious / "keep").read_text() == "root's"
    assert not os.path.ismount(precious)
    assert not STATE_DISK_DIR.startswith("/var/lib/survivor/")  # not inside the agent's own directory


def test_startup_sh_mounts_the_disk_owned_by_the_agent_with_its_marker(loop_disk):
    done = _run_mount_state_disk(loop_disk)
    mount_point = loop_disk + STATE_DISK_DIR
    assert done.returncode == 0, done.stdout + done.stderr
    assert os.path.ismount(mount_point) and not os.path.islink(mount_point)
    st = os.stat(mount_point)  # the agent's, root's: the trainer never writes there
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o755)
    assert os.path.isfile(os.path.join(mount_point, MARKER))
    assert f" {STATE_DISK_DIR} ext4 " in open(os.path.join(loop_disk, "etc/fstab")).read()
