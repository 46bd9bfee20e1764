"""Overhead: the CIFAR-10 trainer's steps/s alone vs. under the agent, and the stall per periodic checkpoint.

    python -m benchmarks.overhead [--steps 400] [--repeats 3]

Target: the agent costs under 1% of steps/s. Runs alone and under the agent alternate, and the
overhead is the median of the pairs. Beside it, the agent's own CPU time (its process alone, read
from /proc) while the trainer steps, as a share of the machine: on a CPU-bound trainer that is what
the agent can take from it, and it does not depend on how noisy steps/s is on a shared machine.

The stall per periodic checkpoint: the time a save holds the step loop, with the loop's default
off-path writer (a copy to host memory, written by a background thread) beside a synchronous save
(`--sync-checkpoints`). Target: under 10% of the synchronous save.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import yaml

from benchmarks.common import PLOTS, agent_log_text, machine, parse_timing, plot_bars, run, scratch_dir, table


def trainer_args(data_dir: str, steps: int, checkpoint_steps: int, depth: int = 8) -> list[str]:
    return [
        "--data-dir",
        data_dir,
        "--train-steps",
        str(steps),
        "--num-gpus",
        "2",
        "--resnet-depth",
        str(depth),
        "--train-batch-size",
        "32",
        "--checkpoint-steps",
        str(checkpoint_steps),
        "--log-steps",
        "50",
        "--eval-steps",
        "1",
        "--no-export",
    ]


def bare(
    data_dir: str, job_dir: str, steps: int, checkpoint_steps: int, extra: tuple[str, ...] = (), depth: int = 8
) -> dict:
    out = run(
        [
            sys.executable,
            "-m",
            "survivor.trainers.cifar10",
            "--job-dir",
            job_dir,
            *trainer_args(data_dir, steps, checkpoint_steps, depth),
            *extra,
        ]
    )
    return parse_timing(out)


def own_cpu_seconds(pid: int) -> float | None:
    """utime + stime of one process, not its children (/proc/PID/stat fields 14 and 15)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def progress_report_seconds(root: str, calls: int = 2000) -> float:
    """What the trainer contract adds to each step under the agent: one progress report."""
    from survivor.trainers.contract import report_progress

    path = os.path.join(root, "progress-bench.json")
    started = time.perf_counter()
    for step in range(calls):
        report_progress(step, path)
    return (time.perf_counter() - started) / calls


