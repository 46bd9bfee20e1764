"""Time to safety: from the notice to the committed manifest, for 10 MB, 100 MB and 1 GB of state.

    python -m benchmarks.time_to_safety [--sizes 10,100,1000] [--backend filesystem]

Beside each, two floors measured in the same run: the trainer's own way to a checkpoint on disk (it
finishes the step in flight, then writes the same bytes), plus the raw upload of those bytes with
google-cloud-storage to the same storage emulator, either one stream per file (`upload_from_filename`
with its defaults, a thread per file: how survivor uploaded before its chunks) or in parallel (the
same bytes as ranges of survivor's chunk size, `TRANSFERS` raw uploads at once, no checksums and no
manifest). The trainer (`benchmarks.state_trainer`) writes a state whose every MiB differs, so that
survivor's content-addressed chunks cannot skip any of it. The step in flight is taken from the agent's run itself (the dummy trainer
logs when SIGTERM came and when its save began: half a 10 ms step on average, which any way of
saving on notice waits for). The save is the same trainer's, run without survivor and stopped the
same way (a fresh process's first save: 4-5 ms for 10 MB here, against 3.4 ms for the same
call repeated in a warm process), so whatever the agent costs the trainer's save counts against the
agent. The upload starts once that trainer has exited, with nothing beside it. Everything else
(noticing, checksums, the upload's share of a busy machine, the manifest) is survivor's own part,
also given in milliseconds.
Targets: within 1.15x of the parallel floor at 4 GB and up; the largest state safe inside 25 s stated.

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

from benchmarks.common import PLOTS, ROOT, machine, plot_bars, scratch_dir, table
from survivor.jobdir.journal import Timing


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
    spec = {
        "job_dir": job_dir,
        "train_steps": 10_000_000,
        "checkpoint_steps": 1_000_000,
        "grace_seconds": grace,
        "on_finish": "keep-alive",
        "sync_seconds": 1.0,
        "trainer": {"argv": dummy_argv(size_mb, timing_log)},
    }
    vm = LocalInstance(
        {"survivor-job": yaml.safe_dump(spec)}, os.path.join(root, f"vm{size_mb}-{repeat}"), python=sys.executable
    )
    try:
        vm.boot()
        vm.wait_for_step(20)
        vm.set_preempted()
        vm.wait(grace + 60)
    finally:
        vm.close()
        # its local copy of the checkpoint (up to 1 GB a run), not the agent's log beside it
        shutil.rmtree(os.path.join(vm.root, "disk"), ignore_errors=True)
    attempt = Journal(open_storage(job_dir)).attempts()[-1]
    t = attempt.timings
    _empty(job_dir)  # keep the emulator's heap flat between pairs
    with open(timing_log, encoding="utf-8") as f:
        trainer = json.loads(f.readline())
    if Timing.NOTICE_TO_SAFE not in t:
        raise RuntimeError(
            f"{size_mb} MB: the agent did not commit after the notice ({attempt.outcome}: {attempt.reason})"
        )
    return {
        "notice_to_safe": t[Timing.NOTICE_TO_SAFE],
        "step_in_flight": trainer["save_started"] - trainer["signal"],
        "steps_lost": attempt.steps_lost,
    }


def dummy_argv(size_mb: int, timing_log: str) -> list[str]:
    """The trainer both sides stop: 10 ms steps, `size_mb` of state saved on SIGTERM."""
    # by its path: the agent starts the trainer from its own work dir, where `benchmarks` is no package
    return [
        sys.executable,
        os.path.join(ROOT, "benchmarks", "state_trainer.py"),
        "--on-sigterm",
        "save",
        "--step-seconds",
        "0.01",
        "--checkpoint-bytes",
        str(size_mb * 1_000_000),
        "--timing-log",
        timing_log,
    ]


def trainer_alone(size_mb: int, root: str, repeat: int | str) -> tuple[float, str]:
    """The same trainer without survivor, stopped the same way (SIGTERM while it steps). Returns how
    long its save took (its own log: save began -> files renamed into place) and its job dir."""
    job = os.path.join(root, f"alone{size_mb}-{repeat}")
    timing_log, step_log = (
        os.path.join(root, f"alone-timing{size_mb}-{repeat}.jsonl"),
        os.path.join(root, "alone-steps.log"),
    )
    if os.path.exists(step_log):
        os.remove(step_log)
    trainer = subprocess.Popen(
        [
            *dummy_argv(size_mb, timing_log),
            "--job-dir",
            job,
            "--train-steps",
            "10000000",
            "--checkpoint-steps",
            "1000000",
            "--step-log",
            step_log,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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


#: Above this, the one-stream floor is not measured: fake-gcs-server holds a whole single-stream upload
#: in its memory (its heap reached 14 GB for 4 GB), which 8 GB would not fit on this machine.
STREAM_FLOOR_MAX_MB = 4000


def floor(size_mb: int, root: str, bucket: str, repeat: int | str) -> dict:
    """The trainer's own save without survivor, then two raw uploads of the files it wrote, each
    started with nothing else running: google-cloud-storage as a user would call it,
    `upload_from_filename` with its defaults, one thread per file; and the same bytes as ranges of
    survivor's chunk size, `TRANSFERS` at once (`parallel_upload`)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    save_seconds, job = trainer_alone(size_mb, root, repeat)
    prefix = f"floor-{size_mb}-{repeat}"
    client_bucket = storage.Client(project="bench", credentials=AnonymousCredentials()).bucket(bucket)
    files = [os.path.join(job, f) for f in os.listdir(job) if not f.startswith(".")]
    started = time.perf_counter()
    if size_mb <= STREAM_FLOOR_MAX_MB:
        with ThreadPoolExecutor(len(files)) as pool:
            list(
                pool.map(lambda f: client_bucket.blob(f"{prefix}/{os.path.basename(f)}").upload_from_filename(f), files)
            )
    uploaded = time.perf_counter() if size_mb <= STREAM_FLOOR_MAX_MB else float("nan")
    _empty(f"gs://{bucket}/{prefix}")
    parallel = parallel_upload(client_bucket, files, f"{prefix}-parallel")
    _empty(f"gs://{bucket}/{prefix}-parallel")
    shutil.rmtree(job, ignore_errors=True)
    return {"floor_write": save_seconds, "floor_upload": uploaded - started, "parallel_upload": parallel}


