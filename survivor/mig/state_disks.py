"""A job's state disks that outlive its VMs: found by their label, deleted once nothing waits on them,
and otherwise shown with what they cost a month.

    >>> kept = state_disks.clean(compute, "cifar", storage, say=print)   # survivor delete, a move, the watch
    state disk cifar-x7k2-survivor-state (us-west1-b): deleted (200 GB pd-balanced, $20.00 a month)
    >>> [line(d, why) for d, why in kept]                               # what status and report show

A job with `state_disk_gb` runs with a second persistent disk that its group keeps across the VM's
recreation (`autoDelete: NEVER`, docs/large-state.md "The local tier"). Nothing deletes such a disk
with its VM: not the finish (the VM leaves its group), not `survivor delete` (the group goes), not a
move (the old region's group goes). Google bills a disk's provisioned size "until you delete" it
(https://cloud.google.com/compute/disks-image-pricing). The template labels the disk
`survivor-state: <job name>` (survivor/cloud/template.py STATE_DISK_LABEL), so each of those paths
lists the job's disks with one `disks.aggregatedList` and deletes those that no pending snapshot
needs: a record under the job dir's `survivor/pending/` in the disk's zone means its VM's next boot
commits a snapshot from it (survivor/jobdir/disk_tier.py), so that disk is kept and the line says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from survivor import log as logs
from survivor.cloud import pricing
from survivor.cloud.compute import Compute, ComputeError, InUse, NotFound
from survivor.cloud.template import STATE_DISK_LABEL
from survivor.mig.address import Say, silent
from survivor.jobdir.disk_tier import PENDING, PendingSnapshot, pending_snapshots
from survivor.places import region_of, region_of_zone

log = logs.get("state-disks")


@dataclass(frozen=True)
class StateDisk:
    """One of a job's state disks as `disks.aggregatedList` shows it."""

    name: str
    zone: str
    size_gb: int
    disk_type: str
    users: tuple[str, ...] = ()  # the instances it is attached to (`projects/P/zones/Z/instances/I`)

    @property
    def region(self) -> str:
        """The disk's region (its zone without the zone letter)."""
        return region_of_zone(self.zone)

    @property
    def monthly_usd(self) -> float | None:
        """What it costs a month from survivor's offline table (survivor/cloud/pricing.py DISKS)."""
        return pricing.disk_monthly(self.disk_type, self.size_gb)

    def to_json(self) -> dict:
        """As `status --json` shows it."""
        return {
            "name": self.name,
            "zone": self.zone,
            "size_gb": self.size_gb,
            "disk_type": self.disk_type,
            "attached_to": [u.rsplit("/", 1)[-1] for u in self.users],
            "monthly_usd": self.monthly_usd,
            "price_basis": pricing.DISK_BASIS,
        }


def find(compute: Compute, job: str) -> list[StateDisk]:
    """The job's state disks in every zone, by their label; ComputeError if they cannot be listed."""
    return [
        StateDisk(d["name"], d["zone"], d["size_gb"], d["disk_type"], tuple(d["users"]))
        for d in compute.labelled_disks(STATE_DISK_LABEL, job)
    ]


def keep_reason(disk: StateDisk, pending: list[PendingSnapshot]) -> str | None:
    """Pure: why `disk` must stay, or None when it may be deleted. An attached disk is its VM's; a
    pending record of the disk's zone names a snapshot that only this disk holds (a record says the
    instance and zone, the disk's name is the group's choice: the zone decides)."""
    if disk.users:
        return f"attached to VM {', '.join(u.rsplit('/', 1)[-1] for u in disk.users)}"
    waiting = [r for r in pending if r.zone == disk.zone]
    if waiting:
        r = max(waiting, key=lambda r: r.step)
        return (
            f"step {r.step} waits on it ({PENDING}{r.instance}.json): the next boot of {r.instance} in "
            f"{r.zone} commits it; delete that record to let it go"
        )
    return None


def size_text(disk: StateDisk) -> str:
    """Pure: `200 GB pd-balanced, $20.00 a month` (the cost from the offline table, `unknown` when the
    type is not in it)."""
    return f"{disk.size_gb} GB {disk.disk_type}, {pricing.money(disk.monthly_usd)} a month"


