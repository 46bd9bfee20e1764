"""Rule 8 of the deadline policy: flex-start in place of on-demand, when allowed, supported, cheaper
and in time (survivor/policy/deadline.py, docs/flex-start.md)."""

import datetime as dt

import pytest

from survivor.policy.deadline import (
    FLEX_START,
    ON_DEMAND,
    SPOT,
    FlexStart,
    Measured,
    Situation,
    decide,
    flex_start,
    margin_hours,
    measure,
    spot_goodput,
)
from survivor.jobdir.journal import Attempt
from survivor.jobdir.switches import Switch
from survivor.spec import JobSpec

# 500 of 1000 steps done at 100 steps/h: 5 h of work; a 0.5 h margin; Spot idle (a stockout) and behind
# its goodput line below 20 h left.
BEHIND = Measured(
    steps_done=500,
    train_steps=1000,
    step_rate=100.0,
    overhead_hours=0.1,
    lost_hours=0.05,
    spot_productive_hours=5.0,
    spot_wall_hours=20.0,
    elapsed_hours=20.0,
)
GOOD = FlexStart(allowed=True, unsupported="", wait_hours=2.0, price_ratio=0.55)
WORK, MARGIN = 5.0, 0.5


def idle_on_spot(left, flex, mode=SPOT, running=False):
    return Situation(
        hours_left=left, window_hours=40.0, mode=mode, running=running, check_every_hours=0.25, flex_start=flex
    )


def test_the_setting_is_behind_the_spot_line_with_slack_for_on_demand():
    assert margin_hours(BEHIND, idle_on_spot(10.0, None)) == pytest.approx(MARGIN)
    assert WORK / spot_goodput(BEHIND, 40.0) == pytest.approx(20.0)


@pytest.mark.parametrize(
    "case, flex, left, expected, why",
    [
        ("no flex_start in the spec", None, 10.0, ON_DEMAND, "behind"),
        ("the spec says flex_start: false", FlexStart(allowed=False, price_ratio=0.55), 10.0, ON_DEMAND, "behind"),
        (
            "the machine cannot run flex-start",
            FlexStart(allowed=True, unsupported="machine_type n1-standard-8: no", price_ratio=0.55),
            10.0,
            ON_DEMAND,
            "n1-standard-8",
        ),
        ("flex-start's price is unknown", FlexStart(allowed=True, price_ratio=None), 10.0, ON_DEMAND, "not known"),
        ("flex-start is no cheaper", FlexStart(allowed=True, price_ratio=1.0), 10.0, ON_DEMAND, "not known"),
        ("the deadline is too near for the queue", GOOD, WORK + MARGIN + 2.0 - 0.01, ON_DEMAND, "queue"),
        ("the queue just fits", GOOD, WORK + MARGIN + 2.0, FLEX_START, "fits with a 2.00 h queue"),
        ("otherwise", GOOD, 10.0, FLEX_START, "flex-start at 55% of the on-demand price"),
        (
            "no queue assumed",
            FlexStart(allowed=True, wait_hours=0.0, price_ratio=0.55),
            WORK + MARGIN,
            FLEX_START,
            "fits",
        ),
    ],
)
def test_leaving_spot_picks_flex_start_only_when_allowed_supported_cheaper_and_in_time(case, flex, left, expected, why):
    decision = decide(BEHIND, idle_on_spot(left, flex))
    assert (decision.mode, decision.switch) == (expected, True), case
    assert decision.reason.startswith("behind") and why in decision.reason, decision.reason


def test_work_longer_than_one_seven_day_run_is_never_flex_start():
    long = Measured(**{**BEHIND.__dict__, "steps_done": 0, "train_steps": 20000})  # 200 h of work
    line = 200.0 / spot_goodput(long, 1000.0)
    where = Situation(hours_left=line - 0.01, window_hours=1000.0, mode=SPOT, flex_start=GOOD)
    assert where.hours_left > 200 + MARGIN + 2.0  # the queue fits: only the run's length rules it out
    decision = decide(long, where)
    assert decision.mode == ON_DEMAND and "168 h run" in decision.reason


