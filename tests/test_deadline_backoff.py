"""The deadline policy remembers switches back to Spot that found no capacity (a long stockout):
from the second in a row it waits a back-off on on-demand before trying Spot again."""

import datetime as dt

import pytest

from survivor.policy import deadline
from survivor.policy.deadline import (
    ON_DEMAND,
    SPOT,
    Measured,
    Situation,
    backoff_hours,
    decide,
    failed_switch_backs,
    measure,
    spot_goodput,
)
from survivor.jobdir.journal import Attempt
from survivor.jobdir.switches import Switch

GOOD = Measured(
    steps_done=500,
    train_steps=1000,
    step_rate=100.0,
    overhead_hours=0.1,
    lost_hours=0.05,
    spot_productive_hours=8.0,
    spot_wall_hours=8.0,
    elapsed_hours=8.0,
)
# on on-demand with room to go back to Spot by the hysteresis rule
SLACK = Situation(hours_left=5.0 / spot_goodput(GOOD, 20.0) + 1.0, window_hours=20.0, mode=ON_DEMAND)


def with_failures(n, since):
    return Measured(**{**GOOD.__dict__, "failed_switch_backs": n, "since_switch_hours": since})


def test_one_failed_switch_back_is_tried_again_at_once_a_second_waits_a_back_off_that_doubles():
    assert decide(with_failures(1, 0.0), SLACK).mode == SPOT
    assert backoff_hours(with_failures(2, 0.0)) == deadline.BACKOFF_HOURS
    assert backoff_hours(with_failures(3, 0.0)) == 2 * deadline.BACKOFF_HOURS
    assert backoff_hours(with_failures(40, 0.0)) == deadline.MAX_BACKOFF_HOURS
    waiting = decide(with_failures(2, deadline.BACKOFF_HOURS - 0.01), SLACK)
    assert waiting.mode == ON_DEMAND and "found no capacity; next try in 0.01 h" in waiting.reason
    assert decide(with_failures(2, deadline.BACKOFF_HOURS), SLACK).mode == SPOT


def test_the_back_off_never_overrides_the_safety_net_or_a_training_spot_vm():
    tight = Situation(hours_left=5.0 + 0.1, window_hours=20.0, mode=SPOT, running=False)
    assert decide(with_failures(5, 0.0), tight).mode == ON_DEMAND  # the net, as without failures
    running = Situation(hours_left=15.0, window_hours=20.0, mode=SPOT, running=True)
    assert decide(with_failures(5, 0.0), running).mode == SPOT


UTC = dt.timezone.utc


def t(hours):
    return (dt.datetime(2026, 11, 1, tzinfo=UTC) + dt.timedelta(hours=hours)).isoformat()


def test_failed_switch_backs_count_spot_stints_without_a_trained_step_in_a_row_from_the_records():
    trained = Attempt(
        1, "vm-a", t(0), restored_step=None, ended=t(1), outcome="preempted", end_step=100, reached_step=100
    )
    on_demand = Attempt(
        2, "vm-b", t(1.5), restored_step=100, ended=t(2.0), outcome="stopped", end_step=150, reached_step=150
    )
    switches = [
        Switch(t(1.2), "on-demand", "spot"),
        Switch(t(2.0), "spot", "on-demand"),
        Switch(t(2.3), "on-demand", "spot"),
        Switch(t(2.6), "spot", "on-demand"),
        Switch(t(2.9), "on-demand", "spot"),
    ]
    assert failed_switch_backs([trained, on_demand], switches) == 2  # both tries at Spot: nothing trained
    spot_trained = Attempt(
        3, "vm-c", t(2.05), restored_step=150, ended=t(2.2), outcome="preempted", end_step=160, reached_step=160
    )
    assert failed_switch_backs([trained, on_demand, spot_trained], switches) == 1  # the first try trained
    measured = measure([trained, on_demand], switches, 1000, now=dt.datetime.fromisoformat(t(3.0)))
    assert measured.failed_switch_backs == 2 and measured.since_switch_hours == pytest.approx(0.1)
    assert measure([trained], [], 1000, now=dt.datetime.fromisoformat(t(3.0))).since_switch_hours is None
