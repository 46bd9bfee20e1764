"""The local tier: a snapshot too large for the notice, kept on the VM's state disk until its next boot commits it.

    >>> tier = DiskTier("/var/lib/survivor-state-disk", storage, instance="cifar-x7k2", zone="us-west1-b")
    >>> if tier.available() and not fits(new_bytes, rate.bytes_per_second(), seconds_left):
    ...     tier.save("/var/lib/survivor/job", snapshot, attempt=4)   # after a notice: a local write
    >>> tier.recover(store, attempt=5, fence=lease.fence)             # the next boot, before restore

A job whose spec sets `state_disk_gb` runs with a second persistent disk (device `survivor-state`)
that its group keeps across the VM's recreation (the MIG's statefulPolicy; docs/large-state.md,
"The local tier"). startup.sh mounts it at `STATE_DISK_DIR` and leaves `MARKER` on it, so a disk
that did not mount is never mistaken for one that did (the mount point alone is on the boot disk,
which the recreation replaces).

After a notice, when the commit cannot finish before the VM goes (the bytes still to send over the
upload rate exceed the time left), the mirror saves the snapshot here instead: every file copied
to `snapshots/<step>-<attempt>/` on the disk, its CRC32C taken as it is copied and checked against
the scan's, fsynced, the directory renamed into place; then the record `survivor/pending/<instance>.json`
is written to the job dir. That write is the snapshot's commit moment, as a manifest's is for one
in Cloud Storage: the record says which tier holds the snapshot (`"tier": "disk"`), on which
instance and zone, and every file's size and CRC32C. A record is not a manifest: restore never
follows it, and `Manifest.from_json` stays as strict as it was.

The next boot of the same instance, before it restores, reads its record, checks every file on the
disk (size and CRC32C), commits them to Cloud Storage as any commit (`CheckpointStore.commit`,
chunked, a manifest last), and deletes the record and the copy; the restore then takes that snapshot
as the newest. A record that names another instance or zone (that VM's disk is not here), or whose
files do not verify, is ignored with one warning naming it, and the previous committed snapshot
restores. A record no newer than the newest commit is obsolete and deleted.

Limits: the disk is zonal, so the snapshot waits for this very instance to come back in its zone;
the group recreates a preempted VM with its stateful disk when the termination action is STOP
(template.py refuses anything else for a job with a state disk).
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import google_crc32c

from survivor import log as logs
from survivor.jobdir.chunks import Digester
from survivor.jobdir.snapshot import LocalFile, Snapshot
from survivor.jobdir.storage import JobStorage, crc32c_text, parse_json
from survivor.jobdir.store import CheckpointStore, ManifestError, SnapshotChanged, check_relative_path, safe_join
from survivor.jobdir.trainer_files import Refused, open_file

log = logs.get("disk-tier")

#: Where startup.sh mounts the state disk; SURVIVOR_STATE_DISK moves it (a LocalInstance's own dir).
STATE_DISK_DIR = "/var/lib/survivor-state-disk"
STATE_DISK_ENV = "SURVIVOR_STATE_DISK"
#: The file startup.sh writes on the state disk's own filesystem once it is mounted.
MARKER = ".survivor-state-disk"
#: The template's device name for the disk (survivor/cloud/template.py STATE_DISK_DEVICE).
DEVICE = "survivor-state"
#: Pending disk-tier snapshots in the job dir: one record per instance.
PENDING = "survivor/pending/"
TIER = "disk"
FORMAT = 1
#: The upload rate assumed before the mirror has measured one: a single stream's worth, low on
#: purpose, since a rate guessed too high loses the snapshot and one guessed too low only keeps it
#: on the disk one boot longer. SURVIVOR_UPLOAD_BYTES_PER_SECOND replaces any measurement.
DEFAULT_BYTES_PER_SECOND = 25 << 20
RATE_ENV = "SURVIVOR_UPLOAD_BYTES_PER_SECOND"
#: How long the next boot waits for its state disk to be mounted (startup.sh mounts it on the first
#: boot of a boot disk, fstab on later ones) before it leaves the snapshot for a later boot.
MOUNT_WAIT_SECONDS = 120.0
#: A commit smaller than this says more about latency than about the rate: not measured.
MIN_MEASURED_BYTES = 1 << 20
_COPY_BLOCK = 8 << 20


def state_disk_dir() -> str:
    """Where the state disk is mounted: $SURVIVOR_STATE_DISK or STATE_DISK_DIR."""
    return os.environ.get(STATE_DISK_ENV) or STATE_DISK_DIR


def pending_name(instance: str) -> str:
    """The job dir object that records `instance`'s pending disk-tier snapshot."""
    return f"{PENDING}{instance}.json"


