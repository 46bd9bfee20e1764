"""The agent end to end: real agent processes, each with its own metadata emulator, a job dir on
the local file system or in fake-gcs-server, and the dummy trainer counting every step it runs."""

import json
import os
import random
import re
import subprocess

import pytest

from survivor.jobdir.journal import Journal
from survivor.jobdir.storage import open_storage
from survivor.jobdir.store import CheckpointStore
from tests.conftest import PYTHON, dummy_spec, executed_steps
from tests.waiting import PATIENCE, wait_until


def journal_of(job_dir):
    return Journal(open_storage(job_dir)).state()


def run_to_completion(vm, timeout=120):
    vm.boot(wipe=True)
    code = vm.wait(timeout)
    assert code == 0, f"agent exit {code}; see {vm.log_path()}"


@pytest.mark.parametrize("how", ["metadata-flag", "sigterm"])
def test_preempted_at_a_random_step_resumes_at_the_emergency_checkpoint(how, job_dir, tmp_path, instance_factory):
    train_steps = 120  # 75 or more steps after the notice: a late notice still comes before the end
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=train_steps))
    vm.boot()
    target = random.randint(5, 45)
    vm.wait_for_step(target)
    if how == "metadata-flag":
        vm.set_preempted()  # a notice duration: the flag comes before the soft off
        code = vm.wait(30)  # within a Spot VM's 30 s before the hard power-off
    else:
        code = vm.preempt(soft_off=True)  # no notice duration: SIGTERM is the first word
    assert code == 0

    first = journal_of(job_dir).attempts[-1]
    assert first.outcome == "preempted" if how == "metadata-flag" else first.outcome in ("preempted", "stopped")
    assert first.steps_lost is not None and first.steps_lost <= 1
    emergency = first.end_step
    assert emergency >= target

    run_to_completion(vm)
    state = journal_of(job_dir)
    second = state.attempts[-1]
    assert second.restored_step == emergency
    assert second.outcome == "finished"
    assert state.done["step"] == train_steps

    steps = executed_steps(tmp_path)
    restarted_at = steps.index(emergency + 1, emergency)  # the second process's first step
    assert steps[restarted_at - 1] in (emergency, emergency + 1)
    assert len(steps) == train_steps + first.steps_lost
    assert steps[-1] == train_steps


def test_a_trainer_that_ignores_sigterm_resumes_from_its_newest_file(job_dir, tmp_path, instance_factory):
    """The recipe's dummy trainer: writes a file every 5 steps and ignores SIGTERM."""
    # 160 steps: the 132 or more left (4 s) take longer than the trainer's share of the 2 s grace, so it is
    # killed, however late the notice comes on a loaded machine
    vm = instance_factory(
        dummy_spec(job_dir, tmp_path, train_steps=160, on_sigterm="ignore", checkpoint_steps=5, grace_seconds=2)
    )
    vm.boot()
    vm.wait_for_step(random.randint(12, 28))
    vm.set_preempted()
    assert vm.wait(30) == 0  # within a Spot VM's 30 s before the hard power-off
    first = journal_of(job_dir).attempts[-1]
    assert first.end_step % 5 == 0 and first.end_step >= 10
    assert first.outcome == "preempted" and first.reason.startswith("the trainer did not save on the notice"), first
    run_to_completion(vm)
    state = journal_of(job_dir)
    assert state.attempts[-1].restored_step == first.end_step
    assert state.done["step"] == 160


def test_a_job_dir_that_says_done_is_never_trained_again(job_dir, tmp_path, instance_factory):
    Journal(open_storage(job_dir)).mark_done({"step": 60})
    vm = instance_factory(dummy_spec(job_dir, tmp_path))
    run_to_completion(vm, timeout=60)
    assert executed_steps(tmp_path) == []
    assert journal_of(job_dir).attempts == []
    assert any(line["message"].startswith("the job dir says DONE") for line in vm.log_lines())


