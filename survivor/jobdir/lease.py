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
not changed for `ttl` seconds of the taker's own monotonic clock. The fence's ttl/3 rests on that
wait, so a lease is taken sooner only from a holder that provably cannot commit any more:

- the holder is this VM (same instance name *and zone*: Compute Engine names are unique in a zone,
  https://cloud.google.com/compute/docs/naming-resources) in an earlier kernel boot: the kernel's
  `boot_id` differs, and a VM runs one kernel at a time (a MIG recreates an instance under the same
  name; a stop/start or reboot makes a new boot_id: "randomly generated early at boot and unique
  for every running kernel instance", sd_id128_get_boot(3));
- the holder is an agent process of this same kernel boot *and pid namespace* that no longer runs
  (its pid and start time, from /proc, name one process for ever: a reused pid has another start
  time), e.g. the agent systemd restarts after a failed attempt. A pid names a process only in its
  own namespace (pid_namespaces(7)), so the lease records the holder's (`/proc/self/ns/pid`, an
  inode the kernel names "pid:[N]"); an agent in a container on the same VM cannot see the
  holder's pid and must not conclude from that that it is gone.

Anything else waits for the ttl: a live agent on the same VM (an operator's `survivor agent` next to
the unit's, or one in a container), a VM of the same name in another zone, a lease from an older
survivor without these fields, a lease object that does not parse (`parse_lease`: treated as a
foreign holder, never fatal).
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from survivor import log as logs
from survivor.jobdir.storage import JobStorage, PreconditionFailed

LEASE = "survivor/LEASE"

log = logs.get("lease")


class LeaseHeld(Exception):
    """Another live agent holds the job. Names it."""


class LeaseLost(Exception):
    """This agent's lease was taken over: it must not commit any more."""


BOOT_ID = "/proc/sys/kernel/random/boot_id"
#: This process's pid namespace: a pid names a process only within its namespace (pid_namespaces(7)).
PID_NS = "/proc/self/ns/pid"


@dataclass(frozen=True)
class Holder:
    """Who holds the lease: an instance (name and zone), its kernel boot, and one agent process.

    `boot` is the kernel's boot_id; `agent` is "pid:start time" of the agent process, and `pidns`
    the pid namespace that pid belongs to (`here()` fills all three). Empty strings mean unknown,
    which never allows a takeover before the ttl.
    """

    instance: str
    boot: str
    zone: str = ""
    agent: str = ""
    pidns: str = ""

    @classmethod
    def here(cls, instance: str, zone: str) -> "Holder":
        """This agent process on this VM."""
        return cls(instance, read_boot_id(), zone, process_identity(os.getpid()), read_pid_namespace())

    def fields(self) -> dict[str, str]:
        """The holder as the lease object's string fields."""
        return {
            "instance": self.instance,
            "zone": self.zone,
            "boot": self.boot,
            "agent": self.agent,
            "pidns": self.pidns,
        }

    def to_json(self) -> bytes:
        """The lease object's bytes: the fields and when this renewal was written."""
        return json.dumps({**self.fields(), "renewed": time.time()}).encode()


def read_boot_id(path: str = BOOT_ID) -> str:
    """The running kernel's boot_id, or "" where there is none (not Linux)."""
    try:
        with open(path, encoding="ascii") as f:
            return f.read(100).strip()
    except (OSError, ValueError):
        return ""


def read_pid_namespace(path: str = PID_NS) -> str:
    """This process's pid namespace as the kernel names it ("pid:[4026531836]": its inode, the same
    for every process of the namespace), or "" where it cannot be read (then no pid of a holder
    is judged: its lease waits for the ttl)."""
    try:
        return os.readlink(path)[:100]
    except OSError:
        return ""


def process_identity(pid: int) -> str:
    """ "pid:start time" of a live process (field 22 of /proc/PID/stat, clock ticks since boot,
    proc(5)), or "" when it has exited (a zombie included) or cannot be read."""
    stat = _proc_stat(pid)
    return f"{pid}:{stat[1]}" if stat and stat[0] not in ("Z", "X") else ""


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) from /proc/PID/stat, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096)
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # the command name may hold spaces and parentheses
    if len(fields) <= 19 or not fields[19].isdigit():
        return None
    return fields[0].decode("ascii", "replace"), fields[19].decode()


def agent_running(agent: str) -> bool:
    """True when "pid:start time" names a process that still runs on this kernel, or when that
    cannot be told (then the lease waits for its ttl, as for any live holder)."""
    pid, _, started = agent.partition(":")
    if not pid.isdigit() or not started or len(pid) > 10:
        return True
    stat = _proc_stat(int(pid))
    if stat is not None:
        return stat[1] == started and stat[0] not in ("Z", "X")
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True  # it runs, but /proc does not show it (mounted with hidepid)


def parse_lease(data: bytes) -> dict[str, Any] | None:
    """The lease object's fields as strings, or None when it is not a lease this code can read
    (not JSON, not an object, fields of the wrong type): then its holder is unknown."""
    try:
        loaded = json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(loaded, dict) or not isinstance(loaded.get("instance"), str):
        return None
    out: dict[str, Any] = {}
    for key in ("instance", "zone", "boot", "agent", "pidns"):
        value = loaded.get(key, "")
        if not isinstance(value, str):
            return None
        out[key] = value[:200]
    out["released"] = loaded.get("released") is True
    return out


