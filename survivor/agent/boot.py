"""The agent: the story of one boot of a training VM.

    $ survivor agent --workdir /var/lib/survivor      # started by the systemd unit on every boot

1. Read the job spec from instance metadata (or `--config`), and who this VM is.
2. Open the job dir. DONE or FAILED already? Finish at once; never train again.
3. Record this attempt. Too many failed attempts in a row? Write FAILED and finish.
4. Watch for a notice: `preempted`, SIGTERM/SIGINT; and for a terminating maintenance event.
5. Restore the newest committed snapshot that verifies into the local job dir.
6. Find the GPUs, deliver the trainer's code, start the trainer.
7. Mirror every new local checkpoint to the job dir while it trains (a background thread). A
   maintenance notice: ask the trainer for a checkpoint (its save signal), commit it, train on.
8. On a notice: SIGTERM the trainer, wait for its save within the grace budget, commit, exit.
9. On success: commit the last snapshot, write DONE, finish (leave the MIG, stop, or keep alive).

A job dir this VM may not use (a permission missing after IAM's propagation time, no bucket) ends
the boot with the reason recorded wherever it can be, then finishes as FAILED: exit 0, never a
restart loop.

Every step logs what it did and how long it took, as one JSON line Cloud Logging can parse.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from survivor import log as logs
from survivor import retry
from survivor.agent.delivery import DeliveryError, deliver
from survivor.agent.dirwatch import DirChanges
from survivor.agent.finish import ComputeActions, KeepAlive, choose_finisher
from survivor.agent.gpus import count_gpus, decide_gpu_count, wait_for_gpus
from survivor.jobdir.journal import Attempt, Journal, should_give_up, steps_lost
from survivor.jobdir.lease import Holder, Lease, LeaseHeld, LeaseLost
from survivor.cloud.metadata import InstanceIdentity, MetadataClient, MetadataError
from survivor.agent.notice import Notice, NoticeWatcher
from survivor.jobdir.snapshot import Checksums, event_files, scan
from survivor.spec import JobSpec, SpecError
from survivor.jobdir.storage import JobStorage, StorageError, open_storage
from survivor.jobdir.store import CheckpointStore, CommitStats, RestoreFailed, SnapshotChanged
from survivor.agent.trainer import (TrainerProcess, TrainerUserError, claim_workdir, decide_user, give_to,
                                      prepare_state_dir, progress_path, read_progress, save_signal, state_dir,
                                      trainer_argv, write_pid_file)
from survivor.trainers.contract import PROGRESS_ENV

log = logs.get("agent")

#: Exit codes. 0: nothing left to do on this boot (done, failed for good, or saved after a notice).
EXIT_OK = 0
EXIT_RETRY = 1  # the trainer failed; systemd restarts the agent and the journal counts the attempt
EXIT_BAD_SPEC = 2

#: How long a job dir that answers 403 gets before the agent gives up on it: IAM changes "typically
#: propagate in 2 minutes, but could potentially take 7 minutes or longer"
#: (https://cloud.google.com/iam/docs/access-change-propagation), so a role granted just before
#: the VM started still counts. SURVIVOR_PERMISSION_WAIT_SECONDS overrides it (tests).
PERMISSION_WAIT_SECONDS = 480.0
#: How long a maintenance notice's save may take before the agent stops waiting for it.
MAINTENANCE_SAVE_SECONDS = 300.0


def _permission_wait_default() -> float:
    return float(os.environ.get("SURVIVOR_PERMISSION_WAIT_SECONDS", PERMISSION_WAIT_SECONDS))


class BootInterrupted(BaseException):
    """SIGTERM/SIGINT before the notice watcher listens. A BaseException, like KeyboardInterrupt,
    so no `except Exception` on the way swallows it."""


@dataclass
class AgentOptions:
    """How this agent runs; everything about the job itself is in the JobSpec."""

    workdir: str = "/var/lib/survivor"
    spec_file: str | None = None
    allow_root_trainer: bool = False
    gpu_wait_seconds: float = 900.0
    python: str = sys.executable
    compute_factory: Callable[[InstanceIdentity], ComputeActions | None] | None = None
    metadata: MetadataClient | None = None
    early_signals: list[str] = field(default_factory=list)  # SIGTERMs that came before the watcher
    permission_wait_seconds: float = field(default_factory=_permission_wait_default)


@dataclass
class Phase:
    """Wall-clock seconds per phase of this boot, reported in the attempt record and the logs."""

    seconds: dict[str, float] = field(default_factory=dict)

    def timed(self, name: str):
        phase = self

        class _Timer:
            def __enter__(self):
                self.start = time.monotonic()

            def __exit__(self, *exc):
                phase.seconds[name] = round(phase.seconds.get(name, 0.0) + time.monotonic() - self.start, 3)

        return _Timer()


def run(options: AgentOptions) -> int:
    """Runs one boot of the agent; returns the process exit code."""
    return Boot(options).run()


class Mirror:
    """Commits each new local snapshot to the job dir, in a background thread while training runs."""

    def __init__(self, store: CheckpointStore, storage: JobStorage, local_root: str, attempt: int,
                 interval: float, committed_step: int | None, on_commit: Callable[[CommitStats], None],
                 fence: Callable[[], None] | None = None):
        self.store = store
        self.storage = storage
        self.local_root = local_root
        self.attempt = attempt
        self.interval = interval
        self.committed_step = committed_step
        self.on_commit = on_commit
        self.fence = fence
        self._fingerprint: frozenset | None = None
        self._checksums = Checksums()
        self._events: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._hurried = False
        self._thread = threading.Thread(target=self._loop, name="mirror", daemon=True)
        self.errors = 0

    def start(self) -> "Mirror":
        self._fingerprint = scan(self.local_root, self._checksums).fingerprint()  # what restore put there
        try:
            self.store.known_blobs()  # listed now, not on the way to safety
        except Exception as exc:  # the first commit lists them instead
            log.warning("could not list the stored blobs yet", error=str(exc))
        self._thread.start()
        return self

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.sync(collect=not self._hurried)
            except LeaseLost:
                return
            except Exception as exc:  # keep training; the next round or the final sync tries again
                self.errors += 1
                log.warning("sync failed; will retry", error=str(exc))

    def sync(self, collect: bool = True) -> CommitStats | None:
        """Commits the local snapshot if it changed and holds a step. With `collect` (a routine
        round), then mirrors event files and deletes what the new commit made obsolete; on the way
        to safety neither runs before the commit (see `tidy`)."""
        with self._lock:
            stats = self._commit_if_new()
            if collect:
                self._mirror_events()
                if stats is not None:
                    self.collect_garbage()
            return stats

    def _commit_if_new(self) -> CommitStats | None:
        snapshot = scan(self.local_root, self._checksums)
        if snapshot.step is None or not snapshot.files:
            return None
        if self.committed_step is not None and snapshot.step < self.committed_step:
            return None
        fingerprint = snapshot.fingerprint()
        if fingerprint == self._fingerprint:
            return None
        try:
            stats = self.store.commit(self.local_root, snapshot, self.attempt, fence=self.fence)
        except SnapshotChanged as exc:
            log.info("a file changed during upload; committing at the next sync", reason=str(exc))
            self._checksums.forget()  # a checksum taken while the file was written may be the wrong one
            return None
        self._fingerprint = fingerprint
        self.committed_step = snapshot.step
        self.on_commit(stats)
        return stats

    def tidy(self) -> None:
        """What waits until the checkpoint is safe: event files, then garbage collection."""
        try:
            with self._lock:
                self._mirror_events()
        except Exception as exc:
            log.warning("event files not mirrored; the checkpoint is unaffected", error=str(exc))
        self.collect_garbage()

    def collect_garbage(self) -> None:
        try:
            self.store.collect_garbage()
        except Exception as exc:
            log.warning("garbage collection failed; old snapshots stay for now", error=str(exc))

    def _mirror_events(self) -> None:
        """TensorBoard event files go to the job dir as they are, so `tensorboard --logdir` works."""
        todo = []
        for rel in event_files(self.local_root):
            try:
                st = os.stat(os.path.join(self.local_root, rel))
            except FileNotFoundError:
                continue
            if self._events.get(rel) != (st.st_size, st.st_mtime_ns):
                self._events[rel] = (st.st_size, st.st_mtime_ns)
                todo.append((os.path.join(self.local_root, rel), rel))
        if todo:
            self.storage.upload(todo)

    def hurry(self, interval: float = 0.002, fallback: float = 0.02) -> None:
        """After a notice: commit the trainer's last checkpoint the moment its files are complete,
        so the upload overlaps the trainer's exit instead of following it; no garbage collection
        until safe. The mirror wakes on the job dir's file events (`dirwatch`), and also scans
        every `fallback` seconds for anything they miss. Without file events it scans every
        `interval`: a scan of unchanged files is a walk and a stat per file (~0.17 ms for a
        checkpoint dir; a file being written is read as it grows, which its checksum needs anyway),
        so 8% of a core for the seconds the save takes."""
        if self._hurried:
            return
        self._hurried = True
        changes = DirChanges(self.local_root)
        if changes.available:
            threading.Thread(target=self._wake_on_changes, args=(changes, interval), name="job dir events",
                             daemon=True).start()
        self.interval = fallback if changes.available else interval
        self._wake.set()

    def _wake_on_changes(self, changes: DirChanges, interval: float) -> None:
        try:
            while not self._stop.is_set():
                if changes.wait(0.1):
                    self._wake.set()
        except OSError as exc:  # the clock alone wakes the mirror from here on, as without events
            log.warning("file events stopped; scanning on a clock", error=str(exc))
            self.interval = interval
        finally:
            changes.close()

    def wake(self) -> None:
        """Scan now instead of at the next interval."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join()

    def final_sync(self, attempts: int = 3) -> CommitStats | None:
        """Stops the background loop and commits what the trainer left, retrying a changed file.
        Garbage collection is left to the caller, after the checkpoint is safe."""
        self.stop()
        stats = None
        for _ in range(attempts):
            stats = self.sync(collect=False) or stats
            snapshot_step = scan(self.local_root, self._checksums).step
            if snapshot_step is None or snapshot_step == self.committed_step:
                break
        return stats