def test_the_safety_net_and_a_passed_deadline_go_on_demand_without_queueing():
    assert decide(BEHIND, idle_on_spot(WORK + MARGIN - 0.01, GOOD)).mode == ON_DEMAND
    assert decide(BEHIND, idle_on_spot(-1.0, GOOD)).mode == ON_DEMAND


@pytest.mark.parametrize("left", [WORK, -1.0, 30.0])  # no slack, the deadline passed, slack for Spot
def test_a_flex_start_vm_that_trains_keeps_training_whatever_the_slack(left):
    decision = decide(BEHIND, idle_on_spot(left, GOOD, mode=FLEX_START, running=True))
    assert (decision.mode, decision.switch) == (FLEX_START, False)
    assert decision.reason.startswith("flex-start is training")


def test_a_queued_flex_start_request_goes_on_demand_once_it_outwaits_the_assumption():
    queued = Measured(**{**BEHIND.__dict__, "since_switch_hours": 1.9})
    assert decide(queued, idle_on_spot(10.0, GOOD, mode=FLEX_START)).mode == FLEX_START
    late = Measured(**{**BEHIND.__dict__, "since_switch_hours": 2.0})
    decision = decide(late, idle_on_spot(10.0, GOOD, mode=FLEX_START))
    assert decision.mode == ON_DEMAND and "waited 2.00 h" in decision.reason


def test_flex_start_goes_back_to_spot_like_on_demand_once_there_is_slack():
    back = decide(BEHIND, idle_on_spot(30.0, GOOD, mode=FLEX_START))
    assert back.mode == SPOT and back.reason.startswith("slack again")


SPEC = {"job_dir": "gs://bucket-a/j", "train_steps": 10, "trainer": {"module": "m"}, "deadline": "10h"}


@pytest.mark.parametrize(
    "compute, fallback, expected",
    [
        (
            {"machine_type": "a2-highgpu-1g", "gpu": "none"},
            {"flex_start": True},
            FlexStart(allowed=True, unsupported="", wait_hours=2.0, price_ratio=pytest.approx(2.02 / 3.67)),
        ),
        ({"machine_type": "a2-highgpu-1g", "gpu": "none"}, {}, None),
        (
            {"machine_type": "g2-standard-8", "gpu": "none"},
            {"flex_start": True, "flex_start_wait_hours": 1},
            FlexStart(allowed=True, unsupported="", wait_hours=1.0, price_ratio=None),
        ),  # not in the offline table
    ],
)
def test_flex_start_reads_the_spec_the_machine_rule_and_the_offline_prices(compute, fallback, expected):
    spec = JobSpec.from_mapping({**SPEC, "compute": compute, "fallback": fallback})
    assert flex_start(spec) == expected


def test_an_n1_fallback_is_unsupported_with_the_machine_named():
    spec = JobSpec.from_mapping(
        {
            **SPEC,
            "compute": {"machine_type": "n1-standard-8", "gpu": "nvidia-tesla-t4:1"},
            "fallback": {"flex_start": True},
        }
    )
    found = flex_start(spec)
    assert found.allowed and "n1-standard-8" in found.unsupported


def test_measure_prices_flex_start_hours_at_their_own_ratio():
    t = lambda h: (dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc) + dt.timedelta(hours=h)).isoformat()  # noqa: E731
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
            2, "vm-b", t(3), restored_step=200, ended=t(4.0), outcome="done", end_step=300, reached_step=300, timings={}
        ),
    ]
    switches = [Switch(t(2.5), FLEX_START, SPOT, "behind", "watch")]
    now = dt.datetime.fromisoformat(t(5))
    # 2 h of Spot at 0.3, 1 h of flex-start at 0.55 of the on-demand price
    priced = measure(attempts, switches, 1000, now=now, spot_price_ratio=0.3, flex_start_price_ratio=0.55)
    assert priced.spent_hours == pytest.approx(0.6 + 0.55)
    unpriced_flex = measure(attempts, switches, 1000, now=now, spot_price_ratio=0.3)
    assert unpriced_flex.spent_hours == pytest.approx(0.6 + 1.0)  # at the on-demand price


