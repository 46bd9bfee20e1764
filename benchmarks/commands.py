"""Each operator command's time to its first line and to its exit, as an operator runs it: a fresh
process against survivor's stand-ins, as the operator guide's rehearsal sets them up.

    python -m benchmarks.commands                                   # this checkout, 5 rounds
    python -m benchmarks.commands --baseline /path/to/other/checkout --rounds 5 --json out.json

The stand-ins: survivor's Compute fake (`ComputeServer`), fake-gcs-server behind the bucket-IAM
stand-in (`StorageEmulator`, `BucketIam`: what `survivor emulate storage` runs), and where
google-auth looks for a metadata server, an address that never answers: what a laptop off Google
Cloud without credentials sees of 169.254.169.254 when its network drops the packets (google-auth
then waits `GCE_METADATA_TIMEOUT`, 3 s, per try, 3 tries: google/auth/compute_engine/_metadata.py
`ping`); `--metadata refused` instead refuses the connection at once, as this machine's network
does. No credentials (a fresh HOME: no gcloud login, no price cache). Each command is
`python -m survivor ...` from the source tree under test (`PYTHONPATH`), timed from its spawn to
the first line it writes (stdout or stderr) and to its exit.

Each round walks a job's life in order: make-template, preflight, make-group, status, stop, start,
logs, report, delete, beside `--help`; the job asks for a deadline with a different on-demand
machine, so its report prices two machines. With `--baseline`, every command runs once from each
tree in turn (alternating which goes first), each tree on a job of its own; the pairwise ratio is
what to read on a machine others share. A first round, not counted, builds each tree's wheel
(make-template stages it) and warms the caches (`--no-warm-up` counts it: the suite's smoke size).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time

from benchmarks.common import PLOTS, ROOT, machine, scratch_dir, table

ZONE = "us-west1-b"
PROJECT = "my-project"
BUCKET = "my-project-cifar-10-checkpoints"

SPEC = """\
job_dir: gs://{bucket}/{name}
trainer: {{builtin: cifar10}}
train_steps: 10000
deadline: 36h
fallback: {{machine_type: n1-standard-16}}
compute: {{zone: {zone}, machine_type: n1-standard-8, gpu: nvidia-tesla-t4:1}}
"""


def commands(name: str, work: str) -> list[tuple[str, list[str]]]:
    """(label, argv after `survivor`) of one round, in the order a job's life takes them."""
    place = ["--zone", ZONE]
    return [
        ("--help", ["--help"]),
        ("status --help", ["status", "--help"]),
        ("make-template", ["make-template", name, "--config", f"{name}.yaml", *place, "--install", "wheel"]),
        ("preflight", ["preflight", name, "--config", f"{name}.yaml", *place]),
        ("make-group", ["make-group", name, "--template", name, *place]),
        ("status", ["status", name, *place]),
        ("status --job-dir", ["status", "--job-dir", f"gs://{BUCKET}/{name}"]),
        ("stop", ["stop", name, *place]),
        ("start", ["start", name, *place]),
        ("logs", ["logs", name, *place]),
        ("report (2 machines)", ["report", name, *place, "--out", os.path.join(work, f"report-{name}")]),
        (
            "report --job-dir",
            [
                "report",
                "--job-dir",
                f"gs://{BUCKET}/{name}",
                "--machine-type",
                "n1-standard-8",
                "--gpu",
                "nvidia-tesla-t4:1",
                "--region",
                "us-west1",
                "--out",
                os.path.join(work, f"report-dir-{name}"),
            ],
        ),
        ("delete", ["delete", name, *place]),
    ]


class SilentAddress:
    """A TCP address that accepts connections and never answers: a metadata server that is not there
    on a network that drops the packets (each of google-auth's tries ends at its timeout)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        for conn in self.held:
            conn.close()
        self.sock.close()


def refused_address() -> str:
    """A 127.0.0.1 address nothing listens on: the connection is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def timed(
    tree: str, argv: list[str], env: dict[str, str], cwd: str, timeout: float = 300.0
) -> tuple[float, float, int, str]:
    """(seconds to the first line, seconds to the exit, exit code, output) of `survivor argv` run from `tree`."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "survivor", *argv],
        env={**env, "PYTHONPATH": tree},
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    first = None
    out = []
    for line in iter(process.stdout.readline, b""):
        if first is None:
            first = time.monotonic() - started
        out.append(line)
    code = process.wait(timeout)
    ended = time.monotonic() - started
    return (ended if first is None else first), ended, code, b"".join(out).decode(errors="replace")


def environment(home: str, compute: str, storage: str, metadata: str) -> dict[str, str]:
    """The rehearsal's environment (docs/operator-guide.md), no credentials, google-auth's metadata
    address at `metadata`."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GOOGLE_", "GCE_", "CLOUDSDK_", "SURVIVOR_", "STORAGE_EMULATOR", "XDG_"))
        and k not in ("NO_GCE_CHECK", "HOME")
    }
    return {
        **keep,
        "HOME": home,
        "STORAGE_EMULATOR_HOST": storage,
        "SURVIVOR_COMPUTE_ENDPOINT": compute,
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        "GCE_METADATA_IP": metadata,
        "PYTHONUNBUFFERED": "1",
    }


