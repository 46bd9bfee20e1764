"""A maintenance notice's save: a fresh checkpoint committed while training goes on.

    >>> save = MaintenanceSave(notice, committed_before=mirror.committed_step, sig=signal.SIGUSR1,
    ...                        deadline=time.monotonic() + MAINTENANCE_SAVE_SECONDS)
    >>> while not save.step(trainer, mirror, read_progress(progress_file)):
    ...     time.sleep(0.2)                    # the boot's training loop calls it each round

Compute Engine warns a GPU VM of a host maintenance stop an hour before it comes. The agent asks
the trainer for a checkpoint with its save signal (SIGUSR1 for the built-in trainers), waits until
the mirror has committed a step newer than the one before the notice, and training goes on. The stop
itself comes later as a SIGTERM, like any other notice.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass

from survivor import log as logs
from survivor.agent.mirror import Mirror
from survivor.agent.notice import Notice
from survivor.agent.trainer import TrainerProcess

log = logs.get("agent")

#: How long a maintenance notice's save may take before the agent stops waiting for it.
MAINTENANCE_SAVE_SECONDS = 300.0


@dataclass
class MaintenanceSave:
    """A maintenance notice's save: asked of the trainer, done once a newer checkpoint is committed.

    The save signal goes out only once the trainer has reported a step: by then its handler is in
    place (before it, SIGUSR1's default action would end the process), and before it there is
    nothing new to save anyway.

    Args:
        notice: the maintenance notice.
        committed_before: the step committed when the notice came; the save is done past it.
        sig: the trainer's save signal; None: commit the newest checkpoint it has, ask for nothing.
        deadline: the monotonic time after which the last commit stands.
    """

    notice: Notice
    committed_before: int | None
    sig: int | None
    deadline: float
    signalled: bool = False

    def step(self, trainer: TrainerProcess, mirror: Mirror, reported: int | None) -> bool:
        """Moves the save along, given the step the trainer last reported; True once it is over
        (committed, or given up on)."""
        if self.sig is None:
            try:
                mirror.sync()
            except Exception as exc:  # the mirror's own rounds try again; training goes on regardless
                log.warning("maintenance notice: committing failed; the mirror tries again", error=str(exc))
                return True
            log.info(
                "maintenance notice: the trainer has no save signal; its newest checkpoint is committed, "
                "training goes on",
                committed_step=mirror.committed_step,
            )
            return True
        if not self.signalled:
            if reported is None:
                return time.monotonic() > self.deadline
            trainer.request_save(self.sig)
            self.signalled = True
            log.info(
                "maintenance notice: asked the trainer for a checkpoint; training goes on",
                signal=signal.Signals(self.sig).name,
                step=reported,
            )
        if mirror.committed_step is not None and (
            self.committed_before is None or mirror.committed_step > self.committed_before
        ):
            log.info(
                "maintenance notice: checkpoint committed; training goes on",
                step=mirror.committed_step,
                seconds=round(time.monotonic() - self.notice.monotonic, 3),
            )
            return True
        if time.monotonic() > self.deadline:
            log.warning(
                "maintenance notice: no new checkpoint in time; the last commit stands",
                committed_step=mirror.committed_step,
            )
            return True
        mirror.wake()
        return False
