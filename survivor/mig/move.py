"""Capacity wherever it is: a job moves to its next place, a region and a machine shape, when its
group has no training VM.

    >>> decide(spec.placement, Look(place="zones/us-west1-b", running=False, idle_seconds=2460,
    ...                             capacity_errors=("ZONE_RESOURCE_POOL_EXHAUSTED",)))
    MoveDecision(move=True, to_region='us-central1', reason='no training VM for 41 min with ...', to_shape=0)

A job's spec may name the regions it can run in (`placement.regions`, the first where it starts) and
other machine shapes it can train on (`placement.shapes`; its `compute:` shape comes first). Its
group moves on when it has had no training VM for `move_after_minutes` while its group lists capacity
errors (a stockout, a quota: `listErrors`), or when its region preempted it `preemptions_per_hour`
times in the last hour; once a whole round of its places found no capacity, the wait doubles each
round up to MAX_ROUND_WAIT_MINUTES (`wait_minutes`). Where to: the next place of `places` (every region for one shape, then the
next shape), skipping a place whose region has no zone offering the shape's GPU. The move is a
recorded intention that any later look completes: the job dir records it first (`survivor/moves/`,
with the shape; claimed before, `survivor/jobdir/claims.py`, so two looks at once move once), then a
regional group of the same name is made in the place's region with the shape's template
(`make_group`; a shape's template, `<template>-shape-N`, is made from the job's first, before the
record); in the region the group is in already, the group itself takes the shape's template instead
(a second group of the same name in one region would share its instances' names); then the old group
is deleted. Each step is idempotent and retried (retry.MOVE_STEP), and every look starts with
`complete_moves`: the records win over whatever group still exists, so a look cut anywhere leaves
nothing the next one does not finish. The lease keeps a single writer throughout: a VM of the new
group restores only once the old VM's lease is gone, and a VM of a group the records left leaves it
without training (survivor/agent/boot.py).

A state-disk snapshot not yet in Cloud Storage (`survivor/pending/`, zonal) is waited for: the
move waits up to twice `move_after_minutes` for a VM of the old place to commit it, then moves and
records the snapshot as lost (`Move.lost_pending`), said in the log and in `status`.

Where it runs: where the deadline policy runs. At boot in the agent (survivor/agent/boot.py),
before it takes the lease, when its region preempted the job `preemptions_per_hour` times in the
last hour (`look_and_move(booting=...)`: its own VM is no training VM, and it got capacity); and in
`survivor watch` (the deploy in Cloud Run, while no VM runs at all) and the simulator, which plays
that watch. SkyPilot's managed jobs recover in the next region the same way
(EAGER_NEXT_REGION, sky/jobs/recovery_strategy.py); benchmarks/capacity.py replays both on the
Can't Be Late Spot traces (docs/benchmarks.md).
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import replace
from typing import Callable, TypeVar

from survivor import log as logs
from survivor import retry
from survivor.cloud.capacity import Outlook
from survivor.cloud.compute import Compute, GroupRef
from survivor.jobdir import claims
from survivor.jobdir.moves import Move, current_place, current_shape, moves, record_move
from survivor.jobdir.storage import JobStorage
from survivor.jobdir.switches import parse_time
from survivor.places import region_of
from survivor.policy.deadline import SpotOutlook, spot_outlook
from survivor.policy.placement import (
    Look,
    MoveDecision,
    Place,
    decide,
    group_at,
    look_from,
    machine_text,
    place_machines,
    place_of,
    places,
    shape_text,
)
from survivor.spec import JobSpec, Placement

log = logs.get("placement")
T = TypeVar("T")


# -- the look and the move (side effects) -----------------------------------------------------------


def current_group(storage: JobStorage, group: GroupRef) -> GroupRef:
    """The job's group after its recorded moves (`group` as made when it never moved)."""
    return group_at(group, current_place(moves(storage), place_of(group)))


