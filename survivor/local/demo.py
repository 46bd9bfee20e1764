"""`survivor demo`: the whole lifecycle on this machine -- train, get preempted, resume, finish.

Nothing but pip: the metadata server is survivor's emulator, the job dir a local directory (or
fake-gcs-server with `--gcs`), the "VM" a local agent process (`LocalInstance`), and the "MIG" this
loop, which recreates the instance with a fresh boot disk after each preemption. Preemptions come at
seeded random steps, the way Spot VMs get them: `preempted=TRUE`, then the ACPI soft off (SIGTERM),
then the hard off 30 s later.

    >>> run(DemoOptions(trainer="dummy", steps=80, preemptions=2, seed=3))   # True once DONE at step 80

The first screen is survivor's own: the lines TensorFlow's C++ runtime prints as it starts (no CUDA
driver, CPU instructions, absl's logging warning) are kept out of the terminal unless `verbose`; the
agent's log files and the demo's `data.log` keep every line.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

import yaml

from survivor.jobdir.journal import NOTICED, Journal, Timing
from survivor.jobdir.storage import open_storage
from survivor.spec import SpecError

DEFAULT_STEPS = {"mlp": 300, "dummy": 200, "cifar10": 80}
#: Synthetic CIFAR-10 training images the cifar10 demo writes before it starts.
DEMO_IMAGES = 512

#: What TensorFlow's C++ runtime prints as it starts, whatever the program: glog/absl lines naming a
#: .cc file (`I0000 00:00:1795453281.427412   21735 cudart_stub.cc:31] ...`, or the older
#: `2024-01-01 12:00:00.000000: I tensorflow/core/...cc:113] ...`), absl's warning that logging is not
#: initialised, and the second line of cpu_feature_guard's message.
_TF_STARTUP = re.compile(
    r"^(?:[IWE]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+\.cc:\d+\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] \S+\.cc:\d+\]"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|To enable the following instructions: .*rebuild TensorFlow with the appropriate compiler flags\.)"
)


def tensorflow_startup_line(line: str) -> bool:
    """Pure decision: whether `line` is one of the lines TensorFlow's C++ runtime prints as it starts."""
    return bool(_TF_STARTUP.match(line))


def shown_lines(lines: list[str], verbose: bool = False) -> list[str]:
    """Pure decision: the lines of a child's output the demo's terminal shows: all with `verbose`,
    else all but TensorFlow's start-up lines."""
    return list(lines) if verbose else [line for line in lines if not tensorflow_startup_line(line)]


def write_demo_data(data_dir: str, log_path: str, *, verbose: bool = False, show: Callable[[str], None] = print) -> int:
    """Writes the cifar10 demo's synthetic images with `survivor data cifar10` in a child process;
    returns its exit code. Its output goes whole to `log_path`, and to `show` as `shown_lines` has it
    (all of it when the child fails), less its summary line, which the demo says in its own words.

    The writing needs no TensorFlow (survivor/trainers/tfrecord.py); the filter stays for a child
    that prints anything else.
    """
    data_dir = os.path.abspath(data_dir)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "survivor",
            "data",
            "cifar10",
            "--synthetic",
            str(DEMO_IMAGES),
            "--out",
            data_dir,
            "--seed",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        cwd=os.path.dirname(data_dir),
    )  # never a cwd with a `survivor/` folder: see LocalInstance
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(done.stdout)
    for line in shown_lines(done.stdout.splitlines(), verbose or done.returncode != 0):
        if not line.startswith("train.tfrecords:"):
            show(line)
    return done.returncode


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
        spec.update(
            trainer={"builtin": "mlp"},
            checkpoint_steps=100,
            hyperparameters={"learning-rate": 0.05, "log-steps": 25, "step-seconds": 0.02},
        )
    elif trainer == "cifar10":
        spec.update(
            trainer={"builtin": "cifar10"},
            checkpoint_steps=20,
            data_dir=data_dir,
            hyperparameters={"resnet-depth": 8, "train-batch-size": 32, "log-steps": 5, "eval-steps": 2},
        )
    else:
        spec.update(
            trainer={
                "argv": [python, "-m", "survivor.trainers.dummy", "--on-sigterm", "save", "--step-seconds", "0.03"]
            },
            checkpoint_steps=25,
        )
    return spec


