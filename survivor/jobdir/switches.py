"""The job's switches between Spot, on-demand and flex-start, one record each in its job dir.

    >>> record_switch(storage, Switch(time=now(), to_mode="on-demand", from_mode="spot",
    ...                               reason="3.1 h left, 2.9 h of work on on-demand plus 0.4 h margin",
    ...                               by="watch", template="cifar10-on-demand"))
    >>> [s.to_mode for s in switches(storage)]
    ['on-demand']

Layout: `survivor/switches/<time>-<to_mode>.json`, written once each (a conditional create), read in
time order, each a `records.Record`. Whoever switches the group writes the record (survivor/mig/switch.py `switch_group`), so
the deadline policy can tell Spot time from on-demand time and `survivor report` can show every switch
with its reason. A record that does not parse is skipped with a warning, never fatal.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import ClassVar, Literal, get_args

from survivor import log as logs
from survivor.jobdir.fields import PROSE, TIME, Choice, Name, Rule, parse_time
from survivor.jobdir.records import Record, record_time
from survivor.jobdir.storage import JobStorage

__all__ = [
    "FAILED_SWITCHES",
    "FLEX_START",
    "MODES",
    "Mode",
    "ON_DEMAND",
    "SPOT",
    "SWITCHES",
    "Switch",
    "SwitchFailure",
    "parse_time",
    "record_switch",
    "record_switch_failure",
    "switch_failures",
    "switches",
]

SWITCHES = "survivor/switches/"
#: Switches that were decided but failed (a missing permission, most often): `status` and `report`
#: show them, and the deadline policy never counts them as switches.
FAILED_SWITCHES = "survivor/switch-failures/"
#: The modes a group runs in: its template's provisioning model (flex-start: docs/flex-start.md).
Mode = Literal["spot", "on-demand", "flex-start"]
MODES: tuple[Mode, ...] = get_args(Mode)
SPOT, ON_DEMAND, FLEX_START = MODES

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
class Switch(Record):
    """One switch of the job's group: when (ISO UTC), from which mode to which, why, who decided
    ("agent" or "watch"), and the instance template the group uses from then on. Named
    `survivor/switches/<time>-<to_mode>.json`."""

    PREFIX: ClassVar[str] = SWITCHES
    FIELDS: ClassVar[dict[str, Rule]] = SWITCH_FIELDS
    REQUIRED: ClassVar[tuple[str, ...]] = ("time", "to_mode")
    SUFFIX: ClassVar[str] = "to_mode"

    to_mode: Mode
    from_mode: Mode | Literal[""] = ""
    reason: str = ""
    by: str = ""
    template: str = ""


@dataclass(frozen=True)
class SwitchFailure(Record):
    """A switch the policy decided and the Compute Engine calls refused: when, to which mode, why
    it was decided, who tried, and the refusal. Named `survivor/switch-failures/<time>-<to_mode>.json`."""

    PREFIX: ClassVar[str] = FAILED_SWITCHES
    FIELDS: ClassVar[dict[str, Rule]] = SWITCH_FIELDS
    REQUIRED: ClassVar[tuple[str, ...]] = ("time", "to_mode")
    SUFFIX: ClassVar[str] = "to_mode"

    to_mode: Mode
    reason: str = ""
    by: str = ""
    error: str = ""


def record_switch_failure(storage: JobStorage, failure: SwitchFailure) -> bool:
    """Writes a failed switch's record once (best effort for the caller: it is already failing)."""
    return failure.write(storage)


def switch_failures(storage: JobStorage) -> list[SwitchFailure]:
    """Every failed switch recorded, oldest first."""
    return sorted((f for _, f in SwitchFailure.read_all(storage, "failed switch")), key=lambda f: record_time(f.time))


def record_switch(storage: JobStorage, switch: Switch) -> bool:
    """Writes the switch's record once; False when a record of that name exists already."""
    return switch.write(storage)


def switches(storage: JobStorage, latest: _dt.datetime | None = None) -> list[Switch]:
    """Every switch recorded in the job dir, oldest first; given `latest` (now, and the slack allowed
    to a VM's clock), one dated after it is skipped with a warning: a bad clock's switch must not say
    the group runs on-demand already."""
    out = []
    for name, switch in Switch.read_all(storage, "switch"):
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
