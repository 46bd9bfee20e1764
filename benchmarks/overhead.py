"""Overhead: the CIFAR-10 trainer's steps/s alone vs. under the agent, and the stall per periodic checkpoint.

    python -m benchmarks.overhead [--steps 200] [--repeats 2]

Target: the agent costs under 1% of steps/s. The stall is the synchronous `CheckpointManager.save`
on the step path, as a share of a step and of the interval between saves.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

import yaml

from benchmarks.common import PLOTS, agent_log_text, machine, parse_timing, plot_bars, run, table


def trainer_args(data_dir: str, steps: int, checkpoint_steps: int) -> list[str]:
    return ["--data-dir", data_dir, "--train-steps", str(steps), "--num-gpus", "2", "--resnet-depth", "8",
            "--train-batch-size", "32", "--checkpoint-steps", str(checkpoint_steps), "--log-steps", "50",
            "--eval-steps", "1", "--no-export"]


def bare(data_dir: str, job_dir: str, steps: int, checkpoint_steps: int) -> dict:
    out = run([sys.executable, "-m", "survivor.trainers.cifar10", "--job-dir", job_dir,
               *trainer_args(data_dir, steps, checkpoint_steps)])
    return parse_timing(out)


def under_agent(data_dir: str, root: str, steps: int, checkpoint_steps: int) -> dict:
    from survivor.local.instance import LocalInstance

    spec = {"job_dir": os.path.join(root, "jobdir"), "data_dir": data_dir, "train_steps": steps, "num_gpus": 2,
            "on_finish": "keep-alive", "checkpoint_steps": checkpoint_steps, "trainer": {"builtin": "cifar10"},
            "hyperparameters": {"resnet-depth": 8, "train-batch-size": 32, "log-steps": 50, "eval-steps": 1,
                                "no-export": ""}}
    vm = LocalInstance({"survivor-job": yaml.safe_dump(spec)}, os.path.join(root, "vm"), python=sys.executable)
    try:
        vm.boot()
        if vm.wait(1800) != 0:
            raise RuntimeError(f"agent failed; see {vm.log_path()}")
        return parse_timing(agent_log_text(vm.log_path()))
    finally:
        vm.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from survivor.trainers import cifar10_data

    root = tempfile.mkdtemp(prefix="bench-overhead-")
    data_dir = os.path.join(root, "data")
    cifar10_data.synthetic(2048, data_dir)
    rates = {"alone": [], "under the agent": []}
    for i in range(args.repeats):
        rates["alone"].append(bare(data_dir, os.path.join(root, f"bare{i}"), args.steps, 100000)["steps_per_second"])
        rates["under the agent"].append(under_agent(data_dir, os.path.join(root, f"agent{i}"), args.steps, 100000)["steps_per_second"])
    alone, agent = statistics.median(rates["alone"]), statistics.median(rates["under the agent"])
    saving = bare(data_dir, os.path.join(root, "saves"), args.steps, 20)
    step_seconds = 1 / alone
    rows = [["alone", alone, "-"], ["under the agent", agent, f"{100 * (1 - agent / alone):+.2f}%"]]
    print(f"machine: {machine()}\n")
    print(table(f"steps/s, CIFAR-10 ResNet-8, batch 32 on 2 logical CPU devices, median of {args.repeats}",
                ["run", "steps/s", "agent overhead"], rows))
    print(table("stall per periodic checkpoint (synchronous CheckpointManager.save on the step path)",
                ["saves", "mean save (s)", "step (s)", "stall / step", "stall / 20-step interval"],
                [[saving["saves"], saving["mean_save_seconds"], step_seconds,
                  f"{saving['mean_save_seconds'] / step_seconds:.2f}x",
                  f"{100 * saving['mean_save_seconds'] / (20 * step_seconds):.1f}%"]]))
    plot = plot_bars(os.path.join(PLOTS, "overhead.png"), "steps/s alone vs under the agent",
                     ["alone", "under the agent"], {"steps/s": [alone, agent]}, "steps/s")
    if plot:
        print(f"plot: {plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
