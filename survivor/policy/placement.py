"""Capacity wherever it is: whether a job's group moves to its next place (a region and a machine
shape) when it has no training VM, and where to.

    >>> decide(spec.placement, Look(place="zones/us-west1-b", running=False, idle_seconds=2460,
    ...                             capacity_errors=("ZONE_RESOURCE_POOL_EXHAUSTED",)))
    MoveDecision(move=True, to_region='us-central1', reason='no training VM for 41 min with ...', to_shape=0)

A job's spec may name the regions it can run in (`placement.regions`, the first where it starts) and
other machine shapes it can train on (`placement.shapes`; its `compute:` shape comes first). Its
group moves on when it has had no training VM for `move_after_minutes` while its group lists capacity
errors (a stockout, a quota: `listErrors`), or when its region preempted it `preemptions_per_hour`
times in the last hour; once a whole round of its places found no capacity, the wait doubles each
round up to MAX_ROUND_WAIT_MINUTES (`wait_minutes`). Where to: the next place of `places` (every
region for one shape, then the next shape), skipping a place whose region has no zone offering the
shape's GPU; with Compute Engine's capacity data the move is a bet (survivor/policy/move_bet.py),
and a new group starts where the first look would put it (`start_place`, for `make-group`).

Pure: what a look saw goes in (`look_from` builds the `Look`), a decision comes out. The look
itself and the move it decides (records, groups made and deleted) are survivor/group/move.py's.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Callable, Mapping

from survivor.cloud.capacity import Outlook
from survivor.cloud.compute import GroupRef
from survivor.jobdir.journal import Attempt
from survivor.jobdir.moves import Move, current_shape
from survivor.jobdir.switches import parse_time
from survivor.places import region_of
from survivor.policy import move_bet
from survivor.spec import JobSpec, Placement


#: listErrors codes that mean "no capacity here now": a stockout or a quota
#: (https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability).
CAPACITY_CODES = ("ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "QUOTA_EXCEEDED")


@dataclass(frozen=True)
class Place:
    """Where a job's group may be: a region and a machine shape (0: the job's `compute:` shape, N:
    `placement.shapes[N-1]`)."""

    region: str
    shape: int = 0


@dataclass(frozen=True)
class Look:
    """What one look at the job's group saw."""

    place: str  # zones/ZONE or regions/REGION
    running: bool = False  # a VM of the group is RUNNING
    idle_seconds: float = 0.0  # since the group last had a VM (or was made, or the job moved)
    capacity_errors: tuple[str, ...] = ()  # listErrors codes since then that mean no capacity
    preemptions_last_hour: int = 0  # in this place
    pending: bool = False  # a state-disk snapshot not yet in Cloud Storage
    shape: int = 0  # the shape the group runs (its last move's; 0 when it never changed shape)
    not_offered: frozenset[Place] = frozenset()  # places whose region has no zone with the shape's GPU
    moves_without_vm: int = 0  # moves since the job last had a VM (each found no capacity so far)


@dataclass(frozen=True)
class MoveDecision:
    """Whether to move now, where to (a region and a shape), and why (said in the log and recorded
    with the move)."""

    move: bool
    to_region: str | None
    reason: str
    lost_pending: bool = False
    to_shape: int = 0

    @property
    def to(self) -> Place | None:
        """The place moved to; None when the job stays."""
        return Place(self.to_region, self.to_shape) if self.move and self.to_region else None


def places(placement: Placement) -> tuple[Place, ...]:
    """Pure: every place of the spec in the order a job walks them: each region of `regions` for the
    job's `compute:` shape, then each region for the first of `shapes`, and so on.

    Regions first, because another region runs the same machine: the same speed, about the same
    price, the trainer's batch size and GPU count as tuned. Another shape changes all three (and
    the user ranked it after the job's own), so it is the later resort: a job leaves its shape only
    when every region is out of it."""
    return tuple(Place(region, shape) for shape in range(1 + len(placement.shapes)) for region in placement.regions)


def next_place(order: tuple[Place, ...], current: Place, skip: frozenset[Place] = frozenset()) -> Place | None:
    """Pure: the place after `current` in `order`, round the list, passing over `skip` (places that
    cannot take the job); the first one when `current` is not in `order`; None when there is none."""
    at = order.index(current) + 1 if current in order else 0
    return next((p for p in order[at:] + order[:at] if p != current and p not in skip), None)