def look(
    compute: Compute,
    group: GroupRef,
    storage: JobStorage,
    now: _dt.datetime,
    scale: float = 1.0,
    booting: str | None = None,
    placement: Placement | None = None,
) -> tuple[GroupRef, Look] | None:
    """Looks at the job's current group (after its moves); None when it does not exist. `scale`:
    simulated seconds per second (the simulator's fast clock), applied to the durations seen;
    `booting`: the VM looking at its own boot (`look_from`). `Look.not_offered` is left empty:
    `offers` fills it in when a move is due. Given the spec's `placement`, a move record outside its
    places is skipped (`moves`); when the newest record puts the group where there is none, the look
    is at `group`, as the records left the job there: neither stops the job's next move."""
    from survivor.jobdir.disk_tier import PENDING
    from survivor.jobdir.journal import Journal

    recorded = moves(storage) if placement is None else moves(storage, placement.regions, len(placement.shapes))
    current = group_at(group, current_place(recorded, place_of(group)))
    found = compute.get_group(current)
    if found is None and place_of(current) != place_of(group):
        log.warning(
            "no group where the job's newest move record puts it; looking at its address",
            recorded=place_of(current),
            address=place_of(group),
        )
        kept = [i + 1 for i, m in enumerate(recorded) if m.to_place == place_of(group)]
        recorded, current, found = recorded[: kept[-1] if kept else 0], group, compute.get_group(group)
    if found is None:
        return None
    return current, look_from(
        place_of(current),
        instances=compute.managed_instances(current),
        attempts=Journal(storage).attempts(),
        errors=[] if booting else compute.group_errors(current),
        created=parse_time(found.get("creationTimestamp")),
        recorded=recorded,
        pending=bool(storage.list(PENDING)),
        now=now,
        scale=scale,
        booting=booting,
    )


def job_template(compute: Compute, current: GroupRef, shape: int) -> tuple[str, dict | None]:
    """(name, body) of the job's own template (its `compute:` shape), from the group's current one:
    a deadline's on-demand twin and a shape's template (`shape_template_name`) are named after it."""
    from survivor.mig.templates import ON_DEMAND_SUFFIX, shape_template_name

    found = compute.get_group(current) or {}
    name = (found.get("instanceTemplate") or "").rsplit("/", 1)[-1]
    name = name[: -len(ON_DEMAND_SUFFIX)] if name.endswith(ON_DEMAND_SUFFIX) else name
    suffix = shape_template_name("", shape)
    if shape and name.endswith(suffix):
        name = name[: -len(suffix)]
    return name, compute.get_template(name)


def offers(compute: Compute, current: GroupRef, spec: JobSpec, job: dict) -> frozenset[Place]:
    """The places of the spec that cannot take the job: no zone of the region (for the group's own
    region, of the group's zones) offers the shape's GPU. Asked only when a move is due: one
    `acceleratorTypes.list` per zone."""
    from survivor.mig.make import regional_zones
    from survivor.mig.templates import shape_template_body

    here = region_of(place_of(current))
    # in its own region the group changes template in place: its zones are the ones that count
    spread = ((compute.get_group(current) or {}).get("distributionPolicy") or {}).get("zones") or []
    own = [current.zone] if current.zone else [z["zone"].rsplit("/", 1)[-1] for z in spread] or None
    refused = set()
    for place in places(spec.placement) if spec.placement is not None else ():
        body = shape_template_body(job, spec, place.shape)
        zones = regional_zones(compute, place.region, body)
        if place.region == here and own is not None:
            zones = [z for z in zones if z in own]
        if not zones:
            refused.add(place)
    return frozenset(refused)


