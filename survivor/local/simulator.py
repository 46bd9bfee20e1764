"""The whole lifecycle on one machine: a Spot VM in a single-instance MIG, under fire.

    >>> sim = Simulator(spec_yaml, root="/tmp/sim", preempt_every=90, jitter=30, seed=1)
    >>> result = sim.run(timeout=3600)          # until DONE/FAILED and the MIG is at size 0
    >>> print(result.table())

The job's template and MIG are created through the real google-cloud-compute client in survivor's
fake Compute server; every instance the MIG creates becomes a `LocalInstance` (an agent process with
its own metadata emulator and boot disk). A preemption is what Compute Engine does to a Spot VM:
`preempted=TRUE`, after the template's `preemptionNoticeDuration` the ACPI soft off (SIGTERM), the hard
off (SIGKILL) `hard_off_after` seconds later; then the MIG recreates the instance after
`recreate_delay` with a fresh boot disk. When the agent finishes it leaves the MIG through the API,
and the simulator sees the target size drop to 0. All durations can be scaled for tests.

Preemptions come every `preempt_every` seconds, or from a seeded Spot trace (survivor/local/traces.py:
preemptions per hour and stockout gaps, in simulated time): at `speed` simulated seconds per real
second, each outage's start preempts the running VM and its gap (no Spot capacity) delays the MIG's
recreation. Or Spot capacity per zone follows a published trace (`capacity=traces.load(folder)`, the
Can't Be Late format): the Compute fake refuses Spot VMs in a zone while its trace has no capacity
(`ComputeServer.follow_capacity`, `speed` trace seconds a real second) and the VM running there is
preempted as the outage begins. The VM time the run used, scaled by `speed`, is priced at Spot and on-demand rates
as `survivor report` prices a job: the Cloud Billing Catalog's (survivor/cloud/catalog.py), else the
offline table, the line saying which (`vm_seconds`, `SimulationRun.cost`).
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import yaml

from survivor import log as logs
from survivor.cloud import pricing
from survivor.local.compute_server import ComputeServer
from survivor.local.instance import LocalInstance
from survivor.local.traces import Trace, TraceError, Zones, from_hour, load, make_trace, zone_map
from survivor.spec import JobSpec, SpecError, load_yaml
from survivor.places import region_of_zone

PROJECT = "survivor-local"
ZONE = "us-west1-b"


@dataclass
class Event:
    """One line of the timeline."""

    t: float
    kind: str  # boot, notice, soft-off, hard-off, exit, recreate, left-group, done
    instance: str
    detail: str = ""


@dataclass
class SimulationResult:
    """What a simulation saw: its timeline, the MIG's final target size, the job dir's DONE or FAILED
    marker and the journal's attempts."""

    events: list[Event] = field(default_factory=list)
    target_size: int | None = None
    done: dict | None = None
    failed: dict | None = None
    attempts: list = field(default_factory=list)
    ended: float | None = None  # seconds from the start to the end of the run

    def vm_seconds(self) -> float:
        """Pure: the seconds some VM of the group existed (a boot to its exit, its leaving the group or
        the end of the run): what Compute Engine bills."""
        total = 0.0
        up: dict[str, float] = {}
        for e in self.events:
            if e.kind == "boot":
                up.setdefault(e.instance, e.t)
            elif e.kind in ("exit", "left-group", "deleted") and e.instance in up:
                total += e.t - up.pop(e.instance)
        end = self.ended if self.ended is not None else max((e.t for e in self.events), default=0.0)
        return total + sum(max(0.0, end - t) for t in up.values())

    @property
    def preemptions(self) -> int:
        """How many preemption notices the simulation sent."""
        return sum(1 for e in self.events if e.kind == "notice")

    def table(self, timeline: bool = True) -> str:
        """The timeline as text (unless `timeline` is False: a terminal showed it live), then one line
        per boot: the step it restored, the furthest its trainer reached, the step it saved
        (committed), the steps lost, and its outcome with the journal's reason (such as a trainer that
        did not save on the notice)."""
        lines = []
        if timeline:
            lines.append(f"{'t (s)':>8}  {'event':<11} {'instance':<22} detail")
            lines += [f"{e.t:8.1f}  {e.kind:<11} {e.instance:<22} {e.detail}" for e in self.events]
            lines.append("")
        lines.append(f"{'boot':>4} {'restored':>8} {'reached':>8} {'saved':>6} {'lost':>5}  outcome")
        for a in self.attempts:
            outcome = (a.outcome or "killed") + (f": {a.reason}" if a.reason else "")
            lines.append(
                f"{a.number:>4} {str(a.restored_step or 0):>8} {str(a.reached_step):>8} "
                f"{str(a.end_step):>6} {str(a.steps_lost):>5}  {outcome}"
            )
        lines.append(
            f"MIG target size {self.target_size}; DONE {'written' if self.done else 'missing'}"
            + (f"; FAILED: {self.failed.get('reason')}" if self.failed else "")
        )
        return "\n".join(lines)

    def plot(self, path: str, train_steps: int) -> str | None:
        """A PNG of the timeline: committed step per boot, with notices and hard offs marked."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        fig, ax = plt.subplots(figsize=(9, 3.5))
        for e in self.events:
            color = {"notice": "tab:orange", "hard-off": "tab:red", "boot": "tab:green", "left-group": "tab:blue"}.get(
                e.kind
            )
            if color:
                ax.axvline(e.t, color=color, alpha=0.6, lw=1)
        for t, step, label in boot_marks(self):
            restored = "restored" in label
            ax.plot([t], [step], "o" if restored else "s", color="tab:green" if restored else "tab:purple")
            ax.annotate(label, (t, step), fontsize=7, textcoords="offset points", xytext=(3, 4 if restored else -10))
        ax.set_ylim(0, train_steps * 1.05)
        ax.set_xlabel("seconds")
        ax.set_ylabel("step")
        ax.set_title(
            "survivor simulate: boots (green: step restored), ends (purple: step saved), notices (orange), "
            "hard offs (red), leaving the MIG (blue)",
            fontsize=8,
        )
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


def boot_marks(result: SimulationResult) -> list[tuple[float, int, str]]:
    """Pure: where the timeline plot labels each boot: (seconds, step, label), the step it restored at
    its boot and the step it saved where it ended (its agent's exit, its leaving the group, or the
    end of the run). Boots and attempts pair in order; an attempt without a saved step gets no end mark."""
    boots = [i for i, e in enumerate(result.events) if e.kind == "boot"]
    end_of_run = result.ended if result.ended is not None else max((e.t for e in result.events), default=0.0)
    marks = []
    for index, attempt in zip(boots, result.attempts):
        boot = result.events[index]
        marks.append(
            (boot.t, attempt.restored_step or 0, f"boot {attempt.number} restored {attempt.restored_step or 0}")
        )
        if attempt.end_step is None:
            continue
        end = next(
            (
                e.t
                for e in result.events[index + 1 :]
                if e.instance == boot.instance and e.kind in ("exit", "left-group", "deleted", "boot")
            ),
            end_of_run,
        )
        marks.append((end, attempt.end_step, f"saved {attempt.end_step}"))
    return marks


class StandInDied(RuntimeError):
    """A stand-in the simulation started (the storage emulator) exited while the job ran: every later
    boot would only fail against it. The message names it and its log."""


class Simulator:
    """Runs one job through the fake MIG with Spot-style preemptions."""

    def __init__(
        self,
        spec_yaml: str,
        root: str,
        *,
        preempt_every: float = 90.0,
        jitter: float = 0.0,
        hard_off_after: float = 30.0,
        recreate_delay: float = 1.0,
        max_preemptions: int | None = None,
        seed: int = 0,
        python: str = sys.executable,
        env: dict[str, str] | None = None,
        preempt_during_restore: int = 0,
        stateful_disk: bool = False,
        trace: Trace | None = None,
        speed: float = 60.0,
        on_event: Callable[[Event], None] | None = None,
        region_outages: tuple[tuple[str, float, float], ...] = (),
        watch_every: float | None = None,
        shape_outages: tuple[tuple[str, float, float], ...] = (),
        outages_from_first_commit: bool = False,
        preempting_regions: tuple[str, ...] = (),
        capacity: Zones | None = None,
        capacity_zones: dict[str, str] | None = None,
        stand_ins: Callable[[], str] | None = None,
    ):
        self.spec = yaml.safe_load(spec_yaml)
        #: says why a stand-in the caller started is gone ("" while all run): the run stops with StandInDied
        self.stand_ins = stand_ins
        self.on_event = on_event
        self.spec_yaml = spec_yaml
        self.root = os.path.abspath(root)
        self.preempt_every = preempt_every
        self.jitter = jitter
        self.hard_off_after = hard_off_after
        self.recreate_delay = recreate_delay
        self.max_preemptions = max_preemptions
        self.rng = random.Random(seed)
        self.python = python
        self.env = dict(env or {})
        self.preempt_during_restore = preempt_during_restore
        self.stateful_disk = stateful_disk
        self.trace, self.speed = trace, speed
        self._outages = list(trace.outages) if trace else []
        #: (region, start, end) in real seconds from the start: no capacity there (every zone stocked out)
        self.region_outages = list(region_outages)
        #: (machine type, start, end) in real seconds from the start: no capacity for that machine in
        #: any zone (a shape out of stock everywhere while others have capacity)
        self.shape_outages = list(shape_outages)
        self._outage_failures: dict[tuple[str, float, float], list[dict]] = {}
        #: count the outages' times from the job's first commit instead of the start, so an outage
        #: falls mid-job however long the first VM takes to boot on a loaded machine
        self.outages_from_first_commit = outages_from_first_commit
        self._first_commit: float | None = None
        #: only VMs in these regions are preempted (empty: every region), each once its agent trains
        #: (its guest attribute `state`), so a slow boot on a loaded machine still records its attempt
        self.preempting_regions = tuple(preempting_regions)
        #: the watch (Cloud Scheduler + Cloud Run) the simulator plays every this many real seconds:
        #: the deadline's and placement's looks while no VM runs (None: no watch)
        self.watch_every = watch_every
        self._next_watch = watch_every or 0.0
        self.compute = ComputeServer().start()
        #: Spot capacity per zone from a published trace (traces.load), `speed` trace seconds a real
        #: second from the start (or the first commit): the fake refuses Spot VMs in a zone while its
        #: trace has no capacity, and a VM running there is preempted as the outage begins.
        #: `capacity_zones`: the fake's zone for a trace's zone (the published traces name AWS zones)
        self.capacity = capacity
        self._traced_out: set[str] = set()
        self._next_retry = 0.0
        self.result = SimulationResult()
        self.vms: dict[str, LocalInstance] = {}
        self._lock = threading.Lock()
        self._started = time.monotonic()
        if capacity is not None:  # after the start: the trace's clock counts from it (or the first commit)
            self.compute.follow_capacity(
                capacity, speed=speed, zones=capacity_zones, clock=lambda: self._outage_clock() or 0.0
            )
        self._pending: list[dict] = []
        self.compute.on_instance_created.append(self._created)
        self.compute.on_instance_deleted.append(self._deleted)

    def _event(self, kind: str, instance: str, detail: str = "") -> None:
        event = Event(round(time.monotonic() - self._started, 2), kind, instance, detail)
        with self._lock:
            self.result.events.append(event)
        if self.on_event is not None:  # progress while it runs, as the demo shows it
            self.on_event(event)

    # -- the fake MIG's instances become local VMs ------------------------------------------------

    def _created(self, vm: dict) -> None:
        # called inside the fake's request handler: boot outside it
        with self._lock:
            self._pending.append(vm)

    def _deleted(self, vm: dict) -> None:
        with self._lock:  # a VM deleted before it booted never runs its agent
            self._pending = [p for p in self._pending if (p["name"], p["zone"]) != (vm["name"], vm["zone"])]
        local = self.vms.get(vm["name"])
        if local is not None and local.running():
            threading.Thread(target=self._power_off, args=(local,), daemon=True).start()
        self._event("left-group" if vm.get("_group") else "deleted", vm["name"])

    def _power_off(self, local: LocalInstance) -> None:
        local.soft_off()
        if local.wait(self.hard_off_after) is None:
            local.kill()

    def _boot_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for vm in pending:
            name = vm["name"]
            attributes = {i["key"]: i["value"] for i in vm["metadata"]["items"]}
            # a simulated VM has no GPU and installs no driver: its agent must not wait 900 s for one
            # (simulate says so once, at its start, when the spec asks for GPUs)
            attributes.pop("install-nvidia-driver", None)
            local = self.vms.get(name)
            if local is None:
                local = LocalInstance(
                    attributes,
                    os.path.join(self.root, name),
                    name=name,
                    zone=vm["zone"].rsplit("/", 1)[-1],
                    project=PROJECT,
                    python=self.python,
                    env={**self.env, "SURVIVOR_COMPUTE_ENDPOINT": self.compute.endpoint},
                )
                self.vms[name] = local
            local.boot(wipe=not self.stateful_disk)
            self._event("boot", name, f"boot {local.boots}")

    # -- the run ----------------------------------------------------------------------------------

    def _template_and_group(self) -> None:
        from survivor.cloud.compute import Compute
        from survivor.cloud.template import MachineOptions, template_body

        spec = JobSpec.from_yaml(self.spec_yaml)
        compute = Compute(PROJECT, endpoint=self.compute.endpoint)
        options = MachineOptions.from_spec(spec)
        compute.insert_template(template_body("sim", spec, options, script="#!/bin/bash\n# simulated\n"))
        notice = (
            self.compute.templates[(PROJECT, "sim")]["properties"]
            .get("scheduling", {})
            .get("preemptionNoticeDuration", {})
            .get("seconds")
        )
        self.notice_seconds = float(notice or 0)
        compute.create_group("sim", "sim", zone=ZONE, size=1)

    def _group(self) -> dict:
        """The job's group now: the newest group named `sim` (a move makes one in another region and
        deletes the old), or the last one seen once the move's delete is done."""
        with self.compute.lock:
            found = [g for key, g in self.compute.groups.items() if key[2] == "sim"]
        if found:
            self._last_group = max(found, key=lambda g: int(g["id"]))
        return self._last_group

    def _outage_clock(self) -> float | None:
        """Seconds on the outages' clock: since the start, or since the first commit (None before it)."""
        if not self.outages_from_first_commit:
            return time.monotonic() - self._started
        if self._first_commit is None:
            from survivor.jobdir.storage import open_storage

            if open_storage(self.spec["job_dir"]).list("survivor/snapshots/"):
                self._first_commit = time.monotonic()
                self._event("note", "-", "the first commit: the outages' clock starts")
            else:
                return None
        return time.monotonic() - self._first_commit

    def _in_outage(self, zone: str, machine_type: str = "") -> bool:
        """True when a VM of `machine_type` in `zone` finds no capacity now (its region's outage, or its shape's)."""
        now = self._outage_clock()
        if now is None:
            return False
        return (
            any(region == region_of_zone(zone) and start <= now < end for region, start, end in self.region_outages)
            or any(kind == machine_type and start <= now < end for kind, start, end in self.shape_outages)
            or self.compute.trace_stockout(zone)
        )

    def _machine_of(self, vm_name: str) -> str:
        """The machine type of the group's template the VM `vm_name` belongs to."""
        group = self._group()
        template = self.compute.templates.get((PROJECT, group["instanceTemplate"].rsplit("/", 1)[-1]), {})
        return str(template.get("properties", {}).get("machineType", "")).rsplit("/", 1)[-1]

    def _apply_region_outages(self) -> None:
        """Starts and ends each region's and shape's outage: the fake refuses VMs in the region's zones
        (or of the machine type, in every zone: a stockout, as the API lists it) and a VM running
        there is preempted at its start."""
        now = self._outage_clock()
        if now is None:
            return
        for outage, where in [(o, "region") for o in self.region_outages] + [(o, "shape") for o in self.shape_outages]:
            what, start, end = outage
            active = start <= now < end
            if active and outage not in self._outage_failures:
                before = list(self.compute.creation_failures)
                if where == "region":
                    for zone in self.compute.zones_of(what):
                        self.compute.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", zone=zone)
                else:
                    self.compute.fail_instance_creation("ZONE_RESOURCE_POOL_EXHAUSTED", machine_type=what)
                with self.compute.lock:
                    self._outage_failures[outage] = [f for f in self.compute.creation_failures if f not in before]
                self._event(
                    "stockout",
                    "-",
                    f"no capacity {'in' if where == 'region' else 'for'} {what} from "
                    f"{start:.0f} s" + ("" if end == float("inf") else f" to {end:.0f} s"),
                )
                local = self._running()
                if local is not None and self._in_outage(local.zone, self._machine_of(local.name)):
                    self._preempt(local)
            elif not active and outage in self._outage_failures and now >= end:
                with self.compute.lock:
                    for failure in self._outage_failures.pop(outage):
                        if failure in self.compute.creation_failures:
                            self.compute.creation_failures.remove(failure)
                self._event("capacity", "-", f"{what} has capacity again")

    def _follow_trace(self) -> None:
        """The capacity trace's moment: a VM running in a zone whose outage begins is preempted; a
        group's VM the trace refused is tried again (a MIG retries "until it is successful")."""
        if self.capacity is None:
            return
        with self.compute.lock:
            zones = {key[1] for key in self.compute.instances} | {
                m[1] for g in self.compute.groups.values() for m in g["_members"]
            }
        # a zone the job has left (a move) is no longer looked at: it is not "back", it is behind us
        out = {zone for zone in zones if self.compute.trace_stockout(zone)} | (self._traced_out - zones)
        for zone in sorted(out - self._traced_out):
            self._event("stockout", "-", f"no Spot capacity in {zone} (the trace)")
        for zone in sorted(self._traced_out - out):
            self._event("capacity", "-", f"{zone} has Spot capacity again (the trace)")
        began, back, self._traced_out = out - self._traced_out, self._traced_out - out, out
        local = self._running()
        if local is not None and local.zone in began:
            self._preempt(local)
        if back:  # a zone the trace gives back is tried at once, not at the next second's try
            self._next_retry = 0.0
        if time.monotonic() < self._next_retry:  # a try a second: each refused one is listed (listErrors)
            return
        self._next_retry = time.monotonic() + 1.0
        with self.compute.lock:
            for group in list(self.compute.groups.values()):
                if group["_pending"]:
                    self.compute._retry_pending(group)

    def _watch(self) -> None:
        """The watch's look, as the deployed Cloud Run job makes it: placement's move decision."""
        from survivor.mig.move import look_and_move
        from survivor.cloud.compute import Compute, GroupRef
        from survivor.jobdir.storage import open_storage

        spec = JobSpec.from_yaml(self.spec_yaml)
        if spec.placement is None:
            return
        said: list[str] = []
        moved = look_and_move(
            Compute(PROJECT, endpoint=self.compute.endpoint),
            GroupRef(PROJECT, "sim", zone=ZONE),
            spec,
            open_storage(spec.job_dir),
            by="watch",
            scale=self.speed,
            say=said.append,
        )
        if moved is not None:
            self._event("move", "-", f"{moved.from_place} -> {moved.to_place}: {moved.reason}")

    def _preemptible(self, local: LocalInstance) -> bool:
        """May `local` be preempted now: in any region when no `preempting_regions` are named, else in
        one of them once its agent trains."""
        if not self.preempting_regions:
            return True
        return (
            region_of_zone(local.zone) in self.preempting_regions
            and local.metadata.get("instance/guest-attributes").get("survivor", {}).get("state") == "training"
        )

    def _running(self) -> LocalInstance | None:
        for local in self.vms.values():
            if local.running():
                return local
        return None

    def _preempt(self, local: LocalInstance, stockout: float = 0.0) -> None:
        self._event(
            "notice",
            local.name,
            f"preempted=TRUE; the trainer at step {local.progress()} (it may train on until it saves: see reached)",
        )
        local.set_preempted()
        if self.notice_seconds:
            local.wait(self.notice_seconds)
        self._event("soft-off", local.name)
        local.soft_off()
        if local.wait(self.hard_off_after) is None:
            self._event("hard-off", local.name, "SIGKILL: the agent was still running")
            local.kill()
        self._event("exit", local.name, f"agent exit {local.returncode}")
        if stockout:
            self._event("stockout", local.name, f"no Spot capacity for {stockout:.1f} s")
        time.sleep(self.recreate_delay + stockout)
        group = self._group()
        member = next((m for m in group["_members"] if m[2] == local.name), None)
        if member is not None and self._in_outage(member[1], self._machine_of(local.name)):
            # no capacity: the MIG's recreation fails as the API lists it, and it keeps trying
            with self.compute.lock:
                self.compute.instances.pop(member, None)
                template = self.compute.templates.get((PROJECT, group["instanceTemplate"].rsplit("/", 1)[-1]), {})
                self.compute._try_create(member, group, template)
            self._event("recreate", local.name, "the MIG cannot recreate the VM: no capacity in its region")
        elif member is not None:
            self._event("recreate", local.name, "the MIG recreates the preempted VM")
            with self.compute.lock:
                self.compute.instances[member]["status"] = "RUNNING"
                for callback in self.compute.on_instance_created:
                    callback(self.compute.instances[member])

    def run(self, timeout: float = 3600.0) -> SimulationResult:
        """Creates the template and the MIG, then preempts its VMs until the job ends (DONE or FAILED and
        the VM gone) or `timeout` seconds pass; every local VM is closed and the fake Compute stopped."""
        from survivor.jobdir.journal import Journal
        from survivor.jobdir.storage import open_storage

        os.makedirs(self.root, exist_ok=True)
        self._template_and_group()
        journal = Journal(open_storage(self.spec["job_dir"]))
        deadline = time.monotonic() + timeout
        next_preemption, stockout = self._next_outage() if self.trace else (self._next_gap(), 0.0)
        preempted = 0
        restore_hits = 0
        aborted = False
        try:
            while time.monotonic() < deadline:
                died = self.stand_ins() if self.stand_ins is not None else ""
                if died:  # 58 boots in 11 minutes failed against a dead fake-gcs-server before this check
                    raise StandInDied(died)
                self._apply_region_outages()
                self._follow_trace()
                if self.watch_every and time.monotonic() - self._started >= self._next_watch:
                    self._next_watch = time.monotonic() - self._started + self.watch_every
                    self._watch()
                self._boot_pending()
                local = self._running()
                group = self._group()
                if local is None and group["targetSize"] == 0:
                    break
                if local is None:
                    if not self._pending:
                        # the agent exited by itself (a failure): systemd restarts it on the same VM
                        for vm in self.vms.values():
                            if (
                                vm.process
                                and vm.process.poll() not in (None, 0)
                                and any(m[2] == vm.name for m in group["_members"])
                            ):
                                self._event("exit", vm.name, f"agent exit {vm.process.returncode}; systemd restarts it")
                                time.sleep(self.recreate_delay)
                                vm.boot(wipe=False)
                                self._event("boot", vm.name, f"boot {vm.boots} (restart)")
                                break
                        else:
                            if all(vm.process and vm.process.poll() == 0 for vm in self.vms.values()) and (
                                journal.done() or journal.failed()
                            ):
                                # finished with keep-alive: nothing more happens
                                break
                    time.sleep(0.05)
                    continue
                allowed = (self.max_preemptions is None or preempted < self.max_preemptions) and self._preemptible(
                    local
                )
                if (
                    allowed
                    and restore_hits < self.preempt_during_restore
                    and local.metadata.get("instance/guest-attributes").get("survivor", {}).get("state") == "restoring"
                ):
                    restore_hits += 1
                    preempted += 1
                    self._preempt(local)
                    next_preemption = time.monotonic() - self._started + self._next_gap()
                    continue
                if allowed and time.monotonic() >= self._started + next_preemption:
                    preempted += 1
                    self._preempt(local, stockout)
                    next_preemption, stockout = (
                        self._next_outage()
                        if self.trace
                        else (time.monotonic() - self._started + self._next_gap(), 0.0)
                    )
                    continue
                time.sleep(0.01)
        except BaseException:  # Ctrl-C, a dead stand-in: no reads of a job dir that may not answer
            aborted = True
            raise
        finally:
            for local in self.vms.values():
                local.close()
            self.result.ended = round(time.monotonic() - self._started, 2)
            if aborted:
                self.compute.stop()
        return self._summarise(journal)

    def _summarise(self, journal) -> SimulationResult:
        """The result once the run ended by itself: the journal's outcome and the group's size."""
        try:
            state = journal.state()
            self.result.done, self.result.failed, self.result.attempts = state.done, state.failed, state.attempts
            self.result.target_size = (
                self._group()["targetSize"] if any(key[2] == "sim" for key in self.compute.groups) else None
            )
            if state.done:
                self._event("done", "-", f"DONE at step {state.done.get('step')}")
        finally:
            self.compute.stop()
        return self.result

    def _next_gap(self) -> float:
        return max(0.5, self.preempt_every + self.rng.uniform(-self.jitter, self.jitter))

    def _next_outage(self) -> tuple[float, float]:
        """(when, stockout) in real seconds from the start: the trace's next outage that has not begun
        (one that began while no VM ran preempted nothing), or never."""
        now = time.monotonic() - self._started
        while self._outages:
            start, gap = self._outages.pop(0)
            if start * 3600 / self.speed >= now:
                return start * 3600 / self.speed, gap * 3600 / self.speed
        return float("inf"), 0.0


