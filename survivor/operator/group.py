"""What an operator does to a job's group once it is made: stop it, start it, delete it (with its
template and the state disks nothing waits on), and read its VM's serial port.

    >>> stop(compute, JobAddress("cifar10", zone="us-west1-b"))     # the agent saves first
    >>> start(compute, JobAddress("cifar10", zone="us-west1-b"))
    >>> delete(compute, JobAddress("cifar10", zone="us-west1-b").group(), say=print)

The recipe's `gcloud compute instances stop/start` and `instance-groups managed delete`, by job
name. Making the group is survivor/mig/make.py's (the agent's move makes one too), its template
survivor/operator/template.py's, its status survivor/operator/status.py's. What cannot be done as
asked raises `RequestError` (survivor/mig/address.py): one sentence that says what to do.
"""

from __future__ import annotations

import time
from typing import Any, Iterator

from survivor import log as logs
from survivor.cloud.compute import Compute, ComputeError, GroupRef, InUse, PermissionDenied
from survivor.cloud.template import STATE_DISK_LABEL
from survivor.mig.address import JobAddress, RequestError, Say, silent
from survivor.mig.make import in_use_refusal
from survivor.mig.templates import spec_of, template_body_of_base

log = logs.get("group")


def stop(compute: Compute, job: JobAddress) -> None:
    """Stops the job gracefully: its group resized to 0 (or its standalone instance stopped).

    Compute Engine soft-offs the VM and the agent saves and commits before it goes.
    """
    if job.instance:
        compute.stop_instance(compute.project, job.instance_zone(), job.instance)
    else:
        compute.resize_group(job.group(), 0)


def start(compute: Compute, job: JobAddress) -> None:
    """Starts the job again: its group resized to 1 (or its standalone instance started)."""
    if job.instance:
        compute.start_instance(job.instance_zone(), job.instance)
    else:
        compute.resize_group(job.group(), 1)


def delete(compute: Compute, group: GroupRef, template: str | None = None, say: Say = silent) -> None:
    """Deletes the job's group, then its template (the group's, else `template`, else the job's name).

    Never the job dir. Says one line for each thing deleted or not found. A template another group
    still uses is kept: Compute Engine refuses to delete it (400 resourceInUseByAnotherResource,
    naming one user), and RequestError names every group that uses it and how to delete each.
    """
    found = compute.get_group(group)
    template = template or ((found or {}).get("instanceTemplate") or "").rsplit("/", 1)[-1] or group.name
    body = compute.get_template(template)
    spec = spec_of(template_body_of_base(compute, body)) if body is not None else None
    if found is not None:
        compute.delete_group(group)
        say(f"group {group.name}: deleted")
    else:
        say(f"group {group.name}: not found (nothing to delete)")
    if spec is None or spec.state_disk_gb:  # its VMs' state disks outlive them (autoDelete NEVER)
        delete_state_disks(compute, spec.name if spec else group.name, spec.job_dir if spec else None, say)
    if body is not None:
        try:
            compute.delete_template(template)
        except InUse as refused:
            try:
                users = [
                    ref
                    for ref, body in compute.list_groups()
                    if (body.get("instanceTemplate") or "").rsplit("/", 1)[-1] == template
                ]
            except PermissionDenied:
                users = []
            if not users:  # not a group, gone since, or not listable: the API's own words name one user
                raise refused from None
            raise RequestError(in_use_refusal(template, users)) from None
        say(f"template {template}: deleted")


def state_disks_left(compute: Compute, job: str, job_dir: str | None) -> dict[str, Any]:
    """`status`'s and `report`'s view of the job's state disks: {"state_disks": [...]} (each with its
    monthly cost and why it is still there), {"state_disks_error": ...} when they cannot be listed,
    or nothing when the job has none."""
    from survivor.jobdir.storage import open_storage
    from survivor.mig import state_disks

    try:
        storage = open_storage(job_dir) if job_dir else None
    except Exception:  # the job dir's own errors are status's to show; the disks are listed without it
        storage = None
    try:
        found = state_disks.left(compute, job, storage)
    except ComputeError as exc:
        return {"state_disks_error": str(exc)}
    if not found:
        return {}
    return {
        "state_disks": [{**disk.to_json(), "line": state_disks.line(disk, reason)} for disk, reason in found],
        "state_disks_monthly_usd": state_disks.total_monthly([disk for disk, _ in found]),
    }


def delete_state_disks(compute: Compute, job: str, job_dir: str | None, say: Say = silent) -> None:
    """`survivor delete`'s last step for a job with state disks: each disk nothing waits on deleted,
    each kept said with why and what it costs a month (survivor/mig/state_disks.py). A job dir
    that cannot be opened keeps them all; disks that cannot be listed are said, not fatal."""
    from survivor.jobdir.storage import open_storage
    from survivor.mig import state_disks

    storage = None
    if job_dir:
        try:
            storage = open_storage(job_dir)
        except Exception as exc:  # a bucket that cannot be reached: every disk is kept
            log.warning("the job dir could not be opened; its state disks are kept", job_dir=job_dir, error=str(exc))
    try:
        state_disks.clean(compute, job, storage, say=say)
    except ComputeError as exc:
        say(
            f"job {job}: its state disks (label {STATE_DISK_LABEL}={job}) could not be listed ({exc}); list them "
            f"with `gcloud compute disks list --filter=labels.{STATE_DISK_LABEL}={job}`"
        )


def serial_source(compute: Compute, job: JobAddress) -> tuple[str, str]:
    """(zone, name) of the VM whose serial port shows the job: the standalone instance, or the group's VM.

    RequestError when the group has no VM, or its VM is not created yet (it has no serial port).
    """
    if job.instance:
        return job.instance_zone(), job.instance
    members = compute.managed_instances(job.group())
    if not members:
        raise RequestError(f"group {job.name} has no instance right now (stopped or finished)")
    zone, name = members[0]["zone"], members[0]["name"]
    if not members[0]["status"]:
        errors = "; ".join(f"{code}: {message}" for code, message in members[0]["errors"])
        raise RequestError(
            f"group {job.name}: its VM {name} is not created yet, so it has no serial port"
            + (f" (the group's last attempt: {errors})" if errors else "")
            + f"; `survivor status {job.name} {job.flag}` follows it"
        )
    return zone, name


def serial_output(
    compute: Compute, zone: str, name: str, *, follow: bool = False, interval: float = 5.0
) -> Iterator[str]:
    """The VM's serial port output (the startup script and the agent's journal), chunk by chunk.

    With `follow`, keeps reading every `interval` seconds until the caller stops.
    """
    offset = 0
    while True:
        text, offset = compute.serial_output(zone, name, offset)
        yield text
        if not follow:
            return
        time.sleep(interval)