def line(disk: StateDisk, reason: str | None) -> str:
    """Pure: one disk left, for people: where, how big, what it costs a month, why it is there."""
    return f"state disk {disk.name} ({disk.zone}), {size_text(disk)}: " + (
        reason or "nothing waits on it: `survivor delete` (or the job's watch, once it ended) deletes it"
    )


def left(compute: Compute, job: str, storage=None) -> list[tuple[StateDisk, str | None]]:
    """The job's state disks, each with why it stays (`keep_reason`; None: nothing needs it), for
    `status` and `report`. ComputeError if they cannot be listed."""
    disks = find(compute, job)
    pending = _pending(storage) if disks and storage is not None else []
    return [(d, keep_reason(d, pending or [])) for d in disks]


def total_monthly(disks: list[StateDisk]) -> float | None:
    """Pure: what the disks cost a month together; None when one's price is unknown."""
    costs = [d.monthly_usd for d in disks]
    return None if any(c is None for c in costs) else round(sum(c for c in costs if c is not None), 2)


def _pending(storage) -> list[PendingSnapshot] | None:
    """The job dir's pending records; None when they cannot be read (then every disk is kept)."""
    try:
        return pending_snapshots(storage)
    except Exception as exc:  # the job dir's StorageError, or a bucket the caller cannot read
        log.warning("the job dir's pending records could not be read", error=str(exc))
        return None


def clean(
    compute: Compute, job: str, storage, *, only: Callable[[StateDisk], bool] = lambda _: True, say: Say = silent
) -> list[tuple[StateDisk, str]]:
    """Deletes the job's state disks that `only` selects and that nothing needs (`keep_reason`); says
    one line for each disk deleted or kept, and returns those kept with why. `storage`: the job dir
    (None: not known, so every disk is kept, since a pending snapshot may need it). A disk still
    attached (its group's delete not finished) or not deletable with the caller's roles is kept and
    said; the next call tries again. Never raises for a disk; ComputeError if none can be listed."""
    disks = [d for d in find(compute, job) if only(d)]
    if not disks:
        return []
    pending = _pending(storage) if storage is not None else None
    kept: list[tuple[StateDisk, str]] = []
    for disk in disks:
        reason = (
            "the job dir's pending records could not be read, and one may need it"
            if pending is None
            else keep_reason(disk, pending)
        )
        if reason is None:
            try:
                compute.delete_disk(disk.zone, disk.name)
            except NotFound:
                continue  # gone since it was listed: the step done
            except InUse:
                reason = "still attached (its VM is being deleted); the next look deletes it"
            except ComputeError as exc:
                reason = f"not deleted: {exc}"
            else:
                say(f"state disk {disk.name} ({disk.zone}): deleted ({size_text(disk)})")
                log.info("deleted a state disk nothing needs", disk=disk.name, zone=disk.zone, job=job)
                continue
        say(f"state disk {disk.name} ({disk.zone}): kept, {size_text(disk)}: {reason}")
        log.warning("a state disk kept", disk=disk.name, zone=disk.zone, job=job, reason=reason)
        kept.append((disk, reason))
    return kept


def clean_after_moves(
    compute: Compute, job: str, storage, regions: list[str] | tuple[str, ...], *, shapes: int = 0, say: Say = silent
) -> None:
    """After the job's recorded moves (survivor/mig/move.py): its state disks in a region the
    records moved it away from are deleted once nothing waits on them (a pending snapshot of that zone
    keeps its disk, and the line says so), as `survivor delete` does. The region its group is in now
    keeps its disks: a VM there reattaches them. Without a move recorded nothing is asked; a listing
    or a delete refused (a booting VM's account may lack compute.disks.*) is logged, never raised."""
    from survivor.jobdir.moves import moves

    recorded = moves(storage, regions, shapes)
    if not recorded:
        return
    left_regions = {region_of(p) for m in recorded for p in (m.from_place, m.to_place)} - {
        region_of(recorded[-1].to_place)
    }
    if not left_regions:
        return
    try:
        clean(compute, job, storage, only=lambda d: d.region in left_regions, say=say)
    except ComputeError as exc:
        log.warning("the job's state disks in the regions it left could not be listed", job=job, error=str(exc))
