"""The job's journal in its job dir: one record per attempt, and the DONE / FAILED markers.

    >>> journal = Journal(open_storage("gs://bucket/run-1"))
    >>> attempt = journal.begin(instance="cifar10-managed-x1z2", restored_step=1200)
    >>> journal.end(attempt, outcome="preempted", end_step=1450, reached_step=1450)
    >>> journal.state()                   # what `survivor status` shows
    JobState(done=None, failed=None, attempts=[...])

Layout: `survivor/attempts/<n>.json` (n counts up from 1), `survivor/DONE`, `survivor/FAILED`.
An attempt is written when an agent starts and rewritten when it ends; an attempt that never ends
was killed (SIGKILL, a hard power-off). Whether to give up on a crash loop is a pure function of the
attempts (`failed_streak`), so it is tested without any storage.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from survivor import log as logs
from survivor.jobdir.storage import JobStorage, PreconditionFailed, parse_json

ATTEMPTS = "survivor/attempts/"
DONE = "survivor/DONE"
FAILED = "survivor/FAILED"
#: The largest attempt record read (one survivor writes is under 2 KB).
MAX_RECORD_BYTES = 1 << 20

log = logs.get("journal")

#: How an attempt ended. `preempted` and `stopped` came with a notice; `finished` wrote DONE;
#: `failed` means the trainer or setup failed (the boot disk too: it is the same on the next boot);
#: `gave-up` wrote FAILED; `interrupted` means the job dir or the network failed, which the next
#: boot may not meet (it neither counts toward giving up nor ends a streak).
Outcome = Literal["finished", "preempted", "stopped", "failed", "gave-up", "superseded", "interrupted"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
#: The outcomes that came with a notice (a preemption, a stop, the budget): what "steps lost per
#: preemption" counts.
NOTICED: tuple[Outcome, ...] = ("preempted", "stopped")

#: The highest attempt number read: a record claiming more is not one survivor wrote.
MAX_ATTEMPT = 10**9
#: The highest step (or count of steps) read: a job spec's largest `train_steps` (survivor/spec/fields.py);
#: the agent never records a step the trainer reported beyond it (trainers/contract.py).
MAX_STEP = 10**12
#: The longest phase read (about 31 years): an attempt's timings are seconds of one VM's life.
MAX_SECONDS = 10**9
#: The record's step fields: each a count of training steps, never negative.
STEP_FIELDS = ("restored_step", "end_step", "reached_step", "steps_lost")


class Timing:
    """The names of an attempt's timings (`Attempt.timings`, seconds each): the agent measures them
    (survivor/agent/boot.py) and the goodput ledger lays them out as causes (survivor/jobdir/ledger.py)."""

    SPEC = "spec"  # reading and validating the job's spec
    STATE_DISK = "state_disk"  # committing a snapshot the state disk kept from the last boot
    RESTORE = "restore"  # restoring the newest committed snapshot
    SETUP = "setup"  # the trainer's launch, until the agent watches it train
    FIRST_STEP = "first_step"  # from the launch to the first step beyond the one restored
    TRAIN = "train"  # the training, the first step's wait included
    TRAINER_SAVE = "trainer_save"  # from a notice to the trainer's save (or its exit)
    FINAL_COMMIT = "final_commit"  # the commit after the trainer exited
    NOTICE_TO_SAFE = "notice_to_safe"  # from a notice to the commit that makes the VM safe to go


def now() -> str:
    """The current UTC time as ISO 8601 with milliseconds, the form every record carries."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class Attempt:
    """One start of the agent on this job."""

    number: int
    instance: str
    started: str
    restored_step: int | None = None
    ended: str | None = None
    outcome: Outcome | None = None
    reason: str = ""
    end_step: int | None = None  # the newest committed step when the attempt ended
    reached_step: int | None = None  # the furthest step the trainer reported
    steps_lost: int | None = None
    notice: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    #: The manifest restored; "" when nothing committed verified (a start from scratch); None
    #: until the restore is over (or in a record written before survivor kept it).
    restored_from: str | None = None
    #: When the guest's kernel booted (ISO 8601 UTC), read by the agent from the guest at its start:
    #: the goodput ledger's end of waiting for capacity and start of the VM's boot. None in a record
    #: written before survivor kept it.
    booted: str | None = None
    #: The zone of the attempt's VM: where a preemption happened, which placement's move counts
    #: per region (survivor/policy/placement.py). None in a record written before survivor kept it.
    zone: str | None = None

    @property
    def name(self) -> str:
        """The record's object name: `survivor/attempts/NNNNNN.json`."""
        return f"{ATTEMPTS}{self.number:06d}.json"

    @property
    def made_progress(self) -> bool:
        """True when the attempt committed a step beyond the one it restored."""
        return (self.end_step or 0) > (self.restored_step or 0)

    @classmethod
    def from_json(cls, data: bytes) -> "Attempt":
        """Parses a record into the exact schema; ValueError for anything else (unknown keys are
        ignored). A record is the agent's own note, but the job dir is shared: trust no field. Steps
        and counts are 0 to MAX_STEP (no more lost than reached), timings 0 to MAX_SECONDS: a
        negative or absurd one would print as such in `status` and skew the ledger and the deadline."""
        raw = parse_json(data)
        if not isinstance(raw, dict):
            raise ValueError(f"expected a JSON object, got {type(raw).__name__}")
        for key, kind in _FIELD_TYPES.items():
            if key in raw and not _has_type(raw[key], kind):
                raise ValueError(f"{key}: {_show(raw[key])} is not {kind}")
        for key in ("number", "instance", "started"):
            if key not in raw:
                raise ValueError(f"{key} is missing")
        if not 1 <= raw["number"] <= MAX_ATTEMPT:
            raise ValueError(f"number: {raw['number']} is out of range")
        if raw.get("outcome") is not None and raw["outcome"] not in OUTCOMES:
            raise ValueError(f"outcome: {_show(raw['outcome'])} is not one of {', '.join(OUTCOMES)}")
        for key in STEP_FIELDS:
            if raw.get(key) is not None and not 0 <= raw[key] <= MAX_STEP:
                raise ValueError(f"{key}: {raw[key]} is out of range (0 to {MAX_STEP})")
        if raw.get("steps_lost") is not None and raw["steps_lost"] > (raw.get("reached_step") or 0):
            raise ValueError(
                f"steps_lost: {raw['steps_lost']} is more than the {raw.get('reached_step') or 0} steps reached"
            )
        timings = raw.get("timings", {})
        if not all(isinstance(k, str) and _has_type(v, "a number") for k, v in timings.items()):
            raise ValueError("timings: expected names and seconds")
        if not all(0 <= v <= MAX_SECONDS for v in timings.values()):
            raise ValueError(f"timings: seconds out of range (0 to {MAX_SECONDS})")
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})


