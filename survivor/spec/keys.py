"""What a top-level key of a job spec is (`Key`), and how a field of the spec declares one (`key`).

A key is written once, as its field in survivor/spec/fields.py:

    grace_seconds: float = field(default=25.0, metadata=key("number", "the notice-to-exit budget", bounds=(1.0, 3600.0)))

Its name is the field's, its default the field's (none for a field without one, which the spec
requires), and `keys_of` reads the rest back; the validator, the recipe's names, the docs' key table
and the published JSON Schema all derive from what it returns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

#: The kinds of key whose value is read by its kind alone and written as it is: no key of these
#: kinds has code of its own in the validator or in `JobSpec.to_mapping`.
PLAIN_KINDS = ("integer", "number", "location")


@dataclass(frozen=True)
class Key:
    """One top-level key of a job spec, defined once: its kind, default, bounds, the recipe's flat
    attribute that sets it, and one line of doc. The validator (`Validator`) checks each key with
    the bounds here and its own one-line errors; the docs' key table (`keys_markdown`) and the
    published JSON Schema for `job.yaml` (`json_schema`, docs/job-spec.schema.json) derive from it."""

    name: str
    kind: str  # integer, number, string, location, gpus, mapping, section, enum
    doc: str
    default: Any = None  # None: none (or the trainer's), unless `required`
    required: bool = False
    bounds: tuple[float, float] | None = None  # inclusive
    flat: str | None = None  # the recipe's camelCase instance attribute
    choices: tuple[str, ...] = ()  # an enum's values
    shown: bool = True  # in the docs' table (False: the flat form's own keys, kept for the recipe)

    @property
    def plain(self) -> bool:
        """True for a key read by its kind alone (`Validator.plain`) and written as it is."""
        return self.kind in PLAIN_KINDS


def key(
    kind: str,
    doc: str,
    *,
    bounds: tuple[float, float] | None = None,
    flat: str | None = None,
    choices: tuple[str, ...] = (),
    shown: bool = True,
) -> dict[str, Key]:
    """A field's metadata that makes it a key of the spec: `field(default=..., metadata=key(...))`.
    The key's name and default are the field's (`keys_of` fills them in)."""
    return {"key": Key("", kind, doc, bounds=bounds, flat=flat, choices=choices, shown=shown)}


def keys_of(record: type) -> tuple[Key, ...]:
    """The keys a dataclass's fields declare (`key`), in the fields' order, each named after its field.
    A field's default is its key's, unless it is empty (`None`, `""`, `()`: the key has none); a
    field without a default is a required key."""
    keys = []
    for f in dataclasses.fields(record):
        if "key" not in f.metadata:
            continue
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        default = None if f.default is dataclasses.MISSING or f.default in (None, "", ()) else f.default
        keys.append(dataclasses.replace(f.metadata["key"], name=f.name, default=default, required=required))
    return tuple(keys)
