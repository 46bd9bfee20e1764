"""`survivor check-trainer`: a user's trainer under the real agent, preempted once and resumed, judged.

    $ survivor check-trainer --steps 60 -- python train.py --learning-rate 0.1

Two runs of one job on this machine, each a `LocalInstance` (the agent as a process, survivor's
metadata emulator, a boot disk that a recreation wipes) with the job dir in a local directory:

1. **preempted**: at `preempt_at` (the step the trainer reports through `$SURVIVOR_PROGRESS_FILE`)
   the VM gets what a Spot preemption brings -- `preempted=TRUE`, the ACPI soft off (SIGTERM), the
   hard off 30 s later -- and is recreated with a fresh boot disk until the job is DONE or FAILED;
2. **uninterrupted** (unless `exact=False`): the same job, never preempted, to compare with.

The verdict reads what the agent recorded (the journal's attempts, the agent's JSON log lines) and
what the trainer left on the boot disk; each check says what to fix when it fails:

- saved on the notice: the preempted boot committed the step its trainer reached, 0 steps lost;
- resumed at the step it saved: the next boot's trainer started right after the restored step;
- checkpoints numbered by step: no file named a step that is not the step (a save count, an epoch,
  a date), beyond `train_steps`, or no step at all;
- wrote to --job-dir, and nothing outside it: files the trainer left in its working directory
  (the agent's work dir, which the VM's recreation wipes) are listed;
- DONE at train_steps, and trained no step past it;
- exact: the final checkpoint's tensors against the uninterrupted run's (TensorFlow checkpoints,
  Keras `.keras`/`.h5` files; a seeded, deterministic trainer matches bit for bit);
- the badput of each boot, by the goodput ledger's causes (survivor/jobdir/ledger.py).

The decisions (`preempt_now`, `findings`, `compare_tensors`, `badput_by_boot`) are pure functions;
`run_check` runs the instances and reads the files.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import IO, Callable

import yaml

from survivor.agent.ending import EXIT_BAD_SPEC
from survivor.jobdir.journal import NOTICED, Attempt, Journal, JobState, Timing
from survivor.jobdir.ledger import CAUSE, CauseName, build_ledger
from survivor.jobdir.storage import open_storage
from survivor.spec import MAX_SPEC_BYTES, SpecError

#: What the agent itself keeps in its work dir, the trainer's working directory
#: (survivor/agent/trainer.py: `job`, `trainer.pid`, `trainer-state`; survivor/agent/delivery.py:
#: `trainer-src`, `packages`, `trainer-site`); anything else there was written by the trainer.
AGENT_ENTRIES = frozenset({"job", "trainer.pid", "trainer-state", "trainer-src", "packages", "trainer-site"})

#: The mirror's warnings (`Mirror._say_once`, field `said`) that mean a checkpoint's name is not its step.
NAMING_WARNINGS = ("no step", "numbered")  # and "beyond <step>"

#: Names never compared between the runs: TensorFlow's state file (it holds the save's time and the
#: kept checkpoints' list) and TensorBoard's event files (wall times).
NOT_COMPARED = ("checkpoint",)

PASS, WARN, FAIL = "pass", "warn", "fail"

#: Marks a --workdir as a check's (a rerun may empty it), and is locked while a check runs there.
MARKER = ".survivor-check"

#: A run that has not ended after this many boots is stopped: the agent fails a job after
#: `max_failed_attempts` boots without progress (3 by default), and one preemption adds one.
MAX_BOOTS = 12


@dataclass(frozen=True)
class CheckOptions:
    """What `survivor check-trainer` runs: the trainer's `argv` (or the spec's `trainer:` from
    `config`), `steps` to train, the step to preempt at (None: half way), how often it checkpoints
    (None: a quarter of the steps), where its files go (None: a temporary dir), whether to compare
    with an uninterrupted run, each run's `timeout` in seconds, and how long to wait for a first
    reported step before preempting anyway (a trainer that reports none)."""

    argv: tuple[str, ...] = ()
    config: str | None = None
    steps: int = 60
    preempt_at: int | None = None
    checkpoint_steps: int | None = None
    workdir: str | None = None
    exact: bool = True
    timeout: float = 900.0
    unreported_after: float = 60.0
    progress: bool = True


@dataclass(frozen=True)
class Finding:
    """One check's result: its name, `pass`/`warn`/`fail`, and what it saw (and what to do)."""

    check: str
    status: str
    detail: str


