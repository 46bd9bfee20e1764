"""Time to resume: agent start to the first training step, split by phase, beside the trainer's own
cold start on the same checkpoint.

    python -m benchmarks.time_to_resume [--depth 20] [--state-mb 1000]

Phases: imports (python + survivor), metadata and spec, lease + journal, restore (download and
verify), setup (GPUs, code, start), trainer start to first step. Target: the agent adds under 1 s to
the trainer's cold start, plus the download at the measured bandwidth. `--state-mb` adds a file of
that many random megabytes to the trainer's job dir (a large model's state): the built-in trainer
starts before the restore (its imports overlap the download), so the download shows only where it
is longer than the trainer's own start.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import time

import yaml

from benchmarks.common import PLOTS, machine, plot_bars, run, scratch_dir, table
from survivor.jobdir.journal import Timing
from survivor.agent.trainer import progress_path, read_progress


def first_progress(progress_file: str, after: int, timeout: float = 600) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (read_progress(progress_file) or 0) > after:
            return time.perf_counter()
        time.sleep(0.005)
    raise TimeoutError("no first step")


def resume_under_agent(vm, job_dir: str) -> dict:
    """One preempted boot's successor: agent start to the first step past the committed one."""
    from survivor.jobdir.journal import Journal
    from survivor.jobdir.storage import open_storage

    committed = Journal(open_storage(job_dir)).attempts()[-1].end_step
    started = time.perf_counter()
    vm.boot(wipe=True)
    first = first_progress(progress_path(vm.workdir), committed)
    vm.preempt()
    attempt = Journal(open_storage(job_dir)).attempts()[-1]
    log = vm.log_lines()
    boot_time = dt.datetime.fromisoformat(log[0]["time"])
    started_entry = next(e for e in log if e["message"] == "trainer started")
    to_trainer = (dt.datetime.fromisoformat(started_entry["time"]) - boot_time).total_seconds()
    return {
        "total": first - started,
        "to_trainer": to_trainer,
        **{k: attempt.timings.get(k, 0.0) for k in (Timing.SPEC, Timing.RESTORE, Timing.SETUP)},
    }


def _add_state(vm, job_dir: str, megabytes: int) -> None:
    """Writes `megabytes` of random bytes into the running trainer's job dir and waits until a commit
    holds them."""
    from survivor.jobdir.storage import open_storage
    from survivor.jobdir.store import CheckpointStore

    path = os.path.join(vm.workdir, "job", "padding.bin")
    with open(path + ".tmp", "wb") as f:
        for _ in range(megabytes):
            f.write(os.urandom(1 << 20))
    os.rename(path + ".tmp", path)
    store = CheckpointStore(open_storage(job_dir))
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        latest = store.latest()
        if latest is not None and any(f.path == "padding.bin" for f in latest.files):
            return
        time.sleep(0.5)
    raise TimeoutError("no commit with the added state")


def cold_start(spec: dict, root: str, n: int) -> float:
    """The trainer alone, with the argv the agent builds (`trainer_argv`), on the same checkpoint
    restored into a local dir."""
    from survivor.spec import JobSpec
    from survivor.jobdir.store import CheckpointStore
    from survivor.jobdir.storage import open_storage
    from survivor.spec import trainer_argv

    job = JobSpec.from_mapping(spec)
    local = os.path.join(root, f"cold-{n}")
    manifest = CheckpointStore(open_storage(job.job_dir)).restore(local)
    progress = os.path.join(root, f"cold-progress-{n}.json")
    argv = trainer_argv(job, python=sys.executable, job_dir=local, data_dir=job.data_dir, num_gpus=job.num_gpus or 0)
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        env={**os.environ, "SURVIVOR_PROGRESS_FILE": progress, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        return first_progress(progress, manifest.step if manifest else 0) - started
    finally:
        proc.terminate()
        proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--state-mb", type=int, default=0, help="random megabytes added to the state restored")
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="resumes under the agent, each followed by a cold start of the trainer alone",
    )
    args = parser.parse_args()
    from survivor.local.gcs import StorageEmulator
    from survivor.local.instance import LocalInstance
    from survivor.trainers import cifar10_data

    root = scratch_dir("bench-resume-")
    data_dir = os.path.join(root, "data")
    cifar10_data.synthetic(1024, data_dir)
    hparams = {"resnet-depth": args.depth, "train-batch-size": 32, "log-steps": 50, "eval-steps": 1, "no-export": ""}
    agent_runs, cold_runs = [], []
    with StorageEmulator(log_dir=root) as gcs:
        gcs.create_bucket("bench")
        job_dir = "gs://bench/resume"
        spec = {
            "job_dir": job_dir,
            "data_dir": data_dir,
            "train_steps": 100000,
            "num_gpus": 2,
            "on_finish": "keep-alive",
            "checkpoint_steps": 10,
            "trainer": {"builtin": "cifar10"},
            "hyperparameters": hparams,
        }
        vm = LocalInstance({"survivor-job": yaml.safe_dump(spec)}, os.path.join(root, "vm"), python=sys.executable)
        try:
            vm.boot()
            vm.wait_for_step(12, timeout=600)
            if args.state_mb:
                _add_state(vm, job_dir, args.state_mb)
            vm.preempt()
            for n in range(args.repeats):  # interleaved, so drift on the machine falls on both sides
                agent_runs.append(resume_under_agent(vm, job_dir))
                cold_runs.append(cold_start(spec, root, n))
        finally:
            vm.close()
        run([sys.executable, "-c", "import survivor.agent.boot"])  # warm the file cache first
        t0 = time.perf_counter()
        run([sys.executable, "-c", "import survivor.commands.main, survivor.agent.boot"])
        import_seconds = time.perf_counter() - t0

    def med(key: str) -> float:
        return statistics.median(r[key] for r in agent_runs)

    agent_total, cold = med("total"), statistics.median(cold_runs)
    overheads = sorted(a["total"] - c for a, c in zip(agent_runs, cold_runs))
    rows = [
        ["python + survivor imports", import_seconds],
        ["metadata + spec (agent)", med("spec")],
        ["restore: download + verify", med("restore")],
        ["setup: GPUs, code, start", med("setup")],
        ["agent's first log line (imports done) -> trainer started, measured", med("to_trainer")],
        ["trainer start -> first step", statistics.median(a["total"] - a["to_trainer"] for a in agent_runs)],
        ["agent start -> first step", agent_total],
        ["trainer cold start alone -> first step", cold],
        ["agent overhead over the trainer's cold start (median of pairs)", statistics.median(overheads)],
        ["  range over the pairs", f"{overheads[0]:+.2f} .. {overheads[-1]:+.2f}"],
    ]
    print(
        f"machine: {machine()}; CIFAR-10 ResNet-{args.depth} checkpoint"
        f"{f' and {args.state_mb} MB more state' if args.state_mb else ''}, job dir in fake-gcs-server; "
        f"medians of {args.repeats} resumes, each beside a cold start with the same argv\n"
    )
    print(table("time to resume (s)", ["phase", "seconds"], rows))
    plot = plot_bars(
        os.path.join(PLOTS, "time_to_resume.png"),
        "agent start to first step",
        ["agent", "trainer alone"],
        {"seconds": [agent_total, cold]},
        "seconds",
    )
    if plot:
        print(f"plot: {plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
