"""Time to safety: from the notice to the committed manifest, for 10 MB, 100 MB and 1 GB of state.

    python -m benchmarks.time_to_safety [--sizes 10,100,1000]

Beside each, the floor measured in the same run: the trainer's own way to a checkpoint on disk (it
finishes the step in flight, then writes the same bytes), plus the raw parallel upload of those
bytes with google-cloud-storage (`upload_from_filename` with its defaults, a thread per file) to the
same storage emulator. The step in flight is taken from the agent's run itself (the dummy trainer
logs when SIGTERM came and when its save began: half a 10 ms step on average, which any way of
saving on notice waits for). The save is the same trainer's, run without survivor and stopped the
same way (a fresh process's first save: 4-5 ms for 10 MB here, against 3.4 ms for the same
call repeated in a warm process), so whatever the agent costs the trainer's save counts against the
agent. The upload starts once that trainer has exited, with nothing beside it. Everything else
(noticing, checksums, the upload's share of a busy machine, the manifest) is survivor's own part,
also given in milliseconds.
Targets: within 1.15x of the floor, and inside the 30 s Spot window at 1 GB.

Each agent run is paired with a floor measured beside it (in alternating order), and the ratio is
taken per pair; the table gives the medians. fake-gcs-server's time for identical uploads drifts by
tens of percent over a run, so a ratio of two separately taken medians would mostly measure the
drift. Objects are deleted after each run, so the emulator's memory (and its garbage collector's
pauses) stay flat, and one unmeasured upload of each size goes first: the emulator's first 1 GB
upload took 32 s where the next ones took 12-20 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import yaml

from benchmarks.common import PLOTS, machine, plot_bars, scratch_dir, table


def under_agent(size_mb: int, root: str, bucket: str, repeat: int) -> dict:
    """One preemption of a dummy trainer holding `size_mb` of state: the agent's own timings."""
    from survivor.jobdir.journal import Journal
    from survivor.local.instance import LocalInstance
    from survivor.jobdir.storage import open_storage

    job_dir = f"gs://{bucket}/safety-{size_mb}-{repeat}"
    timing_log = os.path.join(root, f"timing{size_mb}-{repeat}.jsonl")
    # grace grows with the state, so a slow large commit is measured rather than cut off (whether it fits
    # inside Spot's 30 s notice is read off the figure)
    grace = max(60, size_mb * 0.15)
    spec = {"job_dir": job_dir, "train_steps": 10_000_000, "checkpoint_steps": 1_000_000, "grace_seconds": grace,
            "on_finish": "keep-alive", "sync_seconds": 1.0, "trainer": {"argv": dummy_argv(size_mb, timing_log)}}
    vm = LocalInstance({"survivor-job": yaml.safe_dump(spec)}, os.path.join(root, f"vm{size_mb}-{repeat}"), python=sys.executable)
    try:
        vm.boot()
        vm.wait_for_step(20)
        vm.set_preempted()
        vm.wait(grace + 60)
    finally:
        vm.close()
        shutil.rmtree(vm.root, ignore_errors=True)  # its local copy of the checkpoint: up to 1 GB a run
    attempt = Journal(open_storage(job_dir)).attempts()[-1]
    t = attempt.timings
    _empty(job_dir)  # keep the emulator's heap flat between pairs
    with open(timing_log, encoding="utf-8") as f:
        trainer = json.loads(f.readline())
    if "notice_to_safe" not in t:
        raise RuntimeError(f"{size_mb} MB: the agent did not commit after the notice ({attempt.outcome}: {attempt.reason})")
    return {"notice_to_safe": t["notice_to_safe"], "step_in_flight": trainer["save_started"] - trainer["signal"],
            "steps_lost": attempt.steps_lost}


def dummy_argv(size_mb: int, timing_log: str) -> list[str]:
    """The trainer both sides stop: 10 ms steps, `size_mb` of state saved on SIGTERM."""
    return [sys.executable, "-m", "survivor.trainers.dummy", "--on-sigterm", "save", "--step-seconds", "0.01",
            "--checkpoint-bytes", str(size_mb * 1_000_000), "--timing-log", timing_log]


