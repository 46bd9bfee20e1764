"""The deadline policy (survivor/policy/deadline.py) at its boundaries, and what it reads from the job dir."""

import datetime as dt
from dataclasses import replace

import pytest

from survivor.policy.deadline import (
    ON_DEMAND,
    SPOT,
    Measured,
    Situation,
    decide,
    hysteresis_hours,
    margin_hours,
    measure,
    mode_at,
    price_ratio,
    spot_goodput,
    spot_hours,
)
from survivor.jobdir.journal import Attempt
from survivor.jobdir.switches import Switch

RATE = 100.0  # steps per hour
M = Measured(steps_done=0, train_steps=1000, step_rate=RATE, overhead_hours=0.1, lost_hours=0.05)
S = Situation(hours_left=20.0, window_hours=20.0, mode=SPOT, running=False, check_every_hours=0.25)
MARGIN = margin_hours(M, S)  # 0.5 h


def at(hours_left, **changes):
    return Situation(**{**S.__dict__, "hours_left": hours_left, **changes})


def test_the_margin_is_two_restarts_one_lost_interval_and_one_check_period():
    assert MARGIN == pytest.approx(2 * 0.1 + 0.05 + 0.25)


def test_exactly_enough_slack_stays_on_spot_and_a_hair_less_goes_on_demand():
    work = 10.0  # 1000 steps at 100/h
    exact = decide(M, at(work + MARGIN, running=True))
    assert (exact.mode, exact.switch, exact.slack_hours) == (SPOT, False, 0.0)
    short = decide(M, at(work + MARGIN - 0.01, running=True))
    assert (short.mode, short.switch) == (ON_DEMAND, True) and short.reason.startswith("safety net")


def test_zero_slack_on_demand_stays_on_demand_even_with_switch_back():
    d = decide(M, at(10.0 + MARGIN, mode=ON_DEMAND, running=True))
    assert (d.mode, d.switch) == (ON_DEMAND, False)


def test_a_passed_deadline_goes_on_demand_and_says_it_was_missed():
    d = decide(M, at(-1.5))
    assert d.mode == ON_DEMAND and "passed 1.50 h ago" in d.reason
    assert decide(M, at(0.0, mode=ON_DEMAND)).switch is False


def test_no_measurement_yet_stays_until_the_group_has_had_no_vm_training_for_longer_than_one_restart():
    unmeasured = Measured(steps_done=0, train_steps=1000, step_rate=None, overhead_hours=0.1, elapsed_hours=0.09)
    assert decide(unmeasured, S).mode == SPOT and "no step rate" in decide(unmeasured, S).reason
    waited = Measured(**{**unmeasured.__dict__, "elapsed_hours": 0.1})  # a booting VM would train by now
    assert decide(waited, S).mode == ON_DEMAND and "more than one 0.10 h restart" in decide(waited, S).reason
    assert decide(waited, at(20.0, running=True)).mode == SPOT  # a VM is training: it measures the rate


def test_a_training_spot_vm_keeps_training_while_there_is_slack():
    d = decide(M, at(10.6, running=True))
    assert d.mode == SPOT and not d.switch


def test_an_idle_spot_group_goes_on_demand_when_behind_the_goodput_line():
    bad = Measured(
        **{
            **M.__dict__,
            "steps_done": 500,
            "spot_productive_hours": 5.0,
            "spot_wall_hours": 20.0,
            "elapsed_hours": 20.0,
        }
    )
    goodput = spot_goodput(bad, 40.0)
    assert goodput == pytest.approx(max((5 + 0.25 * 2) / 22, 10 / 40))
    line = 5.0 / goodput
    assert decide(bad, at(line + 0.01, window_hours=40.0)).mode == SPOT
    behind = decide(bad, at(line - 0.01, window_hours=40.0))
    assert behind.mode == ON_DEMAND and behind.reason.startswith("behind")


def test_on_demand_goes_back_to_spot_only_with_the_hysteresis_and_when_allowed():
    good = Measured(
        **{**M.__dict__, "steps_done": 500, "spot_productive_hours": 8.0, "spot_wall_hours": 8.0, "elapsed_hours": 8.0}
    )
    hysteresis = 2 * 0.1 + 0.05 + 0.25  # two restarts, one lost interval, one check period
    line = 5.0 / spot_goodput(good, 20.0)
    assert decide(good, at(line + hysteresis, mode=ON_DEMAND)).mode == SPOT
    assert decide(good, at(line + hysteresis - 0.01, mode=ON_DEMAND)).mode == ON_DEMAND
    assert decide(good, at(line + 5, mode=ON_DEMAND, switch_back=False)).mode == ON_DEMAND


def test_a_finished_job_never_switches():
    done = Measured(**{**M.__dict__, "steps_done": 1000})
    assert decide(done, at(-5.0)).switch is False


UTC = dt.timezone.utc