def test_repeated_failed_starts_write_failed_and_stop(job_dir, tmp_path, instance_factory):
    spec = dummy_spec(job_dir, tmp_path, extra_args=["--fail-at-start"], max_failed_attempts=3)
    vm = instance_factory(spec)
    codes = []
    for _ in range(3):
        vm.boot(wipe=True)
        codes.append(vm.wait(60))
    assert codes == [1, 1, 0]  # systemd restarts the first two; the third gives up for good
    state = journal_of(job_dir)
    assert state.failed is not None
    assert "3 attempts in a row failed without progress" in state.failed["reason"]
    assert "exited with code 3" in state.failed["reason"]
    vm.boot(wipe=True)  # a MIG recreating it anyway: it does not try again
    assert vm.wait(60) == 0
    assert len(journal_of(job_dir).attempts) == 3


def test_killed_without_notice_resumes_from_the_last_periodic_commit(job_dir, tmp_path, instance_factory):
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=100, checkpoint_steps=10))
    vm.boot()
    store = CheckpointStore(open_storage(job_dir))
    vm.wait_for_step(27)
    wait_until(store.latest, 30, "a periodic commit")  # step 10's or 20's, by now
    vm.kill()  # hard off with no notice at all
    reached = max(executed_steps(tmp_path))
    committed = store.latest().step
    # a periodic checkpoint (every 10), at most the step reached: 10 or 20, or 30 or 40 on a machine
    # that stalled the test past them before the kill
    assert committed % 10 == 0 and 10 <= committed <= reached < 100
    run_to_completion(vm)
    state = journal_of(job_dir)
    assert state.attempts[-1].restored_step == committed
    assert state.done["step"] == 100


def test_an_invalid_spec_names_the_key_and_writes_failed(tmp_path, instance_factory):
    from survivor.local.instance import LocalInstance

    job_dir = str(tmp_path / "jobdir")
    vm = LocalInstance(
        {"jobDir": job_dir, "trainSteps": "lots", "momentum": "0.9"}, str(tmp_path / "vm"), python=PYTHON
    )
    try:
        vm.boot()
        assert vm.wait(60) == 2
        messages = [line["message"] for line in vm.log_lines()]
        assert "job spec: trainSteps = 'lots': expected a whole number >= 1" in messages
        failed = journal_of(job_dir).failed
        assert "trainSteps" in failed["reason"]
    finally:
        vm.close()


def test_logs_are_one_json_object_per_line_with_severity(job_dir, tmp_path, instance_factory):
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=10))
    run_to_completion(vm)
    raw = open(vm.log_path(), encoding="utf-8").read().splitlines()
    parsed = [json.loads(line) for line in raw if line.strip()]
    assert len(parsed) == len([line for line in raw if line.strip()])
    assert all({"severity", "message", "time"} <= set(entry) for entry in parsed)
    assert any(entry.get("source") == "trainer" for entry in parsed)
    assert any(entry["message"] == "training finished; DONE written" for entry in parsed)


def test_guest_attributes_show_state_and_step(job_dir, tmp_path, instance_factory):
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=10))
    run_to_completion(vm)
    guest = vm.metadata.get("instance/guest-attributes/survivor")
    assert guest == {"state": "done", "step": "10"}


def test_a_sigterm_while_the_agent_is_still_starting_is_a_clean_stop(job_dir, tmp_path, instance_factory):
    vm = instance_factory(dummy_spec(job_dir, tmp_path))
    vm.boot()
    import signal

    def handles_sigterm() -> bool:  # SigCgt: the signals the process catches, a hex mask
        with open(f"/proc/{vm.process.pid}/status", encoding="ascii") as f:
            caught = next(line.split()[1] for line in f if line.startswith("SigCgt:"))
        return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)

    # past the interpreter's start (a SIGTERM before any Python runs kills any process), at the agent's
    # first handler, which comes before its imports and set-up: a fixed 0.4 s was not always enough
    wait_until(handles_sigterm, PATIENCE, "the agent's SIGTERM handler installed", interval=0.005)
    vm.soft_off()
    assert vm.wait(30) == 0
    attempts = journal_of(job_dir).attempts
    assert all(a.outcome in ("stopped", "preempted") for a in attempts)
    assert executed_steps(tmp_path) == [] or attempts[-1].steps_lost == 0


FINISHED_THEN_TERM = """
import os, signal, sys, time
from survivor.commands.main import main

class SoftOffWhileExiting:
    def __del__(self):  # runs as the interpreter finalizes, after it has reset the signal handlers
        os.kill(os.getpid(), signal.SIGTERM)  # the soft off that follows a finished boot
        time.sleep(0.2)

code = main(sys.argv[1:])
soft_off = SoftOffWhileExiting()
sys.exit(code)
"""