@dataclass
class Run:
    """One run of the job: what the agent recorded and what the boots left."""

    label: str
    job_dir: str
    attempts: list[Attempt] = field(default_factory=list)
    state: JobState | None = None
    said: dict[str, dict] = field(default_factory=dict)  # the mirror's warnings by `said`, first of each
    lines: list[dict] = field(default_factory=list)  # every agent log line, all boots
    strays: dict[int, list[str]] = field(default_factory=dict)  # boot -> files left outside --job-dir
    final_dir: str = ""  # the local job dir as the last boot left it
    preempted_at: int | None = None  # the step the trainer had reported at the notice (None: no notice)
    reported: bool = False  # the trainer reported a step at least once
    max_reported: int | None = None
    first_steps: dict[int, int] = field(default_factory=dict)  # boot -> the first step its trainer reported
    timed_out: bool = False
    seconds: float = 0.0


def check_spec(options: CheckOptions, job_dir: str) -> dict:
    """The job spec both runs use: the user's `config` (if any) with this check's job dir, steps,
    checkpoint interval and finish, or a spec around `argv`. SpecError when neither names a trainer."""
    spec: dict = {}
    if options.config:
        try:
            if os.path.getsize(options.config) > MAX_SPEC_BYTES:
                raise SpecError(
                    [
                        f"--config {options.config}: longer than the {MAX_SPEC_BYTES} bytes a metadata "
                        "value holds (the agent reads the job spec from instance metadata)"
                    ]
                )
            with open(options.config, encoding="utf-8") as f:
                loaded = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as exc:
            raise SpecError([f"--config {options.config}: {exc}"]) from None
        if not isinstance(loaded, dict):
            raise SpecError([f"--config {options.config}: expected a mapping of the job spec's keys"])
        spec.update(loaded)
    if options.argv:
        spec["trainer"] = {"argv": list(options.argv)}
    if "trainer" not in spec:
        raise SpecError(
            [
                "check-trainer: name the trainer: `survivor check-trainer -- python train.py`, "
                "or --config with a trainer: key"
            ]
        )
    spec.update(
        name=spec.get("name", "check-trainer"),
        job_dir=job_dir,
        train_steps=options.steps,
        on_finish="keep-alive",
        sync_seconds=1.0,
        grace_seconds=spec.get("grace_seconds", 30),
    )
    spec.pop("placement", None), spec.pop("deadline", None)  # one machine: no moves, no switches
    spec["max_failed_attempts"] = 1  # a failed boot says all a second one would: the verdict comes sooner
    if options.checkpoint_steps:  # else only the config's: the agent passes a trainer no flag its spec does not name
        spec["checkpoint_steps"] = options.checkpoint_steps
    if len(yaml.safe_dump(spec).encode()) > MAX_SPEC_BYTES:
        raise SpecError(
            [
                f"--config {options.config}: the job spec is longer than the {MAX_SPEC_BYTES} bytes a "
                "metadata value holds (the agent reads it from instance metadata)"
            ]
        )
    return spec


