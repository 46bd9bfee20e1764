"""The mirror after a notice: the trainer's last checkpoint is committed as soon as it lands, while
the trainer is still exiting, and nothing but the commit runs on the way to safety."""

import os
import threading

from survivor.agent.mirror import POLL_AFTER_NOTICE, Mirror
from survivor.jobdir.storage import open_storage
from survivor.jobdir.store import CheckpointStore
from tests.waiting import PATIENCE, wait_until


def test_after_a_notice_the_mirror_commits_a_checkpoint_the_moment_it_appears(tmp_path):
    """Its routine interval is an hour; after the notice a renamed checkpoint is committed at once."""
    local = str(tmp_path / "job")
    os.makedirs(local)
    storage = open_storage(str(tmp_path / "jobdir"))
    committed = threading.Event()
    steps = []

    def on_commit(stats):
        steps.append(stats.manifest.step)
        committed.set()

    mirror = Mirror(
        CheckpointStore(storage), storage, local, attempt=1, interval=3600, committed_step=None, on_commit=on_commit
    ).start()
    try:
        mirror.after_notice()
        assert mirror.interval == POLL_AFTER_NOTICE
        (tmp_path / "job" / ".dummy-checkpoint-5.json.tmp").write_text('{"step": 5}')
        os.replace(tmp_path / "job" / ".dummy-checkpoint-5.json.tmp", tmp_path / "job" / "dummy-checkpoint-5.json")
        assert committed.wait(30), "the renamed checkpoint was not committed"
    finally:
        mirror.stop()
    assert steps == [5]


class CountedGarbage(CheckpointStore):
    """A checkpoint store that counts its garbage collections."""

    collections = 0

    def collect_garbage(self):
        self.collections += 1
        return super().collect_garbage()


def test_after_a_notice_the_mirror_commits_and_leaves_garbage_collection_to_the_next_boot(tmp_path):
    local = str(tmp_path / "job")
    os.makedirs(local)
    storage = open_storage(str(tmp_path / "jobdir"))
    store = CountedGarbage(storage)
    committed = threading.Event()
    mirror = Mirror(
        store, storage, local, attempt=1, interval=3600, committed_step=None, on_commit=lambda stats: committed.set()
    ).start()
    try:
        mirror.after_notice()
        (tmp_path / "job" / ".dummy-checkpoint-7.json.tmp").write_text('{"step": 7}')  # as the contract says
        os.replace(tmp_path / "job" / ".dummy-checkpoint-7.json.tmp", tmp_path / "job" / "dummy-checkpoint-7.json")
        assert committed.wait(30)
    finally:
        mirror.stop()
    assert store.collections == 0, "garbage collection ran on the way to safety"
    mirror.tidy()
    assert store.collections == 0, "garbage collection ran while the VM was going"
    assert storage.list("survivor/snapshots/")  # the commit stands
    routine = Mirror(store, storage, local, attempt=2, interval=3600, committed_step=7, on_commit=lambda s: None)
    routine.tidy()  # a boot that had no notice collects as before
    assert store.collections == 1


def test_after_a_notice_chunks_of_a_checkpoint_still_being_written_upload_before_its_rename(tmp_path):
    """The save and the upload overlap: whole chunks of the temporary file go up while it is written;
    at the rename the commit sends only the chunks left (the last, and one whose bytes the writer
    rewrote: a header written last), reuses the rest, and the manifest is still the one commit."""
    chunk = 1 << 20
    local = tmp_path / "job"
    local.mkdir()
    storage = open_storage(str(tmp_path / "jobdir"))
    store = CheckpointStore(storage, chunk_size=chunk)
    commits = []
    mirror = Mirror(
        store, storage, str(local), attempt=1, interval=3600, committed_step=None, on_commit=commits.append
    ).start()
    body = os.urandom(3 * chunk + 1000)
    temporary, final = local / "dummy-checkpoint-9.bin.tmp", local / "dummy-checkpoint-9.bin"
    try:
        mirror.after_notice()
        with open(temporary, "wb") as f:
            f.write(b"\0" * 64 + body[64 : 3 * chunk])  # three whole chunks, the header not written yet
            f.flush()
            # all three whole chunks up before the header is rewritten: one read after the rewrite
            # would change which chunks the commit sends (a loaded machine's timing, not the product's)
            wait_until(
                lambda: len(storage.list("survivor/blobs/chunks/")) >= 3,
                PATIENCE,
                "the three whole chunks of the file being written uploaded before its rename",
                0.02,
            )
            assert not storage.list("survivor/snapshots/"), "nothing is committed before the rename"
            f.write(body[3 * chunk :])
            f.seek(0)
            f.write(body[:64])  # the header, written last
        os.replace(temporary, final)
        wait_until(lambda: commits, PATIENCE, "the renamed checkpoint committed", 0.02)
    finally:
        mirror.stop()
    stats = commits[0]
    assert stats.manifest.step == 9
    # Chunks 2 and 3 went up while the file was written. The digest followed the writer's appends,
    # so the rewritten header first fails the check of reused ranges (SnapshotChanged: nothing is
    # committed, the file is read afresh) after the tail went up; the commit then sends the new first
    # chunk only.
    assert (stats.uploaded_chunks, stats.reused_chunks) == (1, 3)
    restored = tmp_path / "restored"
    assert CheckpointStore(open_storage(str(tmp_path / "jobdir")), chunk_size=chunk).restore(str(restored)) is not None
    assert (restored / "dummy-checkpoint-9.bin").read_bytes() == body


