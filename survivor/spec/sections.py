"""The records of a job spec's sections: its trainer (`TrainerSpec`), its deadline and on-demand
fallback, its placement and machine shapes, its webhooks (`NotifyTarget`) and its budget.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, fields
from typing import Any

from survivor.trainers.registry import BUILTIN_TRAINERS
from survivor.spec.uris import SECRET_VERSION


@dataclass(frozen=True)
class TrainerSpec:
    """How to start the trainer and where its code comes from.

    Exactly one of `module` (run as `python -m MODULE`), `argv` (a program and its fixed arguments) or
    `builtin` (a trainer shipped in `survivor.trainers`). `git_url`/`git_ref` clone code first, as the
    recipe does on every boot; `package` installs a `gs://` sdist or wheel like Cloud ML Engine's
    `--packages`.
    """

    module: str | None = None
    argv: tuple[str, ...] = ()
    builtin: str | None = None
    git_url: str | None = None
    git_ref: str | None = None
    package: str | None = None
    save_signal: str | None = None  # "SIGUSR1": save now and keep training (docs/trainer-contract.md)

    @property
    def builtin_name(self) -> str | None:
        """The built-in trainer this is, by name or by module; None for the user's own."""
        if self.builtin:
            return self.builtin
        return next(
            (name for name, module in BUILTIN_TRAINERS.items() if self.module == module and not self.argv), None
        )


@dataclass(frozen=True)
class Deadline:
    """When the job must be done: a fixed time (`at`, aware UTC) or hours after its first start (`after_hours`).

    >>> first_start = _dt.datetime(2026, 11, 24, 12, 0, tzinfo=_dt.timezone.utc)
    >>> Deadline(after_hours=36.0).resolve(first_start).isoformat()
    '2026-11-26T00:00:00+00:00'
    """

    at: _dt.datetime | None = None
    after_hours: float | None = None

    def resolve(self, first_start: _dt.datetime) -> _dt.datetime:
        """The deadline as a time: `at`, or `after_hours` after the job's first start."""
        return self.at if self.at is not None else first_start + _dt.timedelta(hours=self.after_hours or 0.0)

    @property
    def text(self) -> str:
        """The deadline as the spec writes it: an ISO time, or hours (`36h`)."""
        if self.at is not None:
            return self.at.isoformat().replace("+00:00", "Z")
        return f"{self.after_hours:g}h"


#: The queue wait a flex-start request is planned with unless `fallback.flex_start_wait_hours` says
#: otherwise: an assumption (docs/flex-start.md A1), the validity a standalone flex-start VM's request
#: is commonly given (`--request-valid-for-duration=2h`); a MIG resize request states no bound.
FLEX_START_WAIT_HOURS = 2.0
#: The longest wait `fallback.flex_start_wait_hours` takes: a flex-start VM runs at most 7 days.
MAX_FLEX_START_WAIT_HOURS = 168.0


@dataclass(frozen=True)
class FallbackSpec:
    """The on-demand machine a job with a deadline switches to (survivor/policy/deadline.py decides when).

    None for `machine_type`/`gpu` means the Spot template's shape; `switch_back` lets the job return
    to Spot once it has enough slack again; `flex_start` lets the deadline policy pick flex-start
    (docs/flex-start.md) over on-demand, planning with a queue wait of `flex_start_wait_hours` (an
    assumption: Google states no bound for a resize request's wait).
    """

    machine_type: str | None = None
    gpu: str | None = None
    switch_back: bool = True
    flex_start: bool = False
    flex_start_wait_hours: float = FLEX_START_WAIT_HOURS


def section_keys(section: type) -> tuple[str, ...]:
    """The keys a spec section takes: its record's fields, in their order, so a new key is written
    once, as a field (the validator's unknown-key check and the written spec read this)."""
    return tuple(f.name for f in fields(section))


#: The keys of `fallback:`.
FALLBACK_KEYS = section_keys(FallbackSpec)


