"""A built-in TensorFlow trainer starts before the agent's restore and waits at its start gate:
its imports and devices overlap the download, and it reads the job dir only once restored."""

import os
import subprocess
import sys

import pytest
import yaml

from survivor.agent.trainer import warm_start
from survivor.jobdir.journal import Journal
from survivor.jobdir.storage import open_storage
from survivor.spec import TrainerSpec
from survivor.trainers.contract import START_GATE_ENV
from survivor.trainers.loop import HPARAMS_FILE
from tests.test_restore_failures import commit_snapshot, small_disk

GATE = (
    "import os, sys; from survivor.trainers.contract import wait_at_start_gate, START_GATE_ENV; "
    "print(wait_at_start_gate(), START_GATE_ENV in os.environ)"
)


@pytest.mark.parametrize(
    "env, given, said",
    [
        ({}, b"", "True False"),  # no gate: goes on at once
        ({START_GATE_ENV: "stdin"}, b"go\n", "True False"),  # restored: goes on (and no child inherits the gate)
        ({START_GATE_ENV: "stdin"}, b"", "False False"),  # the boot ended first: end of input
        ({START_GATE_ENV: "stdin"}, b"g", "False False"),  # half a word is no go
    ],
    ids=["no-gate", "go", "end-of-input", "half-a-word"],
)
def test_the_start_gate_lets_a_trainer_on_only_at_go(env, given, said):
    done = subprocess.run(
        [sys.executable, "-c", GATE],
        input=given,
        capture_output=True,
        timeout=60,
        env={k: v for k, v in {**os.environ, **env}.items() if k != START_GATE_ENV or env},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == said


def test_only_the_builtin_tensorflow_trainers_start_early():
    assert warm_start(TrainerSpec(builtin="mlp")) and warm_start(TrainerSpec(builtin="cifar10"))
    assert not warm_start(TrainerSpec(builtin="dummy"))  # no gate: it would read the job dir at once
    assert not warm_start(TrainerSpec(argv=("python", "train.py")))  # a user's trainer may read the job dir at once


def _trainer_pid(vm, boot):
    started = [line for line in vm.log_lines(boot) if line.get("message") == "trainer started"]
    assert len(started) == 1 and started[0].get("waits_for") == "the restore", started
    return started[0]["pid"]


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_a_boot_that_ends_before_training_ends_the_early_trainer_before_it_reads_the_job_dir(
    tmp_path, instance_factory
):
    """The restore fails (a boot disk too small for the snapshot): the trainer started at its gate
    is ended with the boot, and never passed the gate (it writes its hyperparameters first thing)."""
    job_dir = str(tmp_path / "jobdir")
    commit_snapshot(job_dir, tmp_path, 20, data_bytes=3 << 20)
    vm = instance_factory(yaml.safe_dump({"job_dir": job_dir, "train_steps": 40, "trainer": {"builtin": "mlp"}}))
    with small_disk(os.path.join(vm.root, "disk"), "1m"):
        vm.boot()
        assert vm.wait(120) == 1, open(vm.log_path()).read()[-3000:]  # systemd restarts it
        pid = _trainer_pid(vm, 1)
        assert not _alive(pid)
        assert not os.path.exists(os.path.join(vm.workdir, "job", HPARAMS_FILE))
    assert "boot disk" in Journal(open_storage(job_dir)).attempts()[-1].reason


@pytest.mark.slow
def test_the_mlp_trainer_starts_before_the_restore_and_resumes_from_it(tmp_path, instance_factory):
    job_dir = str(tmp_path / "jobdir")
    spec = yaml.safe_dump(
        {
            "job_dir": job_dir,
            "train_steps": 2000,
            "checkpoint_steps": 100000,
            "on_finish": "keep-alive",
            "trainer": {"builtin": "mlp"},
            "hyperparameters": {"step-seconds": 0.02, "log-steps": 50},
        }
    )
    vm = instance_factory(spec)
    vm.boot()  # trains, and is preempted with a notice: it commits its step
    vm.wait_for_step(30, timeout=240)
    _trainer_pid(vm, 1)
    assert vm.preempt() == 0
    saved = Journal(open_storage(job_dir)).attempts()[-1].end_step
    assert saved >= 30

    vm.boot(wipe=True)  # the next boot, on a fresh disk: its trainer starts before the restore, resumes from it
    first = vm.wait_for_step(saved + 1, timeout=240)
    # the step comes from the trainer's progress file; its printed lines reach the log through the
    # agent's pump, which may lag behind on a loaded machine: wait for the line, not read once
    vm.wait_for_message(f"resumed from ckpt-{saved} at step {saved}", timeout=60)
    lines = [line["message"] for line in vm.log_lines(2)]
    assert lines.index("trainer started") < lines.index("restored"), lines[:12]
    _trainer_pid(vm, 2)
    assert first >= saved + 1
    vm.wait_for_step(saved + 20, timeout=120)
    assert vm.preempt() == 0  # its save on the notice lands in the restored dir, now the trainer's
    attempt = Journal(open_storage(job_dir)).attempts()[-1]
    assert attempt.restored_step == saved and attempt.end_step >= saved + 20 and attempt.steps_lost == 0


SYSTEM_PYTHON = "/usr/bin/python3"  # one an unprivileged user can execute (this venv lives under /root)
AFTER_THE_GATE = """
import os, sys
from survivor.trainers.contract import wait_at_start_gate
if not wait_at_start_gate():
    sys.exit(3)
with open(os.path.join(sys.argv[1], "ckpt-1"), "w") as f:  # a save into the restored dir
    f.write("saved")
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK), reason="needs root and a system python3"
)
def test_the_gate_hands_the_restored_job_dir_and_the_state_dir_to_the_trainers_user_before_it_opens():
    """On a VM the agent is root and the trainer another user: what the restore wrote after the
    trainer started is the agent's until `open_gate` gives it over, and so is the state dir (the
    trainer starts before the lease, when another agent's trainer may still use them)."""
    import pathlib
    import shutil
    import tempfile

    from survivor.agent.trainer import TrainerProcess, local_job_dir, state_dir

    base = pathlib.Path(tempfile.mkdtemp(prefix="survivor-gate-", dir="/tmp"))  # pytest's tmp is root's alone
    os.chmod(base, 0o755)
    job_dir = pathlib.Path(local_job_dir(str(base)))
    job_dir.mkdir()
    os.makedirs(state_dir(str(base)))
    (pathlib.Path(state_dir(str(base))) / "progress").write_text("last boot's")
    env = {**os.environ, START_GATE_ENV: "stdin", "PYTHONPATH": os.path.dirname(os.path.dirname(__file__))}
    trainer = TrainerProcess.start(
        [SYSTEM_PYTHON, "-c", AFTER_THE_GATE, str(job_dir)], env=env, user="nobody", gated=True
    )
    trainer.workdir = str(base)
    try:
        assert os.stat(job_dir).st_uid == 0 and os.listdir(state_dir(str(base))) == ["progress"]  # not yet
        (job_dir / "restored").mkdir()  # the restore, as root, while the trainer waits
        (job_dir / "restored" / "state").write_text("x")
        os.chown(job_dir, 0, 0)  # a restore that replaced the dir
        trainer.open_gate()
        assert trainer.wait(60) == 0, list(trainer.tail)
        assert (job_dir / "ckpt-1").read_text() == "saved"
        assert os.stat(job_dir / "restored" / "state").st_uid == os.stat(job_dir / "ckpt-1").st_uid != 0
        assert os.listdir(state_dir(str(base))) == [] and os.stat(state_dir(str(base))).st_uid != 0
    finally:
        trainer.kill()
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow  # two TensorFlow processes
def test_the_gated_trainer_runs_its_step_before_the_gate_and_trains_as_if_it_had_not(tmp_path):
    """What a gated trainer does before `go` (import, devices, model, its step traced and run once
    on zeros) reads nothing of the job dir, and leaves no trace in the training: the steps run on
    that one trace, and six of them end bit for bit where six of a trainer without a gate end."""
    from tests.tf_resume import assert_bitwise_equal, checkpoint_values, run_trainer

    job_dir = tmp_path / "job"
    env = {
        **os.environ,
        START_GATE_ENV: "stdin",
        "SURVIVOR_PROGRESS_FILE": str(tmp_path / "progress"),
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    trainer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "survivor.trainers.mlp",
            "--job-dir",
            str(job_dir),
            "--train-steps",
            "6",
            "--num-gpus",
            "2",
            "--log-steps",
            "3",
        ],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        before = []
        for line in trainer.stdout:
            before.append(line.decode())
            if line.startswith(b"ready at the start gate"):
                break
        assert before and before[-1].startswith("ready at the start gate (model built, step traced and run once)"), (
            before[-5:]
        )
        assert not job_dir.exists()  # not even created
        trainer.stdin.write(b"go\n")
        trainer.stdin.close()
        after = trainer.stdout.read().decode()
        assert trainer.wait(120) == 0, after[-2000:]
    finally:
        trainer.kill()
    assert "starting from scratch" in after and "training finished at step 6" in after, after[-2000:]
    assert " traces 1" in after, after[-2000:]
    assert (job_dir / HPARAMS_FILE).exists()
    ungated = str(tmp_path / "ungated")
    run_trainer("survivor.trainers.mlp", ungated, ["--train-steps", "6", "--num-gpus", "2", "--log-steps", "3"])
    assert_bitwise_equal(checkpoint_values(ungated), checkpoint_values(str(job_dir)))


def test_the_trainer_starts_before_the_job_dir_is_read_and_a_finished_job_ends_it_untouched(tmp_path, instance_factory):
    """Step 1b: the gated trainer starts as soon as the spec is read, before the job dir, the lease
    and the journal; a job the journal says is DONE ends it at its gate, its dirs never handed over."""
    job_dir = str(tmp_path / "jobdir")
    Journal(open_storage(job_dir)).mark_done({"step": 40})
    vm = instance_factory(
        yaml.safe_dump(
            {"job_dir": job_dir, "train_steps": 40, "on_finish": "keep-alive", "trainer": {"builtin": "mlp"}}
        )
    )
    vm.boot()
    assert vm.wait(60) == 0, open(vm.log_path()).read()[-3000:]
    messages = [line["message"] for line in vm.log_lines()]
    assert messages.index("trainer started") < next(i for i, m in enumerate(messages) if "says DONE" in m), messages
    assert not _alive(_trainer_pid(vm, 1))
    assert not os.path.exists(os.path.join(vm.workdir, "job"))


def test_a_trainer_whose_gpu_driver_is_being_installed_starts_once_the_job_is_held(tmp_path):
    """Where this boot still installs the GPUs' driver, the trainer's start waits for it, and a job
    that is DONE must not wait that long to be seen: the trainer starts at step 5 then, after the
    lease and the journal's record of this attempt, as before."""
    from survivor.local.instance import LocalInstance

    job_dir = str(tmp_path / "jobdir")
    spec = yaml.safe_dump({"job_dir": job_dir, "train_steps": 40, "num_gpus": 2, "trainer": {"builtin": "mlp"}})
    vm = LocalInstance(
        {"survivor-job": spec, "install-nvidia-driver": "True"}, str(tmp_path / "vm"), python=sys.executable
    )
    try:
        vm.boot()
        vm.wait_for_message("waiting for the GPU driver")
        assert len(Journal(open_storage(job_dir)).attempts()) == 1  # the attempt is recorded: the job is held
        assert not any(line.get("message") == "trainer started" for line in vm.log_lines())
        assert vm.preempt(soft_off=True, hard_off_after=30) == 0
    finally:
        vm.close()