def look_and_move(
    compute: Compute,
    group: GroupRef,
    spec: JobSpec,
    storage: JobStorage,
    *,
    by: str,
    now: _dt.datetime | None = None,
    scale: float = 1.0,
    booting: str | None = None,
    say: Callable[[str], None] = lambda _: None,
    seen: str | None = None,
) -> Move | None:
    """One look at the job and, when `decide` says so, its move to the next place. Returns the Move
    made, else None. Which places cannot take the job (`offers`) is asked only once a move is due.
    `booting`: the VM whose agent looks at its boot, before it takes the lease (`look_from`). The look
    first completes a move that a look before it recorded and did not finish (`complete_moves`).
    `seen`: the job dir's records as the caller read them before its decisions
    (`claims.what_was_seen`; read here when not given): a move is claimed under it."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    seen = seen if seen is not None else claims.what_was_seen(storage)
    if spec.placement is not None:
        complete_moves(compute, group, storage, spec.placement, say=say)
        _state_disks_left_behind(compute, spec, storage, say)
    seen_look = look(compute, group, storage, now, scale, booting, placement=spec.placement)
    if seen_look is None:
        say(f"job {group.name}: no group at its recorded place; nothing to move")
        return None
    current, state = seen_look
    # capacity data while no VM of the group runs, not at a boot: the booting VM got capacity, and at
    # a boot only a region that keeps preempting the job moves it (`look_from`)
    outlooks = (
        outlooks_for(compute, spec, Place(region_of(state.place), state.shape), current.zone)
        if spec.placement is not None and not state.running and booting is None
        else None
    )
    decision = decide(spec.placement, state, outlooks)
    job = None
    if decision.move:
        _, job = job_template(compute, current, state.shape)
        if job is not None:
            state = replace(state, not_offered=offers(compute, current, spec, job))
            decision = decide(spec.placement, state, outlooks)
    where = ""
    if decision.move and spec.placement is not None:  # decide moves only with a placement
        where = f"move to {decision.to_region}" + (
            f", shape {shape_text(spec.placement, decision.to_shape)}" if spec.placement.shapes else ""
        )
    say(f"job {group.name} in {state.place}: {where or 'stay'}: {decision.reason}")
    if not decision.move or spec.placement is None:
        return None
    moved = move(compute, current, decision, storage, by=by, now=now, spec=spec, shape=state.shape, say=say, seen=seen)
    if moved is not None:
        _state_disks_left_behind(compute, spec, storage, say)
    return moved


def _state_disks_left_behind(compute: Compute, spec: JobSpec, storage: JobStorage, say: Callable[[str], None]) -> None:
    """A job with a state disk: the disks of the regions its moves left deleted once nothing waits on
    them (survivor/mig/state_disks.py `clean_after_moves`); its old group's delete does not."""
    if spec.state_disk_gb and spec.placement is not None:
        from survivor.mig import state_disks

        state_disks.clean_after_moves(
            compute, spec.name, storage, spec.placement.regions, shapes=len(spec.placement.shapes), say=say
        )


def outlooks_for(
    compute: Compute, spec: JobSpec, here: Place | None = None, zone: str | None = None
) -> dict[Place, Outlook]:
    """Compute Engine's capacity data for every place of the spec (survivor/cloud/capacity.py
    `read_outlooks`); `here` in `zone` only, when the group there is zonal. A place it could not
    get is left out, said once in the log, and decided without it. `here` is asked last: the answers
    come one request at a time, and a capacity that returns everywhere between two of them must not
    look, to a move, like capacity elsewhere and none here (a job moved so once in a simulated
    outage of every region: its own region was read just before the end, another just after)."""
    from survivor.cloud.capacity import read_outlooks

    wanted = list(place_machines(spec).items())
    asked = sorted(wanted, key=lambda item: item[0] == here)  # stable: the others in their order
    found = read_outlooks(
        compute.capacity_advice,
        compute.capacity_history,
        [(p.region, machine, zone if p == here else None) for p, machine in asked],
    )
    got = {asked[i][0]: outlook for i, outlook in found.items()}
    return {p: got[p] for p, _ in wanted if p in got}


def spot_outlook_for(compute: Compute, spec: JobSpec, group: GroupRef, storage: JobStorage) -> SpotOutlook | None:
    """The deadline policy's view of Spot from Compute Engine's capacity data (survivor/policy/
    deadline.py `spot_outlook`): the places the group may run Spot in, those of the spec's placement
    (its own, on the shape its recorded moves give it, in its zone when the group is zonal) or,
    without one, its own place on the spec's machine. None without data (said once in the log): the
    policy decides as without it. Never raises: a failure to read the data never stops a decision,
    nor training at a boot."""
    from survivor.cloud.capacity import FALLBACK, read_outlooks
    from survivor.cloud.template import MachineOptions

    try:
        placement = spec.placement
        shape = current_shape(moves(storage, placement.regions, len(placement.shapes))) if placement else 0
        here = Place(region_of(place_of(group)), shape)
        if spec.placement is not None:
            outlooks = outlooks_for(compute, spec, here, group.zone)
        else:
            own = MachineOptions.from_spec(spec)
            machine = (own.machine_type, own.gpu_type, own.gpu_count or 0)
            found = read_outlooks(
                compute.capacity_advice, compute.capacity_history, [(here.region, machine, group.zone)]
            )
            outlooks = {here: found[0]} if 0 in found else {}
    except Exception as exc:  # noqa: BLE001 -- the data is an input, never a requirement
        FALLBACK.say(place_of(group), f"advice: {type(exc).__name__}: {exc}")
        return None
    return spot_outlook(outlooks, here)


