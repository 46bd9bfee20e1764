"""How an attempt ended: one pure decision from what happened to what the agent records and returns.

    >>> decide_ending(AttemptResult(trainer_code=0, committed_step=120))
    Ending(outcome='finished', exit_code=0, reason='', done=True, counts=False)
    >>> decide_ending(AttemptResult(trainer_code=None, notice="preempted"))
    Ending(outcome='preempted', exit_code=0, reason='', done=False, counts=False)
    >>> decide_ending(AttemptResult(trainer_code=3, last_words="ValueError: bad lr")).reason
    'the trainer exited with code 3: ValueError: bad lr'

The boot gathers the facts of its attempt into an `AttemptResult` (no server needed to make one)
and `Boot` acts on the `Ending` in one place: it closes the attempt in the journal with `outcome`,
writes DONE when `done` (then finishes the VM), writes FAILED when a failure that `counts` makes
too many in a row (then finishes the VM), and exits with `exit_code` otherwise.

The exit codes are systemd's cue: 0 means nothing is left to do on this boot; 1 restarts the
agent (`Restart=on-failure`); 2 is a spec that cannot run, which no restart cures.
"""

from __future__ import annotations

from dataclasses import dataclass

from survivor.jobdir.journal import TRAINER_FAILED, Outcome, steps_lost

from survivor.jobdir.ledger import UNSAVED

#: Nothing left to do on this boot: done, failed for good, or saved after a notice.
EXIT_OK = 0
#: Worth another boot: the trainer failed, the job dir or the network did; systemd restarts the agent.
EXIT_RETRY = 1
#: The job spec cannot run.
EXIT_BAD_SPEC = 2


@dataclass(frozen=True)
class AttemptResult:
    """What happened in one attempt, as facts. The first of these that holds decides the ending.

    Args:
        trainer_code: the trainer's exit code; None when it never ran to an exit of its own.
        notice: the outcome of the notice that came (`preempted` or `stopped`), or None.
        lease_lost: another agent took the job over.
        failure: why the attempt failed before anything trained (setup, the boot disk), counted.
        interrupted: why the attempt could not go on for a reason the next boot may not meet (the
            network, the job dir), not counted.
        commit_failure: why the last commit failed, if it did (the commit before it stands).
        last_words: the trainer's last meaningful output line, for a failure's reason.
        notice_source: where the notice came from (`preempted`, `signal`), for the journal.
        ignored_notice_seconds: how long the trainer was still running after its SIGTERM before it
            was killed (None: it exited by itself): it did not save on the notice (the recipe's
            dummy trainer ignores SIGTERM), so what it trained since its last checkpoint is lost.
        restored_step, reached_step, committed_step: the step restored, the furthest the trainer
            reported, and the newest committed; recorded in the journal, not decided on.
        uncommitted_step: the step of what the trainer left that the final commit did not cover: a
            newer checkpoint, or files added beside the committed one, such as an export (None:
            none). A trainer that finished is DONE only once all it left is committed: DONE points
            at the committed snapshot, its VM's disk goes, and a later boot never trains again.
        refused: why the trainer's newest files were refused a commit ("": none was), such as a
            step beyond train_steps read from a name that holds no step of this job. A trainer that
            finished with its files refused fails, counted: the next boot would start from scratch.
        misnumbered: why the commits' steps are not the trainer's ("": they are), as when it saves
            `ckpt-3` for step 29 (TensorFlow's `CheckpointManager.save()` numbers by save count):
            the steps the attempt lost are then unknown, never a figure made of two kinds of number.
        first_step: the first step the trainer was seen to report (None: it reported none; the agent
            reads it every 0.2 s, so a fast trainer may be a few steps on). Below the restored step,
            the trainer did not resume: it trained again what was committed (`retrained`, at least).
    """

    trainer_code: int | None = None
    notice: Outcome | None = None
    lease_lost: bool = False
    failure: str = ""
    interrupted: str = ""
    commit_failure: str = ""
    last_words: str = ""
    notice_source: str | None = None
    ignored_notice_seconds: float | None = None
    restored_step: int | None = None
    reached_step: int | None = None
    committed_step: int | None = None
    uncommitted_step: int | None = None
    refused: str = ""
    misnumbered: str = ""
    first_step: int | None = None


