"""Chunked snapshots: a file is stored as chunks that move in parallel and are never sent twice; a
damaged chunk costs its snapshot, never a restore of wrong bytes; the manifest write stays the one
commit moment; a manifest of the whole-file format before chunks is refused by name."""

import base64
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from survivor.jobdir.chunks import CHUNKS, Digester, combine_crc32c, crc32c_combine, digest_file
from survivor.jobdir.snapshot import Checksums, scan
from survivor.jobdir.storage import crc32c_of_bytes, open_storage
from survivor.jobdir.store import BLOBS, CheckpointStore, Manifest, ManifestError, SnapshotChanged
from tests.waiting import PATIENCE, wait_until

SMALL = 64 << 10  # chunks of 64 KiB keep the tests fast; the code path is the production one


def write(root, name, data):
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def commit(store, local, step, attempt=1):
    write(local, f"dummy-checkpoint-{step}.json", json.dumps({"step": step}).encode())
    return store.commit(local, scan(local, Checksums(store.chunk_size)), attempt)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def data_entry(manifest, name="model.data"):
    return next(f for f in manifest.files if f.path == name)


# -- round trips ---------------------------------------------------------------------------------------


def test_a_file_split_across_chunks_round_trips_bitwise(job_dir, tmp_path):
    store = CheckpointStore(open_storage(job_dir), chunk_size=SMALL)
    local, body = str(tmp_path / "job"), os.urandom(20 * SMALL + 12_345)
    write(local, "model.data", body)
    write(local, "empty", b"")
    stats = commit(store, local, 10)
    entry = data_entry(stats.manifest)
    assert len(entry.chunks) == 21 and [c.offset for c in entry.chunks] == [i * SMALL for i in range(21)]
    assert entry.chunks[-1].size == 12_345 and entry.crc32c == crc32c_of_bytes(body)
    assert json.loads(stats.manifest.to_json())["format"] == 2
    restored = str(tmp_path / "restored")
    assert CheckpointStore(open_storage(job_dir), chunk_size=SMALL).restore(restored).step == 10
    assert read(os.path.join(restored, "model.data")) == body
    assert read(os.path.join(restored, "empty")) == b""


def test_chunks_over_the_clients_one_request_limit_round_trip_through_resumable_uploads(bucket, tmp_path):
    """Chunks of 9 MiB go up as resumable uploads, the last short one in one request: both of the
    client's ways, as a production chunk size takes them."""
    chunk = 9 << 20
    job_dir = f"gs://{bucket}/resumable-chunks"
    store = CheckpointStore(open_storage(job_dir), chunk_size=chunk)
    local, body = str(tmp_path / "job"), os.urandom(2 * chunk + 1_000)
    write(local, "model.data", body)
    assert [c.size for c in data_entry(commit(store, local, 3).manifest).chunks] == [chunk, chunk, 1_000]
    restored = str(tmp_path / "restored")
    assert CheckpointStore(open_storage(job_dir), chunk_size=chunk).restore(restored).step == 3
    assert read(os.path.join(restored, "model.data")) == body


def test_a_restore_reads_snapshots_cut_at_any_chunk_size(job_dir, tmp_path):
    local, body = str(tmp_path / "job"), os.urandom(5 * SMALL + 7)
    write(local, "model.data", body)
    commit(CheckpointStore(open_storage(job_dir), chunk_size=SMALL), local, 1)
    restored = str(tmp_path / "r")
    assert CheckpointStore(open_storage(job_dir), chunk_size=3 * SMALL).restore(restored).step == 1
    assert read(os.path.join(restored, "model.data")) == body


def test_a_scan_cut_at_another_chunk_size_is_digested_again_at_the_stores(job_dir, tmp_path):
    store = CheckpointStore(open_storage(job_dir), chunk_size=SMALL)
    local = str(tmp_path / "job")
    write(local, "model.data", os.urandom(4 * SMALL))
    write(local, "dummy-checkpoint-1.json", b"{}")
    manifest = store.commit(local, scan(local, Checksums(3 * SMALL)), 1).manifest
    assert [c.size for c in data_entry(manifest).chunks] == [SMALL] * 4