def test_a_sigterm_after_the_boot_ended_leaves_the_agents_own_exit_code(tmp_path):
    """A finished boot's agent exits with the code it chose, even when the soft off that its own
    leaving of the group brings comes while it exits (Python's finalization would otherwise die of
    it: a simulator test saw exit -15 where the agent had chosen 0)."""
    spec = tmp_path / "job.yaml"
    spec.write_text(dummy_spec(str(tmp_path / "jobdir"), tmp_path, train_steps=3, on_finish="auto"))
    env = {k: v for k, v in os.environ.items() if k != "GCE_METADATA_HOST"}
    done = subprocess.run(
        [
            PYTHON,
            "-c",
            FINISHED_THEN_TERM,
            "agent",
            "--config",
            str(spec),
            "--workdir",
            str(tmp_path / "work"),
            "--allow-root-trainer",
        ],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert journal_of(str(tmp_path / "jobdir")).done["step"] == 3


def test_an_agent_off_gce_with_a_spec_file_just_finishes(tmp_path, monkeypatch):
    from survivor.agent import boot as agent

    monkeypatch.delenv("GCE_METADATA_HOST", raising=False)
    spec = tmp_path / "job.yaml"
    spec.write_text(dummy_spec(str(tmp_path / "jobdir"), tmp_path, train_steps=5, on_finish="auto"))
    code = agent.run(agent.AgentOptions(workdir=str(tmp_path / "work"), spec_file=str(spec), allow_root_trainer=True))
    assert code == 0
    assert journal_of(str(tmp_path / "jobdir")).done["step"] == 5


def test_preempted_before_the_trainers_first_step_loses_nothing(job_dir, tmp_path, instance_factory):
    vm = instance_factory(dummy_spec(job_dir, tmp_path, on_sigterm="die", extra_args=["--startup-seconds", "5"]))
    vm.boot()
    pid_file = os.path.join(vm.workdir, "trainer.pid")
    wait_until(lambda: os.path.exists(pid_file), PATIENCE, "the trainer started (its pid file)", interval=0.02)
    vm.set_preempted()
    assert vm.wait(30) == 0
    attempt = journal_of(job_dir).attempts[-1]
    assert attempt.outcome == "preempted" and attempt.steps_lost == 0 and attempt.reached_step == 0


def test_a_gpu_maintenance_notice_commits_once_training_goes_on_and_the_stop_saves_again(
    job_dir, tmp_path, instance_factory
):
    """TERMINATE_ON_HOST_MAINTENANCE comes an hour before a GPU VM's stop: commit now, keep training;
    the stop itself (SIGTERM) saves again; no step is lost, none is run twice."""
    import time

    import yaml

    spec = yaml.safe_load(dummy_spec(job_dir, tmp_path, train_steps=300, checkpoint_steps=1000))
    spec["trainer"]["save_signal"] = "SIGUSR1"  # the contract's "save now, keep training"
    vm = instance_factory(yaml.safe_dump(spec))
    store = CheckpointStore(open_storage(job_dir))
    vm.boot()
    vm.wait_for_step(15)
    assert store.committed() == []  # no periodic checkpoint this early
    vm.metadata.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    first = wait_until(store.committed, PATIENCE, "a commit after the maintenance notice")
    assert len(first) == 1
    saved = first[0].step
    assert saved >= 15
    vm.wait_for_step(saved + 40)  # the trainer was not stopped
    assert vm.running()
    time.sleep(1.0)  # a window for a second commit the notice must not bring: waiting for nothing, no condition
    assert [m.step for m in store.committed()] == [saved]  # one commit for one notice
    vm.soft_off()  # the host's stop, when it comes, as any other
    assert vm.wait(30) == 0
    attempt = journal_of(job_dir).attempts[-1]
    assert attempt.notice == "signal" and attempt.steps_lost == 0
    final = attempt.end_step
    assert [m.step for m in store.committed()] == [final, saved] and final >= saved + 40
    messages = [line["message"] for line in vm.log_lines()]
    assert messages.count("maintenance notice: checkpoint committed; training goes on") == 1
    assert sum("asked to save at step" in m for m in messages) == 1
    assert sum("resuming at step" in m for m in messages) == 1  # one trainer process all boot long

    run_to_completion(vm)
    assert journal_of(job_dir).done["step"] == 300
    assert executed_steps(tmp_path) == list(range(1, 301))  # 0 steps lost, none run twice


def test_a_maintenance_notice_without_a_save_signal_commits_the_newest_checkpoint_and_trains_on(
    job_dir, tmp_path, instance_factory
):
    """A trainer that declares no save signal never gets one (SIGUSR1 would end it)."""
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=150, checkpoint_steps=10, sync_seconds=30))
    vm.boot()
    vm.wait_for_step(25)
    vm.metadata.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    store = CheckpointStore(open_storage(job_dir))
    committed = wait_until(store.latest, 10, "the newest checkpoint committed on the notice")
    assert committed.step >= 20 and committed.step % 10 == 0
    assert vm.wait(60) == 0  # it trained on to the end: the notice did not stop it
    assert journal_of(job_dir).done["step"] == 150
    assert not any("asked to save" in line["message"] for line in vm.log_lines())


