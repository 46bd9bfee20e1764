"""`survivor dashboard` over a team's bucket: 200 job dirs, the list page's first load and its refresh.

    python -m benchmarks.dashboard [--jobs 200] [--commits 20] [--repeats 5] [--local]

The job dirs are simulated (harness/job_records.py) at a real job's size: 4-20 boots each, a
checkpoint of 8 x 128 MiB shards in 32 MiB chunks, the newest 3 commits kept (their manifests and
chunk objects: the chunks are a few bytes each, since the dashboard lists them and reads none), a
move and a switch in some; 60% running, 30% DONE, 10% waiting for a VM. They live in
fake-gcs-server (`--local`: on the local disk), under one prefix the dashboard is given.

Timed through Flask's test client, the way a browser's GET of `/` runs (the board's reads, the
figures, the template): the first load (the prefix's listing, every job dir listed and its records
read), a refresh when nothing changed, a refresh after `--commits` running jobs each committed a new
step, and, for comparison, the same 200 job dirs read by `status.read_job` one after another as
`survivor status --job-dir` reads one (no listing shared, nothing kept). Each call to the bucket is
counted: listings, objects read, bytes read. A DONE job is not read again within `final_seconds`
(10 min), so a refresh lists only the jobs that may change.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import random
import statistics
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from benchmarks.common import PLOTS, machine, plot_bars, scratch_dir, table
from harness.job_records import commit, plan_job, write_job
from survivor.cloud.catalog import Machine
from survivor.jobdir.status import read_job
from survivor.jobdir.storage import open_storage
from survivor.operator.dashboard.board import Board, JobSource
from survivor.operator.dashboard.web import make_app
from survivor.policy.cost import ReportOptions

MACHINE = Machine("g2-standard-8", "nvidia-l4", 1)


class Counting:
    """A job dir that counts what it is asked (the comparison's plain reads)."""

    def __init__(self, storage, calls: Counter):
        self.url, self._storage, self.calls = storage.url, storage, calls

    def list(self, prefix):
        self.calls["list"] += 1
        return self._storage.list(prefix)

    def read(self, name):
        blob = self._storage.read(name)
        self.calls["read"] += 1
        self.calls["bytes"] += len(blob.data) if blob else 0
        return blob


def make_jobs(root: str, count: int, seed: int) -> dict[str, object]:
    """Writes `count` simulated job dirs under `root`; their plans by job dir."""
    rng = random.Random(seed)
    now = _dt.datetime.now(_dt.timezone.utc)
    specs = []
    for i in range(count):
        kind = rng.random()
        running, done = kind < 0.6, 0.6 <= kind < 0.9
        specs.append(
            (
                f"{root}/job-{i:03d}",
                random.Random(rng.random()),
                dict(
                    boots=rng.randint(4, 20),
                    running=running,
                    done=done,
                    move=rng.random() < 0.3,
                    switch=rng.random() < 0.2,
                ),
            )
        )

    def one(spec):
        url, job_rng, kw = spec
        plan = plan_job(
            job_rng,
            end=now - _dt.timedelta(minutes=job_rng.uniform(0, 5) if kw["running"] else job_rng.uniform(10, 600)),
            **kw,
        )
        write_job(open_storage(url), plan)
        return url, plan

    with ThreadPoolExecutor(16) as pool:
        return dict(pool.map(one, specs))


def timed_get(client, board: Board) -> tuple[float, Counter]:
    """Seconds of one GET of `/`, and the calls it made to the bucket."""
    before = board.calls
    started = time.perf_counter()
    page = client.get("/")
    seconds = time.perf_counter() - started
    assert page.status_code == 200, page.status_code
    return seconds, board.calls - before


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--commits", type=int, default=20, help="running jobs that commit between two refreshes")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--local", action="store_true", help="job dirs on the local disk instead of fake-gcs-server")
    parser.add_argument("--seed", type=int, default=44)
    args = parser.parse_args(argv)

    emulator = None
    if args.local:
        root = os.path.join(scratch_dir("survivor-dashboard-"), "jobs")
    else:
        from survivor.local.gcs import StorageEmulator

        emulator = StorageEmulator().start()
        emulator.create_bucket("team-bucket")
        root = "gs://team-bucket/jobs"
    try:
        started = time.perf_counter()
        plans = make_jobs(root, args.jobs, args.seed)
        objects = sum(len(open_storage(url).list("survivor/")) for url in list(plans)[:20]) / min(20, len(plans))
        print(
            f"{args.jobs} job dirs written in {time.perf_counter() - started:.0f} s, {objects:.0f} objects each "
            f"under survivor/ (mean of 20)",
            flush=True,
        )
        rows, figures = [], {}
        options = ReportOptions(machine=MACHINE, region="us-central1", online=False)
        loads = []
        for _ in range(args.repeats):  # a new dashboard each time: nothing kept
            board = Board([JobSource(root, options=options)], refresh_seconds=0.0)
            client = make_app(board).test_client()
            loads.append(timed_get(client, board))
        seconds = statistics.median(s for s, _ in loads)
        calls = loads[-1][1]
        cards = board.cards()
        states = Counter(c.state for c in cards)
        rows.append(["first load", seconds, calls["list"], calls["read"], calls["bytes"] // 1024])
        figures["first load"] = (seconds, calls)

        unchanged = [timed_get(client, board) for _ in range(args.repeats)]
        seconds, calls = statistics.median(s for s, _ in unchanged), unchanged[-1][1]
        rows.append(["refresh, nothing changed", seconds, calls["list"], calls["read"], calls["bytes"] // 1024])
        figures["refresh"] = (seconds, calls)

        running = [url for url, plan in plans.items() if plan.done is None and plan.attempts[-1].ended is None]
        after = []
        for repeat in range(args.repeats):
            now = _dt.datetime.now(_dt.timezone.utc)
            for url in running[: args.commits]:
                plan = plans[url]
                commit(open_storage(url), plan, plan.step + 100 * (repeat + 1), now)  # type: ignore[attr-defined]
            after.append(timed_get(client, board))
        seconds, calls = statistics.median(s for s, _ in after), after[-1][1]
        rows.append(
            [f"refresh after {args.commits} commits", seconds, calls["list"], calls["read"], calls["bytes"] // 1024]
        )
        figures[f"{args.commits} commits"] = (seconds, calls)

        plain = []
        for _ in range(args.repeats):
            counted: Counter = Counter()
            started = time.perf_counter()
            for url in plans:
                read_job(url, storage=Counting(open_storage(url), counted))  # type: ignore[arg-type]
            plain.append((time.perf_counter() - started, counted))
        seconds, calls = statistics.median(s for s, _ in plain), plain[-1][1]
        rows.append(
            ["each job dir read as `status` reads one", seconds, calls["list"], calls["read"], calls["bytes"] // 1024]
        )
        figures["plain reads"] = (seconds, calls)

        where = "local disk" if args.local else "fake-gcs-server on 127.0.0.1"
        print(
            table(
                f"The list page over {args.jobs} job dirs ({where}; {dict(states)}); median of {args.repeats}",
                ["GET /", "seconds", "listings", "objects read", "KiB read"],
                rows,
            )
        )
        print(machine())
        labels = list(figures)
        suffix = "-local" if args.local else ""
        path = plot_bars(
            os.path.join(PLOTS, f"dashboard{suffix}.png"),
            f"survivor dashboard: {args.jobs} job dirs ({where})",
            labels,
            {
                "seconds": [figures[k][0] for k in labels],
                "bucket calls / 1000": [(figures[k][1]["list"] + figures[k][1]["read"]) / 1000 for k in labels],
            },
            "seconds; thousands of calls",
        )
        if path:
            print(f"plot: {path}")
    finally:
        if emulator is not None:
            emulator.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
