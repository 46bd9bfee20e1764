"""The job dir's storage: Cloud Storage through google-cloud-storage, or a local directory.

    >>> storage = open_storage("gs://my-bucket/runs/cifar10")    # or "/tmp/job", "file:///tmp/job"
    >>> storage.write("survivor/DONE", b"{}")
    >>> storage.read("survivor/DONE").data
    b'{}'

Names are relative to the job dir. Both backends give the same guarantees the checkpoint store and
the lease build on: `write` is atomic (readers see the old or the new object, never a part), and
`if_generation_match` makes a write conditional (0: only if absent), raising `PreconditionFailed`.
Uploads and downloads of many files run in parallel. This is the one Cloud Storage wrapper in
survivor: everything that touches the bucket goes through it, so the emulator sees it all.
"""

from __future__ import annotations

import base64
import builtins  # `list` in a signature below a storage's list method is the method, not the type
import errno
import fcntl
import io
import json
import os
import re
import shutil
import stat
import tempfile
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Iterable, Protocol

import google_crc32c

from survivor import retry
from survivor.jobdir.trainer_files import Refused, open_file, open_regular

PARALLELISM = 16
#: Transfers a job dir runs at once (chunks of a commit or a restore, files of an upload): twice the
#: vCPUs, at most 32, or the setting `SURVIVOR_TRANSFERS`. Each holds at most one chunk in memory.
#: More than that on 2 vCPUs only queues requests (8 at once against the storage emulator there had
#: requests waiting past the upload's per-request budget).
TRANSFERS = int(os.environ.get("SURVIVOR_TRANSFERS") or min(32, 2 * (os.cpu_count() or 1)))
#: google-cloud-storage's switch for its background bucket-metadata fetch (see GcsStorage).
NO_BUCKET_METADATA_ENV = "DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA"


