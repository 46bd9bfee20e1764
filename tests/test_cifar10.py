"""The built-in CIFAR-10 ResNet trainer: data layout, exact resume on 2 logical devices, stock
TensorFlow can read what it writes, and the hyperparameter guard."""

import io
import os
import pickle
import random
import sys
import tarfile

import numpy as np
import pytest

from tests.tf_resume import assert_bitwise_equal, checkpoint_values, run_trainer

CIFAR = "survivor.trainers.cifar10"


def small_args(data_dir, steps=24):
    return [
        "--data-dir",
        data_dir,
        "--train-steps",
        str(steps),
        "--num-gpus",
        "2",
        "--resnet-depth",
        "8",
        "--train-batch-size",
        "16",
        "--checkpoint-steps",
        "1000",
        "--log-steps",
        "4",
        "--dropout",
        "0.2",
        "--eval-steps",
        "1",
        "--no-export",
    ]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    from survivor.trainers import cifar10_data

    out = str(tmp_path_factory.mktemp("cifar") / "data")
    cifar10_data.synthetic(256, out, seed=1)
    return out


def fake_archive(path, per_batch=6):
    """A tiny cifar-10-python.tar.gz with the official structure (CHW rows, b'data'/b'labels')."""
    with tarfile.open(path, "w:gz") as tar:
        for i, name in enumerate(
            ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"]
        ):
            data = np.arange(per_batch * 3072, dtype=np.int64).reshape(per_batch, 3072) % 251
            payload = pickle.dumps(
                {b"data": data.astype(np.uint8), b"labels": [(i + j) % 10 for j in range(per_batch)]}
            )
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))


def test_data_from_the_official_archive_has_the_estimator_layout(tmp_path):
    import tensorflow as tf

    from survivor.trainers import cifar10_data

    archive = tmp_path / "cifar-10-python.tar.gz"
    fake_archive(archive)
    counts = cifar10_data.from_python_archive(str(archive), str(tmp_path / "out"))
    assert counts == {"train": 24, "validation": 6, "eval": 6}
    images, labels = cifar10_data.load_split(str(tmp_path / "out"), "train")
    assert images.shape == (24, 32, 32, 3) and images.dtype == tf.uint8
    first_row = np.arange(3072) % 251
    # the archive stores CHW; the TFRecords hold HWC like the estimator example's
    assert np.array_equal(images[0].numpy(), first_row.reshape(3, 32, 32).transpose(1, 2, 0))
    assert list(labels.numpy()[:6]) == [0, 1, 2, 3, 4, 5]


def test_survivor_data_synthetic_command(tmp_path):
    import subprocess

    survivor = os.path.join(os.path.dirname(sys.executable), "survivor")
    out = subprocess.run(
        [survivor, "data", "cifar10", "--synthetic", "64", "--out", str(tmp_path / "d")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "train.tfrecords: 64" in out.stdout
    assert sorted(os.listdir(tmp_path / "d")) == ["eval.tfrecords", "train.tfrecords", "validation.tfrecords"]


@pytest.mark.slow
def test_two_sigterms_at_random_steps_resume_bit_for_bit(data_dir, tmp_path):
    # two stops (a resume of a resumed run), not three: tests/test_tf_trainer.py takes the MLP through
    # three; each ResNet process costs 20-40 CPU-s of the suite's 12 minutes
    straight = str(tmp_path / "straight")
    out = run_trainer(CIFAR, straight, small_args(data_dir))
    assert " traces 1" in out, out[-1500:]  # traced before the first batch, never again
    resumed = str(tmp_path / "resumed")
    for stop in sorted(random.sample(range(2, 22), 2)):
        run_trainer(CIFAR, resumed, small_args(data_dir), stop_at=stop)
    run_trainer(CIFAR, resumed, small_args(data_dir))
    a, b = checkpoint_values(straight), checkpoint_values(resumed)
    assert int(b["step/.ATTRIBUTES/VARIABLE_VALUE"]) == 24
    assert any("seed_generator_state" in name for name in b) and any(
        "momentum" in name or name.startswith("optimizer/") for name in b
    )
    assert_bitwise_equal(a, b)


@pytest.mark.slow
def test_stock_tensorflow_reads_the_checkpoint_and_the_savedmodel_predicts(data_dir, tmp_path):
    import tensorflow as tf

    job = str(tmp_path / "job")
    run_trainer(CIFAR, job, [a for a in small_args(data_dir, steps=6) if a != "--no-export"])
    latest = tf.train.latest_checkpoint(job)
    assert latest.endswith("ckpt-6")
    reader = tf.train.load_checkpoint(latest)
    names = reader.get_variable_to_shape_map()
    assert any(name.startswith("model/") for name in names)
    loaded = tf.saved_model.load(os.path.join(job, "export"))
    logits = loaded.serve(tf.zeros([3, 32, 32, 3]))
    assert logits.shape == (3, 10)
    assert os.path.isdir(os.path.join(job, "train")) and os.listdir(os.path.join(job, "train"))

    with pytest.raises(AssertionError) as err:
        run_trainer(CIFAR, job, small_args(data_dir, steps=8) + ["--momentum", "0.8"])
    assert "momentum: checkpoint has 0.9, this run has 0.8" in str(err.value)


@pytest.mark.slow
def test_cifar10_through_the_agent_and_the_storage_emulator(data_dir, bucket, tmp_path, instance_factory):
    import yaml

    from survivor.jobdir.storage import open_storage
    from survivor.jobdir.store import CheckpointStore

    straight = str(tmp_path / "straight")
    run_trainer(CIFAR, straight, small_args(data_dir, steps=16))
    job_dir = f"gs://{bucket}/cifar10"
    # with its SavedModel export, written after the last save (it never reached the job dir)
    hparams = {"resnet-depth": 8, "train-batch-size": 16, "log-steps": 4, "dropout": 0.2, "eval-steps": 1}
    spec = {
        "job_dir": job_dir,
        "data_dir": data_dir,
        "train_steps": 16,
        "checkpoint_steps": 1000,
        "num_gpus": 2,
        "on_finish": "keep-alive",
        "sync_seconds": 0.5,
        "trainer": {"builtin": "cifar10"},
        "hyperparameters": hparams,
    }
    vm = instance_factory(yaml.safe_dump(spec))
    vm.boot()
    stop = random.randint(3, 12)
    vm.wait_for_step(stop, timeout=240)
    assert vm.preempt() == 0
    vm.boot(wipe=True)
    assert vm.wait(300) == 0, open(vm.log_path()).read()[-3000:]
    restored = str(tmp_path / "restored")
    assert CheckpointStore(open_storage(job_dir)).restore(restored).step == 16
    assert_bitwise_equal(checkpoint_values(straight), checkpoint_values(restored))
    assert os.path.isfile(os.path.join(restored, "export", "saved_model.pb")), sorted(os.listdir(restored))
    assert any(line.get("message") == "training finished; DONE written" for line in vm.log_lines())
