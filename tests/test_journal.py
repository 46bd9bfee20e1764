"""Attempts, DONE/FAILED, and the crash-loop decision."""

import json

import pytest

from survivor.jobdir.journal import Attempt, Journal, failed_streak, restored_text, should_give_up, steps_lost
from survivor.jobdir.storage import open_storage


def attempt(n, restored, outcome, end=None):
    return Attempt(number=n, instance="vm", started="t", restored_step=restored, outcome=outcome, end_step=end)


def test_three_failures_without_progress_give_up():
    attempts = [attempt(1, None, "failed"), attempt(2, None, "failed"), attempt(3, None, "failed")]
    assert failed_streak(attempts) == 3
    assert should_give_up(attempts, 3)
    assert not should_give_up(attempts[:2], 3)


def test_progress_ends_the_streak():
    attempts = [
        attempt(1, 0, "failed"),
        attempt(2, 0, "failed", end=50),
        attempt(3, 50, "failed"),
        attempt(4, 50, "failed"),
    ]
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


# -- an unreadable record is absent, never fatal ----------------------------------------------------------

GOOD = {"number": 1, "instance": "vm", "started": "2026-01-01T00:00:00+00:00"}


def record(**fields) -> bytes:
    return json.dumps({**GOOD, **fields}).encode()


@pytest.mark.usefixtures("gc_off")  # parses 100,000-deep JSON in this process
@pytest.mark.parametrize(
    "data",
    [
        b'{"number": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"number": NaN, "instance": "x", "started": "t"}',
        b"[]",
        b"7",
        b"\xff",
        b'{"number": 1, "instance": "x", "sta',
        record(number="1"),
        record(number=1.0),
        record(number=True),
        record(number=0),
        record(number=10**12),
        record(instance=None),
        record(started=5),
        record(outcome=["failed"]),
        record(outcome="exploded"),
        record(restored_step="10"),
        record(restored_step=float("1e300")),
        record(end_step=1 << 70),
        record(reason=None),
        record(timings=[1]),
        record(timings={"restore": "fast"}),
        record(timings={"restore": True}),
        b'{"number": 1, "instance": "x", "started": "t", "timings": {"restore": Infinity}}',
        json.dumps({"instance": "vm", "started": "t"}).encode(),
        record(restored_from=3),
        # counts and steps no agent writes: negative, beyond any job's train_steps, more lost than reached
        record(steps_lost=-(10**18)),
        record(restored_step=-1),
        record(end_step=-5),
        record(reached_step=-1),
        record(reached_step=10**13),
        record(steps_lost=10**13),
        record(reached_step=5, steps_lost=6),
        record(timings={"restore": -1.0}),
        record(timings={"train": 1e13}),
    ],
    ids=lambda d: d[:40].decode(errors="replace"),
)
def test_a_record_that_is_not_the_exact_schema_is_refused(data):
    with pytest.raises(ValueError):
        Attempt.from_json(data)


def test_a_record_round_trips():
    from dataclasses import asdict

    full = Attempt(
        number=3,
        instance="vm",
        started="t",
        restored_step=10,
        ended="u",
        outcome="preempted",
        reason="",
        end_step=20,
        reached_step=21,
        steps_lost=1,
        notice="metadata",
        timings={"restore": 0.5},
        restored_from="survivor/snapshots/x.json",
    )
    assert Attempt.from_json(json.dumps(asdict(full)).encode()) == full
    assert Attempt.from_json(record(future_field=1)).number == 1  # a newer agent's extra keys are ignored


@pytest.mark.usefixtures("gc_off")  # parses 100,000-deep JSON in this process
def test_unreadable_records_are_skipped_and_their_numbers_stay_taken(job_dir, caplog):
    storage = open_storage(job_dir)
    storage.write("survivor/attempts/000001.json", b"[" * 100_000 + b"]" * 100_000)
    storage.write("survivor/attempts/000002.json", record(number=9))  # not its name
    storage.write("survivor/attempts/notes.txt", b"hello")
    journal = Journal(storage)
    assert journal.attempts() == []
    messages = [r.getMessage() for r in caplog.records if "unreadable attempt record" in r.getMessage()]
    assert any("survivor/attempts/000002.json: it says attempt 9" in m for m in messages), messages
    assert journal.begin("vm").number == 3
    assert [a.number for a in journal.attempts()] == [3]