def spread(values: list[float]) -> str:
    """median (min-max)"""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def plot(
    path: str, labels: list[str], first: dict[str, dict[str, list[float]]], exits: dict[str, dict[str, list[float]]]
) -> str | None:
    """Horizontal bars, per tree: each command's median time to its first line (solid, min-max as error
    bars) and to its exit (pale, behind)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.34 * len(labels) * max(len(first), 1) + 1.2))
    height = 0.8 / max(len(first), 1)
    for i, tree in enumerate(first):
        ys = [y + i * height for y in range(len(labels))]
        color = f"C{i}"
        ax.barh(
            ys,
            [statistics.median(exits[tree][label]) for label in labels],
            height,
            color=color,
            alpha=0.3,
            label=f"{tree}: exit",
        )
        medians = [statistics.median(first[tree][label]) for label in labels]
        low = [m - min(first[tree][label]) for m, label in zip(medians, labels)]
        high = [max(first[tree][label]) - m for m, label in zip(medians, labels)]
        ax.barh(ys, medians, height, xerr=[low, high], color=color, label=f"{tree}: first line", capsize=2)
    ax.set_yticks([y + height * (len(first) - 1) / 2 for y in range(len(labels))])
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from spawn (median; min-max of the first line)")
    ax.set_title("survivor's operator commands against the stand-ins, no credentials", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="another checkout of survivor (e.g. `git archive` of main, unpacked)")
    parser.add_argument("--rounds", type=int, default=5, help="counted rounds (default %(default)s)")
    parser.add_argument(
        "--no-warm-up",
        action="store_true",
        help="count the first round too (its wheel build and cold caches): the suite's smoke size",
    )
    parser.add_argument(
        "--metadata",
        choices=("silent", "refused"),
        default="silent",
        help="google-auth's metadata address: never answers (a laptop) or refuses (default %(default)s)",
    )
    parser.add_argument("--json", help="write every timing here")
    parser.add_argument("--plot", default=os.path.join(PLOTS, "commands.png"), help="the plot (default %(default)s)")
    args = parser.parse_args(argv)

    from survivor.local.bucket_iam import BucketIam
    from survivor.local.compute_server import ComputeServer
    from survivor.local.gcs import StorageEmulator

    work = scratch_dir("bench-commands-")
    trees = {"this checkout": ROOT, **({"baseline": os.path.abspath(args.baseline)} if args.baseline else {})}
    silent = SilentAddress() if args.metadata == "silent" else None
    compute = ComputeServer().start()
    gcs = StorageEmulator(log_dir=work).start()
    iam = BucketIam(upstream=gcs.url, project=PROJECT).start()
    homes = {}
    try:
        gcs.create_bucket(BUCKET)
        envs = {}
        for i, tree in enumerate(trees):
            homes[tree] = os.path.join(work, f"home-{i}")
            os.makedirs(homes[tree])
            envs[tree] = environment(
                homes[tree], compute.endpoint, iam.endpoint, silent.address if silent else refused_address()
            )
        results: dict[str, dict[str, list[float]]] = {tree: {} for tree in trees}
        exits: dict[str, dict[str, list[float]]] = {tree: {} for tree in trees}
        warm_up = 0 if args.no_warm_up else 1
        for round_ in range(args.rounds + warm_up):
            order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
            names = {tree: f"job{round_}{'ab'[i]}" for i, tree in enumerate(trees)}
            for tree in trees:
                with open(os.path.join(work, f"{names[tree]}.yaml"), "w") as f:
                    f.write(SPEC.format(bucket=BUCKET, name=names[tree], zone=ZONE))
            steps = {tree: commands(names[tree], work) for tree in trees}
            for step in range(len(steps[order[0]])):
                for tree in order:
                    label, words = steps[tree][step]
                    first, ended, code, out = timed(trees[tree], words, envs[tree], work)
                    if code != 0:
                        raise RuntimeError(f"{tree}: survivor {' '.join(words)} exited {code}:\n{out[-3000:]}")
                    if round_ < warm_up:  # the warm-up: wheels built, caches filled
                        continue
                    results[tree].setdefault(label, []).append(first)
                    exits[tree].setdefault(label, []).append(ended)
            print(f"  round {round_}{' (warm-up)' if round_ < warm_up else ''} done", file=sys.stderr, flush=True)
    finally:
        iam.stop()
        gcs.stop()
        compute.stop()
        if silent:
            silent.close()
        for home in homes.values():
            shutil.rmtree(home, ignore_errors=True)

    labels = list(results["this checkout"])
    header = ["command"] + [f"{tree}: first line" for tree in trees] + [f"{tree}: exit" for tree in trees]
    rows = [
        [label] + [spread(results[tree][label]) for tree in trees] + [spread(exits[tree][label]) for tree in trees]
        for label in labels
    ]
    if args.baseline:
        header.append("first line, this / baseline (pairwise)")
        for row, label in zip(rows, labels):
            ratios = [a / b for a, b in zip(results["this checkout"][label], results["baseline"][label])]
            row.append(spread(ratios))
    print(f"machine: {machine()}; {args.rounds} rounds; metadata address {args.metadata}; seconds, median (min-max)\n")
    print(table("Operator commands: spawn to first line and to exit (s)", header, rows))
    drawn = plot(args.plot, labels, results, exits)
    if drawn:
        print(f"plot: {os.path.relpath(drawn, ROOT)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"machine": machine(), "metadata": args.metadata, "first_line": results, "exit": exits}, f, indent=1
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