class CommitsAfter(CheckpointStore):
    """A checkpoint store whose first `failures` commits find the snapshot changed under them (as a
    commit does whose file was still being written when it was read)."""

    def __init__(self, storage, failures):
        super().__init__(storage)
        self.failures = failures

    def commit(self, *args, **kwargs):
        if self.failures:
            from survivor.jobdir.store import SnapshotChanged

            self.failures -= 1
            raise SnapshotChanged("dummy-checkpoint-8.json changed since it was read")
        return super().commit(*args, **kwargs)


def test_the_final_sync_commits_the_trainers_last_checkpoint_though_its_first_tries_fail(tmp_path):
    """Deterministically: the trainer finished and saved step 8, and the final
    sync's first three commits found the snapshot changed. It used to give up after three (DONE was
    then written with nothing committed); it now tries again, and says what is left if it cannot."""
    from survivor.agent.ending import AttemptResult, decide_ending

    local = tmp_path / "job"
    local.mkdir()
    (local / "dummy-checkpoint-8.json").write_text('{"step": 8}')
    storage = open_storage(str(tmp_path / "jobdir"))
    mirror = Mirror(
        CommitsAfter(storage, failures=3),
        storage,
        str(local),
        attempt=1,
        interval=3600,
        committed_step=None,
        on_commit=lambda stats: None,
    )
    mirror._thread.start()  # as start() does, without its first scan (which would take step 8 as restored)
    mirror.final_sync(pause=0.01)
    assert mirror.committed_step == 8 and mirror.uncommitted() is None

    stuck = Mirror(
        CommitsAfter(storage, failures=100),
        storage,
        str(local),
        attempt=2,
        interval=3600,
        committed_step=None,
        on_commit=lambda stats: None,
    )
    stuck._thread.start()
    stuck.final_sync(pause=0.01)
    assert stuck.committed_step is None and stuck.uncommitted() == 8
    ending = decide_ending(AttemptResult(trainer_code=0, committed_step=None, uncommitted_step=stuck.uncommitted()))
    assert not ending.done and ending.outcome == "interrupted" and "step 8" in ending.reason


def test_a_checkpoint_written_before_the_mirror_starts_is_committed_not_taken_for_the_restore(tmp_path):
    """The race itself: the agent launches the trainer, then starts the mirror, whose
    first scan noted what was in the local job dir as 'restored, not new'. On a loaded machine a
    fast trainer (the recipe's, 40 steps in under a second) had already written its checkpoints and
    exited 0 by then: nothing differed from that scan, nothing was committed, and DONE was written at
    step None. The baseline now comes from the restore's manifest, so the checkpoint is committed."""
    local = tmp_path / "job"
    local.mkdir()
    (local / "dummy-checkpoint-8.json").write_text('{"step": 8}')  # written before the mirror started
    storage = open_storage(str(tmp_path / "jobdir"))
    raced = Mirror(
        CheckpointStore(storage),
        storage,
        str(local),
        attempt=1,
        interval=3600,
        committed_step=None,
        on_commit=lambda stats: None,
    ).start()  # the old way: a scan of what is there now
    raced.final_sync(pause=0.01)
    assert raced.committed_step is None and raced.uncommitted() == 8  # the race, reproduced

    fixed = Mirror(
        CheckpointStore(storage),
        storage,
        str(local),
        attempt=2,
        interval=3600,
        committed_step=None,
        on_commit=lambda stats: None,
    ).start(restored=frozenset())  # nothing was restored
    fixed.final_sync(pause=0.01)
    assert fixed.committed_step == 8 and fixed.uncommitted() is None


