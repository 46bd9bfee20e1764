"""The notice budget: how the seconds between a preemption notice and the hard off are spent.

    >>> budget = NoticeBudget(grace_seconds=25.0)
    >>> budget.trainer_seconds, budget.commit_seconds
    (15.0, 10.0)
    >>> budget.trainer_deadline(noticed=100.0)            # SIGKILL the trainer then at the latest
    115.0
    >>> budget.commit_deadline(noticed=100.0)             # a commit that cannot end by then goes to the state disk
    121.0

One object for what was spread over the spec (`grace_seconds`), the retry module (the trainer's share)
and the boot (the deadlines it computed): the trainer gets `TRAINER_SHARE` of `grace_seconds` to save
and exit, the final commit the rest. `grace_seconds` comes from the spec (25 s by default: Spot's 30 s
from soft off to hard off, https://cloud.google.com/compute/docs/instances/spot#preemption-process,
less a margin for the agent's own exit); `tests/test_retry.py` holds the final commit's writes, failing
at every step, inside the commit's share.
"""

from __future__ import annotations

from dataclasses import dataclass

from survivor import retry

#: The share of `grace_seconds` the trainer gets to save after a notice; the rest is the final commit's.
TRAINER_SHARE = 0.6


@dataclass(frozen=True)
class NoticeBudget:
    """The grace seconds after a notice, split between the trainer's save and the final commit.

    Args:
        grace_seconds: the spec's `grace_seconds`, the whole budget from the notice.
        trainer_share: the trainer's part of it (`TRAINER_SHARE`).
    """

    grace_seconds: float
    trainer_share: float = TRAINER_SHARE

    @property
    def trainer_seconds(self) -> float:
        """Seconds the trainer has to save and exit after SIGTERM before it is SIGKILLed."""
        return self.grace_seconds * self.trainer_share

    @property
    def commit_seconds(self) -> float:
        """Seconds left for the final commit once the trainer's share is spent."""
        return self.grace_seconds - self.trainer_seconds

    def trainer_deadline(self, noticed: float) -> float:
        """When (monotonic) the trainer is SIGKILLed at the latest, for a notice at `noticed`."""
        return noticed + self.trainer_seconds

    def commit_deadline(self, noticed: float) -> float:
        """When (monotonic) the commit after the notice must be done: the budget's end less one
        write's worst case (the manifest). A commit that cannot end by then goes to the state disk."""
        return noticed + self.grace_seconds - retry.STORAGE_WRITE.worst_case()


def final_commit_worst_case() -> float:
    """The final commit after a notice, failing at every step: the uploads and the lease's fence
    run side by side (`CheckpointStore.commit`), then the manifest write."""
    return max(retry.STORAGE_UPLOAD.worst_case(), retry.STORAGE_WRITE.worst_case()) + retry.STORAGE_WRITE.worst_case()


def final_commit_writes_worst_case() -> float:
    """The final commit's writes alone, failing at every step: the lease's fence, then the manifest."""
    return 2 * retry.STORAGE_WRITE.worst_case()
