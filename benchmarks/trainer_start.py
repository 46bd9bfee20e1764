"""A built-in trainer's start to its first step, this checkout against another, in pairs.

    python -m benchmarks.trainer_start --baseline /path/to/other/checkout [--trainer mlp] [--pairs 5]
    python -m benchmarks.trainer_start --baseline ... --gate-after 15   # as the agent starts it

Each pair starts `python -m survivor.trainers.<trainer>` once from each source tree (alternating which
goes first), on a fresh job dir, 2 logical CPU devices, and times the process from its spawn to the
first step it reports in `$SURVIVOR_PROGRESS_FILE` (what the agent's `first_step` and the goodput
benchmark's start-up time). The trainer is then SIGTERMed. Prints the median of each side and of the
pairwise ratios; a pair shares the machine's state, so the ratio is what to read on a loaded machine.

`--gate-after S`: the trainer starts at its start gate, as the agent starts a built-in trainer before
its restore, and `go` comes S seconds after the spawn (a restore that long: make it longer than the
trainer's own start, so that all it does before the gate is done); timed from `go` to the first step,
which is what a boot whose restore outlasts TensorFlow's start waits for after the download.
cifar10 runs ResNet-20 at batch 32 on a synthetic data set (as `benchmarks.time_to_resume`).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.common import ROOT, machine, table


#: What each trainer is started with beyond the contract's flags.
TRAINER_ARGS = {"mlp": [], "cifar10": ["--resnet-depth", "20", "--train-batch-size", "32", "--no-export"]}


def first_step_seconds(
    tree: str, trainer: str, timeout: float = 120.0, gate_after: float | None = None, data_dir: str | None = None
) -> float:
    """Seconds from spawning the trainer from source tree `tree` to its first reported step; with
    `gate_after`, from `go` at its start gate (that long after the spawn) to its first step."""
    from survivor.trainers.contract import START_GATE_ENV, START_GATE_GO, parse_progress

    with tempfile.TemporaryDirectory(prefix="bench-start-") as tmp:
        progress = os.path.join(tmp, "progress")
        env = dict(os.environ, PYTHONPATH=tree, SURVIVOR_PROGRESS_FILE=progress, TF_CPP_MIN_LOG_LEVEL="2")
        if gate_after is not None:
            env[START_GATE_ENV] = "stdin"
        started = time.monotonic()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                f"survivor.trainers.{trainer}",
                "--job-dir",
                os.path.join(tmp, "job"),
                "--train-steps",
                "1000000",
                "--num-gpus",
                "2",
                *(["--data-dir", data_dir] if data_dir else []),
                *TRAINER_ARGS[trainer],
            ],
            env=env,
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.PIPE if gate_after is not None else subprocess.DEVNULL,
        )
        try:
            if gate_after is not None:
                assert process.stdin is not None
                time.sleep(max(0.0, started + gate_after - time.monotonic()))
                if process.poll() is not None:
                    raise RuntimeError(f"{trainer} from {tree} exited {process.returncode} at its start gate")
                started = time.monotonic()  # from `go`: stamped before it is written, never after the trainer woke
                process.stdin.write(START_GATE_GO)
                process.stdin.close()
            while time.monotonic() - started < timeout:
                try:
                    with open(progress, "rb") as f:
                        if (parse_progress(f.read()) or 0) >= 1:
                            return time.monotonic() - started
                except FileNotFoundError:
                    pass
                if process.poll() is not None:
                    raise RuntimeError(f"{trainer} from {tree} exited {process.returncode} before its first step")
                time.sleep(0.005)
            raise RuntimeError(f"{trainer} from {tree}: no first step in {timeout} s")
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="another checkout of survivor (e.g. a clone of main)")
    parser.add_argument("--trainer", default="mlp", help="mlp or cifar10")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument(
        "--gate-after",
        type=float,
        default=None,
        help="start at the start gate and say go this many seconds after the spawn; time from go",
    )
    args = parser.parse_args(argv)
    data = tempfile.TemporaryDirectory(prefix="bench-start-data-")
    if args.trainer == "cifar10":
        from survivor.trainers import cifar10_data

        cifar10_data.synthetic(1024, data.name)
    this: list[float] = []
    base: list[float] = []
    ratios: list[float] = []
    for i in range(args.pairs):
        order = [(ROOT, this), (args.baseline, base)] if i % 2 == 0 else [(args.baseline, base), (ROOT, this)]
        for tree, out in order:
            out.append(
                first_step_seconds(
                    tree,
                    args.trainer,
                    gate_after=args.gate_after,
                    data_dir=data.name if args.trainer == "cifar10" else None,
                )
            )
        ratios.append(this[-1] / base[-1])
        print(f"  pair {i + 1}: this {this[-1]:.2f} s, baseline {base[-1]:.2f} s", file=sys.stderr, flush=True)
    data.cleanup()
    what = f"go at the start gate ({args.gate_after:g} s after the spawn)" if args.gate_after is not None else "spawn"
    print(f"machine: {machine()}; {args.pairs} pairs, {args.trainer} on 2 logical CPU devices\n")
    print(
        table(
            f"{args.trainer}: {what} to first step (s)",
            ["tree", "median", "min", "max"],
            [
                ["this checkout", f"{statistics.median(this):.2f}", f"{min(this):.2f}", f"{max(this):.2f}"],
                ["baseline", f"{statistics.median(base):.2f}", f"{min(base):.2f}", f"{max(base):.2f}"],
                ["ratio (pairwise)", f"{statistics.median(ratios):.2f}", f"{min(ratios):.2f}", f"{max(ratios):.2f}"],
            ],
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