class PreconditionFailed(Exception):
    """A conditional write lost: the object's generation was not the one expected."""


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(data: bytes):
    """Parses a JSON object survivor wrote into the job dir, trusting nothing about it.

    Raises ValueError for anything that is not plain JSON: bytes that are not UTF-8, `NaN` or
    `Infinity` (Python's json accepts them), integers of thousands of digits, and nesting deeper
    than the parser's recursion limit (a RecursionError, which no caller expects from a read).
    """
    try:
        return json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except (ValueError, TypeError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(str(exc)[:200]) from None


#: Why a storage call failed, as `StorageError.reason` says it.
FORBIDDEN = "forbidden"  # 403 (or 401): the VM's service account lacks a permission
BUCKET_MISSING = "bucket-missing"  # 404 naming the bucket
NOT_FOUND = "not-found"  # 404 of one object (a read that expects it, a download)
FAILED = "failed"  # anything else, after the retries: the network, the server


class StorageError(Exception):
    """A job-dir call that failed, in one line naming the object and why.

    `reason` is FORBIDDEN, BUCKET_MISSING, NOT_FOUND or FAILED; `permission` the IAM permission a
    FORBIDDEN call needed (from the server's message, or the one the call needs); `object` the URL.
    """

    def __init__(self, message: str, *, object: str = "", reason: str = FAILED, permission: str = ""):
        super().__init__(message)
        self.object = object
        self.reason = reason
        self.permission = permission

    @property
    def forbidden(self) -> bool:
        """True when the job dir refused this VM (a missing permission)."""
        return self.reason == FORBIDDEN

    @property
    def lasting(self) -> bool:
        """True for a problem no retry of the same call cures: a missing permission or bucket."""
        return self.reason in (FORBIDDEN, BUCKET_MISSING)


#: The IAM permission each job-dir call needs (https://cloud.google.com/storage/docs/access-control/iam-permissions).
#: All are object permissions: Storage Object User / Storage Object Admin grant them on a bucket, and
#: neither grants `storage.buckets.get`, so nothing here reads bucket metadata
#: (https://cloud.google.com/storage/docs/access-control/iam-roles).
PERMISSION_FOR = {
    "read": "storage.objects.get",
    "write": "storage.objects.create",
    "list": "storage.objects.list",
    "delete": "storage.objects.delete",
    "upload": "storage.objects.create",
    "download": "storage.objects.get",
}

_PERMISSION_IN_MESSAGE = re.compile(r"\bstorage\.[a-zA-Z]+\.[a-zA-Z]+\b")
# Cloud Storage's 404 for a missing bucket says so ("The specified bucket does not exist.", in the
# backend's own words "BUCKET_NOT_FOUND: No such bucket", googleapis/nodejs-storage#220); a missing
# object's says "No such object: BUCKET/NAME" (googleapis/nodejs-storage#1221).
_BUCKET_MISSING_IN_MESSAGE = re.compile(r"bucket does not exist|no such bucket|bucket_not_found", re.IGNORECASE)


def bucket_missing(message: str) -> bool:
    """Pure decision: does a 404's message say the bucket (not just the object) is missing?"""
    return bool(_BUCKET_MISSING_IN_MESSAGE.search(message or ""))


def permission_named(message: str, default: str) -> str:
    """The permission a 403's message names (GCS: "... does not have storage.objects.get access to
    the Google Cloud Storage object", googleapis/java-storage#1372), else `default`."""
    match = _PERMISSION_IN_MESSAGE.search(message or "")
    return match.group(0) if match else default


@dataclass(frozen=True)
class Blob:
    """An object's bytes and generation."""

    data: bytes
    generation: int


@dataclass(frozen=True)
class ObjectInfo:
    """An object's name (relative to the job dir), size and crc32c (base64, as GCS reports it; ""
    where the backend keeps none, a local job dir), and its generation: a number that changes
    whenever the object is written again (GCS's generation, a local file's mtime; 0: not known)."""

    name: str
    size: int
    crc32c: str
    generation: int = 0


#: Read size for checksums: a block that stays in the CPU's cache between the read and the checksum
#: (a 10 MB file: 1.5 ms in 256 KiB blocks, 2.6 ms in 1 MiB blocks, 6.9 ms in 4 MiB blocks, whose
#: buffers are fresh mmaps each time).
CRC_BLOCK = 256 << 10


def crc32c_extend(checksum, f, end: int | None = None) -> int:
    """Feeds `checksum` (a google_crc32c.Checksum) the bytes of the open file `f` from its position
    up to offset `end` (or to its end) in CRC_BLOCK blocks; returns the offset reached."""
    position = f.tell()
    while end is None or position < end:
        block = f.read(CRC_BLOCK if end is None else min(CRC_BLOCK, end - position))
        if not block:
            break
        checksum.update(block)
        position += len(block)
    return position


def crc32c_text(checksum) -> str:
    """A checksum's value base64-encoded big-endian, the form Cloud Storage reports."""
    return base64.b64encode(checksum.digest()).decode()


def crc32c_of_file(path: str) -> str:
    """The file's CRC32C, base64-encoded big-endian, the form Cloud Storage reports."""
    checksum = google_crc32c.Checksum()
    with open(path, "rb") as f:
        crc32c_extend(checksum, f)
    return crc32c_text(checksum)


def crc32c_of_bytes(data: bytes) -> str:
    """CRC32C of `data`, base64-encoded big-endian."""
    return crc32c_text(google_crc32c.Checksum(data))


def crc32c_of_range(fd: int, offset: int, size: int) -> str:
    """The CRC32C (base64) of `size` bytes at `offset` of the open file `fd` (fewer if it ends first)."""
    checksum, position, end = google_crc32c.Checksum(), offset, offset + size
    while position < end:
        block = os.pread(fd, min(CRC_BLOCK, end - position), position)
        if not block:
            break
        checksum.update(block)
        position += len(block)
    return crc32c_text(checksum)


@dataclass(frozen=True)
class Part:
    """A range of a local file and the object that holds it: `size` bytes at `offset` of `local`,
    stored as `name`, with the CRC32C (base64) they should have (an upload's server checks it)."""

    local: str
    offset: int
    size: int
    name: str
    crc32c: str = ""


class _FileView(io.RawIOBase):
    """`size` bytes at `offset` of the open file `fd`, as a file object of their own: what one
    chunk's transfer sees (its position, its seeks), so that it never touches more of the file."""

    def __init__(self, fd: int, offset: int, size: int):
        super().__init__()
        self._fd, self._offset, self._size, self._position = fd, offset, size, 0

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, position: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._size}[whence]
        self._position = max(0, base + position)
        return self._position


class _FileRange(_FileView):
    """A read-only view of `size` bytes at `offset` of the file at `path`: what one chunk's upload
    reads, so that it never holds more of the file than its chunk. Closing it closes the file.
    The file is a trainer's: opened by `trainer_files.open_regular` (Refused: a link, a FIFO)."""

    def __init__(self, path: str, offset: int, size: int):
        super().__init__(open_regular(path), offset, size)

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        left = max(0, self._size - self._position)
        n = left if n is None or n < 0 else min(n, left)
        data = os.pread(self._fd, n, self._offset + self._position) if n else b""
        self._position += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


