"""`survivor watch`: one look at a job from anywhere, while no VM of it may run.

    >>> watch_once(Compute("my-project"), GroupRef("my-project", "cifar10", zone="us-west1-b"), say=print)
    job cifar10: spot -> on-demand: 9.2 h of work left, 10.0 h to the deadline ...

The agent decides at every boot (survivor/agent/boot.py); without a VM there is no boot, so the watch
(Cloud Scheduler + Cloud Run, survivor/operator/watch_deploy.py; or `survivor watch --every`) looks
at the job's group: the deadline policy's decision (survivor/policy/deadline.py), acted on
(`group.switch_group`, by="watch"), and, with `placement:` in the spec and no VM running, a move
to capacity elsewhere (survivor/policy/placement.py decides, survivor/mig/move.py moves).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, replace

from survivor.jobdir.switches import FLEX_START
from survivor.cloud.compute import Compute, ComputeError, GroupRef
from survivor.jobdir import claims
from survivor.jobdir.storage import open_storage
from survivor.jobdir.switches import parse_time
from survivor.mig.move import complete_moves, current_group, look_and_move, spot_outlook_for
from survivor.operator import budget, notices
from survivor.policy import deadline
from survivor.policy.placement import place_of
from survivor.mig.address import RequestError, Say
from survivor.mig.switch import complete_switch, switch_group
from survivor.mig.templates import spec_of, template_mode
from survivor.spec import JobSpec


def _silent(line: str) -> None:
    """The default `say`: nothing."""


def _template_of(found: dict) -> str:
    return (found.get("instanceTemplate") or "").rsplit("/", 1)[-1]


def group_spec(compute: Compute, found: dict) -> tuple[str, JobSpec | None]:
    """The mode a group's template runs (`template_mode`) and the job spec its Spot template carries
    (None: none), from the group's REST body."""
    current = _template_of(found)
    base, mode = template_mode(current)
    template = compute.get_template(base) or compute.get_template(current)
    return mode, spec_of(template) if template else None


def job_dir_to_deploy_with(compute: Compute, group: GroupRef) -> str | None:
    """The job dir a deployed watch must be given (`--job-dir`): a job with `placement:` may move,
    and a look that only knows the group's first zone finds no group there after the move; its
    records, in the job dir, say where it went. None for a job that stays (or a group not found)."""
    found = compute.get_group(group)
    if found is None:
        return None
    _, spec = group_spec(compute, found)
    return spec.job_dir if spec is not None and spec.placement is not None else None


#: How long after DONE (or FAILED) was written a group that still keeps a VM is left to its VM: the
#: agent writes the marker, then leaves its group within seconds (survivor/agent/finish.py).
FINISH_GRACE_SECONDS = 300.0


@dataclass(frozen=True)
class JobOver:
    """What a look found at a job whose journal says it ended: `state` DONE or FAILED, and whether
    this look deleted its group (`group_deleted`: a VM that could not leave it kept it alive)."""

    state: str
    group_deleted: bool = False
    #: why a look must come again although the job ended: a state disk still attached to the VM that
    #: is leaving (or being deleted), which the next look deletes ("" : nothing left to do)
    waiting: str = ""


def over_group_to_delete(
    state: str | None,
    marker_time: _dt.datetime | None,
    target_size: int,
    now: _dt.datetime,
    grace_seconds: float = FINISH_GRACE_SECONDS,
) -> bool:
    """Pure: whether a look deletes the group of a job that ended. A finished VM leaves its group
    (`deleteInstances`: the target size goes down); a group that still keeps a VM `grace_seconds`
    after DONE or FAILED has one that could not (its account lacks compute.instanceGroupManagers.update),
    and the MIG repairs a VM that powered itself off ("If a VM fails or is deleted
    by an action not initiated by the MIG, then the MIG automatically repairs the failed VM",
    https://cloud.google.com/compute/docs/instance-groups/about-repair): a billed GPU VM booting,
    seeing DONE and powering off, again and again. The look, run as the operator, ends that."""
    if state is None or target_size <= 0:
        return False
    return marker_time is None or (now - marker_time).total_seconds() >= grace_seconds


