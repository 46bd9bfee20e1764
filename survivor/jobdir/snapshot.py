"""What the trainer has completed in its local job dir: the files of a snapshot and its step.

    >>> snap = scan("/var/lib/survivor/job")
    >>> snap.step, [f.path for f in snap.files]
    (1200, ['checkpoint', 'ckpt-1200.data-00000-of-00001', 'ckpt-1200.index', 'hparams.json'])

The step comes from, in order: TensorFlow's `checkpoint` state file (`model_checkpoint_path:
"ckpt-1200"`), or the highest step a file's name holds, by the spec's `checkpoint_pattern` or the
default rule (`step_in_name`: the number right after `ckpt`/`checkpoint`, then only extensions; the
recipe's dummy trainer writes `dummy-checkpoint-N.json`). Never any other number in any name. Files still being written are left out: temporary names
(`*_temp*`, `*.tmp*`, dot files), TF checkpoint shards whose prefix the state file does not list
yet, and files whose size or mtime changed while they were read. A file that vanished or was
replaced between the listing and its read means the trainer was rotating its checkpoints under the
scan: the listing is taken again (`SCAN_TRIES`), never committed short of that file; so is one that
a second listing, taken after the reads, contradicts (a directory read is no atomic snapshot). TensorBoard
event files grow while training runs; they are mirrored as they are, outside snapshots (`is_event_file`).

Each file is read once, for its CRC32C and its chunks' digests together (`survivor.jobdir.chunks`):
the commit then knows which chunks the job dir already holds without reading the file again.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import Iterable

from survivor.jobdir.chunks import CHUNK_SIZE, ChunkDigest, Digester, FileDigest, digest_file
from survivor.jobdir.trainer_files import Refused, open_file

#: The file a trainer may write (atomically) with its current step, for live progress. Not a checkpoint.
PROGRESS_FILE = "survivor-progress.json"
#: TensorFlow's checkpoint state file (CheckpointManager's): names the newest checkpoint prefix.
TF_STATE_FILE = "checkpoint"

#: Listings a scan takes while they turn out stale (the trainer saving under it) before it gives up
#: for this round (an empty snapshot: the next sync scans again). A save takes milliseconds.
SCAN_TRIES = 5

_TEMP = re.compile(r"(^\.|_temp|\.tmp|\.tempstate|\.partial$|~$)")
#: A TensorFlow checkpoint shard: `<prefix>.index` or `<prefix>.data-<i>-of-<n>`.
TF_SHARD = re.compile(r"^(?P<prefix>.+)\.(index|data-\d{5}-of-\d{5})$")
_DATA_SHARD = re.compile(r"(?P<prefix>.+)\.data-\d{5}-of-(?P<count>\d{5})")
_TF_SUFFIX = re.compile(r"-(\d+)$")
_STATE_LINE = re.compile(r'^(model_checkpoint_path|all_model_checkpoint_paths):\s*"(.*)"\s*$')


@dataclass(frozen=True)
class LocalFile:
    """One file of a snapshot: path relative to the job dir, size, mtime (ns), crc32c (base64) and
    its chunks' digests (empty when not taken: the commit then reads the file for them)."""

    path: str
    size: int
    mtime_ns: int
    crc32c: str
    chunks: tuple[ChunkDigest, ...] = ()

    @classmethod
    def from_digest(cls, rel: str, st: os.stat_result, digest: FileDigest) -> LocalFile:
        """The file at `rel` as `digest` read it, with `st` (its stat) giving its mtime: the one
        way a snapshot's file is built, so a new field of `FileDigest` reaches every snapshot."""
        return cls(rel, digest.size, st.st_mtime_ns, digest.crc32c, digest.chunks)


@dataclass(frozen=True)
class Snapshot:
    """A set of completed files and the training step they hold (None when no step is found)."""

    step: int | None
    files: tuple[LocalFile, ...]
    named_by: str = ""  # the file that gave the step (TensorFlow's state file, or one whose name holds it)
    naming: re.Pattern | None = None  # the spec's checkpoint_pattern it was scanned with

    def fingerprint(self) -> frozenset[tuple[str, int, str]]:
        """What changes when any file changes: used to skip commits of an identical snapshot."""
        return frozenset((f.path, f.size, f.crc32c) for f in self.files)

    @property
    def resumable(self) -> bool:
        """Whether it holds a whole checkpoint of its step (`resumable`): not a save still arriving."""
        return resumable([f.path for f in self.files], self.step, naming=self.naming)


