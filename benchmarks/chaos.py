"""Chaos: random kill points with storage and metadata faults; counts corrupt restores, lost commits
and the worst-case lost work.

    python -m benchmarks.chaos [--kills 100] [--fault-rate 0.05] [--seed 1]

Each round boots the agent (half the time on a fresh disk), maybe makes the metadata server answer
503s or garbage, waits a random 0.3-2.5 s, then SIGKILLs the agent, the trainer, or both -- no notice,
the worst case. After each kill the job dir is restored and checked: the restored snapshot must be
at least as new as the newest commit seen before the kill, and every file must verify.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time

from benchmarks.common import machine, table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--fault-rate", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    import yaml

    from survivor.local.fault_proxy import FaultPlan, FaultProxy
    from survivor.local.gcs import StorageEmulator
    from survivor.local.instance import LocalInstance
    from survivor.storage import open_storage
    from survivor.store import CheckpointStore

    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="bench-chaos-")
    lost_commits = corrupt = 0
    worst_lost = 0
    with StorageEmulator(log_dir=root) as gcs:
        gcs.create_bucket("chaos")
        proxy = FaultProxy(gcs.url, FaultPlan(rate=args.fault_rate, seed=args.seed, stall_seconds=0.3)).start()
        job_dir = "gs://chaos/job"
        spec = {"job_dir": job_dir, "train_steps": 10_000_000, "checkpoint_steps": 3, "keep": 2, "sync_seconds": 0.2,
                "lease_seconds": 5, "on_finish": "keep-alive",
                "trainer": {"argv": [sys.executable, "-m", "survivor.trainers.dummy", "--on-sigterm", "save",
                                     "--step-seconds", "0.01", "--checkpoint-bytes", "200000"]}}
        vm = LocalInstance({"survivor-job": yaml.safe_dump(spec)}, os.path.join(root, "vm"), python=sys.executable,
                           env={"STORAGE_EMULATOR_HOST": proxy.url})
        store = CheckpointStore(open_storage(job_dir))
        started = time.monotonic()
        try:
            for _ in range(args.kills):
                vm.boot(wipe=rng.random() < 0.5)
                if rng.random() < 0.2:
                    vm.metadata.fault(rng.choice(["503", "garbage"]), count=rng.randint(1, 4))
                time.sleep(rng.uniform(0.3, 2.5))
                before = store.latest()
                victim = rng.choice(["agent", "trainer", "both"])
                pid_file = os.path.join(vm.workdir, "trainer.pid")
                if victim != "agent" and os.path.exists(pid_file):
                    try:
                        os.killpg(int(open(pid_file).read()), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                if victim == "trainer":
                    vm.wait(30)
                vm.kill()
                restored = store.restore(os.path.join(root, "check"))
                if before is not None and (restored is None or restored.step < before.step):
                    lost_commits += 1
                if restored is not None:
                    corrupt += sum(not os.path.exists(os.path.join(root, "check", f.path)) for f in restored.files)
                    worst_lost = max(worst_lost, (vm.progress() or 0) - restored.step)
        finally:
            vm.close()
            proxy.stop()
        logs = "".join(open(vm.log_path(b)).read() for b in range(1, vm.boots + 1))
        skipped = logs.count("skipping a snapshot that does not verify")
    print(f"machine: {machine()}\n")
    print(table(f"chaos: {args.kills} random SIGKILLs, {100 * args.fault_rate:.0f}% storage faults, seed {args.seed}",
                ["kills", "corrupt restores", "committed checkpoints lost", "snapshots skipped at restore",
                 "worst-case lost steps (no notice)", "faults injected", "minutes"],
                [[args.kills, corrupt, lost_commits, skipped, worst_lost,
                  " ".join(f"{k}:{v}" for k, v in sorted(proxy.count.items())), (time.monotonic() - started) / 60]]))
    return 0 if corrupt == 0 and lost_commits == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
