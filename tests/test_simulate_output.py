"""What `survivor simulate` prints and plots says which step each number is:
pure functions over a finished run's timeline and attempts, no process started."""

from __future__ import annotations

from survivor.jobdir.journal import Attempt
from survivor.local.simulator import Event, SimulationResult, boot_marks


def finished_run() -> SimulationResult:
    """Two boots: the first preempted (its trainer at step 261 when noticed, on to 562, saved 550), the second done."""
    events = [
        Event(0.0, "boot", "sim-1", "boot 1"),
        Event(30.0, "notice", "sim-1", "preempted=TRUE; trainer at step 261"),
        Event(33.0, "soft-off", "sim-1"),
        Event(40.0, "exit", "sim-1", "agent exit 0"),
        Event(42.0, "boot", "sim-1", "boot 2"),
        Event(90.0, "left-group", "sim-1"),
    ]
    attempts = [
        Attempt(
            number=1,
            instance="sim-1",
            started="",
            restored_step=None,
            reached_step=562,
            end_step=550,
            steps_lost=12,
            outcome="preempted",
            reason="the trainer did not save on the notice: still running 12.0 s after SIGTERM, killed; "
            "its last checkpoint (step 550) stands",
        ),
        Attempt(
            number=2,
            instance="sim-1",
            started="",
            restored_step=550,
            reached_step=1000,
            end_step=1000,
            steps_lost=0,
            outcome="finished",
        ),
    ]
    return SimulationResult(events=events, attempts=attempts, target_size=0, done={"step": 1000})


def test_the_table_names_each_step_and_says_when_the_trainer_did_not_save_on_the_notice():
    table = finished_run().table()
    header = next(line for line in table.splitlines() if "outcome" in line)
    assert header.split()[:5] == ["boot", "restored", "reached", "saved", "lost"], header
    assert "preempted: the trainer did not save on the notice" in table, table


def test_the_plot_puts_restored_at_a_boots_start_and_saved_at_its_end():
    marks = boot_marks(finished_run())
    assert (0.0, 0, "boot 1 restored 0") in marks
    assert (40.0, 550, "saved 550") in marks  # at the exit, not beside the restore dot
    assert (42.0, 550, "boot 2 restored 550") in marks
    assert (90.0, 1000, "saved 1000") in marks