#: Each record field's JSON type (optional ones may also be null).
_FIELD_TYPES = {
    "number": "a whole number",
    "instance": "a string",
    "started": "a string",
    "restored_step": "a whole number or null",
    "ended": "a string or null",
    "outcome": "a string or null",
    "reason": "a string",
    "end_step": "a whole number or null",
    "reached_step": "a whole number or null",
    "steps_lost": "a whole number or null",
    "notice": "a string or null",
    "timings": "an object",
    "restored_from": "a string or null",
    "booted": "a string or null",
    "zone": "a string or null",
}


def _has_type(value: Any, kind: str) -> bool:
    if value is None:
        return kind.endswith("or null")
    if kind.startswith("a whole number"):
        return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= 1 << 62
    if kind == "a number":
        return (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and abs(value) <= 1 << 62
        )
    if kind.startswith("a string"):
        return isinstance(value, str)
    return isinstance(value, dict)


def _show(value: Any) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class JobState:
    """Everything the journal says about a job."""

    done: dict[str, Any] | None
    failed: dict[str, Any] | None
    attempts: list[Attempt]

    @property
    def preemptions(self) -> int:
        """How many attempts ended on a notice (preempted or stopped)."""
        return sum(1 for a in self.attempts if a.outcome in NOTICED)

    @property
    def steps_lost(self) -> int:
        """The steps trained but never committed, over every attempt."""
        return sum(a.steps_lost or 0 for a in self.attempts)


