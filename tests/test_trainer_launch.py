"""Starting the trainer: argv built in one place, no shell, never root, code delivered first."""

import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import zipfile

import pytest

from survivor.agent.delivery import deliver, git_plan
from survivor.agent.gpus import decide_gpu_count, parse_nvidia_smi_list
from survivor.spec import JobSpec, TrainerSpec
from survivor.spec import BUILTIN_FLAGS, BUILTIN_TRAINERS
from survivor.agent.trainer import (
    TrainerProcess,
    TrainerUserError,
    decide_user,
    read_progress,
    read_record,
    read_saved,
    save_signal,
)
from survivor.spec import trainer_argv
from survivor.trainers.contract import (
    PROGRESS_RECORD_BYTES,
    parse_progress,
    parse_record,
    progress_record,
    report_progress,
    report_saved,
)
from tests.waiting import PATIENCE, wait_until


def spec(**trainer):
    return JobSpec.from_mapping(
        {
            "job_dir": "gs://bucket-1/run",
            "data_dir": "gs://bucket-1/data",
            "train_steps": 1000,
            "checkpoint_steps": 100,
            "trainer": trainer or {"builtin": "cifar10"},
            "hyperparameters": {"momentum": 0.9, "batchNormEpsilon": "1e-05", "use_nesterov": True, "no-export": None},
        }
    )


def test_argv_carries_the_contract_flags_and_kebab_case_hyperparameters():
    argv = trainer_argv(
        spec(), python="/venv/bin/python", job_dir="/var/lib/survivor/job", data_dir="gs://bucket-1/data", num_gpus=4
    )
    assert argv == [
        "/venv/bin/python",
        "-m",
        "survivor.trainers.cifar10",
        "--job-dir",
        "/var/lib/survivor/job",
        "--data-dir",
        "gs://bucket-1/data",
        "--train-steps",
        "1000",
        "--num-gpus",
        "4",
        "--checkpoint-steps",
        "100",
        "--momentum",
        "0.9",
        "--batch-norm-epsilon",
        "1e-05",
        "--use-nesterov",
        "true",
        "--no-export",
    ]


def test_a_metadata_value_stays_one_argument_never_a_shell_word():
    hostile = JobSpec.from_metadata(
        {"jobDir": "gs://bucket-1/x", "trainSteps": "5", "optimizer": "adam; rm -rf / #", "note": "$(reboot)"}
    )
    argv = trainer_argv(hostile, python="python", job_dir="/j", data_dir=None, num_gpus=0)
    assert "adam; rm -rf / #" in argv and "$(reboot)" in argv
    out = subprocess.run(
        [sys.executable, "-c", "import sys; print(sys.argv[1:])", *argv[3:]], capture_output=True, text=True
    ).stdout
    assert "'adam; rm -rf / #'" in out and "'$(reboot)'" in out


def test_argv_trainers_keep_their_own_arguments_first():
    argv = trainer_argv(
        spec(argv=["/opt/bin/train", "--model", "big"]), python="python", job_dir="/j", data_dir=None, num_gpus=0
    )
    assert argv[:3] == ["/opt/bin/train", "--model", "big"] and argv[3:5] == ["--job-dir", "/j"]


def flags(argv):
    return [a for a in argv if a.startswith("--")]


