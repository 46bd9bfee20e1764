"""Trainers that save in orders survivor did not choose: everything they write reaches the job dir
before the VM goes or DONE is written."""

import os

import pytest
import yaml

from survivor.jobdir.journal import Journal
from survivor.jobdir.storage import open_storage
from survivor.jobdir.store import CheckpointStore
from tests.conftest import PYTHON, executed_steps
from tests.waiting import PATIENCE, wait_until

FOREIGN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "harness", "foreign_trainer.py")


def _foreign(tmp_path, order: str, *extra: str) -> list[str]:
    """The foreign trainer's argv: `order`, 0.3 s between its files, 10 ms steps logged to steps.log."""
    return [
        PYTHON,
        FOREIGN,
        "--order",
        order,
        "--step-log",
        str(tmp_path / "steps.log"),
        "--pause",
        "0.3",
        "--step-seconds",
        "0.01",
        *extra,
    ]


def _wait_for_steps(tmp_path, count, vm, timeout=PATIENCE):
    def reached() -> bool:
        if len(executed_steps(tmp_path)) >= count:
            return True
        assert vm.running(), f"the agent exited ({vm.returncode}) before {count} steps; see {vm.log_path()}"
        return False

    wait_until(reached, timeout, f"{count} steps trained (see {vm.log_path()})")


def test_a_trainer_that_writes_its_state_file_before_its_shards_resumes_after_a_sigterm(
    job_dir, tmp_path, instance_factory
):
    """Its every save's first commit holds the state file alone; the shards, arriving 0.3 s and 0.6 s
    later, commit the step again. The notice is safe only once the whole save is committed, and the
    next boot, on a fresh disk, resumes where the SIGTERM left it and finishes.

    The trainer trains nothing from step 90 on until the notice is sent: a test process held on a
    loaded machine (once ~14 s past its wait, in a full-suite run) otherwise let it train all 400
    steps, so the notice met a job that had finished and the test checked nothing it means."""
    train_steps = 400
    hold = tmp_path / "notice-sent"
    spec = yaml.safe_dump(
        {
            "job_dir": job_dir,
            "train_steps": train_steps,
            "checkpoint_steps": 20,
            "grace_seconds": 20,
            "sync_seconds": 0.2,
            "on_finish": "keep-alive",
            "keep": 1,
            "trainer": {"argv": _foreign(tmp_path, "state-first", "--hold-at", "90", "--hold-file", str(hold))},
        }
    )
    vm = instance_factory(spec)
    vm.boot()
    _wait_for_steps(tmp_path, 70, vm)  # three periodic saves, each committed with its state file alone first
    code = vm.preempt(soft_off=True)
    hold.touch()  # the next boot trains on past step 90
    assert code == 0, f"the agent's exit on the soft off: {code}; see {vm.log_path()}"
    first = Journal(open_storage(job_dir)).state().attempts[-1]
    saved = executed_steps(tmp_path)[-1]
    assert first.end_step == saved and first.steps_lost == 0, first
    newest = CheckpointStore(open_storage(job_dir)).latest()
    assert newest.step == saved and newest.resumable, [f.path for f in newest.files]

    vm.boot(wipe=True)
    assert vm.wait(120) == 0, f"see {vm.log_path()}"
    state = Journal(open_storage(job_dir)).state()
    assert state.attempts[-1].restored_step == saved and state.attempts[-1].outcome == "finished"
    assert state.done["step"] == train_steps
    steps = executed_steps(tmp_path)
    assert steps[len(steps) - (train_steps - saved)] == saved + 1 and steps[-1] == train_steps
    assert len(steps) == train_steps  # not one step trained twice


