"""The checkpoint store: a snapshot is usable only once its manifest is written; restore never
follows a half-written or corrupted one, and falls back to the previous commit."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from survivor.jobdir.snapshot import decide_files_and_step, parse_tf_state, scan
from survivor.jobdir.storage import open_storage
from survivor.jobdir.chunks import CHUNKS
from survivor.jobdir.store import (
    BLOBS,
    CheckpointStore,
    ChunkEntry,
    FileEntry,
    Manifest,
    ManifestError,
    RestoreFailed,
    check_relative_path,
    snapshots_to_delete,
)
from tests.waiting import PATIENCE, wait_until


def write(root, name, data):
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def objects(entry):
    """The stored objects that hold a manifest entry's bytes: its chunks'."""
    return [c.object for c in entry.chunks]


def commit_step(store, local, step, attempt=1, payload=None):
    write(local, f"dummy-checkpoint-{step}.json", payload or json.dumps({"step": step}).encode())
    return store.commit(local, scan(local), attempt)


def test_commit_then_restore_round_trips(job_dir, tmp_path):
    store = CheckpointStore(open_storage(job_dir))
    local = str(tmp_path / "job")
    write(local, "sub/model.bin", os.urandom(300_000))
    stats = commit_step(store, local, 10)
    assert stats.manifest.step == 10 and stats.uploaded_files == 2
    target = str(tmp_path / "restored")
    manifest = store.restore(target)
    assert manifest.step == 10
    assert (
        open(os.path.join(target, "sub/model.bin"), "rb").read()
        == open(os.path.join(local, "sub/model.bin"), "rb").read()
    )


def test_unchanged_files_are_not_uploaded_again(job_dir, tmp_path):
    store = CheckpointStore(open_storage(job_dir))
    local = str(tmp_path / "job")
    write(local, "vocab.txt", b"a\nb\n" * 1000)
    commit_step(store, local, 1)
    stats = commit_step(store, local, 2)
    assert stats.uploaded_files == 1  # only the new checkpoint file
    assert stats.reused_files == 2


def test_killed_mid_upload_restores_the_previous_commit(job_dir, tmp_path):
    """Blobs of step 20 were uploaded but the agent died before its manifest: invisible."""
    storage = open_storage(job_dir)
    store = CheckpointStore(storage)
    local = str(tmp_path / "job")
    commit_step(store, local, 10)
    write(local, "dummy-checkpoint-20.json", b'{"step": 20}')
    snap = scan(local)
    half = [f for f in snap.files if f.path.endswith("-20.json")]
    storage.upload([(os.path.join(local, f.path), f"{BLOBS}{f.path}.partial") for f in half])
    assert store.restore(str(tmp_path / "r")).step == 10


def test_a_corrupted_object_is_skipped_for_the_previous_commit(job_dir, tmp_path):
    storage = open_storage(job_dir)
    store = CheckpointStore(storage)
    local = str(tmp_path / "job")
    commit_step(store, local, 10)
    newest = commit_step(store, local, 20).manifest
    victim = next(f for f in newest.files if f.path.endswith("-20.json"))
    storage.write(objects(victim)[0], b"X" * victim.size)  # same size, other bytes: only the crc tells
    restored = store.restore(str(tmp_path / "r"))
    assert restored.step == 10
    assert not os.path.exists(tmp_path / "r" / "dummy-checkpoint-20.json")


def test_a_missing_object_is_skipped_for_the_previous_commit(job_dir, tmp_path):
    storage = open_storage(job_dir)
    store = CheckpointStore(storage)
    local = str(tmp_path / "job")
    commit_step(store, local, 10)
    newest = commit_step(store, local, 20).manifest
    storage.delete([o for f in newest.files if f.path.endswith("-20.json") for o in objects(f)])
    assert store.restore(str(tmp_path / "r")).step == 10


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "a/../../b", "..", "", "a\\..\\b"])
def test_manifest_paths_that_escape_are_refused(path):
    with pytest.raises(ManifestError):
        check_relative_path(path)


def test_restore_never_follows_a_manifest_with_dotdot_paths(job_dir, tmp_path):
    storage = open_storage(job_dir)
    store = CheckpointStore(storage)
    local = str(tmp_path / "job")
    commit_step(store, local, 10)
    evil = {
        "format": 2,
        "step": 99,
        "attempt": 9,
        "seq": 1,
        "files": [
            {
                "path": "../../escaped.txt",
                "size": 2,
                "crc32c": "AAAAAA==",
                "chunks": [{"offset": 0, "size": 2, "crc32c": "AAAAAA==", "object": f"{CHUNKS}x"}],
            }
        ],
    }
    storage.write("survivor/snapshots/000000000099-000009-0001.json", json.dumps(evil).encode())
    with pytest.raises(ManifestError, match="escaped"):
        Manifest.from_json(json.dumps(evil).encode())
    assert store.restore(str(tmp_path / "deep" / "r")).step == 10
    assert not (tmp_path / "escaped.txt").exists()


def test_old_snapshots_are_collected_only_after_a_newer_commit(job_dir, tmp_path):
    storage = open_storage(job_dir)
    store = CheckpointStore(storage, keep=2)
    local = str(tmp_path / "job")
    for step in (1, 2, 3, 4):
        os.makedirs(local, exist_ok=True)
        for old in os.listdir(local):
            os.remove(os.path.join(local, old))  # a trainer that keeps only its newest file
        commit_step(store, local, step)
        store.collect_garbage()
    assert [m.step for m in store.committed()] == [4, 3]
    blobs = {o.name for o in storage.list(BLOBS)}
    assert blobs == {o for m in store.committed() for f in m.files for o in objects(f)}


def test_nothing_committed_restores_an_empty_dir(job_dir, tmp_path):
    target = tmp_path / "r"
    target.mkdir()
    (target / "stale.txt").write_text("left over from an older boot")
    assert CheckpointStore(open_storage(job_dir)).restore(str(target)) is None
    assert os.listdir(target) == []


def test_tf_layout_takes_only_checkpoints_the_state_file_lists():
    state = (
        'model_checkpoint_path: "ckpt-3"\nall_model_checkpoint_paths: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-3"\n'
    )
    assert parse_tf_state(state) == ("ckpt-3", ["ckpt-2", "ckpt-3"])
    paths = [
        "checkpoint",
        "ckpt-2.index",
        "ckpt-2.data-00000-of-00001",
        "ckpt-3.index",
        "ckpt-3.data-00000-of-00001",
        "ckpt-4.index",
        "ckpt-4_temp/part-00000-of-00001.index",
        "checkpoint.tmp1234",
        "train/events.out.tfevents.1.host",
        "hparams.json",
        ".hidden",
    ]
    step, chosen = decide_files_and_step(paths, state)
    assert step == 3
    assert chosen == [
        "checkpoint",
        "ckpt-2.data-00000-of-00001",
        "ckpt-2.index",
        "ckpt-3.data-00000-of-00001",
        "ckpt-3.index",
        "hparams.json",
    ]


def test_numbered_layout_takes_the_highest_number():
    step, chosen = decide_files_and_step(["dummy-checkpoint-9.json", "dummy-checkpoint-12.json", "notes.txt"], None)
    assert step == 12 and "notes.txt" in chosen


UPLOADER = r"""
import os, sys
from survivor.jobdir.snapshot import scan
from survivor.jobdir.storage import open_storage
from survivor.jobdir.store import CheckpointStore
local, job_dir = sys.argv[1], sys.argv[2]
CheckpointStore(open_storage(job_dir)).commit(local, scan(local), attempt=2)
print("COMMITTED", flush=True)
"""


@pytest.mark.slow
def test_sigkill_during_a_real_upload_leaves_the_previous_commit(bucket, tmp_path):
    """A real process uploading a 24-file snapshot to the storage emulator is SIGKILLed once the
    first objects land; the next restore gets the previous commit, intact."""
    job_dir = f"gs://{bucket}/killed"
    storage = open_storage(job_dir)
    store = CheckpointStore(storage)
    local = str(tmp_path / "job")
    commit_step(store, local, 10)
    for i in range(24):
        write(local, f"shard-{i:02d}.bin", os.urandom(2_000_000))
    write(local, "dummy-checkpoint-20.json", b'{"step": 20}')
    before = {o.name for o in storage.list(BLOBS)}
    proc = subprocess.Popen([sys.executable, "-c", UPLOADER, local, job_dir], stdout=subprocess.PIPE)
    wait_until(
        lambda: {o.name for o in storage.list(BLOBS)} - before, PATIENCE, "the upload's first object landed", 0.01
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    uploaded = {o.name for o in storage.list(BLOBS)} - before
    assert uploaded, "the kill came before any upload"
    assert [m.step for m in store.committed()] == [10]
    restored = store.restore(str(tmp_path / "r"))
    assert restored.step == 10
    assert sorted(os.listdir(tmp_path / "r")) == ["dummy-checkpoint-10.json"]


class SlowUploads:
    """The job dir's own storage, with uploads that take `seconds`: time for a fence to run alongside."""

    def __init__(self, storage, seconds: float):
        self.storage, self.seconds = storage, seconds

    def upload_parts(self, parts):
        time.sleep(self.seconds)
        return self.storage.upload_parts(parts)

    def __getattr__(self, name):
        return getattr(self.storage, name)