def under_agent(data_dir: str, root: str, steps: int, checkpoint_steps: int) -> dict:
    from survivor.local.instance import LocalInstance

    spec = {
        "job_dir": os.path.join(root, "jobdir"),
        "data_dir": data_dir,
        "train_steps": steps,
        "num_gpus": 2,
        "on_finish": "keep-alive",
        "checkpoint_steps": checkpoint_steps,
        "trainer": {"builtin": "cifar10"},
        "hyperparameters": {
            "resnet-depth": 8,
            "train-batch-size": 32,
            "log-steps": 50,
            "eval-steps": 1,
            "no-export": "",
        },
    }
    vm = LocalInstance({"survivor-job": yaml.safe_dump(spec)}, os.path.join(root, "vm"), python=sys.executable)
    try:
        started = time.monotonic()
        vm.boot()
        cpu = 0.0
        window: list[tuple[float, float]] = []  # (monotonic, agent CPU s) from the first step to the last
        while vm.wait(0.2) is None:
            cpu = own_cpu_seconds(vm.process.pid) or cpu
            reached = vm.progress() or 0
            if 0 < reached < steps:
                window.append((time.monotonic(), cpu))
            if time.monotonic() - started > 1800:
                raise RuntimeError(f"agent too slow; see {vm.log_path()}")
        if vm.process.returncode != 0:
            raise RuntimeError(f"agent failed; see {vm.log_path()}")
        if len(window) < 2:
            raise RuntimeError("the run was too short to sample the agent while the trainer stepped; raise --steps")
        timing = parse_timing(agent_log_text(vm.log_path()))
        timing["agent_cpu_seconds"] = cpu
        timing["wall_seconds"] = time.monotonic() - started
        timing["training_cpu_seconds"] = window[-1][1] - window[0][1]
        timing["training_seconds"] = window[-1][0] - window[0][0]
        return timing
    finally:
        vm.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stall-depth", type=int, default=20, help="ResNet depth for the checkpoint stall runs")
    parser.add_argument("--stall-steps", type=int, default=200, help="steps of each stall run (a save every 20)")
    parser.add_argument("--stall-repeats", type=int, default=3, help="stall runs a writer; the median is reported")
    args = parser.parse_args()
    from survivor.trainers import cifar10_data

    root = scratch_dir("bench-overhead-")
    data_dir = os.path.join(root, "data")
    cifar10_data.synthetic(2048, data_dir)
    rates = {"alone": [], "under the agent": []}
    agent_cpu = []
    for i in range(args.repeats):  # alone first, then the agent first: drift on the machine falls on both
        if i % 2 == 0:
            rates["alone"].append(
                bare(data_dir, os.path.join(root, f"bare{i}"), args.steps, 100000)["steps_per_second"]
            )
        timing = under_agent(data_dir, os.path.join(root, f"agent{i}"), args.steps, 100000)
        rates["under the agent"].append(timing["steps_per_second"])
        if i % 2 == 1:
            rates["alone"].append(
                bare(data_dir, os.path.join(root, f"bare{i}"), args.steps, 100000)["steps_per_second"]
            )
        agent_cpu.append(
            (
                timing["agent_cpu_seconds"],
                timing["wall_seconds"],
                timing["training_cpu_seconds"],
                timing["training_seconds"],
            )
        )
    alone, agent = statistics.median(rates["alone"]), statistics.median(rates["under the agent"])
    pairs = sorted(100 * (1 - a / b) for a, b in zip(rates["under the agent"], rates["alone"]))
    cores = os.cpu_count() or 1
    cpu_share = statistics.median(c / (w * cores) for c, w, _, _ in agent_cpu)
    training_share = statistics.median(c / (w * cores) for _, _, c, w in agent_cpu)
    stalls = {}
    for mode, extra in (
        ("off the step path (default)", ()),
        ("synchronous (--sync-checkpoints)", ("--sync-checkpoints",)),
    ):
        stalls[mode] = statistics.median(
            bare(
                data_dir,
                os.path.join(root, f"saves-{len(stalls)}-{i}"),
                args.stall_steps,
                20,
                extra,
                depth=args.stall_depth,
            )["median_save_seconds"]
            for i in range(args.stall_repeats)
        )
    report = progress_report_seconds(root)
    rows = [
        ["alone", alone, "-", "-"],
        ["under the agent", agent, f"{statistics.median(pairs):+.2f}%", f"{pairs[0]:+.2f} .. {pairs[-1]:+.2f}%"],
    ]
    print(f"machine: {machine()}\n")
    print(
        table(
            f"steps/s, CIFAR-10 ResNet-8, batch 32 on 2 logical CPU devices, {args.steps} steps, "
            f"{args.repeats} alternating pairs",
            ["run", "steps/s (median)", "agent overhead (median of pairs)", "range over the pairs"],
            rows,
        )
    )
    print(
        table(
            "the agent's own CPU time (its process alone, not the trainer)",
            [
                "whole run: agent CPU s",
                "run s",
                f"share of the machine ({cores} cores)",
                "while the trainer steps: agent CPU s",
                "stepping s",
                "share of the machine",
            ],
            [
                [
                    f"{c:.2f}",
                    f"{w:.1f}",
                    f"{100 * c / (w * cores):.2f}%",
                    f"{tc:.3f}",
                    f"{tw:.1f}",
                    f"{100 * tc / (tw * cores):.3f}%",
                ]
                for c, w, tc, tw in agent_cpu
            ]
            + [["median", "", f"{100 * cpu_share:.2f}%", "", "", f"{100 * training_share:.3f}%"]],
        )
    )
    print(
        table(
            "what the agent can take from a CPU-bound trainer while it steps (the bound the target is read against)",
            ["part", "share of the step time"],
            [
                ["the agent's CPU while the trainer steps (median above)", f"{100 * training_share:.3f}%"],
                [
                    f"the trainer's progress report per step ({1e6 * report:.0f} us at {alone:.1f} steps/s)",
                    f"{100 * report * alone:.3f}%",
                ],
                ["together", f"{100 * (training_share + report * alone):.3f}%"],
            ],
        )
    )
    synchronous = stalls["synchronous (--sync-checkpoints)"]
    print(
        table(
            f"stall per periodic checkpoint, CIFAR-10 ResNet-{args.stall_depth}, a save every 20 steps, "
            f"median of {args.stall_repeats}",
            ["writer", "step-path time per save, median (s)", "vs synchronous"],
            [[mode, f"{value:.4f}", f"{100 * value / synchronous:.0f}%"] for mode, value in stalls.items()],
        )
    )
    plot = plot_bars(
        os.path.join(PLOTS, "overhead.png"),
        "steps/s alone vs under the agent",
        ["alone", "under the agent"],
        {"steps/s": [alone, agent]},
        "steps/s",
    )
    if plot:
        print(f"plot: {plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
