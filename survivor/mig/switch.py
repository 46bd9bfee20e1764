"""The deadline's switch: a job's group between its Spot, on-demand and flex-start templates.

    >>> switch_group(compute, group, "on-demand", "behind the goodput line", by="watch", storage=storage)
    Switch(time='...', to_mode='on-demand', from_mode='spot', ...)

The deadline policy decides (survivor/policy/deadline.py); the agent at its boot and `survivor
watch` at each look act on it here. A switch is recorded in the job dir first
(survivor/jobdir/switches.py), so any later look completes one a cut left (`complete_switch`).
"""

from __future__ import annotations

import datetime as _dt
import math
import time

from survivor import log as logs
from survivor.cloud.compute import Compute, ComputeError, GroupRef, name_problems
from survivor.jobdir import claims
from survivor.jobdir.storage import JobStorage, StorageError
from survivor.jobdir.switches import Switch, SwitchFailure, record_switch, record_switch_failure, switches
from survivor.mig.address import RequestError, Say, silent
from survivor.mig.templates import (
    SUFFIXES,
    flex_start_template_body,
    on_demand_template_body,
    spec_of,
    template_mode,
)
from survivor.policy.deadline import FLEX_START_MAX_RUN_HOURS
from survivor.jobdir.switches import FLEX_START, ON_DEMAND, SPOT, Mode

log = logs.get("group")


#: What a group needs for a resize request (docs/flex-start.md F11, F13): repairs off ("you must not
#: configure autoscaling and must turn off repairs", about-resize-requests-mig), and a regional
#: group's VMs in one zone (the regional example: targetShape ANY_SINGLE_ZONE, redistribution NONE).
FLEX_START_GROUP = {"instanceLifecyclePolicy": {"defaultActionOnFailure": "DO_NOTHING"}}


FLEX_START_REGIONAL = {
    "distributionPolicy": {"targetShape": "ANY_SINGLE_ZONE"},
    "updatePolicy": {"instanceRedistributionType": "NONE"},
}


#: What a group on Spot or on-demand has again: repairs (a preempted VM recreated), and a regional
#: group's shape ANY (compute.distribution_policy).
REPAIRING_GROUP = {"instanceLifecyclePolicy": {"defaultActionOnFailure": "REPAIR"}}


REPAIRING_REGIONAL = {"distributionPolicy": {"targetShape": "ANY"}}


#: How long a switch to flex-start waits for its resize request to be accepted before it lets the
#: Spot VM go (the next look finishes it: `settle_flex_start`), and how often it looks.
ACCEPT_WAIT_SECONDS = 60.0


ACCEPT_POLL_SECONDS = 2.0


#: The shortest run duration a resize request may ask for (F5: 10 minutes).
FLEX_START_MIN_RUN_SECONDS = 600


class FlexStartRefused(ComputeError):
    """Compute Engine refused the resize request (or it failed at once): no flex-start VM will come."""


def flex_start_run_seconds(run_hours: float | None) -> int:
    """Pure: a resize request's `requestedRunDuration` for `run_hours` of remaining work plus margin
    (the deadline's `Decision.run_hours`), rounded up to whole minutes and held to F5's 10 minutes to
    7 days; 7 days when the work is not known. Billing ends when the agent finishes either way; a
    run sized to the work is what Dynamic Workload Scheduler plans its capacity with."""
    if run_hours is None:
        return int(FLEX_START_MAX_RUN_HOURS * 3600)
    seconds = math.ceil(run_hours * 60) * 60
    return max(FLEX_START_MIN_RUN_SECONDS, min(int(FLEX_START_MAX_RUN_HOURS * 3600), seconds))


def _mode_patch(group: GroupRef, to_flex: bool) -> dict:
    if to_flex:
        return {**FLEX_START_GROUP, **(FLEX_START_REGIONAL if group.region else {})}
    return {**REPAIRING_GROUP, **(REPAIRING_REGIONAL if group.region else {})}


