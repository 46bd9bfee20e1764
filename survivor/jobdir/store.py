"""The checkpoint store: committed snapshots of the trainer's job dir, in the job dir's storage.

    >>> store = CheckpointStore(open_storage("gs://bucket/run-1"), keep=3)
    >>> manifest = store.commit("/var/lib/survivor/job", scan("/var/lib/survivor/job"), attempt=4)
    >>> store.restore("/var/lib/survivor/job")     # on the next boot
    Manifest(step=1200, attempt=4, ...)

Layout under the job dir:

    survivor/blobs/chunks/<sha256>                  pieces of files, immutable, shared between snapshots
    survivor/snapshots/<step>-<attempt>-<seq>.json  manifests: the commit points

A manifest (format 2) lists each file as its size, its CRC32C and its chunks in order (offset, size,
CRC32C, object), cut every `chunk_size` bytes (`survivor.jobdir.chunks`). A chunk the job dir already
holds is not uploaded again, so the part of a checkpoint that did not change since the last commit
(frozen layers, embeddings) costs nothing, and the commit after a notice sends only what the last
save changed. Chunks move many at once, on the storage's transfer pool, each read from or written
to its own range of the file: a commit or a restore holds at most one chunk per transfer in memory.

A snapshot is committed at one moment: when its manifest is written, after every chunk it lists is
stored and its stored checksum matches (or, for a chunk already stored, the file's bytes still have
its checksum). A reader only ever follows manifests, so a half-uploaded snapshot is invisible.
Restore takes the newest manifest whose files all verify (each chunk's CRC32C as written, then the
whole file's size and CRC32C) and falls back to the previous one; a manifest naming a path that
would leave the local dir is refused, and so is a manifest of any format but 2 (format 1, a
whole-file blob per file, was written only by a store never released). Snapshots beyond `keep`, and
blobs and chunks no kept snapshot uses, are deleted only after a newer commit.
"""

from __future__ import annotations

import base64
import datetime as _dt
import functools
import hashlib
import json
import os
import posixpath
import re
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Callable, TypeGuard

from survivor import log as logs
from survivor.jobdir.chunks import CHUNK_SIZE, CHUNKS, FileDigest, chunk_object, combine_crc32c, digest_file, fits
from survivor.jobdir.snapshot import LocalFile, Snapshot, resumable
from survivor.jobdir.storage import (
    NOT_FOUND,
    JobStorage,
    ObjectInfo,
    Part,
    PreconditionFailed,
    StorageError,
    crc32c_of_bytes,
    crc32c_of_range,
    parse_json,
)
from survivor.jobdir.trainer_files import Refused, open_regular

SNAPSHOTS = "survivor/snapshots/"
BLOBS = "survivor/blobs/"
#: The manifest format this survivor writes and reads: files as chunks. Format 1 (a whole-file blob
#: per file) was written only by an unreleased store; a manifest of it is refused by name like any other.
FORMAT = 2

log = logs.get("store")


#: The largest manifest read: 100,000 files take about 20 MB. A bigger object is not a manifest
#: survivor wrote, and reading it would only cost the boot its memory.
MAX_MANIFEST_BYTES = 64 << 20


class ManifestError(ValueError):
    """A manifest that must not be followed: not the exact schema, an implausible step, a path
    escaping the local dir. Its snapshot has failed verification."""


class RestoreFailed(Exception):
    """A restore that could not be done for a reason other than the snapshots themselves: the boot
    disk (full, read-only) or the network. Starting from scratch would throw committed work away,
    so the boot ends and a later one restores the same snapshot. `local`: the boot disk's doing."""

    def __init__(self, message: str, *, local: bool):
        super().__init__(message)
        self.local = local


class SnapshotChanged(Exception):
    """A file changed while it was uploaded; the snapshot is retried at the next sync."""


@dataclass(frozen=True)
class ChunkEntry:
    """One chunk of a committed file: `size` bytes at `offset`, their CRC32C, the object holding them."""

    offset: int
    size: int
    crc32c: str
    object: str


@dataclass(frozen=True)
class FileEntry:
    """One file of a committed snapshot: its size, its CRC32C and its chunks in order."""

    path: str
    size: int
    crc32c: str
    chunks: tuple[ChunkEntry, ...] = ()

    def to_json(self) -> dict:
        """The entry as its manifest's JSON holds it."""
        return {"path": self.path, "size": self.size, "crc32c": self.crc32c, "chunks": [vars(c) for c in self.chunks]}