# -- only what changed is sent ---------------------------------------------------------------------------


def test_only_the_chunks_that_changed_are_uploaded_again(job_dir, tmp_path):
    """A model whose first nine tenths are frozen: the next commit sends the changed tenth."""
    store = CheckpointStore(open_storage(job_dir), chunk_size=SMALL)
    local = str(tmp_path / "job")
    frozen, trained = os.urandom(18 * SMALL), os.urandom(2 * SMALL)
    write(local, "model.data", frozen + trained)
    first = commit(store, local, 1)
    assert first.uploaded_bytes == 20 * SMALL + len(b'{"step": 1}')
    write(local, "model.data", frozen + os.urandom(2 * SMALL))
    os.remove(os.path.join(local, "dummy-checkpoint-1.json"))
    second = commit(store, local, 2)
    assert second.uploaded_chunks == 3 and second.uploaded_bytes == 2 * SMALL + len(b'{"step": 2}')
    assert second.reused_chunks == 18 and second.reused_bytes == 18 * SMALL
    restored = str(tmp_path / "r")
    assert CheckpointStore(open_storage(job_dir)).restore(restored).step == 2
    assert read(os.path.join(restored, "model.data")) == read(os.path.join(local, "model.data"))


def test_a_stored_chunk_whose_bytes_changed_since_the_scan_is_not_committed(job_dir, tmp_path):
    """A chunk the store holds is not sent, so the file's bytes are checked against its checksum:
    a checksum taken while the file was being written must not name a chunk the file no longer has."""
    from survivor.jobdir.store import SnapshotChanged

    store = CheckpointStore(open_storage(job_dir), chunk_size=SMALL)
    local = str(tmp_path / "job")
    body = os.urandom(4 * SMALL)
    write(local, "model.data", body)
    commit(store, local, 1)
    write(local, "dummy-checkpoint-2.json", b"{}")
    stale = scan(local, Checksums(SMALL))  # model.data's chunks all stored: nothing of it is sent
    with open(os.path.join(local, "model.data"), "r+b") as f:
        f.write(b"changed")  # same size: only the bytes tell
    with pytest.raises(SnapshotChanged, match="model.data changed"):
        store.commit(local, stale, 1)
    assert store.latest().step == 1


# -- damaged chunks --------------------------------------------------------------------------------------


def damage(storage, name, how):
    if how == "missing":
        storage.delete([name])
    else:
        data = storage.read(name).data
        storage.write(name, {"flipped": bytes([data[0] ^ 1]) + data[1:], "short": data[:-1], "long": data + b"x"}[how])


def two_snapshots(job_dir, tmp_path):
    """A job dir holding step 10's snapshot of a 6-chunk file (`old`, its bytes) and step 20's of new bytes."""
    storage = open_storage(job_dir)
    store = CheckpointStore(storage, chunk_size=SMALL)
    local = str(tmp_path / "job")
    old = os.urandom(6 * SMALL)
    write(local, "model.data", old)
    commit(store, local, 10)
    write(local, "model.data", os.urandom(6 * SMALL))
    return storage, old, commit(store, local, 20).manifest


@pytest.mark.parametrize("how", ["flipped", "short", "long", "missing"])
def test_a_damaged_or_missing_chunk_fails_verification_and_the_previous_snapshot_is_used(job_dir, tmp_path, how):
    storage, old, newest = two_snapshots(job_dir, tmp_path)
    damage(storage, data_entry(newest).chunks[3].object, how)
    restored = str(tmp_path / "r")
    manifest = CheckpointStore(storage, chunk_size=SMALL).restore(restored)
    assert manifest.step == 10 and manifest.name != newest.name
    assert read(os.path.join(restored, "model.data")) == old
    assert not os.path.exists(os.path.join(restored, "dummy-checkpoint-20.json"))


