"""Single writer: a lease object in the job dir, so two VMs on one job can never both commit.

    >>> lease = Lease(storage, holder=Holder("cifar10-x1z2", "4721..."), ttl=60).acquire()
    >>> lease.start_renewing()              # a background thread; `lease.lost` is set if it fails
    >>> lease.fence()                       # before each manifest write

`survivor/LEASE` holds who has the job and is rewritten (renewed) every `ttl / 4` seconds with
`if_generation_match` = the generation this holder last wrote. Any write by someone else changes
the generation, so the next renewal fails and the old holder knows it lost: it stops committing.

The fence before a commit asks for a renewal that started at most `ttl / 3` ago, and writes one
only if the last is older. A taker waits a whole ttl after the last renewal it saw, so a manifest
write that starts within ttl/3 of a renewal has two thirds of a ttl to land before anyone else
may write; the background renewals (every ttl/4) keep the fence fresh, so a commit costs no extra
write to the lease object (Cloud Storage takes about one write a second to one object).

Taking a lease over needs no clock agreement between VMs: a lease is stale once its generation has
not changed for `ttl` seconds of the taker's own monotonic clock. A lease held by the same instance
name is taken at once: Compute Engine names are unique in a zone, so a new boot with the holder's
name means the old one is gone (a MIG recreates an instance under the same name).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

from survivor import log as logs
from survivor.storage import JobStorage, PreconditionFailed

LEASE = "survivor/LEASE"

log = logs.get("lease")


class LeaseHeld(Exception):
    """Another live agent holds the job. Names it."""


class LeaseLost(Exception):
    """This agent's lease was taken over: it must not commit any more."""


@dataclass(frozen=True)
class Holder:
    """Who holds the lease: an instance and one boot of it."""

    instance: str
    boot: str

    def to_json(self) -> bytes:
        return json.dumps({"instance": self.instance, "boot": self.boot, "renewed": time.time()}).encode()


def decide_takeover(current: dict | None, me: Holder, unchanged_for: float, ttl: float) -> str:
    """Pure decision on seeing the lease: "take" it, "wait" for it to go stale, or "hold" (it is ours)."""
    if current is None or current.get("released"):
        return "take"
    if current.get("instance") == me.instance:
        return "hold" if current.get("boot") == me.boot else "take"
    return "take" if unchanged_for >= ttl else "wait"


def fence_needs_renewal(since_renewal: float, ttl: float) -> bool:
    """Pure decision: is the last renewal too old to commit on? (See the module docstring.)"""
    return since_renewal >= ttl / 3


class Lease:
    """One agent's lease on a job dir."""

    def __init__(self, storage: JobStorage, holder: Holder, ttl: float = 60.0):
        self.storage = storage
        self.holder = holder
        self.ttl = ttl
        self.generation: int | None = None
        self.renewed_at = float("-inf")  # monotonic start of the last write that succeeded
        self.lost = threading.Event()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self, wait: float | None = None, poll: float = 1.0) -> "Lease":
        """Takes the lease, waiting up to `wait` seconds (default 2 x ttl) for a stale one.

        Raises LeaseHeld, naming the holder, if another agent keeps renewing it.
        """
        wait = 2 * self.ttl if wait is None else wait
        deadline = time.monotonic() + wait
        seen_generation, seen_since = None, time.monotonic()
        while True:
            blob = self.storage.read(LEASE)
            current = None
            if blob is not None:
                try:
                    current = json.loads(blob.data)
                except ValueError:
                    current = {"instance": "(unreadable lease)", "boot": ""}
                if blob.generation != seen_generation:
                    seen_generation, seen_since = blob.generation, time.monotonic()
            decision = decide_takeover(current, self.holder, time.monotonic() - seen_since, self.ttl)
            if decision in ("take", "hold"):
                started = time.monotonic()
                try:
                    self.generation = self.storage.write(
                        LEASE, self.holder.to_json(), if_generation_match=blob.generation if blob else 0)
                except PreconditionFailed:
                    continue  # someone else moved first; look again
                self.renewed_at = started
                if current and current.get("instance") not in (None, self.holder.instance):
                    log.warning("took over a stale lease", previous=current.get("instance"))
                return self
            if time.monotonic() >= deadline:
                raise LeaseHeld(
                    f"the job dir is held by {current.get('instance')} (boot {current.get('boot')}), which keeps "
                    f"renewing its lease: another agent is training this job. Stop that one first."
                )
            time.sleep(poll)

    def renew(self) -> None:
        """Rewrites the lease conditionally. Raises LeaseLost if anyone else wrote it since."""
        if self.lost.is_set():
            raise LeaseLost("this agent's lease was taken over; it no longer commits")
        with self._lock:
            started = time.monotonic()
            try:
                self.generation = self.storage.write(LEASE, self.holder.to_json(), if_generation_match=self.generation)
                self.renewed_at = started
            except PreconditionFailed:
                self.lost.set()
                blob = self.storage.read(LEASE)
                holder = json.loads(blob.data).get("instance") if blob else "nobody"
                log.error("lost the lease; not committing any more", holder=holder)
                raise LeaseLost(f"the lease was taken over by {holder}") from None

    def fence(self) -> None:
        """Before a commit: makes sure a renewal started within ttl/3, renewing now if none did.
        Raises LeaseLost if the lease was taken over."""
        if self.lost.is_set():
            raise LeaseLost("this agent's lease was taken over; it no longer commits")
        if fence_needs_renewal(time.monotonic() - self.renewed_at, self.ttl):
            self.renew()

    def start_renewing(self) -> "Lease":
        def loop() -> None:
            while not self._stop.wait(self.ttl / 4):
                try:
                    self.renew()
                except LeaseLost:
                    return
                except Exception as exc:  # storage trouble: try again soon; expiry is ttl away
                    log.warning("lease renewal failed; retrying", error=str(exc))

        self._thread = threading.Thread(target=loop, name="lease", daemon=True)
        self._thread.start()
        return self

    def release(self) -> None:
        """Stops renewing and marks the lease released, so the next agent (on a VM with another
        name, after a MIG resize) need not wait for it to go stale."""
        self._stop.set()
        if self.lost.is_set() or self.generation is None:
            return
        with self._lock:
            try:
                data = json.dumps({"instance": self.holder.instance, "boot": self.holder.boot, "released": True}).encode()
                self.generation = self.storage.write(LEASE, data, if_generation_match=self.generation)
            except Exception as exc:  # it goes stale by itself after ttl
                log.debug("lease not released", error=str(exc))
