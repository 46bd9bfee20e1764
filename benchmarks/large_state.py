"""Large states through the checkpoint store: restore against its floor, the committing process's
peak memory, and what a commit uploads when most of the state did not change.

    python -m benchmarks.large_state [--size-mb 4000] [--repeats 2] [--backend filesystem]

Runs against fake-gcs-server on 127.0.0.1, in three parts:

- **Commit**: a separate process scans a state of `--size-mb` (one data file, every MiB its own,
  written by `benchmarks.state_trainer`) and commits it, as the agent's mirror does; its wall time
  and its peak resident memory (its own `VmHWM`) are reported.
- **Restore** of that snapshot into an empty dir (`CheckpointStore.restore`: every chunk downloaded
  in place and checked against its CRC32C as it is written, the whole file's size and CRC32C, the
  staging dir swapped in), against the parallel download floor: the same chunk objects downloaded
  raw with google-cloud-storage, `TRANSFERS` at once, into the same offsets of one file through a
  1 MiB write buffer, nothing verified. Pairs alternate which goes first; the ratio is taken per pair.
- **Incremental**: the state saved again with its first 90% unchanged (frozen layers), committed as
  a periodic commit, then saved and committed once more as the commit after a notice would be:
  bytes uploaded by each, against the full state.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from benchmarks.common import machine, scratch_dir, table

COMMITTER = r"""
import json, sys, time
from survivor.jobdir.snapshot import scan
from survivor.jobdir.storage import open_storage
from survivor.jobdir.store import CheckpointStore
local, job_dir, attempt = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = CheckpointStore(open_storage(job_dir))
started = time.monotonic()
snapshot = scan(local)
scanned = time.monotonic()
stats = store.commit(local, snapshot, attempt)
with open("/proc/self/status") as f:  # this process's own peak (ru_maxrss would start from the parent's at fork)
    peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
print(json.dumps({"scan": scanned - started, "commit": time.monotonic() - scanned, "peak_rss_mib": peak / 1024,
                  "uploaded_bytes": stats.uploaded_bytes, "reused_bytes": stats.reused_bytes,
                  "uploaded_chunks": stats.uploaded_chunks, "reused_chunks": stats.reused_chunks}))
"""


def commit_in_process(local: str, job_dir: str, attempt: int) -> dict:
    """Scans and commits `local` in a fresh process; its figures, wall time and peak RSS (MiB, its
    VmHWM: the kernel's ru_maxrss of a child starts from its parent's resident size at the fork)."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", COMMITTER, local, job_dir, str(attempt)], stdout=subprocess.PIPE)
    if proc.returncode != 0:
        raise RuntimeError(f"the committing process exited {proc.returncode}")
    return {**json.loads(proc.stdout), "wall": time.monotonic() - started}


def restore_once(job_dir: str, target: str) -> float:
    """Seconds for `CheckpointStore.restore` of the newest snapshot into an empty `target`."""
    from survivor.jobdir.storage import open_storage
    from survivor.jobdir.store import CheckpointStore

    shutil.rmtree(target, ignore_errors=True)
    store = CheckpointStore(open_storage(job_dir))
    started = time.perf_counter()
    manifest = store.restore(target)
    elapsed = time.perf_counter() - started
    if manifest is None:
        raise RuntimeError("nothing restored")
    return elapsed