def test_a_chunk_whose_written_bytes_differ_from_its_crc32c_fails_though_the_files_crc32c_agrees(job_dir, tmp_path):
    """Each chunk is checked as it is written, not only the whole file: a manifest whose chunk names
    a CRC32C its object's bytes do not have, and whose file CRC32C is combined from those very chunk
    CRC32Cs (so the file's check alone would pass), fails, and the previous snapshot restores."""
    storage, old, newest = two_snapshots(job_dir, tmp_path)
    body = json.loads(newest.to_json())
    entry = next(f for f in body["files"] if f["path"] == "model.data")
    entry["chunks"][3]["crc32c"] = crc32c_of_bytes(b"not these bytes")
    entry["crc32c"] = combine_crc32c(data_entry(Manifest.from_json(json.dumps(body).encode())).chunks)
    storage.write(newest.name, json.dumps(body).encode())
    restored = str(tmp_path / "r")
    manifest = CheckpointStore(storage, chunk_size=SMALL).restore(restored)
    assert manifest.step == 10
    assert read(os.path.join(restored, "model.data")) == old


def test_a_chunk_written_in_one_pass_is_checksummed_as_written_and_one_rewound_as_the_file_holds_it(tmp_path):
    """The download's window checksums its bytes as they pass; a client that seeks back and writes
    again (as google-cloud-storage does for a transcoded object) is checked against the file itself.
    A window whose attempt failed (never finished) writes nothing more: its retry's bytes stand."""
    from survivor.jobdir.storage import _FileWindow

    path, chunk = tmp_path / "model.data", os.urandom(1000)
    path.write_bytes(bytes(3000))
    fd = os.open(path, os.O_RDWR)
    try:
        failed = _FileWindow(fd, 1000, 1000)
        late = failed.buffered()
        late.write(b"from an attempt that failed")  # still in the attempt's buffer
        failed.finish()  # the attempt's end: sealed, with no flush
        one_pass = _FileWindow(fd, 1000, 1000)
        stream = one_pass.buffered()
        for at in range(0, 1000, 300):
            stream.write(chunk[at : at + 300])
        stream.flush()
        one_pass.finish()
        late.close()  # the failed attempt's buffer, flushed when it is collected: dropped
        assert os.pread(fd, 1000, 1000) == chunk
        assert one_pass.crc32c() == crc32c_of_bytes(chunk) and one_pass.received == 1000
        rewound = _FileWindow(fd, 1000, 1000)
        rewound.write(b"x" * 600)
        rewound.seek(0)
        rewound.write(chunk)
        rewound.finish()
        assert rewound.crc32c() == crc32c_of_bytes(chunk)
        long = _FileWindow(fd, 1000, 1000)
        long.write(chunk + b"past the range")
        long.finish()
        assert long.crc32c() == crc32c_of_bytes(chunk) and long.received == 1014
        short = _FileWindow(fd, 2000, 1000)
        short.write(chunk[:999])
        short.finish()
        assert short.crc32c() == crc32c_of_bytes(chunk[:999] + b"\0") and short.received == 999
    finally:
        os.close(fd)
    assert path.read_bytes() == bytes(1000) + chunk + chunk[:999] + b"\0"


# -- the one commit moment -----------------------------------------------------------------------------

COMMITTER = r"""
import sys
from survivor.jobdir.snapshot import Checksums, scan
from survivor.jobdir.storage import open_storage
from survivor.jobdir.store import CheckpointStore
local, job_dir, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3])
CheckpointStore(open_storage(job_dir), chunk_size=chunk).commit(local, scan(local, Checksums(chunk)), attempt=2)
print("COMMITTED", flush=True)
"""