def end_if_over(
    compute: Compute,
    group: GroupRef,
    storage,
    *,
    say: Say = _silent,
    now: _dt.datetime | None = None,
    grace_seconds: float | None = None,
) -> JobOver | None:
    """The look at a job whose journal holds DONE or FAILED: its group deleted when
    `over_group_to_delete` says so. None while the job has not ended."""
    from survivor.jobdir.journal import Journal

    journal = Journal(storage)
    marker, state = journal.done(), "DONE"
    if marker is None:
        marker, state = journal.failed(), "FAILED"
    if marker is None:
        return None
    found = compute.get_group(group) or {}
    now = now or _dt.datetime.now(_dt.timezone.utc)
    grace = FINISH_GRACE_SECONDS if grace_seconds is None else grace_seconds
    if not over_group_to_delete(state, parse_time(marker.get("time")), int(found.get("targetSize") or 0), now, grace):
        say(f"job {group.name}: {state}; nothing to decide")
        return JobOver(state)
    compute.delete_group(group)
    say(
        f"job {group.name}: {state}, but its group still kept a VM (the VM's account could not leave it: grant it "
        f"roles/compute.instanceAdmin.v1 or compute.instanceGroupManagers.update); group {group.name} deleted"
    )
    return JobOver(state, group_deleted=True)


def end_state_disks(compute: Compute, spec: JobSpec, storage, over: JobOver, *, say: Say = _silent) -> JobOver:
    """The finish's last step for a job with a state disk, run as the operator: its final step is in
    Cloud Storage (DONE points at it), so each state disk that no pending record needs is deleted
    (survivor/mig/state_disks.py); one still attached keeps the look coming (`waiting`), one a
    pending snapshot needs is kept and said. Listing refused: said, and the job's end is not held."""
    from survivor.mig import state_disks

    try:
        kept = state_disks.clean(compute, spec.name, storage, say=say)
    except ComputeError as exc:
        say(f"job {spec.name}: its state disks could not be listed ({exc}); `survivor status` shows them")
        return over
    attached = [disk.name for disk, reason in kept if disk.users or reason.startswith("still attached")]
    return replace(over, waiting=f"state disk {', '.join(attached)} still attached") if attached else over


def publish_goodput(
    spec: JobSpec, storage, group: GroupRef, *, created: _dt.datetime | None = None, say: Say = _silent, metrics=None
) -> int:
    """The look's write of the job's goodput to Cloud Monitoring (survivor/operator/goodput_metrics.py),
    in the group's project, at its zone (or region): the number of series written, 0 when Cloud
    Monitoring refused or could not be reached, said in one line; the look goes on either way."""
    from google.auth.exceptions import DefaultCredentialsError

    from survivor.cloud.monitoring import MonitoringError
    from survivor.operator import goodput_metrics

    try:
        written = goodput_metrics.publish(
            spec,
            storage,
            project=group.project,
            location=group.zone or group.region or "",
            created=created,
            metrics=metrics,
        )
    except (MonitoringError, DefaultCredentialsError) as exc:
        say(f"job {spec.name}: goodput not written to Cloud Monitoring ({exc})")
        return 0
    say(f"job {spec.name}: goodput written to Cloud Monitoring ({written} series, projects/{group.project})")
    return written