def fence_log(calls: list, fail: bool = False):
    def fence():
        calls.append(time.monotonic())
        if fail:
            raise RuntimeError("lease lost")

    return fence


class UploadsAwaitingTheFence(SlowUploads):
    """Uploads that last until the fence has run (at most 10 s): they end before it only when the
    fence waits for the upload instead of running beside it."""

    def __init__(self, storage, fenced):
        super().__init__(storage, 0.0)
        self.fenced, self.ended = fenced, None

    def upload_parts(self, parts):
        self.fenced.wait(10)
        try:
            return self.storage.upload_parts(parts)
        finally:
            self.ended = time.monotonic()


def test_the_fence_runs_alongside_the_upload_and_again_right_before_the_manifest(job_dir, tmp_path):
    import threading

    fenced = threading.Event()
    storage = UploadsAwaitingTheFence(open_storage(job_dir), fenced)
    store = CheckpointStore(storage)
    local = str(tmp_path / "job")
    write(local, "dummy-checkpoint-5.json", b"{}")
    calls: list = []
    log = fence_log(calls)

    def fence():
        log()
        fenced.set()

    stats = store.commit(local, scan(local), 1, fence=fence)
    assert len(calls) == 2
    assert calls[0] < storage.ended, "the first fence ran while the upload did, not after it"
    assert calls[1] >= storage.ended, "the second came after the upload, right before the manifest"
    assert stats.manifest.step == 5 and store.latest().step == 5


