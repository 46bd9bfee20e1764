"""Goodput of survivor and of each alternative's own code: one VM at a time, the same preemptions, real time.

    python -m benchmarks.goodput --own-code [--preemptions 2] [--every 300] [--jitter 50] [--only keras]
    python -m benchmarks.goodput --own-code --smoke      # 1 preemption after ~60 s per row: a check

Every row trains survivor.trainers.mlp's model and data on 2 logical CPU devices with the same step
pause (benchmarks.peers.workload), until the same seeded preemptions: at each time (counted on the
job's own clock, the sum of its boots) the VM's metadata says `instance/preempted=TRUE`, the soft
off follows `--notice-lead` later (Spot without a notice duration: both at once) as SIGTERM, and
the hard off SIGKILLs whatever is left `--hard-off` (30 s) after it. The VM is then booted again
at once, as a MIG would recreate it (the minutes a real recreation and boot take are left out, the
same for every row). The window ends at the last preemption; one more boot, stopped at its first
step, tells which step the job resumes from: the work kept.

- survivor: `survivor agent` (LocalInstance: its own metadata emulator, a fresh boot disk each boot)
  with the built-in mlp trainer, the job dir in fake-gcs-server: every boot downloads its checkpoint.
- the alternatives: their processes (benchmarks.peers.*) on a VM stand-in with its own metadata
  emulator, their checkpoint dir on a disk that survives the restart (the setting most favourable to them).

Every row is timed the same way: the driver reads the step each process reports
(`report_progress`, survivor's own per-step progress record) every 5 ms. From that:
step time (the median interval between steps), start-up (boot to the first step, less one step and
the restore), restore (survivor: the agent's download from the journal; the others: their own
restore call, timed by the harness), checkpoint stalls (the step interval after each save step,
less the median), work re-run (steps run again x step time), goodput (steps kept x step time / wall).
What is left (notice to exit, process exit, step jitter) is "other".
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from typing import Callable

from benchmarks.common import PLOTS, ROOT, machine, plot_bars, schedule, scratch_dir, table
from survivor.jobdir.journal import Timing

POLL = 0.005


@dataclass
class Row:
    """One alternative: how to start a boot of it, and after which steps it saves."""

    name: str
    ran_as: str
    argv: Callable[[str, "argparse.Namespace"], list[str]] | None  # (disk, args) -> argv; None: survivor
    saves_after: Callable[[int, int, "argparse.Namespace"], bool]  # (step, boot's first step, args)


def _py(module: str) -> list[str]:
    return [sys.executable, "-m", module]


ROWS = [
    Row(
        "survivor",
        "own code: `survivor agent`, built-in mlp trainer, job dir in fake-gcs-server",
        None,
        lambda s, start, a: s % a.checkpoint_steps == 0,
    ),
    Row(
        "Keras BackupAndRestore (epoch)",
        'own code: keras.callbacks.BackupAndRestore(save_freq="epoch"), model.fit',
        lambda disk, a: (
            _py("benchmarks.peers.keras_backup")
            + [
                "--backup-dir",
                os.path.join(disk, "backup"),
                "--train-steps",
                str(a.train_steps),
                "--steps-per-epoch",
                str(a.epoch_steps),
                "--save-freq",
                "epoch",
                "--step-seconds",
                str(a.step_seconds),
            ]
        ),
        lambda s, start, a: s % a.epoch_steps == 0,
    ),
    Row(
        "Keras BackupAndRestore (save_freq=N)",
        "own code: keras.callbacks.BackupAndRestore(save_freq=N), model.fit",
        lambda disk, a: (
            _py("benchmarks.peers.keras_backup")
            + [
                "--backup-dir",
                os.path.join(disk, "backup"),
                "--train-steps",
                str(a.train_steps),
                "--steps-per-epoch",
                str(a.epoch_steps),
                "--save-freq",
                str(a.checkpoint_steps),
                "--step-seconds",
                str(a.step_seconds),
            ]
        ),
        lambda s, start, a: (s - start) % a.checkpoint_steps == 0,
    ),  # its batch counter restarts with the process
    Row(
        "PreemptionCheckpointHandler (GCE default)",
        "own code: tf.distribute.experimental.PreemptionCheckpointHandler, GCE GPU config (platform forced: no GPU here)",
        lambda disk, a: (
            _py("benchmarks.peers.tf_handler")
            + [
                "--checkpoint-dir",
                os.path.join(disk, "ckpt"),
                "--train-steps",
                str(a.train_steps),
                "--checkpoint-steps",
                str(a.checkpoint_steps),
                "--watch",
                "gce",
                "--step-seconds",
                str(a.step_seconds),
            ]
        ),
        lambda s, start, a: s % a.checkpoint_steps == 0,
    ),
    Row(
        "PreemptionCheckpointHandler (+ instance/preempted)",
        "own code: the same, TerminationConfig watcher also reads instance/preempted",
        lambda disk, a: (
            _py("benchmarks.peers.tf_handler")
            + [
                "--checkpoint-dir",
                os.path.join(disk, "ckpt"),
                "--train-steps",
                str(a.train_steps),
                "--checkpoint-steps",
                str(a.checkpoint_steps),
                "--watch",
                "gce+preempted",
                "--step-seconds",
                str(a.step_seconds),
            ]
        ),
        lambda s, start, a: s % a.checkpoint_steps == 0,
    ),
    Row(
        "recipe",
        "own code: the recipe's runner() unchanged; its startup.sh modelled (restart = the same boot)",
        lambda disk, a: (
            _py("benchmarks.peers.recipe")
            + [
                f"--job-dir={os.path.join(disk, 'job')}",
                f"--train-steps={a.train_steps}",
                f"--checkpoint-steps={a.checkpoint_steps}",
                "--hyperparameter-1=64",
                "--hyperparameter-2=0.05",
                f"--step-seconds={a.step_seconds}",
            ]
        ),
        lambda s, start, a: s % a.checkpoint_steps == 0,
    ),
]


class PeerVM:
    """A VM stand-in for an alternative: one process group, a metadata emulator, a disk that survives."""

    def __init__(self, root: str, argv: list[str]):
        from survivor.local.metadata_server import MetadataServer

        self.root, self.argv = root, argv
        self.disk = os.path.join(root, "persistent-disk")
        os.makedirs(self.disk, exist_ok=True)
        os.makedirs(os.path.join(self.disk, "job"), exist_ok=True)  # the recipe's startup.sh: mkdir -p $JOB_DIR
        self.metadata = MetadataServer(name="peer-1").start()
        self.process: subprocess.Popen | None = None
        self.boots = 0

    def boot(self) -> None:
        self.boots += 1
        self.metadata.set("instance/preempted", "FALSE")
        self.metadata.set("instance/maintenance-event", "NONE")
        self.progress_file = os.path.join(self.root, f"progress-{self.boots}")
        self.notes_file = os.path.join(self.root, f"notes-{self.boots}")
        env = {
            **os.environ,
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "PYTHONPATH": ROOT,
            "PYTHONUNBUFFERED": "1",
            "GCE_METADATA_IP": self.metadata.host,  # what failure_handling_util reads for the host
            "SURVIVOR_PROGRESS_FILE": self.progress_file,
            "BENCH_NOTES": self.notes_file,
        }
        self.log = open(os.path.join(self.root, f"boot-{self.boots}.log"), "wb")
        self.process = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def progress(self) -> int | None:
        from survivor.agent.trainer import read_progress

        return read_progress(self.progress_file)

    def set_preempted(self) -> None:
        self.metadata.set("instance/preempted", "TRUE")

    def soft_off(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)
        self.process.wait()

    def _signal(self, sig) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

    def restore_seconds(self, boot: int) -> float:
        try:
            with open(os.path.join(self.root, f"notes-{boot}"), encoding="utf-8") as f:
                return sum(json.loads(line).get("restore", 0.0) for line in f if line.strip())
        except OSError:
            return 0.0

    def agent_seconds(self, boot: int, started: float) -> None:
        return None

    def log_tail(self) -> str:
        with open(os.path.join(self.root, f"boot-{self.boots}.log"), encoding="utf-8", errors="replace") as f:
            return f.read()[-1500:]

    def close(self) -> None:
        if self.running():
            self.kill()
        self.metadata.stop()


class SurvivorVM:
    """survivor's row: LocalInstance (the agent as its unit starts it), a fresh boot disk each boot."""

    def __init__(self, root: str, args, job_dir: str):
        import yaml

        from survivor.local.instance import LocalInstance
        from survivor.agent.trainer import progress_path

        spec = {
            "job_dir": job_dir,
            "train_steps": args.train_steps,
            "checkpoint_steps": args.checkpoint_steps,
            "num_gpus": 2,
            "on_finish": "keep-alive",
            "trainer": {"builtin": "mlp"},
            "hyperparameters": {"step-seconds": args.step_seconds, "log-steps": 500},
        }
        self.job_dir = job_dir
        self.vm = LocalInstance(
            {"survivor-job": yaml.safe_dump(spec)}, root, python=sys.executable, env={"TF_CPP_MIN_LOG_LEVEL": "2"}
        )
        self._progress = lambda: progress_path(self.vm.workdir)

    def boot(self) -> None:
        self.vm.boot(wipe=True)

    def running(self) -> bool:
        return self.vm.running()

    def progress(self) -> int | None:
        from survivor.agent.trainer import read_progress

        return read_progress(self._progress())

    def set_preempted(self) -> None:
        self.vm.set_preempted()

    def soft_off(self) -> None:
        self.vm.soft_off()

    def kill(self) -> None:
        self.vm.kill()

    def restore_seconds(self, boot: int) -> float:
        from survivor.jobdir.journal import Journal
        from survivor.jobdir.storage import open_storage

        attempts = [a for a in Journal(open_storage(self.job_dir)).attempts() if a.number == boot]
        return attempts[0].timings.get(Timing.RESTORE, 0.0) if attempts else 0.0

    def agent_seconds(self, boot: int, started: float) -> float | None:
        """From the boot to the agent's `trainer started` line (its log's wall-clock time)."""
        import datetime

        for line in self.vm.log_lines(boot):
            if line.get("message") == "trainer started" and "time" in line:
                return datetime.datetime.fromisoformat(line["time"]).timestamp() - started
        return None

    def log_tail(self) -> str:
        return "\n".join(line.get("message", "") for line in self.vm.log_lines()[-15:])

    def close(self) -> None:
        self.vm.close()