def move(
    compute: Compute,
    current: GroupRef,
    decision: MoveDecision,
    storage: JobStorage,
    *,
    by: str,
    now: _dt.datetime,
    spec: JobSpec,
    shape: int = 0,
    say: Callable[[str], None] = lambda _: None,
    seen: str | None = None,
) -> Move | None:
    """Moves the job's group to `decision.to`, or the next place of the spec after it that can take
    it (a region whose zones offer no GPU of the shape refuses the group). None when no place could,
    or when another look claimed the job first.

    A move is a recorded intention, carried out by `complete_moves` here and by any later look
    whatever cuts this one: the place's templates are made (the shape's, from the job's own) and
    its region checked, then the move is claimed (`claims.claim` under `seen`: two looks that read
    the same records move once) and recorded, and only then is the new group made and the old one
    deleted, each step idempotent and retried. A new group the API refuses (not a transient failure)
    is a record undone: a second record takes the job back, and the next place is tried. In the
    group's own region the group itself takes the shape's template and recreates its VM. The lease
    keeps one writer: a VM of the new group restores only once the old one's lease is released or
    expired, and a VM of a group the records left never trains (survivor/agent/boot.py)."""
    from survivor.cloud.compute import ComputeError, name_problems
    from survivor.jobdir.switches import ON_DEMAND
    from survivor.mig.address import RequestError
    from survivor.mig.make import regional_zones
    from survivor.mig.templates import on_demand_template_body, shape_template_body, template_mode

    placement = spec.placement
    if placement is None:
        raise ValueError("a move needs the spec's placement")
    base, job = job_template(compute, current, shape)
    own = ((compute.get_group(current) or {}).get("instanceTemplate") or "").rsplit("/", 1)[-1]
    here = Place(region_of(place_of(current)), shape)
    order = places(placement)
    first = decision.to or here
    at = order.index(first) if first in order else 0
    tries = [first] + [p for p in order[at:] + order[:at] if p not in (first, here)]
    refused: list[str] = []
    written = 0  # records this look wrote: each one a millisecond after the last, so they sort in order
    for place in tries:
        where = place.region + (f" on {shape_text(placement, place.shape)}" if placement.shapes else "")
        try:
            if place.shape == shape:  # the same shape: the group's own template (Spot, or the deadline's on-demand)
                body = compute.get_template(own) or {"name": own}
            elif job is None:
                raise ComputeError(f"template {base}: not found; the shape's template is made from it")
            else:
                body = shape_template_body(job, spec, place.shape)
                too_long = name_problems("template", body["name"])
                if too_long:  # a template made before make-template checked its shapes' names
                    raise RequestError(too_long[0] + f" (shorten the job's template name {base!r})")
                if compute.get_template(body["name"]) is None:
                    compute.insert_template(body)
                    say(f"template {body['name']}: created (shape {shape_text(placement, place.shape)})")
                if template_mode(own)[1] == ON_DEMAND:
                    # a group the deadline policy put on on-demand stays on it on the new shape: the
                    # shape's on-demand twin, made as the switch makes the job's (the shape's Spot
                    # template is kept for the switch back, which finds it by the twin's name)
                    body = on_demand_template_body(body)
                    if compute.get_template(body["name"]) is None:
                        compute.insert_template(body)
                        say(f"template {body['name']}: created (on-demand, shape {shape_text(placement, place.shape)})")
            if place.region != here.region and "properties" in body and not regional_zones(compute, place.region, body):
                # what make_group would refuse, found before the record
                raise RequestError(f"group {current.name}: no zone of region {place.region} offers the template's GPU")
        except ComputeError as exc:  # RequestError too
            refused.append(f"{where}: {exc}")
            log.warning("a place refused the job's group", region=place.region, shape=place.shape, error=str(exc))
            continue
        # Not a second group in the group's own region: its VMs would be named as this one's ("the MIG
        # appends a hyphen and a random four-character string to the base instance name",
        # InstanceGroupManager.baseInstanceName, https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers),
        # and a zone's instance names are unique: the group takes the shape's template (complete_moves).
        target = (
            current if place.region == here.region else GroupRef(current.project, current.name, region=place.region)
        )
        record = Move(
            time=(now + _dt.timedelta(milliseconds=written)).isoformat(),
            from_place=place_of(current),
            to_place=place_of(target),
            reason=decision.reason + (f" ({'; '.join(refused)})" if refused else ""),
            by=by,
            lost_pending="yes" if decision.lost_pending else "",
            shape=str(place.shape) if placement.shapes else "",
            machine=machine_text(body) if placement.shapes else "",
        )
        if seen is not None and not claims.claim(storage, seen, what=f"move to {record.to_place}", by=by, now=now):
            say(f"job {current.name}: another look moved or switched it first; this one leaves it")
            return None
        if not record_move(storage, record):
            say(f"job {current.name}: a move of the same time is recorded already; this look leaves it")
            return None
        written += 1
        log.warning("moving the job", to=place.region, shape=place.shape, reason=decision.reason, by=by)
        try:
            complete_moves(compute, current, storage, placement, say=say, raise_on_new_group=True)
        except ComputeError as exc:  # refused, not transient (those were retried): the record is undone
            back = Move(
                time=(now + _dt.timedelta(milliseconds=written)).isoformat(),
                from_place=record.to_place,
                to_place=record.from_place,
                reason=f"undone: its group could not be made: {exc}"[:2000],
                by=by,
                shape=str(shape) if placement.shapes else "",
                machine=machine_text(compute.get_template(own) or {}) if placement.shapes else "",
            )
            record_move(storage, back)
            written += 1
            refused.append(f"{where}: {exc}")
            log.warning("a place refused the job's group", region=place.region, shape=place.shape, error=str(exc))
            seen = claims.what_was_seen(storage) if seen is not None else None  # the records it wrote, claimed anew
            continue
        say(
            f"job {current.name}: moved from {record.from_place} to {record.to_place}"
            + (f", shape {record.machine}" if record.machine else "")
        )
        return record
    say(f"job {current.name}: no other place could take its group: {'; '.join(refused)}")
    return None