def shape_text(placement: Placement, shape: int) -> str:
    """Pure: a shape as a person reads it: `compute:` for the job's own, else its machine keys."""
    if shape == 0 or shape > len(placement.shapes):
        return "compute:"
    written = placement.shapes[shape - 1]
    return " with ".join(v for v in (written.machine_type or "compute's machine type", written.gpu) if v)


#: The longest a job waits in one place before its next move once whole rounds of its places found no
#: capacity: the wait doubles each round from `move_after_minutes` up to this (or `move_after_minutes`
#: when that is longer).
MAX_ROUND_WAIT_MINUTES = 15.0


def wait_minutes(placement: Placement, moves_without_vm: int, places_count: int) -> float:
    """Pure: how long the group waits without a training VM before its next move: `move_after_minutes`,
    doubled for each whole round of the places already moved through without a VM (every one of them
    out of capacity), at most MAX_ROUND_WAIT_MINUTES. A stockout of every region then costs a few moves
    an hour, not one every look."""
    after = placement.move_after_minutes
    rounds = moves_without_vm // max(1, places_count - 1)
    return max(after, min(MAX_ROUND_WAIT_MINUTES, after * 2 ** min(rounds, 20)))


def decide(
    placement: Placement | None,
    look: Look,
    outlooks: Mapping[Place, Outlook] | None = None,
    hours_left: float = float("inf"),
) -> MoveDecision:
    """Pure: the move decision for one look. With Compute Engine's capacity data for the group's
    place (`outlooks`, docs/capacity-data.md), the move is a bet (survivor/policy/move_bet.py
    `weigh`: the training time the target is expected to give against the move's price, over the
    `hours_left` of training); without it, today's rule: to the next place of `places` after the
    group's once it has waited. A place in `look.not_offered` is passed over either way."""
    order = places(placement) if placement is not None else ()
    if placement is None or len(order) < 2:
        return MoveDecision(
            False, None, "the spec names no other region or shape (placement.regions, placement.shapes)"
        )
    if look.running:
        return MoveDecision(False, None, "a VM of the group runs")
    here_place = Place(region_of(look.place), look.shape)
    if outlooks and here_place in outlooks:
        known = {p: o for p, o in outlooks.items() if p in order or p == here_place}
        bet = move_bet.weigh(
            here_place,
            known,
            move_bet.Costs(hours_left=hours_left),
            skip=frozenset(look.not_offered),
            name=lambda p: p.region + (f" on {shape_text(placement, p.shape)}" if placement.shapes else ""),
        )
        seen = f" with {', '.join(sorted(set(look.capacity_errors)))}" if look.capacity_errors else ""
        if bet.to is None:
            return MoveDecision(
                False, None, f"no training VM in {here_place.region}{seen}; capacity data: {bet.reason}"
            )
        to = bet.to
        assert isinstance(to, Place)
        if look.pending and look.idle_seconds / 60 < 2 * placement.move_after_minutes:
            return MoveDecision(
                False,
                None,
                f"capacity data: {bet.reason}; waiting (up to "
                f"{2 * placement.move_after_minutes:g} min) for a VM of "
                f"{here_place.region} to commit the snapshot on its state disk",
            )
        return MoveDecision(
            True,
            to.region,
            f"no training VM in {here_place.region}{seen}; capacity data: {bet.reason}",
            lost_pending=look.pending,
            to_shape=to.shape,
        )
    minutes = look.idle_seconds / 60
    after = wait_minutes(placement, look.moves_without_vm, len(order))
    capacity = bool(look.capacity_errors) and minutes >= after
    preempting = look.preemptions_last_hour >= placement.preemptions_per_hour
    if not (capacity or preempting):
        rounds = (
            f" (every place was out {look.moves_without_vm // max(1, len(order) - 1)} time(s) round: the wait doubles)"
            if after > placement.move_after_minutes
            else ""
        )
        why = (
            f"capacity errors for {minutes:.0f} of {after:g} min{rounds}"
            if look.capacity_errors
            else "no capacity error listed"
        )
        return MoveDecision(False, None, f"no training VM for {minutes:.0f} min; {why}")
    here = region_of(look.place)
    shaped = f" ({shape_text(placement, look.shape)})" if placement.shapes else ""
    if capacity:
        reason = (
            f"no training VM in {here}{shaped} for {minutes:.0f} min with "
            f"{', '.join(sorted(set(look.capacity_errors)))}"
        )
    else:
        reason = f"{here} preempted the job {look.preemptions_last_hour} times in the last hour"
    to = next_place(order, Place(here, look.shape), look.not_offered)
    if to is None:
        return MoveDecision(
            False, None, f"{reason}; no other place offers its GPU (placement.regions, placement.shapes)"
        )
    if look.pending and minutes < 2 * after:
        return MoveDecision(
            False,
            None,
            f"{reason}; waiting (up to {2 * after:g} min) for a VM of {here} to commit the snapshot on its state disk",
        )
    at = order.index(Place(here, look.shape)) + 1 if Place(here, look.shape) in order else 0
    walked = order[at:] + order[:at]
    passed = [p for p in walked[: walked.index(to)] if p in look.not_offered]
    if passed:
        reason += (
            " (passed over "
            + ", ".join(
                p.region + (f" on {shape_text(placement, p.shape)}" if placement.shapes else "") for p in passed
            )
            + ": no zone there offers the GPU)"
        )
    return MoveDecision(
        True,
        to.region,
        reason + (" (a state-disk snapshot not yet in Cloud Storage is left behind)" if look.pending else ""),
        lost_pending=look.pending,
        to_shape=to.shape,
    )