@dataclass
class MaintenanceSave:
    """A maintenance notice's save: asked of the trainer, done once a newer checkpoint is committed.

    The save signal goes out only once the trainer has reported a step: by then its handler is in
    place (before it, SIGUSR1's default action would end the process), and before it there is
    nothing new to save anyway.
    """

    notice: Notice
    committed_before: int | None
    sig: int | None  # the trainer's save signal; None: commit the newest checkpoint it has
    deadline: float
    signalled: bool = False

    def step(self, trainer: TrainerProcess, mirror: Mirror, reported: int | None) -> bool:
        """Moves the save along; True once it is over (committed, or given up on)."""
        if self.sig is None:
            try:
                mirror.sync()
            except Exception as exc:  # the mirror's own rounds try again; training goes on regardless
                log.warning("maintenance notice: committing failed; the mirror tries again", error=str(exc))
                return True
            log.info("maintenance notice: the trainer has no save signal; its newest checkpoint is committed, "
                     "training goes on", committed_step=mirror.committed_step)
            return True
        if not self.signalled:
            if reported is None:
                return time.monotonic() > self.deadline
            trainer.request_save(self.sig)
            self.signalled = True
            log.info("maintenance notice: asked the trainer for a checkpoint; training goes on",
                     signal=signal.Signals(self.sig).name, step=reported)
        if mirror.committed_step is not None and (self.committed_before is None
                                                  or mirror.committed_step > self.committed_before):
            log.info("maintenance notice: checkpoint committed; training goes on", step=mirror.committed_step,
                     seconds=round(time.monotonic() - self.notice.monotonic, 3))
            return True
        if time.monotonic() > self.deadline:
            log.warning("maintenance notice: no new checkpoint in time; the last commit stands",
                        committed_step=mirror.committed_step)
            return True
        mirror.wake()
        return False