def test_a_failed_fence_alongside_the_upload_commits_nothing(job_dir, tmp_path):
    store = CheckpointStore(SlowUploads(open_storage(job_dir), 0.1))
    local = str(tmp_path / "job")
    write(local, "dummy-checkpoint-5.json", b"{}")
    with pytest.raises(RuntimeError, match="lease lost"):
        store.commit(local, scan(local), 1, fence=fence_log([], fail=True))
    assert store.latest() is None


# -- a manifest is the exact schema, or its snapshot failed verification -------------------------------

GOOD_CHUNK = {"offset": 0, "size": 12, "crc32c": "AAAAAA==", "object": f"{CHUNKS}{'cd' * 32}"}
GOOD_ENTRY = {"path": "dummy-checkpoint-20.json", "size": 12, "crc32c": "AAAAAA==", "chunks": [GOOD_CHUNK]}
GOOD = {"format": 2, "step": 20, "attempt": 1, "seq": 1, "created": "", "writer": "vm", "files": [GOOD_ENTRY]}


def body(**fields) -> bytes:
    return json.dumps({**GOOD, **fields}).encode()


def entry(**fields) -> dict:
    return {**GOOD_ENTRY, **fields}


def chunk(**fields) -> dict:
    return {**GOOD_ENTRY, "chunks": [{**GOOD_CHUNK, **fields}]}


@pytest.mark.usefixtures("gc_off")  # parses 100,000-deep JSON in this process
@pytest.mark.parametrize(
    "data",
    [
        b'{"step": NaN, "attempt": 1, "files": []}',
        body().replace(b'"size": 12', b'"size": Infinity'),
        body().replace(b'"step": 20', b'"step": -Infinity'),
        b'{"step": 1, "files": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"step": 1, "attempt": ' + b"9" * 5000 + b', "files": []}',
        b"[1, 2]",
        b"null",
        b"\xff\xfe{",
        b"",
        body(files=7),
        body(files={"a": 1}),
        body(files=[5]),
        body(files=[]),
        body(step="20"),
        body(step=20.0),
        body(step=True),
        body(step=None),
        body(step=-1),
        body(step=1 << 70),
        body(attempt="1"),
        body(seq=1.5),
        body(created=["x"]),
        body(writer=7),
        body(parent=3),
        body(abandoned="x"),
        body(format=1),
        body(format="2"),
        body(format=2.0),
        body(format=True),
        body(format=None),
        json.dumps({k: v for k, v in GOOD.items() if k != "format"}).encode(),
        body(files=[entry(path={"a": 1})]),
        body(files=[entry(size="12")]),
        body(files=[entry(size=-1)]),
        body(files=[entry(size=False)]),
        body(files=[entry(crc32c=7)]),
        body(files=[entry(crc32c="not base64!")]),
        body(files=[entry(crc32c="AAAA")]),
        body(files=[chunk(object=7)]),
        body(files=[chunk(object="survivor/LEASE")]),
        body(files=[chunk(object=f"{CHUNKS}../LEASE")]),
        body(files=[entry(path="../x")]),
        body(files=[entry(object=GOOD_CHUNK["object"])]),  # a whole-file blob beside its chunks
        body(files=[GOOD_ENTRY, GOOD_ENTRY]),
    ],
    ids=lambda d: d[:40].decode(errors="replace"),
)
def test_a_manifest_that_is_not_the_exact_schema_is_refused(data):
    assert Manifest.from_json(body()).step == 20  # each case differs from a good manifest by its damage alone
    with pytest.raises(ManifestError):
        Manifest.from_json(data)