def test_a_flag_the_spec_does_not_name_is_never_invented():
    """The recipe's own trainer (wrapper/train.py) exits 2 on any flag it does not know: --num-gpus
    goes only to a trainer the spec gives num_gpus, or to a built-in one, which declares it."""
    recipe = JobSpec.from_metadata(
        {
            "jobDir": "gs://bucket-1/x",
            "trainSteps": "50",
            "checkpointSteps": "5",
            "trainerModule": "wrapper.train",
            "hparam1": "3",
            "hparam2": "0.5",
        }
    )
    argv = trainer_argv(recipe, python="python", job_dir="/j", data_dir=recipe.data_dir, num_gpus=0)
    assert flags(argv) == [
        "--job-dir",
        "--train-steps",
        "--checkpoint-steps",
        "--hyperparameter-1",
        "--hyperparameter-2",
    ]
    named = JobSpec.from_metadata(
        {"jobDir": "gs://bucket-1/x", "trainSteps": "50", "numGpus": "all", "trainerModule": "my.trainer"}
    )
    assert "--num-gpus" in flags(trainer_argv(named, python="python", job_dir="/j", data_dir=None, num_gpus=2))
    builtin_by_module = JobSpec.from_mapping(
        {"job_dir": "/x", "train_steps": 5, "trainer": {"module": "survivor.trainers.mlp"}}
    )
    argv = trainer_argv(builtin_by_module, python="python", job_dir="/j", data_dir=None, num_gpus=2)
    assert argv[argv.index("--num-gpus") + 1] == "2"
    own = spec(argv=["/opt/bin/train"])
    assert "--num-gpus" not in trainer_argv(own, python="python", job_dir="/j", data_dir=None, num_gpus=4)


@pytest.mark.parametrize("name", sorted(BUILTIN_TRAINERS))
def test_each_builtin_trainer_accepts_the_flags_it_declares(name):
    """BUILTIN_FLAGS is a promise the agent acts on: each built-in trainer's parser takes every flag."""
    helped = subprocess.run(
        [sys.executable, "-m", BUILTIN_TRAINERS[name], "--help"], capture_output=True, text=True, timeout=120
    )
    assert helped.returncode == 0, helped.stderr[-500:]
    for flag in BUILTIN_FLAGS:
        assert flag in helped.stdout, f"{name} does not take {flag}"
    argv = trainer_argv(
        JobSpec.from_mapping(
            {"job_dir": "/x", "train_steps": 5, "checkpoint_steps": 2, "data_dir": "/d", "trainer": {"builtin": name}}
        ),
        python="python",
        job_dir="/j",
        data_dir="/d",
        num_gpus=0,
    )
    assert set(flags(argv)) == BUILTIN_FLAGS


def test_the_save_signal_goes_only_to_a_trainer_that_declares_one():
    assert save_signal(spec().trainer) == signal.SIGUSR1  # built-in
    assert save_signal(spec(argv=["/opt/bin/train"]).trainer) is None  # SIGUSR1 would end it
    assert save_signal(spec(argv=["/opt/bin/train"], save_signal="SIGUSR2").trainer) == signal.SIGUSR2


def test_the_dummy_trainer_saves_on_its_save_signal_and_keeps_training(tmp_path):
    job = tmp_path / "job"
    argv = [
        sys.executable,
        "-m",
        "survivor.trainers.dummy",
        "--job-dir",
        str(job),
        "--train-steps",
        "100000",
        "--checkpoint-steps",
        "100000",
        "--step-seconds",
        "0.01",
        "--on-sigterm",
        "save",
    ]
    progress = tmp_path / "progress"
    proc = TrainerProcess.start(argv, env={**os.environ, "SURVIVOR_PROGRESS_FILE": str(progress)})
    try:
        wait_until(lambda: read_progress(str(progress)) is not None, PATIENCE, "the trainer's first step", 0.02)
        proc.request_save(signal.SIGUSR1)
        checkpoints = wait_until(
            lambda: list(job.glob("dummy-checkpoint-*.json")), PATIENCE, "a checkpoint after SIGUSR1", 0.02
        )
        saved = [int(p.name.split("-")[-1].split(".")[0]) for p in checkpoints]
        assert len(saved) == 1
        wait_until(  # still training: steps past the save (or an exit, which the assert below refuses)
            lambda: (read_progress(str(progress)) or 0) > saved[0] + 5 or proc.poll() is not None,
            PATIENCE,
            f"five steps past the save at step {saved[0]}",
            0.02,
        )
        assert proc.poll() is None and read_progress(str(progress)) > saved[0] + 5
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


@pytest.mark.parametrize(
    "euid, requested, allow_root, expected",
    [
        (0, "trainer", False, "trainer"),
        (1000, "trainer", False, None),  # not root: cannot switch, runs as the agent's own user
        (1000, None, False, None),
        (0, None, True, None),
    ],
)
def test_decide_user(euid, requested, allow_root, expected):
    assert decide_user(euid, requested, allow_root) == expected


