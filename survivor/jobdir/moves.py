"""The job's moves between places (regions and machine shapes), one record each in its job dir.

    >>> record_move(storage, Move(time=now(), from_place="zones/us-west1-b", to_place="regions/us-central1",
    ...                           reason="no training VM for 41 min: ZONE_RESOURCE_POOL_EXHAUSTED", by="watch"))
    >>> [m.to_place for m in moves(storage)]
    ['regions/us-central1']

Layout: `survivor/moves/<time>.json`, written once each (a conditional create), read in time order.
The newest record says where the job's group is now (`current_place`), so whoever looks next (the
watch, `status`, `report`) finds it after a move. A record that does not parse is skipped with a
warning, never fatal.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import ClassVar, Collection

from survivor.jobdir.fields import PLACE, PROSE, TIME, Number, Rule
from survivor.jobdir.records import Record, read_records, record_time
from survivor.jobdir.storage import JobStorage
from survivor.places import region_of

MOVES = "survivor/moves/"
#: How each field of a move's record is read (survivor/jobdir/fields.py; a field not named: SHORT text).
#: A shape is a number of `placement.shapes` (survivor/spec/sections.py MAX_SHAPES allows far fewer than 100).
MOVE_FIELDS: dict[str, Rule] = {
    "time": TIME,
    "from_place": PLACE,
    "to_place": PLACE,
    "reason": PROSE,
    "shape": Number(0, 99),
}


@dataclass(frozen=True)
class Move(Record):
    """One move of the job's group: when (ISO UTC), from where to where (`zones/Z` or `regions/R`),
    why, who decided ("watch" or "agent"), what it left behind (a state-disk snapshot not yet in
    Cloud Storage, counted as lost: `lost_pending`), and, for a job with other machine shapes
    (`placement.shapes`), the shape it moved to (`shape`: "0" the job's compute:, "N" shapes[N-1])
    and its machine as a person reads it (`machine`: `g2-standard-8`). Named `survivor/moves/<time>.json`."""

    PREFIX: ClassVar[str] = MOVES
    FIELDS: ClassVar[dict[str, Rule]] = MOVE_FIELDS
    REQUIRED: ClassVar[tuple[str, ...]] = ("time", "from_place", "to_place")

    from_place: str
    to_place: str
    reason: str = ""
    by: str = ""
    lost_pending: str = ""
    shape: str = ""
    machine: str = ""


def record_move(storage: JobStorage, move: Move) -> bool:
    """Writes the move's record once; False when a record of that name exists already."""
    return move.write(storage)


#: How far ahead of this clock a record may be dated (a VM's clock that runs fast); past it, skipped.
FUTURE_SLACK = _dt.timedelta(hours=1)


def moves(storage: JobStorage, regions: Collection[str] | None = None, shapes: int = 0) -> list[Move]:
    """Every move recorded in the job dir, oldest first. Given the spec's placement (its `regions`,
    and how many other `shapes` it names), a record that puts the job anywhere else is skipped with
    a warning naming it, as a field that does not read is: the job never goes where its spec does
    not send it, and its next move is not stopped by a record no move of it wrote."""
    latest = _dt.datetime.now(_dt.timezone.utc) + FUTURE_SLACK

    def parse(data: bytes) -> Move:
        move = Move.from_json(data)
        if record_time(move.time) > latest:  # a record dated 2199 held every move off for good
            raise ValueError(f"time: {move.time} is in the future (a clock this far off wrote no move of this job)")
        if regions is not None and region_of(move.to_place) not in regions:
            raise ValueError(f"to_place: {move.to_place} is in none of the spec's regions ({', '.join(regions)})")
        if regions is not None and int(move.shape or 0) > shapes:
            raise ValueError(f"shape: {move.shape} is none of the spec's {shapes + 1} shapes")
        return move

    return sorted((move for _, move in read_records(storage, MOVES, parse, "move")), key=lambda m: record_time(m.time))


def current_place(recorded: list[Move], original: str) -> str:
    """Pure: where the job's group is after its moves (`original` when it never moved)."""
    return recorded[-1].to_place if recorded else original


def current_shape(recorded: list[Move]) -> int:
    """Pure: the machine shape the job's group runs after its moves (0, its compute:, when none
    recorded one)."""
    return int(recorded[-1].shape) if recorded and recorded[-1].shape else 0