def failed_streak(attempts: list[Attempt]) -> int:
    """How many of the latest attempts failed in a row without progress.

    Walks back from the newest ended attempt: a failure without progress counts; one that made
    progress (its committed step moved, or the next attempt restored further) ends the streak;
    attempts ended by a notice or killed without a record neither count nor end it, because they
    say nothing about whether the job can run.
    """
    ordered = sorted(attempts, key=lambda a: a.number)
    streak = 0
    for index in range(len(ordered) - 1, -1, -1):
        attempt = ordered[index]
        following = ordered[index + 1] if index + 1 < len(ordered) else None
        progressed = attempt.made_progress or (
            following is not None
            and following.restored_step is not None
            and following.restored_step > (attempt.restored_step or 0)
        )
        if progressed:
            break
        if attempt.outcome == "failed" and not (following is not None and fell_back(attempt, following)):
            streak += 1
    return streak


#: The reason decide_ending gives a trainer that exited with an error (survivor.agent.ending).
TRAINER_FAILED = "the trainer exited with code"


def fell_back(failed: Attempt, following: Attempt) -> bool:
    """Pure: did `following` pass over the snapshot `failed`'s trainer failed on, for an older one?
    That failure counted against the snapshot, not toward FAILED."""
    return (
        failed.outcome == "failed"
        and failed.reason.startswith(TRAINER_FAILED)
        and bool(failed.restored_from)
        and following.restored_from is not None
        and following.restored_from != failed.restored_from
        and (following.restored_step or 0) <= (failed.restored_step or 0)
    )


def snapshot_to_pass_over(attempts: list[Attempt]) -> str | None:
    """Pure: the snapshot the next restore passes over for the one before it, or None.

    When the newest ended attempt's trainer failed (exited by itself with an error code, not killed
    by a signal) before training a step past the snapshot it restored, that snapshot may be the trainer's trouble (a trainer that changed its
    files after they were committed), so the next start tries the snapshot before
    it. Once per streak of failures: if the streak fell back already, the trouble is the trainer's
    and the newest snapshot is restored again (the failures then count toward FAILED)."""
    ended = [a for a in sorted(attempts, key=lambda a: a.number) if a.ended is not None]
    if not ended:
        return None
    last = ended[-1]
    if (
        last.outcome != "failed"
        or last.made_progress
        or not last.reason.startswith(TRAINER_FAILED)
        or not last.restored_from
    ):
        return None
    code = last.reason[len(TRAINER_FAILED) :].split(":", 1)[0].strip()
    if not code.isdigit() or int(code) == 0:  # killed by a signal (a SIGKILL, the OOM killer): not the snapshot's doing
        return None
    if last.reached_step is not None and last.restored_step is not None and last.reached_step > last.restored_step:
        return None  # it trained past what it restored: the snapshot loaded
    for earlier, following in zip(ended[-2::-1], ended[:0:-1]):  # back through the streak, pairwise
        if earlier.made_progress or earlier.outcome != "failed":
            break
        if fell_back(earlier, following):
            return None
    return last.restored_from


def should_give_up(attempts: list[Attempt], limit: int) -> bool:
    """True once `limit` attempts in a row failed without progress: stop restarting, write FAILED."""
    return failed_streak(attempts) >= limit


def restored_text(attempt: Attempt) -> str:
    """Pure: where an attempt started, for people: its step, "fresh start", or why neither."""
    if attempt.restored_step is not None:
        return str(attempt.restored_step)
    if attempt.restored_from == "":
        return "fresh start"
    if attempt.ended is None:
        return "restoring"
    if attempt.outcome in ("failed", "interrupted", "gave-up", "superseded"):
        return "not restored"  # it ended before its restore did
    return "fresh start"  # a record from before survivor kept `restored_from`, of an attempt that trained


def steps_lost(reached_step: int | None, committed_step: int | None) -> int | None:
    """Work lost by an attempt: what the trainer reached beyond the last committed step."""
    if reached_step is None:
        return None
    return max(0, reached_step - (committed_step or 0))