def parse_seconds(text: str) -> float:
    """`90s`, `2m`, `1.5` -> seconds."""
    text = str(text).strip().lower()
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for suffix in ("ms", "s", "m", "h"):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale[suffix]
    return float(text)


def duration(flag: str, text: str, *, zero_allowed: bool = False) -> float:
    """`text` in seconds (see parse_seconds); SpecError naming `flag` unless finite and above 0 (or 0 itself
    when `zero_allowed`)."""
    try:
        seconds = parse_seconds(text)
    except ValueError:
        seconds = float("nan")
    least = 0.0 if zero_allowed else 0.001
    if not least <= seconds < float("inf"):  # nan fails too
        raise SpecError([f"{flag} {text!r}: expected a duration such as 90s, 2m or 1.5 (> 0)"])
    return seconds


#: Marks a --workdir as a simulation's, so a rerun may delete it (and nothing else).
MARKER = ".survivor-simulation"


@dataclass(frozen=True)
class SimulationOptions:
    """What `survivor simulate` runs: the job spec file (a relative job_dir goes under `workdir`), where the
    simulated VMs' disks and logs go, and the preemptions (durations in seconds)."""

    config: str
    workdir: str = "survivor-simulation"
    preempt_every: float = 90.0
    jitter: float = 0.0
    hard_off_after: float = 30.0
    recreate_delay: float = 2.0
    max_preemptions: int | None = None
    timeout: float = 7200.0
    seed: int = 0
    gcs: bool = False  # keep the job dir in the Cloud Storage emulator
    preemptions_per_hour: float | None = None  # a seeded trace instead of preempt_every (simulated hours)
    stockout_minutes: float = 0.0  # the trace's mean stockout gap after a preemption (simulated minutes)
    stockout_chance: float = 0.5  # how often a preemption is followed by a stockout
    speed: float = 60.0  # simulated seconds per real second: for the trace and the cost
    spot_price: float | None = None  # USD per hour, instead of the catalog's
    on_demand_price: float | None = None
    region: str | None = None  # where the prices are read: the spec's zone's region, else the simulated MIG's
    online: bool = True  # read the Cloud Billing Catalog when today's prices are not cached
    on_event: Callable[[Event], None] | None = None  # each timeline event as it happens (progress)
    capacity_traces: str | None = None  # a folder of Spot capacity traces in the published format
    trace_zones: tuple[str, ...] = ()  # TRACE_ZONE=ZONE: the fake's zone for a trace's zone
    trace_start: float = 0.0  # simulated hours into the traces where the simulation starts
    watch_every: float | None = None  # simulated seconds between the watch's looks (None: see simulate)
    watch_log: bool = False  # survivor's logs in this process (the played watch's) go to WORKDIR/watch.log