@dataclass(frozen=True)
class Start:
    """Where a new group starts (`at`) and why, in one line for the operator."""

    at: Place
    reason: str


def start_place(
    asked: Place,
    outlooks: Mapping[Place, Outlook],
    skip: frozenset[Place] = frozenset(),
    name: Callable[[Place], str] = lambda p: p.region,
) -> Start:
    """Pure: where `make-group` makes a job's group: where the first look at it would put it. The
    place asked for (the first of the spec's places, as the operator named it) unless Compute
    Engine's capacity data (`outlooks`) makes a move from there a bet that pays (the same
    `move_bet.weigh` a look without a VM makes, over a job with all its training ahead): a group made
    where a look would move it at once would pay a move for nothing. Places in `skip` (no zone of
    their region offers the GPU) are never chosen. Without data for the asked place: the asked place."""
    if asked not in outlooks:
        return Start(asked, f"no capacity data for {name(asked)}: made where asked, as without the data")
    bet = move_bet.weigh(asked, outlooks, move_bet.Costs(hours_left=float("inf")), skip=skip, name=name)
    if bet.to is None:
        return Start(asked, f"capacity data: {bet.reason}")
    to = bet.to
    assert isinstance(to, Place)
    return Start(to, f"capacity data: starting in {bet.reason.removeprefix('moving to ')}")


def place_of(group: GroupRef) -> str:
    """`zones/Z` or `regions/R` of a group."""
    return f"zones/{group.zone}" if group.zone else f"regions/{group.region}"


def group_at(group: GroupRef, place: str) -> GroupRef:
    """The job's group (same project and name) at `place`."""
    kind, _, where = place.partition("/")
    return GroupRef(
        group.project, group.name, zone=where if kind == "zones" else None, region=where if kind == "regions" else None
    )


def _idle_since(attempts: list[Attempt], created: _dt.datetime | None, recorded: list[Move]) -> _dt.datetime | None:
    times = [created] + [parse_time(m.time) for m in recorded]
    for attempt in attempts:
        times += [parse_time(attempt.ended), parse_time(attempt.started)]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def preempted_in(
    attempts: list[Attempt], region: str, now: _dt.datetime, *, moved: _dt.datetime | None = None, scale: float = 1.0
) -> int:
    """Pure: how many of `attempts` ended preempted in `region` in the last hour before `now` (an hour
    of the simulator's fast clock at `scale`) and began after the job's last move (`moved`). An
    attempt's region is its VM's zone's; one recorded without a zone (written before survivor kept
    it) counts wherever the group is."""
    hour_ago = now - _dt.timedelta(hours=1 / scale)
    return sum(
        1
        for a in attempts
        if a.outcome == "preempted"
        and (not a.zone or region_of(f"zones/{a.zone}") == region)
        and (parse_time(a.ended) or now) >= hour_ago
        and (moved is None or (parse_time(a.started) or now) >= moved)
    )