def test_a_manifest_round_trips_with_its_lineage_and_ignores_unknown_keys():
    manifest = Manifest.from_json(
        body(parent="survivor/snapshots/a.json", abandoned=["survivor/snapshots/b.json"], note="from a newer survivor")
    )
    assert manifest.step == 20 and manifest.parent == "survivor/snapshots/a.json"
    assert Manifest.from_json(manifest.to_json()) == manifest
    assert Manifest.from_json(body()).parent is None  # written before lineage was kept


def test_a_step_beyond_train_steps_is_implausible():
    assert Manifest.from_json(body(step=100), max_step=100).step == 100
    with pytest.raises(ManifestError, match="beyond the job's train_steps"):
        Manifest.from_json(body(step=101), max_step=100)


def test_a_manifest_stored_under_another_name_is_refused(job_dir, tmp_path):
    """Garbage collection deletes by the name a manifest's contents give: a copy under another
    name must not steer it onto a real one."""
    storage = open_storage(job_dir)
    store = CheckpointStore(storage)
    real = commit_step(store, str(tmp_path / "job"), 10).manifest
    storage.write("survivor/snapshots/000000000090-000009-0001.json", real.to_json())
    assert [m.name for m in store.committed()] == [real.name]
    with pytest.raises(ManifestError, match="not its name"):
        store.parse("survivor/snapshots/000000000090-000009-0001.json", real.to_json())


def test_a_manifest_larger_than_any_real_one_is_not_read(job_dir, tmp_path, monkeypatch):
    import survivor.jobdir.store as store_module

    store = CheckpointStore(open_storage(job_dir))
    commit_step(store, str(tmp_path / "job"), 10)
    monkeypatch.setattr(store_module, "MAX_MANIFEST_BYTES", 100)
    assert store.latest() is None


def test_manifest_names_sort_by_number_not_text():
    names = [
        "survivor/snapshots/000000000020-000001-0001.json",
        "survivor/snapshots/1000000000000-000001-0001.json",
        "survivor/snapshots/000000000020-000002-0001.json",
        "survivor/snapshots/junk.json",
    ]
    from survivor.jobdir.store import _order

    assert sorted(names, key=_order, reverse=True) == [names[1], names[2], names[0], names[3]]


# -- garbage collection never removes committed work a later lineage did not build on ----------------


def snap(step, parent=None, abandoned=(), attempt=1):
    return Manifest(
        step,
        attempt,
        1,
        (FileEntry(f"f{step}", 1, "AAAAAA==", (ChunkEntry(0, 1, "AAAAAA==", f"{CHUNKS}f{step}"),)),),
        parent=parent,
        abandoned=tuple(abandoned),
    )


def names(manifests):
    return [m.step for m in manifests]


def newest_first(*manifests):
    return sorted(manifests, key=lambda m: (m.step, m.attempt, m.seq), reverse=True)


def test_one_lineage_keeps_the_newest_keep():
    a = snap(10, parent="")
    (b,) = [snap(20, parent=a.name)]
    c = snap(30, parent=b.name)
    d = snap(40, parent=c.name)
    assert names(snapshots_to_delete(newest_first(a, b, c, d), keep=2)) == [20, 10]


def test_legacy_manifests_without_lineage_are_collected_as_before():
    legacy = newest_first(*(snap(s) for s in (10, 20, 30, 40)))
    assert names(snapshots_to_delete(legacy, keep=3)) == [10]