def t(hours):
    return (dt.datetime(2026, 11, 1, tzinfo=UTC) + dt.timedelta(hours=hours)).isoformat()


def test_measure_reads_rate_spot_time_overhead_and_lost_work_from_the_records():
    attempts = [
        Attempt(
            1,
            "vm-a",
            t(0),
            restored_step=None,
            ended=t(2.1),
            outcome="preempted",
            end_step=200,
            reached_step=210,
            steps_lost=10,
            timings={"restore": 180.0, "setup": 180.0},
        ),
        Attempt(
            2,
            "vm-b",
            t(3),
            restored_step=200,
            ended=t(4.1),
            outcome="preempted",
            end_step=300,
            reached_step=300,
            steps_lost=0,
            timings={"restore": 180.0, "setup": 180.0},
        ),
    ]
    switches = [Switch(t(2.5), "on-demand", "spot", "behind", "watch")]
    measured = measure(attempts, switches, 1000, now=dt.datetime.fromisoformat(t(5)))
    assert measured.steps_done == 300
    assert measured.step_rate == pytest.approx((210 + 100) / (2.0 + 1.0))
    assert measured.spot_productive_hours == pytest.approx(200 / measured.step_rate)  # attempt 2 ran on-demand
    assert measured.spot_wall_hours == pytest.approx(2.5)
    assert measured.overhead_hours == pytest.approx(0.05 + 0.1)
    assert measured.lost_hours == pytest.approx(10 / measured.step_rate)
    assert measured.elapsed_hours == pytest.approx(5.0)
    assert mode_at(switches, dt.datetime.fromisoformat(t(3))) == ON_DEMAND
    assert spot_hours([], dt.datetime.fromisoformat(t(0)), dt.datetime.fromisoformat(t(1))) == pytest.approx(1.0)


def test_measure_prices_what_was_spent_from_the_ledgers_vm_time_per_mode():
    attempts = [
        Attempt(
            1,
            "vm-a",
            t(0),
            restored_step=None,
            ended=t(2.0),
            outcome="preempted",
            end_step=200,
            reached_step=200,
            timings={},
        ),
        Attempt(
            2,
            "vm-b",
            t(3),
            restored_step=200,
            ended=t(4.0),
            outcome="preempted",
            end_step=300,
            reached_step=300,
            timings={},
        ),
    ]
    switches = [Switch(t(2.5), "on-demand", "spot", "behind", "watch")]
    now = dt.datetime.fromisoformat(t(5))
    # 2 h of Spot at 0.3 of the on-demand price, 1 h on-demand; the waits between cost nothing
    assert measure(attempts, switches, 1000, now=now, spot_price_ratio=0.3).spent_hours == pytest.approx(1.6)
    unpriced = measure(attempts, switches, 1000, now=now)
    assert unpriced.spent_hours is None and decide(unpriced, at(20.0)).mode == SPOT


# rule 7, the cost cap: the excess is what was spent beyond the committed work, in on-demand hours
CAPPED = Measured(**{**M.__dict__, "steps_done": 500, "spot_price_ratio": 0.3, "lost_hours": 0.05})


def spent(excess):
    return Measured(**{**CAPPED.__dict__, "spent_hours": 5.0 + excess})


def test_spot_training_stays_while_a_preemption_keeps_the_excess_within_two_restarts():
    # running on Spot, a preemption adds the lost work (0.05): at most two restarts (0.2) in all
    # (the allowance was one restart until a job that went on-demand at its start could never try
    # Spot again with it: the guarantee is now on-demand from the start plus two restarts)
    assert decide(spent(0.15), at(20.0, running=True)).mode == SPOT
    capped = decide(spent(0.151), at(20.0, running=True))
    assert capped.mode == ON_DEMAND and capped.reason.startswith("cost cap")


def test_waiting_for_spot_counts_the_next_spot_boot_too():
    # idle on Spot, the next Spot VM's boot (0.3 x 0.1) and a preemption's loss may come before a look
    assert decide(spent(0.12), at(20.0)).mode == SPOT
    assert decide(spent(0.121), at(20.0)).mode == ON_DEMAND


def test_a_switch_back_to_spot_that_could_break_the_cap_is_not_made_however_much_slack():
    # on-demand from the start has spent one restart beyond its work: one try of Spot fits (its
    # boot, 0.03, a preemption's loss, 0.05, and the restart back); after a failed try it does not
    tried = decide(spent(0.1), at(20.0, mode=ON_DEMAND, running=True))
    assert tried.mode == SPOT and tried.switch
    assert decide(spent(0.2), at(20.0, mode=ON_DEMAND, running=True)).mode == ON_DEMAND
    assert decide(spent(0.1), at(20.0, mode=ON_DEMAND, running=True, cost_cap_restarts=1.0)).mode == ON_DEMAND
    saved = decide(spent(-2.0), at(20.0, mode=ON_DEMAND, running=True))  # Spot saved 2 h: a try fits
    assert saved.mode == SPOT and saved.switch


