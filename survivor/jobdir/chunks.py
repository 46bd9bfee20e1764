"""Chunks: how the checkpoint store cuts a file into pieces that are stored, sent and reused alone.

    >>> digest = digest_file("/var/lib/survivor/job/ckpt-9.data-00000-of-00001", chunk_size=32 << 20)
    >>> digest.size, digest.crc32c, len(digest.chunks)
    (104857600, 'mJ4c9w==', 4)
    >>> chunk_object(digest.chunks[0])
    'survivor/blobs/chunks/5f0c2c...e1'

A file is cut at fixed offsets (every `chunk_size` bytes, the last chunk shorter). Each chunk is one
immutable object named by the SHA-256 of its bytes, so a chunk already in the job dir is never sent
again: the frozen layers of a model, whose bytes sit at the same offsets of every checkpoint, cost
one upload for the whole run. Uploads and downloads move many chunks at once, and one chunk is the
most any transfer holds in memory.

Two checksums, for two jobs. The CRC32C is what Cloud Storage computes and checks on every transfer
and what restore verifies each chunk and the whole file against (the whole file's is combined from
its chunks', `combine_crc32c`, never read twice). The SHA-256 names the chunk: 32 bits of CRC cannot
(a job that uploads a few hundred thousand chunks over its life would, by the birthday bound, reuse a
different chunk's object now and then, and restore could not tell: the CRC would match).

Settings (environment, read here once): `SURVIVOR_CHUNK_MIB`, the chunk size in MiB (default 32).
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass

import google_crc32c

from survivor.jobdir.storage import CRC_BLOCK
from survivor.jobdir.trainer_files import open_file

#: Where chunks live among the job dir's blobs.
CHUNKS = "survivor/blobs/chunks/"
#: Bytes in a chunk (the last of a file holds the rest). Big enough that a request's fixed cost is small
#: beside its transfer, small enough that many are in flight at once within a bounded memory.
CHUNK_SIZE = int(float(os.environ.get("SURVIVOR_CHUNK_MIB") or 32) * (1 << 20))


@dataclass(frozen=True)
class ChunkDigest:
    """One chunk of a file: where it sits, how long it is, its CRC32C (base64, as Cloud Storage
    reports it) and its SHA-256 (hex, its name)."""

    offset: int
    size: int
    crc32c: str
    sha256: str


@dataclass(frozen=True)
class FileDigest:
    """A file's size and CRC32C, and its chunks in order."""

    size: int
    crc32c: str
    chunks: tuple[ChunkDigest, ...]


def chunk_object(chunk: ChunkDigest) -> str:
    """The content-addressed object that holds a chunk's bytes."""
    return f"{CHUNKS}{chunk.sha256}"