def read_spec(options: SimulationOptions) -> dict:
    """The job spec a simulation runs, as a mapping; SpecError (one line) when the workdir holds anything
    but an earlier simulation's files, or the spec cannot be read or is invalid."""
    root = os.path.abspath(options.workdir)
    if os.path.lexists(root) and not (
        os.path.isdir(root)
        and not os.path.islink(root)
        and (not os.listdir(root) or os.path.exists(os.path.join(root, MARKER)))
    ):
        raise SpecError([f"--workdir {root}: exists and is not an earlier simulation's; name a new directory"])
    try:
        with open(options.config, encoding="utf-8") as f:
            spec = load_yaml(f.read(), source=options.config)
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(
            [f"{options.config}: cannot read the job spec ({getattr(exc, 'strerror', None) or exc})"]
        ) from None
    except SpecError as exc:
        raise SpecError(["; ".join(exc.problems)]) from None
    if not str(spec.get("job_dir", "")).startswith(("/", "gs://", "file://")):
        try:  # a relative job_dir goes under --workdir: check the rest with a stand-in for it
            JobSpec.from_mapping({**spec, "job_dir": "/job"})
        except SpecError as exc:
            raise SpecError([f"{options.config}: " + "; ".join(exc.problems)]) from None
    return spec


@dataclass(frozen=True)
class SimulationRun:
    """A finished `survivor simulate`: its result, the timeline plot (None without matplotlib), the spec's steps."""

    result: SimulationResult
    plot: str | None
    train_steps: int
    cost: pricing.Cost | None = None
    speed: float = 60.0

    def cost_line(self) -> str:
        """One line: the simulated VM time and what it cost on Spot, beside the same time on on-demand."""
        c = self.cost
        if c is None or c.spot_usd is None or c.on_demand_usd is None:
            return "cost: no price for this machine (give --spot-price and --on-demand-price)"
        return (
            f"cost: {c.hours:.3f} h of VM time (x{self.speed:g}) on Spot ${c.spot_usd:.4f} at ${c.spot_rate:.3f}/h; "
            f"the same VM time on on-demand ${c.on_demand_usd:.4f} at ${c.on_demand_rate:.3f}/h ({c.basis})"
        )

    @property
    def succeeded(self) -> bool:
        """DONE, and the agent left the MIG (target size 0)."""
        return bool(self.result.done) and self.result.target_size == 0


