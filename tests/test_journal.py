"""Attempts, DONE/FAILED, and the crash-loop decision."""

from survivor.journal import Attempt, Journal, failed_streak, should_give_up, steps_lost
from survivor.storage import open_storage


def attempt(n, restored, outcome, end=None):
    return Attempt(number=n, instance="vm", started="t", restored_step=restored, outcome=outcome, end_step=end)


def test_three_failures_without_progress_give_up():
    attempts = [attempt(1, None, "failed"), attempt(2, None, "failed"), attempt(3, None, "failed")]
    assert failed_streak(attempts) == 3
    assert should_give_up(attempts, 3)
    assert not should_give_up(attempts[:2], 3)


def test_progress_ends_the_streak():
    attempts = [attempt(1, 0, "failed"), attempt(2, 0, "failed", end=50), attempt(3, 50, "failed"), attempt(4, 50, "failed")]
    assert failed_streak(attempts) == 2


def test_a_next_attempt_restoring_further_counts_as_progress():
    # attempt 2 was killed before it could record its end, but attempt 3 restored a newer step
    attempts = [attempt(1, 0, "failed"), attempt(2, 0, None), attempt(3, 40, "failed")]
    assert failed_streak(attempts) == 1


def test_preemptions_neither_count_nor_reset_the_streak():
    attempts = [attempt(1, 10, "failed"), attempt(2, 10, "preempted", end=10), attempt(3, 10, "failed")]
    assert failed_streak(attempts) == 2


def test_steps_lost():
    assert steps_lost(105, 100) == 5
    assert steps_lost(100, 100) == 0
    assert steps_lost(None, 100) is None
    assert steps_lost(7, None) == 7


def test_attempt_numbers_are_unique_and_done_is_written_once(job_dir):
    journal = Journal(open_storage(job_dir))
    first = journal.begin("vm-a")
    second = journal.begin("vm-b")
    assert (first.number, second.number) == (1, 2)
    journal.end(first, "preempted", end_step=10, reached_step=11, steps_lost=1)
    assert journal.mark_done({"step": 10})
    assert not journal.mark_done({"step": 10})
    state = journal.state()
    assert state.done["step"] == 10
    assert [a.outcome for a in state.attempts] == ["preempted", None]
    assert state.preemptions == 1 and state.steps_lost == 1
