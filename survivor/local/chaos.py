"""Chaos rounds: boot the agent, wait a random moment, SIGKILL something, check the job dir.

    >>> result = run_chaos(kills=50, fault_rate=0.05, seed=1, root="/tmp/chaos")
    >>> result.corrupt_restores, result.lost_commits, result.worst_lost_steps
    (0, 0, 21)

Each round boots the agent (half the time on a fresh disk), sometimes makes the metadata server answer
503s or garbage, waits 0.3-2.5 s, then SIGKILLs the agent, the trainer, or both -- no notice, the
worst case -- with a share of the storage requests failing (429, 503, resets, stalls, truncated
bodies) through `FaultProxy`. After each kill the job dir is restored and checked: the restored
snapshot must be at least as new as the newest commit seen before the kill, and every file must
verify. Used by tests/test_simulator.py and benchmarks/chaos.py.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import yaml

from survivor.local.fault_proxy import FaultPlan, FaultProxy
from survivor.local.gcs import StorageEmulator
from survivor.local.instance import LocalInstance


@dataclass
class ChaosResult:
    kills: int = 0
    corrupt_restores: int = 0
    lost_commits: int = 0
    skipped_snapshots: int = 0
    worst_lost_steps: int = 0
    faults: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    check_seconds: float = 0.0  # time spent restoring and verifying after the kills
    exit_waits: int = 0  # agents still running 30 s after their trainer was killed
    failed_marker: bool = False


def run_chaos(kills: int, fault_rate: float, seed: int, root: str, python: str = sys.executable) -> ChaosResult:
    """Runs `kills` rounds against a fresh storage emulator under `root`."""
    from survivor.storage import open_storage
    from survivor.store import CheckpointStore

    rng = random.Random(seed)
    result = ChaosResult()
    started = time.monotonic()
    os.makedirs(root, exist_ok=True)
    with StorageEmulator(log_dir=root) as gcs:
        gcs.create_bucket("chaos")
        proxy = FaultProxy(gcs.url, FaultPlan(rate=fault_rate, seed=seed, stall_seconds=0.3)).start()
        job_dir = "gs://chaos/job"
        # Killing the trainer is a failed attempt; chaos tests storage integrity, not the crash-loop
        # guard, so that guard is set out of reach.
        spec = {"job_dir": job_dir, "train_steps": 10_000_000, "checkpoint_steps": 3, "keep": 2, "sync_seconds": 0.2,
                "lease_seconds": 5, "on_finish": "keep-alive", "max_failed_attempts": 1_000_000,
                "trainer": {"argv": [python, "-m", "survivor.trainers.dummy", "--on-sigterm", "save",
                                     "--step-seconds", "0.01", "--checkpoint-bytes", "200000"]}}
        vm = LocalInstance({"survivor-job": yaml.safe_dump(spec)}, os.path.join(root, "vm"), python=python,
                           env={"STORAGE_EMULATOR_HOST": proxy.url})
        store = CheckpointStore(open_storage(job_dir))
        check = os.path.join(root, "check")
        try:
            for _ in range(kills):
                booted = time.time()
                vm.boot(wipe=rng.random() < 0.5)
                if rng.random() < 0.2:
                    vm.metadata.fault(rng.choice(["503", "garbage"]), count=rng.randint(1, 4))
                time.sleep(rng.uniform(0.3, 2.5))
                before = store.latest()
                victim = rng.choice(["agent", "trainer", "both"])
                pid_file = os.path.join(vm.workdir, "trainer.pid")
                if victim == "trainer" and (not os.path.exists(pid_file) or os.path.getmtime(pid_file) < booted):
                    victim = "both"  # this boot has no trainer yet (no pid file, or a previous boot's)
                if victim != "agent" and os.path.exists(pid_file) and os.path.getmtime(pid_file) >= booted:
                    try:
                        os.killpg(int(open(pid_file).read()), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                if victim == "trainer" and vm.wait(30) is None:
                    result.exit_waits += 1
                vm.kill()
                result.kills += 1
                checked = time.monotonic()
                restored = store.restore(check)
                if before is not None and (restored is None or restored.step < before.step):
                    result.lost_commits += 1
                if restored is not None:
                    result.corrupt_restores += sum(not os.path.exists(os.path.join(check, f.path)) for f in restored.files)
                    result.worst_lost_steps = max(result.worst_lost_steps, (vm.progress() or 0) - restored.step)
                result.check_seconds += time.monotonic() - checked
        finally:
            vm.close()
            proxy.stop()
        logs = "".join(open(vm.log_path(b)).read() for b in range(1, vm.boots + 1))
        result.skipped_snapshots = logs.count("skipping a snapshot that does not verify")
        from survivor.journal import Journal

        result.failed_marker = Journal(open_storage(job_dir)).failed() is not None
        result.faults = proxy.count
    result.seconds = time.monotonic() - started
    return result