def is_temporary(rel_path: str) -> bool:
    """True for names a writer uses before its atomic rename."""
    return any(_TEMP.search(part) for part in rel_path.split("/"))


def is_event_file(rel_path: str) -> bool:
    """True for TensorBoard event files, which grow while training runs."""
    return os.path.basename(rel_path).startswith("events.out.tfevents")


def parse_tf_state(text: str) -> tuple[str | None, list[str]]:
    """Parses TF's `checkpoint` state file: (latest prefix, every listed prefix)."""
    latest, listed = None, []
    for line in text.splitlines():
        m = _STATE_LINE.match(line.strip())
        if not m:
            continue
        if m.group(1) == "model_checkpoint_path":
            latest = m.group(2)
        else:
            listed.append(m.group(2))
    if latest and latest not in listed:
        listed.append(latest)
    return latest, listed


def prefix_step(prefix: str, naming: re.Pattern | None = None) -> int | None:
    """Pure: the step of a TensorFlow checkpoint prefix (what the `checkpoint` state file names, the
    stem of `.index` and `.data-*` shards): by the spec's `naming` pattern when set, else TensorFlow's
    own convention, a `-<step>` suffix (`CheckpointManager.save(checkpoint_number=...)` and
    `Saver.save(global_step=...)` write `<prefix>-<N>`: tensorflow/python/checkpoint/checkpoint_management.py).
    Any other number is none: Keras's `ckpt-07-0.7641` (an epoch and a metric) holds no step.

        >>> prefix_step("ckpt-1200"), prefix_step("model.ckpt-1200"), prefix_step("ckpt-07-0.7641")
        (1200, 1200, None)
    """
    base = os.path.basename(prefix)
    if naming is not None:
        found = naming.fullmatch(base)
        return int(found.group("step")) if found else None
    found = _TF_SUFFIX.search(base)
    return int(found.group(1)) if found else None


#: The default rule for a step in a file name: the whole number right after a checkpoint word
#: (`ckpt`, `checkpoint`, after a separator or at the start), followed by nothing but extensions:
#: `ckpt-1200.index`, `model.ckpt-1200.data-00000-of-00001`, `dummy-checkpoint-8.json`,
#: `checkpoint_30.weights.h5`. Any other number is no step (taken for one, it resumes nothing and hides the loss): Keras's
#: `ckpt-07-0.7641.keras` (an epoch and a metric), `checkpoint.weights.h5`,
#: `checkpoint-config-20261127.yaml` name none; a job whose files do should set `checkpoint_pattern`.
DEFAULT_STEP_NAME = re.compile(r"(?:.*[-_.])?(?:ckpt|checkpoint)[-_]?(?P<step>\d+)(?:\.[A-Za-z0-9_-]+)*", re.I)


def step_in_name(rel_path: str, naming: re.Pattern | None = None) -> int | None:
    """Pure: the step a file's name says it holds, by the spec's `naming` pattern (the spec's
    `checkpoint_pattern` as `spec.checkpoint_naming` compiles it, with a `step` group; matched
    against the path when it holds `/`, else the file name), else by
    `DEFAULT_STEP_NAME`; None when it says none. A number the rule does not name is content.

        >>> step_in_name("ckpt-1200.data-00000-of-00001"), step_in_name("ckpt-07-0.7641.keras")
        (1200, None)
        >>> step_in_name("checkpoint.weights.h5"), step_in_name("checkpoint-config-20261127.yaml")
        (None, None)
    """
    rule = naming or DEFAULT_STEP_NAME
    subject = rel_path if naming is not None and "/" in naming.pattern else os.path.basename(rel_path)
    found = rule.fullmatch(subject)
    return int(found.group("step")) if found else None