def test_a_fresh_lineage_never_costs_the_newest_snapshot_it_did_not_build_on():
    old = [snap(300, attempt=1), snap(400, attempt=1), snap(500, attempt=1)]  # legacy chain
    fresh = [snap(5, parent="", attempt=2)]
    for step in range(15, 706, 10):
        fresh.append(snap(step, parent=fresh[-1].name, attempt=2))
    doomed = names(snapshots_to_delete(newest_first(*old, *fresh), keep=3))
    assert 500 not in doomed  # no commit of its lineage went past it
    assert 300 in doomed and 400 in doomed  # 500 superseded them
    assert 705 not in doomed and 695 not in doomed and 685 not in doomed and 675 in doomed


def test_a_snapshot_a_restore_abandoned_is_not_kept_for_its_rank():
    s10 = snap(10, parent="")
    s20 = snap(20, parent=s10.name)
    corrupt = snap(30, parent=s20.name)
    s21 = snap(21, parent=s20.name, abandoned=[corrupt.name], attempt=2)
    s22 = snap(22, parent=s21.name, attempt=2)
    doomed = names(snapshots_to_delete(newest_first(s10, s20, corrupt, s21, s22), keep=2))
    assert doomed == [30, 20, 10]


def test_a_restore_records_the_lineage_the_next_commit_continues(job_dir, tmp_path):
    storage = open_storage(job_dir)
    first = CheckpointStore(storage)
    local = str(tmp_path / "job")
    s10 = commit_step(first, local, 10).manifest
    s20 = commit_step(first, local, 20).manifest
    storage.write(next(objects(f)[0] for f in s20.files if f.path.endswith("-20.json")), b"X" * 12)  # corrupt
    second = CheckpointStore(storage)
    assert second.restore(str(tmp_path / "r")).step == 10
    s15 = commit_step(second, str(tmp_path / "r"), 15, attempt=2).manifest
    assert s15.parent == s10.name and s15.abandoned == (s20.name,)
    s16 = commit_step(second, str(tmp_path / "r"), 16, attempt=2).manifest
    assert s16.parent == s15.name and s16.abandoned == ()
    third = CheckpointStore(open_storage(job_dir))
    assert third.restore(str(tmp_path / "r3")) is not None
    fresh = CheckpointStore(open_storage(str(tmp_path / "empty-job")))
    assert fresh.restore(str(tmp_path / "r4")) is None
    assert commit_step(fresh, str(tmp_path / "r4"), 1).manifest.parent == ""


def test_collect_garbage_keeps_a_snapshot_a_fresh_start_did_not_build_on(job_dir, tmp_path):
    storage = open_storage(job_dir)
    old = CheckpointStore(storage, keep=1)
    kept = commit_step(old, str(tmp_path / "old"), 50).manifest
    fresh = CheckpointStore(storage, keep=1)
    fresh._parent = ""  # a lineage that started from scratch beside it (a restore that did not see it)
    for step in (10, 60, 70):
        commit_step(fresh, str(tmp_path / "fresh"), step, attempt=2)
        fresh.collect_garbage()
    assert [m.step for m in fresh.committed()] == [70, 50]
    storage.delete([m.name for m in fresh.committed() if m.step == 70])
    assert fresh.restore(str(tmp_path / "r")).name == kept.name  # its blobs were kept too


def test_a_snapshot_beyond_train_steps_keeps_its_blobs(job_dir, tmp_path):
    """train_steps lowered: restore skips the snapshot beyond it, garbage collection leaves it whole."""
    storage = open_storage(job_dir)
    beyond = commit_step(CheckpointStore(storage), str(tmp_path / "a"), 500).manifest
    store = CheckpointStore(storage, keep=1, max_step=100)
    for step in (10, 20, 30):
        commit_step(store, str(tmp_path / "b"), step, attempt=2)
        store.collect_garbage()
    assert [m.step for m in store.committed()] == [30]
    assert CheckpointStore(storage).restore(str(tmp_path / "r")).name == beyond.name


# -- a restore that fails for a reason not the snapshot's never starts from scratch --------------------


