"""The recipe's dummy trainer, made runnable: counts steps, writes `dummy-checkpoint-N.json`.

    $ python -m survivor.trainers.dummy --job-dir /tmp/job --train-steps 100 --checkpoint-steps 10

Like the recipe's, it resumes from the highest N in its job dir and, by default, ignores SIGTERM
(`--on-sigterm ignore`): the agent then keeps its newest completed file. SIGUSR1 makes it save at
the step it is at and go on (the contract's save signal, sent on a host-maintenance notice). With `--on-sigterm save` it
follows the full contract (finish the step in flight, save, exit 0), which is what the lifecycle tests
use to show that at most the step in flight is lost. `--fail-at-start` makes it a broken trainer.
`--step-log FILE` appends every step it executes, so a test can count the work done across restarts.
`--timing-log FILE` appends, for a save on SIGTERM, when the signal came and when the save began
and ended (time.monotonic(), which is one clock for every process on Linux): the benchmarks
separate the trainer's part of the way to safety from the agent's with it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time

from survivor.trainers.contract import SaveRequest, StopRequest, report_progress, report_saved


def latest_checkpoint(job_dir: str) -> int:
    """The step of the newest `dummy-checkpoint-N.json` in `job_dir`, 0 if none."""
    best = 0
    for name in os.listdir(job_dir):
        m = re.fullmatch(r"dummy-checkpoint-(\d+)\.json", name)
        if m:
            best = max(best, int(m.group(1)))
    return best


_BLOCK = os.urandom(1 << 20)
#: --save-mib-per-second, in bytes: a save's state file is written no faster (0: as fast as it goes),
#: standing in for a large model's save, which the agent's upload can then overlap
_SAVE_BYTES_PER_SECOND = 0.0
#: --truncate-after-rename: a contract breaker for the chaos run
_TRUNCATE_AFTER_RENAME = False
KEEP = 5


def save(job_dir: str, step: int, padding: int = 0) -> None:
    """Writes dummy-checkpoint-N.json (and, with `padding`, a dummy-checkpoint-N.data of that many
    bytes standing in for model state), each under a temporary name; both are renamed into place
    only once both are written, so the two appear together."""
    renames = []
    if padding:
        tmp = os.path.join(job_dir, f".dummy-checkpoint-{step}.data.tmp")
        began = time.monotonic()
        with open(tmp, "wb") as f:
            f.write(step.to_bytes(8, "big"))
            left = padding - 8
            while left > 0:
                chunk = _BLOCK[: min(left, len(_BLOCK))]
                f.write(chunk)
                left -= len(chunk)
                if _SAVE_BYTES_PER_SECOND:  # paced: the bytes so far take as long as the rate says
                    f.flush()
                    time.sleep(max(0.0, began + (padding - left) / _SAVE_BYTES_PER_SECOND - time.monotonic()))
        renames.append((tmp, os.path.join(job_dir, f"dummy-checkpoint-{step}.data")))
    tmp = os.path.join(job_dir, f".dummy-checkpoint-{step}.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"step": step, "state": step * 7 % 1000}, f)
    renames.append((tmp, os.path.join(job_dir, f"dummy-checkpoint-{step}.json")))
    for tmp, final in renames:
        os.replace(tmp, final)
    if _TRUNCATE_AFTER_RENAME:  # the contract broken on purpose: the renamed file changes afterwards
        time.sleep(0.2)
        with open(renames[-1][1], "r+b") as f:
            f.truncate(5)
    if padding:
        for name in os.listdir(job_dir):  # keep only the newest state file, like CheckpointManager
            m = re.fullmatch(r"dummy-checkpoint-(\d+)\.data", name)
            if m and int(m.group(1)) < step:
                os.remove(os.path.join(job_dir, name))
    kept = sorted(
        (int(m.group(1)) for m in (re.fullmatch(r"dummy-checkpoint-(\d+)\.json", n) for n in os.listdir(job_dir)) if m),
        reverse=True,
    )
    for old in kept[KEEP:]:  # keep the newest few, as TF's CheckpointManager does
        try:
            os.remove(os.path.join(job_dir, f"dummy-checkpoint-{old}.json"))
        except FileNotFoundError:
            pass


def main(argv: list[str] | None = None) -> int:
    """Runs the dummy trainer with `argv` (the trainer contract's flags); returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job-dir", required=True)
    parser.add_argument("--data-dir")
    parser.add_argument("--train-steps", type=int, required=True)
    parser.add_argument("--num-gpus", type=int, default=0)
    parser.add_argument("--checkpoint-steps", type=int, default=10)
    parser.add_argument("--step-seconds", type=float, default=0.05)
    parser.add_argument(
        "--on-sigterm",
        choices=["ignore", "save", "die"],
        default="ignore",
        help="ignore it (the recipe's dummy), save and exit (the contract), or die at once",
    )
    parser.add_argument(
        "--resume-every",
        type=int,
        default=1,
        help="resume only from a multiple of this step (Keras BackupAndRestore: the epoch start)",
    )
    parser.add_argument("--fail-at-start", action="store_true")
    parser.add_argument("--step-log")
    parser.add_argument("--timing-log")
    parser.add_argument(
        "--save-seconds",
        type=float,
        default=0.0,
        help="extra time each periodic save takes (stands in for a bigger model's save)",
    )
    parser.add_argument(
        "--save-mib-per-second",
        type=float,
        default=0.0,
        help="write a save's --checkpoint-bytes no faster than this (0: unpaced)",
    )
    parser.add_argument(
        "--truncate-after-rename",
        action="store_true",
        help="break the contract: cut each saved .json short 0.2 s after renaming it (chaos)",
    )
    parser.add_argument(
        "--exit-seconds",
        type=float,
        default=0.0,
        help="seconds between the save on a notice and the exit (a TensorFlow process's teardown)",
    )
    parser.add_argument(
        "--no-report-saved",
        action="store_true",
        help="do not report the save on a notice (a trainer older than contract.report_saved)",
    )
    parser.add_argument(
        "--startup-seconds",
        type=float,
        default=0.0,
        help="extra start-up time before the first step (imports, graph building)",
    )
    parser.add_argument(
        "--checkpoint-bytes",
        type=int,
        default=0,
        help="pad each checkpoint with this many bytes, to make uploads and restores take time",
    )
    args, unknown = parser.parse_known_args(argv)

    global _SAVE_BYTES_PER_SECOND, _TRUNCATE_AFTER_RENAME
    _SAVE_BYTES_PER_SECOND = args.save_mib_per_second * (1 << 20)
    _TRUNCATE_AFTER_RENAME = args.truncate_after_rename
    if args.fail_at_start:
        print("dummy trainer: failing at start as asked (--fail-at-start)", file=sys.stderr)
        return 3
    os.makedirs(args.job_dir, exist_ok=True)
    stop = StopRequest.install()
    save_now = SaveRequest.install()
    if args.on_sigterm == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif args.on_sigterm == "die":
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    time.sleep(args.startup_seconds)
    step = latest_checkpoint(args.job_dir) // args.resume_every * args.resume_every
    print(f"dummy trainer: resuming at step {step} of {args.train_steps}; hyperparameters {unknown}", flush=True)
    # Steps are paced against a deadline, so a step costs exactly --step-seconds however long the
    # bookkeeping around it takes; a save moves the deadline (its time is a stall, as in a real trainer).
    deadline = time.monotonic()
    while step < args.train_steps:
        deadline += args.step_seconds
        time.sleep(max(0.0, deadline - time.monotonic()))
        step += 1
        if args.step_log:
            with open(args.step_log, "a", encoding="utf-8") as f:
                f.write(f"{step}\n")
        report_progress(step)
        if step % args.checkpoint_steps == 0 or step == args.train_steps:
            time.sleep(args.save_seconds)
            save(args.job_dir, step, args.checkpoint_bytes)
            print(f"step {step}/{args.train_steps} saved", flush=True)
            deadline = time.monotonic()
        if stop.requested and args.on_sigterm == "save":
            started = time.monotonic()
            save(args.job_dir, step, args.checkpoint_bytes)
            if args.timing_log:
                with open(args.timing_log, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"signal": stop.at, "save_started": started, "saved": time.monotonic()}) + "\n")
            print(f"dummy trainer: {stop.signal_name} at step {step}; saved, exiting", flush=True)
            if not args.no_report_saved:
                report_saved(step)  # last: from here the agent may end this process once the save is committed
            time.sleep(args.exit_seconds)
            return 0
        if save_now.take():
            save(args.job_dir, step, args.checkpoint_bytes)
            print(f"dummy trainer: asked to save at step {step}; saved, training on", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