def decide_files_and_step(
    paths: list[str], tf_state: str | None, naming: re.Pattern | None = None
) -> tuple[int | None, list[str]]:
    """Pure decision: which relative paths make up the snapshot, and its step.

    `tf_state` is the text of a top-level `checkpoint` state file, if any: its newest prefix is the
    step. Otherwise the step is the highest a file's name says (`step_in_name`, by `naming`, the
    spec's `checkpoint_pattern`, when set); a file whose name says none is content, never the step.
    """
    candidates = [p for p in paths if not is_temporary(p) and not is_event_file(p) and p != PROGRESS_FILE]
    if tf_state is not None:
        latest, listed = parse_tf_state(tf_state)
        listed_bases = {os.path.basename(p) for p in listed}
        chosen = []
        for p in candidates:
            shard = TF_SHARD.match(os.path.basename(p))
            if shard and os.path.dirname(p) == "" and shard.group("prefix") not in listed_bases:
                continue  # a checkpoint still being written, or one the manager is about to delete
            chosen.append(p)
        return (prefix_step(latest, naming) if latest else None), sorted(chosen)
    numbered = [n for n in (step_in_name(p, naming) for p in candidates) if n is not None]
    return (max(numbered) if numbered else None), sorted(candidates)


def resumable(
    paths: Iterable[str], step: int | None, tf_state: str | None = None, naming: re.Pattern | None = None
) -> bool:
    """Pure: whether a snapshot of these relative `paths` at `step` holds a checkpoint of that step
    a trainer can resume from, as far as its file names tell.

    TensorFlow's checkpoint is a prefix's `.index` and every `.data-0000i-of-0000N` shard
    (tensorflow/core/util/tensor_bundle/naming.cc names them): a snapshot whose state file names
    `ckpt-N` (`tf_state`, or the step alone when the state file's text is not at hand) but lacks one
    of them is a save still arriving -- taken between a trainer's state file and its shards, or
    between its shards -- and `tf.train.latest_checkpoint` finds no checkpoint in it. Files of any
    other kind are taken at their word: a step read from their names is resumable.

        >>> resumable(["checkpoint", "ckpt-5.index", "ckpt-5.data-00000-of-00001"], 5)
        True
        >>> resumable(["checkpoint"], 5), resumable(["checkpoint", "ckpt-5.data-00000-of-00002", "ckpt-5.index"], 5)
        (False, False)
        >>> resumable(["dummy-checkpoint-5.json"], 5)
        True
    """
    if step is None:
        return False
    paths = set(paths)
    prefixes: set[str] = set()
    if tf_state is not None:
        latest, _ = parse_tf_state(tf_state)
        if latest:
            prefixes.add(os.path.basename(latest))
    for path in paths:
        shard = TF_SHARD.match(os.path.basename(path))
        if shard and os.path.dirname(path) == "" and prefix_step(shard.group("prefix"), naming) == step:
            prefixes.add(shard.group("prefix"))
    if not prefixes:
        # a state file naming a step no shard of this snapshot has: the shards have not arrived
        return TF_STATE_FILE not in paths
    return any(_whole_tf_checkpoint(prefix, paths) for prefix in prefixes)


def checkpoint_files(paths: set[str], step: int, naming: re.Pattern | None = None) -> set[str]:
    """Pure: which of `paths` belong to the checkpoint of `step`: TensorFlow's state file, the shards of
    a prefix of that step, and files whose names hold that step (`snapshot.step_in_name`)."""
    out = set()
    for path in paths:
        shard = TF_SHARD.match(os.path.basename(path))
        if (
            path == TF_STATE_FILE
            or step_in_name(path, naming) == step
            or (shard and prefix_step(shard.group("prefix"), naming) == step)
        ):
            out.add(path)
    return out


def _whole_tf_checkpoint(prefix: str, paths: set[str]) -> bool:
    """Whether `paths` hold `prefix.index` and every data shard its shards' names count."""
    if f"{prefix}.index" not in paths:
        return False
    counts = {int(m.group("count")) for p in paths if (m := _DATA_SHARD.fullmatch(p)) and m.group("prefix") == prefix}
    if len(counts) != 1:
        return False
    count = counts.pop()
    return all(f"{prefix}.data-{i:05d}-of-{count:05d}" in paths for i in range(count))


