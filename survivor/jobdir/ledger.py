"""The goodput ledger: where a job's wall time went, from what its attempt records measured.

    >>> ledger = build_ledger(Journal(storage).attempts(), now=now, done_at=None)
    >>> ledger.goodput                       # productive training time over wall time
    0.81
    >>> ledger.seconds_by_cause()            # {"capacity": 420.0, "vm_boot": 95.2, ...}
    >>> sum(s.seconds for s in ledger.spans) == ledger.wall_seconds
    True

Goodput is the share of a job's wall time spent on productive training; badput is the rest, split by
cause. The terms are those of Google's ml-goodput-measurement library (`BadputType` in
https://github.com/AI-Hypercomputer/ml-goodput-measurement, ml_goodput_measurement/src/goodput_utils.py
and its README's "Badput Breakdown Details"); each of survivor's causes names the bucket it
corresponds to (`Cause.google_term` in `TABLE`). The library measures one program's run on accelerators; survivor
measures a job across Spot VMs, so two causes are survivor's own refinements of Google's buckets:
waiting for capacity (from a preemption, or the first request, to the next VM's kernel boot) and
failed attempts (a boot that ended without progress for a reason other than a notice).

The ledger is a timeline of contiguous spans, so its sums equal the wall time by construction:

- before each attempt: `capacity`, from the previous attempt's end (or the job's start) to the
  guest's kernel boot (`Attempt.booted`, read by the agent from /proc/uptime);
- `vm_boot`: from the kernel boot to the agent's attempt record (startup script, installs, the
  agent's own start, reading the spec, taking the lease);
- `restore`, `trainer_start` (launching the trainer and its time to the first new step:
  `setup` + `first_step` timings), `productive`, `rework` (the tail of the training that was never
  committed: `steps_lost` at the attempt's measured seconds per step), `checkpoint` (the save after
  a notice and the final commit: the stalls the agent waits on), `other` (the rest of the attempt:
  journal writes, tidying);
- `failed`: the whole of an attempt that made no progress and did not end on a notice, or that was
  killed without recording its end (until the next boot).

Each boot also has a provisioning mode, Spot or on-demand, from the job's switch records
(survivor/jobdir/switches.py, written when the deadline policy switches the group's template): a VM
keeps the provisioning model it was created with, and a switch replaces the group's VM
(`recreateInstances`), so a boot runs in the mode of the last switch before its kernel boot.
`Ledger.vm_seconds_by_mode()` is what `survivor report` prices, each mode at its own price.

Nothing is estimated where it is measured: every duration is an attempt's own timing or the
difference of two recorded times; only `rework` is derived (measured steps times the measured
step time). A running attempt's time since its restore counts as productive until its record says
otherwise; `Ledger.running` says so.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Literal, Sequence

from survivor import log as logs
from survivor.jobdir.fields import TIME_RANGE
from survivor.jobdir.journal import NOTICED, Attempt, Timing
from survivor.jobdir.records import Records, record_time
from survivor.jobdir.switches import MODES, SPOT, Mode, Switch, parse_time

#: The causes' names, in the order a timeline shows them (`TABLE`): a span's cause is one of them.
CauseName = Literal[
    "capacity", "vm_boot", "restore", "trainer_start", "productive", "rework", "checkpoint", "failed", "other"
]


@dataclass(frozen=True)
class Cause:
    """One cause of a job's wall time: its name in records, what people read, its bucket in
    ml-goodput-measurement's `BadputType` (None: goodput), its colour in the report's timeline, and
    whether a job on an on-demand VM without disruptions still spends it once, at its start
    (`once_per_job`: the report counts the first attempt's as no cost of disruptions)."""

    name: CauseName
    label: str
    google_term: str | None
    colour: str
    once_per_job: bool = False


#: Every cause, in the order a timeline shows them; `productive` is goodput, the rest badput.
#: The one table of causes: the report's tables, JSON and timeline all read it.
TABLE = (
    Cause("capacity", "waiting for capacity", "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION", "#d9d9d9"),
    # accelerator/VM initialization: here the VM's boot and install
    Cause("vm_boot", "VM boot and install", "TPU_INITIALIZATION", "#9ecae1", once_per_job=True),
    Cause("restore", "restore", "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME", "#6baed6", once_per_job=True),
    Cause("trainer_start", "trainer start", "PROGRAM_STARTUP", "#4292c6", once_per_job=True),
    Cause("productive", "productive training", None, "#31a354"),
    Cause("rework", "work re-run after a disruption", "WASTED_PROGRESS_FROM_DISRUPTION", "#e6550d"),
    Cause("checkpoint", "checkpoint stalls", "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME", "#fdae6b"),
    Cause("failed", "failed attempts", "OTHER", "#de2d26"),
    Cause("other", "agent overhead", "OTHER", "#bcbddc"),
)
#: A cause by its name.
CAUSE = {cause.name: cause for cause in TABLE}
#: The causes' names, in the table's order.
CAUSES: tuple[CauseName, ...] = tuple(cause.name for cause in TABLE)

#: How an attempt's reason begins when its trainer did not save on the notice (survivor/agent/ending.py
#: writes it): its checkpoint stall was the agent waiting for a save that never came.
UNSAVED = "the trainer did not save on the notice"

#: No record survivor wrote is dated before this: an earlier time is a VM clock that was never set
#: (the records' reader refuses one: survivor/jobdir/fields.py).
EARLIEST = TIME_RANGE[0]
#: How far past "now" a record's time may be (clocks of different VMs disagree); later is a bad clock.
CLOCK_SLACK = _dt.timedelta(days=1)

log = logs.get("ledger")


@dataclass(frozen=True)
class Span:
    """One stretch of the job's wall time with its cause; `attempt` is the boot it belongs to (0: none)."""

    start: _dt.datetime
    end: _dt.datetime
    cause: CauseName
    attempt: int = 0

    @property
    def seconds(self) -> float:
        """The span's length in seconds."""
        return (self.end - self.start).total_seconds()


@dataclass
class Ledger:
    """A job's wall time as contiguous spans by cause, and the boots that billed VM time."""

    start: _dt.datetime
    end: _dt.datetime
    spans: list[Span] = field(default_factory=list)
    #: (attempt number, VM running from, to, outcome): what Compute Engine bills, boot to end.
    boots: list[tuple[int, _dt.datetime, _dt.datetime, str]] = field(default_factory=list)
    #: Steps committed beyond the step each attempt restored, summed: the job's measured progress.
    productive_steps: int = 0
    running: bool = False
    #: Attempt number -> the provisioning mode its VM ran in ("spot", "on-demand" or "flex-start").
    modes: dict[int, Mode] = field(default_factory=dict)
    #: The switches between the modes, oldest first.
    switches: list[Switch] = field(default_factory=list)
    #: The attempts whose trainer did not save on the notice (`UNSAVED`), by number.
    unsaved: list[int] = field(default_factory=list)

    @property
    def wall_seconds(self) -> float:
        """From the job's start to its end (or now)."""
        return (self.end - self.start).total_seconds()

    def seconds_by_cause(self) -> dict[CauseName, float]:
        """Seconds per cause, every cause present (0.0 when it never happened)."""
        out = dict.fromkeys(CAUSES, 0.0)
        for span in self.spans:
            out[span.cause] += span.seconds
        return out

    @property
    def productive_seconds(self) -> float:
        """Productive training time in seconds."""
        return self.seconds_by_cause()["productive"]

    @property
    def goodput(self) -> float | None:
        """Productive time over wall time; None for a job with no wall time yet."""
        return self.productive_seconds / self.wall_seconds if self.wall_seconds > 0 else None

    @property
    def vm_seconds(self) -> float:
        """The seconds VMs ran (what Compute Engine bills): every boot's span."""
        return sum((end - start).total_seconds() for _, start, end, _ in self.boots)

    def vm_seconds_by_mode(self) -> dict[Mode, float]:
        """The seconds VMs ran in each provisioning mode, every mode present (0.0 when never)."""
        out = dict.fromkeys(MODES, 0.0)
        for number, start, end, _ in self.boots:
            out[self.modes.get(number, SPOT)] += (end - start).total_seconds()
        return out

    @property
    def mode(self) -> Mode:
        """The mode the job runs in now: the last switch's, or Spot before any."""
        return self.switches[-1].to_mode if self.switches else SPOT

    @property
    def seconds_per_step(self) -> float | None:
        """Measured productive seconds per committed step; None before any progress."""
        return self.productive_seconds / self.productive_steps if self.productive_steps else None


def mode_at(switches: list[Switch], when: _dt.datetime) -> Mode:
    """Pure: the group's provisioning mode at `when`: the last switch's before it, or the first
    switch's `from_mode` (Spot when it does not say) before any."""
    mode: Mode = (switches[0].from_mode if switches else "") or SPOT
    for switch in switches:
        at = parse_time(switch.time)
        if at is not None and at <= when:
            mode = switch.to_mode
    return mode


def implausible(attempt: Attempt, latest: _dt.datetime) -> str | None:
    """Pure: why an attempt's times cannot be laid on a timeline (a time before 2000 or after
    `latest`, an end before its start), or None when they can."""
    times = {key: parse_time(getattr(attempt, key)) for key in ("booted", "started", "ended")}
    for key, value in times.items():
        # a time the one reader refuses (year 9999, not text) is none the job can have run either
        if (value is None and getattr(attempt, key)) or (value is not None and not EARLIEST <= value <= latest):
            return f"{key} {getattr(attempt, key)} is not a time the job can have run"
    if times["ended"] is not None and times["started"] is not None and times["ended"] < times["started"]:
        return f"it ended ({attempt.ended}) before it started ({attempt.started})"
    return None


def plausible(attempts: list[Attempt], latest: _dt.datetime) -> list[Attempt]:
    """The attempts whose times make sense, each other one skipped with a warning naming it, like an
    unreadable record: one bad clock must not turn the whole report into nonsense."""
    out = []
    for attempt in attempts:
        if not attempt.started:  # still booting: nothing to lay on the timeline yet
            continue
        reason = implausible(attempt, latest)
        if reason:
            log.warning(f"ignoring the attempt record {attempt.name}: {reason}", record=attempt.name, reason=reason)
        else:
            out.append(attempt)
    return out


def build_ledger(
    attempts: list[Attempt],
    *,
    now: _dt.datetime,
    done_at: _dt.datetime | None = None,
    created: _dt.datetime | None = None,
    switches: Sequence[Switch] = (),
    records: Records | None = None,
) -> Ledger:
    """Pure: the ledger of a job from its attempt records (and `records`, whose kinds are read the
    first time they are asked for).

    Args:
        attempts: the journal's attempts (any order).
        now: the time "so far" means, for a job still running or waiting.
        done_at: when DONE (or FAILED) was written: the job's end. None: it has not ended, so the
            time since the last attempt ended is still waiting for capacity (unless an operator
            stopped it, which is nobody's badput: the ledger ends there).
        created: when the job first asked for a VM (the MIG's creation); None: its first boot.
            A group made again after the job's first boot starts nothing later than that boot.
        switches: the job's switches between Spot and on-demand (any order), for each boot's mode.
        records: the job dir's other records, by kind (`Records.of`), for a cause a kind of them
            measures (`survivor/jobdir/status.py` `read_job` passes the job dir's; None: none).

    An attempt whose times are impossible (`implausible`) is skipped with a warning.
    """
    latest = max(now, done_at or now) + CLOCK_SLACK
    ordered = sorted(plausible(attempts, latest), key=lambda a: a.number)
    first = ordered[0] if ordered else None
    first_boot = parse_time(first.booted) or parse_time(first.started) if first else None
    start = min(t for t in (created, first_boot) if t is not None) if created or first_boot else now
    ordered_switches = sorted(switches, key=lambda s: parse_time(s.time) or start)
    ledger = Ledger(start=start, end=start, switches=ordered_switches)
    cursor = start
    spans: list[Span] = []

    def add(until: _dt.datetime, cause: CauseName, attempt: int) -> None:
        nonlocal cursor
        until = max(until, cursor)  # clocks of different VMs may disagree: never run backwards
        if until > cursor:
            spans.append(Span(cursor, until, cause, attempt))
        cursor = until

    for index, attempt in enumerate(ordered):
        started = record_time(attempt.started)  # `plausible` kept only attempts whose start parses
        booted = parse_time(attempt.booted) or started
        add(booted, "capacity", 0)
        vm_from = cursor
        ledger.modes[attempt.number] = mode_at(ordered_switches, booted)
        add(started, "vm_boot", attempt.number)
        following = ordered[index + 1] if index + 1 < len(ordered) else None
        ended = parse_time(attempt.ended)
        if ended is None and following is None and done_at is None:  # still running
            ledger.running = True
            _attempt_spans(attempt, now, add, running=True)
            ended = now
        elif ended is None:  # killed without a record of its end: lost until the next boot
            ended = parse_time(following.booted) or parse_time(following.started) if following else done_at
            add(ended or cursor, "failed", attempt.number)
        elif attempt.made_progress or attempt.outcome in NOTICED or attempt.outcome == "finished":
            _attempt_spans(attempt, ended, add, running=False)
        else:
            add(ended, "failed", attempt.number)
        if (attempt.reason or "").startswith(UNSAVED):
            ledger.unsaved.append(attempt.number)
        if attempt.made_progress:
            ledger.productive_steps += (attempt.end_step or 0) - (attempt.restored_step or 0)
        ledger.boots.append(
            (
                attempt.number,
                vm_from,
                max(cursor, vm_from),
                attempt.outcome or ("running" if ledger.running else "killed"),
            )
        )

    last = ordered[-1] if ordered else None
    if done_at is not None:
        add(done_at, "other", last.number if last else 0)  # DONE written after the record's end
    elif last is not None and not ledger.running and last.outcome != "stopped":
        add(now, "capacity", 0)  # preempted (or failed) and no VM yet
    ledger.spans = spans
    ledger.end = cursor
    return ledger


def _attempt_spans(attempt: Attempt, ended: _dt.datetime, add, *, running: bool) -> None:
    """Lays an attempt's measured phases end to end from its start to `ended`, each cut short
    where the phases add up to more than the recorded span (then the last ones shrink)."""
    t = attempt.timings
    number = attempt.number
    cursor = record_time(attempt.started)  # `plausible` kept only attempts whose start parses

    def phase(seconds: float, cause: CauseName) -> None:
        nonlocal cursor
        # compared before adding: a huge timing must stop at the attempt's end, not overflow the date
        left = (ended - cursor).total_seconds()
        cursor = ended if not seconds < left else cursor + _dt.timedelta(seconds=max(0.0, seconds))
        add(cursor, cause, number)

    phase(t.get(Timing.RESTORE, 0.0), "restore")
    phase(t.get(Timing.SETUP, 0.0) + t.get(Timing.FIRST_STEP, 0.0), "trainer_start")
    if running:  # the record says nothing more until the attempt ends
        add(ended, "productive", number)
        return
    train = max(0.0, t.get(Timing.TRAIN, 0.0) - t.get(Timing.FIRST_STEP, 0.0))
    trained_steps = (attempt.reached_step or 0) - (attempt.restored_step or 0)
    lost = attempt.steps_lost or 0
    rework = train * min(1.0, lost / trained_steps) if trained_steps > 0 and lost > 0 else 0.0
    phase(train - rework, "productive")
    phase(rework, "rework")
    phase(t.get(Timing.TRAINER_SAVE, 0.0) + t.get(Timing.FINAL_COMMIT, 0.0), "checkpoint")
    add(ended, "other", number)