def test_the_state_file_tensorflow_writes_after_a_first_save_commits_its_step_again(tmp_path):
    """A first save's shards are committed before TensorFlow writes its `checkpoint` state file
    (the notice's poll caught the moment between): the state file commits the step again, so the
    restore holds what `latest_checkpoint` reads. Files that changed still never replace a commit."""
    from survivor.agent.mirror import same_step
    from survivor.jobdir.snapshot import scan

    local = tmp_path / "job"
    local.mkdir()
    storage = open_storage(str(tmp_path / "jobdir"))
    store = CheckpointStore(storage)
    commits = []
    mirror = Mirror(
        store, storage, str(local), attempt=1, interval=3600, committed_step=None, on_commit=commits.append
    ).start(restored=frozenset())  # rounds hourly: the test syncs
    (local / "ckpt-31.index").write_bytes(b"index")
    (local / "ckpt-31.data-00000-of-00001").write_bytes(b"weights" * 100)
    assert mirror.sync(collect=False).manifest.step == 31
    before = scan(str(local)).fingerprint()
    (local / "checkpoint").write_text('model_checkpoint_path: "ckpt-31"\nall_model_checkpoint_paths: "ckpt-31"\n')
    assert same_step(before, scan(str(local)).fingerprint()) == "amends"
    again = mirror.sync(collect=False)
    assert again is not None and again.manifest.step == 31 and again.manifest.seq == 2
    restored = tmp_path / "restored"
    assert store.restore(str(restored)).seq == 2
    assert (restored / "checkpoint").read_text().startswith('model_checkpoint_path: "ckpt-31"')
    # a file of the committed step changed: not a superset, the commit stands
    (local / "ckpt-31.data-00000-of-00001").write_bytes(b"torn")
    assert same_step(scan(str(restored)).fingerprint(), scan(str(local)).fingerprint()) == "changes"
    assert mirror.sync(collect=False) is None and len(commits) == 2
    mirror.stop()
    assert same_step(None, before) == same_step(before, before) == "changes"


def _tf_save(local, step, *, state_first, shards=1, keep_old=False):
    """Writes a TensorFlow-style save of `step`: its state file before its shards (`state_first`, as
    some trainers do) or after them (TensorFlow's CheckpointManager); yields after each file."""
    state = f'model_checkpoint_path: "ckpt-{step}"\nall_model_checkpoint_paths: "ckpt-{step}"\n'
    files = [(f"ckpt-{step}.data-{i:05d}-of-{shards:05d}", b"w%d-%d" % (step, i) * 50) for i in range(shards)]
    files.append((f"ckpt-{step}.index", b"index %d" % step))
    order = [("checkpoint", state.encode())] + files if state_first else files + [("checkpoint", state.encode())]
    for name, data in order:
        (local / f".{name}.tmp").write_bytes(data)
        os.replace(local / f".{name}.tmp", local / name)
        yield name
    if not keep_old:
        for old in local.glob("ckpt-*"):
            if not old.name.startswith(f"ckpt-{step}."):
                old.unlink()