@dataclass(frozen=True)
class Ending:
    """What the agent does about an attempt's end.

    Args:
        outcome: the attempt's outcome in the journal (`survivor.jobdir.journal.OUTCOMES`).
        exit_code: the agent's exit code, unless the finish action after DONE or FAILED decides it.
        reason: why, for the journal and the log ("" when nothing went wrong).
        done: write DONE, then finish the VM.
        counts: a failure that counts toward `max_failed_attempts`: FAILED once too many in a row.
    """

    outcome: Outcome
    exit_code: int
    reason: str = ""
    done: bool = False
    counts: bool = False


def decide_ending(result: AttemptResult) -> Ending:
    """Pure decision: the ending of an attempt with this result.

    In order: a lost lease means another agent writes now, so this one records nothing more; a
    setup failure or an interruption ends the attempt whatever came after; a notice wins over the
    trainer's own exit (a trainer that exited on the SIGTERM systemd sent the whole unit was
    stopped, not failed); a final commit that failed without a notice leaves work that only a
    restart can save; then the trainer's exit code: 0 is the job done.
    """
    if result.lease_lost:
        return Ending("superseded", EXIT_RETRY, reason="the lease was taken over")
    if result.interrupted:
        return Ending("interrupted", EXIT_RETRY, reason=result.interrupted)
    if result.failure:
        return Ending("failed", EXIT_RETRY, reason=result.failure, counts=True)
    if result.notice is not None:
        return Ending(
            result.notice,
            EXIT_OK,
            reason="; ".join(
                r for r in (unsaved(result), result.commit_failure, retrained_reason(result), result.misnumbered) if r
            ),
        )
    if result.commit_failure:
        return Ending("interrupted", EXIT_RETRY, reason=result.commit_failure)
    if result.trainer_code == 0 and result.refused:
        return Ending("failed", EXIT_RETRY, reason=f"the trainer finished, but {result.refused}", counts=True)
    if result.trainer_code == 0 and result.uncommitted_step is not None:
        return Ending(
            "interrupted",
            EXIT_RETRY,
            reason=(
                f"the trainer finished, but what it left at step {result.uncommitted_step} is not all committed "
                f"(newest commit: {'none' if result.committed_step is None else f'step {result.committed_step}'}); "
                "not DONE: the next start resumes from the newest commit"
            ),
        )
    if result.trainer_code == 0 and result.committed_step is None and result.restored_step is None:
        return Ending(
            "failed",
            EXIT_RETRY,
            counts=True,
            reason=(
                "the trainer exited 0 having written no checkpoint to --job-dir (nothing is committed): it must save "
                "there, or name its files so that they hold a step (docs/trainer-contract.md); not DONE"
            ),
        )
    if result.trainer_code == 0:
        return Ending(
            "finished",
            EXIT_OK,
            reason="; ".join(r for r in (retrained_reason(result), result.misnumbered) if r),
            done=True,
        )
    last = f": {result.last_words}" if result.last_words else ""
    return Ending("failed", EXIT_RETRY, reason=f"{TRAINER_FAILED} {result.trainer_code}{last}", counts=True)


