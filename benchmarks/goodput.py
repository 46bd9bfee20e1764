"""Goodput under preemption: survivor beside the alternatives, same trainer, same preemption schedule.

    python -m benchmarks.goodput --own-code [--preemptions 2] [--smoke]   # each alternative as its own code
    python -m benchmarks.goodput [--steps 2400] [--time-scale 10] [--parallel] [--seed 1]   # modelled

`--own-code` (benchmarks/peers/run.py) runs survivor's agent, Keras's BackupAndRestore, TensorFlow's
PreemptionCheckpointHandler and the recipe's trainer loop themselves on one Keras workload. Without it,
this module models each alternative's checkpoint policy on survivor's dummy trainer, as below.

Real scale: 0.5 s steps, a 0.5 s synchronous save every 200 steps, 5 s trainer start-up, a preemption
every 300+-50 s, Spot's 30 s from notice to hard off. `--time-scale N` divides every one of these by
N (the default 10: a 30 s gap between preemptions stands for 5 minutes), which leaves the agent's
own fixed costs (process start, metadata, restore) unscaled, so they weigh N times more than on a
real VM; `--time-scale 1` measures real time. Every strategy runs the same step-timed trainer through real agent processes and
the storage emulator, preempted on the same seeded schedule (`preempted=TRUE`, SIGTERM, SIGKILL 3 s
later, a fresh boot disk). What differs is only the checkpoint policy each alternative has:

- survivor: periodic saves plus a save on the notice (the trainer contract); its loop writes
  periodic saves off the step path, so a save stalls the steps for OFF_PATH_SHARE of the others'
  synchronous save (the share benchmarks.overhead measures);
- periodic only (the recipe; also TF's PreemptionCheckpointHandler on a Spot VM, whose default GCE
  watcher reads only `maintenance-event` and so never hears a Spot preemption): the trainer dies on
  SIGTERM and resumes from its last periodic save;
- Keras BackupAndRestore, epoch saving: a save at each epoch end, resumed at the epoch start;
- Keras BackupAndRestore, step saving: saves every N steps, but resumed at the epoch start.

goodput = useful training time (train_steps x step time) / wall time of all boots. Badput split:
start-up (agent and trainer start), restore, checkpoint stalls, work lost (steps run again).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import yaml

from benchmarks.common import PLOTS, machine, plot_bars, schedule, scratch_dir, table
from survivor.jobdir.journal import Timing

#: survivor's built-in loop writes periodic checkpoints off the step path: the step-path time of a save
#: is this share of a synchronous one (benchmarks.overhead: 4.0-5.0 ms vs 79-89 ms on ResNet-20 here, 5-6%).
OFF_PATH_SHARE = 0.05

STRATEGIES = {
    "survivor": ["--on-sigterm", "save", "@off-path"],
    "periodic only (recipe / PreemptionCheckpointHandler)": ["--on-sigterm", "die"],
    "Keras BackupAndRestore (epoch)": ["--on-sigterm", "die", "@epoch"],
    "Keras BackupAndRestore (steps)": ["--on-sigterm", "die", "@resume-epoch"],
}


def run_strategy(name: str, args, times: list[float], root: str, bucket: str) -> dict:
    from survivor.jobdir.journal import Journal
    from survivor.local.instance import LocalInstance
    from survivor.jobdir.storage import open_storage

    flags = list(STRATEGIES[name])
    checkpoint_steps = args.checkpoint_steps
    resume_every = 1
    if "@epoch" in flags:
        flags.remove("@epoch")
        checkpoint_steps = args.epoch_steps
    if "@resume-epoch" in flags:
        flags.remove("@resume-epoch")
        resume_every = args.epoch_steps
    save_seconds = args.save_seconds
    if "@off-path" in flags:
        flags.remove("@off-path")
        save_seconds = args.save_seconds * OFF_PATH_SHARE
    slug = "".join(c if c.isalnum() else "-" for c in name.lower())[:30]
    job_dir = f"gs://{bucket}/{slug}"
    steps_log = os.path.join(root, f"{slug}-steps.log")
    spec = {
        "job_dir": job_dir,
        "train_steps": args.steps,
        "checkpoint_steps": checkpoint_steps,
        "grace_seconds": 25,
        "sync_seconds": 0.5,
        "on_finish": "keep-alive",
        "trainer": {
            "argv": [
                sys.executable,
                "-m",
                "survivor.trainers.dummy",
                *flags,
                "--step-seconds",
                str(args.step_seconds),
                "--save-seconds",
                str(save_seconds),
                "--startup-seconds",
                str(args.startup_seconds),
                "--resume-every",
                str(resume_every),
                "--step-log",
                steps_log,
            ]
        },
    }
    vm = LocalInstance({"survivor-job": yaml.safe_dump(spec)}, os.path.join(root, slug), python=sys.executable)
    journal = Journal(open_storage(job_dir))
    wall, job_clock, pending = 0.0, 0.0, list(times)
    try:
        while journal.done() is None:
            boot = time.perf_counter()
            vm.boot(wipe=True)
            next_at = pending.pop(0) if pending else float("inf")
            while vm.running() and job_clock + (time.perf_counter() - boot) < next_at:
                time.sleep(0.01)
            if vm.running():
                vm.set_preempted()
                time.sleep(0.05)
                vm.soft_off()
                if vm.wait(args.hard_off) is None:
                    vm.kill()
            else:
                vm.wait()
            elapsed = time.perf_counter() - boot
            wall += elapsed
            job_clock += elapsed
            if wall > args.steps * args.step_seconds * args.give_up_after:
                break
    finally:
        vm.close()
    # no log: the strategy was given up on before its trainer's first step, which executed nothing
    executed = sum(1 for _ in open(steps_log)) if os.path.exists(steps_log) else 0
    attempts = journal.attempts()
    finished = journal.done() is not None
    committed = max((a.end_step or 0 for a in attempts), default=0)
    useful = (args.steps if finished else committed) * args.step_seconds
    saves = executed // checkpoint_steps
    restore = sum(a.timings.get(Timing.RESTORE, 0.0) for a in attempts)
    startup = (
        sum(a.timings.get(Timing.SPEC, 0.0) + a.timings.get(Timing.SETUP, 0.0) for a in attempts)
        + len(attempts) * args.startup_seconds
    )
    return {
        "strategy": name if finished else f"{name} (did not finish: {committed}/{args.steps} steps)",
        "goodput": useful / wall,
        "wall": wall,
        "boots": len(attempts),
        "preemptions": sum(1 for a in attempts if a.outcome in ("preempted", "stopped")),
        "lost_steps": executed - (args.steps if finished else committed),
        "lost_per_preemption": [a.steps_lost for a in attempts if a.outcome in ("preempted", "stopped")],
        "badput_startup": startup / wall,
        "badput_restore": restore / wall,
        "badput_stalls": saves * save_seconds / wall,
        "badput_lost": (executed - (args.steps if finished else committed)) * args.step_seconds / wall,
    }


#: The schedule at real scale (seconds); --time-scale N divides every duration by N.
REAL = {
    "step_seconds": 0.5,
    "save_seconds": 0.5,
    "startup_seconds": 5.0,
    "preempt_every": 300.0,
    "jitter": 50.0,
    "hard_off": 30.0,
}


def main() -> int:
    if "--own-code" in sys.argv[1:]:
        from benchmarks.peers.run import main as own_code

        return own_code([a for a in sys.argv[1:] if a != "--own-code"])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2400)
    parser.add_argument(
        "--time-scale",
        type=float,
        default=10.0,
        help="divide every real-scale duration by this (1: real time; a run takes hours)",
    )
    parser.add_argument("--checkpoint-steps", type=int, default=200, help="periodic interval (100 s at real scale)")
    parser.add_argument("--epoch-steps", type=int, default=300)
    parser.add_argument(
        "--give-up-after",
        type=float,
        default=8.0,
        help="stop a strategy after this many times its useful time (reported as not finished)",
    )
    for key, real in REAL.items():
        parser.add_argument(
            f"--{key.replace('_', '-')}",
            type=float,
            default=None,
            help=f"{real} s at real scale, divided by --time-scale unless given",
        )
    parser.add_argument(
        "--parallel",
        action="store_true",
        help="run the strategies at the same time (each on its own clock and schedule)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", help="run only strategies whose name contains this")
    args = parser.parse_args()
    for key, real in REAL.items():
        if getattr(args, key) is None:
            setattr(args, key, real / args.time_scale)
    from survivor.local.gcs import StorageEmulator

    times = schedule(args.seed, args.preempt_every, args.jitter, args.steps * args.step_seconds * 10)
    root = scratch_dir("bench-goodput-")
    names = [n for n in STRATEGIES if not args.only or args.only.lower() in n.lower()]
    with StorageEmulator(log_dir=root) as gcs:
        gcs.create_bucket("bench")

        def one(name: str) -> dict:
            result = run_strategy(name, args, times, root, "bench")
            print(f"  {name}: goodput {result['goodput']:.3f}", file=sys.stderr, flush=True)
            return result

        if args.parallel:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(len(names)) as pool:
                results = list(pool.map(one, names))
        else:
            results = [one(name) for name in names]
    print(
        f"machine: {machine()}; {args.steps} steps of {args.step_seconds} s; preemption every "
        f"{args.preempt_every}+-{args.jitter} s (seed {args.seed}); periodic save every {args.checkpoint_steps} "
        f"steps; epoch {args.epoch_steps} steps; time scaled 1:{args.time_scale:g}"
        f"{'; strategies run in parallel' if args.parallel else ''}\n"
    )
    rows = [
        [
            r["strategy"],
            f"{100 * r['goodput']:.1f}%",
            r["preemptions"],
            r["lost_steps"],
            str(r["lost_per_preemption"]),
            f"{100 * r['badput_startup']:.1f}%",
            f"{100 * r['badput_restore']:.1f}%",
            f"{100 * r['badput_stalls']:.1f}%",
            f"{100 * r['badput_lost']:.1f}%",
            f"{100 * (1 - r['goodput'] - r['badput_startup'] - r['badput_restore'] - r['badput_stalls'] - r['badput_lost']):.1f}%",
        ]
        for r in results
    ]
    print(
        table(
            "goodput under preemption",
            [
                "strategy",
                "goodput",
                "preemptions",
                "steps run again",
                "lost per preemption",
                "start-up",
                "restore",
                "ckpt stalls",
                "work lost",
                "other (process starts, notice to exit)",
            ],
            rows,
        )
    )
    plot = plot_bars(
        os.path.join(PLOTS, "goodput.png"),
        "goodput and badput under the same preemption schedule",
        [
            r["strategy"].split(" (")[0] + ("\n(" + r["strategy"].split(" (")[1] if " (" in r["strategy"] else "")
            for r in results
        ],
        {
            "goodput": [r["goodput"] for r in results],
            "start-up": [r["badput_startup"] for r in results],
            "restore": [r["badput_restore"] for r in results],
            "ckpt stalls": [r["badput_stalls"] for r in results],
            "work lost": [r["badput_lost"] for r in results],
            "other": [
                1 - r["goodput"] - r["badput_startup"] - r["badput_restore"] - r["badput_stalls"] - r["badput_lost"]
                for r in results
            ],
        },
        "share of wall time",
        stacked=True,
    )
    if plot:
        print(f"plot: {plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