def test_a_sigkill_mid_commit_of_a_chunked_snapshot_never_leaves_a_visible_partial_one(bucket, tmp_path):
    """A real process committing a 1,000-chunk snapshot to the storage emulator is SIGKILLed once
    its first chunks have landed: the job dir shows the previous snapshot, which restores whole."""
    job_dir = f"gs://{bucket}/killed-chunks"
    storage = open_storage(job_dir)
    store = CheckpointStore(storage, chunk_size=SMALL)
    local = str(tmp_path / "job")
    previous = os.urandom(3 * SMALL)
    write(local, "model.data", previous)
    commit(store, local, 10)
    write(local, "model.data", os.urandom(1_000 * SMALL))
    write(local, "dummy-checkpoint-20.json", b'{"step": 20}')
    before = {o.name for o in storage.list(CHUNKS)}
    proc = subprocess.Popen([sys.executable, "-c", COMMITTER, local, job_dir, str(SMALL)], stdout=subprocess.PIPE)

    def five_chunks_landed() -> bool:
        assert proc.poll() is None, "the commit ended before it could be killed"
        return len({o.name for o in storage.list(CHUNKS)} - before) >= 5

    wait_until(five_chunks_landed, PATIENCE, "the commit's first five chunks in the job dir", 0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    landed = {o.name for o in storage.list(CHUNKS)} - before
    assert 5 <= len(landed) < 1_001, "the kill came before the upload or after all of it"
    assert [m.step for m in store.committed()] == [10]
    restored = str(tmp_path / "r")
    assert CheckpointStore(open_storage(job_dir)).restore(restored).step == 10
    assert read(os.path.join(restored, "model.data")) == previous


# -- manifests of the whole-file format, which only a store never released wrote -------------------------


def test_a_manifest_of_whole_file_blobs_is_refused_by_name_and_the_previous_commit_restores(job_dir, tmp_path, caplog):
    storage = open_storage(job_dir)
    store = CheckpointStore(storage, chunk_size=SMALL)
    local, body = str(tmp_path / "job"), os.urandom(300_000)
    write(local, "model.data", body)
    good = commit(store, local, 4).manifest
    name = f"{BLOBS}model.data.{base64.b64decode(crc32c_of_bytes(body)).hex()}.300000"
    storage.upload([(os.path.join(local, "model.data"), name)])
    old = {
        "format": 1,
        "step": 5,
        "attempt": 1,
        "seq": 1,
        "created": "",
        "writer": "survivor 0.x",
        "files": [{"path": "model.data", "size": 300_000, "crc32c": crc32c_of_bytes(body), "object": name}],
    }
    whole = "survivor/snapshots/000000000005-000001-0001.json"
    storage.write(whole, json.dumps(old).encode())
    restored = str(tmp_path / "r")
    with caplog.at_level("WARNING"):
        assert store.restore(restored) == good
    said = next(r.fields for r in caplog.records if getattr(r, "fields", {}).get("manifest") == whole)
    assert said["reason"].startswith("format 1 (whole-file blobs") and "reads format 2 only" in said["reason"]
    assert read(os.path.join(restored, "model.data")) == body
    assert commit(store, restored, 6).manifest.abandoned == (whole,)
    store.keep = 1
    store.collect_garbage()
    assert storage.read(name) is None, "a blob no readable manifest names is collected like an unused chunk"
    assert CheckpointStore(storage).restore(str(tmp_path / "r2")).step == 6


GOOD_CHUNK = {"offset": 0, "size": 12, "crc32c": "AAAAAA==", "object": f"{CHUNKS}{'ab' * 32}"}
GOOD_FILE = {"path": "model.data", "size": 12, "crc32c": "AAAAAA==", "chunks": [GOOD_CHUNK]}


def chunked(files=None, **chunk) -> bytes:
    entry = {**GOOD_FILE, "chunks": [{**GOOD_CHUNK, **chunk}]} if files is None else files
    return json.dumps(
        {"format": 2, "step": 20, "attempt": 1, "seq": 1, "files": [entry] if files is None else files}
    ).encode()


def test_a_chunked_manifest_round_trips():
    manifest = Manifest.from_json(chunked())
    assert manifest.files[0].chunks[0].object == GOOD_CHUNK["object"]
    assert Manifest.from_json(manifest.to_json()) == manifest


@pytest.mark.parametrize(
    "data",
    [
        chunked(offset=1),
        chunked(size=0),
        chunked(size=13),
        chunked(size="12"),
        chunked(offset=-1),
        chunked(crc32c="AAAA"),
        chunked(crc32c=7),
        chunked(object=f"{BLOBS}model.data.0.12"),
        chunked(object=f"{CHUNKS}../../LEASE"),
        chunked(object=None),
        chunked(files=[{**GOOD_FILE, "chunks": [GOOD_CHUNK, {**GOOD_CHUNK, "offset": 12}]}]),  # longer than the file
        chunked(files=[{**GOOD_FILE, "chunks": [{**GOOD_CHUNK, "size": 6}, {**GOOD_CHUNK, "offset": 7, "size": 5}]}]),
        chunked(files=[{**GOOD_FILE, "chunks": [{**GOOD_CHUNK, "size": 6}, {**GOOD_CHUNK, "offset": 5, "size": 7}]}]),
        chunked(files=[{**GOOD_FILE, "chunks": "all of them"}]),
        chunked(files=[{**GOOD_FILE, "chunks": [5]}]),
        chunked(files=[{k: v for k, v in GOOD_FILE.items() if k != "chunks"}]),
        chunked(files=[{**GOOD_FILE, "object": f"{BLOBS}model.data.0.12"}]),  # both ways at once
        chunked(files=[{**GOOD_FILE, "size": 0, "chunks": [GOOD_CHUNK]}]),
        json.dumps({"format": 3, "step": 1, "attempt": 1, "files": [GOOD_FILE]}).encode(),
    ],
    ids=lambda d: d[60:120].decode(errors="replace"),
)
def test_a_chunked_manifest_that_is_not_the_exact_schema_is_refused(data):
    with pytest.raises(ManifestError):
        Manifest.from_json(data)


# -- garbage collection ----------------------------------------------------------------------------------


def test_garbage_collection_never_removes_a_chunk_a_kept_snapshot_uses(job_dir, tmp_path):
    """Frozen chunks are shared by every snapshot; those only deleted snapshots used go with them."""
    storage = open_storage(job_dir)
    store = CheckpointStore(storage, keep=1, chunk_size=SMALL)
    local = str(tmp_path / "job")
    frozen = os.urandom(8 * SMALL)  # committed first by the oldest snapshot, used by every later one
    trained = []
    for step in (1, 2, 3):
        trained.append(os.urandom(2 * SMALL))
        for name in os.listdir(local) if os.path.isdir(local) else []:
            os.remove(os.path.join(local, name))
        write(local, "model.data", frozen + trained[-1])
        commit(store, local, step)
        store.collect_garbage()
    kept = store.committed()
    assert [m.step for m in kept] == [3]
    stored = {o.name for o in storage.list(CHUNKS)}
    used = {c.object for f in kept[0].files for c in f.chunks}
    assert stored == used, "a chunk only deleted snapshots used is left, or one the kept one uses is gone"
    restored = str(tmp_path / "r")
    assert CheckpointStore(storage).restore(restored).step == 3
    assert read(os.path.join(restored, "model.data")) == frozen + trained[-1]


# -- the arithmetic ---------------------------------------------------------------------------------------


def test_a_files_crc32c_is_its_chunks_combined():
    rng = random.Random(7)
    for size in (0, 1, 63, 64, 65, 1000, 70_000):
        data = rng.randbytes(size)
        for chunk_size in (1, 7, 64, 4096, 1 << 20):
            digester = Digester(chunk_size)
            at = 0
            while at < size:  # fed in pieces that do not line up with the chunks
                step = rng.randint(1, 5000)
                digester.update(data[at : at + step])
                at += step
            digest = digester.digest()
            assert digest.crc32c == crc32c_of_bytes(data) == combine_crc32c(digest.chunks)
            assert b"".join(data[c.offset : c.offset + c.size] for c in digest.chunks) == data
    a, b = b"hello, ", b"world"
    combined = crc32c_combine(
        int.from_bytes(base64.b64decode(crc32c_of_bytes(a)), "big"),
        int.from_bytes(base64.b64decode(crc32c_of_bytes(b)), "big"),
        len(b),
    )
    assert base64.b64encode(combined.to_bytes(4, "big")).decode() == crc32c_of_bytes(a + b)


def test_a_file_digest_names_equal_chunks_alike_and_different_ones_apart(tmp_path):
    path = tmp_path / "f"
    same = os.urandom(SMALL)
    path.write_bytes(same + same + os.urandom(SMALL))
    chunks = digest_file(str(path), SMALL).chunks
    assert chunks[0].sha256 == chunks[1].sha256 != chunks[2].sha256


# -- a damaged chunk is never reused ---------------------------------------------------


@pytest.mark.parametrize("how", ["flipped", "truncated", "emptied", "another chunk's bytes"])
@pytest.mark.parametrize("when", ["before this store listed it", "while this store runs"])
def test_a_damaged_shared_chunk_is_stored_again_by_the_next_commit(job_dir, tmp_path, how, when):
    """Step 10 and step 20 share the first chunks of model.data. One shared chunk is damaged after
    step 20's commit; the commit of step 30 (which still holds those bytes) must not reuse it: it
    stores the chunk again, and step 30 restores bit for bit. 'while this store runs': the same
    store (one agent process) committed 10 and 20 and listed the chunks before the damage."""
    storage = open_storage(job_dir)
    store = CheckpointStore(storage, chunk_size=SMALL)
    local = str(tmp_path / "job")
    shared = os.urandom(4 * SMALL)
    write(local, "model.data", shared + os.urandom(SMALL))
    commit(store, local, 10)
    write(local, "model.data", shared + os.urandom(SMALL))
    newest = commit(store, local, 20).manifest
    victim, other = (c.object for c in data_entry(newest).chunks[1:3])
    data = storage.read(victim).data
    storage.write(
        victim,
        {
            "flipped": bytes([data[0] ^ 1]) + data[1:],
            "truncated": data[:-100],
            "emptied": b"",
            "another chunk's bytes": storage.read(other).data,
        }[how],
    )
    if when == "before this store listed it":
        store = CheckpointStore(storage, chunk_size=SMALL)  # a later boot's agent
    body = shared + os.urandom(SMALL)
    write(local, "model.data", body)
    for _ in range(3):  # a commit that finds the damage beside its upload is tried again
        try:
            stats = commit(store, local, 30)
            break
        except SnapshotChanged:
            continue
    else:
        raise AssertionError("the commit never went through")
    assert stats.manifest.step == 30
    assert hashlib.sha256(storage.read(victim).data).hexdigest() == victim.rsplit("/", 1)[1]  # stored again
    restored = str(tmp_path / "r")
    manifest = CheckpointStore(storage, chunk_size=SMALL).restore(restored)
    assert manifest.step == 30
    assert read(os.path.join(restored, "model.data")) == body


def test_a_chunk_damaged_while_the_agent_runs_is_stored_again_and_every_later_commit_restores(
    job_dir, tmp_path, instance_factory
):
    """Through the real agent: its dummy trainer's state file repeats the same bytes after its first
    8 at every save, so each commit shares its chunks with the one before. A shared chunk is
    damaged in the job dir while the agent runs; the agent's next commits must not reuse it, and
    the newest snapshot after the notice restores (every later commit reused it,
    and a later boot skipped them all)."""
    from tests.conftest import dummy_spec

    spec = dummy_spec(
        job_dir,
        tmp_path,
        train_steps=100_000,
        checkpoint_steps=5,
        step_seconds=0.02,
        extra_args=["--checkpoint-bytes", str(6 * SMALL)],
    )
    vm = instance_factory(spec, env={"SURVIVOR_CHUNK_MIB": str(SMALL / (1 << 20))})
    storage = open_storage(job_dir)
    probe = CheckpointStore(storage, chunk_size=SMALL)
    vm.boot()
    damaged = wait_until(
        lambda: (latest := probe.latest()) is not None and latest.step >= 10 and latest,
        PATIENCE,
        "a commit of step 10 or later to damage",
        0.1,
    )
    victim = data_entry(damaged, next(f.path for f in damaged.files if f.path.endswith(".data"))).chunks[2].object
    data = storage.read(victim).data
    storage.write(victim, bytes([data[0] ^ 1]) + data[1:])
    wait_until(
        lambda: probe.latest().step >= damaged.step + 15,
        PATIENCE,
        f"a commit 15 steps past the damaged one's step {damaged.step}",
        0.1,
    )
    assert vm.preempt(soft_off=True) == 0
    newest = probe.latest()
    assert newest.step >= damaged.step + 15
    restored = CheckpointStore(storage, chunk_size=SMALL).restore(str(tmp_path / "r"))
    assert restored is not None and restored.name == newest.name, (
        f"restored {restored and restored.name}, not the newest commit {newest.name}"
    )


def test_temporary_uploads_a_killed_agent_left_are_collected_and_a_write_under_way_is_not(tmp_path):
    """`.tmp-*` copies left in a local job dir by a SIGKILL (78 after 80 kills)
    were never removed. Garbage collection removes those older than its store; a newer one (a write
    of this process under way) stays."""
    job_dir = str(tmp_path / "jobdir")
    storage = open_storage(job_dir)
    local = str(tmp_path / "job")
    old_store = CheckpointStore(storage, chunk_size=SMALL, keep=1)
    write(local, "model.data", os.urandom(2 * SMALL))
    commit(old_store, local, 1)
    chunks_dir = os.path.join(job_dir, CHUNKS.rstrip("/"))
    leftover = os.path.join(chunks_dir, ".tmp-killed")
    with open(leftover, "wb") as f:
        f.write(b"x" * 1000)
    os.utime(leftover, (time.time() - 60, time.time() - 60))
    store = CheckpointStore(storage, chunk_size=SMALL, keep=1)  # the next agent
    in_flight = os.path.join(chunks_dir, ".tmp-writing-now")
    with open(in_flight, "wb") as f:
        f.write(b"y")
    write(local, "model.data", os.urandom(2 * SMALL))
    commit(store, local, 2)
    store.collect_garbage()
    assert not os.path.exists(leftover) and os.path.exists(in_flight)
    assert not [o for o in storage.list("") if ".tmp-" in o.name]  # never listed as objects either


def test_a_sparse_file_restores_sparse_on_a_disk_smaller_than_its_size(tmp_path):
    """A sparse 1 GiB file commits as one deduplicated all-zero chunk, but its
    restore wrote 1 GiB of real blocks and the boot disk's check refused it (the job could end
    FAILED). All-zero chunks are left holes: it restores onto a 64 MiB disk, still sparse."""
    import subprocess

    local, job_dir = str(tmp_path / "job"), str(tmp_path / "jobdir")
    os.makedirs(local)
    with open(os.path.join(local, "model.data"), "wb") as f:
        f.write(b"head")
        f.truncate(1 << 30)
    storage = open_storage(job_dir)
    stats = commit(CheckpointStore(storage), local, 7)
    assert stats.manifest.size > (1 << 30)
    small = tmp_path / "small-disk"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(small)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        manifest = CheckpointStore(storage).restore(str(small / "job"))
        assert manifest.step == 7
        restored = os.path.join(str(small / "job"), "model.data")
        assert os.path.getsize(restored) == 1 << 30 and os.stat(restored).st_blocks * 512 < (64 << 20)
        with open(restored, "rb") as f:
            assert f.read(4) == b"head" and f.read(1 << 20) == bytes(1 << 20)
    finally:
        subprocess.run(["umount", str(small)], check=False)