@pytest.mark.slow
def test_the_builtin_tensorflow_loop_saves_on_a_maintenance_notice_and_trains_on(tmp_path, instance_factory):
    import yaml

    job_dir = str(tmp_path / "jobdir")
    spec = yaml.safe_dump(
        {
            "job_dir": job_dir,
            "train_steps": 2000,
            "checkpoint_steps": 100000,
            "on_finish": "keep-alive",
            "sync_seconds": 0.5,
            "trainer": {"builtin": "mlp"},
            "hyperparameters": {"step-seconds": 0.02, "log-steps": 50},
        }
    )
    vm = instance_factory(spec)
    store = CheckpointStore(open_storage(job_dir))
    vm.boot()
    vm.wait_for_step(20, timeout=240)
    vm.metadata.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    saved = wait_until(store.committed, 60, "a commit after the maintenance notice")[0].step
    vm.wait_for_step(saved + 20, timeout=60)
    # one step, maybe two manifests of it: a first save's state file, written after its shards, may
    # commit the step again (mirror.same_step)
    assert vm.running() and {m.step for m in store.committed()} == {saved}
    vm.soft_off()
    assert vm.wait(60) == 0
    attempt = journal_of(job_dir).attempts[-1]
    assert attempt.steps_lost == 0 and attempt.end_step >= saved + 20
    steps = [m.step for m in store.committed()]  # newest first; either save may be committed twice
    assert steps[0] == attempt.end_step and steps[-1] == saved and set(steps) == {attempt.end_step, saved}
    assert sum("asked to save at step" in line["message"] for line in vm.log_lines()) == 1


def test_a_finish_action_without_compute_credentials_is_one_log_line_not_a_traceback(tmp_path, instance_factory):
    # on_finish stop on a VM whose Compute client cannot be built (no credentials here): the agent
    # says the finish action failed and exits with the retry code; before, the client's
    # DefaultCredentialsError escaped Boot._finish as a traceback.
    job_dir = str(tmp_path / "jobdir")
    vm = instance_factory(
        dummy_spec(job_dir, tmp_path, train_steps=5, on_finish="stop"),
        env={"GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "none.json")},
    )
    vm.boot()
    assert vm.wait(90) == 1
    assert journal_of(job_dir).done is not None
    failed = [line for line in vm.log_lines() if line["message"].startswith("finish action failed")]
    assert failed and failed[0]["action"] == "stop"
    assert "Traceback" not in open(vm.log_path()).read()


TEARDOWN_SECONDS = 15


@pytest.mark.parametrize("reports_saved", [True, False])
def test_safe_means_committed_not_exited(reports_saved, tmp_path, instance_factory):
    """A trainer that reports its save on the notice (contract.report_saved) and then takes 15 s to
    exit (TensorFlow's teardown): the agent exits as soon as that save is committed, with the step
    the trainer reached. One that does not report it is waited for, as before."""
    job_dir = str(tmp_path / "jobdir")
    # 15 s, not 8: the commit a loaded machine slows must stay well apart from the exit it skips
    extra = ["--exit-seconds", str(TEARDOWN_SECONDS)] + ([] if reports_saved else ["--no-report-saved"])
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=400, extra_args=extra, grace_seconds=60))
    vm.boot()
    vm.wait_for_step(10)
    vm.set_preempted()
    code = vm.wait(60)
    assert code == 0
    attempt = journal_of(job_dir).attempts[-1]
    assert attempt.outcome == "preempted"
    assert attempt.steps_lost == 0 and attempt.end_step == attempt.reached_step >= 10
    seconds = attempt.timings["notice_to_safe"]
    if reports_saved:
        assert seconds < TEARDOWN_SECONDS - 3, f"the agent waited {seconds} s for an exit it did not need"
    else:
        assert seconds >= TEARDOWN_SECONDS, (
            f"the agent did not wait for a trainer that never said it saved ({seconds} s)"
        )


