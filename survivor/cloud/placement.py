"""Capacity wherever it is: a job moves to its next region when its group has no training VM.

    >>> decide(spec.placement, Look(place="zones/us-west1-b", running=False, idle_seconds=2460,
    ...                             capacity_errors=("ZONE_RESOURCE_POOL_EXHAUSTED",)))
    MoveDecision(move=True, to_region='us-central1', reason='no training VM for 41 min with ...')

A job's spec may name the regions it can run in (`placement.regions`, the first where it starts). Its
group moves on when it has had no training VM for `move_after_minutes` while its group lists capacity
errors (a stockout, a quota: `listErrors`), or when its region preempted it `preemptions_per_hour`
times in the last hour. The move: a regional group of the same name and template is made in the next
region that takes it (any of its zones that offer the GPU, `make_group`), then the job dir records
the move (`survivor/moves/`, so the next look finds the group there), then the old group is deleted. The lease keeps
a single writer throughout: a VM of the new group restores only once the old VM's lease is gone.

A state-disk snapshot not yet in Cloud Storage (`survivor/pending/`, zonal) is waited for: the
move waits up to twice `move_after_minutes` for a VM of the old place to commit it, then moves and
records the snapshot as lost (`Move.lost_pending`), said in the log and in `status`.

Where it runs: `survivor watch` (the deploy in Cloud Run, while no VM runs at all) and the
simulator, which plays that watch. SkyPilot's managed jobs recover in the next region the same way
(EAGER_NEXT_REGION, sky/jobs/recovery_strategy.py); benchmarks/capacity.py replays both on the
Can't Be Late Spot traces (docs/benchmarks.md).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Callable

from survivor import log as logs
from survivor.cloud.compute import Compute, GroupRef
from survivor.jobdir.journal import Attempt
from survivor.jobdir.moves import Move, current_place, moves, record_move
from survivor.jobdir.storage import JobStorage
from survivor.jobdir.switches import parse_time
from survivor.spec import JobSpec, Placement

log = logs.get("placement")

#: listErrors codes that mean "no capacity here now": a stockout or a quota
#: (https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability).
CAPACITY_CODES = ("ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "QUOTA_EXCEEDED")


@dataclass(frozen=True)
class Look:
    """What one look at the job's group saw."""

    place: str  # zones/ZONE or regions/REGION
    running: bool = False  # a VM of the group is RUNNING
    idle_seconds: float = 0.0  # since the group last had a VM (or was made, or the job moved)
    capacity_errors: tuple[str, ...] = ()  # listErrors codes since then that mean no capacity
    preemptions_last_hour: int = 0  # in this place
    pending: bool = False  # a state-disk snapshot not yet in Cloud Storage


@dataclass(frozen=True)
class MoveDecision:
    """Whether to move now, where to, and why (said in the log and recorded with the move)."""

    move: bool
    to_region: str | None
    reason: str
    lost_pending: bool = False


def region_of(place: str) -> str:
    """Pure: `zones/us-west1-b` -> `us-west1`; `regions/us-west1` -> `us-west1`."""
    kind, _, where = place.partition("/")
    return where.rsplit("-", 1)[0] if kind == "zones" else where


def next_region(regions: tuple[str, ...], current: str) -> str | None:
    """Pure: the region after `current` in the spec's order, round the list (None with one region)."""
    if len(regions) < 2:
        return None
    if current not in regions:
        return regions[0]
    return regions[(regions.index(current) + 1) % len(regions)]


def decide(placement: Placement | None, look: Look) -> MoveDecision:
    """Pure: the move decision for one look."""
    if placement is None or len(placement.regions) < 2:
        return MoveDecision(False, None, "the spec names no other region (placement.regions)")
    if look.running:
        return MoveDecision(False, None, "a VM of the group runs")
    minutes = look.idle_seconds / 60
    after = placement.move_after_minutes
    capacity = bool(look.capacity_errors) and minutes >= after
    preempting = look.preemptions_last_hour >= placement.preemptions_per_hour
    if not (capacity or preempting):
        why = (f"capacity errors for {minutes:.0f} of {after:g} min" if look.capacity_errors
               else "no capacity error listed")
        return MoveDecision(False, None, f"no training VM for {minutes:.0f} min; {why}")
    here = region_of(look.place)
    to = next_region(placement.regions, here)
    if capacity:
        reason = f"no training VM in {here} for {minutes:.0f} min with {', '.join(sorted(set(look.capacity_errors)))}"
    else:
        reason = f"{here} preempted the job {look.preemptions_last_hour} times in the last hour"
    if look.pending and minutes < 2 * after:
        return MoveDecision(False, None, f"{reason}; waiting (up to {2 * after:g} min) for a VM of {here} to commit "
                                         "the snapshot on its state disk")
    return MoveDecision(True, to, reason + (" (a state-disk snapshot not yet in Cloud Storage is left behind)"
                                            if look.pending else ""), lost_pending=look.pending)


# -- the look and the move (side effects) -----------------------------------------------------------


def place_of(group: GroupRef) -> str:
    """`zones/Z` or `regions/R` of a group."""
    return f"zones/{group.zone}" if group.zone else f"regions/{group.region}"