def test_files_added_to_a_committed_step_commit_it_again_whatever_their_order(tmp_path):
    """A trainer that writes its state file before its shards. Each commit of a
    step whose files are still arriving is taken again when they arrive; until its checkpoint is
    whole it never counts as the notice's save, never takes a rank in `keep` from the last whole
    checkpoint, and a restore takes the newest whole one first. Then any order, any shard count."""
    from survivor.jobdir.snapshot import scan

    for state_first in (True, False):
        for shards in (1, 3):
            root = tmp_path / f"{state_first}-{shards}"
            local = root / "job"
            local.mkdir(parents=True)
            storage = open_storage(str(root / "jobdir"))
            store = CheckpointStore(storage, keep=1)
            mirror = Mirror(
                store, storage, str(local), attempt=1, interval=3600, committed_step=None, on_commit=lambda stats: None
            ).start(restored=frozenset())
            mirror.after_notice()
            mirror.stop()  # no background round between the test's own: each sync below is the notice's poll
            for step in (10, 20):
                for name in _tf_save(local, step, state_first=state_first, shards=shards):
                    mirror.sync(collect=False)  # the notice's 0.1 s poll, between every two files
                    seen = scan(str(local))
                    safe = seen.step == step and seen.resumable
                    assert (mirror.committed_after_notice == step) == safe, (state_first, shards, step, name)
                # every file of the save reached the job dir, and the newest commit holds them all
                assert mirror.uncommitted() is None
                newest = store.latest()
                assert newest.step == step and newest.resumable, (state_first, shards, [f.path for f in newest.files])
                mirror.committed_after_notice = None
                store.collect_garbage()
                kept = store.committed()
                assert kept[0].resumable and kept[0].step == step and len(kept) == 1, [m.name for m in kept]
            # the next save's state file alone is committed: keep=1 still holds step 20 whole
            gen = _tf_save(local, 30, state_first=True, shards=shards, keep_old=True)
            next(gen)
            assert mirror.sync(collect=False).manifest.step == 30 and not store.latest().resumable
            store.collect_garbage()
            assert {m.step for m in store.committed() if m.resumable} == {20}
            restored = root / "restored"
            assert store.restore(str(restored)).step == 20  # the whole one, before the state file alone
            assert sorted(p.name for p in restored.iterdir() if p.name.startswith("ckpt-20.index")) == ["ckpt-20.index"]
            mirror.stop()


def test_notes_written_between_saves_commit_their_step_again_and_take_no_rank_in_keep(tmp_path):
    """A file added beside a committed step commits the step again (the built-in trainer's
    export came after its last save and was never committed). The newer commit holds the older one
    whole and replaces it, so a trainer writing notes between saves never pushes an older step out."""
    from survivor.jobdir.snapshot import scan

    local = tmp_path / "job"
    local.mkdir()
    storage = open_storage(str(tmp_path / "jobdir"))
    store = CheckpointStore(storage, keep=2)
    mirror = Mirror(
        store, storage, str(local), attempt=1, interval=3600, committed_step=None, on_commit=lambda stats: None
    ).start(restored=frozenset())
    for step in (1, 2):
        list(_tf_save(local, step, state_first=False, keep_old=True))
        assert mirror.sync().manifest.step == step
    for note in range(4):
        (local / f"notes-{note}.txt").write_text(f"note {note}")
        again = mirror.sync()
        assert again is not None and again.manifest.step == 2
        assert mirror.uncommitted() is None
    assert [m.step for m in store.committed()] == [2, 1]  # step 1 still kept: keep=2 counts steps held whole
    assert {f.path for f in store.latest().files} >= {f"notes-{n}.txt" for n in range(4)}
    # a note that changes in place is no superset: the commit stands, said once
    (local / "notes-0.txt").write_text("rewritten")
    assert mirror.sync() is None and store.latest().step == 2
    assert scan(str(local)).step == 2
    mirror.stop()


def test_an_export_written_after_the_final_save_is_committed_before_done(tmp_path):
    """The trainer's last save is committed, then it writes its export and exits 0.
    The final sync commits the export with the step; had it not, DONE is refused (the VM's disk,
    and the export on it, go with the VM)."""
    from survivor.agent.ending import AttemptResult, decide_ending

    local, storage, store, mirror = _fresh_mirror(tmp_path)
    list(_tf_save(local, 50, state_first=False))
    assert mirror.sync().manifest.step == 50
    (local / "export" / "variables").mkdir(parents=True)
    (local / "export" / "saved_model.pb").write_bytes(b"graph")
    (local / "export" / "variables" / "variables.index").write_bytes(b"vars")
    assert mirror.uncommitted() == 50  # not DONE yet: the export is on this disk only
    ending = decide_ending(AttemptResult(trainer_code=0, committed_step=50, uncommitted_step=mirror.uncommitted()))
    assert not ending.done and "step 50" in ending.reason
    mirror.final_sync(pause=0.01)
    assert mirror.uncommitted() is None
    restored = tmp_path / "restored"
    assert store.restore(str(restored)).step == 50
    assert (restored / "export" / "saved_model.pb").read_bytes() == b"graph"
    assert (restored / "export" / "variables" / "variables.index").read_bytes() == b"vars"


