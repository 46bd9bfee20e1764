"""A job dir read again and again, each time reading only the records that changed since.

    >>> job = RefreshingJob(open_storage("gs://my-bucket/cifar10"))
    >>> reading = job.read(now=now)            # one listing, then every record it shows
    >>> reading = job.read(now=later)          # one listing, then only the records whose generation changed
    >>> reading.job.phase, reading.notes, job.calls
    ('RUNNING', [], Counter({'read': 31, 'bytes': 40211, 'list': 2}))

`survivor dashboard` (survivor/operator/dashboard.py) shows many jobs and refreshes them while they
run. Each refresh lists the job's `survivor/` prefix once: the listing gives every object's
generation (Cloud Storage's, a local file's mtime), so a record whose generation is the one already
read comes from memory, an absent one (no DONE yet) costs no read at all, and only a new or rewritten
record (an attempt's end, a new manifest, a move, a switch) is read from the bucket. What the records
say is still read by `status.read_job`, the one read `survivor status` and `report` use, through a
read-only `ListedStorage` standing in for the job dir.

A record a reader skips (a damaged move, switch or attempt record, a manifest that must not be
followed) is logged as a warning by its reader; `read` returns those warnings, one line each, as
`status` shows them, instead of letting them reach the terminal at every refresh (`noted_warnings`).
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import logging
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Iterator

from survivor.jobdir.status import JobView, read_job
from survivor.jobdir.storage import Blob, JobStorage, ObjectInfo

#: The prefix one listing covers: every record survivor keeps (attempts, markers, snapshots, moves,
#: switches, pending snapshots), and the chunks, which the listing shows but nothing here reads.
RECORDS = "survivor/"
#: The longest warning line kept: a record's field can be 60 KB; a person reads a line.
NOTE_CHARS = 300


class ReadOnly(Exception):
    """A reader tried to change a job dir it was only given to read."""


class ListedStorage:
    """A job dir as one listing of it found it, for reading only: `list` answers from the listing,
    `read` from memory when the listing shows the generation already read, else from the job dir."""

    def __init__(self, storage: JobStorage, listing: dict[str, ObjectInfo], bodies: dict[str, Blob], calls: Counter):
        self.url = storage.url
        self._storage, self._listing, self._bodies, self._calls = storage, listing, bodies, calls

    def list(self, prefix: str) -> list[ObjectInfo]:
        """The listed objects under `prefix`, sorted by name: no call to the job dir."""
        return sorted((info for name, info in self._listing.items() if name.startswith(prefix)), key=lambda o: o.name)

    def read(self, name: str) -> Blob | None:
        """The object as of the listing: None when it was not listed, the bytes read before when the
        generation is the same, else read now (and kept)."""
        info = self._listing.get(name)
        if info is None:
            return None
        kept = self._bodies.get(name)
        if kept is not None and kept.generation == info.generation:
            return kept
        blob = self._storage.read(name)
        self._calls["read"] += 1
        if blob is None:  # deleted since the listing
            self._bodies.pop(name, None)
            return None
        self._calls["bytes"] += len(blob.data)
        self._bodies[name] = blob
        return blob

    def write(self, name: str, data: bytes, *, if_generation_match: int | None = None) -> int:
        """Refused: this view only reads."""
        raise ReadOnly(f"{name}: the dashboard never writes to a job dir")

    def delete(self, names: Iterable[str]) -> None:
        """Refused: this view only reads."""
        raise ReadOnly("the dashboard never deletes from a job dir")

    def upload(self, pairs: builtins.list[tuple[str, str]]) -> builtins.list[ObjectInfo]:
        """Refused: this view only reads."""
        raise ReadOnly("the dashboard never uploads to a job dir")

    def download(self, pairs: builtins.list[tuple[str, str]]) -> None:
        """Refused: the dashboard reads records, never checkpoints."""
        raise ReadOnly("the dashboard never downloads a checkpoint")

    def upload_parts(self, parts):
        """Refused: this view only reads."""
        raise ReadOnly("the dashboard never uploads to a job dir")

    def download_parts(self, parts):
        """Refused: the dashboard reads records, never checkpoints."""
        raise ReadOnly("the dashboard never downloads a checkpoint")

    def remove_temporaries(self, older_than: float) -> int:
        """Nothing: this view only reads."""
        return 0


@dataclass(frozen=True)
class Reading:
    """One read of a job dir: what `read_job` found, the warnings its readers gave (one line each:
    a damaged record, a manifest that must not be followed), and the listed job dir it read, for a
    further reader of the same records (the deadline's) that must cost the bucket nothing more."""

    job: JobView
    notes: list[str]
    storage: ListedStorage


class RefreshingJob:
    """One job dir, read by `read` as often as asked; the bytes of each record kept with the
    generation they were read at. `calls` counts what the job dir was asked: `list`, `read` (objects
    read) and `bytes` (their bytes)."""

    def __init__(self, storage: JobStorage):
        self.storage = storage
        self.calls: Counter = Counter()
        self._bodies: dict[str, Blob] = {}

    def read(
        self, *, now: _dt.datetime | None = None, train_steps: int | None = None, created: _dt.datetime | None = None
    ) -> Reading:
        """Lists the job dir once and reads it through `status.read_job` (arguments as there)."""
        listing = {info.name: info for info in self.storage.list(RECORDS)}
        self.calls["list"] += 1
        for gone in set(self._bodies) - set(listing):
            del self._bodies[gone]
        view = ListedStorage(self.storage, listing, self._bodies, self.calls)
        with noted_warnings() as notes:
            job = read_job(
                self.storage.url, storage=view, now=now, train_steps=train_steps, created=created, commits=True
            )
        return Reading(job, notes, view)


class _Notes(logging.Handler):
    """Keeps the warnings survivor's loggers give on a thread that reads a job dir, for that read."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        """Keeps the record's message as one line, on a reading thread; elsewhere leaves it alone."""
        notes = getattr(self.local, "notes", None)
        if notes is not None:
            line = " ".join(record.getMessage().split())
            notes.append(line if len(line) <= NOTE_CHARS else line[: NOTE_CHARS - 1] + "…")
        elif logging.lastResort is not None and not _other_handlers():
            logging.lastResort.handle(record)  # as if this handler were not there: the terminal gets it


def _other_handlers() -> bool:
    """Whether a record of survivor's reaches a handler besides `_NOTES` (else Python's last resort would print it)."""
    return any(h is not _NOTES for h in logging.getLogger("survivor").handlers) or bool(logging.getLogger().handlers)


_NOTES = _Notes()
_installed = threading.Lock()


class _NotWhileNoting(logging.Filter):
    """Keeps a reading thread's warnings off the terminal: the read returns them instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(_NOTES.local, "notes", None) is None


@contextlib.contextmanager
def noted_warnings() -> Iterator[list[str]]:
    """Collects, as lines, the warnings survivor's readers log on this thread while the block runs;
    they reach no other handler meanwhile."""
    survivor = logging.getLogger("survivor")
    with _installed:
        if _NOTES not in survivor.handlers:
            survivor.addHandler(_NOTES)
            survivor.addFilter(_NotWhileNoting())  # records logged on `survivor` itself
            for logger in (survivor, logging.getLogger()):
                for handler in logger.handlers:
                    if handler is not _NOTES:
                        handler.addFilter(_NotWhileNoting())
    notes: list[str] = []
    _NOTES.local.notes = notes
    try:
        yield notes
    finally:
        _NOTES.local.notes = None