def group_at(group: GroupRef, place: str) -> GroupRef:
    """The job's group (same project and name) at `place`."""
    kind, _, where = place.partition("/")
    return GroupRef(group.project, group.name, zone=where if kind == "zones" else None,
                    region=where if kind == "regions" else None)


def current_group(storage: JobStorage, group: GroupRef) -> GroupRef:
    """The job's group after its recorded moves (`group` as made when it never moved)."""
    return group_at(group, current_place(moves(storage), place_of(group)))


def _idle_since(attempts: list[Attempt], created: _dt.datetime | None, recorded: list[Move]) -> _dt.datetime | None:
    times = [created] + [parse_time(m.time) for m in recorded]
    for attempt in attempts:
        times += [parse_time(attempt.ended), parse_time(attempt.started)]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def look(compute: Compute, group: GroupRef, storage: JobStorage, now: _dt.datetime,
         scale: float = 1.0) -> tuple[GroupRef, Look] | None:
    """Looks at the job's current group (after its moves); None when it does not exist. `scale`:
    simulated seconds per second (the simulator's fast clock), applied to the durations seen."""
    from survivor.jobdir.disk_tier import PENDING
    from survivor.jobdir.journal import Journal

    recorded = moves(storage)
    current = group_at(group, current_place(recorded, place_of(group)))
    found = compute.get_group(current)
    if found is None:
        return None
    instances = compute.managed_instances(current)
    running = any(m["status"] == "RUNNING" for m in instances)
    attempts = Journal(storage).attempts()
    since = _idle_since(attempts, parse_time(found.get("creationTimestamp")), recorded) or now
    errors = tuple(e.get("code", "") for e in compute.group_errors(current)
                   if e.get("code", "").startswith(CAPACITY_CODES)
                   and (parse_time(e.get("timestamp")) or now) >= since)
    moved = parse_time(recorded[-1].time) if recorded else None
    hour_ago = now - _dt.timedelta(hours=1 / scale)
    preempted = sum(1 for a in attempts if a.outcome == "preempted" and (parse_time(a.ended) or now) >= hour_ago
                    and (moved is None or (parse_time(a.started) or now) >= moved))
    pending = bool(storage.list(PENDING))
    return current, Look(place_of(current), running, max(0.0, (now - since).total_seconds()) * scale, errors,
                         preempted, pending)


def look_and_move(compute: Compute, group: GroupRef, spec: JobSpec, storage: JobStorage, *, by: str,
                  now: _dt.datetime | None = None, scale: float = 1.0,
                  say: Callable[[str], None] = lambda _: None) -> Move | None:
    """One look at the job and, when `decide` says so, its move to the next region. Returns the Move
    made, else None."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    seen = look(compute, group, storage, now, scale)
    if seen is None:
        say(f"job {group.name}: no group at its recorded place; nothing to move")
        return None
    current, state = seen
    decision = decide(spec.placement, state)
    say(f"job {group.name} in {state.place}: {f'move to {decision.to_region}' if decision.move else 'stay'}: "
        f"{decision.reason}")
    if not decision.move or spec.placement is None:  # decide moves only with a placement
        return None
    return move(compute, current, decision, storage, by=by, now=now, regions=spec.placement.regions, say=say)


def move(compute: Compute, current: GroupRef, decision: MoveDecision, storage: JobStorage, *, by: str,
         now: _dt.datetime, regions: tuple[str, ...] = (), say: Callable[[str], None] = lambda _: None) -> Move | None:
    """Moves the job's group to `decision.to_region`, or the next region of `regions` after it that
    can take it (a region whose zones offer no GPU of the template refuses the group): the new
    regional group with the same template first, then the move's record (from then on the next look
    finds the group there), then the old group deleted. A look that dies between the first two finds
    the new group at its next move and reuses it. The lease keeps one writer: a VM of the new group
    restores only once the old one's lease is released or expired. None when no region could."""
    from survivor.cloud.compute import ComputeError
    from survivor.cloud.group import GroupOptions, make_group

    found = compute.get_group(current) or {}
    template = (found.get("instanceTemplate") or "").rsplit("/", 1)[-1]
    here = region_of(place_of(current))
    order = [decision.to_region]
    if decision.to_region in regions:
        at = regions.index(decision.to_region)
        order += [r for r in regions[at + 1:] + regions[:at] if r != here]
    refused = []
    for region in order:
        target = GroupRef(current.project, current.name, region=region)
        try:
            if compute.get_group(target) is None:
                make_group(compute, target, GroupOptions(template, skip_preflight=True, wait_seconds=0))
        except ComputeError as exc:  # RequestError too: no zone of the region offers the GPU
            refused.append(f"{region}: {exc}")
            log.warning("a region refused the job's group", region=region, error=str(exc))
            continue
        record = Move(time=now.isoformat(), from_place=place_of(current), to_place=place_of(target),
                      reason=decision.reason + (f" ({'; '.join(refused)})" if refused else ""), by=by,
                      lost_pending="yes" if decision.lost_pending else "")
        record_move(storage, record)
        log.warning("moved the job to another region", to=region, reason=decision.reason, by=by)
        compute.delete_group(current)
        say(f"job {current.name}: moved from {record.from_place} to {record.to_place}")
        return record
    say(f"job {current.name}: no other region could take its group: {'; '.join(refused)}")
    return None