class Checksums:
    """The digests (CRC32C, chunks) of a job dir's files, kept across scans so that each byte is read once.

        >>> import pathlib, tempfile
        >>> job = tempfile.mkdtemp()
        >>> _ = pathlib.Path(job, "ckpt-100.index").write_bytes(b"step 100")
        >>> sums = Checksums()
        >>> scan(job, sums).files[0].crc32c          # read once; the next scan of it reads nothing
        'XIzdNw=='

    `chunk_size`: where files are cut (the checkpoint store's own chunk size).

    A finished file is known by (path, size, mtime). A file still being written (a temporary name)
    is read as it grows, a few bytes more each scan, and known by its inode: when the writer
    renames it into place its checksum is already there, so a commit need not read the whole file
    first (on the way to safety, the upload starts that much sooner). That relies on the writer
    appending, as checkpoint writers do. A writer that rewrites bytes it already wrote leaves a
    wrong checksum behind; the commit finds it out (the server's checksum of the uploaded bytes
    differs) and the caller then calls `forget`, so the next scan reads every file afresh.
    """

    def __init__(self, chunk_size: int = CHUNK_SIZE) -> None:
        self.chunk_size = chunk_size
        self._finished: dict[tuple[str, int, int], FileDigest] = {}
        self._growing: dict[tuple[int, int], _Growing] = {}
        self._seen_files: set[tuple[str, int, int]] = set()
        self._seen_inodes: set[tuple[int, int]] = set()

    def of(self, path: str, rel: str, st: os.stat_result) -> FileDigest:
        """The digest of the file at `path` as `st` describes it (call `keep` once it proved stable)."""
        digest = self._finished.get((rel, st.st_size, st.st_mtime_ns))
        if digest is not None:
            return digest
        growing = self._growing.pop((st.st_dev, st.st_ino), None)
        if growing is not None and growing.offset <= st.st_size:
            return growing.read_to(path, st.st_size)  # only the bytes written since the last scan
        return digest_file(path, self.chunk_size)

    def keep(self, rel: str, st: os.stat_result, digest: FileDigest) -> None:
        """Remembers the digest of a file that did not change while it was read."""
        key = (rel, st.st_size, st.st_mtime_ns)
        self._finished[key] = digest
        self._seen_files.add(key)

    def follow(self, path: str) -> None:
        """Reads what a file being written gained since the last scan (nothing if it is gone, or is
        no regular file any more)."""
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                return
            inode = (st.st_dev, st.st_ino)
            growing = self._growing.get(inode)
            if growing is None or st.st_size < growing.offset:  # new, or truncated and rewritten
                growing = self._growing[inode] = _Growing(self.chunk_size)
            growing.path = path
            growing.read_to(path, st.st_size)
        except (FileNotFoundError, Refused):
            return
        self._seen_inodes.add(inode)

    def growing_chunks(self) -> list[tuple[str, ChunkDigest]]:
        """(path, chunk) of every whole chunk of the files being written (temporary names) that the
        last scan followed: what may be uploaded before the writer renames its file into place. A
        chunk whose bytes the writer rewrites later simply gets another name at the commit."""
        return [(g.path, c) for g in self._growing.values() if g.path for c in g.digester.complete()]

    def forget(self) -> None:
        """Drops every checksum: after a commit found one that did not match the file's bytes."""
        self._finished.clear()
        self._growing.clear()

    def end_scan(self) -> None:
        """Drops what this scan did not see (deleted or replaced files), so the caches do not grow
        with time and a reused inode does not inherit a deleted file's bytes."""
        self._finished = {k: v for k, v in self._finished.items() if k in self._seen_files}
        self._growing = {k: v for k, v in self._growing.items() if k in self._seen_inodes}
        self._seen_files, self._seen_inodes = set(), set()


class _Growing:
    """A running digest of a file's first `offset` bytes."""

    def __init__(self, chunk_size: int) -> None:
        self.digester = Digester(chunk_size)
        self.path = ""  # where the file was last seen (its temporary name)

    @property
    def offset(self) -> int:
        return self.digester.offset

    def read_to(self, path: str, size: int) -> FileDigest:
        """Digests the bytes from `offset` up to `size`; returns the digest so far."""
        with open_file(path) as f:
            f.seek(self.digester.offset)
            self.digester.read(f, size)
        return self.digester.digest()


def scan(root: str, checksums: Checksums | None = None, naming: re.Pattern | None = None) -> Snapshot:
    """Reads the local job dir and returns the snapshot of its completed files (none when the
    dir itself is a link: it is never followed).

    `checksums` carries checksums across calls, so an unchanged multi-gigabyte checkpoint is not
    read again on every sync and one being written is read as it grows.

    The listing is stale, and taken again, when a file it chose is gone (or another file has its
    name) by the time it is read, or when a second listing after the reads names other files: the
    trainer saved under the scan, and a directory read is no atomic snapshot (CI caught a commit
    of `dummy-checkpoint-N.json` without its `.data`). After `SCAN_TRIES` stale listings the
    snapshot is empty, and the next sync tries again.
    """
    checksums = checksums if checksums is not None else Checksums()
    if os.path.islink(root):  # a trainer swapped its dir for a link: what it points at is no checkpoint
        return Snapshot(None, ())
    for _ in range(SCAN_TRIES):
        snapshot = _scan_once(root, checksums, naming)
        if snapshot is not None:
            return snapshot
    return Snapshot(None, ())