def test_a_restore_into_a_disk_too_small_raises_and_starts_nothing(job_dir, tmp_path):
    from tests.test_restore_failures import small_disk

    store = CheckpointStore(open_storage(job_dir))
    local = str(tmp_path / "job")
    write(local, "weights.bin", os.urandom(3 << 20))
    name = commit_step(store, local, 20).manifest.name
    with small_disk(tmp_path / "disk", "1m") as disk:
        with pytest.raises(RestoreFailed, match="boot disk") as caught:
            CheckpointStore(open_storage(job_dir)).restore(os.path.join(disk, "job"))
        assert caught.value.local and name in str(caught.value)
    assert store.latest().name == name


def test_a_restore_that_runs_out_of_room_midway_raises(job_dir, tmp_path, monkeypatch):
    """The free-space check passed (another writer took the room): the download's own ENOSPC."""
    from tests.test_restore_failures import small_disk

    store = CheckpointStore(open_storage(job_dir))
    local = str(tmp_path / "job")
    write(local, "weights.bin", os.urandom(3 << 20))
    commit_step(store, local, 20)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(1 << 40, 0, 1 << 40))
    with small_disk(tmp_path / "disk", "1m") as disk:
        with pytest.raises(RestoreFailed, match="could not be written to the boot disk"):
            CheckpointStore(open_storage(job_dir)).restore(os.path.join(disk, "job"))


def test_a_download_that_fails_for_a_reason_not_the_snapshots_raises(gcs_server, bucket, tmp_path, monkeypatch):
    from harness.fault_proxy import FaultPlan, FaultProxy

    job_dir = f"gs://{bucket}/flaky"
    store = CheckpointStore(open_storage(job_dir))
    commit_step(store, str(tmp_path / "job"), 10)
    proxy = FaultProxy(gcs_server.url, FaultPlan(rate=1.0, kinds=("400",), paths=r"survivor/blobs/.*alt=media")).start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    try:
        with pytest.raises(RestoreFailed) as caught:
            CheckpointStore(open_storage(job_dir)).restore(str(tmp_path / "r"))
    finally:
        proxy.stop()
    assert not caught.value.local and "could not be downloaded" in str(caught.value)


def test_a_local_blob_that_is_a_symlink_is_not_followed(tmp_path):
    job_dir = str(tmp_path / "jobdir")
    storage = open_storage(job_dir)
    store = CheckpointStore(storage)
    local = str(tmp_path / "job")
    commit_step(store, local, 10)
    newest = commit_step(store, local, 20, payload=b'{"step": 20, "x": 1}').manifest
    victim = next(f for f in newest.files if f.path.endswith("-20.json"))
    secret = tmp_path / "secret"
    secret.write_bytes(b"root's own file")
    os.remove(os.path.join(job_dir, objects(victim)[0]))
    os.symlink(secret, os.path.join(job_dir, objects(victim)[0]))
    assert store.restore(str(tmp_path / "r")).step == 10
    assert not (tmp_path / "r" / "dummy-checkpoint-20.json").exists()


# -- a full local job dir --------------------------------------------------------------------------------


def test_a_full_local_job_dir_is_a_storage_error_and_leaves_no_temporary_files(tmp_path):
    from survivor.jobdir.storage import StorageError
    from tests.test_restore_failures import small_disk

    local = str(tmp_path / "job")
    for i in range(8):
        write(local, f"shard-{i}.bin", os.urandom(300_000))
    write(local, "dummy-checkpoint-7.json", b"{}")
    with small_disk(tmp_path / "fs", "1m") as fs:
        storage = open_storage(os.path.join(fs, "job"))
        with pytest.raises(StorageError, match="no space left") as caught:
            CheckpointStore(storage).commit(local, scan(local), attempt=1)
        assert caught.value.object.startswith(fs) and caught.value.reason == "failed"
        with pytest.raises(StorageError, match="no space left"):
            storage.write("survivor/big", os.urandom(2 << 20))
        leftovers = [f for _, _, files in os.walk(fs) for f in files if f.startswith(".tmp-")]
        assert leftovers == []
        storage.write("survivor/small", b"still usable")  # the room the failed copies took is back


def test_a_layout_no_directory_can_hold_is_refused_when_the_manifest_is_read():
    from survivor.jobdir.store import ManifestError, check_layout

    check_layout(["ckpt-1.index", "train/events", "train/sub/events", "a/b", "ab"])  # fine together
    for paths, why in (
        (["F", "F/x"], "lies inside 'F'"),
        (["d/x/y", "d"], "lies inside 'd'"),
        (["a/b", "a/./b"], "listed twice"),
        (["a/b", "a//b"], "listed twice"),
    ):
        with pytest.raises(ManifestError, match=why):
            check_layout(paths)