@pytest.mark.parametrize(
    "euid, requested, allow_root, expected",
    [
        (0, None, False, "survivor-trainer"),  # the VM's unit: a root agent, a spec without gceUser
        (0, None, True, "survivor-trainer"),
        (0, "bob", False, "bob"),  # the spec's own user still wins (the agent closes the metadata server to it)
        (1000, None, False, None),  # not root: cannot switch
    ],
)
def test_a_root_agent_runs_the_trainer_as_the_units_trainer_user(euid, requested, allow_root, expected):
    assert decide_user(euid, requested, allow_root, default="survivor-trainer") == expected


def test_the_metadata_server_is_closed_to_a_specs_own_user_only_on_a_vm(monkeypatch):
    """The agent's own rule: on a VM (the real metadata server) for a spec's own user; never where
    the metadata server is a stand-in or absent; the trainer does not start when it cannot be added."""
    from survivor.agent import trainer
    from survivor.agent.metadata_firewall import FirewallError
    from survivor.metadata import MetadataClient

    closed: list[int] = []
    monkeypatch.setattr(trainer, "close_to", closed.append)
    trainer.close_metadata_server("nobody", None)  # off Compute Engine
    trainer.close_metadata_server("nobody", MetadataClient("127.0.0.1:1"))  # an emulator
    assert closed == []
    trainer.close_metadata_server("nobody", MetadataClient("metadata.google.internal"))
    assert closed == [pwd.getpwnam("nobody").pw_uid]
    with pytest.raises(TrainerUserError, match="does not exist"):
        trainer.close_metadata_server("no-such-user-x", MetadataClient("metadata.google.internal"))

    def refused(uid: int) -> None:
        raise FirewallError("no iptables on this image")

    monkeypatch.setattr(trainer, "close_to", refused)
    with pytest.raises(TrainerUserError, match="cannot be closed to user 'nobody': no iptables"):
        trainer.close_metadata_server("nobody", MetadataClient("metadata.google.internal"))


@pytest.mark.parametrize("euid, requested", [(0, None), (0, "root"), (1000, "root")])
def test_the_trainer_never_runs_as_root(euid, requested):
    with pytest.raises(TrainerUserError):
        decide_user(euid, requested, allow_root=False)


def test_gpu_count_from_nvidia_smi():
    listing = "GPU 0: Tesla T4 (UUID: GPU-1)\nGPU 1: Tesla T4 (UUID: GPU-2)\n"
    assert parse_nvidia_smi_list(listing) == 2
    assert parse_nvidia_smi_list("NVIDIA-SMI has failed") == 0
    assert decide_gpu_count(None, 4) == 4
    assert decide_gpu_count(2, 4) == 2
    assert decide_gpu_count(8, 4) == 4
    assert decide_gpu_count(2, 0) == 2  # CPU machine: logical devices stand in


def test_git_commands_put_a_separator_before_the_url():
    first = git_plan("https://example.com/r.git", "v1", "/w/src", origin=None)
    assert first.fresh and first.commands[0] == ["git", "clone", "--quiet", "--", "https://example.com/r.git", "/w/src"]
    again = git_plan("https://example.com/r.git", None, "/w/src", origin="https://example.com/r.git")
    assert not again.fresh and again.commands[0][:4] == ["git", "-C", "/w/src", "fetch"]


def _git(*args, cwd):
    subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )


