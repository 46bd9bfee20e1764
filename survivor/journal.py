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
from dataclasses import asdict, dataclass, field
from typing import Any

from survivor.storage import JobStorage, PreconditionFailed

ATTEMPTS = "survivor/attempts/"
DONE = "survivor/DONE"
FAILED = "survivor/FAILED"

#: How an attempt ended. `preempted` and `stopped` came with a notice; `finished` wrote DONE;
#: `failed` means the trainer or setup failed; `gave-up` wrote FAILED.
OUTCOMES = ("finished", "preempted", "stopped", "failed", "gave-up", "superseded")


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class Attempt:
    """One start of the agent on this job."""

    number: int
    instance: str
    started: str
    restored_step: int | None = None
    ended: str | None = None
    outcome: str | None = None
    reason: str = ""
    end_step: int | None = None  # the newest committed step when the attempt ended
    reached_step: int | None = None  # the furthest step the trainer reported
    steps_lost: int | None = None
    notice: str | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{ATTEMPTS}{self.number:06d}.json"

    @property
    def made_progress(self) -> bool:
        return (self.end_step or 0) > (self.restored_step or 0)

    @classmethod
    def from_json(cls, data: bytes) -> "Attempt":
        raw = json.loads(data)
        known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        return cls(**known)


@dataclass
class JobState:
    """Everything the journal says about a job."""

    done: dict[str, Any] | None
    failed: dict[str, Any] | None
    attempts: list[Attempt]

    @property
    def preemptions(self) -> int:
        return sum(1 for a in self.attempts if a.outcome in ("preempted", "stopped"))

    @property
    def steps_lost(self) -> int:
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
        if attempt.outcome == "failed":
            streak += 1
    return streak


def should_give_up(attempts: list[Attempt], limit: int) -> bool:
    """True once `limit` attempts in a row failed without progress: stop restarting, write FAILED."""
    return failed_streak(attempts) >= limit


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
        blob = self.storage.read(name)
        if blob is None:
            return None
        try:
            value = json.loads(blob.data)
        except ValueError:
            value = {"raw": blob.data.decode(errors="replace")}
        return value if isinstance(value, dict) else {"value": value}

    def done(self) -> dict[str, Any] | None:
        """The DONE marker's contents, or None."""
        return self._marker(DONE)

    def failed(self) -> dict[str, Any] | None:
        """The FAILED marker's contents, or None."""
        return self._marker(FAILED)

    def attempts(self) -> list[Attempt]:
        """Every recorded attempt, oldest first (unreadable records are skipped)."""
        out = []
        for info in self.storage.list(ATTEMPTS):
            blob = self.storage.read(info.name)
            if blob is None:
                continue
            try:
                out.append(Attempt.from_json(blob.data))
            except (ValueError, TypeError):
                continue
        return sorted(out, key=lambda a: a.number)

    def state(self) -> JobState:
        return JobState(self.done(), self.failed(), self.attempts())

    def begin(self, instance: str, restored_step: int | None = None) -> Attempt:
        """Records a new attempt with the next free number (a conditional create, so never a clash)."""
        existing = self.attempts()
        number = (existing[-1].number if existing else 0) + 1
        while True:
            attempt = Attempt(number=number, instance=instance, started=now(), restored_step=restored_step)
            try:
                self.storage.write(attempt.name, _dump(asdict(attempt)), if_generation_match=0)
                return attempt
            except PreconditionFailed:
                number += 1

    def update(self, attempt: Attempt) -> None:
        """Rewrites an attempt's record (after restore, or at its end)."""
        self.storage.write(attempt.name, _dump(asdict(attempt)))

    def end(self, attempt: Attempt, outcome: str, **fields: Any) -> None:
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
