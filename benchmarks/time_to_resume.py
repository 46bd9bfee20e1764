"""Time to resume: agent start to the first training step, split by phase, beside the trainer's own
cold start on the same checkpoint.

    python -m benchmarks.time_to_resume [--depth 20]

Phases: imports (python + survivor), metadata and spec, lease + journal, restore (download and
verify), setup (GPUs, code, start), trainer start to first step. Target: the agent adds under 1 s to
the trainer's cold start, plus the download at the measured bandwidth.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import yaml

from benchmarks.common import PLOTS, machine, plot_bars, run, table


def first_progress(progress_file: str, after: int, proc: subprocess.Popen | None, timeout: float = 600) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(progress_file) as f:
                if json.load(f)["step"] > after:
                    return time.perf_counter()
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.005)
    raise TimeoutError("no first step")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=20)
    args = parser.parse_args()
    from survivor.journal import Journal
    from survivor.local.gcs import StorageEmulator
    from survivor.local.instance import LocalInstance
    from survivor.storage import open_storage
    from survivor.trainers import cifar10_data

    root = tempfile.mkdtemp(prefix="bench-resume-")
    data_dir = os.path.join(root, "data")
    cifar10_data.synthetic(1024, data_dir)
    hparams = {"resnet-depth": args.depth, "train-batch-size": 32, "log-steps": 50, "eval-steps": 1, "no-export": ""}
    with StorageEmulator(log_dir=root) as gcs:
        gcs.create_bucket("bench")
        job_dir = "gs://bench/resume"
        spec = {"job_dir": job_dir, "data_dir": data_dir, "train_steps": 100000, "num_gpus": 2,
                "on_finish": "keep-alive", "checkpoint_steps": 10, "trainer": {"builtin": "cifar10"},
                "hyperparameters": hparams}
        vm = LocalInstance({"survivor-job": yaml.safe_dump(spec)}, os.path.join(root, "vm"), python=sys.executable)
        try:
            vm.boot()
            vm.wait_for_step(12, timeout=600)
            vm.preempt()
            committed = Journal(open_storage(job_dir)).attempts()[-1].end_step
            started = time.perf_counter()
            vm.boot(wipe=True)
            first = first_progress(os.path.join(vm.workdir, "progress.json"), committed, vm.process)
            agent_total = first - started
            vm.preempt()
        finally:
            vm.close()
        attempt = Journal(open_storage(job_dir)).attempts()[-1]
        t = attempt.timings
        log = vm.log_lines()
        boot_time = next(e["time"] for e in log)
        trainer_started = next(e["time"] for e in log if e["message"] == "trainer started")
        import datetime as dt

        agent_first_log = dt.datetime.fromisoformat(boot_time)
        to_trainer = (dt.datetime.fromisoformat(trainer_started) - agent_first_log).total_seconds()
        run([sys.executable, "-c", "import survivor.agent"])  # warm the file cache first
        t0 = time.perf_counter()
        run([sys.executable, "-c", "import survivor.cli, survivor.agent"])
        import_seconds = time.perf_counter() - t0

        # the trainer's own cold start on the same checkpoint (restored into a local dir)
        from survivor.store import CheckpointStore

        local = os.path.join(root, "cold")
        CheckpointStore(open_storage(job_dir)).restore(local)
        progress = os.path.join(root, "cold-progress.json")
        argv = [sys.executable, "-m", "survivor.trainers.cifar10", "--job-dir", local, "--data-dir", data_dir,
                "--train-steps", "100000", "--num-gpus", "2", "--checkpoint-steps", "100000",
                *[x for k, v in hparams.items() for x in ([f"--{k}", str(v)] if v != "" else [f"--{k}"])]]
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env={**os.environ, "SURVIVOR_PROGRESS_FILE": progress, "TF_CPP_MIN_LOG_LEVEL": "3"},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cold = first_progress(progress, attempt.restored_step or 0, proc) - started
        proc.terminate()
        proc.wait()
    trainer_phase = agent_total - to_trainer
    rows = [
        ["python + survivor imports", import_seconds],
        ["metadata + spec (agent)", t.get("spec", 0.0)],
        ["restore: download + verify", t.get("restore", 0.0)],
        ["setup: GPUs, code, start", t.get("setup", 0.0)],
        ["agent start -> trainer started (all of the above, measured)", to_trainer],
        ["trainer start -> first step", trainer_phase],
        ["agent start -> first step", agent_total],
        ["trainer cold start alone -> first step", cold],
        ["agent overhead over the trainer's cold start", agent_total - cold],
    ]
    print(f"machine: {machine()}; CIFAR-10 ResNet-{args.depth} checkpoint, job dir in fake-gcs-server\n")
    print(table("time to resume (s)", ["phase", "seconds"], rows))
    plot = plot_bars(os.path.join(PLOTS, "time_to_resume.png"), "agent start to first step",
                     ["agent", "trainer alone"], {"seconds": [agent_total, cold]}, "seconds")
    if plot:
        print(f"plot: {plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