class Boot:
    """One boot's state; `run()` is the story told in the module docstring."""

    def __init__(self, options: AgentOptions):
        self.options = options
        self.phase = Phase()
        self.metadata = options.metadata
        self.local_job = os.path.join(options.workdir, "job")
        self.progress_file = progress_path(options.workdir)  # in the one dir the trainer writes besides its job dir
        self.notice: Notice | None = None
        self.trainer: TrainerProcess | None = None
        self._last_guest_write = 0.0

    # -- 1. spec and identity ---------------------------------------------------------------------

    def _load(self) -> tuple[JobSpec, InstanceIdentity]:
        if self.options.spec_file:
            spec = JobSpec.from_file(self.options.spec_file)
            identity = self._identity_or_local()
            return spec, identity
        if self.metadata is None:
            self.metadata = MetadataClient()
        # At boot a garbled or flavourless answer is more likely a server still coming up than a
        # wrong host: ask again for a while before giving up (systemd restarts us after that).
        for attempt in retry.policy(attempts=10, deadline=30.0, initial=0.5, maximum=5.0,
                                    retry_on=lambda exc: isinstance(exc, MetadataError)):
            with attempt:
                attributes = self.metadata.attributes()
        try:
            spec = JobSpec.from_metadata(attributes)
        except SpecError as exc:
            exc.attributes = attributes  # type: ignore[attr-defined]
            raise
        return spec, self.metadata.identity()

    def _identity_or_local(self) -> InstanceIdentity:
        try:
            if self.metadata is None and os.environ.get("GCE_METADATA_HOST"):
                self.metadata = MetadataClient()
            if self.metadata is not None:
                return self.metadata.identity()
        except MetadataError as exc:
            log.info("no metadata server; running as a local instance", reason=exc.reason)
            self.metadata = None
        return InstanceIdentity(project="local", zone="local", name=socket.gethostname())

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

    # -- the story --------------------------------------------------------------------------------

    def run(self) -> int:
        """The boot. A SIGTERM/SIGINT before the notice watcher listens ends it at once (exit 0):
        nothing trains yet, so nothing needs saving, and no slow call (a metadata server that
        drips its answer, a lease wait) may hold the agent past systemd's stop or the hard off."""
        if self.options.early_signals:
            return self._stopped_during_boot(self.options.early_signals[0])
        self._booting = True
        on_main = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, self._interrupt_boot) for sig in (signal.SIGTERM, signal.SIGINT)} \
            if on_main else {}
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

    def _interrupt_boot(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        self.options.early_signals.append(name)
        if self._booting:  # after the watcher starts, a signal is a notice like any other
            self._booting = False
            raise BootInterrupted(name)

    def _stopped_during_boot(self, name: str) -> int:
        log.warning("stopped during boot; nothing was training, so nothing to save", signal=name)
        attempt = getattr(self, "attempt", None)
        if attempt is not None and attempt.outcome is None and getattr(self, "journal", None) is not None:
            try:
                self.journal.end(attempt, "stopped", reason=f"{name} during boot", timings=self.phase.seconds)
            except Exception as exc:  # the next boot reads an open attempt as a killed agent
                log.warning("could not record the attempt's end", error=str(exc))
        return EXIT_OK

    def _boot(self) -> int:
        with self.phase.timed("spec"):
            try:
                spec, identity = self._load()
            except SpecError as exc:
                for problem in exc.problems:
                    log.error(f"job spec: {problem}")
                return self._bad_spec(exc)
            except MetadataError as exc:
                log.error("cannot read the job from the metadata server", error=str(exc))
                return EXIT_RETRY
        logs.redact(spec.secret_values())  # hyperparameters named like secrets: *** in every line from here
        log.info("job", name=spec.name, job_dir=spec.job_dir, train_steps=spec.train_steps, instance=identity.name)
        self.spec, self.identity = spec, identity

        self.journal = None
        try:
            storage = open_storage(spec.job_dir, project=identity.project if identity.project != "local" else None)
            journal = Journal(storage)
            self.storage, self.journal = storage, journal
            state = self._patiently(journal.state)
        except StorageError as exc:
            return self._job_dir_refused(exc)

        # 2. a finished job is never trained again
        if state.done is not None:
            log.info("the job dir says DONE; not training again", step=state.done.get("step"))
            self._guest("state", "done", force=True)
            return self._finish("done")
        if state.failed is not None:
            log.error("the job dir says FAILED; not training again", reason=state.failed.get("reason"))
            self._guest("state", "failed", force=True)
            return self._finish("failed")

        # 3. one writer per job dir: take the lease (a stale one after ttl, our own name at once)
        lease = Lease(storage, Holder.here(identity.name, identity.zone), ttl=spec.lease_seconds)
        try:
            self._patiently(lease.acquire)
        except LeaseHeld as exc:
            log.error("not training: another agent holds this job", reason=str(exc))
            return EXIT_RETRY
        except StorageError as exc:
            return self._job_dir_refused(exc)
        self.lease = lease.start_renewing()
        try:
            return self._attempt(spec, identity, storage, journal, state)
        except StorageError as exc:
            self._close_attempt("gave-up" if exc.lasting and self.trainer is None else "interrupted",
                                f"the job dir failed: {exc}")
            if self.trainer is None:  # nothing runs yet: the same rule as at the start
                return self._job_dir_refused(exc)
            self.trainer.kill()
            log.error("the job dir failed while training; systemd restarts the agent", error=str(exc))
            return EXIT_RETRY
        except Exception as exc:  # a defect: counted as a failure, so a crash loop still ends in FAILED
            log.exception("the boot failed unexpectedly", error=f"{type(exc).__name__}: {exc}")
            if self.trainer is not None:
                self.trainer.kill()
            self._close_attempt("failed", f"the agent failed: {type(exc).__name__}: {str(exc)[:500]}")
            return EXIT_RETRY
        finally:
            lease.release()

    # -- a job dir this VM may not use ------------------------------------------------------------

    def _patiently(self, call: Callable):
        """Runs `call`; a 403 is retried until IAM's propagation time has passed (a role granted
        just before this boot), anything else is raised at once."""
        waited = retry.policy(attempts=1_000_000, deadline=self.options.permission_wait_seconds, initial=2.0,
                              maximum=30.0, retry_on=lambda exc: isinstance(exc, StorageError) and exc.forbidden)
        started = time.monotonic()
        for attempt in waited:
            with attempt:
                try:
                    return call()
                except StorageError as exc:
                    if exc.forbidden:
                        log.warning("the job dir refuses this VM; waiting in case a role was just granted",
                                    object=exc.object, permission=exc.permission,
                                    waited=round(time.monotonic() - started, 1),
                                    wait_limit=self.options.permission_wait_seconds)
                    raise
        raise AssertionError("unreachable: the policy re-raises")

    def _job_dir_refused(self, exc: StorageError) -> int:
        """A missing permission or bucket: no restart cures it. Say so wherever it can be read
        (this log, the guest attributes, FAILED in the job dir if it takes writes) and finish as
        FAILED: exit 0 whatever happens, so systemd never restarts the agent in a burst. Anything
        else (the network) is worth a restart."""
        if not exc.lasting:
            log.error("cannot use the job dir", job_dir=self.spec.job_dir, error=str(exc))
            return EXIT_RETRY
        reason = f"the job dir cannot be used: {exc}"
        log.error("giving up on this boot: " + reason, job_dir=self.spec.job_dir, object=exc.object,
                  permission=exc.permission, cause=exc.reason)
        self._guest("state", "failed", force=True)
        self._guest("reason", reason[:2000], force=True)
        try:
            if self.journal is not None:
                self.journal.mark_failed(reason + "; once fixed, delete this FAILED marker and start the job again")
                log.info("FAILED written to the job dir")
        except StorageError as err:
            log.warning("FAILED not written: the job dir refuses that too", error=str(err))
        return self._finish("failed", on_error=EXIT_OK)

    def _attempt(self, spec: JobSpec, identity: InstanceIdentity, storage: JobStorage, journal: Journal,
                 state) -> int:
        # record the attempt; stop a crash loop
        attempt = journal.begin(identity.name)
        self.attempt = attempt
        if should_give_up(state.attempts, spec.max_failed_attempts):
            last = next((a for a in reversed(state.attempts) if a.outcome == "failed"), None)
            reason = f"{spec.max_failed_attempts} attempts in a row failed without progress" + (
                f"; last: {last.reason}" if last and last.reason else "")
            log.error("giving up", reason=reason)
            journal.mark_failed(reason, attempts=attempt.number - 1)
            journal.end(attempt, "gave-up", reason=reason)
            self._guest("state", "failed", force=True)
            return self._finish("failed")

        # 4. from here on a notice is heard (and one that came during start-up is not forgotten)
        self._booting = False
        watcher = NoticeWatcher(self.metadata).start()
        if self.options.early_signals:
            watcher.fire("signal", self.options.early_signals[0])
        try:
            return self._train(spec, identity, storage, journal, attempt, watcher)
        finally:
            watcher.stop()

    def _train(self, spec: JobSpec, identity: InstanceIdentity, storage: JobStorage, journal: Journal,
               attempt: Attempt, watcher: NoticeWatcher) -> int:
        # 5. restore
        self._guest("state", "restoring", force=True)
        store = CheckpointStore(storage, keep=spec.keep, writer=identity.name, max_step=spec.train_steps)
        try:
            with self.phase.timed("restore"):
                manifest = store.restore(self.local_job)
        except RestoreFailed as exc:  # never a start from scratch over committed work
            return self._restore_failed(attempt, exc)
        restored = manifest.step if manifest else None
        attempt.restored_step = restored
        attempt.restored_from = manifest.name if manifest else ""
        journal.update(attempt)
        log.info("restored" if manifest else "no committed snapshot; starting from scratch",
                 step=restored, files=len(manifest.files) if manifest else 0,
                 bytes=manifest.size if manifest else 0, seconds=self.phase.seconds.get("restore"))

        if watcher.notice is not None:  # preempted while restoring: nothing new to save, nothing lost
            return self._end_after_notice(watcher.notice, store, None, restored, reached=restored or 0)

        # 6. GPUs, code, trainer
        try:
            with self.phase.timed("setup"):
                num_gpus = self._gpus(spec)
                user = decide_user(os.geteuid(), spec.user, self.options.allow_root_trainer)
                claim_workdir(self.options.workdir)  # the agent's alone: the trainer gets only what is below
                delivered = deliver(spec.trainer, self.options.workdir, fetch=self._fetch)
                argv = trainer_argv(spec, python=self.options.python, job_dir=self.local_job,
                                    data_dir=spec.data_dir, num_gpus=num_gpus)
                env = self._trainer_env(delivered.pythonpath)
                prepare_state_dir(state_dir(self.options.workdir), user)
                if user:
                    give_to(user, self.local_job)
                trainer = TrainerProcess.start(argv, env=env, cwd=delivered.cwd, user=user)
                self.trainer = trainer
                write_pid_file(os.path.join(self.options.workdir, "trainer.pid"), trainer.pid)
        except (DeliveryError, TrainerUserError, OSError) as exc:
            return self._failed(attempt, f"cannot start the trainer: {exc}", restored)

        self._guest("state", "training", force=True)
        self._guest("step", str(restored or 0), force=True)

        # 7. mirror while it trains
        def on_commit(stats: CommitStats) -> None:
            log.info("committed", step=stats.manifest.step, files=len(stats.manifest.files),
                     uploaded_files=stats.uploaded_files, uploaded_bytes=stats.uploaded_bytes,
                     upload_seconds=round(stats.upload_seconds, 3), manifest_seconds=round(stats.manifest_seconds, 3))
            self._guest("step", str(stats.manifest.step))

        mirror = Mirror(store, storage, self.local_job, attempt.number, spec.sync_seconds, restored, on_commit,
                        fence=self.lease.fence).start()
        train_started = time.monotonic()
        maintenance: MaintenanceSave | None = None
        while True:
            notice = watcher.wait(timeout=0.2)
            code = trainer.poll()
            if code is not None or notice is not None:
                break
            if self.lease.lost.is_set():
                return self._superseded(attempt, trainer, mirror)
            warning = watcher.take_maintenance()
            if warning is not None and maintenance is None:
                self._guest("state", "saving", force=True)
                maintenance = MaintenanceSave(warning, mirror.committed_step, save_signal(spec.trainer),
                                              time.monotonic() + MAINTENANCE_SAVE_SECONDS)
            if maintenance is not None and maintenance.step(trainer, mirror, read_progress(self.progress_file)):
                maintenance = None
                self._guest("state", "training", force=True)
        self.phase.seconds["train"] = round(time.monotonic() - train_started, 3)

        # 8. a notice: save now
        if code is None and watcher.notice is not None:
            return self._save_on_notice(watcher.notice, trainer, mirror, store, restored)

        # the trainer ended by itself
        try:
            with self.phase.timed("final_commit"):
                mirror.final_sync()
        except LeaseLost:
            return self._superseded(attempt, trainer, mirror)
        mirror.tidy()
        committed = mirror.committed_step
        reached = self._reached(restored)
        if code == 0 and watcher.notice is None:
            return self._done(attempt, committed, reached)
        if watcher.notice is not None:  # it exited on the SIGTERM the whole unit got from systemd
            return self._end_after_notice(watcher.notice, store, mirror, restored, reached)
        last = trainer.last_words()
        reason = f"the trainer exited with code {code}" + (f": {last}" if last else "")
        return self._failed(attempt, reason, restored, committed, reached)

    # -- endings ----------------------------------------------------------------------------------

    def _save_on_notice(self, notice: Notice, trainer: TrainerProcess, mirror: Mirror,
                        store: CheckpointStore, restored: int | None) -> int:
        spec = self.spec
        trainer.terminate()
        mirror.hurry()
        self._guest("state", "saving", force=True)
        # Leave the last part of the grace budget for the upload and the commit.
        deadline = notice.monotonic + spec.grace_seconds * 0.6
        code = trainer.wait(timeout=max(0.0, deadline - time.monotonic()))
        if code is None:
            log.warning("the trainer did not exit in time after SIGTERM; keeping its newest completed checkpoint",
                        waited=round(time.monotonic() - notice.monotonic, 2))
            trainer.kill()
            trainer.wait(timeout=5)
        saved_at = time.monotonic()
        self.phase.seconds["trainer_save"] = round(saved_at - notice.monotonic, 3)
        failure = ""
        try:
            mirror.final_sync()
        except LeaseLost:
            return self._superseded(self.attempt, trainer, mirror)
        except StorageError as exc:  # the last commit stands; say what was lost and why
            failure = f"the final commit failed: {exc}"
            log.error("the final commit after the notice failed; the last commit stands", error=str(exc),
                      object=exc.object, committed_step=mirror.committed_step)
        self.phase.seconds["final_commit"] = round(time.monotonic() - saved_at, 3)
        reached = self._reached(restored)
        return self._end_after_notice(notice, store, mirror, restored, reached, reason=failure)

    def _reached(self, restored: int | None) -> int:
        """The furthest step the trainer reported; a trainer that reported nothing did nothing
        beyond the step it was restored at."""
        reached = read_progress(self.progress_file)
        return reached if reached is not None else (restored or 0)

    def _classify(self, notice: Notice) -> str:
        """A SIGTERM that beat the metadata watcher to a preemption is still a preemption."""
        if notice.source == "signal" and self.metadata is not None:
            try:
                if self.metadata.get("instance/preempted", deadline=2.0).strip().upper() == "TRUE":  # a label only
                    return "preempted"
            except Exception:
                pass
        return notice.outcome

    def _end_after_notice(self, notice: Notice, store: CheckpointStore, mirror: Mirror | None,
                          restored: int | None, reached: int | None = None, reason: str = "") -> int:
        committed = mirror.committed_step if mirror else restored
        total = round(time.monotonic() - notice.monotonic, 3)
        self.phase.seconds["notice_to_safe"] = total
        lost = steps_lost(reached, committed)
        log.info("safe after notice", source=notice.source, committed_step=committed, reached_step=reached,
                 steps_lost=lost, seconds=total, **{f"{k}_seconds": v for k, v in self.phase.seconds.items()})
        if mirror is not None:
            mirror.tidy()  # after the checkpoint is safe: never on the way to it
        try:
            self.journal.end(self.attempt, self._classify(notice), end_step=committed, reached_step=reached,
                             steps_lost=lost, notice=notice.source, timings=self.phase.seconds, reason=reason)
        except StorageError as exc:  # the VM is going away; the log has it all
            log.warning("could not record the attempt's end", error=str(exc))
        self._guest("state", "stopped", force=True)
        return EXIT_OK

    def _done(self, attempt: Attempt, committed: int | None, reached: int | None) -> int:
        journal = self.journal
        lost = steps_lost(reached, committed)
        journal.end(attempt, "finished", end_step=committed, reached_step=reached, steps_lost=lost,
                    timings=self.phase.seconds)
        state = journal.state()
        summary = {
            "step": committed,
            "train_steps": self.spec.train_steps,
            "attempts": len(state.attempts),
            "preemptions": state.preemptions,
            "steps_lost": state.steps_lost,
            "instance": self.identity.name,
        }
        try:
            self.lease.renew()
        except LeaseLost:
            log.error("lost the lease before writing DONE; the holder finishes the job")
            return EXIT_RETRY
        if journal.mark_done(summary):
            log.info("training finished; DONE written", **summary)
        else:
            log.warning("DONE was already written by another writer")
        self._guest("state", "done", force=True)
        self._guest("step", str(committed or 0), force=True)
        return self._finish("done")

    def _failed(self, attempt: Attempt, reason: str, restored: int | None, committed: int | None = None,
                reached: int | None = None) -> int:
        log.error("attempt failed", reason=reason)
        self.journal.end(attempt, "failed", reason=reason, end_step=committed if committed is not None else restored,
                         reached_step=reached, steps_lost=steps_lost(reached, committed), timings=self.phase.seconds)
        attempts = self.journal.attempts()
        if should_give_up(attempts, self.spec.max_failed_attempts):
            why = f"{self.spec.max_failed_attempts} attempts in a row failed without progress; last: {reason}"
            log.error("giving up", reason=why)
            self.journal.mark_failed(why, attempts=len(attempts))
            self._guest("state", "failed", force=True)
            return self._finish("failed")
        self._guest("state", "retrying", force=True)
        return EXIT_RETRY

    def _restore_failed(self, attempt: Attempt, exc: RestoreFailed) -> int:
        """A restore that failed for a reason not the snapshot's ends the boot; a later one restores
        the same snapshot. The boot disk's reasons are the same on the next boot, so they count
        toward giving up (FAILED then says why); the network's do not."""
        reason = f"restore failed: {exc}"
        if exc.local:
            return self._failed(attempt, reason, None)
        log.error("restore failed; a later boot restores the same snapshot", reason=str(exc))
        self.journal.end(attempt, "interrupted", reason=reason, timings=self.phase.seconds)
        self._guest("state", "retrying", force=True)
        return EXIT_RETRY

    def _close_attempt(self, outcome: str, reason: str) -> None:
        """Closes this boot's attempt if nothing else did: an open one reads as a killed agent,
        which the crash-loop guard cannot count."""
        attempt = getattr(self, "attempt", None)
        if attempt is None or attempt.outcome is not None:
            return
        try:
            self.journal.end(attempt, outcome, reason=reason, timings=self.phase.seconds)
        except Exception as err:
            log.warning("could not record the attempt's end", error=str(err))

    def _superseded(self, attempt: Attempt, trainer: TrainerProcess, mirror: Mirror) -> int:
        """Another agent took the job over: stop at once, commit nothing more."""
        trainer.kill()
        trainer.wait(timeout=5)
        mirror.stop()
        log.error("another agent took over this job; stopped without committing")
        try:
            self.journal.end(attempt, "superseded", reason="the lease was taken over", end_step=mirror.committed_step)
        except Exception as exc:
            log.warning("could not record the attempt's end", error=str(exc))
        return EXIT_RETRY

    def _bad_spec(self, exc: SpecError) -> int:
        """A spec that cannot run will not run on the next boot either: record FAILED in its job dir
        when the metadata's spec (YAML `survivor-job` or the flat keys) names a valid one."""
        raw = exc.job_dir if getattr(exc, "attributes", None) is not None else None
        if raw:
            try:
                journal = Journal(open_storage(raw))
                journal.mark_failed("invalid job spec: " + "; ".join(exc.problems))
                log.error("FAILED written to the job dir: the job spec is invalid", job_dir=raw)
            except Exception as err:  # the spec error is what matters; say it and stop
                log.warning("could not record FAILED in the job dir", error=str(err))
        return EXIT_BAD_SPEC

    def _finish(self, why: str, on_error: int = EXIT_RETRY) -> int:
        finisher = choose_finisher(self.spec.on_finish, self.identity)
        if self.metadata is None and finisher.name != "keep-alive":
            log.info("not on a Compute Engine VM (no metadata server): nothing to stop or leave")
            finisher = KeepAlive()
        compute = None
        try:
            if finisher.name != "keep-alive":
                factory = self.options.compute_factory or _default_compute
                compute = factory(self.identity)
            finisher.finish(self.identity, compute)
        except Exception as exc:
            log.error("finish action failed; the VM is left as it is", action=finisher.name, error=str(exc))
            return on_error
        log.info("finished", why=why, action=finisher.name)
        return EXIT_OK

    # -- helpers ----------------------------------------------------------------------------------

    def _gpus(self, spec: JobSpec) -> int:
        detected = count_gpus()
        if spec.num_gpus and detected < spec.num_gpus and self.metadata is not None:
            if (self.metadata.get_or("instance/attributes/install-nvidia-driver", "") or "").lower() == "true":
                detected = wait_for_gpus(spec.num_gpus, self.options.gpu_wait_seconds)
        count = decide_gpu_count(spec.num_gpus, detected)
        log.info("GPUs", detected=detected, using=count)
        return count

    def _fetch(self, url: str, local: str) -> None:
        from survivor.jobdir.storage import GcsStorage, split_gs_url

        if url.startswith("gs://"):
            bucket, name = split_gs_url(url)
            GcsStorage(f"gs://{bucket}").download([(name, local)])
        else:
            import shutil

            shutil.copyfile(url[len("file://"):] if url.startswith("file://") else url, local)

    def _trainer_env(self, pythonpath: list[str]) -> dict[str, str]:
        env = dict(os.environ)
        env[PROGRESS_ENV] = self.progress_file
        if pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(pythonpath + [p for p in [env.get("PYTHONPATH")] if p])
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env


def _default_compute(identity: InstanceIdentity) -> ComputeActions | None:
    from survivor.cloud.compute import Compute

    return Compute.from_environment(identity.project)
