"""The TensorFlow training loop (through the small MLP trainer): exact resume on 2 logical devices."""

import os
import random
import re
import shutil

import pytest

from tests.tf_resume import assert_bitwise_equal, checkpoint_values, run_trainer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.slow

MLP = "survivor.trainers.mlp"
ARGS = ["--train-steps", "40", "--num-gpus", "2", "--checkpoint-steps", "1000", "--log-steps", "5", "--dropout", "0.3"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    job_dir = str(tmp_path_factory.mktemp("straight") / "job")
    out = run_trainer(MLP, job_dir, ARGS)
    assert " traces 1" in out, out[-1500:]  # traced before the first batch, never again
    return checkpoint_values(job_dir)


def test_sigterm_at_three_random_steps_resumes_bit_for_bit(uninterrupted, tmp_path):
    job_dir = str(tmp_path / "job")
    stops = sorted(random.sample(range(3, 37), 3))
    for stop in stops:
        run_trainer(MLP, job_dir, ARGS, stop_at=stop)
    # the last resume finds no `checkpoint` state file, as after a commit taken before TensorFlow
    # wrote it: it resumes from the newest ckpt-N by name (loop.newest_by_name), not from scratch
    os.remove(os.path.join(job_dir, "checkpoint"))
    out = run_trainer(MLP, job_dir, ARGS)
    assert "starting from scratch" not in out and "resumed from ckpt-" in out, out[-1500:]
    resumed = checkpoint_values(job_dir)
    assert int(resumed["step/.ATTRIBUTES/VARIABLE_VALUE"]) == 40
    assert any("seed_generator_state" in name for name in resumed), "dropout RNG state must be in the checkpoint"
    assert any(name.startswith("optimizer/") for name in resumed)
    assert_bitwise_equal(uninterrupted, resumed)


def test_a_changed_hyperparameter_on_resume_is_refused_naming_it(tmp_path):
    job_dir = str(tmp_path / "job")
    run_trainer(MLP, job_dir, ARGS, stop_at=5)
    with pytest.raises(AssertionError) as err:
        run_trainer(MLP, job_dir, [*ARGS, "--learning-rate", "0.2"])
    assert "learning_rate: checkpoint has 0.05, this run has 0.2" in str(err.value)
    run_trainer(MLP, job_dir, [*ARGS, "--learning-rate", "0.2", "--allow-hparam-change"])


def test_through_the_agent_and_the_storage_emulator(uninterrupted, bucket, tmp_path, instance_factory):
    """Preempted twice at random steps, shipped to the bucket and back each time: still exact."""
    import sys

    import yaml

    from survivor.jobdir.storage import open_storage
    from survivor.jobdir.store import CheckpointStore

    job_dir = f"gs://{bucket}/mlp"
    spec = yaml.safe_dump(
        {
            "job_dir": job_dir,
            "train_steps": 40,
            "checkpoint_steps": 1000,
            "num_gpus": 2,
            "on_finish": "keep-alive",
            "sync_seconds": 0.5,
            "trainer": {"argv": [sys.executable, "-m", MLP]},
            # paced (no hyperparameter of the checkpoint's): on a loaded machine the test's own polling could
            # be starved past the step it preempts at, and a trainer done in a second then finished first
            "hyperparameters": {"log-steps": 5, "dropout": 0.3, "step-seconds": 0.1},
        }
    )
    vm = instance_factory(spec)
    vm.boot()
    for stop in sorted(random.sample(range(3, 37), 2)):
        vm.wait_for_step(stop, timeout=180)
        assert vm.preempt() == 0
        vm.boot(wipe=True)
    assert vm.wait(300) == 0
    restored = str(tmp_path / "restored")
    manifest = CheckpointStore(open_storage(job_dir)).restore(restored)
    assert manifest.step == 40
    assert_bitwise_equal(uninterrupted, checkpoint_values(restored))


KERAS_FIT = "survivor.trainers.keras_fit"


def test_keras_fit_helper_saves_on_sigterm_and_resumes_mid_epoch_exactly(tmp_path):
    """The runnable example of docs/trainer-contract.md: 7 epochs of 8 steps, SIGTERMed mid-epoch."""
    args = ["--train-steps", "56", "--steps-per-epoch", "8"]
    straight = str(tmp_path / "straight")
    run_trainer(KERAS_FIT, straight, args)
    resumed = str(tmp_path / "resumed")
    stops = sorted(random.sample([s for s in range(3, 50) if s % 8], 2))
    for stop in stops:
        run_trainer(KERAS_FIT, resumed, args, stop_at=stop)
    os.remove(os.path.join(resumed, "checkpoint"))  # resumed by name, as the loop is (loop.latest_checkpoint)
    out = run_trainer(KERAS_FIT, resumed, args)
    resumed_at = re.search(r"resumed from ckpt-(\d+) at step (\d+)", out)  # not from scratch
    assert resumed_at and resumed_at[1] == resumed_at[2] and int(resumed_at[1]) >= stops[-1], out[-1500:]
    a, b = checkpoint_values(straight), checkpoint_values(resumed)
    assert int(b["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"]) == 56
    assert any("rng" in name for name in b)
    assert_bitwise_equal(a, b)


def test_keras_fit_on_arrays_stops_at_train_steps_and_resumes_a_seeded_shuffle_exactly(tmp_path):
    """Keras-io's `model.fit(x, y, batch_size, validation_split)`, through
    fit_resumable: 70 steps of 29-batch epochs (a short last epoch: it trained 87 before), SIGTERMed
    mid-epoch twice; each epoch's shuffle is keyed by its number, so the resumed run is exact."""
    args = ["--train-steps", "70", "--arrays", "--checkpoint-steps", "1000"]
    straight = str(tmp_path / "straight")
    run_trainer(KERAS_FIT, straight, args)
    resumed = str(tmp_path / "resumed")
    stops = sorted(random.sample([s for s in range(3, 66) if s % 29], 2))
    for stop in stops:
        run_trainer(KERAS_FIT, resumed, args, stop_at=stop)
    out = run_trainer(KERAS_FIT, resumed, args)
    assert re.search(r"resumed from ckpt-(\d+) at step \1", out), out[-1500:]
    a, b = checkpoint_values(straight), checkpoint_values(resumed)
    assert int(a["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"]) == 70  # exactly train_steps
    assert_bitwise_equal(a, b)


def test_the_checkpoint_guides_loop_with_resumable_checkpoint_resumes_adam_exactly(tmp_path, monkeypatch):
    """TensorFlow's guide restores before the Keras 3 optimizer is built, which drops
    Adam's state silently, and numbers checkpoints by save count. Through ResumableCheckpoint the
    loop, SIGTERMed twice, ends bit for bit where an uninterrupted run does, Adam's moments included,
    with every checkpoint named by its step."""
    shutil.copy(os.path.join(ROOT, "examples", "guide_loop.py"), tmp_path / "guide_loop.py")  # the docs' own
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = ["--train-steps", "60", "--checkpoint-steps", "1000"]
    straight = str(tmp_path / "straight")
    run_trainer("guide_loop", straight, args)
    resumed = str(tmp_path / "resumed")
    stops = sorted(random.sample(range(5, 55), 2))
    for stop in stops:
        run_trainer("guide_loop", resumed, args, stop_at=stop)
    out = run_trainer("guide_loop", resumed, args)
    assert re.search(r"resumed from ckpt-(\d+) at step \1", out), out[-1500:]
    a, b = checkpoint_values(straight), checkpoint_values(resumed)
    assert int(b["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"]) == 60
    assert len([name for name in b if name.startswith("optimizer/_variables/")]) >= 4  # Adam's moments, compared
    assert_bitwise_equal(a, b)
    # by number: as text "ckpt-8.index" sorts after "ckpt-60.index" (a stop at step 8 kept it)
    indexes = [f for f in os.listdir(resumed) if re.fullmatch(r"ckpt-\d+\.index", f)]
    assert max(indexes, key=lambda f: int(f[5:-6])) == "ckpt-60.index", indexes