def look_from(
    place: str,
    *,
    instances: list[dict],
    attempts: list[Attempt],
    errors: list[dict],
    created: _dt.datetime | None,
    recorded: list[Move],
    pending: bool,
    now: _dt.datetime,
    scale: float = 1.0,
    booting: str | None = None,
) -> Look:
    """Pure: the Look at the job's group at `place`, from what was read of it: its instances
    (`Compute.managed_instances`), the journal's attempts, its `listErrors`, when it was made, the
    job's recorded moves, whether a state-disk snapshot is pending.

    `booting`: the VM whose agent looks at its own boot (survivor/agent/boot.py). It runs but does
    not train yet, so it is no training VM; and it got capacity, so the capacity errors listed
    before it do not count: at a boot only a region that keeps preempting the job moves it."""
    running = any(m["status"] == "RUNNING" and m.get("name") != booting for m in instances)
    since = _idle_since(attempts, created, recorded) or now
    codes = (
        ()
        if booting
        else tuple(
            e.get("code", "")
            for e in errors
            if e.get("code", "").startswith(CAPACITY_CODES) and (parse_time(e.get("timestamp")) or now) >= since
        )
    )
    moved = parse_time(recorded[-1].time) if recorded else None
    preempted = preempted_in(attempts, region_of(place), now, moved=moved, scale=scale)
    return Look(
        place,
        running,
        max(0.0, (now - since).total_seconds()) * scale,
        codes,
        preempted,
        pending,
        shape=current_shape(recorded),
        moves_without_vm=moves_without_vm(attempts, recorded),
    )


def moves_without_vm(attempts: list[Attempt], recorded: list[Move]) -> int:
    """Pure: how many of the job's moves came after its newest attempt began (after its last VM):
    moves that found no capacity so far. A move without a readable time counts (the later one)."""
    started = [t for t in (parse_time(a.started) for a in attempts) if t is not None]
    last_vm = max(started) if started else None
    times = [parse_time(m.time) for m in recorded]
    return sum(1 for t in times if last_vm is None or t is None or t > last_vm)


def place_machines(spec: JobSpec) -> dict[Place, tuple[str, str | None, int]]:
    """Pure: the machine (type, GPU type, GPU count) of each place of the spec's placement; a shape
    whose keys do not parse is left out (its place is decided without capacity data)."""
    from survivor.cloud.template import MachineOptions, parse_gpu
    from survivor.spec import SpecError

    if spec.placement is None:
        return {}
    try:
        own = MachineOptions.from_spec(spec)
    except (SpecError, ValueError, TypeError):
        return {}
    machines: dict[int, tuple[str, str | None, int]] = {0: (own.machine_type, own.gpu_type, own.gpu_count or 0)}
    for i, shape in enumerate(spec.placement.shapes, start=1):
        try:
            gpu = parse_gpu(shape.gpu) if shape.gpu is not None else (own.gpu_type, own.gpu_count or 0)
        except SpecError:
            continue
        machines[i] = (shape.machine_type or own.machine_type, *gpu)
    return {p: machines[p.shape] for p in places(spec.placement) if p.shape in machines}


def left_behind(recorded: list[Move], group: GroupRef) -> bool:
    """Pure: the job's recorded moves (`moves` read with the spec's placement) put its group
    somewhere else than `group` (a VM's own): a move was cut before it deleted `group`, or its
    delete was refused. Such a group's VM never trains."""
    return bool(recorded) and recorded[-1].to_place != place_of(group)


def machine_text(template: dict) -> str:
    """Pure: a template's machine as a move's record names it: `g2-standard-8` (its GPUs built in),
    `n1-standard-8 with nvidia-tesla-t4:1`."""
    props = template.get("properties") or {}
    attached = (props.get("guestAccelerators") or [{}])[0]
    kind = str(attached.get("acceleratorType") or "").rsplit("/", 1)[-1]
    return str(props.get("machineType") or "").rsplit("/", 1)[-1] + (
        f" with {kind}:{attached.get('acceleratorCount')}" if kind else ""
    )
