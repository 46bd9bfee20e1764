"""The built-in training loop's decisions that need no TensorFlow: its hyperparameter guard."""

import json
import os
import subprocess
import sys

import pytest

from survivor.trainers.loop import HPARAMS_FILE, hparam_differences, hparam_refusal


def test_a_resume_with_other_hyperparameters_is_refused_naming_each_unless_allowed():
    saved, current = {"learning_rate": 0.05, "seed": 0}, {"learning_rate": 0.2, "seed": 0}
    refusal = hparam_refusal(hparam_differences(saved, current), allowed=False)
    assert refusal is not None and refusal.endswith("learning_rate: checkpoint has 0.05, this run has 0.2")
    assert "--allow-hparam-change" in refusal
    assert hparam_refusal(hparam_differences(saved, current), allowed=True) is None
    assert hparam_refusal(hparam_differences(saved, dict(saved)), allowed=False) is None


@pytest.mark.parametrize("trainer", ["mlp", "cifar10"])
def test_a_local_job_dir_with_other_hyperparameters_is_refused_before_tensorflow_is_imported(trainer, tmp_path):
    """The agent's job dir is local: the refusal is one line, and the trainer exits 2 without the
    seconds TensorFlow's import takes (the check used to run after it)."""
    job = tmp_path / "job"
    job.mkdir()
    (job / HPARAMS_FILE).write_text(json.dumps({"seed": 7}))
    probe = (
        "import sys\n"
        f"from survivor.trainers.{trainer} import main\n"
        "try:\n"
        f"    main(['--job-dir', {str(job)!r}, '--train-steps', '5', '--data-dir', {str(tmp_path)!r}])\n"
        "except SystemExit as exc:\n"
        "    print('exit', exc.code, 'tensorflow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "exit 2 False", out.stdout + out.stderr
    assert out.stderr.startswith("error: refusing to resume with other hyperparameters"), out.stderr
    assert "seed: checkpoint has 7, this run has 0" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_an_unreadable_hyperparameter_record_is_left_to_the_guard_after_the_import(tmp_path):
    from argparse import Namespace

    from survivor.trainers.loop import _local_hparam_refusal

    (tmp_path / HPARAMS_FILE).write_text("{not json")
    args = Namespace(job_dir=str(tmp_path), allow_hparam_change=False)
    assert _local_hparam_refusal(args, {"seed": 0}) is None
    (tmp_path / HPARAMS_FILE).write_text("[1, 2]")
    assert _local_hparam_refusal(args, {"seed": 0}) is None
    (tmp_path / HPARAMS_FILE).write_text(json.dumps({"seed": 1}))
    assert _local_hparam_refusal(args, {"seed": 0}) is not None
    assert _local_hparam_refusal(Namespace(job_dir="gs://b/j", allow_hparam_change=False), {"seed": 0}) is None


@pytest.mark.slow  # a TensorFlow process
def test_the_trainers_import_tensorflow_without_the_packages_no_trainer_uses():
    """Keras imports matplotlib.pyplot and TensorFlow googleapiclient whenever they are installed
    (both are in this venv); the built-in trainers' import leaves them out, then lets them in."""
    from survivor.trainers.loop import NOT_FOR_TRAINING

    code = (
        "import sys; from survivor.trainers.loop import import_tensorflow, NOT_FOR_TRAINING; import_tensorflow(); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(NOT_FOR_TRAINING)), 'keras' in sys.modules); "
        "import matplotlib, googleapiclient; print('later imports work')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["[] True", "later imports work"], done.stdout
    assert set(NOT_FOR_TRAINING) == {"matplotlib", "googleapiclient"}
    without = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, keras; print(sorted({m.split('.')[0] for m in "
            "sys.modules} & {'matplotlib', 'googleapiclient'}))",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert without.stdout.strip() == "['googleapiclient', 'matplotlib']"  # what the block saves, still true


def test_the_newest_checkpoint_by_name_is_the_highest_step_of_an_index_file():
    from survivor.trainers.loop import newest_by_name

    assert newest_by_name(["ckpt-9.index", "ckpt-31.index", "ckpt-100.index"]) == "ckpt-100"  # by step, not text
    assert newest_by_name(["ckpt-x.index", "ckpt-7.data-00000-of-00001", "other-8.index"]) is None
    assert newest_by_name([]) is None