def test_interrupted_attempts_neither_count_nor_end_the_streak():
    attempts = [attempt(1, 10, "failed"), attempt(2, 10, "interrupted"), attempt(3, 10, "failed")]
    assert failed_streak(attempts) == 2
    assert failed_streak([attempt(1, 10, "interrupted")] * 5) == 0


def test_where_an_attempt_started_reads_for_people():
    def a(**fields):
        return Attempt(**{"number": 1, "instance": "vm", "started": "t", **fields})

    assert restored_text(a(restored_step=120, restored_from="m", ended="u", outcome="preempted")) == "120"
    assert restored_text(a(restored_from="", ended="u", outcome="finished")) == "fresh start"
    assert restored_text(a(restored_from="")) == "fresh start"  # running, from scratch
    assert restored_text(a()) == "restoring"
    assert restored_text(a(ended="u", outcome="interrupted")) == "not restored"
    assert restored_text(a(ended="u", outcome="finished")) == "fresh start"  # an older agent's record


@pytest.mark.usefixtures("gc_off")  # parses 100,000-deep JSON in this process
@pytest.mark.parametrize("data", [b"[" * 100_000 + b"]" * 100_000, b"NaN", b"\xff\xfe", b"[1]", b'{"reason": 5}'])
def test_a_marker_that_is_not_a_plain_object_still_counts(job_dir, data):
    from survivor.jobdir.status import failed_reason

    storage = open_storage(job_dir)
    storage.write("survivor/FAILED", data)
    failed = Journal(storage).failed()
    assert failed is not None
    json.dumps(failed)  # `status --json` prints it
    assert isinstance(failed_reason(failed), str)


def test_a_snapshot_the_trainer_failed_on_is_passed_over_once_and_that_failure_is_not_counted():
    from survivor.jobdir.journal import Attempt, failed_streak, snapshot_to_pass_over

    def attempt(
        n, restored_from, restored_step, outcome="failed", reason="the trainer exited with code 1: boom", end_step=None
    ):
        return Attempt(
            n,
            "vm",
            "t",
            restored_step=restored_step,
            ended="t",
            outcome=outcome,
            reason=reason,
            end_step=end_step if end_step is not None else restored_step,
            restored_from=restored_from,
        )

    first = attempt(1, "s/20", 20)
    assert snapshot_to_pass_over([first]) == "s/20"
    assert snapshot_to_pass_over([attempt(1, "s/20", 20, reason="the trainer exited with code -9")]) is None  # killed
    trained_then_failed = attempt(1, "s/20", 20)
    trained_then_failed.reached_step = 25
    assert snapshot_to_pass_over([trained_then_failed]) is None  # it loaded the snapshot and trained
    assert snapshot_to_pass_over([attempt(1, "s/20", 20, reason="cannot start the trainer: no user")]) is None
    assert snapshot_to_pass_over([attempt(1, "", None)]) is None  # nothing restored: nothing to pass over
    fell_back = attempt(2, "s/10", 10)
    assert failed_streak([first, fell_back]) == 1  # the failure on s/20 counted against the snapshot
    assert snapshot_to_pass_over([first, fell_back]) is None  # once a streak: now the trainer is the trouble
    # back on s/20 reads as progress over s/10, so the streak starts again there: bounded, two boots later
    again = [first, fell_back, attempt(3, "s/20", 20), attempt(4, "s/20", 20)]
    assert failed_streak(again) == 2 and failed_streak(again + [attempt(5, "s/20", 20)]) == 3
    trained = attempt(2, "s/10", 10, outcome="finished", reason="", end_step=40)
    assert failed_streak([first, trained]) == 0