def switch_group(
    compute: Compute,
    group: GroupRef,
    to_mode: Mode,
    reason: str,
    *,
    by: str,
    storage: JobStorage | None = None,
    say: Say = silent,
    seen: str | None = None,
    run_hours: float | None = None,
) -> Switch | None:
    """Switches the job's group to its Spot, on-demand or flex-start template; None when it runs that
    one already, or when another look claimed the job first: with `seen` (`claims.what_was_seen`, read
    before the records the decision came from) the switch is claimed in the job dir before anything
    changes, so two looks at once that decided it switch once (survivor/jobdir/claims.py).

    Makes the on-demand or flex-start template from the Spot one the first time
    (`on_demand_template_body`, `flex_start_template_body`, with the spec's `fallback:`), points the
    group at it (`setInstanceTemplate`), records the switch with its reason in the job dir (`storage`),
    then recreates the group's VM from it (`recreateInstances`: the old VM is stopped gracefully, so
    its agent commits first). Flex-start VMs come from a resize request instead (docs/flex-start.md,
    `_to_flex_start`): repairs off, the request (for `run_hours` of work and margin,
    `flex_start_run_seconds`) accepted first, and only then the Spot VM let go; a request Compute
    Engine refuses sends the job on-demand in the same call, so the job is never left with neither
    a VM nor a request. Leaving flex-start cancels a request still queued, turns repairs back on and
    sets the group's size back to one. RequestError for a missing group.
    """
    try:
        try:
            return _switch_group(
                compute, group, to_mode, reason, by=by, storage=storage, say=say, seen=seen, run_hours=run_hours
            )
        except FlexStartRefused as refused:
            _record_failure(storage, to_mode, reason, by, refused)
            say(f"group {group.name}: flex-start refused ({refused}); on-demand instead")
            log.warning("flex-start refused: on-demand", group=group.name, error=str(refused))
            return _switch_group(
                compute, group, ON_DEMAND, f"flex-start refused ({refused}); {reason}", by=by, storage=storage, say=say
            )
    except ComputeError as exc:  # shown by status and report, not only in a log nobody reads
        _record_failure(storage, to_mode, reason, by, exc)
        raise


def _failed(to_mode: Mode, reason: str, by: str, exc: Exception) -> SwitchFailure:
    """The record of a switch the Compute Engine calls refused, now."""
    return SwitchFailure(
        time=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds"),
        to_mode=to_mode,
        reason=reason,
        by=by,
        error=str(exc),
    )


def _record_failure(storage: JobStorage | None, to_mode: Mode, reason: str, by: str, exc: Exception) -> None:
    if storage is None:
        return
    failure = _failed(to_mode, reason, by, exc)
    try:
        record_switch_failure(storage, failure)
    except StorageError as unrecorded:
        log.warning("could not record the failed switch", error=str(unrecorded))


def _switch_group(
    compute: Compute,
    group: GroupRef,
    to_mode: Mode,
    reason: str,
    *,
    by: str,
    storage: JobStorage | None,
    say: Say,
    seen: str | None = None,
    run_hours: float | None = None,
) -> Switch | None:
    found = compute.get_group(group)
    if found is None:
        raise RequestError(f"group {group.name}: not found; nothing to switch")
    current = (found.get("instanceTemplate") or "").rsplit("/", 1)[-1]
    base, from_mode = template_mode(current)
    target = base + SUFFIXES.get(to_mode, "")
    if target == current:
        return None
    if seen is not None and storage is not None and not claims.claim(storage, seen, what=f"switch to {to_mode}", by=by):
        say(f"group {group.name}: another look switched or moved it first; this one leaves it")
        return None
    if to_mode != SPOT:
        problems = name_problems(f"{to_mode} template", target)
        if problems:
            raise RequestError(problems[0] + f" (shorten the Spot template's name {base!r})")
    now = _dt.datetime.now(_dt.timezone.utc)
    switch = Switch(
        time=now.isoformat(timespec="milliseconds"),
        to_mode=to_mode,
        from_mode=from_mode,
        reason=reason,
        by=by,
        template=target,
    )
    # The record first: a switch is a recorded intention that any later look completes
    # (`complete_switch`), as a move is (placement.complete_moves). Recorded after the group changed, a
    # look cut between the two left a group on-demand that the records called Spot; cut before the
    # group changed, it left the job behind its deadline on a stocked-out Spot template.
    if storage is not None:
        record_switch(storage, switch)
    try:
        _apply_switch(compute, group, switch, base=base, from_mode=from_mode, say=say, run_hours=run_hours)
    except FlexStartRefused:
        raise  # the group runs the flex-start template: switch_group goes on-demand at once
    except (ComputeError, RequestError) as exc:
        _withdraw_if_refused(compute, group, storage, switch, exc)
        raise
    log.info("group switched", group=group.name, to=to_mode, template=target, reason=reason, by=by)
    return switch