def test_a_part_of_a_checkpoint_its_trainer_failed_on_is_passed_over_for_a_start_over(tmp_path):
    """The chaos run's state-first job, SIGKILLed in its first save: the only commit holds the state
    file and one shard. Restored, its trainer exits 3; restored again at every start, the job went
    FAILED. With nothing whole committed, the part the trainer failed on is passed over."""
    local = tmp_path / "job"
    local.mkdir()
    storage = open_storage(str(tmp_path / "jobdir"))
    store = CheckpointStore(storage)
    save = _tf_save(local, 20, state_first=True)
    next(save), next(save)  # the state file and the data shard; the index never came
    mirror = Mirror(
        store, storage, str(local), attempt=1, interval=3600, committed_step=None, on_commit=lambda stats: None
    ).start(restored=frozenset())
    partial = mirror.sync().manifest
    mirror.stop()
    assert not partial.resumable
    assert store.restore(str(tmp_path / "first")).name == partial.name  # the newest part is the trainer's to try
    assert store.restore(str(tmp_path / "again"), pass_over=partial.name) is None  # it failed on it: start over
    assert list((tmp_path / "again").iterdir()) == []


def _write(local, name, data=None):
    path = local / name
    path.parent.mkdir(parents=True, exist_ok=True)
    (local / f".{name.replace('/', '_')}.tmp").write_bytes(data if data is not None else os.urandom(100))
    os.replace(local / f".{name.replace('/', '_')}.tmp", path)


def test_a_save_caught_mid_way_whose_old_save_then_goes_is_committed_again_once_whole(tmp_path):
    """A hostile review's case: two data shards, then the index, no state file (as
    `tf.train.Checkpoint.write`), the previous save deleted after the new one. A round between the
    first shard and the rest committed the old save plus that shard as the new step; the finished save
    then no longer held the old files, counted as 'changed', and the partial commit stood for good:
    DONE at step 60 restored ckpt-40. Also with a state file, written first, listing two saves."""
    for state in (False, True):
        local = tmp_path / f"job-{state}"
        local.mkdir()
        storage = open_storage(str(tmp_path / f"jobdir-{state}"))
        store = CheckpointStore(storage, keep=1)
        mirror = Mirror(
            store, storage, str(local), attempt=1, interval=3600, committed_step=None, on_commit=lambda stats: None
        ).start(restored=frozenset())

        def save(step, previous, mid=None, local=local, state=state):
            if state:
                listed = [s for s in (previous, step) if s]
                _write(
                    local,
                    "checkpoint",
                    (
                        f'model_checkpoint_path: "ckpt-{step}"\n'
                        + "".join(f'all_model_checkpoint_paths: "ckpt-{s}"\n' for s in listed)
                    ).encode(),
                )
            _write(local, f"ckpt-{step}.data-00001-of-00002")
            if mid:
                mid()
            _write(local, f"ckpt-{step}.data-00000-of-00002")
            _write(local, f"ckpt-{step}.index")
            for old in local.glob("ckpt-*"):
                if not old.name.startswith(f"ckpt-{step}."):
                    old.unlink()

        save(40, None)
        assert mirror.sync().manifest.step == 40
        save(60, 40, mid=mirror.sync)
        mirror.final_sync(pause=0.01)
        assert mirror.uncommitted() is None
        newest = store.latest()
        assert newest.step == 60 and newest.resumable, [f.path for f in newest.files]
        store.collect_garbage()
        assert [(m.step, m.resumable) for m in store.committed()] == [(60, True)]
        assert store.restore(str(tmp_path / f"restored-{state}")).step == 60


def test_notes_rewritten_after_the_final_save_are_committed_before_done_not_between_saves(tmp_path):
    """A final evaluation's metrics.json, rewritten after the last save, was left on the boot disk
    with DONE written. While the trainer trains, a rewritten note waits for the next step's commit;
    at the final sync it is committed. A checkpoint file changed after its commit still never is."""
    local, storage, store, mirror = _fresh_mirror(tmp_path)
    _write(local, "metrics.json", b'{"acc": 0.1}')
    list(_tf_save(local, 10, state_first=False))
    assert mirror.sync().manifest.step == 10
    _write(local, "metrics.json", b'{"acc": 0.2}')
    assert mirror.sync() is None  # between saves: no commit of the same step a round
    assert mirror.uncommitted() == 10  # but DONE would wait for it
    _write(local, "metrics.json", b'{"acc": 0.99, "final": true}')
    mirror.final_sync(pause=0.01)
    assert mirror.uncommitted() is None
    restored = tmp_path / "restored"
    assert store.restore(str(restored)).step == 10
    assert (restored / "metrics.json").read_bytes() == b'{"acc": 0.99, "final": true}'
    torn = Mirror(
        store, storage, str(local), attempt=2, interval=3600, committed_step=10, on_commit=lambda stats: None
    ).start(restored=scan_fingerprint(local))
    (local / "ckpt-10.data-00000-of-00001").write_bytes(b"torn")  # a checkpoint file changed in place
    torn.final_sync(pause=0.01)
    assert store.latest().seq == restored_seq(store) and torn.uncommitted() is None