def trainer_alone(size_mb: int, root: str, repeat: int | str) -> tuple[float, str]:
    """The same trainer without survivor, stopped the same way (SIGTERM while it steps). Returns how
    long its save took (its own log: save began -> files renamed into place) and its job dir."""
    job = os.path.join(root, f"alone{size_mb}-{repeat}")
    timing_log, step_log = os.path.join(root, f"alone-timing{size_mb}-{repeat}.jsonl"), os.path.join(root, "alone-steps.log")
    if os.path.exists(step_log):
        os.remove(step_log)
    trainer = subprocess.Popen([*dummy_argv(size_mb, timing_log), "--job-dir", job, "--train-steps", "10000000",
                                "--checkpoint-steps", "1000000", "--step-log", step_log],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while _lines(step_log) < 20:
            if trainer.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the dummy trainer did not step (exit {trainer.poll()})")
            time.sleep(0.02)
        trainer.send_signal(signal.SIGTERM)
        if trainer.wait(120) != 0:
            raise RuntimeError(f"the dummy trainer exited {trainer.returncode} on SIGTERM")
    finally:
        if trainer.poll() is None:
            trainer.kill()
    with open(timing_log, encoding="utf-8") as f:
        timing = json.loads(f.readline())
    return timing["saved"] - timing["save_started"], job


def _lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def floor(size_mb: int, root: str, bucket: str, repeat: int | str) -> dict:
    """The trainer's own save without survivor, then the raw upload of the files it wrote:
    google-cloud-storage as a user would call it, `upload_from_filename` with its defaults, one
    thread per file, started once the trainer has exited (nothing else runs beside it)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    save_seconds, job = trainer_alone(size_mb, root, repeat)
    prefix = f"floor-{size_mb}-{repeat}"
    client_bucket = storage.Client(project="bench", credentials=AnonymousCredentials()).bucket(bucket)
    files = [os.path.join(job, f) for f in os.listdir(job) if not f.startswith(".")]
    started = time.perf_counter()
    with ThreadPoolExecutor(len(files)) as pool:
        list(pool.map(lambda f: client_bucket.blob(f"{prefix}/{os.path.basename(f)}").upload_from_filename(f), files))
    uploaded = time.perf_counter()
    _empty(f"gs://{bucket}/{prefix}")
    shutil.rmtree(job, ignore_errors=True)
    return {"floor_write": save_seconds, "floor_upload": uploaded - started}


def _empty(url: str) -> None:
    from survivor.jobdir.storage import open_storage

    storage = open_storage(url)
    storage.delete([o.name for o in storage.list("")])


def measure(size_mb: int, root: str, bucket: str, repeat: int = 0) -> dict:
    """One pair, in alternating order (the agent first on even pairs, the floor first on odd ones),
    so whatever drifts in the emulator over a run falls on both sides alike."""
    if repeat % 2 == 0:
        agent = under_agent(size_mb, root, bucket, repeat)
        raw = floor(size_mb, root, bucket, repeat)
    else:
        raw = floor(size_mb, root, bucket, repeat)
        agent = under_agent(size_mb, root, bucket, repeat)
    floor_total = agent["step_in_flight"] + raw["floor_write"] + raw["floor_upload"]
    return {"size_mb": size_mb, **agent, **raw, "floor": floor_total, "ratio": agent["notice_to_safe"] / floor_total,
            "own_ms": (agent["notice_to_safe"] - floor_total) * 1000,
            "ratio_without_step": agent["notice_to_safe"] / (raw["floor_write"] + raw["floor_upload"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000", help="state sizes in MB")
    parser.add_argument("--repeats", type=int, default=15, help="pairs per size below 1 GB; medians are reported")
    parser.add_argument("--large-repeats", type=int, default=5, help="pairs per size of 1 GB and more")
    parser.add_argument("--backend", choices=["memory", "filesystem"], default="memory",
                        help="fake-gcs-server's backend; filesystem for 4 GB and more")
    args = parser.parse_args()
    from survivor.local.gcs import StorageEmulator

    root = scratch_dir("bench-safety-")
    rows, results = [], []
    store_root = os.path.join(root, "gcs") if args.backend == "filesystem" else None
    with StorageEmulator(log_dir=root, root=store_root) as gcs:
        gcs.create_bucket("bench")
        for size in [int(s) for s in args.sizes.split(",")]:
            floor(size, root, "bench", "warm-up")  # not counted: the emulator's first upload of a size grows its heap
            runs = [measure(size, root, "bench", i) for i in range(args.repeats if size < 1000 else args.large_repeats)]
            r = {key: statistics.median(run[key] for run in runs) if key != "steps_lost" else max(run[key] or 0 for run in runs)
                 for key in runs[0]}
            results.append(r)
            ratios = sorted(run["ratio"] for run in runs)
            worst = max(run["notice_to_safe"] for run in runs)
            print(f"{size} MB: " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()), flush=True)
            rows.append([f"{size} MB", len(runs), r["notice_to_safe"], r["step_in_flight"], r["floor_write"],
                         r["floor_write"] + r["floor_upload"],
                         r["floor"], f"{r['ratio']:.2f}x", f"{ratios[0]:.2f}-{ratios[-1]:.2f}x", f"{r['own_ms']:.0f}",
                         f"{r['ratio_without_step']:.2f}x", worst, "yes" if worst < 30 else "NO", r["steps_lost"]])
    print(f"machine: {machine()}; storage: fake-gcs-server ({args.backend} backend) on 127.0.0.1; "
          f"medians over the pairs (steps lost: the worst; < 30 s: every run)\n")
    print(table("notice -> committed manifest (s)",
                ["state", "pairs", "notice->safe", "step in flight", "trainer's save alone", "save+raw upload", "floor",
                 "vs floor (median of pairs)", "range", "survivor's own (ms)", "vs write+upload alone",
                 "worst notice->safe", "< 30 s", "steps lost"], rows))
    plot = plot_bars(os.path.join(PLOTS, "time_to_safety.png"), "notice to committed checkpoint",
                     [f"{r['size_mb']} MB" for r in results],
                     {"survivor": [r["notice_to_safe"] for r in results],
                      "floor": [r["floor"] for r in results]}, "seconds")
    if plot:
        print(f"plot: {plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