def decide_takeover(
    current: dict | None,
    me: Holder,
    unchanged_for: float,
    ttl: float,
    *,
    readable: bool = True,
    holder_running: bool = True,
) -> str:
    """Pure decision on seeing the lease: "take" it, "wait" for it to go stale, or "hold" (it is ours).

    `current` is `parse_lease`'s answer (None and `readable`: no lease; not `readable`: a lease
    object that does not parse, an unknown holder). `holder_running`: whether the agent process
    the lease names still runs (meaningful only when it names this kernel boot and this pid
    namespace: a pid elsewhere names no process here, so not seeing it proves nothing).
    """
    if current is None and readable:
        return "take"
    if current is not None and current.get("released"):
        return "take"
    if current is not None and current.get("instance") == me.instance and current.get("zone") == me.zone and me.zone:
        same_pids = bool(me.pidns) and current.get("pidns") == me.pidns  # its pid means the same process here
        if current.get("boot") == me.boot and current.get("agent") == me.agent and me.agent and same_pids:
            return "hold"
        if me.boot and current.get("boot") and current.get("boot") != me.boot:
            return "take"  # an earlier kernel boot of this VM: it is over
        if me.boot and current.get("boot") == me.boot and current.get("agent") and same_pids and not holder_running:
            return "take"  # an agent of this boot and namespace that is gone (systemd restarted us)
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
            current = parse_lease(blob.data) if blob is not None else None
            if blob is not None:
                if current is None:
                    log.warning(
                        "the lease object does not parse; treating it as held by an unknown agent",
                        object=LEASE,
                        bytes=len(blob.data),
                    )
                if blob.generation != seen_generation:
                    seen_generation, seen_since = blob.generation, time.monotonic()
            # the holder's pid is looked up only where it names a process: this kernel boot and pid namespace
            visible = (
                current is not None
                and bool(self.holder.boot)
                and current.get("boot") == self.holder.boot
                and bool(self.holder.pidns)
                and current.get("pidns") == self.holder.pidns
            )
            decision = decide_takeover(
                current,
                self.holder,
                time.monotonic() - seen_since,
                self.ttl,
                readable=blob is None or current is not None,
                holder_running=current is None or not visible or agent_running(current.get("agent", "")),
            )
            if decision in ("take", "hold"):
                started = time.monotonic()
                try:
                    self.generation = self.storage.write(
                        LEASE, self.holder.to_json(), if_generation_match=blob.generation if blob else 0
                    )
                except PreconditionFailed:
                    continue  # someone else moved first; look again
                self.renewed_at = started
                if blob is not None and (current is None or not current.get("released")) and decision == "take":
                    log.warning("took over the lease", previous=_describe(current))
                return self
            if time.monotonic() >= deadline:
                raise LeaseHeld(
                    f"the job dir is held by {_describe(current)}, which keeps renewing its lease: another "
                    f"agent is training this job. Stop that one first."
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
                if self._adopt_own_write():
                    self.generation = self.storage.write(
                        LEASE, self.holder.to_json(), if_generation_match=self.generation
                    )
                    self.renewed_at = started
                    return
                self.lost.set()
                holder = "nobody"
                try:
                    blob = self.storage.read(LEASE)
                    if blob is not None:
                        current = parse_lease(blob.data)
                        holder = current["instance"] if current else "an unreadable lease"
                except Exception as exc:  # who took it is for the log only; lost is lost
                    holder = f"(unknown: {exc})"
                log.error("lost the lease; not committing any more", holder=holder)
                raise LeaseLost(f"the lease was taken over by {holder}") from None

    def _adopt_own_write(self) -> bool:
        """After a refused renewal: True (and the object's generation adopted) when the lease object
        still names this very agent, unreleased. Then the generation moved under a renewal of ours
        whose answer was lost (it landed, but the call failed), not under a taker: no other process
        writes this agent's identity (instance, zone, kernel boot, pid and start time)."""
        blob = self.storage.read(LEASE)
        current = parse_lease(blob.data) if blob is not None else None
        if blob is None or current is None or current.get("released") or not self.holder.agent:
            return False
        if any(current.get(key) != value for key, value in self.holder.fields().items()):
            return False
        log.warning("a renewal of ours landed without its answer; carrying on from it", generation=blob.generation)
        self.generation = blob.generation
        return True

    def fence(self) -> None:
        """Before a commit: makes sure a renewal started within ttl/3, renewing now if none did.
        Raises LeaseLost if the lease was taken over."""
        if self.lost.is_set():
            raise LeaseLost("this agent's lease was taken over; it no longer commits")
        if fence_needs_renewal(time.monotonic() - self.renewed_at, self.ttl):
            self.renew()

    def start_renewing(self) -> "Lease":
        """Renews the lease every ttl/4 from a background thread; sets `lost` if it was taken over. Returns self."""

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
                data = json.dumps({**self.holder.fields(), "released": True}).encode()
                self.generation = self.storage.write(LEASE, data, if_generation_match=self.generation)
            except Exception as exc:  # it goes stale by itself after ttl
                log.debug("lease not released", error=str(exc))


def _describe(current: dict | None) -> str:
    """A holder as a log line names it."""
    if current is None:
        return "an unknown agent (the lease object does not parse)"
    where = f" in {current['zone']}" if current.get("zone") else ""
    return f"{current.get('instance')}{where} (boot {current.get('boot') or '?'}, agent {current.get('agent') or '?'})"
