"""The checkpoint store: committed snapshots of the trainer's job dir, in the job dir's storage.

    >>> store = CheckpointStore(open_storage("gs://bucket/run-1"), keep=3)
    >>> manifest = store.commit("/var/lib/survivor/job", scan("/var/lib/survivor/job"), attempt=4)
    >>> store.restore("/var/lib/survivor/job")     # on the next boot
    Manifest(step=1200, attempt=4, ...)

Layout under the job dir:

    survivor/blobs/<path>.<crc32c-hex>.<size>       file contents, immutable, shared between snapshots
    survivor/snapshots/<step>-<attempt>-<seq>.json  manifests: the commit points

A snapshot is committed at one moment: when its manifest is written, after every file it lists is
stored and its stored checksum matches. A reader only ever follows manifests, so a half-uploaded
snapshot is invisible. Restore takes the newest manifest whose files all verify (size and crc32c)
and falls back to the previous one; a manifest naming a path that would leave the local dir is
refused. Unchanged files are not uploaded again (their blob already exists). Snapshots beyond `keep`
and blobs no kept snapshot uses are deleted only after a newer commit.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import os
import posixpath
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Callable

from survivor import log as logs
from survivor.snapshot import Snapshot
from survivor.storage import JobStorage, PreconditionFailed, StorageError, crc32c_of_file

SNAPSHOTS = "survivor/snapshots/"
BLOBS = "survivor/blobs/"
FORMAT = 1

log = logs.get("store")


class ManifestError(ValueError):
    """A manifest that must not be followed (unparseable, or a path escaping the local dir)."""


class SnapshotChanged(Exception):
    """A file changed while it was uploaded; the snapshot is retried at the next sync."""


@dataclass(frozen=True)
class FileEntry:
    """One file of a committed snapshot."""

    path: str
    size: int
    crc32c: str
    object: str


@dataclass(frozen=True)
class Manifest:
    """A committed snapshot: which files, at which step, written by which attempt and when."""

    step: int
    attempt: int
    seq: int
    files: tuple[FileEntry, ...]
    created: str = ""
    writer: str = ""

    @property
    def name(self) -> str:
        return manifest_name(self.step, self.attempt, self.seq)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format": FORMAT,
                "step": self.step,
                "attempt": self.attempt,
                "seq": self.seq,
                "created": self.created,
                "writer": self.writer,
                "files": [vars(f) for f in self.files],
            },
            indent=1,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "Manifest":
        """Parses and checks a manifest; raises ManifestError for anything unsafe or malformed."""
        try:
            raw = json.loads(data)
            files = tuple(
                FileEntry(str(f["path"]), int(f["size"]), str(f["crc32c"]), str(f["object"])) for f in raw["files"]
            )
            manifest = cls(int(raw["step"]), int(raw["attempt"]), int(raw.get("seq", 0)), files,
                           str(raw.get("created", "")), str(raw.get("writer", "")))
        except (ValueError, KeyError, TypeError) as exc:
            raise ManifestError(f"malformed manifest ({exc})") from None
        for entry in manifest.files:
            check_relative_path(entry.path)
            if not entry.object.startswith(BLOBS) or ".." in entry.object.split("/"):
                raise ManifestError(f"object {entry.object!r} is outside {BLOBS}")
        return manifest


@dataclass
class CommitStats:
    """What a commit did and how long each part took."""

    manifest: Manifest
    uploaded_files: int = 0
    uploaded_bytes: int = 0
    upload_seconds: float = 0.0
    manifest_seconds: float = 0.0
    reused_files: int = 0


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


def safe_join(root: str, path: str) -> str:
    """Joins a manifest path to `root`, refusing any that would land outside it."""
    rel = check_relative_path(path)
    full = os.path.normpath(os.path.join(root, rel))
    if not full.startswith(os.path.normpath(root) + os.sep):
        raise ManifestError(f"path {path!r} would escape the job dir")
    return full


def blob_name(path: str, crc32c: str, size: int) -> str:
    """The content-addressed object for one version of a file."""
    crc_hex = base64.b64decode(crc32c).hex() if crc32c else "nocrc"
    return f"{BLOBS}{path}.{crc_hex}.{size}"


def snapshots_to_delete(valid_newest_first: list[Manifest], keep: int) -> list[Manifest]:
    """Pure decision: the committed snapshots beyond the newest `keep`."""
    return valid_newest_first[keep:]


def blobs_to_delete(all_blobs: list[str], kept: list[Manifest]) -> list[str]:
    """Pure decision: stored blobs no kept snapshot refers to."""
    referenced = {f.object for m in kept for f in m.files}
    return [b for b in all_blobs if b not in referenced]


class CheckpointStore:
    """Commits local snapshots to the job dir and restores the newest one that verifies."""

    def __init__(self, storage: JobStorage, keep: int = 3, writer: str = ""):
        self.storage = storage
        self.keep = keep
        self.writer = writer
        self._known_blobs: set[str] | None = None
        self._seq = 0

    # -- reading ----------------------------------------------------------------------------------

    def manifest_names(self) -> list[str]:
        """Manifest object names, newest first."""
        names = [o.name for o in self.storage.list(SNAPSHOTS) if o.name.endswith(".json")]
        return sorted(names, reverse=True)

    def load(self, name: str) -> Manifest | None:
        """Reads one manifest; None (with a warning) if it is gone, malformed or unsafe."""
        blob = self.storage.read(name)
        if blob is None:
            return None
        try:
            return Manifest.from_json(blob.data)
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
        """The blobs already stored, listed once and then kept up to date by this store's own
        commits and deletions (one writer per job dir). A mirror calls it when it starts, so that
        its first commit, which may be the one after a notice, does not wait for the listing."""
        if self._known_blobs is None:
            self._known_blobs = {o.name for o in self.storage.list(BLOBS)}
        return self._known_blobs

    def commit(self, local_root: str, snapshot: Snapshot, attempt: int,
               fence: Callable[[], None] | None = None) -> CommitStats:
        """Uploads the snapshot's new files in parallel, then writes its manifest: the commit point.

        `fence()` raises if this writer may no longer commit (the lease's `fence`). It runs alongside
        the upload, where a round trip it may make costs nothing on the way to safety, and again
        right before the manifest write, where it only checks that its proof is still fresh.
        Raises SnapshotChanged if a file changed during the upload (nothing is committed then).
        """
        if snapshot.step is None:
            raise ValueError("a snapshot without a step cannot be committed")
        entries = [FileEntry(f.path, f.size, f.crc32c, blob_name(f.path, f.crc32c, f.size)) for f in snapshot.files]
        known = self.known_blobs()
        todo = [e for e in entries if e.object not in known]
        started = time.monotonic()
        early_fence, fence_errors = None, []
        if fence is not None and todo:
            def run_fence() -> None:
                try:
                    fence()
                except BaseException as exc:  # handed to this thread below
                    fence_errors.append(exc)

            early_fence = threading.Thread(target=run_fence, name="fence", daemon=True)
            early_fence.start()
        try:
            if todo:
                stored = self.storage.upload([(os.path.join(local_root, e.path), e.object) for e in todo])
                for entry, info in zip(todo, stored):
                    if (info.crc32c and info.crc32c != entry.crc32c) or info.size != entry.size:
                        # The file changed between checksum and upload: the stored bytes are not what
                        # the name promises, so drop them and let the next sync try again.
                        self.storage.delete([entry.object])
                        raise SnapshotChanged(f"{entry.path} changed while it was uploaded")
                    known.add(entry.object)
        finally:
            if early_fence is not None:
                early_fence.join()
        uploaded = time.monotonic()
        if fence_errors:
            raise fence_errors[0]
        if fence is not None:
            fence()
        self._seq += 1
        manifest = Manifest(
            step=snapshot.step,
            attempt=attempt,
            seq=self._seq,
            files=tuple(entries),
            created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            writer=self.writer,
        )
        try:
            self.storage.write(manifest.name, manifest.to_json(), if_generation_match=0)
        except PreconditionFailed:
            raise SnapshotChanged(f"{manifest.name} already exists") from None
        done = time.monotonic()
        return CommitStats(
            manifest=manifest,
            uploaded_files=len(todo),
            uploaded_bytes=sum(e.size for e in todo),
            upload_seconds=uploaded - started,
            manifest_seconds=done - uploaded,
            reused_files=len(entries) - len(todo),
        )

    def collect_garbage(self) -> tuple[int, int]:
        """Deletes snapshots beyond `keep` and unreferenced blobs. Returns (snapshots, blobs) deleted."""
        valid = self.committed()
        doomed = snapshots_to_delete(valid, self.keep)
        if not doomed:
            return 0, 0
        kept = valid[: self.keep]
        self.storage.delete([m.name for m in doomed])
        orphans = blobs_to_delete([o.name for o in self.storage.list(BLOBS)], kept)
        self.storage.delete(orphans)
        if self._known_blobs is not None:
            self._known_blobs.difference_update(orphans)
        return len(doomed), len(orphans)

    # -- restoring --------------------------------------------------------------------------------

    def restore(self, local_root: str) -> Manifest | None:
        """Makes `local_root` hold the newest committed snapshot whose files all verify.

        Returns its manifest, or None (with `local_root` empty) when nothing usable is committed.
        A snapshot that fails verification is skipped with a warning naming the file and why.
        """
        staging = local_root.rstrip("/") + ".restoring"
        for name in self.manifest_names():
            manifest = self.load(name)
            if manifest is None:
                continue
            shutil.rmtree(staging, ignore_errors=True)
            os.makedirs(staging)
            problem = self._fetch_and_verify(manifest, staging)
            if problem:
                log.warning("skipping a snapshot that does not verify", manifest=name, step=manifest.step, reason=problem)
                continue
            shutil.rmtree(local_root, ignore_errors=True)
            os.replace(staging, local_root)
            return manifest
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(local_root, ignore_errors=True)
        os.makedirs(local_root)
        return None

    def _fetch_and_verify(self, manifest: Manifest, staging: str) -> str | None:
        """Downloads a snapshot into `staging`; returns what is wrong with it, or None."""
        try:
            targets = [(e.object, safe_join(staging, e.path)) for e in manifest.files]
        except ManifestError as exc:
            return str(exc)
        try:
            self.storage.download(targets)
        except StorageError as exc:
            if exc.lasting:  # no permission, no bucket: every snapshot would "fail"; starting over is wrong
                raise
            return f"download failed: {exc}"
        except Exception as exc:  # a missing or unreadable object: this snapshot is unusable
            return f"download failed: {exc}"
        for entry, (_, local) in zip(manifest.files, targets):
            try:
                size = os.path.getsize(local)
            except OSError:
                return f"{entry.path}: missing after download"
            if size != entry.size:
                return f"{entry.path}: size {size} != {entry.size} in the manifest"
            crc = crc32c_of_file(local)
            if crc != entry.crc32c:
                return f"{entry.path}: crc32c {crc} != {entry.crc32c} in the manifest (corrupted)"
        return None
