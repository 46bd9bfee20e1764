"""A trainer survivor did not write: TensorFlow's file layout, its files saved in an order of its own.

    $ python harness/foreign_trainer.py --job-dir /tmp/job --train-steps 200 --checkpoint-steps 20 \
          --step-log /tmp/steps.log --order state-first --export

It keeps a `checkpoint` state file naming `ckpt-N` beside `ckpt-N.index` and
`ckpt-N.data-00000-of-00001`, as TensorFlow does. `--order state-first` updates the state file
before the shards (as a script that calls `tf.train.update_checkpoint_state` before
`Checkpoint.write` does); `shards-first` after them (TensorFlow's CheckpointManager); `no-state`
never (`tf.train.Checkpoint.write`). `--shards N` writes N data shards, the last first. It pauses
`--pause` seconds between files and deletes the previous save after the new one. `--export` writes
an `export/` directory after the final save, as the built-in trainers write their SavedModel. It
resumes from what the state file names and exits 3 when that checkpoint is missing, as a script
would that trusts its state file. On SIGTERM it saves at the step it is at and exits 0. With
`--hold-at N --hold-file PATH` it trains no step from N on until PATH exists (a SIGTERM ends the wait
as it ends training): a test's notice then lands while it trains, however late the test sends it,
never after the job finished. It knows nothing of survivor: no contract module, no progress file;
every step it executes goes to `--step-log`.
Used by tests/test_save_orders.py and the chaos run's "save orders" rounds.
"""

import argparse
import json
import os
import re
import signal
import sys
import time


def write(path: str, data: bytes) -> None:
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def save(job_dir: str, step: int, pause: float, order: str, shards: int = 1) -> None:
    """One save of `step`: `shards` data shards (the last first, as a sharded writer may finish them
    in any order) and the index, with the state file first, last, or not at all (`no-state`: as
    `tf.train.Checkpoint.write`, which keeps none), then the previous save deleted."""
    prefix = f"ckpt-{step}"
    state = ("checkpoint", f'model_checkpoint_path: "{prefix}"\nall_model_checkpoint_paths: "{prefix}"\n'.encode())
    files = [
        (f"{prefix}.data-{i:05d}-of-{shards:05d}", step.to_bytes(8, "big") + os.urandom(4096))
        for i in reversed(range(shards))
    ]
    files.append((f"{prefix}.index", json.dumps({"step": step, "shards": shards}).encode()))
    ordered = {"state-first": [state, *files], "shards-first": [*files, state], "no-state": files}[order]
    for i, (name, data) in enumerate(ordered):
        if i:
            time.sleep(pause)
        write(os.path.join(job_dir, name), data)
    for name in os.listdir(job_dir):
        found = re.fullmatch(r"ckpt-(\d+)\..*", name)
        if found and int(found.group(1)) != step:
            os.remove(os.path.join(job_dir, name))


def restore(job_dir: str) -> int:
    """The step of the checkpoint the state file names (or, with none, the newest `ckpt-N.index` by
    name, as TensorFlow users' code falls back); exits 3 when that checkpoint is not whole."""
    try:
        with open(os.path.join(job_dir, "checkpoint"), encoding="utf-8") as f:
            named = re.search(r'model_checkpoint_path: "(.*)"', f.read())
        if named is None:
            print("cannot resume: the state file names no checkpoint", file=sys.stderr, flush=True)
            sys.exit(3)
        prefix = named.group(1)
    except FileNotFoundError:
        steps = [int(m.group(1)) for m in map(re.compile(r"ckpt-(\d+)\.index").fullmatch, os.listdir(job_dir)) if m]
        if not steps:
            return 0
        prefix = f"ckpt-{max(steps)}"
    try:
        with open(os.path.join(job_dir, f"{prefix}.index"), encoding="utf-8") as f:
            index = json.load(f)
        step, shards = index["step"], index.get("shards", 1)
        for i in range(shards):
            with open(os.path.join(job_dir, f"{prefix}.data-{i:05d}-of-{shards:05d}"), "rb") as f:
                assert int.from_bytes(f.read(8), "big") == step
    except (OSError, ValueError, KeyError, AssertionError) as exc:
        print(f"cannot resume: {prefix} is not whole: {exc}", file=sys.stderr, flush=True)
        sys.exit(3)
    return step


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job-dir", required=True)
    parser.add_argument("--train-steps", type=int, required=True)
    parser.add_argument("--checkpoint-steps", type=int, default=20)
    parser.add_argument("--step-log", required=True)
    parser.add_argument("--step-seconds", type=float, default=0.03)
    parser.add_argument("--pause", type=float, default=0.3)
    parser.add_argument("--order", choices=["state-first", "shards-first", "no-state"], default="state-first")
    parser.add_argument("--shards", type=int, default=1, help="data shards a save writes")
    parser.add_argument("--export", action="store_true", help="write export/ after the final save")
    parser.add_argument("--hold-at", type=int, help="train no step from this one on until --hold-file exists")
    parser.add_argument("--hold-file", help="the file whose existence lets training pass --hold-at")
    args, _ = parser.parse_known_args()
    if (args.hold_at is None) != (args.hold_file is None):
        parser.error("--hold-at and --hold-file go together")
    os.makedirs(args.job_dir, exist_ok=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    step = restore(args.job_dir)
    print(f"resumed from step {step}", flush=True)
    while step < args.train_steps and not stop:
        while args.hold_at is not None and step + 1 >= args.hold_at and not stop and not os.path.exists(args.hold_file):
            time.sleep(0.01)
        if stop:
            break
        time.sleep(args.step_seconds)
        step += 1
        with open(args.step_log, "a", encoding="utf-8") as log:
            log.write(f"{step}\n")
        if step % args.checkpoint_steps == 0:
            save(args.job_dir, step, args.pause, args.order, args.shards)
    save(args.job_dir, step, args.pause, args.order, args.shards)
    if args.export and step >= args.train_steps:
        os.makedirs(os.path.join(args.job_dir, "export", "variables"), exist_ok=True)
        write(os.path.join(args.job_dir, "export", "saved_model.pb"), b"graph of step %d" % step)
        time.sleep(args.pause)
        write(os.path.join(args.job_dir, "export", "variables", "variables.index"), b"variables of step %d" % step)
    print(f"saved step {step}; exiting", flush=True)


if __name__ == "__main__":
    main()
