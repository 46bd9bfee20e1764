"""The one strict reader of the fields of the job dir's records (moves, switches, failed switches).

    >>> read_fields(b'{"time": "2026-11-24T10:00:00Z", "to_place": "regions/us-central1", "shape": "2"}',
    ...             ("time", "to_place", "shape", "reason"),
    ...             {"time": TIME, "to_place": PLACE, "shape": Number(0, 99), "reason": PROSE},
    ...             required=("time", "to_place"))
    {'time': '2026-11-24T10:00:00Z', 'to_place': 'regions/us-central1', 'shape': '2'}

Anyone who can write to the job dir can write a record, and every `survivor watch`, `status` and
`report` reads them all, so each field is read by a rule that says what it may hold: ASCII digits
within bounds (`str.isdigit` takes "²", which `int` refuses), a time within TIME_RANGE (year 1 leaves
the calendar once a duration is taken from it), a Compute Engine place or name (its name pattern),
a choice, or text of bounded length. A field that breaks its rule is a ValueError naming the field;
`records.read_records` skips the record with one warning naming the object and the error.
A field without a rule is read as SHORT text, so a field added to a record is read strictly too.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Union

from survivor.jobdir.storage import parse_json

#: The times a record may carry: survivor did not run before 2000, and none of its jobs runs past
#: 2200; outside them a time is no time of a job (year 1 makes `time - duration` raise OverflowError).
TIME_RANGE = (_dt.datetime(2000, 1, 1, tzinfo=_dt.timezone.utc), _dt.datetime(2200, 1, 1, tzinfo=_dt.timezone.utc))

#: A Compute Engine resource name (zone, region, template): "[a-z]([-a-z0-9]{0,61}[a-z0-9])?",
#: https://cloud.google.com/compute/docs/naming-resources#resource-name-format
NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class Text:
    """A string of at most `max_chars`. `cut`: longer prose is cut there rather than refused (a
    move's long reason must not lose the record of where the group went); else it is refused."""

    max_chars: int
    cut: bool = False


@dataclass(frozen=True)
class Number:
    """A whole number written as ASCII digits, from `low` to `high` (kept as its text)."""

    low: int
    high: int


@dataclass(frozen=True)
class Choice:
    """One of `values` (the empty string too when the field is not required)."""

    values: tuple[str, ...]


@dataclass(frozen=True)
class Time:
    """An ISO 8601 time within TIME_RANGE (UTC when it names no zone)."""


@dataclass(frozen=True)
class Place:
    """Where a group is: `zones/ZONE` or `regions/REGION`, each a Compute Engine NAME."""


@dataclass(frozen=True)
class Name:
    """A Compute Engine resource NAME (a template's)."""


Rule = Union[Text, Number, Choice, Time, Place, Name]

TIME = Time()
PLACE = Place()
#: A word survivor writes ("watch", "yes", a machine): a longer one is not survivor's.
SHORT = Text(200)
#: Why something happened, as survivor wrote it (a move's reason lists each refused place).
PROSE = Text(8000, cut=True)
#: The longest time, number, place or name read (a place: "regions/" and a 63-character name).
MAX_WORD_CHARS = 80


def parse_time(text: object) -> _dt.datetime | None:
    """An ISO 8601 time, timezone-aware (UTC when it says none); None if absent, not text, bad, or
    outside TIME_RANGE (a DONE marker's `"time": 5`, or year 9999, which overflows the first sum).
    The one parser of the times the job dir's records carry (switches, attempts, markers): every
    reader compares them with an aware `now`, which a naive time would make raise."""
    if not text or not isinstance(text, str):
        return None
    try:
        value = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    value = value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)
    return value if TIME_RANGE[0] <= value <= TIME_RANGE[1] else None


def read_field(key: str, value: object, rule: Rule) -> str:
    """The field's value as the record keeps it (text); ValueError naming `key` when `value` breaks
    `rule`."""
    if not isinstance(value, str):
        raise ValueError(f"{key}: expected a string, not {type(value).__name__}")
    if isinstance(rule, Text):
        if len(value) > rule.max_chars and not rule.cut:
            raise ValueError(f"{key}: longer than {rule.max_chars} characters")
        return value[: rule.max_chars]
    if len(value) > MAX_WORD_CHARS:
        raise ValueError(f"{key}: {value[:40]!r}... is too long")
    if isinstance(rule, Number):
        # ASCII only: "²".isdigit() and "٣".isdigit() are True, and int() refuses the first
        if not re.fullmatch(r"[0-9]{1,18}", value) or not rule.low <= int(value) <= rule.high:
            raise ValueError(f"{key}: {value[:40]!r} is not a whole number from {rule.low} to {rule.high}")
        return value
    if isinstance(rule, Choice):
        if value not in rule.values:
            raise ValueError(f"{key}: {value[:40]!r} is not one of " + ", ".join(rule.values))
        return value
    if isinstance(rule, Time):
        when = parse_time(value)
        if when is None or not TIME_RANGE[0] <= when < TIME_RANGE[1]:
            raise ValueError(
                f"{key}: {value!r} is not an ISO 8601 time from {TIME_RANGE[0].year} to {TIME_RANGE[1].year}"
            )
        return value
    if isinstance(rule, Place):
        kind, _, where = value.partition("/")
        if kind not in ("zones", "regions") or not NAME.fullmatch(where):
            raise ValueError(f"{key}: {value!r} is not zones/ZONE or regions/REGION")
        return value
    if not NAME.fullmatch(value):
        raise ValueError(f"{key}: {value!r} is not a Compute Engine name")
    return value


def read_fields(
    data: bytes, keys: Iterable[str], rules: Mapping[str, Rule], required: Iterable[str] = ()
) -> dict[str, str]:
    """Each of `keys` a JSON object holds, read by its rule in `rules` (SHORT text when it has none);
    a key absent, null or "" is left out. ValueError, naming the field, when the data is not a JSON
    object, a `required` key is missing or a field breaks its rule."""
    raw = parse_json(data)
    if not isinstance(raw, dict):
        raise ValueError("expected a JSON object")
    out = {}
    for key in keys:
        value = raw.get(key)
        if value is None or value == "":
            continue
        out[key] = read_field(key, value, rules.get(key, SHORT))
    for key in required:
        if key not in out:
            raise ValueError(f"{key}: missing")
    return out