@dataclass(frozen=True)
class Manifest:
    """A committed snapshot: which files, at which step, written by which attempt and when.

    `parent` is the manifest this one continues (the snapshot the attempt restored, then its own
    previous commit): "" for a start from scratch, None when unknown (a manifest written before
    survivor recorded it). `abandoned` names the snapshots the restore before it skipped because
    they failed verification. Together they say which lineage a snapshot belongs to, which
    garbage collection needs (`snapshots_to_delete`).
    """

    step: int
    attempt: int
    seq: int
    files: tuple[FileEntry, ...]
    created: str = ""
    writer: str = ""
    parent: str | None = None
    abandoned: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The object this manifest is stored as."""
        return manifest_name(self.step, self.attempt, self.seq)

    @property
    def size(self) -> int:
        """The bytes of all its files: what a restore needs on the boot disk."""
        return sum(f.size for f in self.files)

    @property
    def resumable(self) -> bool:
        """Whether it holds a whole checkpoint of its step (`snapshot.resumable`): a commit taken while
        a save was still arriving does not, and is never the only one kept nor restored before one that does."""
        return resumable([f.path for f in self.files], self.step)

    def to_json(self) -> bytes:
        """The manifest's stored bytes (`from_json` reads them back)."""
        body = {
            "format": FORMAT,
            "step": self.step,
            "attempt": self.attempt,
            "seq": self.seq,
            "created": self.created,
            "writer": self.writer,
            "files": [f.to_json() for f in self.files],
        }
        if self.parent is not None:
            body["parent"] = self.parent
        if self.abandoned:
            body["abandoned"] = list(self.abandoned)
        return json.dumps(body, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, max_step: int | None = None) -> "Manifest":
        """Parses a manifest into the exact schema; raises ManifestError for anything else.

        Every field has its one type (an integer is never a float, a string or a boolean), numbers
        are finite and in range, there is at least one file, no path leaves the local dir and no
        object lies outside the chunks. The format is 2: each file is listed as `chunks` that cover
        it end to end, in order, none empty. `max_step` (the job's `train_steps`) bounds the step:
        a snapshot beyond the end of training is not one this job wrote. Unknown keys are ignored.
        """
        try:
            raw = parse_json(data)
        except ValueError as exc:
            raise ManifestError(f"not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise ManifestError(f"expected a JSON object, got {type(raw).__name__}")
        fmt = raw.get("format")
        if not _is_int(fmt) or fmt != FORMAT:
            said = f"format {_show(fmt)}" if "format" in raw else "no format"
            if "format" not in raw or (_is_int(fmt) and fmt == 1):
                said += " (whole-file blobs, written only by a store never released)"
            raise ManifestError(f"{said}: this survivor reads format {FORMAT} only")
        step = _integer(raw, "step", required=True, maximum=max_step)
        attempt = _integer(raw, "attempt", required=True)
        seq = _integer(raw, "seq", required=False)
        created, writer = _string(raw, "created"), _string(raw, "writer")
        parent = raw.get("parent")
        if parent is not None and not isinstance(parent, str):
            raise ManifestError(f"parent {_show(parent)}: expected a manifest name")
        abandoned = raw.get("abandoned", [])
        if not isinstance(abandoned, list) or not all(isinstance(a, str) for a in abandoned):
            raise ManifestError("abandoned: expected a list of manifest names")
        files = raw.get("files")
        if not isinstance(files, list):
            raise ManifestError(f"files {_show(files)}: expected a list")
        if not files:
            raise ManifestError("files: empty (a snapshot names at least one file)")
        entries = [_file_entry(item, index) for index, item in enumerate(files)]
        check_layout([e.path for e in entries])
        return cls(step, attempt, seq, tuple(entries), created, writer, parent, tuple(abandoned))


def _is_int(value) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _show(value) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


#: The largest number a manifest holds: a byte count or step beyond it is no file or job of this world.
_LARGEST = 1 << 62


def _integer(raw: dict, key: str, *, required: bool, maximum: int | None = None) -> int:
    if key not in raw and not required:
        return 0
    value = raw.get(key)
    if not _is_int(value):
        raise ManifestError(f"{key} {_show(value)}: expected a whole number")
    if value < 0 or value > _LARGEST:
        raise ManifestError(f"{key} {value}: out of range")
    if maximum is not None and value > maximum:
        raise ManifestError(f"{key} {value}: beyond the job's train_steps ({maximum})")
    return value


def _string(raw: dict, key: str) -> str:
    value = raw.get(key, "")
    if not isinstance(value, str):
        raise ManifestError(f"{key} {_show(value)}: expected a string")
    return value


def _file_entry(item, index: int) -> FileEntry:
    where = f"files[{index}]"
    if not isinstance(item, dict):
        raise ManifestError(f"{where}: expected an object, got {type(item).__name__}")
    for key in ("path", "crc32c"):
        if not isinstance(item.get(key), str):
            raise ManifestError(f"{where}.{key} {_show(item.get(key))}: expected a string")
    size = _integer(item, "size", required=True)
    crc = _crc32c(item["crc32c"], f"{where}.crc32c")
    path = item["path"]
    check_relative_path(path)
    if "object" in item:
        raise ManifestError(f"{where}.object: a manifest of format {FORMAT} lists a file as its chunks")
    chunks = item.get("chunks")
    if not isinstance(chunks, list):
        raise ManifestError(f"{where}.chunks {_show(chunks)}: expected a list")
    entries, end = [], 0
    for number, chunk in enumerate(chunks):
        at = f"{where}.chunks[{number}]"
        if not isinstance(chunk, dict):
            raise ManifestError(f"{at}: expected an object, got {type(chunk).__name__}")
        offset, length = _integer(chunk, "offset", required=True), _integer(chunk, "size", required=True)
        if offset != end or length == 0:
            raise ManifestError(
                f"{at}: {length} bytes at offset {offset}; chunks cover a file in order, the next one at {end}"
            )
        if not isinstance(chunk.get("crc32c"), str) or not isinstance(chunk.get("object"), str):
            raise ManifestError(f"{at}: crc32c and object are strings")
        entries.append(
            ChunkEntry(
                offset,
                length,
                _crc32c(chunk["crc32c"], f"{at}.crc32c"),
                _object(chunk["object"], CHUNKS, f"{at}.object"),
            )
        )
        end += length
    if end != size:
        raise ManifestError(f"{where}: its chunks hold {end} bytes, the file {size}")
    return FileEntry(path, size, crc, tuple(entries))


def _crc32c(value: str, where: str) -> str:
    try:
        if len(base64.b64decode(value, validate=True)) != 4:
            raise ValueError
    except ValueError:
        raise ManifestError(f"{where} {_show(value)}: expected a base64 CRC32C") from None
    return value


def _object(name: str, prefix: str, where: str) -> str:
    if not name.startswith(prefix) or ".." in name.split("/") or "\x00" in name:
        raise ManifestError(f"{where} {name!r} is outside {prefix}")
    return name


@dataclass
class CommitStats:
    """What a commit did and how long each part took."""

    manifest: Manifest
    uploaded_files: int = 0  # files with at least one chunk uploaded
    uploaded_bytes: int = 0
    upload_seconds: float = 0.0
    manifest_seconds: float = 0.0
    reused_files: int = 0  # files whose every chunk was already stored
    uploaded_chunks: int = 0
    reused_chunks: int = 0
    reused_bytes: int = 0


def manifest_name(step: int, attempt: int, seq: int) -> str:
    """Sortable manifest object name: newest last by (step, attempt, seq)."""
    return f"{SNAPSHOTS}{step:012d}-{attempt:06d}-{seq:04d}.json"


def check_relative_path(path: str) -> str:
    """Returns `path` if it stays inside a directory; raises ManifestError for `..`, `/abs`, empty."""
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        raise ManifestError(f"path {path!r} is not a plain relative path")
    normal = posixpath.normpath(path)
    if normal.startswith("../") or normal == ".." or normal == "." or ".." in path.split("/"):
        raise ManifestError(f"path {path!r} would escape the job dir")
    return normal


@functools.lru_cache(maxsize=8)
def _zeros(size: int) -> tuple[str, str]:
    """(SHA-256 hex, CRC32C) of `size` zero bytes."""
    data = bytes(size)
    return hashlib.sha256(data).hexdigest(), crc32c_of_bytes(data)


def is_zero_chunk(chunk: "ChunkEntry") -> bool:
    """True for a chunk whose bytes are all zeros (its name is their SHA-256): a restore leaves it a
    hole in the file instead of writing it, so a sparse file is restored as sparse as it was
    committed, and the boot disk's check counts only what is written."""
    return chunk.size > 0 and chunk.object.endswith("/" + _zeros(chunk.size)[0])


def zero_crc32c(size: int) -> str:
    """The CRC32C of `size` zero bytes."""
    return _zeros(size)[1]


def check_layout(paths: list[str]) -> None:
    """Pure: raises ManifestError unless the files can all be laid out in one directory: no path
    listed twice (once normalised) and none that is also another's directory (`F` beside `F/x`),
    which no restore could write. Such a manifest is its snapshot's own fault, refused with every
    other path rule when it is read, so the previous snapshot restores instead."""
    seen: dict[str, int] = {}
    for index, path in enumerate(paths):
        normal = check_relative_path(path)
        if normal in seen:
            raise ManifestError(f"files[{index}]: {path!r} is listed twice (as files[{seen[normal]}] too)")
        seen[normal] = index
    for normal, index in seen.items():
        parent = posixpath.dirname(normal)
        while parent:
            if parent in seen:
                raise ManifestError(
                    f"files[{index}]: {paths[index]!r} lies inside {paths[seen[parent]]!r}, "
                    f"which is listed as a file: the two cannot both exist"
                )
            parent = posixpath.dirname(parent)


def safe_join(root: str, path: str) -> str:
    """Joins a manifest path to `root`, refusing any that would land outside it."""
    rel = check_relative_path(path)
    full = os.path.normpath(os.path.join(root, rel))
    if not full.startswith(os.path.normpath(root) + os.sep):
        raise ManifestError(f"path {path!r} would escape the job dir")
    return full


def lineage(manifest: Manifest, by_name: dict[str, Manifest], committed: list[Manifest]) -> set[str]:
    """Pure: the snapshots `manifest` builds on, following `parent` back (an unknown parent stands
    for every snapshot at a lower step: how survivor read a job dir before it kept lineage), and
    those its restores abandoned as failing verification."""
    names: set[str] = set()
    visited = {manifest.name}
    current: Manifest | None = manifest
    while current is not None:
        names.update(current.abandoned)
        if current.parent is None:
            names.update(m.name for m in committed if m.step < current.step)
            break
        if not current.parent or current.parent in visited:  # a start from scratch; or a loop
            break
        names.add(current.parent)
        visited.add(current.parent)
        current = by_name.get(current.parent)
    return names


def snapshots_to_delete(valid_newest_first: list[Manifest], keep: int) -> list[Manifest]:
    """Pure decision: the committed snapshots garbage collection may delete.

    Kept: the newest `keep` that no later restore abandoned, and every snapshot no commit at a
    higher step of its own lineage has superseded. So a start from scratch (or from an older
    snapshot) never costs the newest committed work, whatever step the new lineage reaches; a
    snapshot that failed verification is not kept for its rank. A commit that a newer commit of the
    same step holds whole (every file unchanged: the step committed again as its files arrived, or
    with what the trainer wrote after its last save), or a commit of a save still arriving once a
    newer commit of its step holds the whole checkpoint, is replaced by it and takes no rank. And the
    newest commit a trainer can resume from (`Manifest.resumable`) is always kept: commits taken
    while a save was still arriving never push the last whole checkpoint out of `keep`.
    """
    by_name = {m.name: m for m in valid_newest_first}
    lineages = {m.name: lineage(m, by_name, valid_newest_first) for m in valid_newest_first}
    abandoned = {name for m in valid_newest_first for name in m.abandoned}
    superseded = {
        s.name for s in valid_newest_first for t in valid_newest_first if t.step > s.step and s.name in lineages[t.name]
    }
    replaced = {
        s.name
        for i, t in enumerate(valid_newest_first)
        for s in valid_newest_first[i + 1 :]
        if s.step == t.step and (set(s.files) <= set(t.files) or (t.resumable and not s.resumable))
    }
    ranked = [m for m in valid_newest_first if m.name not in abandoned and m.name not in replaced]
    kept = {m.name for m in ranked[:keep]}
    kept |= {m.name for m in ranked if m.name not in superseded}
    kept |= {m.name for m in [m for m in ranked if m.resumable][:1]}
    return [m for m in valid_newest_first if m.name not in kept]


def blobs_to_delete(all_blobs: list[str], kept: list[Manifest]) -> list[str]:
    """Pure decision: stored blobs no kept snapshot refers to (a chunk, or any other object under
    BLOBS: what a store never released wrote there is collected like an unused chunk)."""
    referenced = {c.object for m in kept for f in m.files for c in f.chunks}
    return [b for b in all_blobs if b not in referenced]


_NAME = re.compile(r"^(\d+)-(\d+)-(\d+)\.json$")


def _order(name: str) -> tuple:
    """Sort key of a manifest name, newest last, by number (a name survivor did not write: first)."""
    match = _NAME.match(posixpath.basename(name))
    return (1, *map(int, match.groups())) if match else (0, name)


class CheckpointStore:
    """Commits local snapshots to the job dir and restores the newest one that verifies.

    `max_step` (the job's `train_steps`) bounds the step a manifest may claim. `chunk_size`: where
    commits cut files (a snapshot scanned with another size is digested again; restore reads any).
    """

    def __init__(
        self,
        storage: JobStorage,
        keep: int = 3,
        writer: str = "",
        max_step: int | None = None,
        chunk_size: int = CHUNK_SIZE,
    ):
        self.storage = storage
        self.keep = keep
        self.writer = writer
        self.max_step = max_step
        self.chunk_size = chunk_size
        # Stored blobs and chunks, with the CRC32C the listing gave (Cloud Storage's; "" if unknown).
        #: the blobs and chunks stored, as this store last saw each verified (or as listed, with no
        #: CRC32C from a local job dir: verified by its SHA-256 before a commit may reuse it)
        self._known: dict[str, ObjectInfo] | None = None
        self._created, self._swept = time.time(), False
        self._seq = 0
        self._sizes: dict[str, int] = {}
        # The lineage the next commit continues: set by `restore` (None: this store never restored).
        self._parent: str | None = None
        self._abandoned: tuple[str, ...] = ()

    # -- reading ----------------------------------------------------------------------------------

    def manifest_names(self) -> list[str]:
        """Manifest object names, newest first."""
        listed = [o for o in self.storage.list(SNAPSHOTS) if o.name.endswith(".json")]
        self._sizes = {o.name: o.size for o in listed}
        return sorted((o.name for o in listed), key=_order, reverse=True)

    def parse(self, name: str, data: bytes, bounded: bool = True) -> Manifest:
        """Pure: the manifest stored as `name`, or ManifestError. Its contents must agree with its
        name, or garbage collection, which deletes by name, could be steered onto another.
        `bounded`: its step may not exceed `max_step`."""
        manifest = Manifest.from_json(data, max_step=self.max_step if bounded else None)
        if posixpath.basename(manifest.name) != posixpath.basename(name):
            raise ManifestError(
                f"it says step {manifest.step}, attempt {manifest.attempt}, seq {manifest.seq}, which is not its name"
            )
        return manifest

    def load(self, name: str, bounded: bool = True) -> Manifest | None:
        """Reads one manifest; None (with a warning naming it) if it is gone or fails verification."""
        size = self._sizes.get(name, 0)
        if size > MAX_MANIFEST_BYTES:
            log.warning(
                "ignoring a manifest that must not be followed",
                manifest=name,
                reason=f"{size} bytes, more than any manifest ({MAX_MANIFEST_BYTES})",
            )
            return None
        blob = self.storage.read(name)
        if blob is None:
            return None
        try:
            return self.parse(name, blob.data, bounded)
        except ManifestError as exc:
            log.warning("ignoring a manifest that must not be followed", manifest=name, reason=str(exc))
            return None

    def committed(self) -> list[Manifest]:
        """Every readable manifest, newest first."""
        return [m for m in (self.load(n) for n in self.manifest_names()) if m is not None]

    def latest(self) -> Manifest | None:
        """The newest readable manifest (not verified against its files)."""
        for name in self.manifest_names():
            manifest = self.load(name)
            if manifest is not None:
                return manifest
        return None

    # -- committing -------------------------------------------------------------------------------

    def known_blobs(self) -> set[str]:
        """The blobs and chunks already stored, listed once and then kept up to date by this store's
        own commits and deletions (one writer per job dir). A mirror calls it when it starts, so that
        its first commit, which may be the one after a notice, does not wait for the listing."""
        return set(self._listed())

    def _listed(self) -> dict[str, ObjectInfo]:
        if self._known is None:
            self._known = {o.name: o for o in self.storage.list(BLOBS)}
        return self._known

    def _reusable(self, part: Part) -> bool:
        """Whether a commit may name the stored chunk `part.name` instead of uploading it: only once
        its stored bytes are known to be the ones its name promises. A listed CRC32C (Cloud
        Storage's, of the bytes it holds) must be the chunk's; a chunk listed without one (a local
        job dir) is read back and its SHA-256, its name, checked once. Any other chunk is uploaded
        again, over what is stored (a damaged chunk reused by every later commit left no
        snapshot restorable)."""
        known = self._listed()
        info = known.get(part.name)
        if info is None:
            return False
        if info.crc32c:
            return info.crc32c == part.crc32c
        blob = self.storage.read(part.name)
        if (
            blob is None
            or len(blob.data) != part.size
            or hashlib.sha256(blob.data).hexdigest() != part.name.rsplit("/", 1)[-1]
        ):
            log.warning("a stored chunk does not hold the bytes its name says; sending it again", object=part.name)
            known.pop(part.name, None)
            return False
        known[part.name] = ObjectInfo(part.name, part.size, part.crc32c, info.generation)
        return True

    def _recheck(self, reused: list[Part]) -> None:
        """Beside a commit's uploads: every reused chunk is still stored as it was when it was
        verified (the same size and CRC32C, and the same generation: not written again since, by
        anyone). Raises SnapshotChanged and forgets the chunk otherwise, so the next attempt sends it."""
        known = self._listed()
        stored = {o.name: o for o in self.storage.list(CHUNKS)}
        for part in reused:
            now, then = stored.get(part.name), known.get(part.name)
            if (
                now is not None
                and now.size == part.size
                and (not now.crc32c or now.crc32c == part.crc32c)
                and (then is None or not then.generation or not now.generation or now.generation == then.generation)
            ):
                continue
            known.pop(part.name, None)
            raise SnapshotChanged(f"stored chunk {part.name} changed since it was verified (the commit sends it again)")

    def commit(
        self, local_root: str, snapshot: Snapshot, attempt: int, fence: Callable[[], None] | None = None
    ) -> CommitStats:
        """Uploads the snapshot's new chunks in parallel, then writes its manifest: the commit point.

        A chunk already stored is not sent again; the file's bytes at its range are checked against
        its CRC32C instead, beside the upload (a checksum taken while the file was being written
        may be stale). `fence()` raises if this writer may no longer commit (the lease's `fence`).
        It runs alongside the upload, where a round trip it may make costs nothing on the way to
        safety, and again right before the manifest write, where it only checks that its proof is
        still fresh. Raises SnapshotChanged if a file changed since it was read (nothing is
        committed then).
        """
        if snapshot.step is None:
            raise ValueError("a snapshot without a step cannot be committed")
        entries = tuple(self._entry(local_root, f) for f in snapshot.files)
        self._listed()  # one listing of the stored chunks, before the first `_reusable`
        todo: dict[str, Part] = {}  # one upload per chunk, even one that a commit holds twice
        reused: list[Part] = []
        chosen: set[str] = set()
        for entry in entries:
            for c in entry.chunks:
                part = Part(os.path.join(local_root, entry.path), c.offset, c.size, c.object, c.crc32c)
                if c.object in todo or c.object in chosen:
                    continue
                chosen.add(c.object)
                if self._reusable(part):
                    reused.append(part)
                else:
                    todo[c.object] = part
        started = time.monotonic()
        beside = [_Beside(fence)] if fence is not None and todo else []
        if reused:
            beside.append(_Beside(lambda: _check_unchanged(reused)))
            beside.append(_Beside(lambda: self._recheck(reused)))
        try:
            stored_infos = self.storage.upload_parts(list(todo.values())) if todo else []
        except Refused as exc:  # swapped for a link or a FIFO since the scan: never read through
            raise SnapshotChanged(f"{os.path.relpath(exc.filename, local_root)}: {exc.strerror}") from None
        finally:
            errors = [error for side in beside if (error := side.join()) is not None]
        changed = self._keep_stored(list(todo.values()), stored_infos)
        if changed is not None:
            raise SnapshotChanged(
                f"{os.path.relpath(changed.local, local_root)} changed since it was read (at offset {changed.offset})"
            )
        uploaded = time.monotonic()
        if errors:
            raise errors[0]
        if fence is not None:
            fence()
        self._seq += 1
        manifest = Manifest(
            step=snapshot.step,
            attempt=attempt,
            seq=self._seq,
            files=entries,
            created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            writer=self.writer,
            parent=self._parent,
            abandoned=self._abandoned,
        )
        try:
            self.storage.write(manifest.name, manifest.to_json(), if_generation_match=0)
        except PreconditionFailed:
            raise SnapshotChanged(f"{manifest.name} already exists") from None
        if self._parent is not None:  # the lineage goes on from this commit
            self._parent, self._abandoned = manifest.name, ()
        done = time.monotonic()
        sent = set(todo)
        sending = [e for e in entries if any(c.object in sent for c in e.chunks)]
        return CommitStats(
            manifest=manifest,
            uploaded_files=len(sending),
            uploaded_bytes=sum(p.size for p in todo.values()),
            upload_seconds=uploaded - started,
            manifest_seconds=done - uploaded,
            reused_files=len(entries) - len(sending),
            uploaded_chunks=len(todo),
            reused_chunks=len(reused),
            reused_bytes=sum(p.size for p in reused),
        )

    def preupload(self, parts: list[Part]) -> int:
        """Uploads chunks of files still being written (their temporary names) that the store does
        not hold yet, so that the commit once the file is renamed into place reuses them: the upload
        overlaps the trainer's save. Nothing becomes restorable by it (only a manifest refers to a
        chunk). A chunk whose bytes changed under the upload is deleted again and left for the
        commit. Returns the bytes stored."""
        todo = {p.name: p for p in parts if not self._reusable(p)}
        if not todo:
            return 0
        self._keep_stored(list(todo.values()), self.storage.upload_parts(list(todo.values())))
        return sum(p.size for p in todo.values())

    def _keep_stored(self, parts: list[Part], infos: list) -> Part | None:
        """Records the uploaded chunks whose stored size and CRC32C are theirs; the first that is
        not (its file changed since it was read: the stored bytes are not what the name promises)
        is deleted and returned, and the rest are not recorded."""
        known = self._listed()
        for part, info in zip(parts, infos):
            if (info.crc32c and info.crc32c != part.crc32c) or info.size != part.size:
                self.storage.delete([part.name])
                known.pop(part.name, None)
                return part
            known[part.name] = ObjectInfo(part.name, info.size, info.crc32c or part.crc32c, info.generation)
        return None

    def _forget(self, name: str) -> None:
        """Drops a chunk found damaged: no commit reuses it before it is verified or stored again."""
        if self._known is not None:
            self._known.pop(name, None)

    def _entry(self, local_root: str, f: LocalFile) -> FileEntry:
        """The manifest's entry for a scanned file, its chunks cut at this store's chunk size (read
        again if the scan cut them otherwise, or not at all)."""
        digest = FileDigest(f.size, f.crc32c, f.chunks)
        if not (f.chunks or f.size == 0) or not fits(digest, self.chunk_size):
            try:
                digest = digest_file(os.path.join(local_root, f.path), self.chunk_size)
            except Refused as exc:  # swapped for a link or a FIFO since the scan
                raise SnapshotChanged(f"{f.path}: {exc.strerror}") from None
            if (digest.size, digest.crc32c) != (f.size, f.crc32c):
                raise SnapshotChanged(f"{f.path} changed since it was scanned")
        chunks = tuple(ChunkEntry(c.offset, c.size, c.crc32c, chunk_object(c)) for c in digest.chunks)
        return FileEntry(f.path, f.size, f.crc32c, chunks)

    def collect_garbage(self) -> tuple[int, int]:
        """Deletes the snapshots `snapshots_to_delete` picks and the blobs no other snapshot uses
        (one beyond `train_steps` keeps its blobs: restore skips it, but a raised `train_steps`
        would take it again). Returns (snapshots, blobs) deleted."""
        if not self._swept:  # what a killed agent's writes left (a local job dir's temporary copies), once:
            # older than this store, so no write of this process; the lease keeps other writers out
            self.storage.remove_temporaries(older_than=self._created)
            self._swept = True
        readable = [m for m in (self.load(n, bounded=False) for n in self.manifest_names()) if m is not None]
        valid = [m for m in readable if self.max_step is None or m.step <= self.max_step]
        doomed = snapshots_to_delete(valid, self.keep)
        if not doomed:
            return 0, 0
        kept = [m for m in readable if m not in doomed]
        self.storage.delete([m.name for m in doomed])
        orphans = blobs_to_delete([o.name for o in self.storage.list(BLOBS)], kept)
        self.storage.delete(orphans)
        if self._known is not None:
            for name in orphans:
                self._known.pop(name, None)
        return len(doomed), len(orphans)

    # -- restoring --------------------------------------------------------------------------------

    def restore(self, local_root: str, pass_over: str | None = None) -> Manifest | None:
        """Makes `local_root` hold the newest committed snapshot whose files all verify (but
        `pass_over`, the one the trainer last failed on: see `journal.snapshot_to_pass_over`).

        Returns its manifest, or None (with `local_root` empty) when nothing committed verifies.
        Only a snapshot that fails verification is skipped, with a warning naming it and why:
        a manifest that is not the exact schema or claims an implausible step, a file whose size or
        crc32c differs, an object that is missing, a path that would leave the dir. Anything else
        (no room on the boot disk, a download that failed after its retries) raises RestoreFailed:
        the snapshot may be perfectly good, so neither it nor the start from scratch is chosen.
        A missing permission or bucket raises its StorageError.
        """
        staging = local_root.rstrip("/") + ".restoring"
        abandoned: list[str] = []
        try:
            # The old contents go first: restore replaces them anyway, and the boot disk then needs
            # room for one snapshot, not two. A local job dir that is a link (a trainer that can
            # write the work dir swapped it) is not followed: the link goes, the restore makes a
            # real dir, and the boot trains on (it is no failure of the job).
            if os.path.islink(local_root):
                log.warning(
                    f"the local job dir {local_root} is a link (to {_link_target(local_root)}); "
                    "not following it: removing the link and restoring into a directory",
                    path=local_root,
                )
            _clear(local_root)
            names = self.manifest_names()
            partial: list[Manifest] = []  # commits of a save still arriving: tried after every whole one
            for name in names:
                if name == pass_over and name != names[-1]:  # never the only one left: that is a start over
                    log.warning(
                        "passing over the snapshot the trainer failed on at its last start; restoring the "
                        "one before it",
                        manifest=name,
                    )
                    abandoned.append(name)
                    continue
                manifest = self.load(name)
                if manifest is None:
                    abandoned.append(name)
                    continue
                if not manifest.resumable:
                    partial.append(manifest)
                    continue
                if self._restore_one(manifest, staging, local_root, abandoned, passed_over=partial):
                    return manifest
            for manifest in partial:  # no whole checkpoint verifies: the newest part of one is still the trainer's
                if manifest.name == pass_over:
                    # a part of a checkpoint its trainer failed on: nothing whole is lost by a start over,
                    # where restoring it again would fail every start until FAILED
                    log.warning(
                        "passing over a commit that holds no whole checkpoint, which the trainer failed on "
                        "at its last start",
                        manifest=manifest.name,
                        step=manifest.step,
                    )
                    abandoned.append(manifest.name)
                    continue
                if self._restore_one(manifest, staging, local_root, abandoned, passed_over=[]):
                    return manifest
            _clear(staging)
            os.makedirs(local_root)
        except OSError as exc:
            raise RestoreFailed(f"the boot disk: {_os_reason(exc)}", local=True) from exc
        self._parent, self._abandoned = "", tuple(abandoned)
        return None

    def _restore_one(
        self, manifest: Manifest, staging: str, local_root: str, abandoned: list[str], passed_over: list[Manifest]
    ) -> bool:
        """Fetches and verifies one snapshot; on success moves it into `local_root` and sets the
        lineage the next commit continues (the newer commits `passed_over`, which hold no whole
        checkpoint, abandoned with it), else adds it to `abandoned`. Returns whether it restored."""
        _clear(staging)
        os.makedirs(staging)
        problem = self._fetch_and_verify(manifest, staging)
        if problem:
            log.warning(
                "skipping a snapshot that does not verify", manifest=manifest.name, step=manifest.step, reason=problem
            )
            abandoned.append(manifest.name)
            return False
        os.replace(staging, local_root)
        for newer in passed_over:
            log.warning(
                "passing over a commit that holds no whole checkpoint (taken while its save was still "
                "arriving); restoring the newest one that does",
                manifest=newer.name,
                step=newer.step,
                restoring=manifest.name,
            )
        self._parent = manifest.name
        self._abandoned = tuple(abandoned) + tuple(m.name for m in passed_over)
        return True

    def _fetch_and_verify(self, manifest: Manifest, staging: str) -> str | None:
        """Downloads a snapshot into `staging`; returns what is wrong with it, or None.
        Raises RestoreFailed when the download itself failed for a reason not the snapshot's."""
        try:
            locals_ = [safe_join(staging, e.path) for e in manifest.files]
        except ManifestError as exc:
            return str(exc)
        free = shutil.disk_usage(staging).free
        needed = sum(c.size for f in manifest.files for c in f.chunks if not is_zero_chunk(c))
        if needed > free:
            raise RestoreFailed(
                f"snapshot {manifest.name} (step {manifest.step}) needs {needed} bytes; "
                f"the boot disk has {free} free at {staging}",
                local=True,
            )
        parts = []
        try:
            for entry, local in zip(
                manifest.files, locals_
            ):  # each chunk written in place, into a file of its full size
                os.makedirs(os.path.dirname(local), exist_ok=True)
                with open(local, "wb") as f:
                    f.truncate(entry.size)  # a hole: an all-zero chunk is left as one (a sparse file stays sparse)
                parts += [
                    Part(local, c.offset, c.size, c.object, c.crc32c) for c in entry.chunks if not is_zero_chunk(c)
                ]
            written = self.storage.download_parts(parts) if parts else []
        except StorageError as exc:
            if exc.reason == NOT_FOUND:  # an object the manifest names is gone: this snapshot is unusable
                return f"download failed: {exc}"
            if exc.lasting:  # no permission, no bucket: every snapshot would "fail"; starting over is wrong
                raise
            raise RestoreFailed(
                f"snapshot {manifest.name} (step {manifest.step}) could not be downloaded: {exc}", local=False
            ) from exc
        except OSError as exc:  # the boot disk's side of the download
            raise RestoreFailed(
                f"snapshot {manifest.name} (step {manifest.step}) could not be written to the "
                f"boot disk: {_os_reason(exc)}",
                local=True,
            ) from exc
        landed = {(p.local, p.offset): info for p, info in zip(parts, written)}
        for entry, local in zip(manifest.files, locals_):
            for c in entry.chunks:
                info = landed.get((local, c.offset)) or ObjectInfo(c.object, c.size, zero_crc32c(c.size))
                if info.size != c.size or info.crc32c != c.crc32c:
                    self._forget(c.object)  # the next commit that holds these bytes stores them again
                if info.size != c.size:
                    return f"{entry.path}: chunk at offset {c.offset} is {info.size} bytes, {c.size} in the manifest"
                if info.crc32c != c.crc32c:
                    return (
                        f"{entry.path}: chunk at offset {c.offset}: crc32c {info.crc32c} != {c.crc32c} in the "
                        f"manifest (corrupted)"
                    )
            try:
                size = os.path.getsize(local)
            except OSError:
                return f"{entry.path}: missing after download"
            if size != entry.size:
                return f"{entry.path}: size {size} != {entry.size} in the manifest"
            # a chunked file's CRC32C is its verified chunks' combined, each taken as its bytes were written
            crc = combine_crc32c(entry.chunks)
            if crc != entry.crc32c:
                return f"{entry.path}: crc32c {crc} != {entry.crc32c} in the manifest (corrupted)"
        return None


class _Beside:
    """`work()` run in a thread beside the caller's; `join()` waits and returns what it raised."""

    def __init__(self, work: Callable[[], None]):
        self.error: BaseException | None = None
        self._work = work
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # handed to the caller by join()
            self.error = exc

    def join(self) -> BaseException | None:
        self._thread.join()
        return self.error


def _check_unchanged(parts: list[Part]) -> None:
    """Raises SnapshotChanged unless each range of a local file still has its CRC32C."""
    for part in parts:
        try:
            fd = open_regular(part.local)
        except FileNotFoundError:
            raise SnapshotChanged(f"{part.local} went away") from None
        except Refused as exc:
            raise SnapshotChanged(f"{part.local}: {exc.strerror}") from None
        try:
            if (
                os.fstat(fd).st_size < part.offset + part.size
                or crc32c_of_range(fd, part.offset, part.size) != part.crc32c
            ):
                raise SnapshotChanged(f"{part.local} changed since it was read (at offset {part.offset})")
        finally:
            os.close(fd)


def _clear(path: str) -> None:
    """Removes a directory tree; one that is not there is fine, one that cannot go is an OSError.
    A link at `path` is removed itself, never followed: its target is not the agent's to empty."""
    try:
        if os.path.islink(path):
            os.remove(path)
            return
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except NotADirectoryError:
        os.remove(path)


def _link_target(path: str) -> str:
    try:
        return os.readlink(path)[:200]
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def _os_reason(exc: OSError) -> str:
    what = exc.strerror or str(exc)
    return f"{exc.filename}: {what}" if getattr(exc, "filename", None) else what