def download_floor(bucket_name: str, prefix: str, manifest, target: str) -> float:
    """Seconds to download the manifest's chunk objects raw, `TRANSFERS` at once, each into its
    offset of one file per manifest file (google-cloud-storage `download_to_file`, no checksum)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from survivor.jobdir.storage import TRANSFERS

    bucket = storage.Client(project="bench", credentials=AnonymousCredentials()).bucket(bucket_name)
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target)
    jobs = []
    for entry in manifest.files:
        path = os.path.join(target, entry.path.replace("/", "_"))
        with open(path, "wb") as f:
            f.truncate(entry.size)
        jobs += [(path, c) for c in entry.chunks]

    def one(job) -> None:
        path, chunk = job
        # a 1 MiB buffer: the client hands over 8 KiB pieces, and a write call for each would make the
        # floor slower than a download that batches them (a floor must not be beatable that way)
        with open(path, "r+b", buffering=1 << 20) as f:
            f.seek(chunk.offset)
            bucket.blob(f"{prefix}/{chunk.object}").download_to_file(f, checksum=None)

    started = time.perf_counter()
    with ThreadPoolExecutor(TRANSFERS) as pool:
        list(pool.map(one, jobs))
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=2, help="restore/floor pairs")
    parser.add_argument("--backend", choices=["memory", "filesystem"], default="filesystem")
    args = parser.parse_args()
    from benchmarks.state_trainer import save
    from survivor.jobdir.chunks import CHUNK_SIZE
    from survivor.jobdir.storage import TRANSFERS, open_storage
    from survivor.jobdir.store import CheckpointStore
    from survivor.local.gcs import StorageEmulator

    root = scratch_dir("bench-large-")
    local, size = os.path.join(root, "job"), args.size_mb * 1_000_000
    os.makedirs(local)
    job_dir = "gs://bench/large"
    store_root = os.path.join(root, "gcs") if args.backend == "filesystem" else None
    print(
        f"machine: {machine()}; storage: fake-gcs-server ({args.backend} backend) on 127.0.0.1; "
        f"chunks of {CHUNK_SIZE >> 20} MiB, {TRANSFERS} transfers at once\n",
        flush=True,
    )
    with StorageEmulator(log_dir=root, root=store_root) as gcs:
        gcs.create_bucket("bench")
        save(local, 1, size, frozen=0.9)
        full = commit_in_process(local, job_dir, 1)
        print(f"full commit: {full}", flush=True)
        manifest = CheckpointStore(open_storage(job_dir)).latest()
        pairs = []
        for i in range(args.repeats):
            order = [
                ("restore", lambda: restore_once(job_dir, os.path.join(root, "restored"))),
                ("floor", lambda: download_floor("bench", "large", manifest, os.path.join(root, "floor"))),
            ]
            pair = dict((name, run()) for name, run in (order if i % 2 == 0 else order[::-1]))
            shutil.rmtree(os.path.join(root, "restored"), ignore_errors=True)
            shutil.rmtree(os.path.join(root, "floor"), ignore_errors=True)
            pairs.append(pair)
            print(f"restore pair {i}: {pair}", flush=True)
        save(local, 2, size, frozen=0.9)
        periodic = commit_in_process(local, job_dir, 1)
        save(local, 3, size, frozen=0.9)
        notice = commit_in_process(local, job_dir, 1)
        print(f"periodic: {periodic}\nnotice: {notice}\n", flush=True)

    gb = args.size_mb / 1000
    print(
        table(
            f"commit of {gb:g} GB by a fresh process (scan + commit, as the mirror does)",
            ["state", "scan (s)", "upload + manifest (s)", "wall (s)", "chunks uploaded", "peak RSS (MiB)"],
            [
                [
                    f"{gb:g} GB",
                    full["scan"],
                    full["commit"],
                    full["wall"],
                    full["uploaded_chunks"],
                    f"{full['peak_rss_mib']:.0f}",
                ]
            ],
        )
    )
    ratios = [p["restore"] / p["floor"] for p in pairs]
    print(
        table(
            f"restore of {gb:g} GB (s)",
            [
                "state",
                "pairs",
                "restore (verified, swapped in)",
                "parallel download floor",
                "vs floor (median)",
                "range",
            ],
            [
                [
                    f"{gb:g} GB",
                    len(pairs),
                    statistics.median(p["restore"] for p in pairs),
                    statistics.median(p["floor"] for p in pairs),
                    f"{statistics.median(ratios):.2f}x",
                    f"{min(ratios):.2f}-{max(ratios):.2f}x",
                ]
            ],
        )
    )
    rows = [
        [
            name,
            f"{r['uploaded_bytes'] / 1e6:.0f}",
            f"{r['reused_bytes'] / 1e6:.0f}",
            f"{100 * r['uploaded_bytes'] / size:.1f}%",
            r["commit"],
            f"{r['peak_rss_mib']:.0f}",
        ]
        for name, r in (
            ("first commit (everything new)", full),
            ("periodic commit, 90% frozen", periodic),
            ("the commit after a notice, 90% frozen", notice),
        )
    ]
    print(
        table(
            f"incremental commits of a {gb:g} GB state whose first 90% is frozen",
            ["commit", "MB uploaded", "MB already stored", "of the state", "upload + manifest (s)", "peak RSS (MiB)"],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
