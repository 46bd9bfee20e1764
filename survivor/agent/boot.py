"""The agent: the story of one boot of a training VM, told by `Boot._boot` from top to bottom.

    $ survivor agent --workdir /var/lib/survivor      # started by the systemd unit on every boot

1. Read the job spec from instance metadata (or `--config`), and who this VM is.
2. Open the job dir. DONE or FAILED already? Finish at once; never train again. A job with
   `placement:` whose region preempted it `preemptions_per_hour` times in the last hour? Move it
   to its next place (policy/placement.py decides, mig/move.py moves) before taking the lease, and end this boot there.
3. Take the job dir's lease (one writer per job), and record this attempt in the journal. Too many
   failed attempts in a row? Write FAILED and finish. A deadline that this kind of VM (Spot or
   on-demand) can no longer meet, or slack enough to go back to Spot? Ask the group to switch.
4. Watch for a notice: `preempted`, SIGTERM/SIGINT; and for a terminating maintenance event.
5. Restore the newest committed snapshot that verifies into the local job dir; first, a snapshot
   the last boot left on this VM's state disk (a job with `state_disk_gb`) is committed. A built-in
   TensorFlow trainer was launched at step 1 (here, if it had to wait for its GPUs' driver), at its
   start gate: its imports, its model and its first step's trace overlap steps 2-5, and it touches
   its dirs only once the gate opens.
6. Launch the trainer: its GPUs, its user, its code, its argv (`trainer.launch`, one call), or
   open the gate of the one launched early.
7. Mirror every new local checkpoint to the job dir while it trains (`mirror.Mirror`, a background
   thread). A maintenance notice: ask the trainer for a checkpoint, commit it, train on.
8. On a notice: SIGTERM the trainer, wait for its save within the grace budget, commit (to the
   state disk, if there is one, when the commit cannot finish in time: `jobdir.disk_tier`).
9. End the attempt: what happened (`AttemptResult`) decides how it ended (`ending.decide_ending`),
   and one path acts on it: the journal's record, DONE or FAILED, the finish action (leave the MIG,
   stop, or keep alive), the exit code systemd reads.

A job dir this VM may not use (a permission missing after IAM's propagation time, no bucket) ends
the boot with the reason recorded wherever it can be, then finishes as FAILED: exit 0, never a
restart loop. A SIGTERM before the notice watcher listens ends the boot at once: nothing trains yet.

Every step logs what it did and how long it took, as one JSON line Cloud Logging can parse.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, cast

from survivor import log as logs
from survivor import retry
from survivor.agent.budget import NoticeBudget
from survivor.agent.delivery import DeliveryError
from survivor.agent.ending import (
    EXIT_BAD_SPEC,
    EXIT_OK,
    EXIT_RETRY,
    AttemptResult,
    attempt_steps_lost,
    decide_ending,
    failed_in_a_row,
    resumed_beyond,
    saved_and_committed,
)
from survivor.agent.finish import (
    ComputeActions,
    KeepAlive,
    choose_finisher,
    is_permission_error,
    power_off,
)
from survivor.agent.gpus import count_gpus, driver_pending
from survivor.agent.maintenance import MAINTENANCE_SAVE_SECONDS, MaintenanceSave
from survivor.agent.mirror import Mirror
from survivor.agent.notice import Notice, NoticeWatcher
from survivor.agent.trainer import (
    TrainerProcess,
    TrainerUserError,
    launch,
    local_job_dir,
    progress_path,
    read_progress,
    read_saved,
    save_signal,
    warm_start,
)
from survivor.metadata import InstanceIdentity, MetadataClient, MetadataError
from survivor.jobdir.disk_tier import DiskTier, state_disk_dir
from survivor.jobdir.journal import Attempt, Journal, JobState, Outcome, should_give_up, snapshot_to_pass_over, Timing
from survivor.jobdir.journal import now as _now_text
from survivor.jobdir.lease import Holder, Lease, LeaseHeld, LeaseLost
from survivor.jobdir.storage import JobStorage, StorageError, open_storage
from survivor.jobdir.store import CheckpointStore, CommitStats, RestoreFailed
from survivor.notify import events as job_events
from survivor.notify.delivery import Notifier, Telling
from survivor.spec import JobSpec, SpecError, checkpoint_naming
from survivor.places import region_of_zone

if TYPE_CHECKING:  # imported where used: the agent loads the Compute client only to finish or switch
    from survivor.cloud.compute import Compute

__all__ = ["AgentOptions", "Boot", "BootInterrupted", "EXIT_BAD_SPEC", "EXIT_OK", "EXIT_RETRY", "Phase", "run"]

log = logs.get("agent")

#: How long a job dir that answers 403 gets before the agent gives up on it: IAM changes "typically
#: propagate in 2 minutes, but could potentially take 7 minutes or longer"
#: (https://cloud.google.com/iam/docs/access-change-propagation), so a role granted just before
#: the VM started still counts. SURVIVOR_PERMISSION_WAIT_SECONDS overrides it (tests).
PERMISSION_WAIT_SECONDS = 480.0
#: How often, after a notice, the agent looks whether the trainer's save is committed.
NOTICE_POLL = 0.02


#: Set by a LocalInstance to the time (epoch seconds) its "VM" powered on: its kernel is the host's,
#: whose uptime says nothing of that boot.
GUEST_BOOTED_ENV = "SURVIVOR_GUEST_BOOTED"


def guest_booted() -> str | None:
    """When this guest's kernel booted, ISO 8601 UTC: now less /proc/uptime (or $SURVIVOR_GUEST_BOOTED).

    The goodput ledger reads it as the end of waiting for capacity and the start of the VM's boot
    and install; None where it cannot be read (the ledger then counts that time as waiting)."""
    try:
        if os.environ.get(GUEST_BOOTED_ENV):
            epoch = float(os.environ[GUEST_BOOTED_ENV])
        else:
            with open("/proc/uptime") as f:
                epoch = time.time() - float(f.read().split()[0])
        return _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc).isoformat(timespec="milliseconds")
    except (OSError, ValueError, IndexError, OverflowError):
        return None


def _permission_wait_default() -> float:
    return float(os.environ.get("SURVIVOR_PERMISSION_WAIT_SECONDS", PERMISSION_WAIT_SECONDS))


def _passing_storage_error(exc: BaseException) -> bool:
    """A job-dir failure another try may cure (not a missing permission or bucket)."""
    return isinstance(exc, StorageError) and not exc.lasting


class BootInterrupted(BaseException):
    """SIGTERM/SIGINT before the notice watcher listens. A BaseException, like KeyboardInterrupt,
    so no `except Exception` on the way swallows it."""


@dataclass
class AgentOptions:
    """How this agent runs; everything about the job itself is in the JobSpec.

    Args:
        workdir: the agent's own dir on the boot disk; the local job dir is `job/` under it.
        spec_file: a job spec file to run instead of the one in instance metadata.
        allow_root_trainer: let the trainer run as root (the local demo, where everything is root).
        trainer_user: whom the trainer runs as when the agent is root and the spec names no user
            (the VM's unit: survivor-trainer, to whom startup.sh closed the metadata server).
        gpu_wait_seconds: how long to wait for a GPU driver the VM installs on this boot.
        python: the interpreter that runs a module trainer.
        compute_factory: makes the Compute Engine client a finish action needs (tests pass a stand-in).
        metadata: the metadata server's client; None: make one (or run off Compute Engine).
        early_signals: SIGTERM/SIGINT names that came before the agent's own handlers.
        permission_wait_seconds: how long a job dir answering 403 is waited for.
        state_disk: where the state disk is mounted (a job with `state_disk_gb`).
    """

    workdir: str = "/var/lib/survivor"
    spec_file: str | None = None
    allow_root_trainer: bool = False
    trainer_user: str | None = None
    gpu_wait_seconds: float = 900.0
    python: str = sys.executable
    compute_factory: Callable[[InstanceIdentity], ComputeActions | None] | None = None
    metadata: MetadataClient | None = None
    early_signals: list[str] = field(default_factory=list)
    permission_wait_seconds: float = field(default_factory=_permission_wait_default)
    state_disk: str = field(default_factory=state_disk_dir)


@dataclass
class Phase:
    """Wall-clock seconds per phase of this boot, reported in the attempt record and the logs."""

    seconds: dict[str, float] = field(default_factory=dict)

    def timed(self, name: str):
        """A context manager that adds the time spent inside it to phase `name`."""
        phase = self

        class _Timer:
            def __enter__(self):
                self.start = time.monotonic()

            def __exit__(self, *exc):
                phase.seconds[name] = round(phase.seconds.get(name, 0.0) + time.monotonic() - self.start, 3)

        return _Timer()


#: What the log says of an attempt that ended badly.
_ENDING_ERRORS = {
    "failed": "attempt failed",
    "interrupted": "attempt interrupted; a later boot goes on from the last commit",
    "superseded": "another agent took over this job; stopped without committing",
}


#: What the VM is doing, in its `state` guest attribute (`survivor status` shows it beside the VM).
GuestState = Literal[
    "restoring", "training", "saving", "stopped", "retrying", "done", "failed", "moved", "budget-stopped"
]


@dataclass
class Run:
    """One attempt's context, from its record (step 3) to its end (step 9): the job, this VM, the
    job dir and its records, the lease and the attempt, and from step 4 the notice watcher. Every
    step of the attempt reads what it needs from here rather than from a list of parameters."""

    spec: JobSpec
    identity: InstanceIdentity
    storage: JobStorage
    journal: Journal
    lease: Lease
    attempt: Attempt
    watcher: NoticeWatcher | None = None  # step 4 starts it
    early: TrainerProcess | None = None  # a built-in trainer started at its gate before the restore

    @property
    def notices(self) -> NoticeWatcher:
        """The notice watcher, from step 4 on (the steps that train run only after it started)."""
        if self.watcher is None:
            raise RuntimeError("the notice watcher is started at step 4, before any step that trains")
        return self.watcher


def run(options: AgentOptions) -> int:
    """Runs one boot of the agent; returns the process exit code."""
    return Boot(options).run()


class Boot:
    """One boot of the agent; `run()` is the story the module docstring tells."""

    def __init__(self, options: AgentOptions):
        self.options = options
        self.phase = Phase()
        self.metadata = options.metadata  # None once it turns out there is no metadata server
        self.progress_file = progress_path(options.workdir)
        self._first_step: int | None = None  # the first step this boot's trainer reported
        self._booting = False
        self._last_guest_write = 0.0
        self.notifier: Notifier | None = None  # the job's webhooks (`notify:`), once its attempt opens
        self._job_name = ""  # the job's name, in its events
        self._budget_raised = False  # `survivor start --budget` recorded a budget (survivor/jobdir/spending.py)
        self._budget_source: object | None = None  # the budget's notice source, for a job with a budget
        self._attempt_number = 0

    # -- the story --------------------------------------------------------------------------------

    def run(self) -> int:
        """The boot. A SIGTERM/SIGINT before the notice watcher listens ends it at once (exit 0):
        nothing trains yet, so nothing needs saving, and no slow call (a metadata server that
        drips its answer, a lease wait) may hold the agent past systemd's stop or the hard off."""
        if self.options.early_signals:
            return self._stopped_during_boot(self.options.early_signals[0])
        self._booting = True
        on_main = threading.current_thread() is threading.main_thread()
        previous = (
            {sig: signal.signal(sig, self._interrupt_boot) for sig in (signal.SIGTERM, signal.SIGINT)}
            if on_main
            else {}
        )
        try:
            if self.options.early_signals:  # came between the check above and the handler
                raise BootInterrupted(self.options.early_signals[0])
            return self._boot()
        except BootInterrupted as exc:
            return self._stopped_during_boot(str(exc))
        finally:
            self._booting = False
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _boot(self) -> int:
        """Steps 1-3: the job, its job dir, its lease; `_attempt` goes on from there."""
        # 1. the job and this VM
        with self.phase.timed(Timing.SPEC):
            try:
                spec, identity = self._load()
            except SpecError as exc:
                return self._bad_spec(exc)
            except MetadataError as exc:
                log.error("cannot read the job from the metadata server", error=str(exc))
                return EXIT_RETRY
        logs.redact(spec.secret_values())  # hyperparameters named like secrets: *** in every line from here
        log.info("job", name=spec.name, job_dir=spec.job_dir, train_steps=spec.train_steps, instance=identity.name)

        # 1b. a built-in TensorFlow trainer starts now, at its start gate: its imports and its model
        # overlap everything up to the end of the restore, and it touches nothing until the gate opens
        early = self._start_first(spec)
        try:
            return self._job(spec, identity, early)
        finally:
            if early is not None:
                early.kill()  # the boot ended before training, or after it (then a no-op)

    def _job(self, spec: JobSpec, identity: InstanceIdentity, early: TrainerProcess | None) -> int:
        """Steps 2-3 for the job of `spec`: its job dir, its lease; `_attempt` goes on from there."""
        # 2. a finished job is never trained again
        journal: Journal | None = None
        try:
            storage = open_storage(spec.job_dir, project=identity.project)
            journal = Journal(storage)
            state = self._patiently(journal.state)
        except StorageError as exc:
            return self._job_dir_refused(spec, identity, journal, exc)
        if state.done is not None:
            log.info("the job dir says DONE; not training again", step=state.done.get("step"))
            self._state("done")
            return self._finish(spec, identity, "done")
        if state.failed is not None:
            log.error("the job dir says FAILED; not training again", reason=state.failed.get("reason"))
            self._state("failed")
            return self._finish(spec, identity, "failed")
        # 2a. a job stopped at its budget (or past it) waits for `survivor start --budget`, without a VM
        if self._at_budget(spec, identity, storage):
            return self._finish(spec, identity, "budget", on_error=EXIT_OK, action="auto")

        # 2b. a region that keeps preempting the job: it moves, before this VM takes the lease, so the
        # new group's VM can (mig/move.py)
        moved = self._move(spec, identity, storage, state)
        # 2c. the job's records put its group elsewhere (a move cut before it deleted this VM's group,
        # or whose delete was refused): the lease is the new group's VM's, so this one leaves its group
        left = self._left_behind(spec, identity, storage)
        if left:
            return EXIT_OK if left == "gone" else self._finish(spec, identity, "moved", on_error=EXIT_OK)
        if moved:
            return EXIT_OK  # the move deletes this VM's group (or recreates this VM with its new shape)

        # 3. one writer per job dir: take the lease (a stale one after ttl, our own name at once)
        lease = Lease(storage, Holder.here(identity.name, identity.zone), ttl=spec.lease_seconds)
        try:
            self._patiently(lease.acquire)
        except LeaseHeld as exc:
            left = self._left_behind(spec, identity, storage)  # moved while it waited: not sitting here idle
            if left:
                return EXIT_OK if left == "gone" else self._finish(spec, identity, "moved", on_error=EXIT_OK)
            log.error("not training: another agent holds this job", reason=str(exc))
            return EXIT_RETRY
        except StorageError as exc:
            return self._job_dir_refused(spec, identity, journal, exc)
        lease.start_renewing()
        try:
            return self._attempt(spec, identity, storage, journal, state, lease, early)
        finally:
            lease.release()

    def _attempt(
        self,
        spec: JobSpec,
        identity: InstanceIdentity,
        storage: JobStorage,
        journal: Journal,
        state: JobState,
        lease: Lease,
        early: TrainerProcess | None,
    ) -> int:
        """Steps 3-9: one attempt, recorded in the journal from its start to its end."""
        attempt = journal.begin(identity.name, booted=guest_booted(), zone=identity.zone)
        run = Run(spec, identity, storage, journal, lease, attempt, early=early)
        self._job_name, self._attempt_number = spec.name, attempt.number
        if spec.notify:  # its threads tell events; nothing of this boot ever waits on them
            self.notifier = Notifier(spec.notify, storage=storage).start()
        try:
            if should_give_up(state.attempts, spec.max_failed_attempts):  # a crash loop ends here
                last = next((a for a in reversed(state.attempts) if a.outcome == "failed"), None)
                reason = f"{failed_in_a_row(spec.max_failed_attempts)} without progress" + (
                    f"; last: {last.reason}" if last and last.reason else ""
                )
                journal.end(attempt, "gave-up", reason=reason)
                return self._give_up(run, reason, attempts=attempt.number - 1)

            # 3b. a deadline: can the job still finish on this group's kind of VM? (policy/deadline.py)
            switching = self._deadline(run)
            if switching is not None:
                journal.end(attempt, "stopped", reason=f"the group switches to {switching.to_mode}: {switching.reason}")
                return EXIT_OK  # the group recreates this VM from the other template

            # 4. from here on a notice is heard (and one that came during start-up is not forgotten)
            self._booting = False
            run.watcher = NoticeWatcher(self.metadata, sources=self._notice_sources(run)).start()
            if self.options.early_signals:
                run.watcher.fire("signal", self.options.early_signals[0])
            try:
                result = self._train(run)
            finally:
                run.watcher.stop()

            # 9. how it ended
            return self._end(run, result)
        except BootInterrupted as exc:
            # before step 4 nothing of this attempt trained: nothing of it can be lost
            self._close(journal, attempt, "stopped", f"{exc} during boot", steps_lost=0)
            raise
        except StorageError as exc:  # before the trainer started (after, `_train` tells it as a result)
            self._close(journal, attempt, "gave-up" if exc.lasting else "interrupted", f"the job dir failed: {exc}")
            return self._job_dir_refused(spec, identity, journal, exc)
        except Exception as exc:  # a defect: counted as a failure, so a crash loop still ends in FAILED
            log.exception("the boot failed unexpectedly", error=f"{type(exc).__name__}: {exc}")
            self._close(journal, attempt, "failed", f"the agent failed: {type(exc).__name__}: {str(exc)[:500]}")
            return EXIT_RETRY

    def _train(self, run: Run) -> AttemptResult:
        """Steps 5-8: restore, launch the trainer, supervise it; what happened, as facts."""
        # 5. a built-in TensorFlow trainer that did not start at step 1 (its GPUs' driver was still
        # being installed) starts now, the driver awaited: it still overlaps the restore
        if run.early is None and warm_start(run.spec.trainer):
            run.early = self._start_early(run.spec, run.notices)
        try:
            return self._restore_and_train(run)
        finally:
            if run.early is not None:
                run.early.kill()  # the boot ended before training, or after it (then a no-op)

    def _start_first(self, spec: JobSpec) -> TrainerProcess | None:
        """Step 1b: a built-in TensorFlow trainer (`warm_start`) started at its gate, unless its GPUs
        need a wait (this boot still installs their driver): then step 5 starts it. None if not now."""
        if not warm_start(spec.trainer):
            return None
        detected = count_gpus()
        if driver_pending(spec.num_gpus, detected, self.metadata):
            return None
        return self._start_early(spec, detected_gpus=detected)

    def _start_early(
        self, spec: JobSpec, watcher: NoticeWatcher | None = None, detected_gpus: int | None = None
    ) -> TrainerProcess | None:
        """The trainer, started at its start gate before the restore; None if it cannot start now
        (the launch after the restore then says why, as for any trainer)."""
        try:
            return self._launch(spec, watcher, gated=True, detected_gpus=detected_gpus)
        except (DeliveryError, TrainerUserError, OSError):
            return None

    def _launch(
        self, spec: JobSpec, watcher: NoticeWatcher | None, gated: bool = False, detected_gpus: int | None = None
    ) -> TrainerProcess:
        """`trainer.launch` with this boot's options, timed as the setup (a GPU wait ends on a notice
        the watcher heard; before it listens, a SIGTERM ends the boot)."""
        with self.phase.timed(Timing.SETUP):
            return launch(
                spec,
                self.options.workdir,
                python=self.options.python,
                allow_root=self.options.allow_root_trainer,
                metadata=self.metadata,
                gpu_wait_seconds=self.options.gpu_wait_seconds,
                stop=watcher.noticed if watcher is not None else None,
                gated=gated,
                detected_gpus=detected_gpus,
                trainer_user=self.options.trainer_user,
            )

    def _restore_and_train(self, run: Run) -> AttemptResult:
        """Steps 5-8 with the trainer started early, if it was: restore, open its gate (or launch it),
        supervise it."""
        spec, identity, storage, attempt, lease = run.spec, run.identity, run.storage, run.attempt, run.lease
        self._state("restoring")
        store = CheckpointStore(storage, keep=spec.keep, writer=identity.name, max_step=spec.train_steps)
        disk = DiskTier(self.options.state_disk, storage, identity.name, identity.zone) if spec.state_disk_gb else None
        if disk is not None:
            with self.phase.timed(Timing.STATE_DISK):
                disk.recover(store, attempt.number, fence=lease.fence)
        try:
            restored, baseline = self._restore(run, store)
            if disk is not None and disk.settle(store, restored, attempt.number, fence=lease.fence) is not None:
                restored, baseline = self._restore(run, store)  # the disk's snapshot, committed now
        except RestoreFailed as exc:  # never a start from scratch over committed work
            if exc.local:  # the boot disk's reasons are the same on the next boot: they count
                return AttemptResult(failure=f"restore failed: {exc}")
            log.error("restore failed; a later boot restores the same snapshot", reason=str(exc))
            return AttemptResult(interrupted=f"restore failed: {exc}")
        if run.notices.notice is not None:  # preempted while restoring: nothing new to save, nothing lost
            return self._safe_after_notice(
                run.notices.notice,
                AttemptResult(restored_step=restored, reached_step=restored or 0, committed_step=restored),
            )

        # 6. the trainer: through its gate if it started early, else now
        try:
            if run.early is not None:
                trainer = run.early
                trainer.open_gate()
            else:
                trainer = self._launch(spec, run.notices)
        except (DeliveryError, TrainerUserError, OSError) as exc:
            return AttemptResult(
                failure=f"cannot start the trainer: {exc}", restored_step=restored, committed_step=restored
            )
        self._state("training")
        self._guest("step", str(restored or 0), force=True)
        try:
            return self._supervise(run, store, trainer, restored, disk, baseline)
        except StorageError as exc:
            log.error("the job dir failed while training; systemd restarts the agent", error=str(exc))
            return AttemptResult(
                interrupted=f"the job dir failed: {exc}", restored_step=restored, reached_step=self._reached(restored)
            )
        finally:
            trainer.kill()  # whatever happened, nothing of this attempt's trainer outlives it

    def _supervise(
        self,
        run: Run,
        store: CheckpointStore,
        trainer: TrainerProcess,
        restored: int | None,
        disk: DiskTier | None,
        baseline: frozenset,
    ) -> AttemptResult:
        """Steps 7-8: mirror while it trains; on a notice, save; once the trainer is gone, the final commit.
        `baseline`: the restored files' fingerprint, from the restore's manifest (never a scan made
        while the trainer already writes)."""
        spec, storage, attempt, lease, watcher = run.spec, run.storage, run.attempt, run.lease, run.notices
        mirror = Mirror(
            store,
            storage,
            local_job_dir(self.options.workdir),
            attempt.number,
            spec.sync_seconds,
            restored,
            self._committed,
            fence=lease.fence,
            disk=disk,
            naming=checkpoint_naming(spec.checkpoint_pattern) if spec.checkpoint_pattern else None,
        ).start(restored=baseline)
        with self.phase.timed(Timing.TRAIN):
            code = self._train_until_end(run, trainer, mirror, restored)
        if lease.lost.is_set():  # another agent writes now: stop at once, commit nothing more
            trainer.kill()
            mirror.stop()
            return AttemptResult(lease_lost=True, restored_step=restored, committed_step=mirror.committed_step)
        ignored = None
        if code is None:  # 8. a notice: save now
            notice = watcher.notice
            assert notice is not None  # _train_until_end returns None, the lease held, only on a notice
            code, ignored = self._save_on_notice(notice, trainer, mirror, NoticeBudget(spec.grace_seconds))
        commit_failure = ""
        try:
            with self.phase.timed(Timing.FINAL_COMMIT):
                mirror.final_sync(clean_exit=code == 0)
        except LeaseLost:
            return AttemptResult(lease_lost=True, restored_step=restored, committed_step=mirror.committed_step)
        except StorageError as exc:  # the last commit stands; say what was lost and why
            commit_failure = f"the final commit failed: {exc}"
            log.error(
                "the final commit failed; the last commit stands",
                error=str(exc),
                object=exc.object,
                committed_step=mirror.committed_step,
            )
        if mirror.misnumbered and self._first_step is not None and resumed_beyond(restored, self._first_step):
            self._loss_unknown_before(Journal(storage), attempt.number, restored, mirror.misnumbered)
        result = AttemptResult(
            trainer_code=code,
            commit_failure=commit_failure,
            last_words=trainer.last_words(),
            ignored_notice_seconds=ignored,
            restored_step=restored,
            reached_step=self._reached(restored),
            committed_step=mirror.committed_step,
            uncommitted_step=None if commit_failure else mirror.uncommitted(),
            refused=mirror.refused,
            misnumbered=mirror.misnumbered,
            first_step=self._first_step,
        )
        if watcher.notice is not None:  # one that came while the trainer exited by itself counts too
            result = self._safe_after_notice(watcher.notice, result)
        mirror.tidy()  # after the checkpoint is safe: never on the way to it
        return result

    @staticmethod
    def _loss_unknown_before(journal: Journal, number: int, restored: int | None, why: str) -> None:
        """The attempt that committed the step this one restored counted its loss with that step's number,
        which this trainer's resume showed is no step: its record's steps lost become unknown, with why."""
        try:
            earlier = [a for a in journal.attempts(newest=8) if a.number < number and a.end_step == restored]
            if earlier and earlier[-1].steps_lost is not None:
                before = earlier[-1]
                before.steps_lost = None
                before.reason = "; ".join(r for r in (before.reason, why) if r)
                journal.update(before)
        except StorageError as exc:
            log.warning("could not mark the earlier attempt's loss unknown", error=str(exc))

    def _train_until_end(self, run: Run, trainer: TrainerProcess, mirror: Mirror, restored: int | None) -> int | None:
        """Step 7: waits until the trainer exits (returns its code), a notice comes or the lease is
        lost (returns None unless the trainer exited too); runs a maintenance notice's save meanwhile.
        Times the trainer's start to its first new step (`first_step`): the ledger's trainer start."""
        spec, lease, watcher = run.spec, run.lease, run.notices
        maintenance: MaintenanceSave | None = None
        began = time.monotonic()
        while not lease.lost.is_set():
            # every 20 ms until the trainer's first report: the step it resumed at, within a step or a few
            notice = watcher.wait(timeout=0.02 if self._first_step is None else 0.2)
            code = trainer.poll()
            progress = read_progress(self.progress_file)
            if self._first_step is None and progress is not None:
                self._first_step = progress
                if restored is not None and progress < restored:  # a loss is never reported as 0
                    log.warning(
                        "the trainer started below the restored step: it did not resume from the checkpoint "
                        "in --job-dir, and what it trains again up to the restored step counts as lost "
                        "(docs/trainer-contract.md)",
                        first_step=progress,
                        restored_step=restored,
                    )
                elif restored is not None and resumed_beyond(restored, progress):
                    mirror.note_misnumbered(progress, restored)
            if Timing.FIRST_STEP not in self.phase.seconds and (progress or 0) > (restored or 0):
                self.phase.seconds[Timing.FIRST_STEP] = round(time.monotonic() - began, 3)
            if code is not None or notice is not None:
                return code
            warning = watcher.take_maintenance()
            if warning is not None and maintenance is None:
                self._state("saving")
                maintenance = MaintenanceSave(
                    warning,
                    mirror.committed_step,
                    save_signal(spec.trainer),
                    time.monotonic() + MAINTENANCE_SAVE_SECONDS,
                )
            if maintenance is not None and maintenance.step(trainer, mirror, read_progress(self.progress_file)):
                maintenance = None
                self._state("training")
        return None

    def _save_on_notice(
        self, notice: Notice, trainer: TrainerProcess, mirror: Mirror, budget: NoticeBudget
    ) -> tuple[int | None, float | None]:
        """Step 8: SIGTERM the trainer and wait for its save, its share of the grace budget at most
        (the rest is the final commit's); meanwhile the mirror commits what it writes. Safe means
        committed, not exited: once the checkpoint the trainer reports saved after the notice
        (`contract.report_saved`) is committed by a round that began after the notice, the trainer
        is ended at once rather than waited for (its exit takes seconds that the VM does not have).
        Returns the trainer's exit code (None if even SIGKILL left it running) and, when it ran out
        its share without exiting or saving (it did not save on the notice), how long it ran on
        after SIGTERM, else None."""
        ignored = None
        trainer.terminate()
        mirror.after_notice(deadline=budget.commit_deadline(notice.monotonic))
        self._state("saving")
        deadline = budget.trainer_deadline(notice.monotonic)
        code, woken = None, None
        while code is None:
            left = deadline - time.monotonic()
            code = trainer.wait(timeout=max(0.0, min(NOTICE_POLL, left)))
            if code is not None:
                break
            reported = read_saved(self.progress_file)
            if reported is not None and reported != woken:  # the save is complete: commit it now, not at the next round
                mirror.wake()
                mirror.check_saved(reported)
                woken = reported
            saved = saved_and_committed(reported, mirror.committed_after_notice)
            if saved is not None:
                log.info(
                    "the checkpoint saved on the notice is committed; ending the trainer",
                    step=saved,
                    seconds=round(time.monotonic() - notice.monotonic, 3),
                )
                trainer.kill()
                code = trainer.wait(timeout=5)
                break
            if left <= 0:
                ignored = round(time.monotonic() - notice.monotonic, 2)
                log.warning(
                    "the trainer did not save on the notice: it did not exit in time after SIGTERM; keeping "
                    "its newest completed checkpoint",
                    waited=ignored,
                )
                trainer.kill()
                code = trainer.wait(timeout=5)
                break
        self.phase.seconds[Timing.TRAINER_SAVE] = round(time.monotonic() - notice.monotonic, 3)
        return code, ignored

    def _end(self, run: Run, result: AttemptResult) -> int:
        """Step 9, the one ending path: records the attempt, then DONE, FAILED or nothing, as
        `decide_ending` says; returns the exit code."""
        spec, journal, attempt = run.spec, run.journal, run.attempt
        ending = decide_ending(result)
        if ending.outcome in _ENDING_ERRORS:
            log.error(_ENDING_ERRORS[ending.outcome], reason=ending.reason)
        try:
            for tried in retry.ATTEMPT_END.retrying(retry_on=_passing_storage_error):
                with tried:
                    journal.end(
                        attempt,
                        ending.outcome,
                        reason=ending.reason,
                        end_step=result.committed_step,
                        reached_step=result.reached_step,
                        steps_lost=attempt_steps_lost(result),
                        notice=result.notice_source,
                        timings=self.phase.seconds,
                    )
            if ending.done:
                return self._done(run, result.committed_step)
            if result.notice_source == "budget":  # saved and committed: the job stops at its budget
                return self._stopped_at_budget(run, result.committed_step)
            if ending.counts:
                attempts = journal.attempts()
                if should_give_up(attempts, spec.max_failed_attempts):
                    why = f"{failed_in_a_row(spec.max_failed_attempts)} without progress; last: {ending.reason}"
                    return self._give_up(run, why, attempts=len(attempts))
        except StorageError as exc:  # the log has it all; DONE not written means another boot
            log.warning("could not record the attempt's end", error=str(exc))
            return EXIT_RETRY if ending.done else ending.exit_code
        self._state("stopped" if ending.exit_code == EXIT_OK else "retrying")
        return ending.exit_code

    # -- the steps' parts -------------------------------------------------------------------------

    def _deadline(self, run: Run):
        """Step 3b: the deadline policy at this boot (a VM is about to train: `running`). Logs the
        decision; when it says switch, asks the group to (this VM's service account needs
        compute.instanceGroupManagers.update) and returns the Switch; else None. Never fatal."""
        from survivor.agent.finish import group_of
        from survivor.jobdir import claims
        from survivor.mig.move import spot_outlook_for
        from survivor.mig.switch import switch_group
        from survivor.policy import deadline

        spec, identity, storage = run.spec, run.identity, run.storage
        if spec.deadline is None:
            return None
        ref = group_of(identity)
        factory = self.options.compute_factory or _default_compute

        def spot() -> deadline.SpotOutlook | None:  # Compute's capacity data, asked only when it could matter
            if ref is None or self.metadata is None:
                return None
            try:
                compute = factory(identity)
            except Exception as exc:  # no client, no data: the decision without it
                log.warning("no capacity data: deciding with the rule without it", error=f"{type(exc).__name__}: {exc}")
                return None
            return spot_outlook_for(cast("Compute", compute), spec, ref, storage) if compute is not None else None

        try:
            seen = claims.what_was_seen(storage)  # a switch is claimed under the records it was decided from
            decision = deadline.assess(spec, storage, _dt.datetime.now(_dt.timezone.utc), running=True, spot=spot)
            if decision is None:  # no deadline: returned above already
                return None
            log.info(
                "deadline",
                mode=decision.mode,
                switch=decision.switch,
                reason=decision.reason,
                slack_hours=decision.slack_hours,
            )
            if not decision.switch or ref is None or self.metadata is None:
                return None
            # switching needs the whole client, not only the finish actions a test's factory may stand in for
            compute = cast("Compute", factory(identity))
            return switch_group(
                compute,
                ref,
                decision.mode,
                decision.reason,
                by="agent",
                storage=storage,
                seen=seen,
                run_hours=decision.run_hours,
            )
        except Exception as exc:  # the watch decides again; training goes on meanwhile
            log.warning("deadline decision not acted on", error=f"{type(exc).__name__}: {exc}")
            return None

    def _move(self, spec: JobSpec, identity: InstanceIdentity, storage: JobStorage, state: JobState) -> bool:
        """Step 2b: placement at this boot, before the lease is taken. When this VM's region preempted
        the job `preemptions_per_hour` times in the last hour, one look at the group and, if `decide`
        says so, its move (`placement.look_and_move`, by="agent"; this VM's service account needs
        the compute.instanceGroupManagers permissions a move uses). True when the job moved: this
        boot ends without training. Never fatal: on any failure the boot trains here."""
        from survivor.agent.finish import group_of
        from survivor.jobdir.moves import moves
        from survivor.jobdir.switches import parse_time
        from survivor.mig.move import look_and_move
        from survivor.policy.placement import preempted_in

        ref = group_of(identity)
        if spec.placement is None or ref is None or self.metadata is None:
            return False
        try:
            now = _dt.datetime.now(_dt.timezone.utc)
            recorded = moves(storage)
            # the journal already read says whether a move is due: no Compute call on an ordinary boot
            here = region_of_zone(identity.zone)
            count = preempted_in(state.attempts, here, now, moved=parse_time(recorded[-1].time) if recorded else None)
            if count < spec.placement.preemptions_per_hour:
                return False
            compute = (self.options.compute_factory or _default_compute)(identity)
            if compute is None:
                return False
            said: list[str] = []
            self._booting = False  # the move's delete of this VM's group stops it: the move finishes first
            try:
                # a move needs the whole client, not only the finish actions a test's factory may stand in for
                record = look_and_move(
                    cast("Compute", compute),
                    ref,
                    spec,
                    storage,
                    by="agent",
                    now=now,
                    booting=identity.name,
                    say=said.append,
                )
            finally:
                self._booting = True
            if record is None and self.options.early_signals:  # stopped meanwhile, for another reason
                raise BootInterrupted(self.options.early_signals[0])
            if record is None:
                log.info("placement at boot: the job stays; training here", look=" / ".join(said))
                return False
            log.warning(
                f"this boot moved the job and ends without training: {record.reason}",
                from_place=record.from_place,
                to_place=record.to_place,
            )
            self._state("moved")
            return True
        except Exception as exc:  # the next boot decides again; training goes on meanwhile
            log.warning("placement at boot not acted on", error=f"{type(exc).__name__}: {exc}")
            return False

    def _left_behind(self, spec: JobSpec, identity: InstanceIdentity, storage: JobStorage) -> str:
        """Steps 2c and 3: whether the job's recorded moves put its group somewhere else than this
        VM's (`placement.left_behind`). Such a VM never trains, whatever group still has it: the
        records win; it carries them out ("gone": its own group deleted with it, nothing to leave)
        or leaves its group ("leave"). "" when the job cannot move or its records do not read."""
        from survivor.agent.finish import group_of
        from survivor.jobdir.moves import moves
        from survivor.mig.move import complete_moves
        from survivor.policy.placement import left_behind, place_of

        ref = group_of(identity)
        if spec.placement is None or ref is None:
            return ""
        try:
            recorded = moves(storage, spec.placement.regions, len(spec.placement.shapes))
        except StorageError as exc:
            log.warning("the job's moves not read; training here", error=str(exc))
            return ""
        if not left_behind(recorded, ref):
            return ""
        log.warning(
            "the job's records moved its group away from this VM's: leaving it without training",
            group_place=place_of(ref),
            job_place=recorded[-1].to_place,
        )
        self._state("moved")
        # a move cut after its record (this VM's agent made it, and was preempted) has no group where
        # it went yet, and a job without a deployed watch would then have no VM at all: the records are
        # carried out first (`placement.complete_moves`: the new group made, this one deleted)
        try:
            compute = (self.options.compute_factory or _default_compute)(identity)
            if compute is not None:
                complete_moves(cast("Compute", compute), ref, storage, spec.placement, say=lambda line: log.info(line))
                if cast("Compute", compute).get_group(ref) is None:
                    log.info("this VM's group was deleted with the move: the VM goes with it")
                    return "gone"
        except Exception as exc:  # noqa: BLE001 - leaving the group is what matters; the next look completes it
            log.warning("the job's recorded move not carried out from this VM; the next look does it", error=str(exc))
        return "leave"

    def _load(self) -> tuple[JobSpec, InstanceIdentity]:
        """Step 1: the job spec and who this VM is (`project` None off Compute Engine)."""
        if self.options.spec_file:
            return JobSpec.from_file(self.options.spec_file), self._identity()
        if self.metadata is None:
            self.metadata = MetadataClient()
        for attempt in retry.SPEC_AT_BOOT.retrying(retry_on=lambda exc: isinstance(exc, MetadataError)):
            with attempt:
                attributes = self.metadata.attributes()
        return JobSpec.from_metadata(attributes), self.metadata.identity()

    def _identity(self) -> InstanceIdentity:
        """Who this VM is, when the spec came from a file: from the metadata server if there is
        one, else this host (no project: nothing of Compute Engine is used)."""
        try:
            if self.metadata is None and os.environ.get("GCE_METADATA_HOST"):
                self.metadata = MetadataClient()
            if self.metadata is not None:
                return self.metadata.identity()
        except MetadataError as exc:
            log.info("no metadata server; running as a local instance", reason=exc.reason)
            self.metadata = None
        return InstanceIdentity(project=None, zone="local", name=socket.gethostname())

    def _restore(self, run: Run, store: CheckpointStore) -> tuple[int | None, frozenset[tuple[str, int, str]]]:
        """Step 5: the newest committed snapshot that verifies, into the local job dir; returns its
        step (None: nothing committed, a start from scratch) and its files' fingerprint (path, size,
        CRC32C, as `Snapshot.fingerprint`). Raises RestoreFailed."""
        journal, attempt = run.journal, run.attempt
        with self.phase.timed(Timing.RESTORE):
            # the last few attempts say whether the trainer failed on the newest snapshot (a streak is short)
            recent = [a for a in journal.attempts(newest=12) if a.number != attempt.number]
            manifest = store.restore(local_job_dir(self.options.workdir), pass_over=snapshot_to_pass_over(recent))
        attempt.restored_step = manifest.step if manifest else None
        attempt.restored_from = manifest.name if manifest else ""
        attempt.timings = dict(self.phase.seconds)  # a running attempt's ledger knows its restore
        journal.update(attempt)
        self._tell_restored(journal.storage, attempt, recent[-1] if recent else None)
        log.info(
            "restored" if manifest else "no committed snapshot; starting from scratch",
            step=attempt.restored_step,
            files=len(manifest.files) if manifest else 0,
            bytes=manifest.size if manifest else 0,
            seconds=self.phase.seconds.get(Timing.RESTORE),
        )
        return attempt.restored_step, frozenset(
            (f.path, f.size, f.crc32c) for f in (manifest.files if manifest else ())
        )

    def _committed(self, stats: CommitStats) -> None:
        """The mirror's report of each commit: a log line, and the step for `survivor status`."""
        log.info(
            "committed",
            step=stats.manifest.step,
            files=len(stats.manifest.files),
            uploaded_files=stats.uploaded_files,
            uploaded_bytes=stats.uploaded_bytes,
            upload_seconds=round(stats.upload_seconds, 3),
            manifest_seconds=round(stats.manifest_seconds, 3),
        )
        self._guest("step", str(stats.manifest.step))

    def _reached(self, restored: int | None) -> int:
        """The furthest step the trainer reported; a trainer that reported nothing did nothing
        beyond the step it was restored at."""
        reached = read_progress(self.progress_file)
        return reached if reached is not None else (restored or 0)

    def _safe_after_notice(self, notice: Notice, result: AttemptResult) -> AttemptResult:
        """`result` with the notice's outcome, once its checkpoint is as safe as it gets; logs how long that took."""
        total = round(time.monotonic() - notice.monotonic, 3)
        self.phase.seconds[Timing.NOTICE_TO_SAFE] = total
        log.info(
            "safe after notice",
            source=notice.source,
            committed_step=result.committed_step,
            reached_step=result.reached_step,
            steps_lost=attempt_steps_lost(result),
            seconds=total,
            **{f"{k}_seconds": v for k, v in self.phase.seconds.items()},
        )
        # told only now, with the commit done: a webhook is never on the way to it (a queue put each)
        noticed_at = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(seconds=total)
        self._tell(
            job_events.notice(
                self._job_name,
                attempt=self._attempt_number,
                step=result.reached_step,
                source=notice.source,
                time=noticed_at.isoformat(timespec="milliseconds"),
            )
        )
        self._tell(
            job_events.safe(
                self._job_name,
                attempt=self._attempt_number,
                committed_step=result.committed_step,
                steps_lost=attempt_steps_lost(result),
                seconds=total,
                time=_now_text(),
            )
        )
        return dataclasses.replace(result, notice=self._classify(notice), notice_source=notice.source)

    def _classify(self, notice: Notice) -> Outcome:
        """The outcome a notice leads to. A SIGTERM that beat the metadata watcher to a preemption
        is still a preemption."""
        if notice.source == "signal" and self.metadata is not None:
            try:
                if self.metadata.get("instance/preempted", deadline=2.0).strip().upper() == "TRUE":  # a label only
                    return "preempted"
            except Exception:
                pass
        return notice.outcome

    def _done(self, run: Run, committed: int | None) -> int:
        """Writes DONE with the job's summary (only while this agent holds the lease), then finishes."""
        spec, identity, journal, lease = run.spec, run.identity, run.journal, run.lease
        state = journal.state()
        summary = {
            "step": committed,
            "train_steps": spec.train_steps,
            "attempts": len(state.attempts),
            "preemptions": state.preemptions,
            "steps_lost": state.steps_lost,
            "instance": identity.name,
        }
        try:
            lease.renew()
        except LeaseLost:
            log.error("lost the lease before writing DONE; the holder finishes the job")
            return EXIT_RETRY
        if journal.mark_done(summary):
            log.info("training finished; DONE written", **summary)
        else:
            log.warning("DONE was already written by another writer")
        self._tell(lambda: self._done_event(run))  # built in the notifier's thread
        self._state("done")
        self._guest("step", str(committed or 0), force=True)
        return self._finish(spec, identity, "done")

    def _give_up(self, run: Run, reason: str, attempts: int) -> int:
        """Writes FAILED (too many attempts in a row failed without progress), then finishes."""
        log.error("giving up", reason=reason)
        run.journal.mark_failed(reason, attempts=attempts)
        self._tell(job_events.failed(run.spec.name, reason=reason, committed_step=None, time=_now_text()))
        self._state("failed")
        return self._finish(run.spec, run.identity, "failed")

    def _finish(
        self, spec: JobSpec, identity: InstanceIdentity, why: str, on_error: int = EXIT_RETRY, action: str | None = None
    ) -> int:
        """The spec's finish action (leave the MIG, stop, delete, keep alive), or `action`; `on_error`
        if it fails."""
        finisher = choose_finisher(action or spec.on_finish, identity)
        if self.metadata is None and finisher.name != "keep-alive":
            log.info("not on a Compute Engine VM (no metadata server): nothing to stop or leave")
            finisher = KeepAlive()
        compute = None
        try:
            if finisher.name != "keep-alive":
                factory = self.options.compute_factory or _default_compute
                compute = factory(identity)
            finisher.finish(identity, compute)
        except Exception as exc:
            if finisher.refused and is_permission_error(exc):
                # DONE/FAILED is committed: a VM that cannot leave (or stop, or delete itself) must not bill on
                line = finisher.refused.format(why=str(exc)[:300])
                log.error(line, action=finisher.name)
                self._guest("finish", line[:1000], force=True)
                log.warning(power_off(), why=why)
                return EXIT_OK
            log.error("finish action failed; the VM is left as it is", action=finisher.name, error=str(exc))
            return on_error
        log.info("finished", why=why, action=finisher.name)
        return EXIT_OK

    # -- the budget (survivor/agent/spending.py, survivor/policy/budget.py) -------------------------

    def _notice_sources(self, run: Run) -> list:
        """Step 4's notice sources: the usual ones, and the budget's for a job with one."""
        from survivor.agent.notice import default_sources

        sources: list = default_sources(self.metadata)
        if run.spec.budget is not None or self._budget_raised:
            from survivor.agent.spending import BudgetSource

            self._budget_source = BudgetSource(run.spec, run.storage, zone=run.identity.zone)
            sources.append(self._budget_source)
        return sources

    def _at_budget(self, spec: JobSpec, identity: InstanceIdentity, storage: JobStorage) -> bool:
        """Step 2a: whether the job is stopped at its budget (its record), or has spent it (then the
        stop is recorded here): this boot trains nothing and leaves its group. Never fatal: a budget
        that cannot be read is checked again while training."""
        from survivor.jobdir import spending
        from survivor.policy.budget import budget_standing

        try:
            self._budget_raised = spending.read_raised(storage) is not None
            if spec.budget is None and not self._budget_raised and spending.read_stopped(storage) is None:
                return False
            standing = budget_standing(spec, storage, zone=identity.zone)
            if standing.stopped is None and not standing.over:
                return False
            stopped = standing.stopped or spending.mark_stopped(
                storage,
                spent=standing.spent or 0.0,
                budget=standing.budget or 0.0,
                step=standing.committed_step,
                by="agent",
            )
        except Exception as exc:  # noqa: BLE001 - the budget source checks again while training
            log.warning("the budget not checked at boot", error=f"{type(exc).__name__}: {exc}"[:300])
            return False
        log.warning(
            "the job is stopped at its budget: not training; `survivor start JOB --budget USD` resumes it",
            spent_usd=stopped.get("spent_usd"),
            budget_usd=stopped.get("budget_usd"),
            step=stopped.get("step"),
        )
        self._state("budget-stopped")
        return True

    def _stopped_at_budget(self, run: Run, committed: int | None) -> int:
        """The end of an attempt the budget stopped, its checkpoint committed: the stop recorded and
        told, and the VM leaves its group (kept at size 0 until `survivor start --budget`)."""
        from survivor.jobdir import spending
        from survivor.policy.budget import budget_standing

        spec, identity, journal = run.spec, run.identity, run.journal
        try:
            standing = budget_standing(spec, journal.storage, zone=identity.zone)
            stopped = spending.mark_stopped(  # the committed step is this agent's to say, after its commit
                journal.storage,
                spent=standing.spent or 0.0,
                budget=standing.budget or 0.0,
                step=committed,
                by="agent",
                replace=True,
            )
        except Exception as exc:  # noqa: BLE001 - the watch records it; the VM still leaves
            log.warning("the budget's stop not recorded", error=f"{type(exc).__name__}: {exc}"[:300])
            stopped = {"spent_usd": None, "budget_usd": None}
        spent, budget = spending.usd_of(stopped, "spent_usd"), spending.usd_of(stopped, "budget_usd")
        log.warning(
            "stopped at the budget, committed; `survivor start JOB --budget USD` resumes it",
            committed_step=committed,
            spent_usd=spent,
            budget_usd=budget,
        )
        if spent is not None and budget is not None:
            self._tell(
                job_events.budget_stopped(
                    spec.name,
                    spent=spent,
                    budget=budget,
                    committed_step=committed,
                    time=str(stopped.get("time") or _now_text()),
                )
            )
        self._state("budget-stopped")
        return self._finish(spec, identity, "budget", on_error=EXIT_OK, action="auto")

    # -- telling the job's webhooks (survivor/notify/) -----------------------------------------------

    def _tell(self, telling: Telling) -> None:
        """Queues an event for the job's webhooks: a queue put, never a call (no `notify:`: nothing)."""
        if self.notifier is not None:
            self.notifier.tell(telling)

    def _tell_restored(self, storage: JobStorage, attempt: Attempt, previous: Attempt | None) -> None:
        """After the restore: what earlier boots could not tell (read from the records in the
        notifier's thread), then `resumed` when this boot restored a snapshot after another's."""
        if self.notifier is None:
            return
        from survivor.jobdir.status import read_job
        from survivor.notify.records import attempt_events, job_events as recorded

        name, number = self._job_name, attempt.number
        self._tell(
            lambda: [
                e for e in recorded(name, read_job(storage.url, storage=storage)) if e.facts.get("attempt") != number
            ]
        )
        self._tell(lambda: [e for e in attempt_events(name, attempt, previous) if e.kind == "resumed"] or None)

    def _done_event(self, run: Run):
        """DONE's event with the job's figures and cost, as `survivor report` prices them (offline)."""
        from survivor.jobdir.status import read_job
        from survivor.policy.cost import priced_done

        return priced_done(
            run.spec,
            read_job(run.storage.url, storage=run.storage, train_steps=run.spec.train_steps),
            zone=run.identity.zone,
        )

    # -- a boot that cannot go on -----------------------------------------------------------------

    def _interrupt_boot(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        self.options.early_signals.append(name)
        if self._booting:  # after the watcher starts, a signal is a notice like any other
            self._booting = False
            raise BootInterrupted(name)

    def _stopped_during_boot(self, name: str) -> int:
        log.warning("stopped during boot; nothing was training, so nothing to save", signal=name)
        return EXIT_OK

    def _close(self, journal: Journal, attempt: Attempt, outcome: Outcome, reason: str, **fields: Any) -> None:
        """Closes the attempt if nothing else did: an open one reads as a killed agent, which the
        crash-loop guard cannot count."""
        if attempt.outcome is not None:
            return
        try:
            journal.end(attempt, outcome, reason=reason, timings=self.phase.seconds, **fields)
        except Exception as err:
            log.warning("could not record the attempt's end", error=str(err))

    def _bad_spec(self, exc: SpecError) -> int:
        """A spec that cannot run will not run on the next boot either: record FAILED in its job dir
        when the metadata's spec (YAML `survivor-job` or the flat keys) names a valid one."""
        for problem in exc.problems:
            log.error(f"job spec: {problem}")
        if exc.job_dir and not self.options.spec_file:
            try:
                Journal(open_storage(exc.job_dir)).mark_failed("invalid job spec: " + "; ".join(exc.problems))
                log.error("FAILED written to the job dir: the job spec is invalid", job_dir=exc.job_dir)
            except Exception as err:  # the spec error is what matters; say it and stop
                log.warning("could not record FAILED in the job dir", error=str(err))
        return EXIT_BAD_SPEC

    def _patiently(self, call: Callable):
        """Runs `call`; a 403 is retried until IAM's propagation time has passed (a role granted
        just before this boot), anything else is raised at once."""
        started = time.monotonic()
        for attempt in retry.permission_wait(self.options.permission_wait_seconds).retrying(
            retry_on=lambda exc: isinstance(exc, StorageError) and exc.forbidden
        ):
            with attempt:
                try:
                    return call()
                except StorageError as exc:
                    if exc.forbidden:
                        log.warning(
                            "the job dir refuses this VM; waiting in case a role was just granted",
                            object=exc.object,
                            permission=exc.permission,
                            waited=round(time.monotonic() - started, 1),
                            wait_limit=self.options.permission_wait_seconds,
                        )
                    raise
        raise AssertionError("unreachable: the policy re-raises")

    def _job_dir_refused(
        self, spec: JobSpec, identity: InstanceIdentity, journal: Journal | None, exc: StorageError
    ) -> int:
        """A missing permission or bucket: no restart cures it. Say so wherever it can be read
        (this log, the guest attributes, FAILED in the job dir if it takes writes) and finish as
        FAILED: exit 0 whatever happens, so systemd never restarts the agent in a burst. Anything
        else (the network) is worth a restart."""
        if not exc.lasting:
            log.error("cannot use the job dir", job_dir=spec.job_dir, error=str(exc))
            return EXIT_RETRY
        reason = f"the job dir cannot be used: {exc}"
        log.error(
            "giving up on this boot: " + reason,
            job_dir=spec.job_dir,
            object=exc.object,
            permission=exc.permission,
            cause=exc.reason,
        )
        self._state("failed")
        self._guest("reason", reason[:2000], force=True)
        try:
            if journal is not None:
                journal.mark_failed(reason + "; once fixed, delete this FAILED marker and start the job again")
                log.info("FAILED written to the job dir")
        except StorageError as err:
            log.warning("FAILED not written: the job dir refuses that too", error=str(err))
        return self._finish(spec, identity, "failed", on_error=EXIT_OK)

    def _state(self, state: GuestState) -> None:
        """Writes the VM's `state` guest attribute at once: what `survivor status` shows of this VM."""
        self._guest("state", state, force=True)

    def _guest(self, key: str, value: str, force: bool = False) -> None:
        """Writes a guest attribute for `survivor status`; rare, never fatal."""
        if self.metadata is None:
            return
        now = time.monotonic()
        if not force and now - self._last_guest_write < 10.0:
            return
        self._last_guest_write = now
        try:
            self.metadata.put_guest_attribute("survivor", key, value)
        except Exception as exc:
            log.debug("guest attribute not written", key=key, error=str(exc))


def _default_compute(identity: InstanceIdentity) -> ComputeActions | None:
    from survivor.cloud.compute import Compute

    if identity.project is None:  # callers ask only with a metadata server, which names the project
        raise RuntimeError("the Compute Engine API needs a project: this is no Compute Engine VM")
    return Compute.from_environment(identity.project)