def resolved_argv(argv: tuple[str, ...], cwd: str) -> tuple[str, ...]:
    """The trainer's argv as the agent must run it from its own work dir: the program found on the
    PATH, and each argument naming a file or directory under `cwd` made absolute."""
    if not argv:
        return argv
    program = shutil.which(argv[0], path=os.environ.get("PATH")) or argv[0]
    if os.sep in program and not os.path.isabs(program):  # `.venv/bin/python`: found beside the caller
        program = os.path.abspath(os.path.join(cwd, program))
    rest = tuple(
        os.path.abspath(os.path.join(cwd, a)) if not a.startswith("-") and os.path.exists(os.path.join(cwd, a)) else a
        for a in argv[1:]
    )
    return (program, *rest)


def preempt_now(
    reported: int | None, preempt_at: int, running_seconds: float, unreported_after: float, committed: bool = False
) -> bool:
    """Pure decision: whether the preempted run's notice comes now: at the step, or, for a trainer
    that has reported no step, once the agent committed its first checkpoint or it has run
    `unreported_after` seconds.

    >>> preempt_now(30, 30, 5.0, 60.0), preempt_now(29, 30, 500.0, 60.0), preempt_now(None, 30, 61.0, 60.0)
    (True, False, True)
    >>> preempt_now(None, 30, 5.0, 60.0, committed=True)
    True
    """
    if reported is not None:
        return reported >= preempt_at
    return committed or running_seconds >= unreported_after