# What the process-level simulator can honour: each simulated VM is a real agent and trainer that take
# seconds to boot, so a trace that preempts faster than that restarts VMs for ever and the job never ends.
MAX_PREEMPTIONS_PER_HOUR = 60  # simulated
MAX_SPEED = 3600.0  # simulated seconds per real second: one simulated hour a real second
MAX_PREEMPTIONS_PER_REAL_HOUR = 3600  # --preemptions-per-hour x --speed


def simulate(options: SimulationOptions) -> SimulationRun:
    """Runs a job spec through the simulator in `options.workdir` (an earlier simulation there is
    replaced), and plots its timeline there. SpecError before anything runs when read_spec refuses."""
    rate = options.preemptions_per_hour
    problems = [
        f"{flag} {value}: expected {what}"
        for flag, value, what, ok in (
            (
                "--preemptions-per-hour",
                rate,
                f"more than 0 and at most {MAX_PREEMPTIONS_PER_HOUR}",
                rate is None or 0 < rate <= MAX_PREEMPTIONS_PER_HOUR,
            ),
            ("--stockout-minutes", options.stockout_minutes, "0 or more", 0 <= options.stockout_minutes < float("inf")),
            ("--stockout-chance", options.stockout_chance, "from 0 to 1", 0 <= options.stockout_chance <= 1),
            ("--speed", options.speed, f"more than 0 and at most {MAX_SPEED:g}", 0 < options.speed <= MAX_SPEED),
        )
        if not ok
    ]
    if not problems and rate and rate * options.speed > MAX_PREEMPTIONS_PER_REAL_HOUR:
        problems.append(
            f"--speed {options.speed:g}: expected at most {MAX_PREEMPTIONS_PER_REAL_HOUR / rate:g} with "
            f"--preemptions-per-hour {rate:g} (a preemption at most every real second on average: "
            "a VM boots in seconds)"
        )
    if problems:
        raise SpecError(problems)
    capacity, capacity_zones = None, None
    if options.capacity_traces:
        try:
            capacity = from_hour(load(options.capacity_traces), options.trace_start)
            capacity_zones = zone_map(capacity, options.trace_zones)
        except TraceError as exc:
            raise SpecError([str(exc)]) from None
    spec = read_spec(options)
    root = os.path.abspath(options.workdir)
    if os.path.exists(root):  # an earlier simulation's (marked) or empty: read_spec checked
        shutil.rmtree(root)
    os.makedirs(root)
    open(os.path.join(root, MARKER), "w").close()
    if options.watch_log:
        # what the played watch (a Cloud Run job on Google Cloud) logs goes to its own file, as Cloud
        # Logging would keep it; the timeline says what it did (a move, a switch)
        logs.setup("json", "INFO", stream=open(os.path.join(root, "watch.log"), "a", encoding="utf-8"))
    spec.setdefault("on_finish", "auto")
    gpus = JobSpec.from_mapping({**spec, "job_dir": "/job"}).num_gpus if spec.get("num_gpus") else 0
    if gpus and options.on_event is not None:
        options.on_event(
            Event(
                0.0,
                "note",
                "-",
                f"the spec asks for {gpus} GPUs; a simulated VM has none and "
                "installs no driver: its trainer runs on the CPU",
            )
        )
    emulator = None
    if options.gcs:
        from survivor.local.gcs import StorageEmulator

        emulator = StorageEmulator(log_dir=os.path.dirname(root)).start()
        emulator.create_bucket("survivor-sim")
        spec["job_dir"] = "gs://survivor-sim/job"
    elif not str(spec.get("job_dir", "")).startswith("/"):
        spec["job_dir"] = os.path.join(root, "jobdir")
    trace = None
    if options.preemptions_per_hour:
        mean_gap = options.stockout_minutes / 60
        trace = make_trace(
            options.seed,
            options.timeout * options.speed / 3600,
            options.preemptions_per_hour,
            options.stockout_chance if mean_gap else 0.0,
            mean_gap,
            start_in_stockout=False,
        )
    # the watch (Cloud Scheduler + Cloud Run) looks every simulated minute, `survivor watch --every 1m`,
    # when the spec has something for it to decide (a move, a deadline) and nothing else was asked
    watch = (
        options.watch_every
        if options.watch_every is not None
        else (60.0 if spec.get("placement") or spec.get("deadline") else None)
    )
    # with capacity traces the traces preempt (their outages), not the --preempt-every clock
    sim = Simulator(
        yaml.safe_dump(spec),
        root,
        preempt_every=options.preempt_every if capacity is None else 1e12,
        jitter=options.jitter,
        hard_off_after=options.hard_off_after,
        recreate_delay=options.recreate_delay,
        max_preemptions=options.max_preemptions,
        seed=options.seed,
        trace=trace,
        speed=options.speed,
        on_event=options.on_event,
        capacity=capacity,
        capacity_zones=capacity_zones,
        watch_every=watch / options.speed if watch else None,
        stand_ins=emulator.died if emulator else None,
    )
    try:
        result = sim.run(timeout=options.timeout)
    finally:
        if emulator:
            emulator.stop()
    train_steps = int(spec["train_steps"])
    return SimulationRun(
        result,
        result.plot(os.path.join(root, "timeline.png"), train_steps),
        train_steps,
        price(spec, result.vm_seconds() * options.speed / 3600, options),
        options.speed,
    )


def price(spec: dict, hours: float, options: SimulationOptions) -> pricing.Cost:
    """`hours` of the spec's machine (its `compute:`, survivor's defaults otherwise) at Spot and
    on-demand rates, as `survivor report` prices a job: the options' prices, else the Cloud Billing
    Catalog's (survivor/cloud/catalog.py: today's cache, or read now when `options.online`), else the
    offline table; the Cost's basis says which."""
    from survivor.cloud.catalog import Machine, hourly_prices
    from survivor.cloud.template import MachineOptions

    machine = MachineOptions.from_spec(JobSpec.from_mapping(spec))
    region = options.region or region_of_zone(machine.zone or ZONE)  # where the simulated VMs run
    prices = hourly_prices(
        Machine(machine.machine_type, machine.gpu_type, machine.gpu_count or 0),
        region,
        online=options.online,
        spot_price=options.spot_price,
        on_demand_price=options.on_demand_price,
    )

    def usd(rate: float | None) -> float | None:
        return None if rate is None else round(hours * rate, 4)

    return pricing.Cost(hours, usd(prices.spot), usd(prices.on_demand), prices.spot, prices.on_demand, prices.basis)
