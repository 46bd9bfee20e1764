"""A local job dir's listing, through the real agent process: a link
among the objects (dangling, or a loop) is not an object and never blocks a boot; a prefix that is a
regular file where a directory belongs is a storage error before anything trains, never an empty
listing that starts the job from scratch."""

from __future__ import annotations

import os
import shutil

from survivor.jobdir.journal import Journal
from survivor.jobdir.storage import open_storage
from tests.conftest import dummy_spec, executed_steps


def _first_boot(job_dir, tmp_path, instance_factory):
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=120, checkpoint_steps=10))
    vm.boot()
    vm.wait_for_step(25)  # 95 steps after it: a late soft off still comes before the end
    assert vm.preempt(hard_off_after=20) == 0
    committed = Journal(open_storage(job_dir)).state().attempts[-1].end_step
    assert committed and committed >= 20
    return vm, committed


def test_a_link_loop_and_a_dangling_link_among_the_manifests_do_not_block_the_job(tmp_path, instance_factory):
    job_dir = str(tmp_path / "jobdir")
    vm, committed = _first_boot(job_dir, tmp_path, instance_factory)
    snapshots = os.path.join(job_dir, "survivor", "snapshots")
    os.symlink("loop-b.json", os.path.join(snapshots, "000000000030-000009-0001.json"))
    os.symlink("000000000030-000009-0001.json", os.path.join(snapshots, "loop-b.json"))
    os.symlink("/nonexistent/manifest.json", os.path.join(snapshots, "000000000040-000009-0001.json"))
    vm.boot(wipe=True)
    assert vm.wait(90) == 0, open(vm.log_path()).read()[-3000:]
    state = Journal(open_storage(job_dir)).state()
    assert state.attempts[-1].restored_step == committed
    assert state.done["step"] == 120
    assert "Traceback" not in open(vm.log_path()).read()


def test_a_file_where_the_snapshots_directory_belongs_ends_the_boot_before_training(tmp_path, instance_factory):
    job_dir = str(tmp_path / "jobdir")
    vm, _ = _first_boot(job_dir, tmp_path, instance_factory)
    snapshots = os.path.join(job_dir, "survivor", "snapshots")
    shutil.rmtree(snapshots)
    with open(snapshots, "w") as f:
        f.write("not a directory")
    steps_before = len(executed_steps(tmp_path))
    vm.boot(wipe=True)
    assert vm.wait(90) == 1, open(vm.log_path()).read()[-3000:]
    assert len(executed_steps(tmp_path)) == steps_before, "nothing trains from scratch on a listing that failed"
    log = open(vm.log_path()).read()
    assert "Traceback" not in log and "survivor/snapshots" in log and "Not a directory" in log


def test_a_local_job_dir_replaced_by_a_link_is_not_followed_and_the_job_trains_on(tmp_path, instance_factory):
    """The trainer's local job dir (`<workdir>/job`) swapped for a link between boots: the next boot
    removes the link itself, says so in one line, restores into a real dir and trains to the end;
    the link's target is never emptied, and the boot is no failed start of the job."""
    job_dir = str(tmp_path / "jobdir")
    vm, committed = _first_boot(job_dir, tmp_path, instance_factory)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("not the agent's")
    local = os.path.join(vm.workdir, "job")
    shutil.rmtree(local)
    os.symlink(str(elsewhere), local)
    vm.boot()  # the same boot disk: the link is still there
    assert vm.wait(90) == 0, open(vm.log_path()).read()[-3000:]
    state = Journal(open_storage(job_dir)).state()
    assert state.done["step"] == 120 and state.attempts[-1].restored_step == committed
    assert [a.outcome for a in state.attempts[1:]] == ["finished"]  # no failed attempt on the way
    assert (elsewhere / "keep.txt").read_text() == "not the agent's" and os.listdir(elsewhere) == ["keep.txt"]
    assert not os.path.islink(local)
    log = open(vm.log_path()).read()
    assert "Traceback" not in log and log.count("is a link") == 1, log[-3000:]