def test_trainer_code_from_git_is_cloned_then_updated_on_the_next_boot(tmp_path):
    repo = tmp_path / "repo"
    (repo / "mytrainer").mkdir(parents=True)
    (repo / "mytrainer" / "__init__.py").write_text("VERSION = 1\n")
    _git("init", "-q", "-b", "main", cwd=repo)
    _git("add", ".", cwd=repo)
    _git("commit", "-qm", "v1", cwd=repo)
    workdir = tmp_path / "work"
    delivered = deliver(TrainerSpec(module="mytrainer", git_url=str(repo), git_ref="main"), str(workdir))
    check = [sys.executable, "-c", "import mytrainer; print(mytrainer.VERSION)"]
    env = {**os.environ, "PYTHONPATH": delivered.pythonpath[0]}
    assert subprocess.run(check, env=env, capture_output=True, text=True).stdout.strip() == "1"
    # another size: Python's cached bytecode is known stale by the source's mtime in whole seconds and
    # its size, and this "next boot" comes within the same second (a real one never does)
    (repo / "mytrainer" / "__init__.py").write_text("VERSION = 20\n")
    _git("commit", "-qam", "v2", cwd=repo)
    deliver(TrainerSpec(module="mytrainer", git_url=str(repo), git_ref="origin/main"), str(workdir))
    assert subprocess.run(check, env=env, capture_output=True, text=True).stdout.strip() == "20"


def make_wheel(path, package="pkgtrainer", version="0.1"):
    dist = f"{package}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{package}/__init__.py", "")
        whl.writestr(f"{package}/task.py", "import sys\nprint('packaged trainer', sys.argv[1:])\n")
        whl.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        whl.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{dist}/RECORD", "")