# -- a recorded move carried out (any look) --------------------------------------------------------


def template_for_shape(own: str, shape: int) -> str:
    """Pure: the template a group of the job runs on `shape`, from the one it runs now (`own`, any of
    the job's templates): `own` when it is that shape's already; else the shape's template
    (`shape_template_name` of the job's own), its on-demand twin when `own` is on-demand (as `move`
    makes them)."""
    from survivor.jobdir.switches import ON_DEMAND
    from survivor.mig.templates import ON_DEMAND_SUFFIX, shape_template_name, template_mode

    base, mode = template_mode(own)
    found = re.fullmatch(r"(.+)-shape-([0-9]+)", base)
    job, at = (found.group(1), int(found.group(2))) if found else (base, 0)
    if at == shape:
        return own
    return shape_template_name(job, shape) + (ON_DEMAND_SUFFIX if mode == ON_DEMAND else "")


def _step(call: Callable[[], T]) -> T:
    """One idempotent Compute Engine step of a move, retried while it fails transiently (a 503, a
    reset: retry.MOVE_STEP); a refusal is raised at once."""
    return retry.MOVE_STEP.retrying()(call)


def _template_of(found: dict) -> str:
    return (found.get("instanceTemplate") or "").rsplit("/", 1)[-1]


def _delete_group(compute: Compute, old: GroupRef) -> bool:
    """Deletes `old` if it exists; True when it did. Idempotent: a group already gone is the step
    done, whether the `get` finds none or the delete answers 404 (google-api-core's NotFound for
    HTTP 404, survivor's NotFound: the resource does not exist; the discovery document's
    instanceGroupManagers.delete "Deletes the specified managed instance group and all of the
    instances in that group", so nothing of it is left to delete)."""
    from survivor.cloud.compute import NotFound

    if _step(lambda: compute.get_group(old)) is None:
        return False
    try:
        _step(lambda: compute.delete_group(old))
    except NotFound:
        return False
    return True


def _make_group(compute: Compute, target: GroupRef, template: str) -> None:
    """Makes the regional group `target` from `template` unless it exists. Idempotent: `make_group`
    finds a group of that name and template and does nothing; an insert that took effect before its
    answer was lost is found by the retry's `get`, and a 409 (two looks at once) is one found."""
    from survivor.cloud.compute import ComputeError
    from survivor.mig.make import GroupOptions, make_group

    def make() -> None:
        try:
            # the old region's group still exists until the move deletes it: a second place on purpose
            make_group(compute, target, GroupOptions(template, skip_preflight=True, wait_seconds=0, one_place=False))
        except ComputeError:
            if compute.get_group(target) is None:
                raise

    _step(make)


def _keep_flex_start(compute: Compute, group: GroupRef, storage: JobStorage, say: Callable[[str], None]) -> None:
    """The job's recorded switch to flex-start carried out on the group a move just made (its newest
    switch record names the `-flex-start` template; `complete_switch` asks for the VM with a resize
    request, or goes on-demand when Compute Engine refuses it). A step that fails is said: the next
    look (the watch's own `complete_switch`) tries again."""
    from survivor.cloud.compute import ComputeError
    from survivor.mig.address import RequestError
    from survivor.mig.switch import complete_switch

    try:
        complete_switch(compute, group, storage, say=say)
    except (ComputeError, RequestError) as exc:
        say(
            f"job {group.name}: its switch to flex-start not carried out on the new group yet ({exc}); the next "
            "look tries again"
        )
        log.warning("flex-start not carried out on a moved group", group=group.name, error=str(exc))