def step_now(root: str, naming: re.Pattern | None = None) -> int | None:
    """The step the local job dir holds now, from its names and state file alone (no file is read
    for its checksum): a cheap look for the agent's checks, never what a commit rests on."""
    if os.path.islink(root):
        return None
    tf_state = None
    try:
        if _regular(os.path.join(root, TF_STATE_FILE)):
            with open_file(os.path.join(root, TF_STATE_FILE)) as f:
                tf_state = f.read(1 << 20).decode("utf-8", errors="replace")
    except OSError:
        pass
    return decide_files_and_step(_listing(root, None), tf_state, naming)[0]


def _scan_once(root: str, checksums: Checksums, naming: re.Pattern | None) -> Snapshot | None:
    """One listing of the job dir and the digests of what it chose; None if the listing was stale:
    a chosen file vanished or was replaced before it was read, or a second listing taken after the
    reads names other files (a directory read while the trainer renames and deletes is no snapshot
    of it: one listing showed `dummy-checkpoint-N.json` with no `.data` at all)."""
    paths = _listing(root, checksums)
    tf_state = None
    state_path = os.path.join(root, TF_STATE_FILE)
    if _regular(state_path):
        try:
            with open_file(state_path) as f:
                tf_state = f.read().decode("utf-8", errors="replace")
        except (FileNotFoundError, Refused):  # gone, or swapped for a link or a FIFO: the listing is stale
            return None
    step, chosen = decide_files_and_step(paths, tf_state, naming)
    files = []
    for rel in chosen:
        try:
            entry = _stable_entry(os.path.join(root, rel), rel, checksums)
        except _Vanished:
            return None
        if entry is not None:
            files.append(entry)
    if sorted(_listing(root, None)) != sorted(paths):
        return None
    checksums.end_scan()
    named_by = (
        TF_STATE_FILE
        if tf_state is not None
        else next((f.path for f in files if step is not None and step_in_name(f.path, naming) == step), "")
    )
    return Snapshot(step, tuple(files), named_by, naming)


def _listing(root: str, checksums: Checksums | None) -> list[str]:
    """The relative paths of the job dir's regular files that are not temporary; with `checksums`,
    the temporary ones (a checkpoint being written) are followed as they grow."""
    paths = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            if not _regular(os.path.join(dirpath, name)):
                continue  # a link or a FIFO the trainer left: never followed, never opened (a FIFO blocks)
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if is_temporary(rel) and not is_event_file(rel):
                if checksums is not None:
                    checksums.follow(os.path.join(root, rel))
            else:
                paths.append(rel)
    return paths


class _Vanished(Exception):
    """A listed file was gone, or another file had taken its name, when it was read."""


def _stable_entry(path: str, rel: str, checksums: Checksums) -> LocalFile | None:
    """Checksums a file, or returns None if it changed while being read (written in place); raises
    `_Vanished` if it is gone or was replaced (by a link or a FIFO too: `trainer_files.Refused`)."""
    try:
        before = os.lstat(path)
        if not stat.S_ISREG(before.st_mode):
            return None
        digest = checksums.of(path, rel, before)
        after = os.lstat(path)
    except (FileNotFoundError, Refused):
        raise _Vanished(rel) from None
    if before.st_ino != after.st_ino:
        raise _Vanished(rel)
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
        return None
    if digest.size != after.st_size:  # read while it was still being written (the stat raced the write)
        return None
    checksums.keep(rel, after, digest)
    return LocalFile.from_digest(rel, after, digest)


def event_files(root: str) -> list[str]:
    """Relative paths of TensorBoard event files under the local job dir."""
    out = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if is_event_file(rel) and _regular(os.path.join(dirpath, name)):
                out.append(rel)
    return sorted(out)


def _regular(path: str) -> bool:
    """True for a regular file itself, not a link to one: a job dir's files are the trainer's, and
    the agent (perhaps root) reading through a link it left would upload whatever it points at."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