def progress_view(
    boot: int, reached: int | None, guest: dict, starting: str, trained: bool, saved: int | None = None
) -> tuple[int, str, bool]:
    """Pure decision: what the progress bar shows, as (step, description, trained).

    `reached` is the step the trainer reported on this boot (None until it reports); `guest` the
    agent's guest attributes (`state`, and `step`: the step restored, then each commit's);
    `starting` what the trainer starts ("TensorFlow"); `trained`: it has trained on this boot already;
    `saved`: the step the last boot saved (its journal record), until this boot's agent says which
    step it restored.
    Before the trainer's first step the bar stays at the step the boot resumes from and says so,
    instead of 0 (a restart from scratch, to the eye).
    """
    state, step = guest.get("state"), guest.get("step")
    step = int(str(step)) if str(step or "").isdigit() else None
    if state != "training" and saved is not None:  # the guest's step is the last boot's, and may lag its last commit
        step = saved
    trained = trained or (state == "training" and reached is not None and reached > (step or 0))
    if trained:
        return reached or 0, f"boot {boot}", True
    if state == "training":
        return step or 0, f"boot {boot}: " + (f"restored step {step}, " if step else "") + f"starting {starting}", False
    return step or 0, f"boot {boot}: " + (f"restoring step {step}" if step else "starting"), False


def notice_line(boot: int, planned: int, noticed: int) -> str:
    """Pure: the line a preemption starts with: the step it was planned at and the step the trainer is at."""
    return (
        f"  boot {boot}: planned preemption at step {planned}; the trainer is at step {noticed}: "
        "preempted=TRUE, SIGTERM, hard off in 30 s"
    )


def ended_line(boot: int, code: int | None, reached: int | None, saved: int | None) -> str:
    """Pure: the line a preempted boot ends with: the furthest step its trainer reached and the step it saved."""
    return (
        f"  boot {boot} ended (agent exit {code}): the trainer reached step {reached} and saved step {saved}; "
        "the MIG recreates the VM"
    )


@dataclass(frozen=True)
class DemoOptions:
    """What `survivor demo` runs: the built-in trainer, its steps (None: the trainer's demo size), how
    many preemptions, where the job dir lives (a local dir, or fake-gcs-server with `gcs`), where the
    demo's files go (None: a temporary dir), the preemption schedule's seed (None: a random one), and
    what the terminal shows (`progress` bar; `verbose`: TensorFlow's start-up lines too)."""

    trainer: str = "cifar10"
    steps: int | None = None
    preemptions: int = 3
    gcs: bool = False
    workdir: str | None = None
    seed: int | None = None
    progress: bool = True
    verbose: bool = False


def demo_root(workdir: str | None) -> str:
    """The demo's directory, emptied: `workdir` (an earlier demo's, or empty, or new), else a temporary one.

    SpecError when `workdir` holds anything but an earlier demo's files: a rerun may delete those, nothing else.
    """
    root = os.path.abspath(workdir) if workdir else tempfile.mkdtemp(prefix="survivor-demo-")
    marker = os.path.join(root, ".survivor-demo")
    if workdir and os.path.lexists(root):
        if not (os.path.isdir(root) and not os.path.islink(root) and (not os.listdir(root) or os.path.exists(marker))):
            raise SpecError([f"--workdir {root}: exists and is not an earlier demo's; name a new directory"])
        shutil.rmtree(root)
    os.makedirs(root, exist_ok=True)
    open(marker, "w").close()
    return root


def _guest(vm) -> dict:
    """The agent's guest attributes (survivor's namespace) on the demo's VM: its state and step."""
    return vm.metadata.get("instance/guest-attributes").get("survivor", {})