def test_a_trainer_that_saves_its_last_step_twice_and_then_exports_ends_with_both_committed(
    job_dir, tmp_path, instance_factory
):
    """The foreign trainer saves at every 20th step and once more when its loop ends, so its last
    step is saved twice, the second time with new bytes in every shard, and then it writes its
    export. The first save of that step is committed while the second is written (0.3 s between
    files, a sync every 0.1 s); once the trainer exits 0 its last save and the export are
    committed, and DONE points at a commit that holds both."""
    train_steps = 60
    spec = yaml.safe_dump(
        {
            "job_dir": job_dir,
            "train_steps": train_steps,
            "checkpoint_steps": 20,
            "sync_seconds": 0.1,
            "on_finish": "keep-alive",
            "trainer": {"argv": _foreign(tmp_path, "no-state", "--shards", "3", "--export")},
        }
    )
    vm = instance_factory(spec)
    vm.boot()
    assert vm.wait(120) == 0, f"see {vm.log_path()}"
    state = Journal(open_storage(job_dir)).state()
    assert state.done is not None and state.done["step"] == train_steps, state.done
    store = CheckpointStore(open_storage(job_dir))
    final = store.latest()
    paths = {f.path for f in final.files}
    assert final.step == train_steps and final.resumable, sorted(paths)
    assert {"export/saved_model.pb", "export/variables/variables.index"} <= paths, sorted(paths)
    with open(vm.log_path(), encoding="utf-8") as log:
        said = log.read()
    assert "saved the committed step again" in said  # the first save of step 60 was committed first
    assert "changed after its commit" in said  # ... and its rewrite waited for the trainer's exit


#: A plain TensorFlow loop as users write it: CheckpointManager.save(checkpoint_number=step) every
#: --checkpoint-steps and once more after the loop (its last step saved twice: the second save
#: renames new data shards into place but rewrites the `.index` in place), then a SavedModel export.
TF_LOOP_SAVING_TWICE = """
import argparse, os, time
import tensorflow as tf
p = argparse.ArgumentParser()
p.add_argument("--job-dir"); p.add_argument("--train-steps", type=int); p.add_argument("--checkpoint-steps", type=int)
a, _ = p.parse_known_args()
w = tf.Variable(tf.zeros([4])); step = tf.Variable(0, dtype=tf.int64)
ckpt = tf.train.Checkpoint(w=w, step=step)
manager = tf.train.CheckpointManager(ckpt, a.job_dir, max_to_keep=2)
ckpt.restore(manager.latest_checkpoint)
while int(step) < a.train_steps:
    w.assign_add(tf.ones([4])); step.assign_add(1); time.sleep(0.05)
    if int(step) % a.checkpoint_steps == 0:
        manager.save(checkpoint_number=int(step))
time.sleep(1.0)  # the agent commits the first save of the last step before the second
w.assign_add(tf.ones([4]))  # the second save's bytes differ
manager.save(checkpoint_number=int(step))
tf.saved_model.save(tf.Module(), os.path.join(a.job_dir, "export"))
"""


@pytest.mark.slow
def test_a_tensorflow_loop_that_saves_its_last_step_twice_then_exports_ends_with_both_committed(
    tmp_path, instance_factory
):
    """Real TensorFlow, as a user's loop saves: the second save of the last step rewrites its
    `.index` in place, so no file-by-file rule tells it from a torn checkpoint; once the trainer
    exits 0 its last save and the export are committed, and DONE points at them."""
    script = tmp_path / "loop.py"
    script.write_text(TF_LOOP_SAVING_TWICE)
    job_dir = str(tmp_path / "jobdir")  # one storage is enough: what is checked is what the agent commits
    spec = {
        "job_dir": job_dir,
        "train_steps": 20,
        "checkpoint_steps": 10,
        "sync_seconds": 0.1,
        "on_finish": "keep-alive",
        "trainer": {"argv": [PYTHON, str(script)]},
    }
    vm = instance_factory(yaml.safe_dump(spec))
    vm.boot()
    assert vm.wait(180) == 0, f"see {vm.log_path()}"
    assert Journal(open_storage(job_dir)).state().done["step"] == 20
    store = CheckpointStore(open_storage(job_dir))
    final, *earlier = [m for m in store.committed() if m.step == 20]
    assert {"export/saved_model.pb", "ckpt-20.index"} <= {f.path for f in final.files}
    assert earlier, "the first save of step 20 was not committed before the second: the test checked nothing"
    restored = tmp_path / "restored"
    store.restore(str(restored))
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(restored / "ckpt-20"))
    assert list(reader.get_tensor("w/.ATTRIBUTES/VARIABLE_VALUE")) == [21.0] * 4  # the second save's
