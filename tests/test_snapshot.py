"""Checksums across scans: a checkpoint file is read once, as the trainer writes it, and a checksum
that a rewriting writer made wrong is caught at the commit instead of reaching a manifest."""

import os

import pytest

from survivor.jobdir import snapshot
from survivor.agent.mirror import Mirror
from survivor.jobdir.snapshot import Checksums, scan
from survivor.jobdir.storage import crc32c_of_bytes, open_storage
from survivor.jobdir.store import CheckpointStore

PIECES = [os.urandom(300_000), os.urandom(700_000), os.urandom(123_457)]
BIG = os.urandom(9 * 1024 * 1024)  # over the client's 8 MiB limit for one-request uploads: a resumable one


def append(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "ab") as f:
        f.write(data)


def no_full_reads(monkeypatch):
    def refuse(path):
        raise AssertionError(f"{path} was read whole; its checksum should have been kept from the scans")

    monkeypatch.setattr(snapshot, "digest_file", refuse)


def test_a_file_renamed_into_place_was_checksummed_while_it_was_written(tmp_path, monkeypatch):
    root = str(tmp_path)
    sums = Checksums()
    tmp = os.path.join(root, ".dummy-checkpoint-9.data.tmp")
    for piece in PIECES:
        append(tmp, piece)
        assert scan(root, sums).files == ()  # still a temporary name: not part of any snapshot
    os.replace(tmp, os.path.join(root, "dummy-checkpoint-9.data"))
    no_full_reads(monkeypatch)
    snap = scan(root, sums)
    assert snap.step == 9
    assert [(f.path, f.crc32c) for f in snap.files] == [("dummy-checkpoint-9.data", crc32c_of_bytes(b"".join(PIECES)))]