class _FileWindow(_FileView):
    """A write-only view of `size` bytes at `offset` of an open file: a download writes its chunk in
    place, beside the others of the same file, and checksums the bytes as they pass. Bytes past the
    range are counted (`received`), never written: an object longer than its range shows so to the
    caller.

    The client hands over a few KiB at a time: `buffered()` puts the standard library's C buffer of
    CRC_BLOCK in front, so this Python code runs once a block, not once a piece (with four downloads
    sharing the interpreter, a call per piece was what a restore spent beyond its download floor).
    `finish()` seals the window: what reaches it after that (a failed attempt's buffer, flushed when
    it is collected) is dropped, so it can never land over the bytes of the attempt after it.
    """

    def __init__(self, fd: int, offset: int, size: int):
        super().__init__(fd, offset, size)
        self._checksum = google_crc32c.Checksum()
        self._checked: int | None = 0  # the range's first bytes, in order, the checksum has seen
        self._sealed = False

    def writable(self) -> bool:
        return True

    @property
    def received(self) -> int:
        return self._position

    def buffered(self) -> io.BufferedWriter:
        """The window behind a write buffer of CRC_BLOCK: what the client writes into. Flush it
        before `finish()`; never close it (closing flushes, also after a failed attempt)."""
        return io.BufferedWriter(self, CRC_BLOCK)

    def write(self, data) -> int:
        length = len(data)
        if self._sealed:
            return length
        keep = bytes(data[: max(0, self._size - self._position)])  # the checksum takes bytes, not a view
        if keep:
            if self._checked == self._position:
                self._checksum.update(keep)
                self._checked += len(keep)
            else:
                self._checked = None  # written out of order (a client that rewound): no longer one pass
            with memoryview(keep) as view:
                written = 0
                while written < len(view):
                    written += os.pwrite(self._fd, view[written:], self._offset + self._position + written)
        self._position += length
        return length

    def finish(self) -> None:
        """Seals the window: the download has ended (well or not), and nothing more is written."""
        self._sealed = True

    def crc32c(self) -> str:
        """The CRC32C (base64) of the range as the file holds it after `finish()`: the checksum taken
        while writing, when the writes filled the range in one pass from its start; else read back."""
        if self._checked == self._size:
            return crc32c_text(self._checksum)
        return crc32c_of_range(self._fd, self._offset, self._size)


