"""What the agent does once the job is DONE or FAILED: the finish actions, one small object each.

    >>> finisher = choose_finisher("auto", identity)      # LeaveGroup inside a MIG, else StopInstance
    >>> finisher.finish(identity, compute)

- `leave-group`: delete this instance through its own MIG (`instanceGroupManagers.deleteInstances`,
  or the regional one), which lowers the target size so the MIG does not recreate it -- the gap the
  recipe leaves open, where a finished VM is brought back for ever;
- `stop` / `delete`: stop or delete this instance (standalone VMs);
- `keep-alive`: do nothing; the VM stays up for inspection.

`auto` is `leave-group` for an instance whose `created-by` attribute names a MIG, else `stop`.
Inside a MIG, `stop` and `delete` mean `leave-group` too: a MIG repairs a VM that fails or is
deleted "by an action not initiated by the MIG" by recreating it
(https://cloud.google.com/compute/docs/instance-groups/about-repair), so a VM that stopped or
deleted itself would come back, see DONE and stop itself again, for ever. Leaving through the MIG
deletes it and lowers the target size (the VM's own disk goes with it, as `delete` would).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess

from dataclasses import dataclass
from typing import ClassVar, Protocol

from survivor import log as logs
from survivor.cloud.compute import GroupRef, PermissionDenied
from survivor.metadata import InstanceIdentity

log = logs.get("finish")


def parse_created_by(url: str | None) -> GroupRef | None:
    """`projects/P/zones/Z/instanceGroupManagers/NAME` (or `regions/R/...`) -> GroupRef; else None."""
    if not url:
        return None
    parts = url.strip().split("/")
    try:
        i = parts.index("projects")
        project = parts[i + 1]
        scope, where, kind, name = parts[i + 2], parts[i + 3], parts[i + 4], parts[i + 5]
    except (ValueError, IndexError):
        return None
    if kind != "instanceGroupManagers":
        return None
    if scope == "zones":
        return GroupRef(project, name, zone=where)
    if scope == "regions":
        return GroupRef(project, name, region=where)
    return None


#: Set by a LocalInstance: the stand-in "VM" powers off by this file appearing (its kernel is the host's).
POWER_OFF_ENV = "SURVIVOR_POWER_OFF_FILE"
#: The one line a VM that cannot leave its group says (log, guest attribute `finish`, status).
CANNOT_LEAVE = (
    "this VM's service account cannot leave its group ({why}): powering the VM off so a "
    "finished job stops billing; if the group recreates it, that VM sees the job ended and "
    "powers off at once. Grant the VM's account roles/compute.instanceAdmin.v1 (docs/operator-guide.md)"
)

#: The one line a VM outside a group says when its account may not stop or delete it. Shutting a VM
#: down from its guest OS stops it ("To stop an instance from the guest OS", which needs no
#: compute.instances.stop: https://cloud.google.com/compute/docs/instances/restarting-an-instance),
#: so its GPU stops billing; a VM that was to delete itself keeps its disks, still billed.
CANNOT_FINISH = (
    "this VM's service account cannot {action} it ({why}): powering the VM off from its guest, "
    "which stops it, so a finished job stops billing for its GPUs. Grant the VM's account "
    "roles/compute.instanceAdmin.v1 (docs/operator-guide.md)"
)


def is_permission_error(error: Exception) -> bool:
    """Pure: a finish call refused for a missing permission (not a transient failure): the Compute
    client's PermissionDenied (a 403 or 401 that is not a disabled API), or a message in the API's
    words ("Required 'compute.X' permission for ..."). A "403" elsewhere in a message (an instance
    named vm-403, a 5403-byte body) is not one."""
    text = str(error)
    return isinstance(error, PermissionDenied) or "permission denied" in text.lower() or "Required 'compute." in text


def power_off_plan(systemd: bool, euid: int) -> str:
    """Pure: how this VM powers itself off. "systemctl" as root under systemd (the VM's unit runs
    the agent as root); "not-root" under systemd as another user (outside any logind session,
    polkit's default for org.freedesktop.login1.power-off is admin authentication: `systemctl
    poweroff` answers "Access denied as the requested operation requires interactive
    authentication"); "none" without systemd."""
    if not systemd:
        return "none"
    return "systemctl" if euid == 0 else "not-root"


def power_off() -> str:
    """Powers this VM off as its own OS would (`systemctl poweroff`: an ACPI shutdown, after which
    Compute Engine stops the instance, https://cloud.google.com/compute/docs/instances/stop-start-instance);
    returns what it did."""
    marker = os.environ.get(POWER_OFF_ENV)
    if marker:
        with open(marker, "w", encoding="utf-8") as f:
            f.write("powered off\n")
        return "powered off"
    plan = power_off_plan(os.path.isdir("/run/systemd/system"), os.geteuid())  # sd_booted(3)'s test
    if plan == "systemctl":
        subprocess.run(["systemctl", "poweroff"], check=False, timeout=60)
        return "powering off"
    if plan == "not-root":
        return f"not powering off: only root may, and the agent runs as uid {os.geteuid()}"
    return "not powering off: no running systemd here"


class ComputeActions(Protocol):
    """The Compute Engine calls finishing needs (survivor.cloud.compute.Compute provides them)."""

    def leave_group(self, group: GroupRef, zone: str, instance: str) -> None:
        """Deletes `instance` through its MIG `group`, lowering the group's target size."""
        ...

    def stop_instance(self, project: str, zone: str, instance: str) -> None:
        """Stops `instance`."""
        ...

    def delete_instance(self, project: str, zone: str, instance: str) -> None:
        """Deletes `instance`."""
        ...


class Finisher(Protocol):
    """A finish action: what becomes of this VM once its job is DONE or FAILED. `refused`: the one
    line said when its Compute Engine call is refused for a missing permission (`{why}` the refusal),
    after which the VM powers itself off instead; "" for an action that makes no call."""

    name: str
    refused: ClassVar[str]

    def finish(self, identity: InstanceIdentity, compute: ComputeActions | None) -> None:
        """Does it to the VM `identity` names; raises when the Compute Engine call fails."""
        ...


class KeepAlive:
    """`keep-alive`: the VM stays up as it is, for inspection."""

    name = "keep-alive"
    refused: ClassVar[str] = ""

    def finish(self, identity: InstanceIdentity, compute: ComputeActions | None) -> None:
        """Does nothing but say so."""
        log.info("finish: keeping the VM running (keep-alive)")


@dataclass
class LeaveGroup:
    """`leave-group`: this VM is deleted through its MIG, whose target size goes down by one."""

    group: GroupRef
    name: str = "leave-group"
    refused: ClassVar[str] = CANNOT_LEAVE

    def finish(self, identity: InstanceIdentity, compute: ComputeActions | None) -> None:
        """Asks the MIG to delete this instance (`deleteInstances`)."""
        log.info("finish: leaving the managed instance group", group=self.group.name, instance=identity.name)
        _need(compute).leave_group(self.group, identity.zone, identity.name)


class StopInstance:
    """`stop`: this standalone VM stops itself (its disk stays)."""

    name = "stop"
    refused: ClassVar[str] = CANNOT_FINISH.format(action="stop", why="{why}")

    def finish(self, identity: InstanceIdentity, compute: ComputeActions | None) -> None:
        """Stops this instance."""
        log.info("finish: stopping this instance", instance=identity.name)
        _need(compute).stop_instance(_project(identity), identity.zone, identity.name)


class DeleteInstance:
    """`delete`: this standalone VM deletes itself."""

    name = "delete"
    refused: ClassVar[str] = CANNOT_FINISH.format(action="delete", why="{why}")

    def finish(self, identity: InstanceIdentity, compute: ComputeActions | None) -> None:
        """Deletes this instance."""
        log.info("finish: deleting this instance", instance=identity.name)
        _need(compute).delete_instance(_project(identity), identity.zone, identity.name)


def _need(compute: ComputeActions | None) -> ComputeActions:
    if compute is None:
        raise RuntimeError("this finish action needs the Compute Engine API")
    return compute


def _project(identity: InstanceIdentity) -> str:
    if identity.project is None:
        raise RuntimeError("this finish action needs the VM's project: there is no metadata server")
    return identity.project


def group_of(identity: InstanceIdentity) -> GroupRef | None:
    """Pure: the MIG that manages this VM (from `created-by`), or None, addressed in this VM's project
    by its id (the metadata server's `project/project-id`, as startup.sh does): `created-by` names
    the project by its number."""
    group = parse_created_by(identity.created_by)
    if group is not None and identity.project:
        group = dataclasses.replace(group, project=identity.project)
    return group


def choose_finisher(on_finish: str, identity: InstanceIdentity) -> Finisher:
    """Pure decision: the finish action for the spec's `on_finish` and where the agent runs."""
    group = group_of(identity)
    if on_finish == "keep-alive":
        return KeepAlive()
    if group is not None and on_finish in ("stop", "delete"):
        log.info(
            f"on_finish is {on_finish}, but this instance is in a MIG, which would recreate it: leaving the "
            "group instead",
            group=group.name,
        )
        return LeaveGroup(group)
    if on_finish == "delete":
        return DeleteInstance()
    if on_finish == "stop":
        return StopInstance()
    if on_finish == "leave-group" or (on_finish == "auto" and group):
        if group is None:
            log.warning("on_finish is leave-group but this instance is not in a MIG; stopping it instead")
            return StopInstance()
        return LeaveGroup(group)
    return StopInstance()