def pending_snapshots(storage: JobStorage) -> list[PendingSnapshot]:
    """Every pending disk-tier snapshot the job dir records, by step: what `status` shows."""
    return sorted((record for _, record in _records(storage)), key=lambda r: (r.step, r.instance))


def _records(storage: JobStorage) -> Iterator[tuple[str, PendingSnapshot]]:
    """Each pending record that parses, with its object name; one that does not is skipped with a
    warning naming it (it must not be followed)."""
    for info in storage.list(PENDING):
        if not info.name.endswith(".json"):
            continue
        blob = storage.read(info.name)
        if blob is None:
            continue
        try:
            record = PendingSnapshot.from_json(blob.data)
        except ManifestError as exc:
            log.warning(
                f"ignoring a pending disk-tier record that must not be followed, {info.name}: {exc}",
                record=info.name,
                reason=str(exc),
            )
            continue
        yield info.name, record


def fits(new_bytes: int, bytes_per_second: float, seconds_left: float) -> bool:
    """Pure decision: can `new_bytes` go out at `bytes_per_second` within `seconds_left`?"""
    return new_bytes <= 0 or (seconds_left > 0 and new_bytes / bytes_per_second <= seconds_left)


class UploadRate:
    """The upload rate the commits so far reached (the newest measurable one), or the default.

    `SURVIVOR_UPLOAD_BYTES_PER_SECOND` sets it outright: an operator who knows the VM's rate, or a
    test that needs a commit not to fit."""

    def __init__(self) -> None:
        self._measured: float | None = None

    def observe(self, uploaded_bytes: int, seconds: float) -> None:
        """Records a commit's upload (too small or too quick ones say nothing and are skipped)."""
        if uploaded_bytes >= MIN_MEASURED_BYTES and seconds > 0:
            self._measured = uploaded_bytes / seconds

    def bytes_per_second(self) -> float:
        """The rate to plan with."""
        fixed = os.environ.get(RATE_ENV)
        if fixed:
            return max(float(fixed), 1e-9)
        return self._measured or DEFAULT_BYTES_PER_SECOND


@dataclass(frozen=True)
class PendingFile:
    """One file of a pending snapshot: its path in the job dir, size and CRC32C (base64)."""

    path: str
    size: int
    crc32c: str