def _withdraw_if_refused(
    compute: Compute, group: GroupRef, storage: JobStorage | None, switch: Switch, exc: BaseException
) -> None:
    """A switch Compute Engine refuses (a 403, a missing template: no retry makes it) before the
    group took its template is no switch: its record goes, so status and the deadline policy never
    count it (the failure is recorded by `switch_group`). A passing error leaves the record (the
    next look completes the switch), and so does a refusal after the group took the template (a
    flex-start request refused): the record says what the group runs, and the next look acts on it."""
    from survivor import retry

    if storage is None or (isinstance(exc, ComputeError) and retry.is_transient_compute(exc)):
        return
    try:
        found = compute.get_group(group)
    except ComputeError:
        return  # cannot tell what the group runs: the record stands, the next look reads the group
    if found is not None and (found.get("instanceTemplate") or "").rsplit("/", 1)[-1] == switch.template:
        return
    try:
        storage.delete([switch.name])
    except StorageError as unrecorded:
        log.warning(
            "could not withdraw the refused switch's record; the next look tries it again",
            record=switch.name,
            error=str(unrecorded),
        )


def _apply_switch(
    compute: Compute,
    group: GroupRef,
    switch: Switch,
    *,
    base: str,
    from_mode: Mode,
    say: Say,
    run_hours: float | None = None,
) -> None:
    """Makes the group run `switch`'s template: the template made from the Spot one the first time,
    set on the group, then the VM recreated from it (or, for flex-start, asked for by a resize
    request). Each step may be repeated: `complete_switch` runs it again after a cut."""
    to_mode, target = switch.to_mode, switch.template
    if to_mode != SPOT and compute.get_template(target) is None:
        spot = compute.get_template(base)
        if spot is None:
            raise RequestError(f"template {base}: not found; the group's Spot template is needed to make {target}")
        spec = spec_of(spot)
        make = flex_start_template_body if to_mode == FLEX_START else on_demand_template_body
        try:
            compute.insert_template(make(spot, spec.fallback if spec else None))
            say(f"template {target}: created ({to_mode}, same shape as {base} unless fallback: says otherwise)")
        except ComputeError:
            if compute.get_template(target) is None:
                raise
            # made meanwhile (a 409: another look completing the same switch): the step is done
    if to_mode == FLEX_START:
        _to_flex_start(compute, group, target, switch.reason, run_hours=run_hours, say=say)
        return
    compute.set_group_template(group, target)
    say(f"group {group.name}: now {to_mode} (template {target}): {switch.reason}")
    if from_mode == FLEX_START:  # a queued request would still add a flex-start VM; the group keeps one VM
        for request in compute.resize_requests_of(group):
            if request.get("state") in ("CREATING", "ACCEPTED"):
                compute.cancel_resize_request(group, request["name"])
        compute.patch_group(group, _mode_patch(group, to_flex=False))  # repairs on again: Spot is preempted
        if int((compute.get_group(group) or {}).get("targetSize") or 0) == 0:
            compute.resize_group(group, 1)
    members = [(m["zone"], m["name"]) for m in compute.managed_instances(group) if m["zone"]]
    if members:
        compute.recreate_instances(group, members)


def _to_flex_start(
    compute: Compute, group: GroupRef, target: str, reason: str, *, run_hours: float | None, say: Say
) -> None:
    """The switch to flex-start, ordered so that a refusal costs nothing:

    1. repairs off (and a regional group's VMs in one zone): what a resize request needs (F11, F13);
    2. with no VM running, the group resized to none (a VM it is still trying to make would come
       from the flex-start template outside any request); a running Spot VM keeps training;
    3. the group pointed at the flex-start template (existing VMs keep theirs: setInstanceTemplate);
    4. the resize request, for `run_hours` of work and margin; refused -> FlexStartRefused, and the
       caller goes on-demand at once (the Spot VM, if any, is still there);
    5. once Compute Engine accepted it, the Spot VM let go (`settle_flex_start`).
    A request already active (a look finishing this switch) is not asked again."""
    members = compute.managed_instances(group)
    compute.patch_group(group, _mode_patch(group, to_flex=True))
    if not any(m["status"] == "RUNNING" for m in members):
        compute.resize_group(group, 0)
    compute.set_group_template(group, target)
    say(f"group {group.name}: now flex-start (template {target}): {reason}")
    active = [r for r in compute.resize_requests_of(group) if r.get("state") in ("CREATING", "ACCEPTED", "SUCCEEDED")]
    name = active[-1]["name"] if active else "survivor-" + _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d%H%M%S")
    if not active:
        seconds = flex_start_run_seconds(run_hours)
        try:
            compute.request_resize(group, name, count=1, run_seconds=seconds)
        except ComputeError as exc:
            if retry_passing(exc):
                raise  # throttled: the next look asks again (complete_switch)
            raise FlexStartRefused(str(exc)) from exc
        say(f"group {group.name}: resize request {name} for one flex-start VM for {seconds / 3600:.2f} h queued")
    deadline = time.monotonic() + ACCEPT_WAIT_SECONDS
    while True:
        request = compute.resize_request(group, name) or {}
        state = request.get("state")
        if state == "FAILED":
            errors = ((request.get("status") or {}).get("error") or {}).get("errors") or [{}]
            raise FlexStartRefused(
                f"resize request {name} FAILED: {errors[0].get('code', '')} {errors[0].get('message', '')}".strip()
            )
        if state in ("ACCEPTED", "SUCCEEDED") or time.monotonic() >= deadline:
            break
        time.sleep(ACCEPT_POLL_SECONDS)
    settle_flex_start(compute, group, say=say)


