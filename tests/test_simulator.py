"""The whole lifecycle under fire: the local MIG simulator with the real clients, and a chaos run."""

import datetime as dt
import json
import os
import random
import sys

import pytest
import yaml

from survivor.local.simulator import Simulator
from tests.conftest import executed_steps

pytestmark = pytest.mark.slow


def sim_spec(job_dir, tmp_path, train_steps, checkpoint_bytes=3_000_000, step_seconds=0.03, **extra):
    spec = {
        "job_dir": job_dir,
        "train_steps": train_steps,
        "checkpoint_steps": 1000,
        "sync_seconds": 0.3,
        "grace_seconds": 8,
        "on_finish": "auto",
        "trainer": {
            "argv": [
                sys.executable,
                "-m",
                "survivor.trainers.dummy",
                "--on-sigterm",
                "save",
                "--step-seconds",
                str(step_seconds),
                "--checkpoint-bytes",
                str(checkpoint_bytes),
                "--step-log",
                str(tmp_path / "steps.log"),
            ]
        },
    }
    spec.update(extra)
    return yaml.safe_dump(spec)


def _times(lines, message):
    return [dt.datetime.fromisoformat(line["time"]) for line in lines if line["message"] == message]


def test_preempted_many_times_at_random_moments_including_upload_and_restore(bucket, tmp_path):
    train_steps = 300
    sim = Simulator(
        sim_spec(f"gs://{bucket}/sim", tmp_path, train_steps),
        str(tmp_path / "sim"),
        preempt_every=1.5,
        jitter=0.5,
        hard_off_after=10,
        recreate_delay=0.2,
        max_preemptions=7,
        seed=random.randrange(1000),
        preempt_during_restore=1,
    )
    result = sim.run(timeout=300)
    print(result.table())
    assert result.preemptions >= 5
    assert result.done is not None and result.done["step"] == train_steps
    assert result.target_size == 0
    assert [a.outcome for a in result.attempts].count("finished") == 1

    noticed = [a for a in result.attempts if a.outcome in ("preempted", "stopped")]
    assert noticed and all(a.steps_lost is not None and a.steps_lost <= 1 for a in noticed)
    steps = executed_steps(tmp_path)
    assert steps[-1] == train_steps
    # every step of the final lineage ran; the only extra steps are those lost to preemptions
    lost = len(steps) - train_steps
    assert lost >= 0
    assert (
        lost
        <= sum((a.reached_step or 0) - (a.end_step or 0) for a in result.attempts if a.outcome)
        + sum(1 for a in result.attempts if a.outcome is None) * 50
    )

    # at least one notice arrived while a checkpoint was being uploaded
    during_upload = 0
    vm = next(iter(sim.vms.values()))
    for boot in range(1, vm.boots + 1):
        lines = vm.log_lines(boot)
        notices = _times(lines, "notice: the VM is going away")
        commits = [
            (dt.datetime.fromisoformat(line["time"]), line["upload_seconds"] + line["manifest_seconds"])
            for line in lines
            if line["message"] == "committed"
        ]
        for n in notices:
            during_upload += any(end - dt.timedelta(seconds=took) <= n <= end for end, took in commits)
    restore_preemptions = [e for e in result.events if e.kind == "notice"]
    assert during_upload >= 1 or len(restore_preemptions) >= 6


def test_chaos_twenty_random_kill_points_lose_no_committed_checkpoint(tmp_path):
    """SIGKILL of the agent or the trainer at random times, with storage faults and a flaky metadata
    server: no restore is ever corrupt and no committed checkpoint is lost. (20 kills, a new seed each
    run, keep the suite's time; `benchmarks/chaos.py` runs 50 among its other fault classes.)"""
    from harness.chaos import run_chaos

    result = run_chaos(kills=20, fault_rate=0.05, seed=random.randrange(1 << 20), root=str(tmp_path / "chaos"))
    print(
        json.dumps(
            {"kills": result.kills, "worst_case_lost_steps": result.worst_lost_steps, "faults": dict(result.faults)}
        )
    )
    assert result.kills == 20
    assert result.corrupt_restores == 0
    assert result.lost_commits == 0
    assert result.skipped_snapshots == 0
    assert result.exit_waits == 0  # an agent whose trainer was killed ends its attempt promptly
    assert not result.failed_marker


def test_operator_stop_saves_and_start_resumes_on_a_new_instance(tmp_path, capsys):
    """`survivor stop` is a resize to 0: the VM gets the soft off, the agent saves and commits.
    `survivor start` resizes to 1: a new instance (another name) takes the released lease at once."""
    import time

    from survivor.commands import main as cli
    from survivor.jobdir.journal import Journal
    from survivor.jobdir.storage import open_storage

    job_dir = str(tmp_path / "jobdir")
    sim = Simulator(
        sim_spec(job_dir, tmp_path, 400, checkpoint_bytes=0, lease_seconds=60),
        str(tmp_path / "sim"),
        preempt_every=1e9,
        hard_off_after=10,
    )
    os.environ["SURVIVOR_COMPUTE_ENDPOINT"] = sim.compute.endpoint
    try:
        sim._template_and_group()
        sim._boot_pending()
        first = sim._running()
        first.wait_for_step(40)
        where = ["--zone", "us-west1-b", "--project", "survivor-local"]
        assert cli.main(["stop", "sim", *where]) == 0
        assert first.wait(30) == 0
        stopped = Journal(open_storage(job_dir)).attempts()[-1]
        assert stopped.outcome in ("stopped", "preempted") and stopped.steps_lost == 0
        assert cli.main(["start", "sim", *where]) == 0
        sim._boot_pending()
        second = sim._running()
        assert second is not None and second.name != first.name
        second.wait_for_step(stopped.end_step + 1, timeout=30)
        resumed = Journal(open_storage(job_dir)).attempts()[-1]
        assert resumed.restored_step == stopped.end_step
        # no wait for a stale lease: the stop released it, so the second took it as free (a lease
        # it had to wait out says "took over the lease"); the clock only bounds it, loosely
        lines = second.log_lines()
        assert lines and not any(line["message"] == "took over the lease" for line in lines)
        assert time.monotonic() - sim._started < 120
    finally:
        os.environ.pop("SURVIVOR_COMPUTE_ENDPOINT", None)
        for vm in sim.vms.values():
            vm.close()
        sim.compute.stop()