def test_a_packaged_trainer_is_fetched_and_installed_like_cloud_ml_engine_packages(tmp_path, bucket):
    from survivor.jobdir.storage import GcsStorage

    wheel = tmp_path / "pkgtrainer-0.1-py3-none-any.whl"
    make_wheel(wheel)
    GcsStorage(f"gs://{bucket}").upload([(str(wheel), "packages/pkgtrainer-0.1-py3-none-any.whl")])

    def fetch(url, local):
        GcsStorage(f"gs://{bucket}").download([(url.split(bucket + "/", 1)[1], local)])

    url = f"gs://{bucket}/packages/pkgtrainer-0.1-py3-none-any.whl"
    delivered = deliver(TrainerSpec(module="pkgtrainer.task", package=url), str(tmp_path / "work"), fetch=fetch)
    out = subprocess.run(
        [sys.executable, "-m", "pkgtrainer.task", "--job-dir", "/j"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": delivered.pythonpath[0]},
    ).stdout
    assert out.strip() == "packaged trainer ['--job-dir', '/j']"


SYSTEM_PYTHON = "/usr/bin/python3"  # one the unprivileged user can execute (this venv lives under /root)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason="needs a system python3")
def test_an_agent_running_as_root_runs_the_trainer_as_the_named_user(request):
    from survivor.agent import boot as agent

    nobody = pwd.getpwnam("nobody")
    base = tempfile.mkdtemp(prefix="survivor-user-", dir="/tmp")  # not tmp_path: "nobody" must reach it
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    os.chmod(base, 0o755)
    probe = (
        "import os, sys; d = sys.argv[sys.argv.index('--job-dir') + 1]; "
        "open(os.path.join(d, 'ckpt-1.txt'), 'w').write(str(os.getuid()))"
    )
    spec_file = os.path.join(base, "spec.yaml")
    with open(spec_file, "w") as f:
        f.write(
            f"job_dir: {base}/jobdir\ntrain_steps: 1\non_finish: keep-alive\nuser: nobody\n"
            f'trainer: {{argv: [{SYSTEM_PYTHON}, -c, "{probe}"]}}\n'
        )
    code = agent.run(agent.AgentOptions(workdir=os.path.join(base, "work"), spec_file=spec_file))
    assert code == 0
    written = open(os.path.join(base, "work", "job", "ckpt-1.txt")).read()
    assert written == str(nobody.pw_uid)
    assert stat.S_IMODE(os.stat(base).st_mode) == 0o755


def test_wait_sees_an_exit_during_the_wait_and_times_out_on_a_running_trainer():
    quick = TrainerProcess.start(
        [sys.executable, "-c", "import time; time.sleep(0.3); raise SystemExit(7)"], env=dict(os.environ)
    )
    assert quick.wait(timeout=0.01) is None  # still running
    assert quick.wait(timeout=30) == 7  # exits while we wait: its code, not a timeout
    assert quick.wait(timeout=0) == 7  # and stays exited

    slow = TrainerProcess.start([sys.executable, "-c", "import time; time.sleep(60)"], env=dict(os.environ))
    try:
        assert slow.wait(timeout=0.2) is None
    finally:
        slow.kill()
    assert slow.wait(timeout=30) == -9


def test_progress_is_rewritten_in_place_and_a_half_written_record_is_refused(tmp_path):
    path = str(tmp_path / "progress.json")
    assert read_progress(path) is None
    report_progress(123456, path)
    report_progress(7, path)  # a shorter number covers the longer one whole
    assert read_progress(path) == 7
    assert os.path.getsize(path) == PROGRESS_RECORD_BYTES
    os.remove(path)  # the agent removes it before each start: the next report makes a new one
    report_progress(8, path)
    assert read_progress(path) == 8
    assert parse_progress('{"step": 12}') == 12  # a trainer writing the plain form atomically
    assert parse_progress(b'{"step": 1299, "check": 1300}') is None  # copies differ: a write half done
    assert parse_progress(b'{"step": 13') is None
    assert parse_progress(b"") is None
    # a step no job has is not recorded: the attempt record would refuse it (jobdir/journal.py MAX_STEP)
    assert parse_progress(b'{"step": -1000000000000000000}') is None
    assert parse_progress(b'{"step": 1000000000001}') is None
    path = str(tmp_path / "absurd.json")
    report_progress(-(10**18), path)
    assert read_progress(path) is None  # what the agent reads, and would record as reached


def test_a_save_reported_on_notice_is_read_only_while_nothing_trained_since(tmp_path):
    path = str(tmp_path / "progress.json")
    report_progress(2**63 - 1, path)
    report_saved(41, path)  # the largest numbers fit the record: nothing of an older one is left over
    assert read_record(path) == (41, 41) and read_saved(path) == 41
    report_progress(42, path)  # trained on (a trainer that saves and goes on): no longer a save on notice
    assert read_saved(path) is None and read_progress(path) == 42
    big = progress_record(2**62, 2**62)
    assert len(big) == PROGRESS_RECORD_BYTES and parse_record(big) == (2**62, 2**62)
    # a read that mixed two records (the step of one, the save of the other) fails the check
    assert parse_record(b'{"step": 43, "saved": 41, "check": 82}') is None
    assert parse_record(b'{"step": 41, "saved": 41, "check": 82}') == (41, 41)


def test_a_reader_racing_the_writer_never_sees_a_wrong_step(tmp_path):
    path = str(tmp_path / "progress.json")
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys\nfrom survivor.trainers.contract import report_progress\n"
                "for step in range(1, 200001):\n    report_progress(step, sys.argv[1])\n"
            ),
            path,
        ]
    )
    seen = []
    while writer.poll() is None:
        step = read_progress(path)
        if step is not None:
            seen.append(step)
    assert writer.wait() == 0
    assert seen == sorted(seen), "a step went backwards: a torn record was believed"
    assert all(1 <= s <= 200000 for s in seen)
    assert read_progress(path) == 200000


FINISHED_THEN_TERM = """
import os, signal, sys, time
from survivor.trainers.contract import StopRequest

class NoticeWhileExiting:
    def __del__(self):  # runs as the interpreter finalizes, after it has reset the signal handlers
        os.kill(os.getpid(), signal.SIGTERM)  # the agent's SIGTERM on a notice, as the trainer exits
        time.sleep(0.2)

stop = StopRequest.install()
notice = NoticeWhileExiting()
sys.exit(0)  # trained to the end
"""


def test_a_sigterm_as_a_finished_trainer_exits_leaves_its_own_exit_code(tmp_path):
    """A trainer that used the contract's StopRequest and finished exits 0 even when the notice's
    SIGTERM comes during Python's finalization (seen as -15 in a resume test under load)."""
    script = tmp_path / "trainer.py"
    script.write_text(FINISHED_THEN_TERM)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    bare = tmp_path / "bare.py"  # the same without the contract: the case the rule is for
    bare.write_text(FINISHED_THEN_TERM.replace("stop = StopRequest.install()", "pass"))
    assert subprocess.run([sys.executable, str(bare)], timeout=60).returncode == -signal.SIGTERM