def strays_in(workdir: str) -> list[str]:
    """The files under an agent's work dir that are not the agent's (`AGENT_ENTRIES`), relative."""
    found: list[str] = []
    if not os.path.isdir(workdir):
        return found
    for entry in sorted(os.listdir(workdir)):
        if entry in AGENT_ENTRIES:
            continue
        path = os.path.join(workdir, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            for parent, _, files in os.walk(path):
                found += [os.path.relpath(os.path.join(parent, f), workdir) for f in sorted(files)]
        else:
            found.append(entry)
    return found


def run_job(
    spec: dict,
    root: str,
    *,
    preempt_at: int | None,
    timeout: float,
    unreported_after: float,
    label: str,
    on_step: Callable[[str, int, int | None], None] = lambda label, boot, step: None,
) -> Run:
    """Runs the job through `LocalInstance` boots until DONE or FAILED (or `timeout`), preempting it
    once at `preempt_at` (None: never). `on_step(label, boot, step)` hears each reported step."""
    from survivor.local.instance import LocalInstance

    run = Run(label=label, job_dir=spec["job_dir"])
    vm = LocalInstance(
        {"survivor-job": yaml.safe_dump(spec)}, os.path.join(root, "vm"), name=f"check-{label}-1", python=sys.executable
    )
    started = time.monotonic()
    journal = Journal(open_storage(spec["job_dir"]))
    pending = preempt_at
    try:
        vm.boot()
        booted = time.monotonic()
        while True:
            if time.monotonic() - started > timeout:
                run.timed_out = True
                break
            reached = vm.progress()
            if reached is not None:
                run.reported = True
                run.max_reported = max(reached, run.max_reported or 0)
                run.first_steps.setdefault(vm.boots, reached)
            on_step(label, vm.boots, reached)
            committed = reached is None and _guest_step(vm) > 0
            if (
                pending is not None
                and vm.running()
                and preempt_now(reached, pending, time.monotonic() - booted, unreported_after, committed)
            ):
                run.preempted_at, pending = reached, None
                vm.preempt(soft_off=True)
                _boot_over(run, vm)
                vm.boot(wipe=True)
                booted = time.monotonic()
                continue
            if not vm.running():
                _boot_over(run, vm)
                state = journal.state()
                if (
                    state.done is not None
                    or state.failed is not None
                    or vm.returncode == EXIT_BAD_SPEC
                    or vm.boots >= MAX_BOOTS
                ):
                    break
                vm.boot(wipe=True)
                booted = time.monotonic()
            time.sleep(0.1)
    finally:
        if vm.running():
            _boot_over(run, vm)
        vm.close()
    run.attempts = journal.attempts()
    run.state = journal.state()
    run.final_dir = os.path.join(vm.workdir, "job")
    run.seconds = time.monotonic() - started
    return run


def _guest_step(vm) -> int:
    """The step of the agent's newest commit (or its restore) on this boot, from its guest attributes (0: none)."""
    step = str(vm.metadata.get("instance/guest-attributes").get("survivor", {}).get("step") or "")
    return int(step) if step.isdigit() else 0


def _boot_over(run: Run, vm) -> None:
    """Notes what a boot that ended left: the agent's log lines and the files outside --job-dir."""
    lines = vm.log_lines()
    run.lines += lines
    for line in lines:
        said = line.get("said")
        if said and said not in run.said:
            run.said[said] = line
    strays = strays_in(vm.workdir)
    if strays:
        run.strays[vm.boots] = strays


def badput_by_boot(
    attempts: list[Attempt], now: _dt.datetime, done_at: _dt.datetime | None
) -> dict[int, dict[CauseName, float]]:
    """Pure: each boot's seconds that were not productive training, by the ledger's causes."""
    ledger = build_ledger(attempts, now=now, done_at=done_at)
    out: dict[int, dict[CauseName, float]] = {}
    for span in ledger.spans:
        if span.attempt and span.cause != "productive" and span.seconds > 0:
            causes = out.setdefault(span.attempt, {})
            causes[span.cause] = causes.get(span.cause, 0.0) + span.seconds
    return out


def findings(
    run: Run, straight: Run | None, compared: "Comparison | None", steps: int, exact: bool = True
) -> list[Finding]:
    """Pure decision: the verdict's checks from the preempted run, the uninterrupted one (None:
    not run) and the comparison of their final checkpoints (None: not compared); `exact`: the
    check compares at all."""
    out: list[Finding] = []
    attempts = sorted(run.attempts, key=lambda a: a.number)
    if run.timed_out:
        return [
            Finding(
                "ends within --timeout",
                FAIL,
                f"the run had not ended after --timeout ({len(attempts)} "
                "boots): nothing can be judged; give it more time, or fewer --steps",
            )
        ]
    noticed = next((a for a in attempts if a.outcome in NOTICED), None)
    after = [a for a in attempts if noticed is not None and a.number > noticed.number]
    contract = "docs/trainer-contract.md"

    if noticed is None and attempts and attempts[0].outcome == "failed":  # it never got to the notice: that first
        out.append(Finding("starts and trains", FAIL, f"boot 1 failed before the preemption: {attempts[0].reason}"))
        out += [f for f in findings_of_files(run) if f.status == FAIL]
        return out
    if not run.reported:
        out.append(
            Finding(
                "reports its step",
                FAIL,
                "the trainer never reported a step ($SURVIVOR_PROGRESS_FILE): the agent cannot count "
                "what a preemption loses nor tell a save is committed; call "
                f"survivor.trainers.contract.report_progress(step) each step ({contract})",
            )
        )
    if noticed is None:
        out.append(
            Finding(
                "saved on the notice",
                FAIL,
                "not tested: no preemption reached the trainer ("
                + (
                    attempts[0].reason
                    if attempts and attempts[0].reason
                    else "it finished before it reported a step or the agent committed a checkpoint"
                )
                + "); report each step with report_progress so the check can preempt it at --preempt-at",
            )
        )
    elif noticed.steps_lost == 0 and noticed.end_step is not None and noticed.end_step > (noticed.restored_step or 0):
        safe = noticed.timings.get(Timing.NOTICE_TO_SAFE)
        out.append(
            Finding(
                "saved on the notice",
                PASS,
                f"boot {noticed.number} reached step {noticed.reached_step}, saved and committed step "
                f"{noticed.end_step}"
                + (f" {safe:.2f} s after the notice" if safe is not None else "")
                + "; 0 steps lost",
            )
        )
    else:
        lost = "an unknown number of" if noticed.steps_lost is None else str(noticed.steps_lost)
        fix = (
            ""
            if contract in (noticed.reason or "")
            else f". On SIGTERM, finish the step, save in --job-dir, report_saved(step), exit 0 ({contract})"
        )
        out.append(
            Finding(
                "saved on the notice",
                FAIL,
                f"boot {noticed.number} reached step {noticed.reached_step}; committed "
                f"{'nothing' if noticed.end_step is None else f'step {noticed.end_step}'}; {lost} steps "
                f"lost" + (f": {noticed.reason}" if noticed.reason else "") + fix,
            )
        )
    if noticed is not None and noticed.end_step == steps and run.preempted_at is not None and run.preempted_at < steps:
        out.append(
            Finding(
                "stops on SIGTERM",
                FAIL,
                f"after the notice at step {run.preempted_at} it trained on to step {steps} instead of "
                f"saving and exiting ({noticed.timings.get(Timing.TRAINER_SAVE, 0):.1f} s): a longer job "
                "is killed with all it trained since its last save; on SIGTERM finish the step in flight, "
                f"save, exit 0 ({contract})",
            )
        )
    if noticed is not None and after:
        nxt = after[0]
        first = next(
            (
                line.get("first_step")
                for line in run.lines  # the agent's own reading, not the check's
                if line.get("message", "").startswith("the trainer started below the restored step")
            ),
            run.first_steps.get(nxt.number),
        )
        below = "below the restored step" in (nxt.reason or "") or any(
            line.get("message", "").startswith("the trainer started below the restored step") for line in run.lines
        )
        if noticed.end_step is None:
            out.append(
                Finding(
                    "resumed at the step it saved",
                    FAIL,
                    f"nothing to resume from: boot {noticed.number} committed no checkpoint",
                )
            )
        elif nxt.restored_step is None or nxt.restored_step != noticed.end_step:
            out.append(
                Finding(
                    "resumed at the step it saved",
                    FAIL,
                    f"boot {nxt.number} restored {'nothing' if nxt.restored_step is None else f'step {nxt.restored_step}'}"
                    f", not the step {noticed.end_step} boot {noticed.number} committed",
                )
            )
        elif below:
            out.append(
                Finding(
                    "resumed at the step it saved",
                    FAIL,
                    f"boot {nxt.number} restored step {nxt.restored_step} into --job-dir, but its trainer "
                    f"first reported step {first}: it trained the committed steps "
                    "again; read the newest checkpoint in --job-dir at start (survivor.trainers.resume."
                    "ResumableCheckpoint, or fit_resumable for model.fit)",
                )
            )
        else:
            resumed_at = (run.said.get("numbered") or {}).get("first_step")  # the agent saw it resume further
            went = (
                f"its trainer went on from step {resumed_at} (the commit's number is not its step: see "
                "checkpoints numbered by step)"
                if resumed_at is not None
                else "its trainer went on from there"
            )
            out.append(
                Finding(
                    "resumed at the step it saved",
                    PASS,
                    f"boot {nxt.number} restored step {nxt.restored_step} and {went}",
                )
            )
    naming = [line for said, line in run.said.items() if said in NAMING_WARNINGS or said.startswith("beyond ")]
    if naming:
        out.append(Finding("checkpoints numbered by step", FAIL, " / ".join(line["message"] for line in naming)))
    elif any(a.end_step for a in attempts):
        out.append(Finding("checkpoints numbered by step", PASS, "each commit's step is the step its files name"))
    committed = any(a.end_step is not None for a in attempts) or (run.state and run.state.done)
    if not committed:
        out.append(
            Finding(
                "writes to --job-dir",
                FAIL,
                "nothing the trainer wrote in --job-dir was ever committed: save checkpoints there, "
                f"named by step (ckpt-<step>), or set checkpoint_pattern ({contract})",
            )
        )
    out += findings_of_files(run)
    done = (run.state.done or {}) if run.state else {}
    failed = (run.state.failed or {}) if run.state else {}
    past = run.max_reported is not None and run.max_reported > steps
    if run.timed_out:
        out.append(Finding("DONE at train_steps", FAIL, "the run did not end in time (--timeout)"))
    elif done.get("step") == steps and not past:
        out.append(Finding("DONE at train_steps", PASS, f"DONE at step {steps}"))
    else:
        why = (
            f"FAILED: {failed.get('reason', '')}"
            if failed
            else f"DONE at step {done.get('step')}"
            if done
            else "neither DONE nor FAILED"
        )
        if done and "numbered" in run.said:
            why += ": the number of a checkpoint, not a step (see checkpoints numbered by step)"
        if past:
            why += f"; the trainer trained to step {run.max_reported}, past train_steps {steps}: stop at --train-steps"
        out.append(Finding("DONE at train_steps", FAIL, why))
    if exact:
        out.append(exact_finding(straight, compared, steps))
    return out


def findings_of_files(run: Run) -> list[Finding]:
    """Pure: the check of the files a trainer left outside --job-dir."""
    strays = sorted({f for files in run.strays.values() for f in files})
    if not strays:
        return [Finding("nothing outside --job-dir", PASS, "nothing in the trainer's working directory")]
    shown = ", ".join(strays[:5]) + (f" and {len(strays) - 5} more" if len(strays) > 5 else "")
    return [
        Finding(
            "nothing outside --job-dir",
            FAIL,
            f"the trainer wrote {shown} in its working directory, which a recreated VM does not have (and "
            "the trainer's user may not write on a VM): write them under --job-dir",
        )
    ]


def exact_finding(straight: Run | None, compared: "Comparison | None", steps: int) -> Finding:
    """Pure: the exactness check from the uninterrupted run (None: not run, the preempted run
    having not ended DONE) and the comparison."""
    if straight is None:
        return Finding("exact", WARN, "not compared: the preempted run did not end DONE")
    if not (straight.state and (straight.state.done or {}).get("step") == steps):
        return Finding("exact", WARN, "the uninterrupted run did not end DONE at train_steps; nothing to compare")
    if compared is None or not compared.tensors:
        return Finding(
            "exact",
            WARN,
            "no checkpoint tensors in common to compare (TensorFlow checkpoints, "
            ".keras or .h5 files of the same name in both runs' --job-dir)",
        )
    if not compared.differing:
        return Finding(
            "exact",
            PASS,
            f"the final checkpoint's {compared.tensors} tensors and files equal the uninterrupted run's, bit for bit",
        )
    shown = ", ".join(compared.differing[:3]) + (" ..." if len(compared.differing) > 3 else "")
    return Finding(
        "exact",
        WARN,
        f"{len(compared.differing)} of {compared.tensors} tensors differ from the uninterrupted run's "
        f"({shown}): expected unless the trainer is seeded and deterministic "
        "(keras.utils.set_random_seed, tf.config.experimental.enable_op_determinism) and restores "
        "its optimizer's and data order's state",
    )


@dataclass(frozen=True)
class Comparison:
    """The final checkpoints of two runs: how many tensors both hold, and the names of those that differ."""

    tensors: int
    differing: list[str]


def compare_tensors(a: dict[str, object], b: dict[str, object]) -> Comparison:
    """Pure: the tensors both maps hold, compared bit for bit (`numpy.array_equal`)."""
    import numpy as np

    common = sorted(set(a) & set(b))
    differing = [
        name
        for name in common
        if np.asarray(a[name]).shape != np.asarray(b[name]).shape
        or not np.array_equal(np.asarray(a[name]), np.asarray(b[name]))
    ]
    return Comparison(len(common), differing)


def checkpoint_tensors(directory: str) -> dict[str, object]:
    """Every tensor of the checkpoints in `directory`, keyed `file:tensor`: TensorFlow checkpoints
    (each `.index`'s prefix, read with stock TensorFlow; `save_counter` left out, since a preempted
    run saves once more), Keras `.keras` archives (their `model.weights.h5`) and `.h5` files; any
    other file (but TensorFlow's state file and event files) as its bytes."""
    import numpy as np

    out: dict[str, object] = {}
    if not os.path.isdir(directory):
        return out
    for parent, _, files in os.walk(directory):
        for name in sorted(files):
            path = os.path.join(parent, name)
            key = os.path.relpath(path, directory)
            if name in NOT_COMPARED or name.startswith("events.out.tfevents"):
                continue
            if name.endswith(".index"):
                out.update({f"{key[:-6]}:{k}": v for k, v in _tf_tensors(path[:-6]).items()})
            elif name.endswith((".h5", ".hdf5")):
                out.update({f"{key}:{k}": v for k, v in _h5_tensors(path).items()})
            elif name.endswith(".keras"):
                out.update({f"{key}:{k}": v for k, v in _keras_tensors(path).items()})
            elif ".data-" not in name:  # any other file (a JSON checkpoint, an export's assets): its bytes
                with open(path, "rb") as f:
                    out[f"{key}:bytes"] = np.frombuffer(f.read(), dtype=np.uint8)
    return out


def _tf_tensors(prefix: str) -> dict[str, object]:
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(prefix)
    except Exception:  # not a whole checkpoint (TensorFlow raises its own errors): nothing to compare
        return {}
    dtypes = reader.get_variable_to_dtype_map()
    return {
        name: reader.get_tensor(name)
        for name, dtype in dtypes.items()
        if dtype not in (tf.variant, tf.resource) and "save_counter" not in name
    }


def _h5_tensors(source) -> dict[str, object]:
    import h5py

    out: dict[str, object] = {}
    try:
        with h5py.File(source, "r") as f:
            f.visititems(lambda name, item: out.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None)
    except OSError:
        return {}
    return out


def _keras_tensors(path: str) -> dict[str, object]:
    import io
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            weights = archive.read("model.weights.h5")
    except (OSError, KeyError, zipfile.BadZipFile):
        return {}
    return _h5_tensors(io.BytesIO(weights))


@dataclass
class Verdict:
    """What `run_check` found: the checks, each boot's badput, and the two runs."""

    findings: list[Finding]
    badput: dict[int, dict[CauseName, float]]
    preempted: Run
    straight: Run | None
    root: str

    @property
    def ok(self) -> bool:
        """No check failed (a warning is not a failure)."""
        return not any(f.status == FAIL for f in self.findings)


def verdict_lines(verdict: Verdict, steps: int) -> list[str]:
    """Pure: the verdict as the terminal shows it, one line a check, then the badput of each boot."""
    mark = {PASS: "ok  ", WARN: "note", FAIL: "FIX "}
    lines = [f"{mark[f.status]} {f.check}: {f.detail}" for f in verdict.findings]
    for boot, causes in sorted(verdict.badput.items()):
        total = sum(causes.values())
        parts = ", ".join(f"{CAUSE[c].label} {s:.1f} s" for c, s in sorted(causes.items(), key=lambda kv: -kv[1]))
        lines.append(f"     badput of boot {boot}: {total:.1f} s ({parts})")
    failing = [f.check for f in verdict.findings if f.status == FAIL]
    lines.append(
        "verdict: "
        + (
            "survives preemption as survivor needs it"
            if not failing
            else f"{len(failing)} to fix: {', '.join(failing)}"
        )
        + f" (files under {verdict.root})"
    )
    return lines


def check_root(workdir: str | None) -> tuple[str, IO[str]]:
    """The check's directory, emptied, and its marker held locked for the check's life: `workdir`
    (an earlier check's, or empty, or new), else a temporary one. SpecError when `workdir` holds
    anything but an earlier check's files, cannot be made, or another check runs there."""
    import fcntl

    root = os.path.abspath(workdir) if workdir else tempfile.mkdtemp(prefix="survivor-check-")
    marker = os.path.join(root, MARKER)
    if workdir and os.path.lexists(root):
        if not (os.path.isdir(root) and not os.path.islink(root) and (not os.listdir(root) or os.path.exists(marker))):
            raise SpecError([f"--workdir {root}: exists and is not an earlier check's; name a new directory"])
    try:
        os.makedirs(root, exist_ok=True)
        lock = open(marker, "a", encoding="utf-8")
    except OSError as exc:
        raise SpecError([f"--workdir {root}: {exc.strerror or exc}"]) from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise SpecError([f"--workdir {root}: another check-trainer runs there; wait for it or name another"]) from None
    for entry in os.listdir(root):  # an earlier check's files; the marker stays, locked
        if entry != MARKER:
            path = os.path.join(root, entry)
            shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
    return root, lock


def run_check(options: CheckOptions, show: Callable[[str], None] = print) -> Verdict:
    """Runs the preempted run and (with `exact`) the uninterrupted one, with a progress display,
    and returns the verdict."""
    from survivor.spec import JobSpec
    from survivor.log import console as make_console

    if options.steps < 2:
        raise SpecError([f"--steps {options.steps}: expected at least 2 (one to preempt at, one to resume)"])
    preempt_at = options.preempt_at or max(1, options.steps // 2)
    if not 0 < preempt_at < options.steps:
        raise SpecError([f"--preempt-at {preempt_at}: expected a step from 1 to {options.steps - 1}"])
    argv = resolved_argv(options.argv, os.getcwd())
    root, _lock = check_root(options.workdir)  # held until the check returns
    specs = {
        label: check_spec(CheckOptions(**{**options.__dict__, "argv": argv}), os.path.join(root, label, "jobdir"))
        for label in ("preempted", "uninterrupted")
    }
    JobSpec.from_mapping(specs["preempted"])  # a bad --config is said here, once, not by each boot
    show(
        f"check-trainer: {' '.join(argv) or '(the trainer of ' + str(options.config) + ')'}; {options.steps} steps, "
        f"preempted at step {preempt_at}"
        + (
            f", --checkpoint-steps {specs['preempted']['checkpoint_steps']}"
            if "checkpoint_steps" in specs["preempted"]
            else ""
        )
    )
    console = make_console()
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    runs: dict[str, Run] = {}
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        disable=not options.progress,
    ) as bar:
        tasks = {"preempted": bar.add_task("preempted run: boot 1", total=options.steps)}
        if options.exact:
            tasks["uninterrupted"] = bar.add_task("uninterrupted run: waiting", total=options.steps)

        def on_step(label: str, boot: int, step: int | None) -> None:
            bar.update(tasks[label], completed=step or 0, description=f"{label} run: boot {boot}")

        for label in tasks:
            if label == "uninterrupted" and not (runs["preempted"].state and runs["preempted"].state.done):
                bar.update(tasks[label], description="uninterrupted run: not needed (the preempted run is not DONE)")
                continue
            os.makedirs(os.path.join(root, label), exist_ok=True)
            runs[label] = run_job(
                specs[label],
                os.path.join(root, label),
                preempt_at=preempt_at if label == "preempted" else None,
                timeout=options.timeout,
                unreported_after=options.unreported_after,
                label=label,
                on_step=on_step,
            )
    straight = runs.get("uninterrupted")
    compared = None
    if straight is not None and straight.state and straight.state.done:
        compared = compare_tensors(
            checkpoint_tensors(runs["preempted"].final_dir), checkpoint_tensors(straight.final_dir)
        )
    run = runs["preempted"]
    now = _dt.datetime.now(_dt.timezone.utc)
    ended = run.state.done or run.state.failed if run.state else None
    done_at = _dt.datetime.fromisoformat(ended["time"]) if ended and ended.get("time") else now
    return Verdict(
        findings(run, straight, compared, options.steps, options.exact),
        badput_by_boot(run.attempts, now, done_at),
        run,
        straight,
        root,
    )