def run(options: DemoOptions) -> bool:
    """Runs the demo, showing its progress and the attempts' table; True when the job is DONE at its last step."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from survivor.local.instance import LocalInstance
    from survivor.log import console as make_console

    console = make_console()
    root = demo_root(options.workdir)
    steps = options.steps or DEFAULT_STEPS[options.trainer]
    seed = options.seed if options.seed is not None else random.randrange(1 << 30)
    schedule = preemption_steps(steps, options.preemptions, seed)

    data_dir = None
    if options.trainer == "cifar10":
        data_dir = os.path.join(root, "cifar-10-data")
        log_path = os.path.join(root, "data.log")
        code: int | None = write_demo_data(
            data_dir,
            log_path,
            verbose=options.verbose,
            show=lambda line: console.print(line, markup=False, highlight=False),
        )
        if code != 0:
            console.print(f"[red]writing the demo's images failed (exit {code}); see {log_path}[/red]")
            return False
        console.print(f"wrote {DEMO_IMAGES} synthetic CIFAR-10 images to {data_dir}")
    emulator = None
    if options.gcs:
        from survivor.local.gcs import StorageEmulator

        emulator = StorageEmulator(log_dir=root).start()
        emulator.create_bucket("survivor-demo")
        job_dir = "gs://survivor-demo/job"
    else:
        job_dir = os.path.join(root, "jobdir")
    spec = demo_spec(options.trainer, job_dir, steps, sys.executable, data_dir)
    console.print(
        f"[bold]survivor demo[/bold]: {options.trainer} trainer, {steps} steps on 2 logical devices, job dir {job_dir}"
    )
    console.print(f"preemptions planned at steps {schedule} (seed {seed}); files under {root}")

    vm = LocalInstance(
        {"survivor-job": yaml.safe_dump(spec)}, os.path.join(root, "vm"), name="survivor-demo-1", python=sys.executable
    )
    started = time.monotonic()
    pending = list(schedule)
    starting = "the trainer" if options.trainer == "dummy" else "TensorFlow"
    trained, saved = False, None
    try:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console,
            disable=not options.progress,
            transient=False,
        ) as bar:
            task = bar.add_task(f"boot 1: starting {starting}", total=steps)
            vm.boot()
            while True:
                reached = vm.progress()
                shown, description, trained = progress_view(vm.boots, reached, _guest(vm), starting, trained, saved)
                bar.update(task, completed=shown, description=description)
                if pending and reached is not None and reached >= pending[0]:
                    bar.console.print(notice_line(vm.boots, pending.pop(0), reached))
                    vm.set_preempted()
                    time.sleep(0.2)
                    code = vm.preempt(soft_off=True)
                    last = Journal(open_storage(job_dir)).attempts()[-1:]  # the table's figures for this boot
                    ended = last[0] if last and last[0].number == vm.boots else None
                    if ended is not None and ended.reached_step is not None:
                        bar.update(task, completed=ended.reached_step)  # where the table says it got to
                    saved = ended.end_step if ended else None
                    bar.console.print(ended_line(vm.boots, code, ended.reached_step if ended else reached, saved))
                    vm.boot(wipe=True)
                    trained = False
                    continue
                if not vm.running():
                    code = vm.returncode
                    if code != 0:
                        console.print(f"[red]the agent exited with {code}; see {vm.log_path()}[/red]")
                        return False
                    state = Journal(open_storage(job_dir)).state()
                    if state.done is not None or state.failed is not None:
                        bar.update(task, completed=steps)
                        break
                    vm.boot(wipe=True)
                    trained = False
                time.sleep(0.1)
        state = Journal(open_storage(job_dir)).state()
    finally:
        vm.close()
        if emulator:
            emulator.stop()

    table = Table(
        title="attempts (restored: the step a boot resumed from; reached: the furthest its trainer got; "
        "saved: the step committed when it ended; safe in: notice to committed checkpoint)"
    )
    for column in ("boot", "restored", "reached", "saved", "lost", "outcome", "restore", "train", "safe in"):
        table.add_column(column, justify="right")
    for a in state.attempts:
        t = a.timings or {}
        table.add_row(
            str(a.number),
            str(a.restored_step or 0),
            str(a.reached_step),
            str(a.end_step),
            str(a.steps_lost),
            a.outcome or "-",
            f"{t.get('restore', 0):.2f}s",
            f"{t.get('train', 0):.1f}s",
            f"{t[Timing.NOTICE_TO_SAFE]:.2f}s" if Timing.NOTICE_TO_SAFE in t else "-",
        )
    console.print(table)
    preempted = [a for a in state.attempts if a.outcome in NOTICED]
    lost = [a.steps_lost or 0 for a in preempted]
    done = state.done or {}
    console.print(
        f"[bold]{'DONE' if state.done else 'NOT DONE'}[/bold] at step {done.get('step')} of {steps}; "
        f"{len(preempted)} preemptions survived; steps lost per preemption {lost} "
        f"(max {max(lost) if lost else 0}); {time.monotonic() - started:.0f} s in all"
    )
    return bool(state.done) and done.get("step") == steps
