"""The one shape of the job dir's event records (moves, switches, failed switches).

    >>> @dataclass(frozen=True)
    ... class Move(Record):
    ...     PREFIX: ClassVar[str] = "survivor/moves/"
    ...     FIELDS: ClassVar[dict[str, Rule]] = {"time": TIME, "to_place": PLACE}
    ...     REQUIRED: ClassVar[tuple[str, ...]] = ("time", "to_place")
    ...     to_place: str
    >>> Move(time="2026-11-24T10:00:00Z", to_place="regions/us-central1").name
    'survivor/moves/20261124T100000Z.json'

Each record is a frozen dataclass of text fields, written once under `PREFIX` (a conditional
create: two writers of the same moment never overwrite each other), named by its time (and its
`SUFFIX` field, when the kind has one) so that names sort by time, and read back strictly: each
field by its rule in `FIELDS` (survivor/jobdir/fields.py), the `REQUIRED` ones present. A record that
does not read is skipped with a warning naming it, never fatal (`read_records`).

`Records` holds a job dir's records by kind, each kind read once when first asked for
(`Records.of`): `survivor/jobdir/status.py` `read_job` hands one to the ledger and keeps it in its
view, so a new kind that the ledger or a view reads is read through it, with no reader of its own
in `read_job`.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import asdict, dataclass, fields
from typing import Callable, ClassVar, Mapping, Sequence, TypeVar

from survivor import log as logs
from survivor.jobdir.fields import Rule, parse_time, read_fields
from survivor.jobdir.storage import JobStorage, PreconditionFailed

#: A record is a few lines of JSON; a larger object under a record prefix is no record of survivor's.
MAX_RECORD_BYTES = 1 << 16
R = TypeVar("R", bound="Record")
T = TypeVar("T")

log = logs.get("records")


@dataclass(frozen=True)
class Record:
    """A record of the job dir: its kind's `PREFIX`, the rules its fields are read by (`FIELDS`; a
    field not named there: short text), the fields it must have (`REQUIRED`), and the field, if
    any, whose value ends its name after the time (`SUFFIX`)."""

    PREFIX: ClassVar[str] = ""
    FIELDS: ClassVar[dict[str, Rule]] = {}
    REQUIRED: ClassVar[tuple[str, ...]] = ("time",)
    SUFFIX: ClassVar[str] = ""

    #: when it happened, ISO 8601 UTC: every record has it, and its name sorts by it
    time: str

    @property
    def name(self) -> str:
        """The record's object name: `<PREFIX><time, digits and letters only>[-<SUFFIX>].json`,
        so that names sort by time."""
        stamp = re.sub(r"[^0-9A-Za-z]", "", self.time)
        suffix = f"-{getattr(self, self.SUFFIX)}" if self.SUFFIX else ""
        return f"{self.PREFIX}{stamp}{suffix}.json"

    @classmethod
    def from_json(cls: type[R], data: bytes) -> R:
        """Parses a record, each field by its rule in FIELDS; ValueError naming the field unless it
        has every REQUIRED field and every field it has reads."""
        names = [f.name for f in fields(cls)]
        return cls(**read_fields(data, names, cls.FIELDS, required=cls.REQUIRED))

    def write(self, storage: JobStorage) -> bool:
        """Writes the record once; False when a record of its name exists already."""
        return write_once(storage, self.name, asdict(self))

    @classmethod
    def read_all(cls: type[R], storage: JobStorage, kind: str) -> list[tuple[str, R]]:
        """(object name, record) of every record of this kind that reads, in no promised order."""
        return read_records(storage, cls.PREFIX, cls.from_json, kind)


class Records:
    """A job dir's records by kind, each kind read (`Record.read_all`) the first time it is asked for
    and kept, oldest first. Without storage it holds only what it was `given` (a test's, or none).

        >>> Records().of(Record)
        []
    """

    def __init__(
        self, storage: JobStorage | None = None, given: Mapping[type[Record], Sequence[Record]] | None = None
    ) -> None:
        self._storage = storage
        self._read: dict[type[Record], list[Record]] = {k: list(v) for k, v in (given or {}).items()}

    def of(self, kind: type[R]) -> list[R]:
        """Every record of `kind` that reads, oldest first (an unreadable one skipped with a warning)."""
        if kind not in self._read:
            found = kind.read_all(self._storage, kind.PREFIX.rstrip("/").rsplit("/", 1)[-1]) if self._storage else []
            self._read[kind] = sorted((r for _, r in found), key=lambda r: record_time(r.time))
        return [r for r in self._read[kind] if isinstance(r, kind)]


def write_once(storage: JobStorage, name: str, record: dict) -> bool:
    """Writes a job-dir record once (a conditional create); False when one of that name exists."""
    try:
        storage.write(name, json.dumps(record, indent=1).encode(), if_generation_match=0)
        return True
    except PreconditionFailed:
        return False


def read_records(storage: JobStorage, prefix: str, parse: Callable[[bytes], T], kind: str) -> list[tuple[str, T]]:
    """(object name, record) of every record under `prefix` that `parse` reads; one that it cannot
    (or too large) is skipped with a warning naming it, never fatal."""
    out = []
    for info in storage.list(prefix):
        blob = storage.read(info.name) if info.size <= MAX_RECORD_BYTES else None
        if blob is None:
            continue
        try:
            out.append((info.name, parse(blob.data)))
        except ValueError as exc:
            log.warning(f"ignoring an unreadable {kind} record {info.name}: {exc}", record=info.name, reason=str(exc))
    return out


def record_time(text: str) -> _dt.datetime:
    """The time of a record that `from_json` accepted, which checked that it parses (`parse_time`)."""
    when = parse_time(text)
    if when is None:
        raise ValueError(f"not an ISO 8601 time: {text!r}")
    return when