@dataclass
class Boot:
    started: float
    ended: float = 0.0
    notice: float | None = None
    samples: list[tuple[float, int]] = field(default_factory=list)  # (time, step) at each change seen
    restore: float = 0.0
    wall_started: float = field(default_factory=time.time)
    agent: float | None = None  # survivor: boot to the trainer's start (the agent's own start-up)


def _poll(vm, boot: Boot) -> None:
    step = vm.progress()
    if step is not None and (not boot.samples or step != boot.samples[-1][1]):
        boot.samples.append((time.perf_counter(), step))


def run_row(row: Row, args, times: list[float], root: str, bucket: str) -> dict:
    """Boots the row's VM through the preemptions in `times`; returns its boots and the step it resumes from."""
    slug = "".join(c if c.isalnum() else "-" for c in row.name.lower())[:40]
    vm_root = os.path.join(root, slug)
    vm = (
        SurvivorVM(vm_root, args, f"gs://{bucket}/{slug}")
        if row.argv is None
        else PeerVM(vm_root, row.argv(os.path.join(vm_root, "persistent-disk"), args))
    )
    boots: list[Boot] = []
    clock = 0.0
    try:
        for number, at in enumerate(times, 1):
            boot = Boot(time.perf_counter())
            vm.boot()
            while vm.running() and clock + time.perf_counter() - boot.started < at:
                _poll(vm, boot)
                time.sleep(POLL)
            if not vm.running():
                raise RuntimeError(f"{row.name}: boot {number} exited before its preemption:\n{vm.log_tail()}")
            boot.notice = time.perf_counter()
            vm.set_preempted()
            time.sleep(args.notice_lead)
            vm.soft_off()
            deadline = time.perf_counter() + args.hard_off
            while vm.running() and time.perf_counter() < deadline:
                _poll(vm, boot)
                time.sleep(POLL)
            if vm.running():
                vm.kill()
            _poll(vm, boot)
            boot.ended = time.perf_counter()
            clock += boot.ended - boot.started
            boot.restore = vm.restore_seconds(number)
            boot.agent = vm.agent_seconds(number, boot.wall_started)
            boots.append(boot)
            print(
                f"  {row.name}: boot {number} steps {boots[-1].samples[0][1] - 1 if boot.samples else '?'}"
                f"..{boot.samples[-1][1] if boot.samples else '?'}, {boot.ended - boot.started:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        probe = Boot(time.perf_counter())  # the boot after the window: where does the job resume?
        vm.boot()
        while not probe.samples and vm.running() and time.perf_counter() - probe.started < 600:
            _poll(vm, probe)
            time.sleep(POLL)
        if not probe.samples:
            raise RuntimeError(f"{row.name}: the boot after the window never stepped:\n{vm.log_tail()}")
        vm.kill()
    finally:
        vm.close()
    return {"row": row, "boots": boots, "resumes_at": probe.samples[0][1] - 1}


def badput(result: dict, args) -> dict:
    """Pure: the badput split and goodput of one row from its boots (see the module docstring).

    The step time is the mean interval between reported steps outside the intervals that hold a
    save; a save's stall is its interval less that. So a boot's time splits exactly into start-up,
    restore, its steps, its stalls and what follows its last step (the notice to the exit)."""
    row, boots, kept = result["row"], result["boots"], result["resumes_at"]
    plain_time = plain_steps = 0.0
    save_intervals = []  # (seconds, steps) of the intervals that hold a save
    for boot in boots:
        start = boot.samples[0][1] - 1
        for (t0, s0), (t1, s1) in zip(boot.samples, boot.samples[1:]):
            if any(row.saves_after(s, start, args) for s in range(s0, s1)):
                save_intervals.append((t1 - t0, s1 - s0))
            else:
                plain_time, plain_steps = plain_time + t1 - t0, plain_steps + s1 - s0
    step = plain_time / plain_steps
    stalls = sum(seconds - steps * step for seconds, steps in save_intervals)
    wall = sum(b.ended - b.started for b in boots)
    startup = restore = 0.0
    executed, rerun_per = 0, []
    starts = [b.samples[0][1] - 1 for b in boots] + [kept]
    for i, boot in enumerate(boots):
        first_t, first_step = boot.samples[0]
        restore += boot.restore
        startup += first_t - boot.started - step - boot.restore
        executed += boot.samples[-1][1] - (first_step - 1)
        rerun_per.append(boot.samples[-1][1] - starts[i + 1])
    rerun = executed - kept
    shares = {
        "goodput": kept * step / wall,
        "startup": startup / wall,
        "restore": restore / wall,
        "stalls": stalls / wall,
        "rerun": rerun * step / wall,
    }
    shares["other"] = 1 - sum(shares.values())
    notice_to_exit = [b.ended - b.notice for b in boots if b.notice is not None]
    return {
        "name": row.name,
        "ran_as": row.ran_as,
        "step": step,
        "wall": wall,
        "kept": kept,
        "executed": executed,
        "rerun_per": rerun_per,
        "notice_to_exit": statistics.median(notice_to_exit),
        "boots": len(boots),
        "startup_per_boot": startup / len(boots),
        "agent_per_boot": statistics.mean([b.agent for b in boots])
        if all(b.agent is not None for b in boots)
        else None,
        **shares,
    }


#: A Spot VM's time without a VM after a preemption, the same for every row: a MIG recreates a VM in
#: about 1-2 minutes (90 s taken) and a Deep Learning VM image boots to its startup script in about a
#: minute more (60 s); survivor's image then reaches the unit's start in ~1 s (benchmarks.boot,
#: docs/benchmarks.md "Boot to the first step"). The wheel path's reinstall is not in it.
RECREATION_SECONDS = 150.0


def with_recreation(result: dict, preemptions: int, seconds: float) -> dict:
    """Pure: a row's shares once each preemption also costs `seconds` with no VM at all (the
    recreation and the boot the own-code run leaves out): every share scaled to the longer wall
    time, and the time without a VM as a share of its own (`no_vm`)."""
    wall = result["wall"] + preemptions * seconds
    scale = result["wall"] / wall
    shares = {k: result[k] * scale for k in ("goodput", "startup", "restore", "stalls", "rerun", "other")}
    return {**result, **shares, "no_vm": preemptions * seconds / wall, "wall": wall}


def preemption_times(seed: int, every: float, jitter: float, count: int) -> list[float]:
    """Pure: `count` preemption times on the job's clock, the same for every row."""
    return schedule(seed, every, jitter, every * count)[:count]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preemptions", type=int, default=2, help="preemptions per row (each row's window)")
    parser.add_argument("--every", type=float, default=300.0, help="mean seconds between preemptions")
    parser.add_argument("--jitter", type=float, default=50.0, help="+- seconds around --every")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--notice-lead",
        type=float,
        default=0.05,
        help="seconds from preempted=TRUE to the soft off's SIGTERM (Spot without a notice duration)",
    )
    parser.add_argument("--hard-off", type=float, default=30.0, help="seconds from SIGTERM to SIGKILL")
    parser.add_argument(
        "--step-seconds",
        type=float,
        default=0.05,
        help="pause after each step, standing in for a bigger model (survivor.trainers.mlp's flag)",
    )
    parser.add_argument(
        "--checkpoint-steps",
        type=int,
        default=1800,
        help="periodic save interval (survivor, the recipe, the handler's backups, Keras save_freq=N)",
    )
    parser.add_argument("--epoch-steps", type=int, default=2700, help="steps per epoch for model.fit")
    parser.add_argument("--train-steps", type=int, default=10_000_000, help="more than any window reaches")
    parser.add_argument("--only", help="run only rows whose name contains this")
    parser.add_argument(
        "--recreation-seconds",
        type=float,
        default=RECREATION_SECONDS,
        help="time without a VM per preemption in the second table (default: %(default)s s, see RECREATION_SECONDS)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="1 preemption after 60+-10 s per row, saves every 300 steps"
    )
    parser.add_argument("--plot", default=os.path.join(PLOTS, "goodput-own-code.png"))
    args = parser.parse_args(argv)
    if args.smoke:
        args.preemptions, args.every, args.jitter = 1, 60.0, 10.0
        args.checkpoint_steps, args.epoch_steps = 300, 450
        args.plot = os.path.join(scratch_dir("bench-goodput-plot-"), "goodput-own-code.png")
    from survivor.local.gcs import StorageEmulator

    times = preemption_times(args.seed, args.every, args.jitter, args.preemptions)
    rows = [r for r in ROWS if not args.only or args.only.lower() in r.name.lower()]
    root = scratch_dir("bench-goodput-own-")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results = []
    with StorageEmulator(log_dir=root) as gcs:
        gcs.create_bucket("bench")
        for row in rows:
            results.append(badput(run_row(row, args, times, root, "bench"), args))
            r = results[-1]
            print(f"  {row.name}: goodput {100 * r['goodput']:.1f}%", file=sys.stderr, flush=True)
    print(
        f"{started}; machine: {machine()}; rows one after another, each through the same {args.preemptions} "
        f"preemption(s) at {', '.join(f'{t:.0f}' for t in times)} s of its own clock (seed {args.seed}, every "
        f"{args.every:g}+-{args.jitter:g} s), preempted=TRUE then SIGTERM {args.notice_lead:g} s later and SIGKILL "
        f"{args.hard_off:g} s after that, restarted at once; mlp on 2 logical CPU devices with a {args.step_seconds:g} s "
        f"step pause; periodic saves every {args.checkpoint_steps} steps, epochs of {args.epoch_steps} steps\n"
    )
    pct = lambda v: f"{100 * v:.1f}%"  # noqa: E731
    print(
        table(
            "goodput under preemption, each alternative as its own code",
            [
                "row",
                "goodput",
                "start-up",
                "restore",
                "ckpt stalls",
                "work re-run",
                "other (notice to exit, jitter)",
                "steps re-run per preemption",
                "step (ms)",
                "notice to exit (s)",
                "ran as",
            ],
            [
                [
                    r["name"],
                    pct(r["goodput"]),
                    pct(r["startup"]),
                    pct(r["restore"]),
                    pct(r["stalls"]),
                    pct(r["rerun"]),
                    pct(r["other"]),
                    str(r["rerun_per"]),
                    f"{1000 * r['step']:.1f}",
                    f"{r['notice_to_exit']:.2f}",
                    r["ran_as"],
                ]
                for r in results
            ],
        )
    )
    recreated = [with_recreation(r, args.preemptions, args.recreation_seconds) for r in results]
    print(
        table(
            f"the same runs as a real Spot job sees them: {args.recreation_seconds:g} s without a VM per "
            f"preemption (a MIG's recreation and a VM's boot), the same for every row",
            ["row", "goodput", "no VM", "start-up", "restore", "ckpt stalls", "work re-run", "other"],
            [
                [
                    r["name"],
                    pct(r["goodput"]),
                    pct(r["no_vm"]),
                    pct(r["startup"]),
                    pct(r["restore"]),
                    pct(r["stalls"]),
                    pct(r["rerun"]),
                    pct(r["other"]),
                ]
                for r in recreated
            ],
        )
    )
    for r in results:
        if r["agent_per_boot"] is not None:
            print(
                f"{r['name']}: start-up {r['startup_per_boot']:.2f} s a boot, of which {r['agent_per_boot']:.2f} s from "
                f"the boot to the agent's `trainer started` and the rest the trainer's own start to its first step; "
                f"restore {r['restore'] * r['wall'] / r['boots']:.2f} s a boot; notice to exit {r['notice_to_exit']:.2f} s"
            )
        else:
            print(
                f"{r['name']}: start-up {r['startup_per_boot']:.2f} s a boot; restore "
                f"{r['restore'] * r['wall'] / r['boots']:.2f} s a boot; notice to exit {r['notice_to_exit']:.2f} s"
            )
    labels = [textwrap.fill(r["name"], 16) for r in results]
    plot = plot_bars(
        args.plot,
        f"goodput and badput, each alternative as its own code ({args.preemptions} preemption(s) "
        f"every ~{args.every / 60:g} min, real time)",
        labels,
        {
            "goodput": [r["goodput"] for r in results],
            "start-up": [r["startup"] for r in results],
            "restore": [r["restore"] for r in results],
            "ckpt stalls": [r["stalls"] for r in results],
            "work re-run": [r["rerun"] for r in results],
            "other": [r["other"] for r in results],
        },
        "share of wall time",
        stacked=True,
    )
    if plot:
        print(f"plot: {plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
