"""The job's switches between Spot, on-demand and flex-start, one record each in its job dir.

    >>> record_switch(storage, Switch(time=now(), to_mode="on-demand", from_mode="spot",
    ...                               reason="3.1 h left, 2.9 h of work on on-demand plus 0.4 h margin",
    ...                               by="watch", template="cifar10-on-demand"))
    >>> [s.to_mode for s in switches(storage)]
    ['on-demand']

Layout: `survivor/switches/<time>-<to_mode>.json`, written once each (a conditional create), read in
time order. Whoever switches the group writes the record (survivor/operator/group.py `switch_group`), so
the deadline policy can tell Spot time from on-demand time and `survivor report` can show every switch
with its reason. A record that does not parse is skipped with a warning, never fatal.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import asdict, dataclass
from typing import Callable, TypeVar

from survivor import log as logs
from survivor.jobdir.fields import PROSE, TIME, Choice, Name, Rule, parse_time, read_fields
from survivor.jobdir.storage import JobStorage, PreconditionFailed

SWITCHES = "survivor/switches/"
#: The modes a group runs in: its template's provisioning model (flex-start: docs/flex-start.md).
MODES = ("spot", "on-demand", "flex-start")
MAX_RECORD_BYTES = 1 << 16
T = TypeVar("T")

log = logs.get("switches")

#: How each field of a switch's record (and a failed switch's) is read (survivor/jobdir/fields.py; a
#: field not named: SHORT text). A template is a Compute Engine name (fields.NAME).
SWITCH_FIELDS: dict[str, Rule] = {
    "time": TIME,
    "to_mode": Choice(MODES),
    "from_mode": Choice(MODES),
    "reason": PROSE,
    "error": PROSE,
    "template": Name(),
}


@dataclass(frozen=True)
class Switch:
    """One switch of the job's group: when (ISO UTC), from which mode to which, why, who decided
    ("agent" or "watch"), and the instance template the group uses from then on."""

    time: str
    to_mode: str
    from_mode: str = ""
    reason: str = ""
    by: str = ""
    template: str = ""

    @property
    def name(self) -> str:
        """The record's object name: `survivor/switches/<time>-<to_mode>.json` (sorts by time)."""
        return f"{SWITCHES}{re.sub(r'[^0-9A-Za-z]', '', self.time)}-{self.to_mode}.json"

    @classmethod
    def from_json(cls, data: bytes) -> "Switch":
        """Parses a record, each field by its rule in SWITCH_FIELDS; ValueError naming the field
        unless it has a time and a known to_mode and every field it has reads."""
        return cls(**read_fields(data, cls.__dataclass_fields__, SWITCH_FIELDS, required=("time", "to_mode")))


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


#: Switches that were decided but failed (a missing permission, most often): `status` and `report`
#: show them, and the deadline policy never counts them as switches.
FAILED_SWITCHES = "survivor/switch-failures/"


@dataclass(frozen=True)
class SwitchFailure:
    """A switch the policy decided and the Compute Engine calls refused: when, to which mode, why
    it was decided, who tried, and the refusal."""

    time: str
    to_mode: str
    reason: str = ""
    by: str = ""
    error: str = ""

    @property
    def name(self) -> str:
        """The record's object name: `survivor/switch-failures/<time>-<to_mode>.json`."""
        return f"{FAILED_SWITCHES}{re.sub(r'[^0-9A-Za-z]', '', self.time)}-{self.to_mode}.json"

    @classmethod
    def from_json(cls, data: bytes) -> "SwitchFailure":
        """Parses a record, each field by its rule in SWITCH_FIELDS; ValueError naming the field
        unless it has a time and a known to_mode and every field it has reads."""
        return cls(**read_fields(data, cls.__dataclass_fields__, SWITCH_FIELDS, required=("time", "to_mode")))


def record_switch_failure(storage: JobStorage, failure: SwitchFailure) -> bool:
    """Writes a failed switch's record once (best effort for the caller: it is already failing)."""
    return write_once(storage, failure.name, asdict(failure))


def switch_failures(storage: JobStorage) -> list[SwitchFailure]:
    """Every failed switch recorded, oldest first."""
    return sorted(
        (f for _, f in read_records(storage, FAILED_SWITCHES, SwitchFailure.from_json, "failed switch")),
        key=lambda f: record_time(f.time),
    )


def record_switch(storage: JobStorage, switch: Switch) -> bool:
    """Writes the switch's record once; False when a record of that name exists already."""
    return write_once(storage, switch.name, asdict(switch))


def switches(storage: JobStorage, latest: _dt.datetime | None = None) -> list[Switch]:
    """Every switch recorded in the job dir, oldest first; given `latest` (now, and the slack allowed
    to a VM's clock), one dated after it is skipped with a warning: a bad clock's switch must not say
    the group runs on-demand already."""
    out = []
    for name, switch in read_records(storage, SWITCHES, Switch.from_json, "switch"):
        when = parse_time(switch.time)
        if latest is not None and when is not None and when > latest:
            log.warning(
                f"ignoring the switch record {name}: dated {switch.time}, in the future",
                record=name,
                reason="dated in the future",
            )
            continue
        out.append(switch)
    return sorted(out, key=lambda s: record_time(s.time))  # a time, whatever its zone; from_json parsed each


def record_time(text: str) -> _dt.datetime:
    """The time of a record that `from_json` accepted, which checked that it parses (`parse_time`)."""
    when = parse_time(text)
    if when is None:
        raise ValueError(f"not an ISO 8601 time: {text!r}")
    return when