def test_a_tf_shard_moved_out_of_its_temp_dir_reads_only_its_last_bytes(tmp_path, monkeypatch):
    root = str(tmp_path)
    sums = Checksums()
    shard = os.path.join(root, "ckpt-4_temp", "part-00000-of-00001.data-00000-of-00001")
    append(shard, PIECES[0])
    scan(root, sums)
    append(shard, PIECES[1])  # written after the last scan: read when the shard is found in place
    os.replace(shard, os.path.join(root, "ckpt-4.data-00000-of-00001"))
    with open(os.path.join(root, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "ckpt-4"\nall_model_checkpoint_paths: "ckpt-4"\n')
    with open(os.path.join(root, "ckpt-4.index"), "wb") as f:
        f.write(b"index")
    snap = scan(root, sums)  # the state file and index are new: read whole (once)
    no_full_reads(monkeypatch)
    again = scan(root, sums)
    assert again == snap and snap.step == 4
    crcs = {f.path: f.crc32c for f in snap.files}
    assert crcs["ckpt-4.data-00000-of-00001"] == crc32c_of_bytes(PIECES[0] + PIECES[1])
    assert crcs["ckpt-4.index"] == crc32c_of_bytes(b"index")


def test_a_file_truncated_and_rewritten_under_its_temp_name_is_read_again(tmp_path):
    root = str(tmp_path)
    sums = Checksums()
    tmp = os.path.join(root, "state.tmp")
    append(tmp, PIECES[1])
    scan(root, sums)
    with open(tmp, "wb") as f:  # the writer starts over: shorter than what was read
        f.write(PIECES[0])
    scan(root, sums)
    os.replace(tmp, os.path.join(root, "checkpoint-3"))
    assert scan(root, sums).files[0].crc32c == crc32c_of_bytes(PIECES[0])


@pytest.mark.parametrize("body", [PIECES[0] + PIECES[1], BIG], ids=["one-request", "resumable"])
def test_a_writer_that_rewrites_read_bytes_is_caught_at_the_commit_and_read_afresh(job_dir, tmp_path, body):
    """Followed checksums assume an appending writer. One that goes back over bytes already read
    leaves a wrong checksum; the server's checksum of the upload differs, nothing is committed,
    and the next sync reads the file whole and commits the right one."""
    local = str(tmp_path / "job")
    storage = open_storage(job_dir)
    store = CheckpointStore(storage)
    tmp = os.path.join(local, ".dummy-checkpoint-7.data.tmp")
    append(tmp, body)
    commits = []
    mirror = Mirror(store, storage, local, attempt=1, interval=60, committed_step=None, on_commit=commits.append)
    assert mirror.sync() is None  # nothing but a temporary file yet: it is followed, not committed
    with open(tmp, "r+b") as f:  # the writer patches its header after writing the body
        f.write(b"HEADER")
    os.replace(tmp, os.path.join(local, "dummy-checkpoint-7.data"))
    true_crc = crc32c_of_bytes(b"HEADER" + (body)[6:])
    believed = scan(local, mirror._checksums).files[0].crc32c  # what the mirror's next sync will use
    assert believed == crc32c_of_bytes(body) != true_crc
    assert mirror.sync() is None and store.latest() is None, "a wrong checksum must not reach a manifest"
    stats = mirror.sync()
    assert stats is not None and [f.crc32c for f in stats.manifest.files] == [true_crc]
    restored = str(tmp_path / "restored")
    assert store.restore(restored).step == 7
    with open(os.path.join(restored, "dummy-checkpoint-7.data"), "rb") as f:
        assert crc32c_of_bytes(f.read()) == true_crc


class CountedLists:
    """The job dir's own storage, counting its listings."""

    def __init__(self, storage):
        self.storage, self.lists = storage, 0

    def list(self, prefix):
        self.lists += 1
        return self.storage.list(prefix)

    def __getattr__(self, name):
        return getattr(self.storage, name)


def test_a_started_mirror_commits_without_listing_the_store_first(job_dir, tmp_path):
    """The blob listing happens when the mirror starts, so that a first commit that is the one
    after a notice goes straight to the upload."""
    local = str(tmp_path / "job")
    os.makedirs(local)
    storage = CountedLists(open_storage(job_dir))
    mirror = Mirror(
        CheckpointStore(storage),
        storage,
        local,
        attempt=1,
        interval=60,
        committed_step=None,
        on_commit=lambda stats: None,
    ).start()
    mirror.stop()
    assert storage.lists == 1
    append(os.path.join(local, "dummy-checkpoint-3.json"), b"{}")
    assert mirror.sync(collect=False).manifest.step == 3
    assert storage.lists == 1, "the commit listed the store again"


def test_a_local_job_dir_swapped_for_a_link_mid_run_is_not_scanned_and_said_once(job_dir, tmp_path, caplog):
    """A trainer that replaces its local job dir by a link (to files that are not its checkpoints,
    e.g. another user's) gets nothing through it committed; the mirror says so in one line."""
    local, elsewhere = str(tmp_path / "job"), str(tmp_path / "elsewhere")
    os.makedirs(local)
    append(os.path.join(elsewhere, "dummy-checkpoint-7.json"), b"{}")
    storage = open_storage(job_dir)
    mirror = Mirror(
        CheckpointStore(storage),
        storage,
        local,
        attempt=1,
        interval=60,
        committed_step=None,
        on_commit=lambda stats: None,
    ).start()
    mirror.stop()
    os.rmdir(local)
    os.symlink(elsewhere, local)
    assert scan(local) == snapshot.Snapshot(None, ())
    assert mirror.sync(collect=False) is None and mirror.final_sync() is None
    assert CheckpointStore(storage).manifest_names() == []
    assert caplog.text.count("is a link") == 1, caplog.text


def test_a_save_under_the_scan_never_leaves_a_snapshot_short_of_its_state_file(tmp_path, monkeypatch):
    """The trainer's save replaces `dummy-checkpoint-5.data` by `-10.data` between the scan's listing
    and its read of the file: the listing is taken again, and the snapshot holds step 10 whole (it
    was committed as step 5 without its `.data`, a checkpoint no trainer could restore; CI caught it
    in test_store_chunks)."""
    from survivor.trainers.dummy import save

    root = str(tmp_path)
    save(root, 5, padding=4096)
    real = snapshot.digest_file
    saved = []

    def save_first(path, chunk_size):
        if path.endswith("dummy-checkpoint-5.data") and not saved:
            saved.append(True)
            save(root, 10, padding=4096)  # renames -10 into place and deletes -5, as a real save does
        return real(path, chunk_size)

    monkeypatch.setattr(snapshot, "digest_file", save_first)
    snap = scan(root)
    assert saved, "the save never ran under the scan"
    assert snap.step == 10
    assert {f.path for f in snap.files} >= {"dummy-checkpoint-10.data", "dummy-checkpoint-10.json"}
    assert all(os.path.exists(os.path.join(root, f.path)) for f in snap.files)


def test_a_job_dir_rotating_under_every_scan_gives_no_snapshot_this_round(tmp_path, monkeypatch):
    """Files that vanish under every listing: after `SCAN_TRIES` the scan gives an empty snapshot
    (nothing committed this round) rather than one short of its files."""
    from survivor.trainers.dummy import save

    root = str(tmp_path)
    step = [5]
    save(root, 5, padding=4096)
    real = snapshot.digest_file

    def always_save(path, chunk_size):
        if path.endswith(".data"):
            step[0] += 5
            save(root, step[0], padding=4096)
        return real(path, chunk_size)

    monkeypatch.setattr(snapshot, "digest_file", always_save)
    snap = scan(root)
    assert (snap.step, snap.files) == (None, ())
    assert step[0] == 5 + 5 * snapshot.SCAN_TRIES


def test_scans_racing_a_trainer_that_saves_without_pause_never_give_a_step_without_its_state(tmp_path):
    """A directory read is no atomic snapshot: while the dummy trainer renamed `-N.data`, then
    `-N.json`, then deleted `-(N-1).data`, one listing could show `-N.json` and no `.data` at all
    (178 of 208 scans here, before a second listing was taken after the reads to confirm the first).
    Scans racing saves without pause may come back empty (the next sync scans again); none may name
    a step whose state file is missing."""
    import threading
    import time

    from survivor.trainers.dummy import save

    root = str(tmp_path)
    stop = threading.Event()

    def trainer():
        step = 0
        while not stop.is_set():
            step += 1
            save(root, step, padding=2_000_000)

    thread = threading.Thread(target=trainer)
    thread.start()
    try:
        sums, whole, short = Checksums(), 0, []
        ends = time.monotonic() + 2
        while time.monotonic() < ends or (whole == 0 and time.monotonic() < ends + 28):  # at least one whole one
            snap = scan(root, sums)
            if snap.step is None:
                continue
            names = {f.path for f in snap.files}
            if any(name.endswith(".data") for name in names):
                whole += 1
            else:
                short.append(sorted(names))
    finally:
        stop.set()
        thread.join()
    assert not short, f"{len(short)} snapshots without any state file, e.g. {short[0]}"
    assert whole > 0, "no scan in 30 s gave a whole snapshot"