def test_a_failed_request_goes_on_demand_at_once_and_says_why():
    from survivor.policy.deadline import flex_start_failure

    failed = Situation(**{**idle_on_spot(10.0, GOOD, mode=FLEX_START).__dict__, "flex_start_failed": "r1: X: y"})
    decision = decide(BEHIND, failed)
    assert decision.mode == ON_DEMAND and decision.reason == "the flex-start request failed (r1: X: y); on-demand"
    running = Situation(**{**failed.__dict__, "running": True})  # a VM that came anyway trains on
    assert decide(BEHIND, running).mode == FLEX_START
    assert flex_start_failure([]) is None
    older = {
        "name": "a",
        "creationTimestamp": "2026-11-25T01:00:00Z",
        "state": "FAILED",
        "status": {"error": {"errors": [{"code": "OLD", "message": "gone"}]}},
    }
    newer = {"name": "b", "creationTimestamp": "2026-11-25T02:00:00Z", "state": "ACCEPTED"}
    assert flex_start_failure([older, newer]) is None  # only the newest request counts
    assert flex_start_failure([older]) == "resize request a: OLD: gone"
    assert flex_start_failure([{"name": "c", "state": "FAILED"}]) == "resize request c: FAILED, no error given"


def test_a_queued_request_says_how_long_it_waited_and_what_its_last_attempt_met():
    from survivor.policy.deadline import flex_start_queue

    now = dt.datetime(2026, 11, 25, 3, 30, tzinfo=dt.timezone.utc)
    queued = {"name": "b", "creationTimestamp": "2026-11-25T02:00:00Z", "state": "ACCEPTED"}
    assert flex_start_queue([queued], now) == "resize request b: ACCEPTED, queued 1.50 h; no VM yet, nothing failed"
    retrying = {
        **queued,
        "status": {
            "lastAttempt": {
                "error": {
                    "errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "no a2"}, {"code": "QUOTA_EXCEEDED"}]
                }
            }
        },
    }
    assert flex_start_queue([retrying], now) == (
        "resize request b: ACCEPTED, queued 1.50 h; its last attempt: "
        "ZONE_RESOURCE_POOL_EXHAUSTED: no a2; QUOTA_EXCEEDED (Compute tries again)"
    )
    assert (
        flex_start_queue([{"name": "c", "state": "CREATING"}], now)
        == "resize request c: CREATING; no VM yet, nothing failed"
    )  # no creation time: no wait given
    for final in ("SUCCEEDED", "FAILED", "CANCELLED"):  # only an active request is queued
        assert flex_start_queue([{**retrying, "state": final}], now) is None
    older_active = {**retrying, "name": "a", "creationTimestamp": "2026-11-25T01:00:00Z"}
    assert flex_start_queue([older_active, {**queued, "state": "SUCCEEDED"}], now) is None  # the newest counts
    assert flex_start_queue([], now) is None


def test_a_flex_start_run_that_is_over_goes_on_demand_and_says_so():
    from survivor.policy.deadline import flex_start_run_end

    done = {"name": "r", "creationTimestamp": "2026-11-18T02:00:00Z", "state": "SUCCEEDED"}
    assert flex_start_run_end([done], members=0) == "resize request r succeeded and the group has no VM left"
    assert flex_start_run_end([done], members=1) is None  # its VM still there (or just made, booting)
    assert flex_start_run_end([{**done, "state": "ACCEPTED"}], members=0) is None  # queued: not over
    assert flex_start_run_end([], members=0) is None
    ended = Situation(**{**idle_on_spot(10.0, GOOD, mode=FLEX_START).__dict__, "flex_start_ended": "r: gone"})
    decision = decide(BEHIND, ended)
    assert decision.mode == ON_DEMAND and decision.reason == "the flex-start VM's run is over (r: gone); on-demand"
    assert decide(BEHIND, Situation(**{**ended.__dict__, "running": True})).mode == FLEX_START
