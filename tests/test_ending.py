"""How an attempt ended, decided from its facts alone (`decide_ending`): the boundary cases."""

import pytest

from survivor.agent.ending import EXIT_OK, EXIT_RETRY, AttemptResult, Ending, decide_ending


def test_a_trainer_that_exits_0_without_a_notice_is_done():
    assert decide_ending(AttemptResult(trainer_code=0, committed_step=100)) == Ending("finished", EXIT_OK, done=True)


def test_a_trainer_that_fails_is_a_counted_failure_that_says_its_last_words():
    ending = decide_ending(AttemptResult(trainer_code=3, last_words="ValueError: bad lr"))
    assert ending == Ending(
        "failed", EXIT_RETRY, reason="the trainer exited with code 3: ValueError: bad lr", counts=True
    )
    assert decide_ending(AttemptResult(trainer_code=-9)).reason == "the trainer exited with code -9"


@pytest.mark.parametrize("code", [None, 0, 1, -15])
@pytest.mark.parametrize("notice", ["preempted", "stopped"])
def test_a_notice_wins_over_the_trainers_own_exit(code, notice):
    """A trainer that exited 0 or on the SIGTERM systemd sent the whole unit was stopped, not done or failed."""
    assert decide_ending(AttemptResult(trainer_code=code, notice=notice)) == Ending(notice, EXIT_OK)


def test_a_final_commit_that_failed_after_a_notice_is_recorded_and_the_vm_goes():
    ending = decide_ending(
        AttemptResult(trainer_code=0, notice="preempted", commit_failure="the final commit failed: x")
    )
    assert ending == Ending("preempted", EXIT_OK, reason="the final commit failed: x")


@pytest.mark.parametrize("code", [0, 1])
def test_a_final_commit_that_failed_without_a_notice_needs_another_boot_and_does_not_count(code):
    ending = decide_ending(AttemptResult(trainer_code=code, commit_failure="the final commit failed: x"))
    assert ending == Ending("interrupted", EXIT_RETRY, reason="the final commit failed: x")


def test_a_lost_lease_is_superseded_whatever_else_happened():
    for result in [
        AttemptResult(lease_lost=True),
        AttemptResult(lease_lost=True, trainer_code=0),
        AttemptResult(lease_lost=True, notice="preempted", commit_failure="x"),
    ]:
        assert decide_ending(result) == Ending("superseded", EXIT_RETRY, reason="the lease was taken over")


def test_a_setup_failure_counts_and_an_interruption_does_not():
    assert decide_ending(AttemptResult(failure="cannot start the trainer: no such user")) == Ending(
        "failed", EXIT_RETRY, reason="cannot start the trainer: no such user", counts=True
    )
    assert decide_ending(AttemptResult(interrupted="restore failed: 503")) == Ending(
        "interrupted", EXIT_RETRY, reason="restore failed: 503"
    )


def test_a_failure_before_training_ends_the_attempt_even_when_a_notice_came_too():
    assert decide_ending(AttemptResult(failure="restore failed: disk full", notice="preempted")).outcome == "failed"
    assert decide_ending(AttemptResult(interrupted="restore failed: 503", notice="stopped")).outcome == "interrupted"


def test_a_trainer_that_did_not_save_on_the_notice_is_said_in_the_attempts_reason():
    ignored = decide_ending(
        AttemptResult(
            trainer_code=-9, notice="preempted", ignored_notice_seconds=12.0, reached_step=562, committed_step=550
        )
    )
    assert ignored.outcome == "preempted" and ignored.exit_code == EXIT_OK and not ignored.counts
    assert ignored.reason == (
        "the trainer did not save on the notice: still running 12.0 s after SIGTERM, "
        "killed; its last checkpoint (step 550) stands (the contract: on SIGTERM save to "
        "--job-dir and exit 0, docs/trainer-contract.md)"
    )
    both = decide_ending(
        AttemptResult(
            trainer_code=-9,
            notice="preempted",
            ignored_notice_seconds=12.0,
            commit_failure="the final commit failed: 503",
        )
    )
    assert both.reason.startswith("the trainer did not save on the notice") and both.reason.endswith(
        "; the final commit failed: 503"
    )
    assert decide_ending(AttemptResult(trainer_code=0, notice="preempted")).reason == ""


def test_a_trainer_that_exits_0_having_committed_nothing_fails_instead_of_done():
    """A script that ignores --job-dir reached 'DONE, nothing committed' with no warning."""
    ending = decide_ending(AttemptResult(trainer_code=0, committed_step=None, restored_step=None))
    assert ending.outcome == "failed" and ending.counts and not ending.done
    assert "--job-dir" in ending.reason
    # restored and nothing new to commit (the job was at its end already): DONE
    assert decide_ending(AttemptResult(trainer_code=0, committed_step=None, restored_step=60)).done


def test_a_trainer_that_starts_below_its_restored_step_loses_what_it_trains_again():
    """A silent start from scratch was reported as 0 steps lost."""
    from survivor.agent.ending import attempt_steps_lost, retrained

    scratch = AttemptResult(trainer_code=0, restored_step=500, first_step=1, reached_step=800, committed_step=800)
    assert retrained(scratch) == 500 and attempt_steps_lost(scratch) == 500
    ending = decide_ending(scratch)
    assert ending.done and "first report was step 1, below the restored step 500" in ending.reason
    resumed = AttemptResult(trainer_code=0, restored_step=500, first_step=501, reached_step=800, committed_step=800)
    assert retrained(resumed) == 0 and attempt_steps_lost(resumed) == 0 and decide_ending(resumed).reason == ""
    # preempted while still below the restored step: what it trained again, and nothing beyond
    early = AttemptResult(notice="preempted", restored_step=500, first_step=1, reached_step=120, committed_step=500)
    assert (
        attempt_steps_lost(early) == 120 and "trained at least 120 committed steps again" in decide_ending(early).reason
    )
    assert attempt_steps_lost(AttemptResult(restored_step=500)) is None  # no report, no figure