def watch_once(
    compute: Compute,
    group: GroupRef,
    *,
    job_dir: str | None = None,
    check_every_hours: float | None = None,
    say: Say = _silent,
    goodput_metrics: bool = False,
):
    """One look at a job with a deadline, from anywhere (`survivor watch`): the policy's decision for
    its group now, acted on (switch_group, by="watch"). Running while no VM does (a Spot stockout)
    is what it is for: the agent decides at every boot, and without a VM there is no boot.
    A job that ended (DONE or FAILED) is not decided for: its group is deleted when its VM could not
    leave it (`end_if_over`), and a JobOver is returned, which ends a deployed watch. A job at its
    budget is stopped (survivor/operator/budget.py `look`) and a BudgetStop returned: nothing else is
    decided for it, and a deployed watch goes on looking (for `survivor start --budget`).
    With `goodput_metrics`, each look first writes the job's goodput to Cloud Monitoring
    (`publish_goodput`), whatever it decides after.
    Returns the Decision (None: the spec has no deadline); RequestError for a missing group."""
    storage = open_storage(job_dir, project=group.project) if job_dir else None
    found = compute.get_group(group)
    if found is None and storage is not None:  # the job may have moved (placement.regions): its records say where
        found = compute.get_group(current_group(storage, group))
    if found is None:
        where = f"zone {group.zone}" if group.zone else f"region {group.region}"
        raise RequestError(
            f"group {group.name}: not found in {where}; nothing to watch"
            + (
                ""
                if job_dir
                else " (a job that moved, placement:, is found through its records: give --job-dir, "
                "and deploy the watch with it)"
            )
        )
    mode, spec = group_spec(compute, found)
    if spec is None:
        raise RequestError(f"group {group.name}: its template {_template_of(found)} carries no survivor-job spec")
    storage = storage or open_storage(spec.job_dir, project=group.project)
    here = group if compute.get_group(group) is not None else current_group(storage, group)
    if goodput_metrics:
        publish_goodput(spec, storage, here, created=parse_time(found.get("creationTimestamp")), say=say)
    over = end_if_over(compute, here, storage, say=say)
    if over is not None:
        notices.tell_look(spec, storage, running=False)  # DONE or FAILED, if its agent could not tell it
        if spec.state_disk_gb:
            over = end_state_disks(compute, spec, storage, over, say=say)
        return over
    # at its budget the job stops, committed, its group kept at 0 until `survivor start --budget`:
    # nothing else is decided for it (a move or a switch would give it a VM)
    stopped = budget.look(compute, here, spec, storage, say=say)
    if stopped is not None:
        notices.tell_look(spec, storage, running=False)
        return stopped
    seen = claims.what_was_seen(storage)  # before the records a decision reads: what a claim names
    if spec.placement is not None:
        # the records win over whatever group still exists: a move that a look before this one
        # recorded and did not finish is finished first, and the job's group is where it went
        group = complete_moves(compute, group, storage, spec.placement, say=say)
        found = compute.get_group(group)
        if found is None:
            raise RequestError(
                f"group {group.name}: not found where the job's records put it ({place_of(group)}); nothing to watch"
            )
        mode, spec = group_spec(compute, found)
        if spec is None:
            raise RequestError(f"group {group.name}: its template {_template_of(found)} carries no survivor-job spec")
    # a switch that a look before this one recorded and did not carry out is carried out first
    try:
        if complete_switch(compute, group, storage, say=say) is not None:
            found = compute.get_group(group) or found
            mode, spec = group_spec(compute, found)
    except ComputeError as exc:
        say(f"group {group.name}: its recorded switch not carried out yet ({exc}); the next look tries again")
    if spec is None:
        raise RequestError(f"group {group.name}: its template {_template_of(found)} carries no survivor-job spec")
    members = compute.managed_instances(group)
    running = any(m["status"] == "RUNNING" for m in members)
    created = parse_time(found.get("creationTimestamp"))  # as the records' times: aware, never a crash
    failed = ended = None
    if mode == FLEX_START and not running:
        requests = compute.resize_requests_of(group)
        failed = deadline.flex_start_failure(requests) or deadline.flex_start_missing(requests, len(members))
        ended = deadline.flex_start_run_end(requests, len(members))
        queued = deadline.flex_start_queue(requests, _dt.datetime.now(_dt.timezone.utc))
        if queued:
            say(f"group {group.name}: flex-start {queued}")
    decision = deadline.assess(
        spec,
        storage,
        _dt.datetime.now(_dt.timezone.utc),
        running=running,
        first_start=created,
        check_every_hours=check_every_hours or deadline.CHECK_EVERY_HOURS,
        flex_failed=failed,
        flex_ended=ended,
        spot=lambda: spot_outlook_for(compute, spec, group, storage),
    )

    def tell() -> None:  # the job's webhooks: what its records hold that no one told, and this look's own
        notices.tell_look(
            spec,
            storage,
            running=running,
            error=notices.instance_error(members),
            created=created,
            slack_hours=decision.slack_hours if decision else None,
            deadline_reason=decision.reason if decision else "",
            zone=group.zone,
        )

    if spec.placement is not None and not running:  # no VM: the job may move to capacity elsewhere
        if look_and_move(compute, group, spec, storage, by="watch", say=say, seen=seen) is not None:
            tell()
            return decision
    if decision is None:
        say(f"job {spec.name}: no deadline in its spec; nothing to decide")
        tell()
        return None
    say(f"job {spec.name}: {decision.current} -> {decision.mode}: {decision.reason}")
    if decision.switch:
        switch_group(
            compute,
            group,
            decision.mode,
            decision.reason,
            by="watch",
            storage=storage,
            say=say,
            seen=seen,
            run_hours=decision.run_hours,
        )
    tell()
    return decision