def scan_fingerprint(local):
    from survivor.jobdir.snapshot import scan

    return scan(str(local)).fingerprint()


def restored_seq(store):
    return max(m.seq for m in store.committed() if m.step == 10)


def test_a_state_file_naming_an_epoch_and_a_metric_gives_no_step_unless_the_pattern_says(tmp_path):
    """Keras ModelCheckpoint('ckpt-{epoch:02d}-{val_loss:.4f}', save_weights_only=True) with a TF
    state file: the step was the metric's digits, 7641; later epochs (5123, 4001) were 'older' and
    never committed, and the job ended DONE. TensorFlow's own step is a `-<N>` suffix."""
    import re as _re

    from survivor.jobdir.snapshot import decide_files_and_step, prefix_step, resumable

    assert prefix_step("ckpt-07-0.7641") is None and prefix_step("ckpt-1200") == 1200
    state = 'model_checkpoint_path: "ckpt-07-0.7641"\nall_model_checkpoint_paths: "ckpt-07-0.7641"\n'
    paths = ["checkpoint", "ckpt-07-0.7641.index", "ckpt-07-0.7641.data-00000-of-00001"]
    assert decide_files_and_step(paths, state)[0] is None
    naming = _re.compile(r"ckpt-(?P<step>\d+)-[^/]*")
    assert decide_files_and_step(paths, state, naming)[0] == 7 and resumable(paths, 7, naming=naming)


def _fresh_mirror(tmp_path):
    """A local job dir, its job dir and store, and a mirror that restored nothing (rounds hourly:
    each test syncs itself)."""
    local = tmp_path / "job"
    local.mkdir()
    storage = open_storage(str(tmp_path / "jobdir"))
    store = CheckpointStore(storage)
    return (
        local,
        storage,
        store,
        Mirror(
            store, storage, str(local), attempt=1, interval=3600, committed_step=None, on_commit=lambda stats: None
        ).start(restored=frozenset()),
    )


def _save_180(local, version: bytes) -> None:
    """A save of step 180, two shards and an index, each file renamed into place."""
    for name in ["ckpt-180.data-00000-of-00002", "ckpt-180.data-00001-of-00002", "ckpt-180.index"]:
        (local / ".tmp").write_bytes(version + name.encode())
        os.replace(local / ".tmp", local / name)


def test_a_step_saved_again_before_a_clean_exit_commits_its_last_save_and_the_export_after_it(tmp_path):
    """A loop that saves at every checkpoint_steps and once more at its end (TensorFlow's
    CheckpointManager.save with the same checkpoint_number rewrites the step's files, here with new
    bytes) and then writes its export. While it trains, the rewrite never replaces the first commit;
    once it exited 0, the final sync commits its last save with the export, the first commit stays
    beside it, and DONE may be written. After an exit with an error the first commit stands alone."""
    for clean in (True, False):
        root = tmp_path / str(clean)
        root.mkdir()
        local, storage, store, mirror = _fresh_mirror(root)
        _save_180(local, b"first save ")
        first = mirror.sync(collect=False)
        assert first is not None and first.manifest.step == 180
        _save_180(local, b"second save ")
        assert mirror.sync(collect=False) is None  # still training: the first commit stands
        (local / "export").mkdir()
        (local / "export" / "saved_model.pb").write_bytes(b"graph")
        mirror.final_sync(pause=0.01, clean_exit=clean)
        assert mirror.uncommitted() is None
        restored = root / "restored"
        manifest = store.restore(str(restored))
        kept = [m.seq for m in store.committed()]
        if clean:
            assert manifest.seq == first.manifest.seq + 1 and kept == [first.manifest.seq + 1, first.manifest.seq]
            assert (restored / "export" / "saved_model.pb").read_bytes() == b"graph"
            assert (restored / "ckpt-180.index").read_bytes() == b"second save ckpt-180.index"
        else:
            assert manifest.seq == first.manifest.seq and kept == [first.manifest.seq]
            assert not (restored / "export").exists()
            assert (restored / "ckpt-180.index").read_bytes() == b"first save ckpt-180.index"
