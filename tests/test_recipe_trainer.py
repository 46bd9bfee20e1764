"""The recipe's own trainer (ml-on-gcp gce/survival-training/wrapper/train.py, vendored unchanged in
tests/recipe/) under `survivor agent`, driven by nothing but the recipe's flat metadata keys.

It takes exactly --job-dir, --checkpoint-steps, --train-steps, --hyperparameter-1 and
--hyperparameter-2, and argparse ends it with exit 2 on any other flag: a flag the spec does not
name (--num-gpus with no numGpus) must never reach it.
"""

import hashlib
import os
import re
import shutil
import subprocess

from survivor.jobdir.journal import Journal
from survivor.local.instance import LocalInstance
from survivor.spec import FLAT_KEYS, RECIPE_HYPERPARAMETERS, UNSUPPORTED_FLAT_KEYS
from survivor.jobdir.storage import open_storage
from survivor.jobdir.store import CheckpointStore
from tests.conftest import PYTHON

RECIPE = os.path.join(os.path.dirname(__file__), "recipe")
TRAIN_PY_SHA256 = "c7f34ecdcf60e283a7e205cbd5ae886237937ca8580a169dab3c3fffaeda19a1"


def recipe_repository(tmp_path) -> str:
    """A git repository holding the recipe's trainer, as the recipe's trainerGitPath names one."""
    repo = tmp_path / "trainer-repo"
    shutil.copytree(os.path.join(RECIPE, "wrapper"), repo / "wrapper")
    git = ["git", "-C", str(repo), "-c", "user.name=recipe", "-c", "user.email=recipe@example.com"]
    for argv in (
        ["git", "init", "--quiet", str(repo)],
        git + ["add", "."],
        git + ["commit", "--quiet", "-m", "recipe"],
    ):
        subprocess.run(argv, check=True, capture_output=True)
    return str(repo)


def test_the_vendored_trainer_is_the_recipes_byte_for_byte():
    with open(os.path.join(RECIPE, "wrapper", "train.py"), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == TRAIN_PY_SHA256


def test_every_key_the_recipes_startup_script_reads_means_something_to_survivor():
    with open(os.path.join(RECIPE, "gce", "startup.sh"), encoding="utf-8") as f:
        keys = re.findall(r"instance/attributes/(\w+)", f.read())
    assert keys == [
        "gceUser",
        "trainerRepo",
        "trainerModule",
        "jobDir",
        "trainSteps",
        "checkpointSteps",
        "hparam1",
        "hparam2",
        "keepAlive",
    ]
    for key in keys:
        assert key in FLAT_KEYS or key in RECIPE_HYPERPARAMETERS or key in UNSUPPORTED_FLAT_KEYS, key


def test_the_recipes_unchanged_trainer_finishes_done_on_the_recipes_flat_keys(job_dir, tmp_path):
    # the dummy startup script's keys; its trainerRepo (a Cloud Source Repository) becomes the
    # tf-estimator startup script's trainerGitPath; gceUser is left out (the test runs as root, and
    # the local instance lets the trainer run as the agent's user); no numGpus, as in the recipe
    attributes = {
        "trainerGitPath": recipe_repository(tmp_path),
        "trainerModule": "wrapper.train",
        "jobDir": job_dir,
        "trainSteps": "40",
        "checkpointSteps": "5",
        "hparam1": "3",
        "hparam2": "0.5",
        "keepAlive": "true",
    }
    vm = LocalInstance(attributes, str(tmp_path / "vm"), python=PYTHON)
    try:
        vm.boot()
        assert vm.wait(120) == 0, open(vm.log_path()).read()[-3000:]
        lines = vm.log_lines()
    finally:
        vm.close()
    started = next(line for line in lines if line["message"] == "trainer started")
    argv = started["argv"].split()
    assert argv[1:3] == ["-m", "wrapper.train"] and "--num-gpus" not in argv
    assert [a for a in argv if a.startswith("--")] == [
        "--job-dir",
        "--train-steps",
        "--checkpoint-steps",
        "--hyperparameter-1",
        "--hyperparameter-2",
    ]
    state = Journal(open_storage(job_dir)).state()
    # the recipe numbers its checkpoints by index: 0..7 every 5 steps, then a last one, 8
    assert state.done is not None and state.done["step"] == 8
    assert state.failed is None and [a.outcome for a in state.attempts] == ["finished"]
    latest = CheckpointStore(open_storage(job_dir)).latest()
    assert "dummy-checkpoint-8.json" in {entry.path for entry in latest.files}
