"""The goodput ledger: a job's wall time split into productive training and badput by cause."""

from __future__ import annotations

import datetime as _dt
import json

import pytest
from dataclasses import dataclass
from typing import ClassVar

from survivor.jobdir.journal import Attempt, Journal
from survivor.jobdir.ledger import CAUSES, TABLE, build_ledger
from survivor.jobdir.storage import open_storage
from survivor.jobdir.fields import TIME, Rule
from survivor.jobdir.records import Record
from survivor.jobdir.status import read_job

T0 = _dt.datetime(2026, 3, 1, 12, 0, tzinfo=_dt.timezone.utc)


def at(seconds: float) -> str:
    """The ISO time `seconds` after T0, as records carry it."""
    return (T0 + _dt.timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


def attempt(
    number, booted, started, ended, outcome, *, restored=None, end_step=None, reached=None, lost=None, **timings
) -> Attempt:
    """An attempt record as the agent writes it, times in seconds after T0."""
    return Attempt(
        number=number,
        instance=f"vm-{number}",
        booted=None if booted is None else at(booted),
        started=at(started),
        ended=None if ended is None else at(ended),
        outcome=outcome,
        restored_step=restored,
        end_step=end_step,
        reached_step=reached,
        steps_lost=lost,
        timings=timings,
    )


def simulated_job() -> list[Attempt]:
    """A job that meets every cause: a preemption with lost steps, a capacity gap, a failed boot,
    a killed agent, and a finish."""
    return [
        # boot 1: 60 s boot, restore 5, trainer start 10+20, 600 s trained (100 steps, 20 lost), save 4 + commit 3
        attempt(
            1,
            0,
            60,
            60 + 5 + 30 + 600 + 7 + 2,
            "preempted",
            end_step=80,
            reached=100,
            lost=20,
            restore=5.0,
            setup=10.0,
            first_step=20.0,
            train=620.0,
            trainer_save=4.0,
            final_commit=3.0,
        ),
        # 300 s waiting for capacity; boot 2 fails at once (a bad disk), no progress
        attempt(2, 984, 1030, 1050, "failed", restored=80, end_step=80, restore=5.0),
        # boot 3 killed without a record of its end; boot 4 starts 100 s later
        attempt(3, 1100, 1140, None, None, restored=80),
        attempt(
            4,
            1240,
            1280,
            1280 + 4 + 18 + 400 + 2 + 1,
            "finished",
            restored=80,
            end_step=200,
            reached=200,
            lost=0,
            restore=4.0,
            setup=8.0,
            first_step=10.0,
            train=410.0,
            final_commit=2.0,
        ),
    ]


def test_the_ledgers_sums_equal_the_wall_time_of_a_simulated_job():
    attempts = simulated_job()
    done = T0 + _dt.timedelta(seconds=1710)
    ledger = build_ledger(attempts, now=done + _dt.timedelta(hours=1), done_at=done)
    by_cause = ledger.seconds_by_cause()
    assert ledger.wall_seconds == 1710.0
    assert sum(by_cause.values()) == pytest.approx(ledger.wall_seconds, abs=1e-6)
    spans = ledger.spans
    assert all(a.end == b.start for a, b in zip(spans, spans[1:])), "spans are contiguous"
    assert spans[0].start == ledger.start and spans[-1].end == ledger.end


def test_each_badput_cause_appears_when_caused():
    by_cause = build_ledger(
        simulated_job(), now=T0 + _dt.timedelta(hours=1), done_at=T0 + _dt.timedelta(seconds=1710)
    ).seconds_by_cause()
    assert by_cause["capacity"] == pytest.approx((984 - 704) + (1100 - 1050))  # preemption to boot, failure to boot
    assert by_cause["vm_boot"] == pytest.approx(60 + 46 + 40 + 40)  # kernel boot to the agent's record
    assert by_cause["restore"] == pytest.approx(5 + 4)
    assert by_cause["trainer_start"] == pytest.approx(30 + 18)
    assert by_cause["rework"] == pytest.approx(600 * 20 / 100)  # 20 of 100 steps trained were never committed
    assert by_cause["productive"] == pytest.approx(600 - 120 + 400)
    assert by_cause["other"] == pytest.approx(2 + 1 + 5)  # the records' remainders, and DONE after the last
    assert by_cause["checkpoint"] == pytest.approx(7 + 2)
    assert by_cause["failed"] == pytest.approx((1050 - 1030) + (1240 - 1140))  # the failed boot, the killed one
    assert set(by_cause) == set(CAUSES)
    # only productive training is goodput; every other cause names its bucket, label and colour
    assert [cause.name for cause in TABLE if cause.google_term is None] == ["productive"]
    assert len({cause.label for cause in TABLE}) == len({cause.colour for cause in TABLE}) == len(TABLE)


def test_a_job_without_disruptions_has_no_disruption_badput():
    done = T0 + _dt.timedelta(seconds=700)
    ledger = build_ledger(
        [
            attempt(
                1,
                0,
                50,
                690,
                "finished",
                end_step=100,
                reached=100,
                lost=0,
                restore=0.5,
                setup=5.0,
                first_step=10.0,
                train=620.0,
                final_commit=2.0,
            )
        ],
        now=done,
        done_at=done,
    )
    by_cause = ledger.seconds_by_cause()
    assert by_cause["capacity"] == by_cause["rework"] == by_cause["failed"] == 0.0
    assert ledger.goodput == pytest.approx(610 / 700)
    assert ledger.seconds_per_step == pytest.approx(6.1)


def test_a_preempted_job_waiting_for_a_vm_counts_the_wait_as_capacity():
    ledger = build_ledger(simulated_job()[:1], now=T0 + _dt.timedelta(seconds=2000))
    assert ledger.spans[-1].cause == "capacity"
    assert ledger.spans[-1].seconds == pytest.approx(2000 - 704)


def test_a_running_attempt_counts_as_productive_after_its_measured_start():
    ledger = build_ledger([attempt(1, 0, 30, None, None, restore=2.0)], now=T0 + _dt.timedelta(seconds=100))
    assert ledger.running
    assert ledger.seconds_by_cause()["productive"] == pytest.approx(68)
    assert ledger.wall_seconds == 100


def test_records_without_a_boot_time_still_parse_and_count_their_wait_as_capacity():
    old = json.dumps(
        {
            "number": 1,
            "instance": "vm",
            "started": at(10),
            "ended": at(20),
            "outcome": "finished",
            "end_step": 5,
            "timings": {"train": 9.0},
        }
    ).encode()
    record = Attempt.from_json(old)
    assert record.booted is None
    ledger = build_ledger([record], now=T0, done_at=T0 + _dt.timedelta(seconds=20), created=T0)
    assert ledger.seconds_by_cause()["capacity"] == 10.0
    with pytest.raises(ValueError, match="booted"):
        Attempt.from_json(json.dumps({"number": 1, "instance": "vm", "started": at(1), "booted": 5}).encode())


@pytest.mark.slow
def test_each_boot_records_its_guest_boot_time_and_the_trainers_first_step(tmp_path, instance_factory):
    from tests.conftest import dummy_spec

    job_dir = str(tmp_path / "jobdir")
    vm = instance_factory(dummy_spec(job_dir, tmp_path, train_steps=20, step_seconds=0.02)).boot()
    assert vm.wait(timeout=120) == 0
    (record,) = Journal(open_storage(job_dir)).attempts()
    assert record.booted is not None and record.booted <= record.started
    assert record.timings["first_step"] > 0


def test_a_boot_runs_in_the_mode_of_the_last_switch_before_it_booted():
    from survivor.jobdir.ledger import mode_at
    from survivor.jobdir.switches import Switch

    # the watch switched to on-demand at 1200 s, while boot 3 (booted 1100 s, killed) still ran on Spot
    switch = Switch(time=at(1200), to_mode="on-demand", from_mode="spot", reason="behind", by="watch")
    done = T0 + _dt.timedelta(seconds=1710)
    ledger = build_ledger(simulated_job(), now=done, done_at=done, switches=[switch])
    assert ledger.modes == {1: "spot", 2: "spot", 3: "spot", 4: "on-demand"}
    assert ledger.mode == "on-demand"
    by_mode = ledger.vm_seconds_by_mode()
    assert by_mode == {
        "spot": pytest.approx(704 + 66 + 140),
        "on-demand": pytest.approx(1705 - 1240),
        "flex-start": 0.0,
    }
    assert sum(by_mode.values()) == pytest.approx(ledger.vm_seconds)
    back = Switch(time=at(1500), to_mode="spot", from_mode="on-demand")
    assert [mode_at([switch, back], T0 + _dt.timedelta(seconds=s)) for s in (0, 1200, 1499, 1500)] == [
        "spot",
        "on-demand",
        "on-demand",
        "spot",
    ]
    assert build_ledger(simulated_job(), now=done, done_at=done).vm_seconds_by_mode()["on-demand"] == 0.0


def test_the_groups_creation_counts_as_waiting_for_capacity_before_the_first_boot():
    done = T0 + _dt.timedelta(seconds=1710)
    ledger = build_ledger(simulated_job(), now=done, done_at=done, created=T0 - _dt.timedelta(seconds=90))
    assert ledger.spans[0].cause == "capacity" and ledger.spans[0].seconds == 90.0
    assert ledger.wall_seconds == 1800.0
    # a group made again after the job's first boot does not move the job's start
    later = build_ledger(simulated_job(), now=done, done_at=done, created=T0 + _dt.timedelta(seconds=500))
    assert later.start == T0 and later.wall_seconds == 1710.0


# -- records with impossible times: skipped with a warning naming them, never nonsense or a crash ----


def test_an_attempt_that_ends_before_it_starts_is_skipped_with_a_warning_naming_it(caplog):
    done = T0 + _dt.timedelta(seconds=1710)
    backwards = attempt(5, 1700, 1705, 100, "finished", restored=200, end_step=200)
    ledger = build_ledger(simulated_job() + [backwards], now=done, done_at=done)
    assert [number for number, *_ in ledger.boots] == [1, 2, 3, 4]
    assert "survivor/attempts/000005.json" in caplog.text and "before it started" in caplog.text


def test_an_attempt_before_2000_is_skipped_with_a_warning():
    unset_clock = Attempt(
        number=1,
        instance="vm-1",
        started="1970-01-01T00:00:10+00:00",
        ended="1970-01-01T00:10:00+00:00",
        outcome="finished",
    )
    ledger = build_ledger([unset_clock], now=T0, done_at=T0)
    assert ledger.boots == [] and ledger.goodput is None


def test_an_attempt_in_year_9999_or_with_an_endless_timing_is_skipped_not_an_overflow(caplog):
    far = "9999-12-31T23:59:59+00:00"
    future = Attempt(
        number=1, instance="vm-1", booted=far, started=far, ended=far, outcome="finished", timings={"train": 100.0}
    )
    ledger = build_ledger([future], now=T0, done_at=T0)
    assert ledger.boots == [] and "survivor/attempts/000001.json" in caplog.text
    endless = attempt(1, 0, 10, 100, "finished", end_step=10, reached=10, first_step=1e308, train=1e308)
    ledger = build_ledger([endless], now=T0 + _dt.timedelta(seconds=100), done_at=T0 + _dt.timedelta(seconds=100))
    assert ledger.wall_seconds == 100


def test_the_cause_table_holds_every_typed_cause_once_in_its_order():
    from typing import get_args

    from survivor.jobdir.ledger import CAUSES, CauseName

    assert CAUSES == get_args(CauseName)


@dataclass(frozen=True)
class TrainerExit(Record):
    """A made-up kind of record: one per trainer exit."""

    PREFIX: ClassVar[str] = "survivor/trainer-exits/"
    FIELDS: ClassVar[dict[str, Rule]] = {"time": TIME}
    code: str = ""


def test_a_new_kind_of_record_reaches_the_ledger_and_the_view_with_no_reader_in_read_job(tmp_path):
    """A kind of record is its class and its writer: `read_job` reads it for the ledger and the view
    (`Records.of`) the first time either asks, oldest first, and skips one that does not read."""
    storage = open_storage(str(tmp_path))
    assert TrainerExit(time="2026-11-24T10:05:00Z", code="137").write(storage)
    assert TrainerExit(time="2026-11-24T10:00:00Z", code="1").write(storage)
    storage.write("survivor/trainer-exits/broken.json", b"{")
    view = read_job(str(tmp_path), storage=storage, now=T0)
    assert [e.code for e in view.records.of(TrainerExit)] == ["1", "137"]