def test_with_capacity_data_on_demand_goes_back_to_spot_only_where_compute_says_it_can_be_had():
    ahead = at(20.0, mode=ON_DEMAND, running=True)
    assert decide(spent(-2.0), replace(ahead, spot_obtainability=0.4)).mode == SPOT  # Google's "medium"
    nothing = decide(spent(-2.0), replace(ahead, spot_obtainability=0.39))
    assert nothing.mode == ON_DEMAND and "obtainability of 0.39" in nothing.reason
    assert decide(spent(-2.0), replace(ahead, spot_obtainability=None)).mode == SPOT  # no data: as before
    # the data never keeps a training Spot VM from training, nor an idle Spot group from waiting
    assert decide(spent(0.0), at(20.0, running=True, spot_obtainability=0.0)).mode == SPOT
    assert decide(spent(0.0), at(20.0, spot_obtainability=0.0)).mode == SPOT


def test_the_safety_net_comes_before_the_cap():
    d = decide(spent(-2.0), at(5.0 + MARGIN - 0.01, running=True))  # 500 steps left: 5 h
    assert d.mode == ON_DEMAND and d.reason.startswith("safety net")


def test_price_ratio_is_the_spot_machine_over_the_on_demand_fallback_from_the_table():
    from survivor.spec import JobSpec

    base = {
        "job_dir": "gs://bucket-a/j",
        "train_steps": 10,
        "trainer": {"module": "m"},
        "deadline": "10h",
        "compute": {"machine_type": "n1-standard-8", "gpu": "nvidia-tesla-t4:1"},
    }
    assert price_ratio(JobSpec.from_mapping(base)) == pytest.approx((0.08 + 0.14) / (0.38 + 0.35))
    bigger = JobSpec.from_mapping({**base, "fallback": {"machine_type": "n1-standard-16"}})
    assert price_ratio(bigger) == pytest.approx((0.08 + 0.14) / (0.76 + 0.35))
    unknown = JobSpec.from_mapping({**base, "compute": {"machine_type": "n2-standard-8", "gpu": "none"}})
    assert price_ratio(unknown) is None


def test_a_switch_back_that_finds_no_spot_is_not_already_behind_at_the_next_look():
    """The hysteresis covers one check period: idle on Spot for one look after going back, the job is
    still on the line's right side, so a stockout does not flap the group every period."""
    good = Measured(
        **{**M.__dict__, "steps_done": 500, "spot_productive_hours": 8.0, "spot_wall_hours": 8.0, "elapsed_hours": 8.0}
    )
    line = 5.0 / spot_goodput(good, 20.0)
    back = line + hysteresis_hours(good, S)
    assert decide(good, at(back, mode=ON_DEMAND)).mode == SPOT
    assert decide(good, at(back - S.check_every_hours, mode=SPOT)).mode == SPOT  # still idle at the next look
    minute = at(back, mode=ON_DEMAND, check_every_hours=1 / 60)  # a watch every minute notices sooner
    assert hysteresis_hours(good, minute) == pytest.approx(2 * 0.1 + 0.05 + 1 / 60)


# -- capacity data: the expected preemptions where the job is size the slack Spot needs ------


def test_a_place_that_preempts_often_needs_more_slack_on_spot_and_leaves_it_sooner():
    from survivor.policy.deadline import Measured, Situation, decide

    measured = Measured(
        steps_done=0,
        train_steps=600,
        step_rate=100.0,
        overhead_hours=0.1,
        spent_hours=0.0,
        spot_price_ratio=0.3,
        elapsed_hours=0.5,
        spot_wall_hours=0.5,
        spot_productive_hours=0.5,
    )
    calm = Situation(hours_left=9.0, window_hours=9.5, mode="spot", running=False, spot_hazard_per_hour=0.05)
    stormy = Situation(hours_left=9.0, window_hours=9.5, mode="spot", running=False, spot_hazard_per_hour=4.0)
    assert decide(measured, calm).mode == "spot"
    assert decide(measured, stormy).mode == "on-demand"  # 2.4 h of restarts on top of 7.5 h on Spot: behind


def test_spot_whose_restarts_cost_more_than_on_demand_is_left():
    from survivor.policy.deadline import Measured, Situation, decide, spot_dearer

    measured = Measured(
        steps_done=0, train_steps=100, step_rate=100.0, overhead_hours=0.1, spent_hours=0.0, spot_price_ratio=0.5
    )
    hostile = Situation(hours_left=50.0, window_hours=50.0, mode="on-demand", running=True, spot_hazard_per_hour=12.0)
    assert spot_dearer(measured, hostile) and decide(measured, hostile).mode == "on-demand"
    assert not spot_dearer(measured, Situation(hours_left=50.0, window_hours=50.0))  # no data: never
