"""The mirror: every new local checkpoint the trainer writes, committed to the job dir while it trains.

    >>> mirror = Mirror(store, storage, "/var/lib/survivor/job", attempt=3, interval=30.0,
    ...                 committed_step=1200, on_commit=print, fence=lease.fence).start()
    >>> mirror.after_notice(deadline)  # the VM is going: look every POLL_AFTER_NOTICE seconds, commit only
    >>> mirror.final_sync()          # the trainer has exited: stop the loop, commit what it left
    >>> mirror.tidy()                # once that commit is safe: event files, old snapshots

A background thread scans the local job dir every `interval` seconds (the spec's `sync_seconds`). A
scan is cheap when nothing changed: a walk and a stat per file, with each file's checksum followed
as it grows (`snapshot.Checksums`). When the snapshot holds a newer step than the last commit (or
files added to the committed step, in whatever order they came: `same_step`), it is committed through the
`CheckpointStore` (blobs first, the manifest last: one atomic moment). Routine rounds then mirror
TensorBoard event files and collect the garbage the new commit made obsolete. After a notice, rounds
commit only: nothing else may stand between the trainer's last checkpoint and safety. A commit that
cannot finish by the notice's deadline (its new bytes over the upload rate the commits measured)
goes to the state disk instead, when the job has one (`survivor.jobdir.disk_tier`); the job's final
step always goes to Cloud Storage.
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Callable

from survivor import log as logs
from survivor.jobdir.chunks import chunk_object
from survivor.jobdir.disk_tier import DiskTier, PendingSnapshot, UploadRate, fits
from survivor.jobdir.lease import LeaseLost
from survivor.jobdir.snapshot import Checksums, Snapshot, checkpoint_files, event_files, resumable, scan, step_now
from survivor.jobdir.storage import JobStorage, Part
from survivor.jobdir.store import CheckpointStore, CommitStats, SnapshotChanged

log = logs.get("mirror")

#: How often the mirror looks once a notice came. The trainer's save and exit overlap the upload
#: this way, and a checkpoint that lands is seen well inside the time its upload takes.
POLL_AFTER_NOTICE = 0.1


def same_step(
    committed: frozenset | None,
    now: frozenset,
    *,
    committed_whole: bool = True,
    step: int | None = None,
    naming: re.Pattern | None = None,
) -> str:
    """Pure: what a new snapshot `now` of the committed step (`committed`: its fingerprint) is.

    - "amends": every file of the commit unchanged, and files added. It commits the step again and
      loses nothing of the first commit, whatever order the trainer wrote its files in: TensorFlow's
      CheckpointManager writes a save's shards first and its `checkpoint` state file after them
      (`CheckpointManager.save` calls `_record_state` once `write` returns;
      tensorflow/python/checkpoint/checkpoint_management.py), other trainers write their state file
      first, and the built-in trainers write their SavedModel export after their last save. The
      newer commit holds the older one whole, so it replaces it in `keep`
      (`store.snapshots_to_delete`). So is any new snapshot of a step whose commit held no whole
      checkpoint (`committed_whole` False): a save caught while its files still arrived, whose
      trainer then deleted the save before it, is committed again once it is whole.
    - "content": files that are not the step's checkpoint (`checkpoint_files`: its state file, its
      shards, files whose names hold the step) changed or went, the checkpoint unchanged: notes and
      metrics rewritten. Committed at the final sync, once the trainer is gone (a final evaluation
      written after the last save is kept); while it trains they wait for the next step's commit.
    - "changes": a file of the step's checkpoint changed or went; the first commit stands (a trainer
      that truncated a checkpoint after its rename).
    """
    if committed is None or committed == now:
        return "changes"
    if not committed_whole:
        return "amends"
    if committed < now:
        return "amends"
    gone = {path for path, _, _ in committed - now}
    if step is not None and not gone & checkpoint_files(gone, step, naming):
        return "content"
    return "changes"


class Mirror:
    """Commits each new local snapshot to the job dir, in a background thread while training runs.

    Args:
        store: the job dir's checkpoint store, which commits and collects garbage.
        storage: the job dir itself (event files are uploaded to it as they are).
        local_root: the local job dir the trainer writes its checkpoints into.
        attempt: this attempt's number, recorded in each manifest.
        interval: seconds between routine rounds.
        committed_step: the step already committed (the restored one), or None; nothing older is committed.
        on_commit: called with each commit's figures.
        fence: called before each manifest write; raises LeaseLost once another agent holds the job.
        disk: the state disk's tier, for a commit too large for the notice; None: the job has none.
        naming: where a checkpoint file's name holds its step (the spec's `checkpoint_pattern` as
            `spec.checkpoint_naming` compiles it); None: the default rule (`snapshot.step_in_name`).
    """

    def __init__(
        self,
        store: CheckpointStore,
        storage: JobStorage,
        local_root: str,
        attempt: int,
        interval: float,
        committed_step: int | None,
        on_commit: Callable[[CommitStats], None],
        fence: Callable[[], None] | None = None,
        disk: DiskTier | None = None,
        naming: re.Pattern | None = None,
    ):
        self.store = store
        self.storage = storage
        self.local_root = local_root
        self.attempt = attempt
        self.interval = interval
        self.committed_step = committed_step
        self.on_commit = on_commit
        self.fence = fence
        self.disk = disk
        self.naming = naming
        self._said: set[str] = set()  # the one-line warnings said once an attempt
        #: why the trainer's newest files were not committed though they hold a step ("": they were):
        #: a step beyond train_steps, which a name that holds no step of this job gives
        self.refused = ""
        #: why the commits' steps are not the trainer's steps ("": they are, as far as the agent saw):
        #: the trainer reported saving a step its newest checkpoint's name does not hold
        self.misnumbered = ""
        self.rate = UploadRate()
        self.pending: PendingSnapshot | None = None  # the snapshot this attempt left on the state disk
        self._deadline: float | None = None  # monotonic: when the commit after a notice must be done
        self._noticed_at: float | None = None  # monotonic: when `after_notice` was called
        #: the step of the newest commit whose scan began after the notice (never an earlier periodic
        #: one): what `Boot` compares with the step the trainer reports saved on the notice
        self.committed_after_notice: int | None = None
        self.errors = 0
        self._fingerprint: frozenset | None = None
        self._committed_whole = True  # whether the last commit held a whole checkpoint of its step
        self._final = False  # the trainer is gone: the final sync commits rewritten notes too
        self._clean_exit = False  # ... and it exited 0: a step it saved again is committed again
        self._changed_step: int | None = None  # the committed step whose files were seen changing
        self._checksums = Checksums(store.chunk_size)
        self._events: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._collect = True  # routine rounds tidy up after a commit; after a notice they do not
        self._thread = threading.Thread(target=self._loop, name="mirror", daemon=True)

    def start(self, restored: frozenset | None = None) -> "Mirror":
        """Notes what the restore put in the local job dir (not new, so not committed again), lists
        the stored blobs, and starts the background rounds. `restored`: the restored files' fingerprint
        as the restore's manifest gives it. A scan here instead races a trainer already running: on a
        loaded machine a fast trainer had written its last checkpoint before this scan, which then
        took it for the restored state, so nothing was ever committed and the job was DONE at step
        None. The scan stays for callers that start the mirror before the trainer."""
        self._fingerprint = (
            restored if restored is not None else scan(self.local_root, self._checksums, self.naming).fingerprint()
        )
        self._committed_whole = resumable(
            [path for path, _, _ in self._fingerprint], self.committed_step, naming=self.naming
        )
        try:
            self.store.known_blobs()  # listed now, so the commit after a notice goes straight to its upload
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
                self.sync(collect=self._collect)
            except LeaseLost:
                return
            except Exception as exc:  # keep training; the next round or the final sync tries again
                self.errors += 1
                log.warning("sync failed; will retry", error=str(exc))

    def sync(self, collect: bool = True) -> CommitStats | None:
        """Commits the local snapshot if it changed and holds a step; returns the commit's figures
        or None. With `collect` (a routine round) it then mirrors event files and deletes what the
        new commit made obsolete; on the way to safety neither runs before the commit (see `tidy`)."""
        with self._lock:
            stats = self._commit_if_new()
            if stats is None and self._noticed_at is not None:
                self._preupload()
            if collect:
                self._mirror_events()
                if stats is not None:
                    self.collect_garbage()
            return stats

    def _commit_if_new(self) -> CommitStats | None:
        noticed, began = self._noticed_at, time.monotonic()
        after_notice = noticed is not None and began >= noticed
        snapshot = scan(self.local_root, self._checksums, self.naming)
        if snapshot.step is None or not snapshot.files:
            self._say_if_linked()
            if snapshot.files:
                self._say_once(
                    "no step",
                    "the trainer's files name no step, so nothing is committed: set "
                    "checkpoint_pattern in the job spec (`model-{step}-*.keras`), or number checkpoints "
                    "ckpt-STEP",
                    file=snapshot.files[0].path,
                )
            return None
        if self.store.max_step is not None and snapshot.step > self.store.max_step:
            # A manifest beyond train_steps is one no restore follows (store.Manifest.from_json): it
            # would stand in the job dir as a commit while the next boot started from scratch.
            self.refused = (
                f"{snapshot.named_by or 'a file'} names step {snapshot.step}, beyond train_steps "
                f"({self.store.max_step}): not committed; set checkpoint_pattern in the job spec to "
                "say where the step is in its name"
            )
            self._say_once(f"beyond {snapshot.step}", self.refused, file=snapshot.named_by, step=snapshot.step)
            return None
        self.refused = ""  # the file went (the step of a snapshot is the highest any of its names holds)
        if self.committed_step is not None and snapshot.step < self.committed_step:
            return None
        fingerprint = snapshot.fingerprint()
        if fingerprint == self._fingerprint:
            return None
        verdict = (
            same_step(
                self._fingerprint,
                fingerprint,
                committed_whole=self._committed_whole,
                step=snapshot.step,
                naming=self.naming,
            )
            if snapshot.step == self.committed_step
            else None
        )
        if verdict == "content" and not self._final:
            return None  # notes rewritten between saves: they go with the next step's commit (or the final one)
        if verdict == "changes" and self._resaved(snapshot):
            # The trainer saved the committed step again and exited 0 (a loop that saves at every
            # checkpoint_steps and once more at its end, TensorFlow's CheckpointManager.save with the
            # same checkpoint_number; an export after it): what it left is its last word. The new
            # commit does not hold the first one whole, so both stay (`store.snapshots_to_delete`):
            # a restore that fails on the newer passes it over for the first.
            log.info(
                "the trainer saved the committed step again before it exited; committing its last save "
                "(the first commit of the step stays)",
                step=snapshot.step,
            )
        elif verdict == "changes":
            # A trainer that rewrote or truncated its files after their rename, while it trains (or
            # exited with an error, so a save may have stopped halfway): the first commit of the
            # step stands. docs/trainer-contract.md says what the agent can and cannot catch.
            if self._changed_step != snapshot.step:
                log.warning(
                    "the files of a committed step changed after its commit; keeping the first commit "
                    "while the trainer runs (a trainer writes a checkpoint under a temporary name, renames "
                    "it, and never changes it after; a second save of the step is committed once the "
                    "trainer exits 0)",
                    step=snapshot.step,
                )
                self._changed_step = snapshot.step
            return None
        if self._to_disk(snapshot):
            self._took(snapshot, fingerprint, after_notice)
            return None
        try:
            stats = self.store.commit(self.local_root, snapshot, self.attempt, fence=self.fence)
        except SnapshotChanged as exc:
            log.info("a file changed during upload; committing at the next sync", reason=str(exc))
            self._checksums.forget()  # a checksum taken while the file was written may be the wrong one
            return None
        self._took(snapshot, fingerprint, after_notice)
        self.rate.observe(stats.uploaded_bytes, stats.upload_seconds)
        self.on_commit(stats)
        return stats

    def _resaved(self, snapshot: Snapshot) -> bool:
        """Whether a snapshot of the committed step whose checkpoint files changed is committed
        anyway: only at the final sync after the trainer exited 0 (nothing of it writes any more, and
        it did not stop halfway through a save), and only when it holds a whole checkpoint. Which of
        its files were renamed into place does not tell a save from a rewrite: a second
        `CheckpointManager.save` of one checkpoint number renames new data shards into place but
        rewrites the `.index` in place (the same inode; measured with TensorFlow 2.21)."""
        return self._final and self._clean_exit and snapshot.resumable

    def _took(self, snapshot: Snapshot, fingerprint: frozenset, after_notice: bool) -> None:
        """Notes `snapshot` as the committed state (to the job dir, or to the state disk)."""
        self._fingerprint = fingerprint
        self._committed_whole = snapshot.resumable
        self.committed_step = snapshot.step
        if after_notice and snapshot.resumable:  # a save still arriving makes nothing safe yet
            self.committed_after_notice = snapshot.step

    def _preupload(self) -> None:
        """After a notice, while the trainer is still writing its checkpoint under a temporary name:
        uploads the chunks it has finished so far (`CheckpointStore.preupload`), so that the commit
        at its rename sends only what is left, and the upload overlaps the save instead of following
        it. A failure only leaves those chunks to the commit."""
        parts = [
            Part(path, c.offset, c.size, chunk_object(c), c.crc32c)
            for path, c in self._checksums.growing_chunks()
            if c.size == self.store.chunk_size
        ]
        if not parts:
            return
        try:
            sent = self.store.preupload(parts)
        except LeaseLost:
            raise
        except Exception as exc:
            log.info("chunks of a checkpoint being written not uploaded yet; its commit sends them", error=str(exc))
            return
        if sent:
            log.info("uploaded chunks of a checkpoint still being written", bytes=sent)

    def _to_disk(self, snapshot: Snapshot) -> bool:
        """After a notice, saves the snapshot to the state disk instead when its commit cannot finish
        by the deadline; True if it did. Never the job's final step, which DONE will point at."""
        if self._deadline is None or self.disk is None or snapshot.step is None:
            return False
        if self.store.max_step is not None and snapshot.step >= self.store.max_step:
            return False
        known = self.store.known_blobs()
        new_bytes = sum(
            sum(c.size for c in f.chunks if chunk_object(c) not in known) if f.chunks else f.size
            for f in snapshot.files
        )
        rate, left = self.rate.bytes_per_second(), self._deadline - time.monotonic()
        if fits(new_bytes, rate, left) or not self.disk.available():
            return False
        started = time.monotonic()
        try:
            self.pending = self.disk.save(self.local_root, snapshot, self.attempt)
        except SnapshotChanged as exc:
            log.info("a file changed while it was copied to the state disk; trying again", reason=str(exc))
            self._checksums.forget()
            return False
        except OSError as exc:  # the disk failed: Cloud Storage it is, as far as it gets
            log.warning("could not save to the state disk; committing to the job dir", error=str(exc))
            return False
        log.warning(
            "the commit cannot finish before the VM goes: saved to the state disk; the next boot of "
            "this instance commits it",
            step=snapshot.step,
            new_bytes=new_bytes,
            bytes_per_second=round(rate),
            seconds_left=round(left, 3),
            save_seconds=round(time.monotonic() - started, 3),
        )
        return True

    def tidy(self) -> None:
        """What waits until the checkpoint is safe: event files, then garbage collection, which after
        a notice is left to the next boot's first commit (the VM is going, and nothing needs it
        gone: the seconds are the MIG's to recreate the VM). Never raises."""
        try:
            with self._lock:
                self._mirror_events()
        except Exception as exc:
            log.warning("event files not mirrored; the checkpoint is unaffected", error=str(exc))
        if self._noticed_at is None:
            self.collect_garbage()

    def collect_garbage(self) -> None:
        """Deletes the snapshots and blobs the store no longer keeps. Never raises: a failure only
        leaves old snapshots for the next round."""
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

    def after_notice(self, deadline: float | None = None) -> None:
        """The VM is going: from now on the rounds come every POLL_AFTER_NOTICE seconds and commit
        only, so the trainer's last checkpoint goes out while the trainer is still exiting.
        `deadline` (monotonic): when the commit must be done; one that cannot finish by then goes to
        the state disk, if there is one."""
        self._deadline = deadline
        self._noticed_at = time.monotonic()
        self._collect = False
        self.interval = min(self.interval, POLL_AFTER_NOTICE)
        self._wake.set()

    def wake(self) -> None:
        """Runs a round now instead of at the next interval."""
        self._wake.set()

    def check_saved(self, reported: int) -> None:
        """Says once when the step the trainer reports saving (`contract.report_saved`) is not the
        step its files' names hold: a checkpoint numbered by its save count, as
        `CheckpointManager.save()` numbers them by default, is never the save the agent waits for."""
        named = step_now(self.local_root, self.naming)
        if named is not None and named != reported:
            self.misnumbered = (
                f"the trainer reported saving step {reported} as a checkpoint numbered {named}: the "
                "commits' steps are not its steps, so the steps lost are unknown"
            )
            self._say_once(
                "numbered",
                f"the trainer reports saving step {reported}, but its newest checkpoint's "
                f"number is {named}: number checkpoints by step (TensorFlow's "
                "CheckpointManager.save(checkpoint_number=step)) or set checkpoint_pattern; until then the "
                "agent cannot tell the save is committed and waits for the trainer to exit",
                reported=reported,
                named=named,
            )

    def note_misnumbered(self, first_step: int, restored_step: int) -> None:
        """The trainer resumed at `first_step`, far past the `restored_step` its commit's name gave
        (`ending.resumed_beyond`): the names number something else than steps (an epoch, a save
        count), so this attempt's steps lost are unknown; said once, with the fix."""
        self.misnumbered = (
            f"the trainer resumed at step {first_step} from a checkpoint numbered {restored_step}: "
            "the commits' steps are not its steps, so the steps lost are unknown"
        )
        self._say_once(
            "numbered",
            f"the trainer resumed at step {first_step} from the checkpoint numbered "
            f"{restored_step}: its checkpoints are numbered by something else than the step (an epoch, "
            "a save count); name them by step (ckpt-<step>; CheckpointManager.save(checkpoint_number="
            "step)) or set checkpoint_pattern; until then the steps lost are unknown",
            first_step=first_step,
            restored_step=restored_step,
        )

    def _say_once(self, what: str, message: str, **fields) -> None:
        """A warning said once an attempt (`what` keys it, and its log line's `said` field names
        it, as `survivor check-trainer` reads it), not once a round."""
        if what not in self._said:
            self._said.add(what)
            log.warning(message, said=what, **fields)

    def _say_if_linked(self) -> None:
        """One warning, the first time the scan finds the local job dir replaced by a link (the scan
        refuses it: nothing through it is committed)."""
        if os.path.islink(self.local_root):
            self._say_once(
                "linked",
                f"the local job dir {self.local_root} is a link; not following it: nothing "
                "written through it is committed",
                path=self.local_root,
            )

    def stop(self) -> None:
        """Stops the background rounds (one under way finishes first)."""
        self._stop.set()
        self._wake.set()
        self._thread.join()

    def final_sync(self, attempts: int = 5, pause: float = 0.2, clean_exit: bool = False) -> CommitStats | None:
        """Stops the background rounds and commits what the trainer left, retrying a file that
        changed during its upload (`pause` seconds apart). `clean_exit`: the trainer exited 0, so a
        whole checkpoint of the committed step that it saved again is committed again (with what it
        wrote after, such as an export); otherwise the first commit stands. Garbage collection is left to `tidy`,
        after the checkpoint is safe. Afterwards `uncommitted` is the newest step the trainer left
        that is still not committed (None: all of it is), which `decide_ending` will not call DONE.
        Raises LeaseLost when another agent holds the job, StorageError when the job dir fails."""
        self.stop()
        self._final, self._clean_exit = True, clean_exit
        stats = None
        for attempt in range(attempts):
            stats = self.sync(collect=False) or stats
            left = self.uncommitted()
            if left is None:
                break
            if attempt + 1 < attempts:
                time.sleep(pause)
        return stats

    def uncommitted(self) -> int | None:
        """The step of what the trainer left in the local job dir that no commit holds yet: a newer
        step than the last commit (or any step, when nothing is committed), or files added to the
        committed step since its commit (an export written after the last save); else None. Read
        afresh, without the checksums kept across scans: what decides DONE does not rest on anything
        a scan during the trainer's writes remembered."""
        snapshot = scan(self.local_root, naming=self.naming)
        if snapshot.step is None or (self.store.max_step is not None and snapshot.step > self.store.max_step):
            return None
        if self.committed_step is not None and snapshot.step < self.committed_step:
            return None
        if snapshot.step == self.committed_step and (
            snapshot.fingerprint() == self._fingerprint
            or (
                same_step(
                    self._fingerprint,
                    snapshot.fingerprint(),
                    committed_whole=self._committed_whole,
                    step=snapshot.step,
                    naming=self.naming,
                )
                == "changes"
                and not self._resaved(snapshot)
            )
        ):
            return None
        return snapshot.step