class Journal:
    """Reads and writes the job's attempts and markers in its job dir."""

    def __init__(self, storage: JobStorage):
        self.storage = storage

    def _marker(self, name: str) -> dict[str, Any] | None:
        """A marker's contents. Its presence is what counts; contents that are not a plain JSON
        object (or are nested deeper than any marker survivor writes) are kept as text."""
        blob = self.storage.read(name)
        if blob is None:
            return None
        try:
            value = parse_json(blob.data)
            json.dumps(value)  # what `status --json` will do with it
        except (ValueError, RecursionError):
            return {"raw": blob.data[:2000].decode(errors="replace")}
        return value if isinstance(value, dict) else {"value": value}

    def done(self) -> dict[str, Any] | None:
        """The DONE marker's contents, or None."""
        return self._marker(DONE)

    def failed(self) -> dict[str, Any] | None:
        """The FAILED marker's contents, or None."""
        return self._marker(FAILED)

    def attempts(self, newest: int | None = None) -> list[Attempt]:
        """Every recorded attempt (or the `newest` few), oldest first. A record that does not parse,
        or whose number is not its name's, is treated as absent, with a warning naming it: never fatal."""
        out = []
        listed = sorted(self.storage.list(ATTEMPTS), key=lambda info: info.name)  # zero-padded numbers
        for info in listed[-newest:] if newest else listed:
            if info.size > MAX_RECORD_BYTES:
                reason = f"{info.size} bytes, more than any record"
                log.warning(
                    f"ignoring an unreadable attempt record {info.name}: {reason}", record=info.name, reason=reason
                )
                continue
            blob = self.storage.read(info.name)
            if blob is None:
                continue
            try:
                attempt = Attempt.from_json(blob.data)
                if attempt.name != info.name:
                    raise ValueError(f"it says attempt {attempt.number}, which is not its name")
            except ValueError as exc:
                log.warning(
                    f"ignoring an unreadable attempt record {info.name}: {exc}", record=info.name, reason=str(exc)
                )
                continue
            out.append(attempt)
        return sorted(out, key=lambda a: a.number)

    def state(self) -> JobState:
        """DONE, FAILED and every attempt, read in one go."""
        return JobState(self.done(), self.failed(), self.attempts())

    def begin(
        self, instance: str, restored_step: int | None = None, booted: str | None = None, zone: str | None = None
    ) -> Attempt:
        """Records a new attempt with the next free number (a conditional create, so never a clash;
        an unreadable record still holds its number); `booted`: when the guest's kernel booted;
        `zone`: the VM's."""
        existing = self.attempts()
        number = (existing[-1].number if existing else 0) + 1
        while True:
            attempt = Attempt(
                number=number, instance=instance, started=now(), restored_step=restored_step, booted=booted, zone=zone
            )
            try:
                self.storage.write(attempt.name, _dump(asdict(attempt)), if_generation_match=0)
                return attempt
            except PreconditionFailed:
                number += 1

    def update(self, attempt: Attempt) -> None:
        """Rewrites an attempt's record (after restore, or at its end)."""
        self.storage.write(attempt.name, _dump(asdict(attempt)))

    def end(self, attempt: Attempt, outcome: Outcome, **fields: Any) -> None:
        """Closes an attempt with its outcome and figures."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        attempt.outcome = outcome
        attempt.ended = now()
        for key, value in fields.items():
            setattr(attempt, key, value)
        self.update(attempt)

    def mark_done(self, summary: dict[str, Any]) -> bool:
        """Writes DONE once. Returns False if it already existed (another writer finished first)."""
        try:
            self.storage.write(DONE, _dump({"time": now(), **summary}), if_generation_match=0)
            return True
        except PreconditionFailed:
            return False

    def mark_failed(self, reason: str, **summary: Any) -> None:
        """Writes FAILED with the reason; the job is not retried until an operator removes it."""
        self.storage.write(FAILED, _dump({"time": now(), "reason": reason, **summary}))


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, indent=1, default=str).encode()
