"""A move is a bet with a price (survivor/policy/move_bet.py): hand-made places whose answer is
known, among them a region that flaps every half hour and an outage of every region."""

import pytest

from survivor.cloud.capacity import Outlook, outlook_from, request_bodies
from survivor.policy.move_bet import Costs, training_share, weigh

STEADY = Outlook(1.0, 1.0)  # capacity now and all the last hour; uptime in the top band
FLAPPING_DOWN = Outlook(0.25, 1 / 60)  # out now, half the last hour out: the shortest uptime
FLAPPING_UP = Outlook(0.75, 600 / 3600)  # up now after a half-hour outage: ten minutes
OUT = Outlook(0.0, 1 / 60)


def test_a_job_in_a_flapping_region_moves_to_the_steady_one():
    bet = weigh("flapping", {"flapping": FLAPPING_DOWN, "steady": STEADY}, Costs(hours_left=10))
    assert bet.to == "steady" and bet.gain_hours > bet.cost_hours


def test_in_the_steady_region_the_job_stays_even_when_the_flapping_one_is_up():
    bet = weigh("steady", {"steady": STEADY, "flapping": FLAPPING_UP}, Costs(hours_left=10))
    assert bet.to is None and "does not pay" in bet.reason


def test_an_outage_of_every_region_moves_nothing():
    bet = weigh("a", {"a": OUT, "b": OUT, "c": Outlook(0.05, 1 / 60)}, Costs(hours_left=10))
    assert bet.to is None


def test_a_small_edge_does_not_pay_for_a_restart():
    bet = weigh("a", {"a": Outlook(0.9, 1.0), "b": Outlook(0.92, 1.0)}, Costs(hours_left=10))
    assert bet.to is None  # 2 h x 0.02 = 0.04 h gained, less than a restart and a restore cost


def test_with_little_training_left_a_place_that_finishes_it_about_as_soon_is_kept():
    assert weigh("a", {"a": Outlook(0.98, 1.0), "b": STEADY}, Costs(hours_left=10)).to is None
    assert weigh("a", {"a": Outlook(0.6, 1.0), "b": STEADY}, Costs(hours_left=10)).to == "b"
    assert weigh("a", {"a": Outlook(0.6, 1.0), "b": STEADY}, Costs(hours_left=0.05)).to is None


def test_with_little_training_left_a_place_out_of_capacity_is_still_left():
    # a few minutes of training left where nothing runs would wait as long as the outage: the
    # horizon is the job's time left here, not its work left
    assert weigh("a", {"a": OUT, "b": STEADY}, Costs(hours_left=0.05)).to == "b"
    assert weigh("a", {"a": FLAPPING_DOWN, "b": STEADY}, Costs(hours_left=0.05)).to == "b"


def test_the_chance_the_target_has_nothing_either_is_priced():
    unsure = weigh("a", {"a": OUT, "b": Outlook(0.3, 1 / 60)}, Costs(hours_left=10, look_hours=1.0))
    sure = weigh("a", {"a": OUT, "b": Outlook(0.3, 1 / 60)}, Costs(hours_left=10, look_hours=0.0))
    assert unsure.cost_hours > sure.cost_hours


def test_without_data_for_here_the_bet_is_not_made():
    assert weigh("a", {"b": STEADY}, Costs(hours_left=10)).reason.startswith("no capacity data")


def test_places_passed_over_are_not_bet_on():
    assert weigh("a", {"a": OUT, "b": STEADY}, Costs(hours_left=10), skip=frozenset({"b"})).to is None


def test_history_makes_a_place_that_keeps_preempting_worse():
    calm, stormy = Outlook(1.0, 1.0, preemption_rate=0.05), Outlook(1.0, 1.0, preemption_rate=0.9)
    assert training_share(calm, 0.05) > training_share(stormy, 0.05)
    assert stormy.hazard_per_hour() > calm.hazard_per_hour()


@pytest.mark.parametrize(
    "advice, history, expected",
    [
        (
            {"recommendations": [{"scores": {"obtainability": 0.8, "estimatedUptime": "600s"}}]},
            {"preemptionHistory": [{"preemptionRate": 0.2}, {"preemptionRate": 0.4}]},
            Outlook(0.8, 600 / 3600, 0.3),
        ),
        ({"recommendations": [{"scores": {"obtainability": 0.8}}]}, None, Outlook(0.8, 1 / 60, None)),
        ({"recommendations": []}, None, None),
        (None, None, None),
    ],
)
def test_an_outlook_is_read_from_the_two_answers(advice, history, expected):
    found = outlook_from(advice, history)
    assert found == expected or (found and expected and abs(found.preemption_rate - expected.preemption_rate) < 1e-9)


def test_an_n1_machine_with_a_gpu_asks_for_no_history():
    advice, history = request_bodies("n1-standard-8", "nvidia-tesla-v100", 1)
    assert history is None
    assert (
        advice["instanceFlexibilityPolicy"]["instanceSelections"]["job"]["guestAccelerators"][0]["acceleratorCount"]
        == 1
    )
    assert request_bodies("g2-standard-8", None, 0)[1]["instanceProperties"]["machineType"] == "g2-standard-8"