def complete_moves(
    compute: Compute,
    group: GroupRef,
    storage: JobStorage,
    placement: Placement,
    *,
    say: Callable[[str], None] = lambda _: None,
    raise_on_new_group: bool = False,
) -> GroupRef:
    """The job's recorded moves carried out, whatever cut the look that recorded them; the job's
    current group (where its newest record puts it) returned. The records win over whatever group
    still exists: the group at the newest record's place is made when missing (with the template
    its move chose, `template_for_shape` of the group it moved from), or takes that template in its
    own region; then every group at another place the records name in the spec's regions, or at
    `group` (the look's address), is deleted. Only records inside the spec's `placement` count
    (`moves`): a group of the job's name elsewhere may be someone else's. Each step is idempotent
    and retried (retry.MOVE_STEP); a step refused is said and left to the next look, except a new
    group refused with `raise_on_new_group` (the move's own look undoes its record)."""
    from survivor.cloud.compute import ComputeError
    from survivor.jobdir.switches import FLEX_START
    from survivor.mig.templates import template_mode

    recorded = moves(storage, placement.regions, len(placement.shapes))
    if not recorded:
        return group
    last = recorded[-1]
    current = group_at(group, last.to_place)
    shape = current_shape(recorded)
    try:
        found = _step(lambda: compute.get_group(current))
        if last.to_place == last.from_place and found is not None:  # a new shape in the group's own region
            wanted = template_for_shape(_template_of(found), shape)
            if wanted != _template_of(found):
                _step(lambda: compute.set_group_template(current, wanted))
                # only the members made from another template: one the group made (or is making) from the
                # new one since it took it, a VM recreated again would lose its boot
                members = [
                    (m["zone"], m["name"])
                    for m in _step(lambda: compute.managed_instances(current))
                    if m["zone"] and m.get("template") != wanted
                ]
                if members:
                    _step(lambda: compute.recreate_instances(current, members))
                say(f"job {group.name}: its group took template {wanted}, as its move of {last.time} said")
        elif found is None:
            source = _step(lambda: compute.get_group(group_at(group, last.from_place)))
            if source is None:
                say(
                    f"job {group.name}: its records put its group at {last.to_place}, where there is none, and "
                    f"the group it moved from ({last.from_place}) is gone too: make it again (survivor make-group)"
                )
                log.error(
                    "no group where the records put the job, nor where it moved from",
                    to=last.to_place,
                    from_place=last.from_place,
                )
                return current
            wanted = template_for_shape(_template_of(source), shape)
            spot, mode = template_mode(wanted)
            # a group on flex-start gets its VM from a resize request, never from its size (a new group
            # of the -flex-start template would make one outside any request): it is
            # made on the Spot template, and the recorded switch to flex-start is carried out on it
            # below as any switch is (repairs off, the request accepted before a Spot VM goes, a
            # refusal on-demand in the same look: group.complete_switch)
            _make_group(compute, current, spot if mode == FLEX_START else wanted)
            say(f"job {group.name}: its group made at {last.to_place}, where its move of {last.time} put it")
            if mode == FLEX_START:
                _keep_flex_start(compute, current, storage, say)
    except ComputeError as exc:
        if raise_on_new_group and not retry.is_transient_compute(exc):
            raise
        say(f"job {group.name}: its group at {last.to_place} not made yet ({exc}); the next look tries again")
        log.warning("a recorded move not completed", to=last.to_place, error=str(exc))
        return current
    for place in dict.fromkeys([place_of(group)] + [p for m in recorded for p in (m.from_place, m.to_place)]):
        if place == last.to_place or (place != place_of(group) and region_of(place) not in placement.regions):
            continue
        old = group_at(group, place)
        try:
            if _delete_group(compute, old):
                say(f"job {group.name}: its group at {place} deleted (the records put the job at {last.to_place})")
                log.warning("deleted a group the job's records moved away from", place=place, to=last.to_place)
        except ComputeError as exc:  # a 403: the next look (or the left VM itself, leaving) ends it
            say(f"job {group.name}: its group at {place} not deleted ({exc}); the next look tries again")
            log.warning("a group the job moved away from not deleted", place=place, error=str(exc))
    return current