def resumed_beyond(restored_step: int | None, first_step: int) -> bool:
    """Pure: whether a trainer's first report lies so far past the step the agent restored that the
    commit's number cannot be its step: `ckpt-03` of epoch 3 restored, the trainer resumes at step 31
    (Keras' `ModelCheckpoint("ckpt-{epoch:02d}...")`, `BackupAndRestore`); `ckpt-3` of the third save
    (TensorFlow's `CheckpointManager.save()`). The agent reads progress every 20 ms until the first
    report, so a trainer just restored is a step or a few past its commit, never twice as far and five more.

    >>> resumed_beyond(3, 31), resumed_beyond(2, 11), resumed_beyond(300, 3001), resumed_beyond(None, 50)
    (True, True, True, False)
    >>> resumed_beyond(1000, 1040), resumed_beyond(10, 13), resumed_beyond(0, 3)
    (False, False, False)
    """
    return restored_step is not None and first_step > 2 * restored_step + 5


def failed_in_a_row(count: int) -> str:
    """Pure: how FAILED's reason counts the failed attempts.

    >>> failed_in_a_row(1), failed_in_a_row(3)
    ('the attempt failed', '3 attempts in a row failed')
    """
    return "the attempt failed" if count == 1 else f"{count} attempts in a row failed"


def retrained(result: AttemptResult) -> int:
    """Pure: the committed steps the trainer trained again because it started below the step it was
    restored at (it did not resume from the checkpoint in --job-dir): lost work, never 0 by default.

    >>> retrained(AttemptResult(restored_step=500, first_step=1, reached_step=800))
    500
    >>> retrained(AttemptResult(restored_step=500, first_step=501, reached_step=800))
    0
    """
    if result.restored_step is None or result.first_step is None or result.first_step > result.restored_step:
        return 0
    reached = result.restored_step if result.reached_step is None else min(result.reached_step, result.restored_step)
    return max(0, reached - max(result.first_step, 1) + 1)


def retrained_reason(result: AttemptResult) -> str:
    """Pure: why the attempt lost the steps `retrained` counts ("" when it lost none)."""
    lost = retrained(result)
    if not lost:
        return ""
    return (
        f"the trainer's first report was step {result.first_step}, below the restored step "
        f"{result.restored_step}: it did not resume from the checkpoint in --job-dir and trained at least "
        f"{lost} committed steps again (docs/trainer-contract.md)"
    )


def attempt_steps_lost(result: AttemptResult) -> int | None:
    """Pure: the steps an attempt lost: what it trained beyond its last commit, and what it trained
    again below its restored step (`retrained`). None when they are unknown: nothing reached, or
    commits numbered otherwise than by step (`misnumbered`)."""
    if result.misnumbered:
        return None
    beyond = steps_lost(result.reached_step, result.committed_step)
    again = retrained(result)
    return beyond if beyond is None and not again else (beyond or 0) + again


def saved_and_committed(saved: int | None, committed_after_notice: int | None) -> int | None:
    """Pure decision: the step that makes a VM safe after a notice before its trainer exits, or None.

    `saved` is the step the trainer reported complete after the stop request (and trained nothing
    since); `committed_after_notice` the newest commit whose round began after the notice. Both
    must be there, and the commit must cover the save: an earlier periodic commit never proves it.

    >>> saved_and_committed(120, 120)
    120
    >>> saved_and_committed(120, 100) is None  # the save is not committed yet
    True
    >>> saved_and_committed(None, 120) is None  # the trainer did not say it saved: wait for its exit
    True
    """
    if saved is None or committed_after_notice is None or committed_after_notice < saved:
        return None
    return saved


def unsaved(result: AttemptResult) -> str:
    """Pure: why the steps after the trainer's last checkpoint were lost on a notice, when the trainer
    did not save on it ("" when it exited by itself)."""
    if result.ignored_notice_seconds is None:
        return ""
    kept = (
        "nothing it wrote" if result.committed_step is None else f"its last checkpoint (step {result.committed_step})"
    )
    return (
        f"{UNSAVED}: still running {result.ignored_notice_seconds:.1f} s after "
        f"SIGTERM, killed; {kept} stands (the contract: on SIGTERM save to --job-dir and exit 0, "
        "docs/trainer-contract.md)"
    )
