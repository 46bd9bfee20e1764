"""The checkpoint store: a snapshot is usable only once its manifest is written; restore never
follows a half-written or corrupted one, and falls back to the previous commit."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from survivor.snapshot import decide_files_and_step, parse_tf_state, scan
from survivor.storage import open_storage
from survivor.store import BLOBS, CheckpointStore, Manifest, ManifestError, check_relative_path


def write(root, name, data):
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


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
    assert open(os.path.join(target, "sub/model.bin"), "rb").read() == open(os.path.join(local, "sub/model.bin"), "rb").read()


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
    storage.write(victim.object, b"X" * victim.size)  # same size, other bytes: only the crc tells
    restored = store.restore(str(tmp_path / "r"))
    assert restored.step == 10
    assert not os.path.exists(tmp_path / "r" / "dummy-checkpoint-20.json")


def test_a_missing_object_is_skipped_for_the_previous_commit(job_dir, tmp_path):
    storage = open_storage(job_dir)
    store = CheckpointStore(storage)
    local = str(tmp_path / "job")
    commit_step(store, local, 10)
    newest = commit_step(store, local, 20).manifest
    storage.delete([f.object for f in newest.files if f.path.endswith("-20.json")])
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
        "format": 1, "step": 99, "attempt": 9, "seq": 1,
        "files": [{"path": "../../escaped.txt", "size": 2, "crc32c": "AAAAAA==", "object": f"{BLOBS}x"}],
    }
    storage.write("survivor/snapshots/000000000099-000009-0001.json", json.dumps(evil).encode())
    with pytest.raises(ManifestError):
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
    assert blobs == {f.object for m in store.committed() for f in m.files}


def test_nothing_committed_restores_an_empty_dir(job_dir, tmp_path):
    target = tmp_path / "r"
    target.mkdir()
    (target / "stale.txt").write_text("left over from an older boot")
    assert CheckpointStore(open_storage(job_dir)).restore(str(target)) is None
    assert os.listdir(target) == []


def test_tf_layout_takes_only_checkpoints_the_state_file_lists():
    state = 'model_checkpoint_path: "ckpt-3"\nall_model_checkpoint_paths: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-3"\n'
    assert parse_tf_state(state) == ("ckpt-3", ["ckpt-2", "ckpt-3"])
    paths = ["checkpoint", "ckpt-2.index", "ckpt-2.data-00000-of-00001", "ckpt-3.index",
             "ckpt-3.data-00000-of-00001", "ckpt-4.index", "ckpt-4_temp/part-00000-of-00001.index",
             "checkpoint.tmp1234", "train/events.out.tfevents.1.host", "hparams.json", ".hidden"]
    step, chosen = decide_files_and_step(paths, state)
    assert step == 3
    assert chosen == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index", "ckpt-3.data-00000-of-00001",
                      "ckpt-3.index", "hparams.json"]


def test_numbered_layout_takes_the_highest_number():
    step, chosen = decide_files_and_step(["dummy-checkpoint-9.json", "dummy-checkpoint-12.json", "notes.txt"], None)
    assert step == 12 and "notes.txt" in chosen


UPLOADER = r"""
import os, sys
from survivor.snapshot import scan
from survivor.storage import open_storage
from survivor.store import CheckpointStore
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
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len({o.name for o in storage.list(BLOBS)} - before) < 1:
        time.sleep(0.01)
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

    def upload(self, pairs):
        time.sleep(self.seconds)
        return self.storage.upload(pairs)

    def __getattr__(self, name):
        return getattr(self.storage, name)


def fence_log(calls: list, fail: bool = False):
    def fence():
        calls.append(time.monotonic())
        if fail:
            raise RuntimeError("lease lost")
    return fence


def test_the_fence_runs_alongside_the_upload_and_again_right_before_the_manifest(job_dir, tmp_path):
    storage = SlowUploads(open_storage(job_dir), 0.3)
    store = CheckpointStore(storage)
    local = str(tmp_path / "job")
    write(local, "dummy-checkpoint-5.json", b"{}")
    calls: list = []
    started = time.monotonic()
    stats = store.commit(local, scan(local), 1, fence=fence_log(calls))
    assert len(calls) == 2
    assert calls[0] - started < 0.25, "the first fence ran while the upload did, not after it"
    assert calls[1] - started >= 0.3, "the second came after the upload, right before the manifest"
    assert stats.manifest.step == 5 and store.latest().step == 5


def test_a_failed_fence_alongside_the_upload_commits_nothing(job_dir, tmp_path):
    store = CheckpointStore(SlowUploads(open_storage(job_dir), 0.1))
    local = str(tmp_path / "job")
    write(local, "dummy-checkpoint-5.json", b"{}")
    with pytest.raises(RuntimeError, match="lease lost"):
        store.commit(local, scan(local), 1, fence=fence_log([], fail=True))
    assert store.latest() is None