def ranges(files: list[str], chunk_size: int) -> list[tuple[str, int, int]]:
    """(file, offset, size) of every chunk-sized range of `files`."""
    out = []
    for path in files:
        size = os.path.getsize(path)
        out += [(path, offset, min(chunk_size, size - offset)) for offset in range(0, size, chunk_size)] or [
            (path, 0, 0)
        ]
    return out


def parallel_upload(client_bucket, files: list[str], prefix: str) -> float:
    """Seconds to upload `files` as raw ranges of survivor's chunk size, `TRANSFERS` at once, with
    google-cloud-storage (each range read, then `upload_from_string`, no checksum): the parallel floor."""
    from survivor.jobdir.chunks import CHUNK_SIZE
    from survivor.jobdir.storage import TRANSFERS

    def one(item: tuple[str, int, int]) -> None:
        path, offset, size = item
        fd = os.open(path, os.O_RDONLY)
        try:
            data = os.pread(fd, size, offset)
        finally:
            os.close(fd)
        client_bucket.blob(f"{prefix}/{os.path.basename(path)}.{offset}").upload_from_string(
            data, content_type="application/octet-stream", checksum=None
        )

    started = time.perf_counter()
    with ThreadPoolExecutor(TRANSFERS) as pool:
        list(pool.map(one, ranges(files, CHUNK_SIZE)))
    return time.perf_counter() - started


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
    parallel_total = agent["step_in_flight"] + raw["floor_write"] + raw["parallel_upload"]
    # the overlapped floor: the save and the parallel upload at once, so the larger of the two
    # (survivor uploads the chunks of a checkpoint still being written, so its save and upload overlap)
    overlapped_total = agent["step_in_flight"] + max(raw["floor_write"], raw["parallel_upload"])
    return {
        "size_mb": size_mb,
        **agent,
        **raw,
        "floor": floor_total,
        "ratio": agent["notice_to_safe"] / floor_total,
        "parallel_floor": parallel_total,
        "parallel_ratio": agent["notice_to_safe"] / parallel_total,
        "overlapped_floor": overlapped_total,
        "overlapped_ratio": agent["notice_to_safe"] / overlapped_total,
        "own_ms": (agent["notice_to_safe"] - parallel_total) * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000", help="state sizes in MB")
    parser.add_argument("--repeats", type=int, default=15, help="pairs per size below 1 GB; medians are reported")
    parser.add_argument("--large-repeats", type=int, default=5, help="pairs per size of 1 GB and more")
    parser.add_argument(
        "--backend",
        choices=["memory", "filesystem"],
        default="memory",
        help="fake-gcs-server's backend; filesystem for 4 GB and more",
    )
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
            r = {
                key: statistics.median(run[key] for run in runs)
                if key != "steps_lost"
                else max(run[key] or 0 for run in runs)
                for key in runs[0]
            }
            results.append(r)
            ratios = sorted(run["parallel_ratio"] for run in runs)
            worst = max(run["notice_to_safe"] for run in runs)
            print(
                f"{size} MB: "
                + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
                flush=True,
            )
            overlapped = sorted(run["overlapped_ratio"] for run in runs)
            rows.append(
                [
                    f"{size} MB",
                    len(runs),
                    r["notice_to_safe"],
                    r["step_in_flight"],
                    r["floor_write"],
                    r["floor"],
                    f"{r['ratio']:.2f}x",
                    r["parallel_floor"],
                    f"{r['parallel_ratio']:.2f}x",
                    f"{ratios[0]:.2f}-{ratios[-1]:.2f}x",
                    r["overlapped_floor"],
                    f"{r['overlapped_ratio']:.2f}x",
                    f"{overlapped[0]:.2f}-{overlapped[-1]:.2f}x",
                    f"{r['own_ms']:.0f}",
                    worst,
                    "yes" if worst < 25 else "NO",
                    r["steps_lost"],
                ]
            )
    print(
        f"machine: {machine()}; storage: fake-gcs-server ({args.backend} backend) on 127.0.0.1; "
        f"medians over the pairs (steps lost: the worst; < 25 s: every run)\n"
    )
    print(
        table(
            "notice -> committed manifest (s)",
            [
                "state",
                "pairs",
                "notice->safe",
                "step in flight",
                "trainer's save alone",
                "floor: one stream a file",
                "vs it",
                "floor: parallel",
                "vs it (median of pairs)",
                "range",
                "floor: save and upload overlapped",
                "vs it",
                "range",
                "over the parallel floor (ms)",
                "worst notice->safe",
                "< 25 s",
                "steps lost",
            ],
            rows,
        )
    )
    plot = plot_bars(
        os.path.join(PLOTS, "time_to_safety.png"),
        "notice to committed checkpoint",
        [f"{r['size_mb']} MB" for r in results],
        {
            "survivor": [r["notice_to_safe"] for r in results],
            "floor: one stream a file": [r["floor"] for r in results],
            "floor: parallel": [r["parallel_floor"] for r in results],
            "floor: overlapped": [r["overlapped_floor"] for r in results],
        },
        "seconds",
    )
    if plot:
        print(f"plot: {plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