def test_an_agent_waiting_for_the_gpu_driver_ends_on_sigterm(tmp_path):
    """An agent waiting up to 900 s for the driver the VM installs
    (`install-nvidia-driver`) ignored SIGTERM; on a VM it would miss the preemption's."""
    import time

    from survivor.local.instance import LocalInstance

    spec = dummy_spec(str(tmp_path / "jobdir"), tmp_path, train_steps=10, num_gpus=2)
    vm = LocalInstance({"survivor-job": spec, "install-nvidia-driver": "True"}, str(tmp_path / "vm"), python=PYTHON)
    try:
        vm.boot()
        vm.wait_for_message("waiting for the GPU driver")
        started = time.monotonic()
        code = vm.preempt(soft_off=True, hard_off_after=30)
        assert code == 0 and time.monotonic() - started < 15, f"exit {code} after {time.monotonic() - started:.1f} s"
    finally:
        vm.close()


def test_a_trainer_that_silently_starts_from_scratch_is_not_reported_as_losing_nothing(tmp_path, instance_factory):
    """The second boot restores step S and its trainer starts at step 1 anyway (it resumes
    only from a multiple of a huge number). The steps it trains again count as lost, with the reason."""
    job_dir = str(tmp_path / "jobdir")
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=150, extra_args=["--resume-every", "1000000"]))
    vm.boot()
    vm.wait_for_step(random.randint(20, 40))
    assert vm.preempt(soft_off=True) == 0
    saved = journal_of(job_dir).attempts[-1].end_step
    run_to_completion(vm)
    second = journal_of(job_dir).attempts[-1]
    assert second.restored_step == saved and second.outcome == "finished"
    first = int(re.search(r"first report was step (\d+), below the restored step (\d+)", second.reason).group(1))
    assert f"below the restored step {saved}" in second.reason and first < saved, second.reason
    assert second.steps_lost == saved - first + 1, second  # at least: the agent reads progress every 0.2 s
    assert any(
        line.get("message", "").startswith("the trainer started below the restored step") for line in vm.log_lines()
    )


def test_a_sigterm_before_the_trainer_starts_records_a_stop_that_lost_nothing(tmp_path, monkeypatch):
    """A SIGTERM between the attempt's record and the notice watcher (here: while the deadline is
    looked at) closes the attempt as stopped with 0 steps lost: nothing of it trained. Its loss
    used to read as unknown, which a simulator run in CI caught."""
    import signal

    from survivor.agent import boot as agent

    monkeypatch.delenv("GCE_METADATA_HOST", raising=False)
    spec = tmp_path / "job.yaml"
    spec.write_text(dummy_spec(str(tmp_path / "jobdir"), tmp_path, train_steps=5, on_finish="auto"))

    def signalled(self, *args):
        os.kill(os.getpid(), signal.SIGTERM)  # the agent's own handler turns it into the boot's end
        raise AssertionError("the SIGTERM handler did not end the boot")

    monkeypatch.setattr(agent.Boot, "_deadline", signalled)
    code = agent.run(agent.AgentOptions(workdir=str(tmp_path / "work"), spec_file=str(spec), allow_root_trainer=True))
    assert code == 0
    attempt = journal_of(str(tmp_path / "jobdir")).attempts[-1]
    assert attempt.outcome == "stopped" and "during boot" in attempt.reason
    assert attempt.steps_lost == 0