def settle_flex_start(compute: Compute, group: GroupRef, *, say: Say = silent) -> list[str]:
    """Lets the group's VMs of another template go (`deleteInstances`: nothing recreates them, the
    target size goes down by as many) once its newest resize request was accepted (ACCEPTED or
    SUCCEEDED), so a Spot VM trains until a flex-start VM is sure to come. Returns their names."""
    requests = compute.resize_requests_of(group)
    newest = max(requests, key=lambda r: r.get("creationTimestamp") or "", default=None)
    if newest is None or newest.get("state") not in ("ACCEPTED", "SUCCEEDED"):
        return []
    found = compute.get_group(group) or {}
    current = (found.get("instanceTemplate") or "").rsplit("/", 1)[-1]
    others = [m for m in compute.managed_instances(group) if m.get("template") and m["template"] != current]
    for member in others:
        compute.leave_group(group, member["zone"], member["name"])
        say(
            f"group {group.name}: {member['name']} ({member['template']}) let go: resize request "
            f"{newest.get('name')} is {newest.get('state')}"
        )
    return [m["name"] for m in others]


def complete_switch(compute: Compute, group: GroupRef, storage: JobStorage, *, say: Say = silent) -> Switch | None:
    """The newest recorded switch carried out, whatever cut the look that recorded it: when the
    group runs another template than the record names, it is switched to it (`_apply_switch`).
    Returns that switch, or None when the group runs the recorded template already (or nothing was
    recorded). A step Compute Engine refuses raises its ComputeError: the next look tries again."""
    recorded = switches(storage)
    found = compute.get_group(group)
    if not recorded or found is None or not recorded[-1].template:
        return None
    last = recorded[-1]
    current = (found.get("instanceTemplate") or "").rsplit("/", 1)[-1]
    base, from_mode = template_mode(current)
    if current == last.template and last.to_mode == FLEX_START:
        settle_flex_start(compute, group, say=say)  # a Spot VM kept while the request was not yet accepted
    if current == last.template or template_mode(last.template)[0] != base:
        return None  # done; or a record of another template family (a move's new shape): not this one's to redo
    say(
        f"group {group.name}: finishing the switch to {last.to_mode} recorded at {last.time} (template {last.template})"
    )
    log.warning(
        "a recorded switch not carried out: finishing it",
        group=group.name,
        to=last.to_mode,
        template=last.template,
        recorded=last.time,
    )
    try:
        _apply_switch(compute, group, last, base=base, from_mode=from_mode, say=say)
    except FlexStartRefused as refused:  # as switch_group: the refusal goes on-demand in the same look
        record_switch_failure(storage, _failed(last.to_mode, last.reason, last.by, refused))
        return switch_group(
            compute,
            group,
            ON_DEMAND,
            f"flex-start refused ({refused}); {last.reason}",
            by=last.by,
            storage=storage,
            say=say,
        )
    except (ComputeError, RequestError) as exc:
        # never withdrawn here: the record is an earlier look's decision, and this look may only lack
        # what that one had (a permission); the failure is recorded, the next look tries again
        if not (isinstance(exc, ComputeError) and retry_passing(exc)):
            record_switch_failure(storage, _failed(last.to_mode, last.reason, last.by, exc))
        raise
    return last


def retry_passing(exc: ComputeError) -> bool:
    """Whether another look may get past `exc` (throttling, a server error): `retry.is_transient_compute`."""
    from survivor import retry

    return retry.is_transient_compute(exc)