class Digester:
    """The running digest of a file read from its start, in pieces of any size.

        >>> d = Digester(chunk_size=4)
        >>> d.update(b"abcdef"); [c.size for c in d.digest().chunks]
        [4, 2]

    `digest()` may be taken at any point (the chunk being filled counts as the last, shorter one),
    and reading goes on after it: a file being written is digested as it grows.
    """

    def __init__(self, chunk_size: int = CHUNK_SIZE):
        if chunk_size <= 0:
            raise ValueError(f"chunk size {chunk_size}: must be positive")
        self.chunk_size = chunk_size
        self.offset = 0
        self._done: list[ChunkDigest] = []
        self._start = 0
        self._crc = google_crc32c.Checksum()
        self._sha = hashlib.sha256()

    def update(self, data: bytes) -> None:
        """Feeds the next bytes of the file."""
        while data:
            room = self.chunk_size - (self.offset - self._start)
            # whole blocks go in as they are (the checksum takes no memoryview); only a block that
            # straddles two chunks is cut
            take, data = (data, b"") if len(data) <= room else (data[:room], data[room:])
            self._crc.update(take)
            self._sha.update(take)
            self.offset += len(take)
            if self.offset - self._start == self.chunk_size:
                self._done.append(self._current(self._crc, self._sha))
                self._start, self._crc, self._sha = self.offset, google_crc32c.Checksum(), hashlib.sha256()

    def read(self, f, end: int | None = None) -> int:
        """Feeds the bytes of the open file `f` from its position up to offset `end` (or its end);
        returns the offset reached."""
        position = f.tell()
        while end is None or position < end:
            block = f.read(CRC_BLOCK if end is None else min(CRC_BLOCK, end - position))
            if not block:
                break
            self.update(block)
            position += len(block)
        return position

    def complete(self) -> tuple[ChunkDigest, ...]:
        """The chunks fed whole so far (a file being written: those its writer has moved past)."""
        return tuple(self._done)

    def digest(self) -> FileDigest:
        """The digest of the bytes fed so far."""
        chunks = list(self._done)
        if self.offset > self._start:
            chunks.append(self._current(self._crc.copy(), self._sha.copy()))
        return FileDigest(self.offset, combine_crc32c(chunks), tuple(chunks))

    def _current(self, crc, sha) -> ChunkDigest:
        return ChunkDigest(
            self._start, self.offset - self._start, base64.b64encode(crc.digest()).decode(), sha.hexdigest()
        )


def digest_file(path: str, chunk_size: int = CHUNK_SIZE) -> FileDigest:
    """Reads a whole file once: its size, CRC32C and chunks. A trainer's file: opened by
    `trainer_files.open_regular` (Refused for a link it could have made, or a FIFO)."""
    digester = Digester(chunk_size)
    with open_file(path) as f:
        digester.read(f)
    return digester.digest()


def fits(digest: FileDigest, chunk_size: int) -> bool:
    """True if `digest`'s chunks cover its file, cut at every `chunk_size` bytes (a scan made with
    another chunk size does not)."""
    return (
        sum(c.size for c in digest.chunks) == digest.size
        and all(c.size == chunk_size for c in digest.chunks[:-1])
        and (not digest.chunks or 0 < digest.chunks[-1].size <= chunk_size)
    )


# -- CRC32C of a whole from its parts ----------------------------------------------------------------
# zlib's crc32_combine (1.2.12: x^(8n) mod P by squaring), for the Castagnoli polynomial: the CRC of
# A+B is CRC(A) times x^(8*len(B)) mod P, plus CRC(B). So a file's CRC comes from its chunks' alone,
# and a restore or a scan reads every byte once.

_POLY = 0x82F63B78  # CRC-32C, bit-reflected


def _multiply(a: int, b: int) -> int:
    """a * b modulo the polynomial (bit-reflected)."""
    m, product = 1 << 31, 0
    while m:
        if a & m:
            product ^= b
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
        m >>= 1
    return product


_POWERS = [1 << 30]  # x^(2^k) mod P, k = 0..31 (x^1 is bit 30 in reflected form)
for _ in range(31):
    _POWERS.append(_multiply(_POWERS[-1], _POWERS[-1]))


def _x_to_8n(n: int) -> int:
    """x^(8n) mod P."""
    power, k = 1 << 31, 3
    while n:
        if n & 1:
            power = _multiply(_POWERS[k & 31], power)
        n >>= 1
        k += 1
    return power


def crc32c_combine(crc_a: int, crc_b: int, length_b: int) -> int:
    """The CRC32C of A followed by B, from CRC32C(A), CRC32C(B) and len(B)."""
    return _multiply(_x_to_8n(length_b), crc_a) ^ crc_b


def combine_crc32c(chunks) -> str:
    """The CRC32C (base64) of the concatenation of `chunks`: anything with `crc32c` (base64) and `size`."""
    crc = 0
    for chunk in chunks:
        crc = crc32c_combine(crc, int.from_bytes(base64.b64decode(chunk.crc32c), "big"), chunk.size)
    return base64.b64encode(crc.to_bytes(4, "big")).decode()
