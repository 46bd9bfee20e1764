"""`survivor demo`: the whole lifecycle on this machine -- train, get preempted, resume, finish.

Nothing but pip: the metadata server is survivor's emulator, the job dir a local directory (or
fake-gcs-server with `--gcs`), the "VM" a local agent process (`LocalInstance`), and the "MIG" this
loop, which recreates the instance with a fresh boot disk after each preemption. Preemptions come at
seeded random steps, the way Spot VMs get them: `preempted=TRUE`, then the ACPI soft off (SIGTERM),
then the hard off 30 s later.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

import yaml

from survivor.jobdir.journal import Journal
from survivor.jobdir.storage import open_storage

DEFAULT_STEPS = {"mlp": 300, "dummy": 200, "cifar10": 80}


def preemption_steps(train_steps: int, count: int, seed: int) -> list[int]:
    """Pure decision: `count` distinct steps, sorted, spread over the middle of the run."""
    low, high = max(1, train_steps // 10), max(2, train_steps * 9 // 10)
    population = range(low, high)
    return sorted(random.Random(seed).sample(population, min(count, len(population))))


def demo_spec(trainer: str, job_dir: str, train_steps: int, python: str, data_dir: str | None = None) -> dict:
    """The job spec the demo runs: a built-in trainer on 2 logical devices."""
    spec = {
        "name": "survivor-demo",
        "job_dir": job_dir,
        "train_steps": train_steps,
        "num_gpus": 2,
        "grace_seconds": 20,
        "sync_seconds": 1.0,
        "on_finish": "keep-alive",
    }
    if trainer == "mlp":
        spec.update(trainer={"builtin": "mlp"}, checkpoint_steps=100,
                    hyperparameters={"learning-rate": 0.05, "log-steps": 25, "step-seconds": 0.02})
    elif trainer == "cifar10":
        spec.update(trainer={"builtin": "cifar10"}, checkpoint_steps=20, data_dir=data_dir,
                    hyperparameters={"resnet-depth": 8, "train-batch-size": 32, "log-steps": 5, "eval-steps": 2})
    else:
        spec.update(trainer={"argv": [python, "-m", "survivor.trainers.dummy", "--on-sigterm", "save",
                                      "--step-seconds", "0.03"]}, checkpoint_steps=25)
    return spec


def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from survivor.local.instance import LocalInstance

    console = Console()
    root = os.path.abspath(args.workdir) if args.workdir else tempfile.mkdtemp(prefix="survivor-demo-")
    marker = os.path.join(root, ".survivor-demo")  # a rerun may delete an earlier demo's files, nothing else
    if args.workdir and os.path.lexists(root):
        if not (os.path.isdir(root) and not os.path.islink(root) and (not os.listdir(root) or os.path.exists(marker))):
            print(f"survivor demo: --workdir {root}: exists and is not an earlier demo's; name a new directory",
                  file=sys.stderr)
            return 2
        shutil.rmtree(root)
    os.makedirs(root, exist_ok=True)
    open(marker, "w").close()
    steps = args.steps or DEFAULT_STEPS[args.trainer]
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    schedule = preemption_steps(steps, args.preemptions, seed)

    emulator = None
    if args.gcs:
        from survivor.local.gcs import StorageEmulator

        emulator = StorageEmulator(log_dir=root).start()
        emulator.create_bucket("survivor-demo")
        job_dir = "gs://survivor-demo/job"
    else:
        job_dir = os.path.join(root, "jobdir")
    data_dir = None
    if args.trainer == "cifar10":
        from survivor.trainers import cifar10_data

        data_dir = os.path.join(root, "cifar-10-data")
        counts = cifar10_data.synthetic(512, data_dir, seed=0)
        console.print(f"wrote {counts['train']} synthetic CIFAR-10 images to {data_dir}")
    spec = demo_spec(args.trainer, job_dir, steps, sys.executable, data_dir)
    console.print(f"[bold]survivor demo[/bold]: {args.trainer} trainer, {steps} steps on 2 logical devices, "
                  f"job dir {job_dir}")
    console.print(f"preemptions planned at steps {schedule} (seed {seed}); files under {root}")

    vm = LocalInstance({"survivor-job": yaml.safe_dump(spec)}, os.path.join(root, "vm"),
                       name="survivor-demo-1", python=sys.executable)
    started = time.monotonic()
    pending = list(schedule)
    try:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=console, disable=args.no_progress, transient=False) as bar:
            task = bar.add_task("boot 1", total=steps)
            vm.boot()
            while True:
                reached = vm.progress() or 0
                bar.update(task, completed=reached, description=f"boot {vm.boots}")
                if pending and reached >= pending[0]:
                    pending.pop(0)
                    bar.console.print(f"  preempting at step {reached}: preempted=TRUE, SIGTERM, hard off in 30 s")
                    vm.set_preempted()
                    time.sleep(0.2)
                    code = vm.preempt(soft_off=True)
                    bar.console.print(f"  boot {vm.boots} ended (agent exit {code}); the MIG recreates the VM")
                    vm.boot(wipe=True)
                    continue
                if not vm.running():
                    code = vm.process.returncode
                    if code != 0:
                        console.print(f"[red]the agent exited with {code}; see {vm.log_path()}[/red]")
                        return 1
                    state = Journal(open_storage(job_dir)).state()
                    if state.done is not None or state.failed is not None:
                        bar.update(task, completed=steps)
                        break
                    vm.boot(wipe=True)
                time.sleep(0.1)
        state = Journal(open_storage(job_dir)).state()
    finally:
        vm.close()
        if emulator:
            emulator.stop()

    table = Table(title="attempts (from/reached/saved: steps; safe in: notice to committed checkpoint)")
    for column in ("boot", "from", "reached", "saved", "lost", "outcome", "restore", "train", "safe in"):
        table.add_column(column, justify="right")
    for a in state.attempts:
        t = a.timings or {}
        table.add_row(str(a.number), str(a.restored_step or 0), str(a.reached_step), str(a.end_step),
                      str(a.steps_lost), a.outcome or "-", f"{t.get('restore', 0):.2f}s", f"{t.get('train', 0):.1f}s",
                      f"{t['notice_to_safe']:.2f}s" if "notice_to_safe" in t else "-")
    console.print(table)
    preempted = [a for a in state.attempts if a.outcome in ("preempted", "stopped")]
    lost = [a.steps_lost or 0 for a in preempted]
    done = state.done or {}
    console.print(
        f"[bold]{'DONE' if state.done else 'NOT DONE'}[/bold] at step {done.get('step')} of {steps}; "
        f"{len(preempted)} preemptions survived; steps lost per preemption {lost} "
        f"(max {max(lost) if lost else 0}); {time.monotonic() - started:.0f} s in all"
    )
    return 0 if state.done and done.get("step") == steps else 1