class JobStorage(Protocol):
    """What the checkpoint store, journal and lease need from a job dir."""

    url: str

    def read(self, name: str) -> Blob | None:
        """The object's bytes and generation, or None when there is no such object."""

    def write(self, name: str, data: bytes, *, if_generation_match: int | None = None) -> int:
        """Writes the object atomically and returns its new generation. With `if_generation_match`,
        only if the object's generation is that one (0: only if absent), else PreconditionFailed."""

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose name starts with `prefix`, sorted by name."""

    def delete(self, names: Iterable[str]) -> None:
        """Deletes the objects; one already gone is no error."""

    def upload(self, pairs: builtins.list[tuple[str, str]]) -> builtins.list[ObjectInfo]:
        """Stores each (local file, object name) pair, in parallel; returns what each object holds."""

    def download(self, pairs: builtins.list[tuple[str, str]]) -> None:
        """Copies each (object name, local file) pair to the local file, in parallel."""

    def upload_parts(self, parts: builtins.list[Part]) -> builtins.list[ObjectInfo]:
        """Stores each range of a local file as its object, in parallel; returns what each holds."""

    def download_parts(self, parts: builtins.list[Part]) -> builtins.list[ObjectInfo]:
        """Writes each object into its range of a local file, in parallel; returns, for each, the
        bytes the object held and the CRC32C of its range as written."""

    def remove_temporaries(self, older_than: float) -> int:
        """Removes what interrupted writes left behind (a local job dir's `.tmp-*` files last
        modified before `older_than`, a time.time()); returns how many. Cloud Storage leaves none."""


def open_storage(url: str, project: str | None = None, client=None) -> JobStorage:
    """Opens the job dir at `url`: `gs://BUCKET/PATH`, `file:///PATH` or `/PATH`. `client`: a
    google-cloud-storage client to share (many job dirs read by one process: one connection pool,
    one token)."""
    if url.startswith("gs://"):
        return GcsStorage(url, project=project, client=client)
    if url.startswith("file://"):
        return LocalStorage(url[len("file://") :])
    return LocalStorage(url)


#: The folder of survivor's own records in a job dir (journal, snapshots, moves, switches, ...).
RECORDS_DIR = "survivor"


def job_dirs(url: str, project: str | None = None, client=None) -> list[str]:
    """The job dirs at `url`, one listing: `url` itself when it holds survivor's records, else every
    folder directly under it (a bucket prefix, or a local folder, of a team's jobs), sorted. A folder
    under it need not be a job dir (a data dir): its own listing says. Creates nothing."""
    if url.startswith("gs://"):
        bucket_name, prefix = split_gs_url(url.rstrip("/"))
        storage = GcsStorage(f"gs://{bucket_name}/{prefix}", project=project, client=client)
        under = f"{prefix}/" if prefix else ""
        try:
            pages = storage.client.list_blobs(bucket_name, prefix=under, delimiter="/", **retry.STORAGE_READ.client())
            for _ in pages:  # the folders come with the pages: every page must be read
                pass
            folders = sorted(pages.prefixes)
        except Exception as exc:
            raise storage._translate(exc, "list", "") from exc
        if f"{under}{RECORDS_DIR}/" in folders:
            return [url.rstrip("/")]
        return [f"gs://{bucket_name}/{folder.rstrip('/')}" for folder in folders]
    root = url[len("file://") :] if url.startswith("file://") else url
    if os.path.isdir(os.path.join(root, RECORDS_DIR)):
        return [root]
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as exc:
        raise StorageError(f"{root}: listing: {exc.strerror or exc}", object=root) from exc
    return [e.path for e in entries if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")]


def split_gs_url(url: str) -> tuple[str, str]:
    """`gs://bucket/a/b` -> (`bucket`, `a/b`)."""
    rest = url[len("gs://") :]
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix.strip("/")


# -- local directory -------------------------------------------------------------------------------


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


class LocalStorage:
    """A job dir on a local (or mounted) file system: the embedded default of `survivor demo`.

    Atomic writes go through a temporary file and `os.replace`; generations are kept in a sidecar
    file under a lock so conditional writes behave as on Cloud Storage.
    """

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.url = self.root
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            raise self._error(exc, "creating the job dir", "") from exc
        self._lock_path = os.path.join(self.root, ".survivor-generations.lock")

    def _path(self, name: str) -> str:
        path = os.path.normpath(os.path.join(self.root, name))
        if not path.startswith(self.root + os.sep):
            raise ValueError(f"object name escapes the job dir: {name!r}")
        return path

    def _generation(self, path: str) -> int:
        try:
            return os.stat(path).st_mtime_ns or 1
        except FileNotFoundError:
            return 0

    def _error(self, exc: OSError, call: str, name: str) -> StorageError:
        where = os.path.join(self.root, name)
        if isinstance(exc, PermissionError) or exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return StorageError(
                f"{where}: {call}: permission denied ({exc.strerror}); the agent's user needs "
                "read-write access to the job dir",
                object=where,
                reason=FORBIDDEN,
                permission="read-write access",
            )
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return StorageError(
                f"{where}: {call}: no space left on the job dir's file system ({exc.strerror})", object=where
            )
        return StorageError(f"{where}: {call}: {exc.strerror or exc}", object=where)

    def read(self, name: str) -> Blob | None:
        """The object's bytes and generation (its mtime in ns), or None when it does not exist."""
        path = self._path(name)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._error(exc, "reading", name) from exc
        return Blob(data, self._generation(path))

    def write(self, name: str, data: bytes, *, if_generation_match: int | None = None) -> int:
        """Writes the object through a temporary file and a rename, conditionally under the generations lock."""
        try:
            return self._write(name, data, if_generation_match)
        except OSError as exc:
            raise self._error(exc, "writing", name) from exc

    def _write(self, name: str, data: bytes, if_generation_match: int | None) -> int:
        path = self._path(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(self._lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if if_generation_match is not None and self._generation(path) != if_generation_match:
                raise PreconditionFailed(f"{name}: generation is not {if_generation_match}")
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                _remove_quietly(tmp)  # a full disk must not also fill up with our leftovers
                raise
            return self._generation(path)

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every plain file under `prefix` (links, FIFOs and temporary files are no objects)."""
        try:
            return self._list(prefix)
        except OSError as exc:
            raise self._error(exc, "listing", prefix) from exc

    def _list(self, prefix: str) -> builtins.list[ObjectInfo]:
        base = self._path(prefix) if prefix.strip("/") else self.root
        out: list[ObjectInfo] = []
        if os.path.isfile(base) and not os.path.islink(base):
            if prefix.endswith("/"):  # a file where a directory of objects belongs: never "no objects"
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), base)
            candidates = [base]
        else:
            candidates = []

            def walk_error(exc: OSError) -> None:  # os.walk drops errors unless told: an empty listing
                if not isinstance(exc, FileNotFoundError):  # would restore nothing and train from scratch
                    raise exc

            for dirpath, _, files in os.walk(base, onerror=walk_error):
                candidates.extend(os.path.join(dirpath, f) for f in files)
        for path in candidates:
            rel = os.path.relpath(path, self.root)
            if os.path.basename(rel).startswith((".tmp-", ".survivor-generations")):
                continue
            if not rel.startswith(prefix.rstrip("/")):
                continue
            try:
                st = os.lstat(path)
            except FileNotFoundError:  # deleted since the walk
                continue
            if not stat.S_ISREG(st.st_mode):  # a link (dangling, a loop) or a FIFO is no object
                continue
            out.append(ObjectInfo(rel, st.st_size, "", st.st_mtime_ns or 1))
        return sorted(out, key=lambda o: o.name)

    def remove_temporaries(self, older_than: float) -> int:
        """Removes the `.tmp-*` files an interrupted write or upload left (a SIGKILL between a
        temporary copy and its rename), last modified before `older_than`: a write under way now is
        younger. Never follows a link; returns how many were removed."""
        removed = 0
        for dirpath, dirnames, files in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            for name in files:
                if not name.startswith(".tmp-"):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                    if stat.S_ISREG(st.st_mode) and st.st_mtime < older_than:
                        os.unlink(path)
                        removed += 1
                except FileNotFoundError:
                    continue
        return removed

    def delete(self, names: Iterable[str]) -> None:
        """Removes the objects; one already gone is no error."""
        for name in names:
            try:
                os.remove(self._path(name))
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise self._error(exc, "deleting", name) from exc

    def upload(self, pairs: builtins.list[tuple[str, str]]) -> builtins.list[ObjectInfo]:
        """Copies each local file into the job dir atomically, in parallel; returns the stored copies' size and CRC32C."""

        def one(pair: tuple[str, str]) -> ObjectInfo:
            local, name = pair
            try:
                return store_one(local, name)
            except Refused:  # a link or a FIFO where the trainer's file was: not the job dir's doing
                raise
            except FileNotFoundError:  # a local file that went away (the trainer pruned it)
                if not os.path.exists(local):
                    raise
                raise self._error(
                    FileNotFoundError(errno.ENOENT, "a directory of the job dir went away"), "uploading", name
                ) from None
            except OSError as exc:
                raise self._error(exc, "uploading", name) from exc

        def store_one(local: str, name: str) -> ObjectInfo:
            path = self._path(name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
            os.close(fd)
            try:
                with open_file(local) as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                    dst.flush()
                    os.fsync(dst.fileno())
                os.replace(tmp, path)
            except BaseException:
                _remove_quietly(tmp)  # a partial copy is never left behind (a full disk stays usable)
                raise
            # the stored copy's checksum, not the source's: the source may have changed meanwhile
            return ObjectInfo(name, os.path.getsize(path), crc32c_of_file(path))

        with ThreadPoolExecutor(TRANSFERS) as pool:
            futures = [pool.submit(one, pair) for pair in pairs]
            wait(futures)  # every copy has finished (and cleaned up after itself) before one fails the call
            return [future.result() for future in futures]

    def download(self, pairs: builtins.list[tuple[str, str]]) -> None:
        """Copies objects to local files. A problem of the job dir's side is a StorageError (an object
        that is missing or not a plain file: NOT_FOUND); one of the local side (a full or read-only
        boot disk) is the OSError itself, so a caller can tell the two apart."""

        def one(pair: tuple[str, str]) -> None:
            name, local = pair
            with self._open_object(name) as src:
                os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
                with open(local, "wb") as dst:  # the local side: its OSError goes up as it is
                    while True:
                        block = self._read_object(src, name)
                        if not block:
                            break
                        dst.write(block)

        with ThreadPoolExecutor(TRANSFERS) as pool:
            list(pool.map(one, pairs))

    def upload_parts(self, parts: builtins.list[Part]) -> builtins.list[ObjectInfo]:
        """Stores each range of a local file as its object, in parallel, each atomically (a temporary
        copy renamed into place). Returns what each copy holds (size, CRC32C). A range whose bytes
        do not have the CRC32C its part expects is not stored, as Cloud Storage refuses such an
        upload: the file changed since it was read, and the returned checksum says so."""

        def one(part: Part) -> ObjectInfo:
            try:
                return store_one(part)
            except OSError as exc:  # the local file went away (the trainer pruned it), or the job dir's disk
                if isinstance(exc, Refused) or (isinstance(exc, FileNotFoundError) and not os.path.exists(part.local)):
                    raise
                raise self._error(exc, "uploading", part.name) from exc

        def store_one(part: Part) -> ObjectInfo:
            path = self._path(part.name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
            try:
                checksum, size = google_crc32c.Checksum(), 0
                with os.fdopen(fd, "wb") as out, _FileRange(part.local, part.offset, part.size) as source:
                    while block := source.read(1 << 20):
                        checksum.update(block)
                        out.write(block)
                        size += len(block)
                    out.flush()
                    os.fsync(out.fileno())
                crc = crc32c_text(checksum)
                if size == part.size and (not part.crc32c or crc == part.crc32c):
                    os.replace(tmp, path)
                    return ObjectInfo(part.name, size, crc, self._generation(path))
                _remove_quietly(tmp)
            except BaseException:
                _remove_quietly(tmp)  # a partial copy is never left behind (a full disk stays usable)
                raise
            return ObjectInfo(part.name, size, crc)

        with ThreadPoolExecutor(TRANSFERS) as pool:
            futures = [pool.submit(one, part) for part in parts]
            wait(futures)  # every copy has finished (and cleaned up after itself) before one fails the call
            return [future.result() for future in futures]

    def download_parts(self, parts: builtins.list[Part]) -> builtins.list[ObjectInfo]:
        """Writes each object into its range of a local file (which exists), in parallel; returns,
        for each, the bytes the object held and the CRC32C of its range as written. Errors as
        `download`'s."""

        def one(part: Part) -> ObjectInfo:
            with self._open_object(part.name) as src:
                fd = os.open(part.local, os.O_RDWR)  # the local side: its OSError goes up as it is
                try:
                    window = _FileWindow(fd, part.offset, part.size)
                    while block := self._read_object(src, part.name):
                        window.write(block)
                    window.finish()
                    return ObjectInfo(part.name, window.received, window.crc32c())
                finally:
                    os.close(fd)

        with ThreadPoolExecutor(TRANSFERS) as pool:
            futures = [pool.submit(one, part) for part in parts]
            wait(futures)  # no write into the file is left running when one fails the call
            return [future.result() for future in futures]

    def _open_object(self, name: str):
        """The object's file, opened for reading; a StorageError (NOT_FOUND) if it is missing or not
        a plain file."""
        where = self._path(name)
        try:
            # never through a link (a blob that is one could hand out any file of this machine), and
            # never blocked on a FIFO: both are refused below as not plain files
            source = os.open(where, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError as exc:
            raise StorageError(f"{where}: download: no such object", object=where, reason=NOT_FOUND) from exc
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENOTDIR):
                raise StorageError(f"{where}: download: not a plain file", object=where, reason=NOT_FOUND) from exc
            raise self._error(exc, "downloading", name) from exc
        src = os.fdopen(source, "rb")
        if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
            src.close()
            raise StorageError(f"{where}: download: not a plain file", object=where, reason=NOT_FOUND)
        return src

    def _read_object(self, src, name: str) -> bytes:
        try:
            return src.read(1 << 20)
        except OSError as exc:
            raise self._error(exc, "downloading", name) from exc


# -- Cloud Storage ---------------------------------------------------------------------------------


#: Failures only a local file can have: a download into a full or read-only boot disk, an upload of a
#: file the agent may not read. They are not the bucket's doing and pass through as the OSError.
_LOCAL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM})


class GcsStorage:
    """A job dir under `gs://BUCKET/PREFIX`, through google-cloud-storage.

    Honours `STORAGE_EMULATOR_HOST` (the client then talks to fake-gcs-server without credentials).
    Simple (single-request) uploads are used for small objects so that `if_generation_match` holds
    on the emulator as on GCS.
    """

    def __init__(self, url: str, project: str | None = None, client=None):
        # google-cloud-storage 3.17 fetches each bucket's metadata in a background thread to label
        # its trace spans (google/cloud/storage/_bucket_metadata_cache.py, read in
        # _helpers.create_trace_span_helper); with the object roles the agent needs that GET is a 403
        # it swallows. Turned off: the agent makes no bucket-metadata call at all.
        os.environ.setdefault(NO_BUCKET_METADATA_ENV, "true")
        import google.cloud.storage as gcs  # not `from google.cloud import`: mypy sees no such name there

        self.url = url.rstrip("/")
        self.bucket_name, self.prefix = split_gs_url(self.url)
        if client is None:
            if os.environ.get("STORAGE_EMULATOR_HOST"):
                from google.auth.credentials import AnonymousCredentials

                client = gcs.Client(project=project or "survivor-local", credentials=AnonymousCredentials())
            else:
                from google.auth.exceptions import DefaultCredentialsError

                try:
                    client = gcs.Client(project=project)
                except DefaultCredentialsError as exc:  # off a VM with no `gcloud auth application-default login`
                    raise StorageError(
                        f"{url}: no Google credentials ({exc}); run `gcloud auth application-default "
                        "login`, or set STORAGE_EMULATOR_HOST for the stand-in",
                        object=url,
                    ) from exc
        self.client = client
        # No request: the bucket's metadata needs storage.buckets.get, which the object roles the
        # agent needs do not grant; a missing bucket shows in the object calls' own 404s instead.
        self.bucket = client.bucket(self.bucket_name)
        # One pool for every transfer (files, chunks; up and down), kept for the agent's lifetime.
        self._transfers = ThreadPoolExecutor(TRANSFERS, thread_name_prefix="transfer")

    def _object(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def _relative(self, object_name: str) -> str:
        return object_name[len(self.prefix) + 1 :] if self.prefix else object_name

    def _url(self, name: str) -> str:
        return f"gs://{self.bucket_name}/{self._object(name)}" if name else f"gs://{self.bucket_name}/{self.prefix}"

    def _translate(self, exc: BaseException, call: str, name: str) -> BaseException:
        """Any failure of a call on `name` as a StorageError naming the object and why. A local file
        that went away (the trainer pruned it) is passed through: that is not the bucket's doing."""
        from google.api_core import exceptions as gexc

        if isinstance(
            exc, (StorageError, PreconditionFailed, FileNotFoundError, IsADirectoryError, NotADirectoryError, Refused)
        ):
            return exc
        if isinstance(exc, OSError) and exc.errno in _LOCAL_ERRNOS:
            return exc  # the boot disk's problem (full, read-only), not the bucket's: the caller decides
        url = self._url(name)
        needed = PERMISSION_FOR[call]
        if isinstance(exc, (gexc.Forbidden, gexc.Unauthorized)):
            permission = permission_named(exc.message, needed)
            return StorageError(
                f"{url}: {call}: permission denied, {permission} is missing: grant the VM's service account "
                f"Storage Object User (roles/storage.objectUser) on gs://{self.bucket_name} ({exc.message})",
                object=url,
                reason=FORBIDDEN,
                permission=permission,
            )
        if isinstance(exc, gexc.NotFound):
            # only a read or a download can miss an object; a write, list or upload that gets a 404
            # has no bucket to go to
            if bucket_missing(exc.message) or call in ("write", "list", "upload"):
                return StorageError(
                    f"gs://{self.bucket_name}: the bucket does not exist ({call} {url})",
                    object=url,
                    reason=BUCKET_MISSING,
                )
            return StorageError(f"{url}: {call}: no such object", object=url, reason=NOT_FOUND)
        detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        return StorageError(f"{url}: {call}: {detail}", object=url)

    def read(self, name: str, *, call: retry.StorageCall = retry.STORAGE_READ) -> Blob | None:
        """The object's bytes and generation, or None if it does not exist. `call`: the retry
        budget (a write reading back its own object keeps the write's)."""
        from google.api_core import exceptions as gexc

        blob = self.bucket.blob(self._object(name))
        try:
            for attempt in call:
                with attempt:
                    data = blob.download_as_bytes(**call.client())
        except gexc.NotFound as exc:
            if bucket_missing(exc.message):
                raise self._translate(exc, "read", name) from exc
            return None  # the object's own 404: it is not there
        except Exception as exc:
            raise self._translate(exc, "read", name) from exc
        return Blob(data, int(blob.generation or 0))

    def write(self, name: str, data: bytes, *, if_generation_match: int | None = None) -> int:
        """Uploads the object in one request (so `if_generation_match` holds), with its CRC32C for the server to check."""
        from google.api_core import exceptions as gexc

        blob = self.bucket.blob(self._object(name))
        try:
            for attempt in retry.STORAGE_WRITE:
                with attempt:
                    # retried even though conditional: a retry that finds its own bytes is recognised below
                    blob.upload_from_string(
                        data, if_generation_match=if_generation_match, checksum="crc32c", **retry.STORAGE_WRITE.client()
                    )
        except gexc.PreconditionFailed as exc:
            # A retried write whose first try landed (the answer was lost) now fails its own
            # precondition: if the object holds exactly our bytes, the write is ours.
            current = self.read(name, call=retry.STORAGE_WRITE)
            if current is not None and current.data == data:
                return current.generation
            raise PreconditionFailed(f"{name}: generation is not {if_generation_match}") from exc
        except Exception as exc:
            raise self._translate(exc, "write", name) from exc
        return int(blob.generation or 0)

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object under `prefix` with its size and the CRC32C the server stored."""
        try:
            blobs = list(
                self.client.list_blobs(self.bucket_name, prefix=self._object(prefix), **retry.STORAGE_READ.client())
            )
        except Exception as exc:
            raise self._translate(exc, "list", prefix) from exc
        return sorted(
            (
                ObjectInfo(self._relative(b.name), int(b.size or 0), b.crc32c or "", int(b.generation or 0))
                for b in blobs
            ),
            key=lambda o: o.name,
        )

    def remove_temporaries(self, older_than: float) -> int:
        """Nothing to remove: an upload to Cloud Storage is never visible half done."""
        return 0

    def delete(self, names: Iterable[str]) -> None:
        """Deletes the objects in parallel; one already gone is no error."""
        from google.api_core import exceptions as gexc

        def one(name: str) -> None:
            try:
                self.bucket.blob(self._object(name)).delete(**retry.STORAGE_READ.client())
            except gexc.NotFound as exc:
                if bucket_missing(exc.message):
                    raise self._translate(exc, "delete", name) from exc
            except Exception as exc:
                raise self._translate(exc, "delete", name) from exc

        with ThreadPoolExecutor(PARALLELISM) as pool:
            list(pool.map(one, list(names)))

    def upload(self, pairs: builtins.list[tuple[str, str]]) -> builtins.list[ObjectInfo]:
        """Uploads each local file to its object on the job dir's transfer pool; returns what the server stored."""

        def one(pair: tuple[str, str]) -> ObjectInfo:
            local, name = pair
            blob = self.bucket.blob(self._object(name))
            try:
                for attempt in retry.STORAGE_UPLOAD:
                    with attempt:
                        # content-addressed names make a repeated upload harmless; the content type is
                        # given so the client does not guess one (its first guess reads /etc/mime.types,
                        # ~10 ms that would land on an emergency commit)
                        with open_file(local) as f:  # a trainer's file (an event file): never through a link
                            blob.upload_from_file(
                                f,
                                size=os.fstat(f.fileno()).st_size,
                                content_type="application/octet-stream",
                                checksum="crc32c",
                                **retry.STORAGE_UPLOAD.client(),
                            )
            except Exception as exc:
                raise self._translate(exc, "upload", name) from exc
            # the crc32c the server stored, which is what a later restore will verify against
            return ObjectInfo(name, int(blob.size or 0), blob.crc32c or "")

        return self._all(one, pairs)

    def download(self, pairs: builtins.list[tuple[str, str]]) -> None:
        """Downloads each object to its local file in parallel, the client checking its CRC32C."""

        def one(pair: tuple[str, str]) -> None:
            name, local = pair
            os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
            blob = self.bucket.blob(self._object(name))
            try:
                for attempt in retry.STORAGE_DOWNLOAD:
                    with attempt:
                        # the client checks the bytes against the object's crc32c (a truncated or mangled
                        # transfer is retried); the caller then verifies each file against the manifest
                        blob.download_to_filename(local, checksum="crc32c", **retry.STORAGE_DOWNLOAD.client())
            except Exception as exc:
                raise self._translate(exc, "download", name) from exc

        self._all(one, pairs)

    def upload_parts(self, parts: builtins.list[Part]) -> builtins.list[ObjectInfo]:
        """Uploads each range of a local file as its object, in parallel on the job dir's transfer
        pool, each read through a `_FileRange` (a transfer holds at most its range in memory).
        Returns what the server stored (size, CRC32C), which the caller compares with what it
        expected: a file that changed since it was read shows there."""

        def one(part: Part) -> ObjectInfo:
            blob = self.bucket.blob(self._object(part.name))
            try:
                for attempt in retry.STORAGE_UPLOAD:
                    with attempt, _FileRange(part.local, part.offset, part.size) as source:
                        blob.upload_from_file(
                            source,
                            size=part.size,
                            content_type="application/octet-stream",
                            checksum="crc32c",
                            **retry.STORAGE_UPLOAD.client(),
                        )
            except Exception as exc:
                raise self._translate(exc, "upload", part.name) from exc
            return ObjectInfo(part.name, int(blob.size or 0), blob.crc32c or "", int(blob.generation or 0))

        return self._all(one, parts)

    def download_parts(self, parts: builtins.list[Part]) -> builtins.list[ObjectInfo]:
        """Downloads each object into its range of a local file (which exists), in parallel on the
        job dir's transfer pool, each written in place and checksummed as it streams in. Returns,
        for each, the bytes the object held and the CRC32C of its range as written."""

        def one(part: Part) -> ObjectInfo:
            blob = self.bucket.blob(self._object(part.name))
            fd = os.open(part.local, os.O_RDWR)
            try:
                try:
                    for attempt in retry.STORAGE_DOWNLOAD:
                        with attempt:
                            window = _FileWindow(fd, part.offset, part.size)
                            stream = window.buffered()
                            try:
                                # the client checks the bytes against the object's crc32c (a truncated or
                                # mangled transfer is retried); the caller checks them against the manifest
                                blob.download_to_file(stream, checksum="crc32c", **retry.STORAGE_DOWNLOAD.client())
                                stream.flush()
                            finally:
                                window.finish()
                except Exception as exc:
                    raise self._translate(exc, "download", part.name) from exc
                return ObjectInfo(part.name, window.received, window.crc32c())
            finally:
                os.close(fd)

        return self._all(one, parts)

    def _all(self, one, items: builtins.list) -> builtins.list:
        """Runs `one` on every item on the transfer pool; waits for all of them (no transfer is left
        running when one fails the call), then returns their results or raises the first failure."""
        futures = [self._transfers.submit(one, item) for item in items]
        wait(futures)
        return [future.result() for future in futures]