@dataclass(frozen=True)
class PendingSnapshot:
    """The record of a snapshot held by the state disk of `instance` (in `zone`), not yet in Cloud Storage."""

    step: int
    attempt: int
    instance: str
    zone: str
    files: tuple[PendingFile, ...]
    created: str = ""

    @property
    def dirname(self) -> str:
        """Its directory under the disk's `snapshots/`."""
        return f"{self.step}-{self.attempt}"

    def to_json(self) -> bytes:
        """The record as stored in the job dir."""
        return json.dumps(
            {
                "format": FORMAT,
                "tier": TIER,
                "disk": DEVICE,
                "instance": self.instance,
                "zone": self.zone,
                "step": self.step,
                "attempt": self.attempt,
                "created": self.created,
                "files": [{"path": f.path, "size": f.size, "crc32c": f.crc32c} for f in self.files],
            },
            indent=1,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "PendingSnapshot":
        """Parses a record: exactly the fields `to_json` writes, else ManifestError."""
        try:
            raw = parse_json(data)
        except ValueError as exc:
            raise ManifestError(f"not JSON: {exc}") from None
        keys = {"format", "tier", "disk", "instance", "zone", "step", "attempt", "created", "files"}
        if not isinstance(raw, dict) or set(raw) != keys:
            raise ManifestError(f"expected exactly the fields {sorted(keys)}")
        if (raw["format"], raw["tier"], raw["disk"]) != (FORMAT, TIER, DEVICE):
            raise ManifestError(
                f"format {raw['format']!r}, tier {raw['tier']!r}, disk {raw['disk']!r}: "
                f"expected {FORMAT}, {TIER!r}, {DEVICE!r}"
            )
        for key in ("instance", "zone", "created"):
            if not isinstance(raw[key], str) or len(raw[key]) > 256:
                raise ManifestError(f"{key}: expected a string")
        for key in ("step", "attempt"):
            if isinstance(raw[key], bool) or not isinstance(raw[key], int) or not 0 <= raw[key] < 1 << 62:
                raise ManifestError(f"{key}: expected a whole number >= 0")
        if not isinstance(raw["files"], list) or not raw["files"]:
            raise ManifestError("files: expected a non-empty list")
        files = []
        for i, item in enumerate(raw["files"]):
            if not isinstance(item, dict) or set(item) != {"path", "size", "crc32c"}:
                raise ManifestError(f"files[{i}]: expected exactly path, size, crc32c")
            if isinstance(item["size"], bool) or not isinstance(item["size"], int) or item["size"] < 0:
                raise ManifestError(f"files[{i}].size: expected a whole number >= 0")
            if not isinstance(item["path"], str):
                raise ManifestError(f"files[{i}].path: expected a string")
            if not isinstance(item["crc32c"], str) or len(item["crc32c"]) != 8:
                raise ManifestError(f"files[{i}].crc32c: expected a base64 CRC32C")
            files.append(PendingFile(check_relative_path(item["path"]), item["size"], item["crc32c"]))
        return cls(raw["step"], raw["attempt"], raw["instance"], raw["zone"], tuple(files), raw["created"])


class DiskTier:
    """The state disk mounted at `root` on `instance` (in `zone`), and the records in the job dir's `storage`.

    Args:
        root: the state disk's mount point (`state_disk_dir()`).
        storage: the job dir, where the records go.
        instance: this VM's name; a record names the instance whose disk holds its snapshot.
        zone: this VM's zone.
    """

    def __init__(self, root: str, storage: JobStorage, instance: str, zone: str):
        self.root = root
        self.storage = storage
        self.instance = instance
        self.zone = zone

    def available(self) -> bool:
        """True when the state disk is mounted (its marker is there) and writable."""
        return os.path.isfile(os.path.join(self.root, MARKER)) and os.access(self.root, os.W_OK)

    def _dir(self, name: str) -> str:
        return os.path.join(self._snapshots(), name)

    def _snapshots(self) -> str:
        """`<disk>/snapshots`, created if missing; OSError if it (or the disk's root) is a link or
        not a directory: with the agent as root, following a link there and clearing what it points
        at would delete whatever the link names. Nothing there is followed."""
        path = os.path.join(self.root, "snapshots")
        for where in (self.root, path):
            try:
                st = os.lstat(where)
            except FileNotFoundError:
                if where == path:
                    os.mkdir(path, 0o700)
                    continue
                raise
            if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
                raise OSError(errno.ENOTDIR, f"{where} is a link or not a directory; the state disk is not used")
        return path

    def _remove_own(self, keep: str | None = None) -> None:
        """Removes the snapshot folders this tier wrote (`<step>-<attempt>`, `.<step>-<attempt>.partial`)
        but `keep`, and nothing else: never a name it did not make, never through a link."""
        folder = self._snapshots()
        for name in os.listdir(folder):
            if name != keep and _OWN.fullmatch(name):
                _remove(os.path.join(folder, name))

    # -- after a notice ---------------------------------------------------------------------------

    def save(self, local_root: str, snapshot: Snapshot, attempt: int) -> PendingSnapshot:
        """Copies the snapshot to the disk (fsynced, renamed into place), then writes its record: the
        commit moment. Raises SnapshotChanged if a file's bytes are not the scan's (nothing is
        recorded then), OSError if the disk fails, StorageError if the record cannot be written."""
        if snapshot.step is None:
            raise ValueError("a snapshot without a step cannot be saved")
        record = PendingSnapshot(
            snapshot.step,
            attempt,
            self.instance,
            self.zone,
            tuple(PendingFile(f.path, f.size, f.crc32c) for f in snapshot.files),
            _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        )
        final = self._dir(record.dirname)
        partial = self._dir(f".{record.dirname}.partial")
        _remove(partial)
        for f in snapshot.files:
            _copy_checked(safe_join(local_root, f.path), safe_join(partial, f.path), f)
        _remove(final)
        os.replace(partial, final)
        _fsync_dir(os.path.dirname(final))
        self.storage.write(pending_name(self.instance), record.to_json())
        self._remove_own(keep=record.dirname)  # one snapshot on the disk: the recorded one
        return record

    # -- the next boot ----------------------------------------------------------------------------

    def recover(self, store: CheckpointStore, attempt: int, fence: Callable[[], None] | None = None) -> int | None:
        """Commits this instance's pending snapshot to Cloud Storage if its files on the disk verify;
        returns its step, or None. Records it cannot use are ignored with a warning naming them;
        obsolete ones (no newer than the newest commit) are deleted. Never raises for a record or a
        disk copy; a job dir that fails raises its StorageError."""
        records = list(_records(self.storage))
        if not records:
            return None
        latest = store.latest()
        committed = latest.step if latest is not None else -1
        recovered = None
        for name, record in records:
            if store.max_step is not None and record.step > store.max_step:  # restore would refuse its commit
                log.warning(
                    "ignoring a pending disk-tier snapshot beyond train_steps",
                    record=name,
                    step=record.step,
                    train_steps=store.max_step,
                )
                continue
            if record.step <= committed:
                # obsolete only against a snapshot that verifies: `settle` decides once the restore has
                # said which one does (a newer manifest may parse and still fail)
                continue
            if (record.instance, record.zone) != (self.instance, self.zone):
                log.warning(
                    "ignoring a pending disk-tier snapshot: it is on another instance's disk",
                    record=name,
                    step=record.step,
                    instance=record.instance,
                    zone=record.zone,
                )
                continue
            if not self._mounted(MOUNT_WAIT_SECONDS):  # a copy not yet reachable is not a damaged one
                log.warning(
                    "ignoring a pending disk-tier snapshot for now: the state disk is not mounted",
                    record=name,
                    step=record.step,
                    disk=self.root,
                )
                continue
            recovered = self._commit(store, name, record, attempt, fence) or recovered
        return recovered

    def settle(
        self, store: CheckpointStore, restored: int | None, attempt: int, fence: Callable[[], None] | None = None
    ) -> int | None:
        """After the restore: deletes the pending records no newer than the snapshot it restored (a
        verified one), and commits this disk's records that are newer (the commits above them did
        not verify) as `recover` does. Returns the step committed, or None; the caller restores
        again then. Never raises for a record or a disk copy."""
        newest = restored if restored is not None else -1
        recovered = None
        for name, record in list(_records(self.storage)):
            if store.max_step is not None and record.step > store.max_step:
                continue
            if record.step <= newest:
                log.info(
                    "a pending disk-tier snapshot is obsolete; deleting its record",
                    record=name,
                    step=record.step,
                    restored_step=restored,
                )
                self._forget(name, record)
            elif (record.instance, record.zone) == (self.instance, self.zone) and self.available():
                log.warning(
                    "a pending disk-tier snapshot is newer than every commit that verifies; committing it",
                    record=name,
                    step=record.step,
                    restored_step=restored,
                )
                recovered = self._commit(store, name, record, attempt, fence) or recovered
        return recovered

    def _mounted(self, wait: float) -> bool:
        """True once the disk is available, polling for up to `wait` seconds."""
        deadline = time.monotonic() + wait
        while not self.available():
            if time.monotonic() >= deadline:
                return False
            time.sleep(1.0)
        return True

    def _commit(
        self, store: CheckpointStore, name: str, record: PendingSnapshot, attempt: int, fence: Callable[[], None] | None
    ) -> int | None:
        try:
            folder = self._dir(record.dirname)
        except OSError as exc:
            log.warning(
                "ignoring a pending disk-tier snapshot: its folder on the state disk cannot be used",
                record=name,
                step=record.step,
                reason=str(exc),
            )
            return None
        files, problem = [], None
        for f in record.files:
            try:
                digest, st = _digest_regular(folder, f.path, store.chunk_size)
            except OSError as exc:
                problem = f"{f.path}: {exc.strerror or exc}"
                break
            if (digest.size, digest.crc32c) != (f.size, f.crc32c):
                problem = f"{f.path}: {digest.size} bytes, CRC32C {digest.crc32c}; recorded {f.size}, {f.crc32c}"
                break
            files.append(LocalFile.from_digest(f.path, st, digest))  # verified: digest's size and CRC32C are f's
        if problem is not None:
            log.warning(
                "ignoring a pending disk-tier snapshot that does not verify; the previous commit restores",
                record=name,
                step=record.step,
                reason=problem,
            )
            self._forget(name, record)
            return None
        try:
            stats = store.commit(folder, Snapshot(record.step, tuple(files)), attempt, fence=fence)
        except SnapshotChanged as exc:
            log.warning(
                "ignoring a pending disk-tier snapshot whose copy changed while it was committed",
                record=name,
                step=record.step,
                reason=str(exc),
            )
            return None
        log.info(
            "committed the state disk's snapshot",
            record=name,
            step=record.step,
            manifest=stats.manifest.name,
            uploaded_bytes=stats.uploaded_bytes,
            upload_seconds=round(stats.upload_seconds, 3),
        )
        self._forget(name, record)
        return record.step

    def _forget(self, name: str, record: PendingSnapshot) -> None:
        """Deletes a record and, if it is this disk's, its copy (a copy is only ever deleted after its
        record, so no record outlives its files by this hand)."""
        self.storage.delete([name])
        if (record.instance, record.zone) == (self.instance, self.zone):
            try:
                _remove(self._dir(record.dirname))
            except OSError as exc:  # a disk whose snapshots dir is a link: nothing of it is touched
                log.warning("the state disk's copy was not removed", record=name, reason=str(exc))


#: The names this tier gives its folders under `<disk>/snapshots`.
_OWN = re.compile(r"\.?\d+-\d+(\.partial)?")


def _remove(path: str) -> None:
    """Removes a file or a folder this tier wrote, never through a link (a link itself is removed)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)  # rmtree itself never follows a link inside
    else:
        os.unlink(path)


def _digest_regular(folder: str, rel: str, chunk_size: int):
    """The digest and stat of the regular file `rel` under `folder`, opened without following a
    link in any part of the path and without blocking: OSError for a link, a FIFO, a device or a
    directory (a FIFO left there would hang the boot for ever)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for part in rel.split("/")[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
        file_fd = os.open(rel.split("/")[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        st = os.fstat(file_fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        digester = Digester(chunk_size)
        with os.fdopen(os.dup(file_fd), "rb") as f:
            digester.read(f)
        return digester.digest(), st
    finally:
        os.close(file_fd)


def _copy_checked(source: str, target: str, f: LocalFile) -> None:
    """Copies a trainer's file, taking its CRC32C on the way; fsyncs it. SnapshotChanged when the
    bytes copied are not the ones the scan saw, or the file is a link or a FIFO now (never read
    through: `trainer_files.open_file`)."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    checksum, size = google_crc32c.Checksum(), 0
    try:
        source_file = open_file(source)
    except Refused as exc:
        raise SnapshotChanged(f"{f.path}: {exc.strerror}") from None
    with source_file as src, open(target, "wb") as dst:
        while block := src.read(_COPY_BLOCK):
            checksum.update(block)
            dst.write(block)
            size += len(block)
        dst.flush()
        os.fsync(dst.fileno())
    if (size, crc32c_text(checksum)) != (f.size, f.crc32c):
        raise SnapshotChanged(f"{f.path} changed since it was scanned")
    _fsync_dir(os.path.dirname(target))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