@dataclass(frozen=True)
class Shape:
    """Another machine a job can train on: the machine keys of its `compute:` section, read as
    `compute:` reads them (survivor/cloud/template.py; an N1 type without `gpu` gets compute's default
    GPU). None means the key is not written."""

    machine_type: str | None = None
    gpu: str | None = None  # TYPE:COUNT, or none

    def to_mapping(self) -> dict[str, str]:
        """The keys as the spec writes them."""
        return {k: v for k in SHAPE_KEYS if (v := getattr(self, k)) is not None}


#: The keys of a shape: the machine keys of `compute:`.
SHAPE_KEYS = section_keys(Shape)
#: The most alternative shapes a job may name: each is a template, and each move that is due asks
#: every zone of every region about every shape's GPU (survivor/mig/move.py `offers`).
MAX_SHAPES = 10


#: The bounds of placement's numbers (inclusive): a move after 1 minute to a week without a training
#: VM; a region left after 1 to 60 preemptions in an hour.
PLACEMENT_RANGES = {"move_after_minutes": (1.0, 7 * 24 * 60.0), "preemptions_per_hour": (1.0, 60.0)}


@dataclass(frozen=True)
class Placement:
    """Where a job may run: its regions in order of preference (the first is where it starts), the
    machine shapes it may run on besides its `compute:` one (`shapes`, in order of preference), and
    how long its group may have no training VM, failing on capacity (a stockout, a quota), before
    the job moves to the next place (survivor/policy/placement.py decides; docs/deadline.md)."""

    regions: tuple[str, ...]
    move_after_minutes: float = 30.0
    preemptions_per_hour: float = 3.0  # a region that preempts the job this often in the last hour: move on
    shapes: tuple[Shape, ...] = ()  # alternatives to the compute: shape, which comes first


#: The events a `notify:` target may name in `on:` (survivor/notify/events.py builds each).
NOTIFY_EVENTS = (
    "notice",
    "safe",
    "resumed",
    "done",
    "failed",
    "moved",
    "switched",
    "no_vm",
    "deadline_at_risk",
    "budget_warning",
    "budget_stopped",
)
#: A `notify:` target's payload formats (survivor/notify/formats.py).
NOTIFY_FORMATS = ("generic", "slack", "chat")


#: The most `notify:` targets a job may have (each is a thread of the agent's).
MAX_NOTIFY_TARGETS = 10


@dataclass(frozen=True)
class NotifyTarget:
    """Where a job's events go (survivor/notify/): a webhook's `url` (or the Secret Manager version
    holding it, read by the VM's service account), its payload `format`, the events it wants (`on`;
    empty: all of them), and how long the job may have no training VM before `no_vm` is said."""

    url: str
    format: str = "generic"
    on: tuple[str, ...] = ()
    no_vm_minutes: float = 30.0

    @property
    def secret(self) -> bool:
        """True when `url` names a Secret Manager version rather than the webhook itself."""
        return bool(SECRET_VERSION.fullmatch(self.url))

    def wants(self, kind: str) -> bool:
        """Whether this target is told events of `kind`."""
        return not self.on or kind in self.on

    def to_mapping(self) -> dict[str, Any]:
        """The target as the spec writes it."""
        out: dict[str, Any] = {"url": self.url, "format": self.format}
        if self.on:
            out["on"] = list(self.on)
        if self.no_vm_minutes != NotifyTarget.no_vm_minutes:
            out["no_vm_minutes"] = self.no_vm_minutes
        return out


@dataclass(frozen=True)
class Budget:
    """What the job may cost, in USD as `survivor report` prices it: a `budget_warning` at `warn_at`
    of it, and at `usd` the job stops, committed (`survivor start --budget` raises it)."""

    usd: float
    warn_at: float = 0.8


#: The keys of a `notify:` target and of `budget:`.
NOTIFY_KEYS = section_keys(NotifyTarget)
BUDGET_KEYS = section_keys(Budget)
